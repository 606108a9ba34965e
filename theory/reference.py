"""High-precision references (mpmath) for the chain figures, and the metastable test chains.

Used by the tests and by ``benchmarks/accuracy_table.py`` (docs/accuracy.md) to check mlmix's
float64 results independently. Each function works at the current mpmath precision
(``mpmath.workdps``): a gap of 1e-k needs more than k digits, since the eigensolver's error is
~10^-dps on entries of size 1. The reference chain is always the one mlmix analyses: the float
off-diagonal entries, with holding probability 1 minus their sum (:mod:`mlmix.theory.chain.markov_chain`).
"""

from __future__ import annotations

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
