"""Exact tabulation of a masked LM's conditionals over a frame, cached on disk (paper G §3.1).

The Glauber chain of an MLM on alphabet^n is fixed by its n |V|^(n-1) conditionals
pi_i^T(. | x_{-i}), and one masked forward pass gives a whole conditional (the logits at the
masked position, restricted to the alphabet). So the score table

    s_i(v | x_{-i}),   i < n,  x_{-i} in V^(n-1),  v in V          (shape (n, |V|^(n-1), |V|))

costs n |V|^(n-1) passes: 32,000 for AntiBERTy's 20 amino acids at n = 4 (160,000 states). It is
computed once, in batches on the source's device, with the cost printed before the work starts
(measured on a first small batch), a progress bar with ETA (in a log a line per tenth done:
:class:`mlmix.progress.Counter`), chunks of about :data:`CHUNK_SECONDS`
of work checkpointed so an interrupted run resumes (with the chunking it started with), and the result written atomically to a cache keyed by
the model's weights (a hash of every tensor), the full input template (specials, frame and free
positions), the alphabet and the compute dtype; its record carries a SHA-256 of the table's bytes,
checked on every read (a truncated, corrupt or edited table is recomputed, never used). The table does not depend on T (T only rescales
the logits), so any temperature reuses it. The cache folder is ``tables/`` in mlmix's user cache
(:mod:`mlmix.cache`: ``$MLMIX_CACHE``, default ``~/.cache/mlmix`` on Linux).

The result, :class:`MLMTable`, is a :class:`~mlmix.theory.sources.conditionals.ScoreTable`: every exact
quantity (kernels, the chain, influence, rectangles, margins) works on it without the model.
All of the above is one routine, :meth:`TableKind.tabulate`, of which the exact table (:data:`EXACT`) and
the partial table of :mod:`mlmix.empirical.models.partial_tables` are two kinds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlmix.cache import cache_dir
from mlmix.empirical.models.families import cache_identity
from mlmix.files import MANIFEST, OutputDir, atomic_save_npz, atomic_write_json, read_json
from mlmix.progress import Counter
from mlmix.progress import say as progress_line
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.theory.sources.score_accuracy import ScoreAccuracy, max_abs_score
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_int, check_memory, load_arrays

#: Seconds of work per checkpointed chunk of a tabulation (at the measured rate; at least
#: :data:`MIN_CHUNK_ROWS` passes, a power of two). A resumed run keeps the chunking it started with,
#: whatever its batch size or device.
CHUNK_SECONDS = 30.0
MIN_CHUNK_ROWS = 4096

#: Version of the cache layout; part of every key (2: the record carries the table's content hash).
FORMAT = 2


def cache_root(path: str | os.PathLike | None = None) -> Path:
    """The folder of cached tables: ``path``, else ``tables/`` in the user cache of
    :func:`mlmix.cache.cache_dir` (``$MLMIX_CACHE``, else e.g. ``~/.cache/mlmix`` on Linux)."""
    if path is not None:
        return Path(path).expanduser()
    return cache_dir("tables")


def weights_hash(model: torch.nn.Module) -> str:
    """SHA-256 of every tensor of the model's state dict (names, dtypes, shapes, bytes): the same for
    a checkpoint and its ``mlmix convert`` copy, different after any change of a weight."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def table_key(source) -> tuple[str, dict]:
    """The cache key of a source's exact table and the JSON record it hashes."""
    return EXACT.key(source)


def cached_weights_hash(source) -> str:
    """The identity of a model source's weights in its cache keys (its family's ``cache_identity``,
    :func:`~mlmix.empirical.models.families.cache_identity`), computed once a source."""
    if getattr(source, "_weights_hash", None) is None:
        source._weights_hash = cache_identity(source)
    return source._weights_hash


def passes_needed(space: StateSpace) -> int:
    """n |V|^(n-1): the masked forward passes of a full table."""
    return EXACT.passes(space)


def measure_rate(source, rows: int = 32, seed: int = 0) -> float:
    """Score queries (masked forward passes for an MLM) per second on ``rows`` random contexts,
    timed on a second call (the first, of the same shapes, warms the allocator and kernels up);
    the batch size of the source is used as is. Makes 2 ``rows`` queries."""
    rng = np.random.default_rng(seed)
    n, q = source.space.length, source.space.vocab_size
    sym = torch.as_tensor(rng.integers(0, q, (rows, n)), device=source.device)
    sites = torch.as_tensor(rng.integers(0, n, rows), device=source.device)
    source.scores_torch(sym, sites, validate=False)
    _sync(source.device)
    start = time.perf_counter()
    source.scores_torch(sym, sites, validate=False)
    _sync(source.device)
    return rows / max(time.perf_counter() - start, 1e-9)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def format_duration(seconds: float) -> str:
    """'under 1 s', '40 s', '6.1 min', '3.8 h'."""
    if seconds < 1:
        return "under 1 s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def cost_line(passes: int, rate: float, device: torch.device, what: str = "masked forward passes") -> str:
    """'32,000 masked forward passes, about 6.1 min at the measured 87 passes/s on cpu'."""
    seconds = passes / rate
    duration = format_duration(seconds) if seconds < 1 else f"about {format_duration(seconds)}"
    return f"{passes:,} {what}, {duration} at the measured {rate:,.0f} passes/s on {device}"


