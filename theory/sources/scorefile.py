"""Score tables in and out: the documented ``.npz`` format ``mlmix-scores-1`` (docs/samplers.md).

Arrays: ``mlmix_format`` ("mlmix-scores-1"), ``kind`` ("full" or "partial"), ``vocab_size`` |V|,
``length`` n, ``table`` float64 and optional ``temperature`` (default 1), ``tokens`` (|V| strings) and
``score_dtype`` (the arithmetic the scores were computed in: "float32", "bfloat16", "float16", "float64",
or "exact", the default; the table read back carries its stated accuracy,
:mod:`mlmix.theory.sources.score_accuracy`).

* full: ``table[i, c, v] = s_i(v | x_{-i})``, shape (n, |V|^(n-1), |V|), c the number whose base-|V|
  digits are the other sites' symbols in site order (first most significant); finite.
* partial: ``table[i, c, v] = s_i(v | x_S)``, shape (n, (|V|+1)^(n-1), |V|), c in base |V|+1 with digit
  |V| for a masked site; finite or -inf (zero conditional), a finite entry in every row.

Scores are at T = 1: the conditionals are softmax(s / T). Any source can be written
(:func:`save_scores`: a score table, a joint law's conditionals, an MLM frame); :func:`load_scores`
reads a file back as a :class:`~mlmix.theory.sources.conditionals.ScoreTable` or a
:class:`~mlmix.theory.kernels.decoders.PartialScoreTable`. Checks: :func:`mlmix.validation.check_score_arrays`.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from mlmix.files import atomic_save_npz
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.score_accuracy import EXACT, ScoreAccuracy, max_abs_score
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import (
    SCORES_FORMAT,
    array_nbytes,
    check_memory,
    check_score_arrays,
    check_score_metadata,
    npz_headers,
)

#: What reading a member of a damaged .npz can raise once its header was read (truncated or corrupt data).
_FILE_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def save_scores(path: str | Path, source: Conditionals, tokens: list[str] | None = None) -> str:
    """Write the score table of ``source`` atomically: partial for a :class:`PartialScoreTable`, else full
    (tabulated by querying every context), with the arithmetic of its scores (``score_dtype``). Returns the
    kind written."""
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"a score table is written as .npz, got {path.name}")
    if source.partial_conditionals:
        kind, tabulated = "partial", source
    else:
        kind, tabulated = "full", source.score_table()
    table = tabulated.table
    extra = {} if tokens is None else {"tokens": np.array(tokens, dtype=str)}
    extra["score_dtype"] = np.array(getattr(tabulated, "score_accuracy", EXACT).dtype)
    atomic_save_npz(path, mlmix_format=np.array(SCORES_FORMAT), kind=np.array(kind),
                    vocab_size=np.array(source.space.vocab_size), length=np.array(source.space.length),
                    table=np.asarray(table, dtype=np.float64), temperature=np.array(float(source.temperature)),
                    **extra)
    return kind


def load_scores(path: str | Path, temperature: float | None = None) -> ScoreTable | PartialScoreTable:
    """Read a score file; ``temperature`` overrides the file's. The metadata and the table's shape are
    checked from the file's headers (:func:`mlmix.validation.check_score_metadata`) and the table's memory
    against the limit in force before its data is read, so a small file claiming n = 10^12 or a
    decompression bomb is refused at once. One-line ValueError (TypeError for a wrong kind of field)."""
    where = str(path)
    heads = npz_headers(path, "score file")
    shape, dtype = heads.get("table", ((), np.dtype(np.float64)))
    small = {key: head for key, head in heads.items() if key != "table"}
    check_memory(sum(array_nbytes(s, d.itemsize) for s, d in small.values()), f"{where}: the metadata arrays")
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = {key: z[key] for key in small}
    except _FILE_ERRORS as err:
        raise ValueError(f"{path} is not a readable .npz score file ({type(err).__name__}: {err})") from None
    check_score_metadata({**meta, **({"table_shape": shape, "table_dtype": dtype} if "table" in heads else {})}, where)
    check_memory(array_nbytes(shape, dtype.itemsize + 8.0), f"{where}: the score table")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {**meta, "table": z["table"]}
    except _FILE_ERRORS as err:
        raise ValueError(f"{path} is not a readable .npz score file ({type(err).__name__}: {err})") from None
    a = check_score_arrays(arrays, where)
    space = StateSpace(a["vocab_size"], a["length"])
    T = a["temperature"] if temperature is None else temperature
    accuracy = ScoreAccuracy.of(a["score_dtype"], max_abs_score(a["table"]))
    cls = PartialScoreTable if a["kind"] == "partial" else ScoreTable
    src = cls(space, a["table"], T, score_accuracy=accuracy)
    src.tokens = a["tokens"]
    return src
