"""Conductance of sets and chains: exact on small spaces, a certified interval on large ones.

With the ergodic flow Q(x, y) = pi(x) P(x, y) (THEOREMS.md section 1):

    Phi(S)  = Q(S, S^c) / pi(S),                 Phi* = min{ Phi(S) : 0 < pi(S) <= 1/2 }.

Under stationarity Q(S, S^c) = Q(S^c, S) (both equal pi(S) - Q(S, S)), so every cut value, hence
Phi*, is the same for P and for its additive reversibilization (P + P*)/2. Cheeger's inequality
for the reversible (P + P*)/2 with gap gamma = 1 - lambda_2((P + P*)/2) then gives

    gamma / 2 <= Phi* <= sqrt(2 gamma),

valid for non-reversible P as well. Sweep cuts of the second eigenvector of (P + P*)/2 give sets
S whose Phi(S) is an upper bound on Phi* (usually far better than sqrt(2 gamma)). Paper G Thm 8
uses Phi(B) of a basin B through t_mix >= 1/(4 Phi(B)) when pi(B) <= 1/2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from mlmix.theory.matrices import to_dense
from mlmix.theory.spectral import additive_eigenpairs, flow_matrix, resolve_stationary
from mlmix.validation import Matrix, check_state_set, check_transition_matrix

#: Largest state count for the exhaustive search over all 2^N subsets.
EXACT_CONDUCTANCE_LIMIT = 20

#: Number of subsets evaluated per vectorised chunk of the exhaustive search.
_CHUNK = 1 << 15

#: pi(S) <= 1/2 is tested as pi(S) <= 1/2 + _HALF_TOL so that sets of mass exactly 1/2 count.
_HALF_TOL = 1e-12


def set_conductance(P: Matrix, S: np.ndarray | list | tuple, pi: np.ndarray | None = None) -> float:
    """Phi(S) = Q(S, S^c) / pi(S) = sum_{x in S} pi(x) P(x, S^c) / pi(S).

    ``S`` is a boolean mask or an array of state indices; ValueError when S is empty or the whole
    space. ``pi`` defaults to the stationary law of P. No restriction pi(S) <= 1/2 here.
    """
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    mask = check_state_set(S, P.shape[0], "S", proper=True)
    escape = P @ (~mask).astype(np.float64)  # P(x, S^c)
    return float(pi[mask] @ escape[mask] / pi[mask].sum())


def exact_conductance(P: Matrix, pi: np.ndarray | None = None,
                      max_states: int = EXACT_CONDUCTANCE_LIMIT) -> tuple[float, np.ndarray]:
    """Phi* = min{ Phi(S) : 0 < pi(S) <= 1/2 } by exhaustive search, and a minimising set (mask).

    All 2^N - 2 proper subsets are enumerated as bitmasks in vectorised chunks; cost
    O(2^N N^2). Refuses (ValueError) above ``max_states`` states.
    """
    P = check_transition_matrix(P)
    N = P.shape[0]
    if N > max_states:
        raise ValueError(f"exhaustive conductance enumerates 2^N subsets; N = {N} exceeds the limit of {max_states}; "
                         "use conductance_bounds for an interval")
    if N < 2:
        raise ValueError("conductance needs at least 2 states")
    pi = resolve_stationary(P, pi)
    Q = to_dense(flow_matrix(P, pi))
    bits = np.arange(N, dtype=np.int64)
    best_phi, best_code = np.inf, -1
    for start in range(1, 2**N - 1, _CHUNK):
        codes = np.arange(start, min(start + _CHUNK, 2**N - 1), dtype=np.int64)
        member = ((codes[:, None] >> bits) & 1).astype(np.float64)  # (B, N)
        mass = member @ pi
        cut = ((member @ Q) * (1.0 - member)).sum(axis=1)  # Q(S, S^c)
        ok = mass <= 0.5 + _HALF_TOL
        if not ok.any():
            continue
        phi = np.where(ok, cut / np.where(ok, mass, 1.0), np.inf)
        i = int(np.argmin(phi))
        if phi[i] < best_phi:
            best_phi, best_code = float(phi[i]), int(codes[i])
    return best_phi, ((best_code >> bits) & 1).astype(bool)


@dataclass(frozen=True, eq=False)
class ConductanceBounds:
    """lower <= Phi* <= upper; ``exact`` is Phi* when found exhaustively (else None); ``set`` the
    mask of the best set found (a minimiser, or the best sweep cut, with pi(set) <= 1/2);
    ``method`` says how each figure was obtained."""

    lower: float
    upper: float
    exact: float | None
    set: np.ndarray = field(repr=False)
    method: str


def sweep_cut(P: Matrix, f: np.ndarray, pi: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Best sweep cut of the ordering by f: min over k of Q(S_k, S_k^c) / min(pi(S_k), pi(S_k^c)),
    S_k the k states with smallest f. Returns that value and the side with pi <= 1/2 (a mask).

    Each value is Phi of the lighter side, so it is an upper bound on Phi*. O(nnz + N log N):
    an edge between ranks r < s crosses exactly the cuts k = r+1, ..., s.
    """
    P = check_transition_matrix(P)
    N = P.shape[0]
    pi = resolve_stationary(P, pi)
    f = np.asarray(f, dtype=np.float64)
    if f.shape != (N,) or not np.isfinite(f).all():
        raise ValueError(f"f must be a finite vector over the {N} states")
    order = np.argsort(f, kind="stable")
    rank = np.empty(N, dtype=np.int64)
    rank[order] = np.arange(N)
    Q = sp.coo_array(flow_matrix(P, pi))
    lo, hi = np.minimum(rank[Q.row], rank[Q.col]), np.maximum(rank[Q.row], rank[Q.col])
    cross = lo < hi
    # every cut value counts Q(S,S^c) + Q(S^c,S) = 2 Q(S,S^c) under stationarity
    diff = np.bincount(lo[cross] + 1, Q.data[cross], minlength=N + 1) - np.bincount(hi[cross] + 1, Q.data[cross],
                                                                                    minlength=N + 1)
    cut = np.cumsum(diff)[1:N] / 2  # cut[k-1] for prefixes of size k = 1..N-1
    mass = np.cumsum(pi[order])[:N - 1]
    light = np.minimum(mass, 1.0 - mass)
    ratio = cut / np.maximum(light, np.finfo(float).tiny)
    k = int(np.argmin(ratio)) + 1
    prefix = np.zeros(N, dtype=bool)
    prefix[order[:k]] = True
    side = prefix if mass[k - 1] <= 0.5 else ~prefix
    return float(ratio[k - 1]), side


def conductance_bounds(P: Matrix, pi: np.ndarray | None = None,
                       max_exact_states: int = EXACT_CONDUCTANCE_LIMIT) -> ConductanceBounds:
    """An interval for Phi*: exact (lower = upper) up to ``max_exact_states`` states, otherwise

        lower = gamma / 2  (Cheeger, gamma the gap of (P + P*)/2),
        upper = min( Phi(best sweep cut of its second eigenvector), sqrt(2 gamma) ).
    """
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    if P.shape[0] <= max_exact_states:
        phi, mask = exact_conductance(P, pi, max_states=max_exact_states)
        return ConductanceBounds(phi, phi, phi, mask, f"exhaustive search over 2^{P.shape[0]} subsets")
    vals, vecs = additive_eigenpairs(P, pi, k=2)
    gap = max(float(1.0 - vals[1]), 0.0)
    sweep, mask = sweep_cut(P, vecs[:, 1], pi)
    upper = min(sweep, float(np.sqrt(2 * gap)))
    method = ("lower: Cheeger gap/2 of (P+P*)/2; upper: "
              + ("sweep cut of its second eigenvector" if sweep <= upper else "Cheeger sqrt(2 gap)"))
    return ConductanceBounds(gap / 2, upper, None, mask, method)
