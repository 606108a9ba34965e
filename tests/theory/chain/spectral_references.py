"""40-digit references for the spectral quantities (mpmath): the chain's matrix with its holding probabilities
1 - the off-diagonal row sum, its stationary law by GTH elimination (subtraction-free: metastable chains keep
their digits), P^t by binary powering, and the closed forms' chains (two-state, rotating cycle, birth-death)."""

import helpers
import mpmath as mp
import numpy as np

mp.mp.dps = 40


def mp_matrix(P: np.ndarray) -> mp.matrix:
    """P with the chain's convention: off-diagonal entries as given, holding 1 - their row sum."""
    n = P.shape[0]
    M = mp.matrix(n, n)
    for i in range(n):
        for j in range(n):
            if i != j:
                M[i, j] = mp.mpf(float(P[i, j]))
        M[i, i] = 1 - mp.fsum(M[i, j] for j in range(n) if j != i)
    return M


def mp_stationary(M: mp.matrix) -> list:
    """pi by Grassmann-Taksar-Heyman elimination on the off-diagonal entries."""
    n = M.rows
    A = [[M[i, j] for j in range(n)] for i in range(n)]
    for k in range(n - 1, 0, -1):
        s = mp.fsum(A[k][j] for j in range(k))
        for i in range(k):
            A[i][k] /= s
        for i in range(k):
            for j in range(k):
                if i != j:
                    A[i][j] += A[i][k] * A[k][j]
    pi = [mp.mpf(1)]
    for k in range(1, n):
        pi.append(mp.fsum(pi[i] * A[i][k] for i in range(k)))
    total = mp.fsum(pi)
    return [p / total for p in pi]


def mp_power(M: mp.matrix, t: int) -> mp.matrix:
    R, S = mp.eye(M.rows), M
    while t:
        if t & 1:
            R = R * S
        t >>= 1
        if t:
            S = S * S
    return R


def mp_correlation(P: np.ndarray, f, g, t: int) -> float:
    """E_pi[f(X_0) g(X_t)] to 40 digits."""
    M = mp_matrix(P)
    pi = mp_stationary(M)
    h = mp_power(M, t) * mp.matrix([mp.mpf(float(x)) for x in g])
    return mp.fsum(pi[i] * mp.mpf(float(f[i])) * h[i] for i in range(M.rows))


def mp_law(P: np.ndarray, mu, t: int) -> list:
    """mu P^t to 40 digits."""
    M = mp_matrix(P)
    row = mp.matrix([[mp.mpf(float(x)) for x in mu]]) * mp_power(M, t)
    return [row[0, j] for j in range(M.rows)]


def rotating_cycle(n: int, p: float) -> np.ndarray:
    """P(i, i + 1 mod n) = p, holding 1 - p: non-reversible, eigenvalues 1 - p + p exp(2 pi i k / n)."""
    P = np.eye(n) * (1 - p)
    for i in range(n):
        P[i, (i + 1) % n] = p
    return P


def birth_death(up, down) -> np.ndarray:
    """The chain on 0..n with P(j, j + 1) = up[j], P(j + 1, j) = down[j] (reversible)."""
    n = len(up) + 1
    P = np.zeros((n, n))
    for j, (u, d) in enumerate(zip(up, down)):
        P[j, j + 1], P[j + 1, j] = u, d
    return P + np.diag(1 - P.sum(axis=1))


def random_chain(seed: int, n: int, reversible: bool, tiny: float = 1.0) -> np.ndarray:
    """:func:`helpers.random_chain` with random weights when reversible (pi proportional to them)."""
    return helpers.random_chain(seed, n, reversible, tiny, weighted=True)