class Tabulated:
    """The alphabet's tokens (:meth:`decode`), the provenance (:meth:`describe`) and the score accuracy
    (``score_accuracy``: that of the model's compute dtype, :mod:`mlmix.theory.sources.score_accuracy`, also
    in ``info``) of a table tabulated from a masked LM over a frame; mixed into :class:`MLMTable` and
    :class:`~mlmix.empirical.models.partial_tables.MLMPartialTable`."""

    def __init__(self, space: StateSpace, table: np.ndarray, temperature: float = 1.0, *,
                 tokens: Sequence[str], info: dict) -> None:
        # the scores carry the stated accuracy of the model's compute dtype (a record without one: float32)
        accuracy = ScoreAccuracy.of(str(info.get("dtype", "float32")), max_abs_score(table))
        super().__init__(space, table, temperature, score_accuracy=accuracy)
        if len(tokens) != space.vocab_size:
            raise ValueError(f"{len(tokens)} alphabet tokens for an alphabet of {space.vocab_size} symbols")
        self.tokens = list(tokens)
        self.info = {**info, "score_accuracy": accuracy.as_dict()}

    def decode(self, symbols: np.ndarray | Sequence[int]) -> list[str]:
        """Tokens of a 1-D sequence of symbols."""
        sym = np.asarray(symbols, dtype=np.int64)
        if sym.ndim != 1 or (sym.size and (sym.min() < 0 or sym.max() >= self.space.vocab_size)):
            raise ValueError(f"symbols must be a 1-D array with values in [0, {self.space.vocab_size})")
        return [self.tokens[k] for k in sym]

    def describe(self) -> dict:
        """Model, frame, alphabet, dtype and the table's provenance as plain values."""
        return dict(self.info)

    @property
    def label(self) -> str:
        """"<model> on '<frame>', T=<temperature>", the default name of its chains."""
        model = str(self.info.get("model", "masked LM"))
        return f"{Path(model).name or model} on '{self.info.get('frame', '?')}', T={self.temperature:g}"


class MLMTable(Tabulated, ScoreTable):
    """The score table of a masked LM over a frame (a :class:`ScoreTable`), with the alphabet's
    tokens (:meth:`decode`) and a description of where it came from (:meth:`describe`)."""


