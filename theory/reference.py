"""High-precision references (mpmath) for the chain figures, and the metastable test chains.

Used by the tests and by ``benchmarks/accuracy_table.py`` (docs/accuracy.md) to check mlmix's
float64 results independently. Each function works at the current mpmath precision
(``mpmath.workdps``): a gap of 1e-k needs more than k digits, since the eigensolver's error is
~10^-dps on entries of size 1. The reference chain is always the one mlmix analyses: the float
off-diagonal entries, with holding probability 1 minus their sum (:mod:`mlmix.theory.chain.markov_chain`).
"""

from __future__ import annotations

from collections.abc import Callable

import mpmath as mp
import networkx as nx
import numpy as np

from mlmix.theory.sources.conditionals import PottsModel, ScoreTable


def mp_chain(P: np.ndarray) -> list[list]:
    """P in mpmath: its off-diagonal entries, and 1 - their sum on the diagonal (exactly)."""
    P = np.asarray(P)
    N = P.shape[0]
    M = [[mp.mpf(P[x, y]) if x != y else mp.mpf(0) for y in range(N)] for x in range(N)]
    for x in range(N):
        M[x][x] = 1 - mp.fsum(M[x])
    return M


def mp_stationary(M: list[list]) -> list:
    """pi M = pi, sum pi = 1 by a bordered linear solve."""
    N = len(M)
    A = mp.matrix(N, N)
    for x in range(N):
        for y in range(N):
            A[x, y] = (1 if x == y else 0) - M[y][x]
    for y in range(N):
        A[N - 1, y] = 1
    b = mp.matrix(N, 1)
    b[N - 1] = 1
    sol = mp.lu_solve(A, b)
    return [sol[i] for i in range(N)]


def mp_gap(S: list[list]) -> mp.mpf:
    """Second smallest eigenvalue of L = I - D^1/2 S D^-1/2 for a reversible S: off-diagonals
    -sqrt(S_xy S_yx), diagonal sum_y S_xy (mpmath.eigsy)."""
    N = len(S)
    L = mp.matrix(N, N)
    for x in range(N):
        for y in range(N):
            if x != y:
                L[x, y] = -mp.sqrt(S[x][y] * S[y][x])
        L[x, x] = mp.fsum(S[x][y] for y in range(N) if y != x)
    return sorted(mp.eigsy(L, eigvals_only=True))[1]


def mp_additive(M: list[list], pi: list) -> list[list]:
    """(M + M*)/2 with M*(x, y) = pi(y) M(y, x) / pi(x)."""
    N = len(M)
    return [[(M[x][y] + pi[y] * M[y][x] / pi[x]) / 2 for y in range(N)] for x in range(N)]


def ising_cycle_gap(n: int, beta: float) -> float:
    """Heat-bath Glauber on the Ising n-cycle, J = 1, h = 0: (1 - tanh(2 beta)) / n, written as
    2 / ((e^{4 beta} + 1) n) so that it does not cancel."""
    with mp.workdps(60):
        return float(2 / ((mp.exp(4 * mp.mpf(beta)) + 1) * n))


