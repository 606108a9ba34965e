"""Partial conditionals of a masked LM over a frame, tabulated exactly and cached (issue 24).

A decoder needs p_i(. | x_S) for S any subset of the other free positions: the model sees the [MASK]
token at every free position outside S and at i, and the score is the logit at position i, restricted
to the alphabet (the same code path as the Glauber table, :meth:`MaskedLMConditionals.masked_logits_torch`,
so the contexts without a mask reproduce that table bit for bit):

    s_i(v | x_S) = logit_v( encoder(x_S, [MASK] elsewhere) at position i ),   table shape (n, (|V|+1)^(n-1), |V|).

One masked pass per (site, partial context): n (|V|+1)^(n-1) passes (AntiBERTy's 20 residues: 42 at
n = 2, 1,323 at n = 3, 37,044 at n = 4). As for the Glauber table (:mod:`mlmix.empirical.tabulate`): the
cost is measured and printed first, a progress bar runs, chunks are checkpointed so an interrupted run
resumes, and the table is cached under the same folder, keyed by the weights, the frame, the alphabet,
the dtype and the kind "partial". The table does not depend on T.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from mlmix.empirical import tabulate as tab
from mlmix.files import OutputDir, atomic_save_npz, atomic_write_json, read_json
from mlmix.progress import Counter
from mlmix.progress import say as progress_line
from mlmix.theory.kernels.decoders import PartialScoreTable
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_int, check_memory, load_arrays


def partial_passes(space: StateSpace) -> int:
    """n (|V|+1)^(n-1): one masked pass per site and partial context of the others."""
    return space.length * (space.vocab_size + 1) ** (space.length - 1)


def partial_key(source) -> tuple[str, dict]:
    """The cache key of the partial table (the Glauber table's record plus ``kind: partial``)."""
    import hashlib

    _, record = tab.table_key(source)
    record = {**record, "kind": "partial"}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:32], record


class MLMPartialTable(PartialScoreTable):
    """The partial score table of a masked LM over a frame, with its alphabet's tokens and provenance."""

    def __init__(self, space: StateSpace, table: np.ndarray, temperature: float = 1.0, *,
                 tokens: Sequence[str], info: dict) -> None:
        super().__init__(space, table, temperature)
        self.tokens = list(tokens)
        self.info = dict(info)

    def describe(self) -> dict:
        return dict(self.info)


def tabulate_partial(source, *, cache_dir: str | Path | None = None, use_cache: bool = True,
                     max_passes: int | None = None, progress: bool = True,
                     log: Callable[[str], None] | None = None) -> MLMPartialTable:
    """The exact partial score table of a :class:`~mlmix.empirical.mlm.MaskedLMConditionals` (module doc):
    read from the cache when present, else computed in checkpointed chunks and cached."""
    say = log if log is not None else progress_line
    space = source.space
    n, q = space.length, space.vocab_size
    Q = q + 1
    total = partial_passes(space)
    key, record = partial_key(source)
    root = tab.cache_root(cache_dir)
    found = tab.read_cached(_read, root, key, record, source.temperature, "partial table", say) if use_cache else None
    if found is not None:
        return found
    if max_passes is not None and total > check_int(max_passes, "--max-passes", minimum=1):
        raise ValueError(f"the partial table needs {total:,} masked forward passes (n = {n} sites x {Q}^{n - 1} "
                         f"partial contexts), more than --max-passes {max_passes:,}")
    check_memory(4 * total * q * 3, "the partial score table (float32 chunks, the table and its float64 copy)")
    start = time.perf_counter()
    rate = tab.measure_rate(source)
    say(tab.cost_line(total, rate, source.device) + f" (n = {n} sites x {Q}^{n - 1} partial contexts)")
    folder = root / f"{key}.partial"
    chunk = tab._chunk_rows(folder if use_cache else None, record, rate)
    with Counter("tabulating partial contexts", total, unit="passes", enabled=progress) as bar:
        if use_cache:
            with OutputDir(folder, "tabulate-partial", {**record, "chunk_rows": chunk}) as out:
                scores = _compute(source, total, chunk, bar, out.path)
        else:
            scores = _compute(source, total, chunk, bar, None)
    seconds = time.perf_counter() - start
    info = {**source.describe(), "table": {"kind": "partial", "passes": total, "seconds": seconds,
                                           "passes_per_second": total / seconds, "from_cache": False, "key": key}}
    shaped = scores.reshape(n, Q ** (n - 1), q)
    table = MLMPartialTable(space, shaped, source.temperature, tokens=tab._tokens(source), info=info)
    if use_cache:
        atomic_save_npz(root / f"{key}.npz", table=shaped)
        atomic_write_json(root / f"{key}.json", {"key": record, "info": info, "tokens": table.tokens,
                                                 "sha256": tab.content_hash(shaped)})
        shutil.rmtree(folder, ignore_errors=True)
        say(f"partial table cached as {root / (key + '.npz')}")
    return table


