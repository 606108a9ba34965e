"""Exact total-variation mixing from the worst start: d(t) and t_mix(eps).

Definitions (THEOREMS.md section 1; paper G Cor. 2 and Thm 5 are checked against them):

    d(t)        = max_x TV(P^t(x, .), pi),   TV(p, q) = (1/2) sum_y |p(y) - q(y)|,
    t_mix(eps)  = min{ t >= 0 : d(t) <= eps },   t_mix = t_mix(1/4).

This is the *worst-start* total-variation distance, maximised over every deterministic start x
(equivalently over every start law, since TV is convex). It is not the L1 distance (twice TV),
not the distance from one chosen start, and not capped at an iteration budget. d(t) is
non-increasing in t for any stochastic P, which the bisection in :func:`mixing_time` relies on.

Everything here works on dense matrices (all rows of P^t are needed), so the state count is
limited to :data:`MIXING_LIMIT`.
"""

from __future__ import annotations

import numpy as np

from mlmix.theory.matrices import to_dense
from mlmix.theory.spectral import resolve_stationary
from mlmix.validation import Matrix, check_eps, check_steps, check_transition_matrix

#: Largest state count accepted by the exact (dense) TV computations. mixing_time keeps up to
#: ~log2(t_mix) dense powers of P, i.e. 8 N^2 log2(t_mix) bytes (128 MiB per power at N = 4096).
MIXING_LIMIT = 4096

#: mixing_time stops squaring after P^(2^MAX_DOUBLINGS) and reports that d(t) never reached eps.
MAX_DOUBLINGS = 62


def _dense_chain(P: Matrix, pi: np.ndarray | None, max_states: int) -> tuple[np.ndarray, np.ndarray]:
    P = check_transition_matrix(P)
    if P.shape[0] > max_states:
        raise ValueError(f"exact TV mixing needs dense powers of P; {P.shape[0]} states exceeds the limit of "
                         f"{max_states} (pass max_states to raise it if you have the memory)")
    pi = resolve_stationary(P, pi)
    return to_dense(P).astype(np.float64, copy=True), pi


def _worst_tv(M: np.ndarray, pi: np.ndarray) -> float:
    """max_x TV(M(x, .), pi) for a stochastic matrix M."""
    return float(0.5 * np.abs(M - pi[None, :]).sum(axis=1).max())


def distance_curve(P: Matrix, t_max: int, pi: np.ndarray | None = None,
                   max_states: int = MIXING_LIMIT) -> np.ndarray:
    """d(t) = max_x TV(P^t(x, .), pi) for t = 0, 1, ..., t_max (worst start, exact, dense).

    Returns a float64 array of length t_max + 1; d(0) = 1 - min_x pi(x). ``pi`` defaults to the
    stationary law of P (ReducibleChainError when it is not unique). Cost: t_max dense products.
    """
    t_max = check_steps(t_max, "t_max")
    M, pi = _dense_chain(P, pi, max_states)
    P_dense = M.copy()
    out = np.empty(t_max + 1)
    M = np.eye(M.shape[0])
    for t in range(t_max + 1):
        out[t] = _worst_tv(M, pi)
        if t < t_max:
            M = M @ P_dense
    return out


def tv_distance(P: Matrix, t: int, pi: np.ndarray | None = None, max_states: int = MIXING_LIMIT) -> float:
    """d(t) = max_x TV(P^t(x, .), pi) at a single time t (P^t by repeated squaring)."""
    t = check_steps(t)
    M, pi = _dense_chain(P, pi, max_states)
    return _worst_tv(np.linalg.matrix_power(M, t), pi)


def mixing_time(P: Matrix, eps: float = 0.25, pi: np.ndarray | None = None, t_max: int | None = None,
                max_states: int = MIXING_LIMIT) -> int:
    """t_mix(eps) = min{t >= 0 : d(t) <= eps} with d the worst-start TV distance (exact, dense).

    Algorithm: square P until d(2^k) <= eps, keeping P^(2^j) for j < k; then, since d is
    non-increasing, find the largest t < 2^k with d(t) > eps bit by bit from the top power
    (t += 2^j whenever d(t + 2^j) > eps) and return t + 1. About 2 log2(t_mix) dense products,
    so a metastable chain with t_mix ~ 1e6 costs ~40 products.

    Raises ValueError when eps is not in (0, 1), when t_mix(eps) exceeds ``t_max`` (when given),
    or when d(t) is still above eps after 2^62 steps (periodic chains, whose d(t) does not tend to 0).
    """
    eps = check_eps(eps)
    if t_max is not None:
        t_max = check_steps(t_max, "t_max")
    M, pi = _dense_chain(P, pi, max_states)
    if _worst_tv(np.eye(M.shape[0]), pi) <= eps:
        return 0
    powers = [M]  # powers[j] = P^(2^j)
    while _worst_tv(powers[-1], pi) > eps:
        if t_max is not None and 2 ** (len(powers) - 1) >= t_max:
            break
        if len(powers) > MAX_DOUBLINGS:
            raise ValueError(f"d(t) is still above eps = {eps} at t = 2^{MAX_DOUBLINGS}: the chain is periodic "
                             "or eps is below the floating-point floor of d(t)")
        powers.append(powers[-1] @ powers[-1])
    top = len(powers) - 1
    if _worst_tv(powers[top], pi) > eps:  # stopped by t_max <= 2^top; d is non-increasing
        raise ValueError(f"d({2**top}) > eps = {eps} with 2^{top} >= t_max = {t_max}: "
                         f"t_mix({eps}) exceeds t_max")
    # invariant: d(t) > eps for the current t (true at t = 0); d(2^top) <= eps bounds the search
    t, A = 0, np.eye(M.shape[0])
    for j in range(top - 1, -1, -1):
        candidate = A @ powers[j]
        if _worst_tv(candidate, pi) > eps:
            t, A = t + 2**j, candidate
    if t_max is not None and t + 1 > t_max:
        raise ValueError(f"t_mix({eps}) = {t + 1} exceeds t_max = {t_max}")
    return t + 1
