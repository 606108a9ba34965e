"""Trap states of long Glauber chains and Theorem 8's escape bound beside them (paper G, appendix A.1).

Detection (the paper's criterion): for a chain recorded at steps t_0 < t_1 < ..., the window drift
at record r is the mean cosine distance of the embeddings in the next ``window`` steps to the
embedding at r,

    W(r) = mean_{s : t_r < t_s <= t_r + window} (1 - cos(e(x_s), e(x_r))),

and r is flagged when W(r) < ``threshold`` (0.12 over 300 steps in the paper). A trap is a
connected component of the union of the flagged windows [t_r, t_r + window]; its state is the
state recorded most often inside it. Durations are therefore at least one window (the paper reports some shorter
traps, so its duration was measured differently; the detection rule is the same).

Each trapped state x is then measured against Theorem 8 for the singleton basin B = {x}: every
free site is exit-causing, gap_i = s_i(x_i|x_{-i}) - max_{v != x_i} s_i(v|x_{-i}), gamma = min_i gap_i,
and when gamma > 0 (every token the argmax: a "perfect" trap)

    P_T(x, B^c) <= (|V| - 1) e^{-gamma/T},  so the expected stay is >= e^{gamma/T} / (|V| - 1) steps,

next to the exact one-step exit probability 1 - (1/n_free) sum_i pi_i^T(x_i|x_{-i}) and the
observed duration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import log_softmax, logsumexp

from mlmix.empirical.sampling.drift import cosine_distance
from mlmix.theory.local.margins import escape_bound, state_margins
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.contexts import query_all_sites
from mlmix.validation import check_int

#: The paper's detection rule (appendix A.1).
DEFAULT_WINDOW = 300
DEFAULT_THRESHOLD = 0.12


@dataclass(frozen=True)
class Trap:
    """A detected trap of chain ``chain``: steps [start, end], its modal ``state`` and the fraction
    ``occupancy`` of the records inside the trap equal to that state."""

    chain: int
    start: int
    end: int
    state: tuple[int, ...]
    occupancy: float

    @property
    def duration(self) -> int:
        return self.end - self.start


def window_drift(steps: np.ndarray, embeddings: np.ndarray, window: int) -> np.ndarray:
    """W(r) for every record r of one chain whose window ends by the last record (NaN after that).

    ``steps`` (R,) increasing, ``embeddings`` (R, d).
    """
    st = np.asarray(steps, dtype=np.int64)
    e = np.asarray(embeddings, dtype=np.float64)
    if st.ndim != 1 or e.ndim != 2 or e.shape[0] != st.shape[0]:
        raise ValueError(f"steps (R,) and embeddings (R, d) do not match: {st.shape} vs {e.shape}")
    if (np.diff(st) <= 0).any():
        raise ValueError("recorded steps must be strictly increasing")
    window = check_int(window, "window", minimum=1)
    out = np.full(st.shape[0], np.nan)
    last = np.searchsorted(st, st + window, side="right")  # records r+1 .. last-1 lie in the window
    for r in np.flatnonzero(st + window <= st[-1]):
        if last[r] > r + 1:
            out[r] = cosine_distance(e[r + 1:last[r]], e[r]).mean()
    return out


def detect_traps(steps: np.ndarray, states: np.ndarray, embeddings: np.ndarray, window: int = DEFAULT_WINDOW,
                 threshold: float = DEFAULT_THRESHOLD, chain: int = 0) -> list[Trap]:
    """Traps of one chain from its records: ``states`` (R, n) and ``embeddings`` (R, d) at ``steps``."""
    if not 0 < threshold <= 2:
        raise ValueError(f"threshold must be a cosine distance in (0, 2], got {threshold}")
    st = np.asarray(steps, dtype=np.int64)
    x = np.asarray(states)
    if x.ndim != 2 or x.shape[0] != st.shape[0]:
        raise ValueError(f"states must have shape ({st.shape[0]}, n), got {x.shape}")
    flagged = np.flatnonzero(window_drift(st, embeddings, window) < threshold)  # NaN compares False
    traps: list[Trap] = []
    for r in flagged:  # connected components of the union of the flagged windows [t_r, t_r + window]
        start, end = int(st[r]), int(st[r]) + window
        if traps and start <= traps[-1][1]:
            traps[-1][1] = end
        else:
            traps.append([start, end])
    return [_trap(chain, start, end, st, x) for start, end in traps]


def _trap(chain: int, start: int, end: int, steps: np.ndarray, states: np.ndarray) -> Trap:
    inside = states[(steps >= start) & (steps <= end)]
    uniq, counts = np.unique(inside, axis=0, return_counts=True)
    k = int(np.argmax(counts))
    return Trap(chain, start, end, tuple(int(v) for v in uniq[k]), float(counts[k] / len(inside)))


@dataclass(frozen=True)
class TrapMargins:
    """Theorem 8 quantities of a trapped state x (singleton basin, scores at T = 1).

    gaps: per free site; min_gap = gamma; mean_gap; all_argmax (every free token is its site's argmax);
    exit_probability: exact P_T(x, {x}^c); exit_bound: (|V|-1) e^{-gamma/T} (Thm 8), None unless
    gamma > 0; predicted_stay: 1 / exit_bound, the lower bound on the expected stay in steps;
    expected_stay: 1 / exit_probability, the exact expected stay (geometric holding time).
    """

    gaps: tuple[float, ...]
    min_gap: float
    mean_gap: float
    all_argmax: bool
    exit_probability: float
    exit_bound: float | None
    predicted_stay: float | None
    expected_stay: float


def trap_margins(source: Conditionals, states: np.ndarray, prefix: int = 0) -> list[TrapMargins]:
    """Margins, exact exit probability and Theorem 8's bound for each state (B, n); sites before
    ``prefix`` are held fixed by the chain and excluded. One batched query of B n rows."""
    x = np.asarray(states, dtype=np.int64)
    if x.ndim != 2:
        raise ValueError(f"states must have shape (B, n), got {x.shape}")
    n, q, T = source.space.length, source.space.vocab_size, source.temperature
    if not 0 <= prefix < n:
        raise ValueError(f"prefix must lie in [0, {n}), got {prefix}")
    gaps = state_margins(source, x).gap[:, prefix:]
    logp = log_softmax(query_all_sites(source, x) / T, axis=-1)[:, prefix:]
    # P_T(x, {x}^c) = mean_i sum_{v != x_i} pi_i(v|x_{-i}), summed over the other symbols directly:
    # 1 - pi_i(x_i|x_{-i}) would cancel to 0 in a deep trap (gamma/T >~ 37)
    np.put_along_axis(logp, x[:, prefix:, None], -np.inf, axis=2)
    leave = np.exp(logsumexp(logp, axis=2)).mean(axis=1)
    out = []
    for g, exit_p in zip(gaps, leave):
        gamma = float(g.min())
        bound = escape_bound(gamma, T, q) if gamma > 0 else None
        exit_p = float(exit_p)
        out.append(TrapMargins(tuple(float(v) for v in g), gamma, float(g.mean()), bool((g > 0).all()), exit_p,
                               bound, None if bound is None else 1.0 / bound,
                               float("inf") if exit_p == 0 else 1.0 / exit_p))
    return out


def trap_table(source: Conditionals, traps: list[Trap], prefix: int = 0) -> list[dict]:
    """One row per trap: the trap, its margins and Theorem 8's prediction beside the observed duration."""
    if not traps:
        return []
    margins = trap_margins(source, np.array([t.state for t in traps]), prefix)
    return [{**asdict(t), "duration": t.duration, **asdict(m)} for t, m in zip(traps, margins)]