@dataclass(frozen=True)
class TableKind:
    """One kind of tabulated table of a masked LM's conditionals, and its tabulation (:meth:`tabulate`).

    Row r = i C + c of a table is site i and context c, the index of x_{-i} (remaining sites in order)
    in base B = |V|, or B = |V| + 1 when ``masked`` (digit |V| is [MASK] there): C = B^(n-1) contexts,
    n B^(n-1) masked forward passes, a table of shape (n, B^(n-1), |V|). Every kind is planned, announced,
    checkpointed and cached the same way (module docstring); only what follows differs.
    """

    label: str  #: "exact table": the notes (read from the cache, cached as) and the refusals
    name: str  #: "table": the cache messages ("the cached table ... is damaged")
    contexts: str  #: "contexts": what the B^(n-1) rows of a site are, in the cost line and the refusal
    masked: bool  #: contexts may mask sites (base |V| + 1)
    #: scores (B, |V|) of symbols (B, n) (|V| = masked) at sites (B,), on the source's device
    score: Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor]
    table_class: type  #: built as table_class(space, table, temperature, tokens=..., info=...)
    tag: str  #: of the checkpoint folder (:class:`~mlmix.files.OutputDir`)
    counter: str  #: label of the progress counter
    extra: dict  #: entries added to the cache record (hence to the key) and to ``info["table"]``

    def passes(self, space: StateSpace) -> int:
        """n B^(n-1): one masked forward pass per site and context."""
        return space.length * (space.vocab_size + self.masked) ** (space.length - 1)

    def key(self, source) -> tuple[str, dict]:
        """The cache key of the source's table of this kind and the JSON record it hashes: the model's
        weights, the input template (free positions as -1), the alphabet, the dtype and :attr:`extra`."""
        template = source._template.tolist()
        for slot in source.slots.tolist():
            template[slot] = -1
        record = {"format": FORMAT, "weights": cached_weights_hash(source),
                  "architecture": type(source.model).__name__, "template": template,
                  "alphabet": [int(t) for t in source.support_ids], "dtype": str(source.dtype).replace("torch.", ""),
                  **self.extra}
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:32], record

    def tabulate(self, source, *, cache_dir: str | os.PathLike | None = None, use_cache: bool = True,
                 max_passes: int | None = None, progress: bool = True, log: Callable[[str], None] | None = None):
        """The table of this kind of a :class:`~mlmix.empirical.models.mlm.MaskedLMConditionals`: read from the
        cache when present and whole (no forward pass; a damaged entry is reported and recomputed), else
        refused over ``max_passes``, announced with its measured cost, computed in checkpointed chunks
        (resuming an interrupted run) and cached atomically (the record, with the table's SHA-256, last)."""
        say = log if log is not None else progress_line
        space = source.space
        n, q = space.length, space.vocab_size
        total = self.passes(space)
        shape = f"n = {n} sites x {q + self.masked}^{n - 1} {self.contexts}"
        key, record = self.key(source)
        root = cache_root(cache_dir)
        if use_cache:
            try:
                found = self.read(root, key, record, source.temperature)
            except ValueError as err:
                say(f"{err}; recomputing it")
                found = None
            if found is not None:
                say(f"{self.label} read from the cache {root / (key + '.npz')} (no forward pass)")
                return found
        if max_passes is not None and total > check_int(max_passes, "--max-passes", minimum=1):
            raise ValueError(f"the {self.label} needs {total:,} masked forward passes ({shape}), more than "
                             f"--max-passes {max_passes:,}")
        check_memory(4 * total * q * 3, f"the {self.label} (float32 chunks, the table and its float64 copy)")
        start = time.perf_counter()
        rate = measure_rate(source)
        say(cost_line(total, rate, source.device) + f" ({shape}); use --max-passes to cap")
        folder = root / f"{key}.partial"
        chunk = _chunk_rows(folder if use_cache else None, record, rate)
        with Counter(self.counter, total, unit="passes", enabled=progress) as bar:
            if use_cache:
                with OutputDir(folder, self.tag, {**record, "chunk_rows": chunk}) as out:
                    scores = self._compute(source, total, chunk, bar, out.path)
            else:
                scores = self._compute(source, total, chunk, bar, None)
        seconds = time.perf_counter() - start
        info = {**source.describe(), "table": {**self.extra, "passes": total, "seconds": seconds,
                                               "passes_per_second": total / seconds, "from_cache": False, "key": key}}
        shaped = scores.reshape(n, total // n, q)
        table = self.table_class(space, shaped, source.temperature, tokens=_tokens(source), info=info)
        if use_cache:
            atomic_save_npz(root / f"{key}.npz", table=shaped)
            # written last: the record marks the table whole
            atomic_write_json(root / f"{key}.json", {"key": record, "info": table.info, "tokens": table.tokens,
                                                     "sha256": content_hash(shaped)})
            shutil.rmtree(folder, ignore_errors=True)
            say(f"{self.label} cached as {root / (key + '.npz')}")
        return table

    def _compute(self, source, total: int, chunk: int, bar: Counter, folder: Path | None) -> np.ndarray:
        """Scores of every row r = i B^(n-1) + c (class docstring), (total, |V|) float32 or float64, through
        :func:`compute_chunks` (checkpointed in ``folder``)."""
        n, base = source.space.length, source.space.vocab_size + self.masked
        contexts = base ** (n - 1)
        place = torch.as_tensor(base ** np.arange(n - 2, -1, -1, dtype=np.int64), device=source.device)
        columns = torch.arange(max(n - 1, 0), device=source.device)

        def score_rows(rows: torch.Tensor) -> np.ndarray:
            site, index = rows // contexts, rows % contexts
            digits = (index[:, None] // place) % base  # x_{-i}, remaining sites in order
            symbols = torch.zeros((rows.numel(), n), dtype=torch.long, device=source.device)
            symbols.scatter_(1, columns[None, :] + (columns[None, :] >= site[:, None]).long(), digits)
            return self.score(source, symbols, site).cpu().numpy()

        return compute_chunks(source, total, chunk, bar, folder, score_rows)

    def read(self, root: Path, key: str, record: dict, temperature: float):
        """The cached table, None when there is none, or a one-line ValueError when the entry is damaged
        (unreadable record or archive, wrong layout, or a table whose bytes do not match the recorded hash)."""
        meta, data = root / f"{key}.json", root / f"{key}.npz"
        if not (meta.is_file() and data.is_file()):
            return None
        saved = read_json(meta, f"cached {self.name} record")
        if not isinstance(saved, dict) or saved.get("key") != json.loads(json.dumps(record)):
            return None
        n, q = len([t for t in record["template"] if t == -1]), len(record["alphabet"])
        try:
            info, tokens, digest = saved["info"], saved["tokens"], saved["sha256"]
            info["table"] = {**info["table"], "from_cache": True, "cache": str(data)}
            table = load_arrays(data, f"cached {self.name}")["table"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"the cached {self.name} {data} is damaged ({type(err).__name__}: {err})") from None
        if table.shape != (n, (q + self.masked) ** (n - 1), q) or content_hash(table) != digest:
            raise ValueError(f"the cached {self.name} {data} does not match the content hash in its record "
                             "(edited or corrupt)")
        return self.table_class(StateSpace(q, n), table, temperature, tokens=tokens, info=info)


def _full_scores(source, symbols: torch.Tensor, sites: torch.Tensor) -> torch.Tensor:
    """s_i(. | x_{-i}): the source's own scores (one masked pass per row for an MLM)."""
    return source.scores_torch(symbols, sites, validate=False)


#: The exact (Glauber) table: every full context x_{-i} in V^(n-1).
EXACT = TableKind(label="exact table", name="table", contexts="contexts", masked=False, score=_full_scores,
                  table_class=MLMTable, tag="tabulate", counter="tabulating", extra={})


def cached_table(source, cache_dir: str | os.PathLike | None = None) -> MLMTable | None:
    """The cached exact table of ``source`` (at its temperature), or None when there is none; a damaged
    entry raises a one-line ValueError."""
    key, record = table_key(source)
    return EXACT.read(cache_root(cache_dir), key, record, source.temperature)


def tabulate(source, *, cache_dir: str | os.PathLike | None = None, use_cache: bool = True,
             max_passes: int | None = None, progress: bool = True,
             log: Callable[[str], None] | None = None) -> MLMTable:
    """The exact score table of a :class:`~mlmix.empirical.models.mlm.MaskedLMConditionals` (see the module
    docstring), read from the cache when present (no forward pass), else computed, checkpointed and
    cached (:meth:`TableKind.tabulate` of :data:`EXACT`). ``max_passes`` refuses, before any work, a table
    that needs more passes; ``log`` receives the one-line cost estimate and the cache notes (default:
    standard error)."""
    return EXACT.tabulate(source, cache_dir=cache_dir, use_cache=use_cache, max_passes=max_passes,
                          progress=progress, log=log)


def _chunk_rows(partial: Path | None, record: dict, rate: float) -> int:
    """Passes per chunk: those of an interrupted run of the same table, else about CHUNK_SECONDS of work."""
    manifest = None if partial is None else partial / MANIFEST
    if manifest is not None and manifest.is_file():
        params = (read_json(manifest, "tabulation manifest").get("params") or {})
        if {k: params.get(k) for k in record} == json.loads(json.dumps(record)) and \
                isinstance(params.get("chunk_rows"), int) and params["chunk_rows"] > 0:
            return params["chunk_rows"]
    work = max(1, int(rate * CHUNK_SECONDS))
    return max(MIN_CHUNK_ROWS, 1 << (work.bit_length() - 1))


def compute_chunks(source, total: int, chunk: int, bar: Counter, folder: Path | None,
                   score_rows: Callable[[torch.Tensor], np.ndarray]) -> np.ndarray:
    """Scores of the rows 0..total-1, (total, |V|) in the source's score dtype (float32, or float64 for a
    float64 model), ``chunk`` rows at a time through
    ``score_rows(rows)``; with a ``folder``, each chunk is checkpointed there with the SHA-256 of its
    scores, and a chunk found there is reused only when its shape and hash check (else recomputed)."""
    q = source.space.vocab_size
    out = np.empty((total, q), dtype=np.float64 if source.score_dtype == torch.float64 else np.float32)
    previous = source.on_rows
    source.on_rows = bar.update
    try:
        for start in range(0, total, chunk):
            stop = min(total, start + chunk)
            path = None if folder is None else folder / f"chunk-{start:012d}.npz"
            if path is not None and path.is_file():
                try:
                    saved = load_arrays(path, "checkpoint chunk")
                    chunk_scores, digest = saved["scores"], str(saved["sha256"])
                    if chunk_scores.shape != (stop - start, q) or digest != content_hash(chunk_scores):
                        raise ValueError("wrong shape or content hash")
                    out[start:stop] = chunk_scores
                    bar.update(stop - start)
                    continue
                except (ValueError, KeyError):
                    path.unlink()  # a damaged checkpoint chunk is recomputed
            scores = score_rows(torch.arange(start, stop, device=source.device))
            out[start:stop] = scores
            if path is not None:
                atomic_save_npz(path, scores=scores, sha256=np.array(content_hash(scores)))
    finally:
        source.on_rows = previous
    return out


def _tokens(source) -> list[str]:
    return source.tokenizer.convert_ids_to_tokens(source.support_ids.tolist())


def content_hash(array: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and bytes (C order): the cache's content check."""
    a = np.ascontiguousarray(array)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()