def _compute(source, total: int, chunk: int, bar: Counter, folder: Path | None) -> np.ndarray:
    """Scores of every row r = i (|V|+1)^(n-1) + c (site i, partial context c of the others), float32;
    chunks checkpointed and checked as the Glauber table's (:func:`mlmix.empirical.tabulate.compute_chunks`)."""
    n, q = source.space.length, source.space.vocab_size
    Q = q + 1
    contexts = Q ** (n - 1)
    place = torch.as_tensor(Q ** np.arange(n - 2, -1, -1, dtype=np.int64), device=source.device)
    columns = torch.arange(max(n - 1, 0), device=source.device)

    def score_rows(rows: torch.Tensor) -> np.ndarray:
        count = rows.numel()
        site, index = rows // contexts, rows % contexts
        digits = (index[:, None] // place) % Q  # partial x_{-i}, remaining sites in order; Q - 1 = masked
        symbols = torch.full((count, n), q, dtype=torch.long, device=source.device)
        symbols.scatter_(1, columns[None, :] + (columns[None, :] >= site[:, None]).long(), digits)
        masked = symbols == q
        masked[torch.arange(count, device=source.device), site] = True
        ids = source.token_ids(torch.where(masked, 0, symbols), validate=False)
        slots = source.slots[None, :].expand(count, -1)
        ids[masked.nonzero(as_tuple=True)[0], slots[masked]] = source.mask_id
        return source.masked_logits_torch(ids, source.slots[site]).cpu().numpy()

    return tab.compute_chunks(source, total, chunk, bar, folder, score_rows)


def _read(root: Path, key: str, record: dict, temperature: float) -> MLMPartialTable | None:
    """The cached partial table, None when there is none, or a one-line ValueError when the entry is
    damaged or does not match the content hash in its record (as for the Glauber table)."""
    meta, data = root / f"{key}.json", root / f"{key}.npz"
    if not (meta.is_file() and data.is_file()):
        return None
    saved = read_json(meta, "cached partial table record")
    if saved.get("key") != json.loads(json.dumps(record)):
        return None
    n, q = len([t for t in record["template"] if t == -1]), len(record["alphabet"])
    try:
        info, tokens, digest = saved["info"], saved["tokens"], saved["sha256"]
        info["table"] = {**info["table"], "from_cache": True, "cache": str(data)}
        table = load_arrays(data, "cached partial table")["table"]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"the cached partial table {data} is damaged ({type(err).__name__}: {err})") from None
    if table.shape != (n, (q + 1) ** (n - 1), q) or tab.content_hash(table) != digest:
        raise ValueError(f"the cached partial table {data} does not match the content hash in its record "
                         "(edited or corrupt)")
    return MLMPartialTable(StateSpace(q, n), table, temperature, tokens=tokens, info=info)
