"""Margins of states and basins, Theorem 8's escape and mixing bounds, and the drift of a count
statistic (paper G Assumption 1, Theorem 8, section 5.4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax, logsumexp

from mlmix.limits import EXACT_MAX_STATES
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.contexts import check_states, query_all_sites
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_temperature


def _symbol_mask(symbols: np.ndarray | list | set, q: int) -> np.ndarray:
    arr = np.asarray(sorted(symbols) if isinstance(symbols, set) else symbols)
    if arr.dtype == bool:
        if arr.shape != (q,):
            raise ValueError(f"a boolean symbol mask must have shape ({q},), got {arr.shape}")
        return arr.copy()
    if arr.size and (not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() >= q):
        raise ValueError(f"symbols must be integers in [0, {q})")
    mask = np.zeros(q, dtype=bool)
    mask[arr.astype(np.int64)] = True
    return mask


def count_drift(source: Conditionals, states: np.ndarray, symbols_A: np.ndarray | list | set) -> np.ndarray:
    """One-step drift of N(x) = #{i : x_i in A} under the Glauber kernel P_T (paper G §5.4):

        D(x) = E[N(X_1) - N(x) | X_0 = x]
             = (1/n) sum_i ( 1[x_i not in A] pi_i^T(A|x_{-i}) - 1[x_i in A] pi_i^T(V\\A|x_{-i}) ).

    ``symbols_A``: symbol indices or a boolean mask over V. One batched query of B n rows; returns
    float64 (B,).
    """
    space = source.space
    st = check_states(space, states)
    A = _symbol_mask(symbols_A, space.vocab_size)
    logp = log_softmax(query_all_sites(source, st) / source.temperature, axis=-1)  # (B, n, q)
    with np.errstate(divide="ignore"):
        in_A = np.exp(logsumexp(np.where(A, logp, -np.inf), axis=-1)) if A.any() else np.zeros(logp.shape[:2])
        out_A = np.exp(logsumexp(np.where(A, -np.inf, logp), axis=-1)) if (~A).any() else np.zeros(logp.shape[:2])
    member = A[st]
    return np.where(member, -out_A, in_A).mean(axis=1)

@dataclass(frozen=True)
class BasinMargin:
    """Uniform local margin of a basin B (paper G Assumption 1), scores at T = 1.

    gamma: min over exit-causing pairs (x in B, i, v with x^{i<-v} not in B) of
        s_i(x_i|x_{-i}) - s_i(v|x_{-i}) (inf when B has no exit);
    all_argmax: at every exit-causing site of every x in B, x_i maximises s_i(.|x_{-i});
    states: indices of the basin states; exit_sites: m_x per basin state; exit_symbols: number of
    exit-causing (i, v) per basin state; holds: Assumption 1 (gamma > 0 and all_argmax).
    """

    gamma: float
    all_argmax: bool
    states: np.ndarray
    exit_sites: np.ndarray
    exit_symbols: np.ndarray

    @property
    def holds(self) -> bool:
        return self.gamma > 0 and self.all_argmax


def _basin_mask(space: StateSpace, basin: np.ndarray) -> np.ndarray:
    mask = np.asarray(basin)
    if mask.dtype != bool or mask.shape != (space.size,):
        raise ValueError(f"basin must be a boolean mask over the {space.size} states")
    if not mask.any():
        raise ValueError("basin must contain at least one state")
    return mask


def basin_margin(source: Conditionals, basin: np.ndarray, max_states: int = EXACT_MAX_STATES) -> BasinMargin:
    """Assumption 1 on a basin B given as a boolean mask over V^n (small spaces); scores are
    queried only at the basin's states."""
    space = source.space
    space.check_size(max_states)
    mask = _basin_mask(space, basin)
    idx = np.flatnonzero(mask)
    st = space.decode(idx)
    s = query_all_sites(source, st)  # (M, n, q)
    exits = np.stack([~mask[space.neighbours(idx, i)] for i in range(space.length)], axis=1)  # (M, n, q)
    current = np.take_along_axis(s, st[:, :, None], axis=2)[:, :, 0]  # (M, n)
    exit_site = exits.any(axis=2)
    argmax_ok = current >= s.max(axis=2)
    gaps = np.where(exits, current[:, :, None] - s, np.inf)
    return BasinMargin(float(gaps.min()) if exits.any() else float("inf"),
                       bool(argmax_ok[exit_site].all()), idx, exit_site.sum(axis=1), exits.sum(axis=(1, 2)))


@dataclass(frozen=True)
class StateMargins:
    """Per-site margins of single states: gap[b, i] = s_i(x_i|x_{-i}) - max_{v != x_i} s_i(v|x_{-i})
    (T = 1 scores; negative when x_i is not an argmax) and all_argmax[b] = all gaps >= 0.
    For the singleton basin B = {x}, Assumption 1's gamma is min_i gap[i]."""

    gap: np.ndarray
    all_argmax: np.ndarray

    @property
    def gamma(self) -> np.ndarray:
        return self.gap.min(axis=1)


def state_margins(source: Conditionals, states: np.ndarray) -> StateMargins:
    """Margins of each state (traps on real MLMs, paper G A.1): one batched query of B n rows."""
    space = source.space
    st = check_states(space, states)
    s = query_all_sites(source, st)
    current = np.take_along_axis(s, st[:, :, None], axis=2)[:, :, 0]
    np.put_along_axis(s, st[:, :, None], -np.inf, axis=2)
    gap = current - s.max(axis=2)
    return StateMargins(gap, (gap >= 0).all(axis=1))


def escape_bound(gamma: float, temperature: float, vocab_size: int, exit_sites: int | None = None,
                 length: int | None = None) -> float:
    """Paper G Thm 8 (reconstructed): P_T(x, B^c) <= (m_x/n)(|V|-1) e^{-gamma/T} <= (|V|-1) e^{-gamma/T}.
    Without ``exit_sites``/``length`` the second (uniform) form, which also bounds Phi(B)."""
    T = check_temperature(temperature)
    bound = (vocab_size - 1) * float(np.exp(-gamma / T))
    if exit_sites is None and length is None:
        return bound
    if exit_sites is None or length is None:
        raise ValueError("give both exit_sites (m_x) and length (n), or neither")
    return exit_sites / length * bound


def mixing_lower_bound(gamma: float, temperature: float, vocab_size: int) -> float:
    """Paper G Thm 8 (reconstructed): if mu_T(B) <= 1/2, t_mix >= 1/(4 Phi(B)) >= e^{gamma/T}/(4(|V|-1))."""
    T = check_temperature(temperature)
    with np.errstate(over="ignore"):
        return float(np.exp(gamma / T)) / (4.0 * (vocab_size - 1))
