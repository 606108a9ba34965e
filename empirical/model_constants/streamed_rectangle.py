"""The rectangle statistic R over every rectangle of V^n, streamed from per-site score arrays.

Paper G section 4 (Theorem 3 / Proposition 4; THEOREMS.md 1.22): for sites i < j, the other sites fixed at
r, and G_r(a, b) = s_i(a | x_j = b, r) - s_j(b | x_i = a, r), every rectangle {a, a'} x {b, b'} has

    R = | G_r(a', b) - G_r(a, b) - G_r(a', b') + G_r(a, b') | / T

(the normalisers of pi_i(.|x_j = b, r) and pi_j(.|x_i = a, r) cancel in the double difference, so raw
scores suffice). With d_r(b) = G_r(a, b) - G_r(a', b) the maximum over the rectangles of one plane is

    max over a < a' of [ max_b d_r(b) - min_b d_r(b) ] / T,

O(|V|^3) per context r and pair i < j instead of O(|V|^4). The sweep gathers, for a block of contexts r,
the |V| rows of site i (x_j = every b) and the |V| rows of site j (x_i = every a) from the arrays
``scores[k]`` of shape (|V|^(n-1), |V|) (rows indexed as :class:`~mlmix.theory.sources.conditionals.ScoreTable`
and the scratch files of :mod:`~mlmix.empirical.model_constants.streamed_constants`), keeps a running maximum
and its witness rectangle: memory of a block, whatever n. On a score table the maximum equals
:func:`mlmix.theory.local.rectangles.rectangle_summary`'s bit for bit (the same differences in the same
order: rounding is monotone, so max_b - min_b rounds to the largest rounded |d(b) - d(b')|).

Accuracy: with M the largest |score|, each G entry is rounded once (|G| <= 2M), each d twice, the spread
three times: |error of T R| <= 24 u M, so the stated rounding is 32 u M / T + 2 u R (u = 2^-53). Scores
computed by a model carry the stated accuracy e of their arithmetic
(:mod:`mlmix.theory.sources.score_accuracy`); R involves 8 scores, so it moves by at most 8 e / T.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlmix.theory.results import EPS, Result
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.score_accuracy import ScoreAccuracy
from mlmix.validation import check_int, check_temperature


@dataclass(frozen=True)
class StreamedRectangle:
    """max R over every rectangle of V^n (x, i < j, a' != x_i, b' != x_j) at ``temperature``, with its
    ``witness`` rectangle {"state", "i", "j", "a_new", "b_new", "R"} (x_i = a, x_j = b); ``count``
    rectangles |V|^n C(n, 2) (|V|-1)^2. ``rounding`` and ``score_error`` are absolute bounds on R's float64
    rounding and on the effect of the scores' stated accuracy (module docstring). ``max`` is None, with
    the ``reason``, when R could not be computed."""

    max: float | None
    witness: dict | None
    temperature: float
    count: int
    rounding: float
    score_error: float = 0.0
    reason: str | None = None

    @property
    def accuracy(self) -> float:
        """Absolute accuracy of ``max``: rounding + score error."""
        return self.rounding + self.score_error

    def result(self, name: str = "R max") -> Result:
        """``max`` as a Result: the value with its enclosure [max - accuracy, max + accuracy] (clipped at 0,
        rounded outward; relative error accuracy / max, None at 0) and details R, accuracy, count and witness;
        not computed: a missing Result with the reason."""
        method = "enumeration of every rectangle (streamed)"
        if self.max is None:
            return Result.missing(name, method, self.reason or "not computed")
        v, e = self.max, self.accuracy
        lower, upper = max(0.0, math.nextafter(v - e, -math.inf)), math.nextafter(v + e, math.inf)
        return Result(name, v, method, e / v if v > 0 else None, lower, upper, None,
                      {"R": v, "accuracy": e, "count": self.count, "witness": self.witness})


def fresh_state() -> dict:
    """The rectangle keys of a checkpoint before the sweep starts."""
    return {"rect_pair": 0, "rect_row": 0, "rect_max": 0.0, "rect_witness": None, "rect_max_abs": 0.0,
            "rect_reason": None}


def site_pairs(n: int) -> list[tuple[int, int]]:
    """The pairs i < j in the order of the sweep."""
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def sweep_done(state: dict, n: int) -> bool:
    """Whether the sweep recorded in ``state`` is finished (or was given up with a reason)."""
    return state["rect_reason"] is not None or state["rect_pair"] >= len(site_pairs(n))


def sweep(scores: Sequence[np.ndarray], n: int, q: int, block_rows: int, state: dict,
          save: Callable[[], None] | None = None, *, check_rows: bool = False) -> None:
    """Advance the running maximum of R * T in ``state`` (keys :func:`fresh_state`) over every pair i < j
    and block of contexts r from the recorded (``rect_pair``, ``rect_row``) on; ``save()`` after each block
    (a checkpoint). ``scores[k]``: site k's rows, (|V|^(n-1), |V|). ``check_rows``: refuse a row that is
    all zeros (a scratch file not written to its end). A non-finite score (a zero probability: log-ratios
    undefined) ends the sweep with ``rect_reason``."""
    pairs = site_pairs(n)
    contexts = q ** (n - 2)
    step = max(1, block_rows // q)
    b_or_a = np.arange(q, dtype=np.int64)
    while state["rect_pair"] < len(pairs) and state["rect_reason"] is None:
        i, j = pairs[state["rect_pair"]]
        low_i, low_j = q ** (n - 1 - j), q ** (n - 2 - i)  # place of the inserted digit among the context digits
        for r0 in range(state["rect_row"], contexts, step):
            r = np.arange(r0, min(contexts, r0 + step), dtype=np.int64)
            rows_i = ((r // low_i)[:, None] * q + b_or_a) * low_i + (r % low_i)[:, None]  # (B, b): x_j = b
            rows_j = ((r // low_j)[:, None] * q + b_or_a) * low_j + (r % low_j)[:, None]  # (B, a): x_i = a
            s_i = np.asarray(scores[i][rows_i.ravel()], dtype=np.float64).reshape(len(r), q, q)  # (r, b, a)
            s_j = np.asarray(scores[j][rows_j.ravel()], dtype=np.float64).reshape(len(r), q, q)  # (r, a, b)
            if check_rows:
                for k, s in ((i, s_i), (j, s_j)):
                    if (s == 0).all(axis=-1).any():
                        raise ValueError(f"the scores of site {k} hold a row of zeros: the file was not written to "
                                         "its end (an unfinished run)")
            if not (np.isfinite(s_i).all() and np.isfinite(s_j).all()):
                state["rect_reason"] = ("a score is -inf or not finite (a zero probability): the log-ratios of "
                                        "R are undefined")
                break
            state["rect_max_abs"] = max(state["rect_max_abs"], float(np.abs(s_i).max()), float(np.abs(s_j).max()))
            G = np.swapaxes(s_i, 1, 2) - s_j  # (r, a, b), as rectangle_summary
            for a in range(q - 1):
                d = G[:, a:a + 1, :] - G[:, a + 1:, :]  # (r, a' > a, b)
                spread = d.max(axis=-1) - d.min(axis=-1)
                k = int(spread.argmax())
                if spread.flat[k] > state["rect_max"] or state["rect_witness"] is None:
                    row, da = divmod(k, spread.shape[1])
                    line = d[row, da]
                    top, bottom = int(line.argmax()), int(line.argmin())
                    b, b_new = sorted((top, bottom if bottom != top else (top + 1) % q))  # R = 0: any b' != b
                    state["rect_max"] = float(spread.flat[k])
                    state["rect_witness"] = _witness(int(r[row]), i, j, n, q, a, a + 1 + da, b, b_new)
            state["rect_row"] = int(r[-1]) + 1
            if save is not None:
                save()
        else:
            state.update(rect_pair=state["rect_pair"] + 1, rect_row=0)
            if save is not None:
                save()


def _witness(r: int, i: int, j: int, n: int, q: int, a: int, a_new: int, b: int, b_new: int) -> dict:
    """The rectangle (x, i, j, a', b') with x the context r and x_i = a, x_j = b (R filled in later)."""
    rest = [(r // q ** (n - 3 - k)) % q for k in range(n - 2)]
    state = rest[:i] + [a] + rest[i:]
    state = state[:j] + [b] + state[j:]
    return {"state": [int(v) for v in state], "i": i, "j": j, "a_new": int(a_new), "b_new": int(b_new)}


def from_state(state: dict, n: int, q: int, temperature: float, score_error: float = 0.0) -> StreamedRectangle:
    """The finished sweep of ``state`` as a :class:`StreamedRectangle` at ``temperature``; ``score_error``:
    the stated accuracy e of the scores (:mod:`mlmix.theory.sources.score_accuracy`; 0 for exact scores),
    charged 8 e / T."""
    count = q**n * (n * (n - 1) // 2) * (q - 1) ** 2 if n >= 2 else 0
    T = float(temperature)
    if state.get("rect_reason") is not None or not sweep_done(state, n):
        return StreamedRectangle(None, None, T, count, 0.0, 0.0,
                                 state.get("rect_reason") or "the rectangle sweep did not finish")
    M = state["rect_max_abs"]
    value = state["rect_max"] / T
    rounding = 32 * EPS * M / T + 2 * EPS * value
    error = 8 * score_error / T
    witness = None if state["rect_witness"] is None else {**state["rect_witness"], "R": value}
    return StreamedRectangle(value, witness, T, count, rounding, error)


def table_rectangle(table: np.ndarray, temperature: float, block_rows: int = 1 << 15) -> StreamedRectangle:
    """max R of a score table (n, |V|^(n-1), |V|) (:class:`~mlmix.theory.sources.conditionals.ScoreTable`'s
    layout) at ``temperature``, swept in blocks: exact scores, so only the rounding is stated."""
    n, rows, q = table.shape
    state = fresh_state()
    if n >= 2:
        sweep([table[k] for k in range(n)], n, q, block_rows, state)
    return from_state(state, n, q, temperature)


def rectangle_from_folder(folder: str | os.PathLike, temperature: float = 1.0, *, model_scores: bool = True,
                          dtype: str = "float32", block_rows: int = 1 << 15) -> StreamedRectangle:
    """max R over every rectangle from a folder of per-site score files ``site-0.f64`` ... ``site-{n-1}.f64``
    (the .npy scratch arrays of a streamed run, (|V|^(n-1), |V|) each), at ``temperature`` (R scales as 1/T).
    ``model_scores``: the files hold a masked LM's scores computed in ``dtype`` (their stated accuracy,
    :class:`~mlmix.theory.sources.score_accuracy.ScoreAccuracy`, applies, and a row of zeros, never written,
    is refused); False for exact scores. Memory: a block; the files are only read."""
    T = check_temperature(temperature)
    block_rows = check_int(block_rows, "block_rows", minimum=1)
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"{path} is not a folder of site score files")
    names = sorted(p.name for p in path.glob("site-*.f64"))
    n = len(names)
    if n < 2 or names != sorted(f"site-{k}.f64" for k in range(n)):
        raise ValueError(f"{path} must hold site-0.f64 ... site-(n-1).f64 for n >= 2 sites, found {names or 'none'}")
    scores = []
    for k in range(n):
        try:
            arr = np.load(path / f"site-{k}.f64", mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path / f'site-{k}.f64'} is not a score array: {exc}") from None
        scores.append(arr)
    q = scores[0].shape[1] if scores[0].ndim == 2 else 0
    if q < 2 or any(s.shape != (q ** (n - 1), q) for s in scores):
        raise ValueError(f"the site files of {path} must each have shape (|V|^(n-1), |V|) = ({q}^{n - 1}, {q}), "
                         f"found {[s.shape for s in scores]}")
    state = fresh_state()
    sweep(scores, n, q, block_rows, state, check_rows=model_scores)
    error = ScoreAccuracy.of(dtype, state["rect_max_abs"]).error if model_scores else 0.0
    return from_state(state, n, q, T, error)


def evaluated_rectangles(rows: Sequence[tuple[np.ndarray, np.ndarray]], temperature: float) -> dict:
    """max R over the rectangles whose four score rows were all evaluated: a lower bound of max R over
    V^n, attained by its witness. ``rows[k]`` = (states (m, n), scores (m, |V|)) of site k (x_k ignored), e.g.
    the rows a context search asked. For sites i < j and the other sites r, the rows of site i at
    x_j = b (b in B_r) and of site j at x_i = a (a in A_r) give G_r on A_r x B_r, hence every rectangle
    {a, a'} x {b, b'} in it (module docstring). Returns {"max", "witness", "rectangles" (each counted once per
    corner, as :func:`mlmix.theory.local.rectangles.rectangle_summary`), "max_abs_score"}."""
    T = float(temperature)
    n = len(rows)
    best, witness, count, largest = 0.0, None, 0, 0.0
    for i, j in site_pairs(n):
        (x_i, s_i), (x_j, s_j) = rows[i], rows[j]
        if x_i.shape[0] < 2 or x_j.shape[0] < 2:
            continue
        q = s_i.shape[1]
        keys, inverse = np.unique(np.delete(np.concatenate([x_i, x_j]), [i, j], axis=1), axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        F = np.full((keys.shape[0], q, q), np.nan)  # (r, b, a): site i's row at x_j = b
        S = np.full((keys.shape[0], q, q), np.nan)  # (r, a, b): site j's row at x_i = a
        F[inverse[:len(x_i)], x_i[:, j]] = s_i
        S[inverse[len(x_i):], x_j[:, i]] = s_j
        G = np.swapaxes(F, 1, 2) - S  # NaN (or inf) where a row is missing (or a score is -inf)
        valid = np.isfinite(G)
        largest = max(largest, float(np.abs(np.where(valid, np.swapaxes(F, 1, 2), 0.0)).max()),
                      float(np.abs(np.where(valid, S, 0.0)).max()))
        na, nb = valid.any(axis=2).sum(axis=1), valid.any(axis=1).sum(axis=1)
        count += int((na * (na - 1) * nb * (nb - 1)).sum())  # 4 C(|A|, 2) C(|B|, 2) rectangles per r
        for a in range(q - 1):
            d = G[:, a:a + 1, :] - G[:, a + 1:, :]
            ok = np.isfinite(d)
            spread = np.where(ok, d, -np.inf).max(axis=-1) - np.where(ok, d, np.inf).min(axis=-1)
            spread[ok.sum(axis=-1) < 2] = -np.inf
            k = int(spread.argmax())
            if spread.flat[k] > best:
                row, da = divmod(k, spread.shape[1])
                line = np.where(ok[row, da], d[row, da], np.nan)
                b, b_new = sorted((int(np.nanargmax(line)), int(np.nanargmin(line))))
                best = float(spread.flat[k])
                rest = [int(v) for v in keys[row]]
                state = rest[:i] + [a] + rest[i:]
                state = state[:j] + [b] + state[j:]
                witness = {"state": state, "i": i, "j": j, "a_new": a + 1 + da, "b_new": b_new, "R": best / T}
    return {"max": best / T, "witness": witness, "rectangles": count, "max_abs_score": largest}


class RecordedRows(Conditionals):
    """``source`` that keeps every score row asked of it, per site, for :func:`evaluated_rectangles`
    (memory: the rows asked, |V| floats each)."""

    def __init__(self, source: Conditionals) -> None:
        super().__init__(source.space, source.temperature)
        self.source = source
        self._states: list[list[np.ndarray]] = [[] for _ in range(source.space.length)]
        self._scores: list[list[np.ndarray]] = [[] for _ in range(source.space.length)]

    def scores(self, contexts: np.ndarray, sites: int | np.ndarray) -> np.ndarray:
        out = self.source.scores(contexts, sites)
        states = np.asarray(contexts, dtype=np.int64)
        sites = np.broadcast_to(np.asarray(sites, dtype=np.int64), (states.shape[0],))
        for k in np.unique(sites):
            keep = sites == k
            self._states[k].append(states[keep])
            self._scores[k].append(np.asarray(out[keep], dtype=np.float64))
        return out

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        return self.scores(contexts, site)

    def rows(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(states (m, n), scores (m, |V|)) of each site, in the order asked."""
        n, q = self.space.length, self.space.vocab_size
        return [(np.concatenate(x) if x else np.zeros((0, n), np.int64), np.concatenate(s) if s else np.zeros((0, q)))
                for x, s in zip(self._states, self._scores)]