def birth_death(m: int = 12, depth: float = 30.0, tilt: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """A biased birth-death chain on 0..2m (Metropolis on the tilted double well
    V(x) = depth (x^2 - 1)^2 + tilt x): pi ∝ exp(-V), wells separated by a barrier of height ``depth``.
    Returns (P, V)."""
    x = np.linspace(-1, 1, 2 * m + 1)
    V = depth * (x**2 - 1) ** 2 + tilt * x
    N = V.size
    P = np.zeros((N, N))
    for k in range(N):
        for j in (k - 1, k + 1):
            if 0 <= j < N:
                P[k, j] = 0.5 * min(1.0, np.exp(V[k] - V[j]))
        P[k, k] = 1 - P[k].sum()
    return P, V


def noisy_ferromagnet() -> ScoreTable:
    """Potts scores on the 4-cycle (two modes) plus N(0, 0.3^2) noise per (site, context, symbol): an
    incompatible (non-reversible) table that is metastable at low temperature."""
    base = ScoreTable.from_conditionals(PottsModel(nx.cycle_graph(4), 2, couplings=1.0))
    rng = np.random.default_rng(0)
    return ScoreTable(base.space, base.table + 0.3 * rng.standard_normal(base.table.shape))


def _mp_offdiagonal(P: np.ndarray, E: np.ndarray | None = None, t: mp.mpf | int = 0) -> list[list]:
    """The off-diagonal entries of P + t E in mpmath (P's floats exactly; the diagonal, a chain's holding
    probability, is never used by the subtraction-free solves below)."""
    N = P.shape[0]
    return [[mp.mpf(float(P[x, y])) + (t * mp.mpf(float(E[x, y])) if E is not None else 0) if x != y else mp.mpf(0)
             for y in range(N)] for x in range(N)]


def mp_gth_stationary(W: list[list]) -> list:
    """pi of the chain with off-diagonal entries W by GTH elimination in mpmath: no subtraction, so every
    entry keeps the working precision, masses of 1e-300 included (where :func:`mp_stationary` cancels)."""
    N = len(W)
    A = [row[:] for row in W]
    for j in range(N - 1, 0, -1):
        e = mp.fsum(A[j][y] for y in range(j))
        for x in range(j):
            if A[x][j]:
                f = A[x][j] / e
                for y in range(j):
                    if y != x:
                        A[x][y] += f * A[j][y]
    pi = [mp.mpf(1)] + [mp.mpf(0)] * (N - 1)
    for j in range(1, N):
        pi[j] = mp.fsum(pi[i] * A[i][j] for i in range(j)) / mp.fsum(A[j][y] for y in range(j))
    s = mp.fsum(pi)
    return [p / s for p in pi]


def mp_absorbed(W: list[list], unknown: list[int], rhs: list) -> list:
    """h over all states: 0 off ``unknown``, and on it (I - W_UU) h_U = rhs (non-negative, one per unknown
    state) by GTH elimination with the flows out of U as exits (subtraction-free, in mpmath)."""
    N, m = len(W), len(unknown)
    inside = set(unknown)
    A = [[W[a][c] if a != c else mp.mpf(0) for c in unknown] for a in unknown]
    out = [mp.fsum(W[a][y] for y in range(N) if y not in inside) for a in unknown]
    b = [mp.mpf(r) for r in rhs]
    e = [mp.mpf(0)] * m
    for j in range(m - 1, -1, -1):
        e[j] = mp.fsum(A[j][y] for y in range(j)) + out[j]
        for x in range(j):
            if A[x][j]:
                f = A[x][j] / e[j]
                for y in range(j):
                    if y != x:
                        A[x][y] += f * A[j][y]
                out[x] += f * out[j]
                b[x] += f * b[j]
    x = [mp.mpf(0)] * m
    for j in range(m):
        x[j] = (b[j] + mp.fsum(A[j][y] * x[y] for y in range(j))) / e[j]
    h = [mp.mpf(0)] * N
    for a, v in zip(unknown, x):
        h[a] = v
    return h


def mp_committor(W: list[list], A: list[int], B: list[int]) -> list:
    """q+(x) = P_x(tau_B < tau_A) (1 on B, 0 on A) in mpmath, subtraction-free."""
    N = len(W)
    C = [x for x in range(N) if x not in A and x not in B]
    q = mp_absorbed(W, C, [mp.fsum(W[x][y] for y in B) for x in C])
    return [mp.mpf(1) if x in B else q[x] for x in range(N)]


def mp_passage_times(W: list[list], target: list[int]) -> list:
    """E_x tau_T (0 on T) in mpmath, subtraction-free."""
    U = [x for x in range(len(W)) if x not in target]
    return mp_absorbed(W, U, [1] * len(U))


def mp_central_difference(quantity: Callable[[list[list]], list], P: np.ndarray, E: np.ndarray, step: str = "1e-20",
                          dps: int = 50) -> list:
    """(f(P + h E) - f(P - h E)) / 2h at ``dps`` digits for a ``quantity`` of the off-diagonal entries
    (``mp_gth_stationary``, or a lambda around :func:`mp_committor` / :func:`mp_passage_times`), the chain
    the float P defines (its holding probabilities are what the rows leave): the sensitivities' reference."""
    with mp.workdps(dps):
        h = mp.mpf(step)
        up, down = quantity(_mp_offdiagonal(P, E, h)), quantity(_mp_offdiagonal(P, E, -h))
        return [(a - b) / (2 * h) for a, b in zip(up, down)]
