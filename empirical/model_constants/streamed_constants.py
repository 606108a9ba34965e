"""Paper G's exact local constants of a source without its chain: streamed over every context.

rho_ij, Delta_ij, rho, alpha, Delta and T* (THEOREMS.md 1.18, 1.19; Def. 2, section 5.2, Cor. 7) need
the conditionals of every context, never the chain of |V|^n states:

    rho_ij(T) = max over x_{-i} and w of TV(pi_i^T(.|x_{-i}), pi_i^T(.|x_{-i}^{j<-w})),
    Delta_ij  = max over x_{-i} and w of osc_v[s_i(v|x_{-i}) - s_i(v|x_{-i}^{j<-w})],

a maximum over the *lines* of V^(n-1) (the |V| contexts of site i that differ only at j); and the rectangle
statistic R of paper G section 4 (THEOREMS.md 1.22), a maximum over the planes of sites i < j, from the same
scores (:mod:`~mlmix.empirical.model_constants.streamed_rectangle`). Site by site,
the |V|^(n-1) conditionals s_i(.|x_{-i}) are queried once each (n |V|^(n-1) masked forward passes in all,
800,000 for a protein MLM at n = 5), in blocks of ``block_rows`` contexts, into a scratch array on disk;
then every line of every axis j is compared in blocks, updating running maxima and their witnesses (the
pair x, y = x^{j<-w} that attains each maximum). Once every site is done, the rectangle sweep reads the
sites' scores pair by pair, in blocks, with a running maximum of R and its witness rectangle (checkpointed
after each block). Memory: O(``block_rows`` |V|) floats, independent of the number of contexts; disk: every
site's scores, n |V|^(n-1) |V| float64 (128 MB at |V| = 20, n = 5; 3 GB at n = 6), removed once the
rectangle sweep is done.

The comparisons are those of :func:`mlmix.theory.local.influence.influence_and_oscillation` (the same
softmax, the same TV and oscillation formulas on the same rows), so on an enumerable frame the matrices
are equal to the exact ones bit for bit (and R to :func:`mlmix.theory.local.rectangles.rectangle_summary`'s
maximum). With a ``folder`` the run is checkpointed there after every
block (the running maxima, atomically; the scores flushed first) and an interrupted run resumes; the
folder is keyed by the model's weights, the frame, the alphabet, the dtype and the temperature and
refuses to mix parameters (:class:`mlmix.files.OutputDir`). A checkpoint of an earlier mlmix (without the
rectangle's keys) resumes; the sites it finished had their scores removed, so R is then reported as not
computed, with the reason.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import softmax

from mlmix.cache import cache_dir
from mlmix.empirical.model_constants import streamed_rectangle as rect
from mlmix.empirical.model_constants.streamed_rectangle import StreamedRectangle
from mlmix.files import OutputDir, atomic_write_json, dumps_json, read_json
from mlmix.progress import Counter
from mlmix.progress import say as progress_line
from mlmix.theory.local.influence import aggregate_influence, contraction_temperature
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.theory.sources.contexts import query_scores
from mlmix.theory.sources.score_accuracy import EXACT, ScoreAccuracy, source_accuracy
from mlmix.validation import check_int

#: Contexts per block (the memory unit: a few arrays of block_rows x |V| float64).
DEFAULT_BLOCK_ROWS = 1 << 15

#: Seconds of work between two checkpoints of a queried source (at the measured rate; a power of two of
#: contexts, at least :data:`MIN_CHUNK_ROWS` and at most the block).
CHUNK_SECONDS = 30.0
MIN_CHUNK_ROWS = 64

#: Forward passes of one rate measurement (:func:`mlmix.empirical.models.tabulate.measure_rate`: two batches of 32).
RATE_QUERIES = 64

#: Version of the checkpoint layout (part of the folder's parameters).
FORMAT = 1


@dataclass(frozen=True)
class StreamedConstants:
    """rho_ij (at ``temperature``) and Delta_ij over every context of V^n, with witnesses.

    ``rho_witness[i][j]`` / ``delta_witness[i][j]``: the pair of states {"x", "y"} (y = x^{j<-w}; x_i is
    irrelevant and set to 0) attaining the maximum, None on the diagonal. ``passes``: score queries made
    (masked forward passes for an MLM; 0 for a score table). ``rounding``: relative bound on the float64
    rounding of each TV and oscillation (8 |V| u, as in :func:`mlmix.theory.local.constants.local_constants`).
    ``score_accuracy``: the stated sup-norm accuracy e (``score_error``) of the scores, queried from a model
    or read from a table tabulated from one (:mod:`mlmix.theory.sources.score_accuracy`; 0 for a table given
    as numbers), which moves each TV by at most e/T (Lemma 6 on both conditionals) and each oscillation by
    at most 4e. ``rectangle``: max R over every rectangle with its witness and accuracy (or not computed,
    with the reason).
    """

    rho_ij: np.ndarray
    delta_ij: np.ndarray
    rho_witness: list
    delta_witness: list
    temperature: float
    passes: int
    contexts: int
    seconds: float
    rounding: float
    score_accuracy: ScoreAccuracy = EXACT
    resumed: bool = False
    rectangle: StreamedRectangle | None = None

    @property
    def score_error(self) -> float:
        """e, the stated accuracy of every score (absolute)."""
        return self.score_accuracy.error

    @property
    def rho(self) -> float:
        """max_j sum_{i != j} rho_ij (Def. 2, column sums; Theorem 5 needs rho < 1)."""
        return aggregate_influence(self.rho_ij).rho

    @property
    def alpha(self) -> float:
        """max_i sum_{j != i} rho_ij (Dobrushin's row sums)."""
        return aggregate_influence(self.rho_ij).alpha

    @property
    def delta(self) -> float:
        """max_j sum_{i != j} Delta_ij."""
        return 4 * contraction_temperature(self.delta_ij)

    @property
    def contraction_temperature(self) -> float:
        """T* = Delta / 4 (Cor. 7)."""
        return contraction_temperature(self.delta_ij)


def passes_needed(space: Any) -> int:
    """n |V|^(n-1): one score query (masked forward pass) per site and context."""
    return space.length * space.vocab_size ** (space.length - 1)


def checkpoint_params(source: Conditionals, block_rows: int) -> dict:
    """What a checkpoint folder is keyed by: the model's weights, frame, alphabet and dtype (the key
    record of its exact table), or a score table's content hash; the temperature, |V|, n, the block size."""
    # deferred: torch loads only for a masked LM
    from mlmix.empirical.models.mlm import MaskedLMConditionals
    from mlmix.empirical.models.tabulate import content_hash, table_key

    if isinstance(source, MaskedLMConditionals):
        record = table_key(source)[1]
    elif isinstance(source, ScoreTable):
        record = {"score_table_sha256": content_hash(source.table)}
    else:
        raise ValueError(f"a checkpoint folder needs a masked LM or a score table as source, not "
                         f"{type(source).__name__} (run without a folder)")
    return {"format": FORMAT, "source": record, "temperature": float(source.temperature),
            "vocab_size": source.space.vocab_size, "length": source.space.length, "block_rows": int(block_rows)}


def default_folder(source: Conditionals, block_rows: int = DEFAULT_BLOCK_ROWS) -> Path | None:
    """The checkpoint folder of a masked LM's streamed constants in mlmix's user cache
    (``streamed/<key>``, :func:`mlmix.cache.cache_dir`), keyed by :func:`checkpoint_params`; None for any
    other source. A finished run leaves only its state there, so a rerun returns at once (0 passes)."""
    # deferred: torch loads only for a masked LM
    from mlmix.empirical.models.mlm import MaskedLMConditionals

    if not isinstance(source, MaskedLMConditionals):
        return None
    params = checkpoint_params(source, block_rows)
    return cache_dir("streamed") / hashlib.sha256(dumps_json(params).encode()).hexdigest()[:32]


def streamed_constants(source: Conditionals, *, folder: str | os.PathLike | None = None,
                       block_rows: int = DEFAULT_BLOCK_ROWS, progress: bool = False,
                       log: Callable[[str], None] | None = None, rate: float | None = None) -> StreamedConstants:
    """The exact rho_ij and Delta_ij of ``source`` at its temperature, and max R over every rectangle
    (module docstring), streamed.

    A :class:`~mlmix.theory.sources.conditionals.ScoreTable` (e.g. a cached MLM table) is read, not
    queried (0 passes). For a masked LM the measured cost is announced first (``log``, default standard
    error) and ``progress`` shows the passes with an ETA. ``folder``: checkpoint and resume there.
    ``rate``: queries per second measured already (else measured here, unless a pass cap leaves no room).
    """
    block_rows = check_int(block_rows, "block_rows", minimum=1)
    say = log if log is not None else progress_line
    space = source.space
    n, q = space.length, space.vocab_size
    if n < 2:
        raise ValueError("the influence constants need n >= 2 free positions")
    table = source.table if isinstance(source, ScoreTable) else None
    total = 0 if table is not None else passes_needed(space)
    chunk = block_rows
    if total:
        rate = _announce(source, total, say, rate)
        if math.isfinite(rate):
            work = max(1, int(rate * CHUNK_SECONDS))
            chunk = min(block_rows, max(MIN_CHUNK_ROWS, 1 << (work.bit_length() - 1)))
    start = time.perf_counter()
    with Counter("streamed constants", total, unit="passes", enabled=progress and total > 0) as bar:
        if folder is None:
            with tempfile.TemporaryDirectory(prefix="mlmix-streamed-") as scratch:
                state, resumed = _run(source, table, Path(scratch), block_rows, chunk, bar, None)
        else:
            with OutputDir(folder, "streamed-constants", checkpoint_params(source, block_rows)) as out:
                state, resumed = _run(source, table, out.path, block_rows, chunk, bar, out.path / "state.json")
    accuracy = source_accuracy(source, state["max_abs_score"])
    rectangle = rect.from_state(state, n, q, float(source.temperature), accuracy.error)
    return StreamedConstants(np.array(state["rho_ij"]), np.array(state["delta_ij"]), state["rho_witness"],
                             state["delta_witness"], float(source.temperature), total, space.size,
                             time.perf_counter() - start, 8 * q * float(np.finfo(np.float64).eps) / 2, accuracy,
                             resumed, rectangle)


def _announce(source: Conditionals, total: int, say: Callable[[str], None], rate: float | None = None) -> float:
    """The cost line of a masked LM (at ``rate``, else measured on a first small batch, unless the source's
    pass cap leaves no room for it besides the ``total``); returns the rate (queries/s)."""
    ledger = getattr(source, "ledger", None)
    if not hasattr(source, "scores_torch") or (rate is None and ledger is not None
                                               and ledger.left() < total + RATE_QUERIES):
        say(f"{total:,} score queries")
        return float("inf")
    # deferred: torch loads only for a masked LM
    from mlmix.empirical.models.tabulate import cost_line, measure_rate

    rate = measure_rate(source) if rate is None else rate
    say(cost_line(total, rate, source.device) +
        f" (n = {source.space.length} sites x {source.space.vocab_size}^{source.space.length - 1} contexts, streamed)")
    return rate


def _fresh_state(n: int) -> dict:
    return {"site": 0, "rows": 0, "max_abs_score": 0.0, "rho_ij": np.zeros((n, n)).tolist(), "delta_ij": np.zeros((n, n)).tolist(),
            "rho_witness": [[None] * n for _ in range(n)], "delta_witness": [[None] * n for _ in range(n)],
            **rect.fresh_state()}


#: Keys of a checkpoint written before the rectangle sweep existed (it still resumes).
_EARLIER_KEYS = frozenset(_fresh_state(2)) - frozenset(rect.fresh_state())


def _run(source: Conditionals, table: np.ndarray | None, scratch: Path, block_rows: int, chunk: int, bar: Counter,
         state_file: Path | None) -> tuple[dict, bool]:
    """Site by site: fill the site's scores ``chunk`` contexts at a time, checkpointed after each (resuming
    at the recorded row), sweep its lines in blocks of ``block_rows``, record; then the rectangle sweep over
    every site's scores (checkpointed after each block), and remove the scores."""
    n, q = source.space.length, source.space.vocab_size
    contexts = q ** (n - 1)
    state, resumed = _fresh_state(n), False
    if state_file is not None and state_file.is_file():
        saved = read_json(state_file, "streamed-constants checkpoint")
        if isinstance(saved, dict) and set(saved) in (set(state), _EARLIER_KEYS):
            state, resumed = {**state, **saved}, True
    bar.update(0 if table is not None else state["site"] * contexts + state["rows"])
    for i in range(state["site"], n):
        if table is not None:
            scores = table[i]
        else:
            path = scratch / f"site-{i}.f64"
            scores = np.lib.format.open_memmap(path, mode="r+" if state["rows"] and path.is_file() else "w+",
                                               dtype=np.float64, shape=(contexts, q))
            for lo in range(state["rows"], contexts, chunk):
                hi = min(contexts, lo + chunk)
                block = _query(source, _states(np.arange(lo, hi, dtype=np.int64), i, n, q), i, bar)
                scores[lo:hi] = block
                state["max_abs_score"] = max(state["max_abs_score"], float(np.abs(block).max()))
                if state_file is not None:
                    scores.flush()
                    state["rows"] = hi
                    atomic_write_json(state_file, state, indent=None)
        _sweep(scores, i, n, q, float(source.temperature), block_rows, state)
        state.update(site=i + 1, rows=0)
        if state_file is not None:
            atomic_write_json(state_file, state, indent=None)
        del scores
    _rectangles(table, scratch, n, q, block_rows, state, state_file)
    return state, resumed


def _rectangles(table: np.ndarray | None, scratch: Path, n: int, q: int, block_rows: int, state: dict,
                state_file: Path | None) -> None:
    """The rectangle sweep of a run whose sites are all done (resumed at its recorded pair and row), then
    the removal of the sites' scores. Scores removed by an earlier mlmix: R is recorded as not computed."""
    files = [scratch / f"site-{k}.f64" for k in range(n)]
    if not rect.sweep_done(state, n):
        if table is not None:
            scores = [table[k] for k in range(n)]
        elif all(f.is_file() for f in files):
            scores = [np.load(f, mmap_mode="r") for f in files]
        else:
            gone = [k for k, f in enumerate(files) if not f.is_file()]
            state["rect_reason"] = (f"the scores of sites {gone} were removed by an earlier mlmix (a checkpoint "
                                    "without the rectangle): a fresh folder computes R")
            scores = []
        save = None if state_file is None else (lambda: atomic_write_json(state_file, state, indent=None))
        rect.sweep(scores, n, q, block_rows, state, save)
        if save is not None:
            save()
        del scores
    for f in files if table is None else ():
        f.unlink(missing_ok=True)


def _query(source: Conditionals, states: np.ndarray, site: int, bar: Counter) -> np.ndarray:
    """s_site(.|x_{-site}) of each state, the progress counted per batch of a masked LM (``on_rows``), else
    per call."""
    if not hasattr(source, "on_rows"):
        out = query_scores(source, states, site)
        bar.update(len(states))
        return out
    previous, source.on_rows = source.on_rows, bar.update
    try:
        return query_scores(source, states, site)
    finally:
        source.on_rows = previous


def _states(index: np.ndarray, site: int, n: int, q: int) -> np.ndarray:
    """States x (int64 (B, n)) whose context x_{-site} has index ``index`` (base q, remaining sites in
    order); x_site = 0 (it does not enter s_site(.|x_{-site}))."""
    place = q ** np.arange(n - 2, -1, -1, dtype=np.int64)
    digits = (index[:, None] // place) % q
    return np.insert(digits, site, 0, axis=1)


def _sweep(scores: np.ndarray, i: int, n: int, q: int, T: float, block_rows: int, state: dict) -> None:
    """Running maxima over every line of V^(n-1) of site i, along each axis (the site j): the arrays
    and comparisons of :func:`mlmix.theory.local.influence._exact_influence`, block by block."""
    rho, delta = state["rho_ij"], state["delta_ij"]
    for j in range(n):
        if j == i:
            continue
        a = j - (j > i)  # position of site j among the context digits of site i
        outer, inner = q ** a, q ** (n - 2 - a)
        lines = scores.reshape(outer, q, inner, q)
        # a block: outers [o0, o1) with inners [s0, s1) -- about block_rows contexts
        step_inner = max(1, min(inner, block_rows // q))
        step_outer = max(1, block_rows // (q * inner)) if step_inner == inner else 1
        for o0 in range(0, outer, step_outer):
            o1 = min(outer, o0 + step_outer)
            for s0 in range(0, inner, step_inner):
                s1 = min(inner, s0 + step_inner)
                s = np.moveaxis(np.asarray(lines[o0:o1, :, s0:s1, :], dtype=np.float64), 1, 0)  # (w, o, s, v)
                p = softmax(s / T, axis=-1)
                for u in range(q):
                    tv = 0.5 * np.abs(p - p[u]).sum(axis=-1)  # (w, o, s)
                    diff = s - s[u]
                    osc = diff.max(axis=-1) - diff.min(axis=-1)
                    for values, matrix, witness in ((tv, rho, "rho_witness"), (osc, delta, "delta_witness")):
                        k = int(values.argmax())
                        if values.flat[k] > matrix[i][j] or state[witness][i][j] is None:
                            w, o, r = np.unravel_index(k, values.shape)
                            matrix[i][j] = float(values.flat[k])
                            state[witness][i][j] = _witness(i, n, q, inner, o0 + o, s0 + r, int(w), u)


def _witness(i: int, n: int, q: int, inner: int, o: int, r: int, w: int, u: int) -> dict:
    """The pair x, y = x^{j<-w} (states of V^n, x_i = 0) of the line (o, r) at values u and w."""
    x, y = ((o * q + v) * inner + r for v in (u, w))
    sx, sy = _states(np.array([x, y], dtype=np.int64), i, n, q)
    return {"x": sx.tolist(), "y": sy.tolist()}
