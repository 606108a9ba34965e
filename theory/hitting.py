"""Hitting probabilities within t steps and expected hitting times of a set A.

tau_A = min{ s >= 0 : X_s in A } (so tau_A = 0 when the chain starts in A). With B = A^c:

    h_t(x) = P_x(tau_A <= t):  h_0 = 1_A,  h_{s+1} = 1_A + 1_B (P h_s)          (t matrix-vector products),
    k(x)   = E_x tau_A:        k = 0 on A,  (I - P_BB) k_B = 1                   (first-step equations).

Expected times are infinite from states that can reach, while avoiding A, a state from which A
is unreachable; they are returned as ``inf`` and the linear system is solved on the rest.
Paper P Prop. 4 (k-Gibbs reaches the mode R_1 within T steps) and paper G Thm 8 (exit times
from a basin) are checked with these functions.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse.csgraph import breadth_first_order

from mlmix.errors import ConvergenceError, ReducibleChainError
from mlmix.theory import matrices
from mlmix.theory.matrices import krylov_solve
from mlmix.theory.spectral import is_reversible, resolve_stationary
from mlmix.validation import (
    Matrix,
    check_state_set,
    check_steps,
    check_transition_matrix,
)


def hitting_probabilities(P: Matrix, target: np.ndarray | list | tuple, t: int) -> np.ndarray:
    """P_x(tau_A <= t) for every start x (1 on A), by t steps of h <- 1_A + 1_{A^c} P h."""
    P = check_transition_matrix(P)
    t = check_steps(t, "t")
    A = check_state_set(target, P.shape[0], "target set A", proper=True)
    h = A.astype(np.float64)
    for _ in range(t):
        h = np.where(A, 1.0, P @ h)
    return h


def hitting_time_distribution(P: Matrix, start_law: np.ndarray, target: np.ndarray | list | tuple,
                              t_max: int) -> np.ndarray:
    """P_mu(tau_A <= s) for s = 0, ..., t_max from the start law mu (forward propagation of the
    mass not yet absorbed: u_0 = mu 1_B, u_{s+1} = (u_s P) 1_B, value 1 - sum u_s)."""
    P = check_transition_matrix(P)
    t_max = check_steps(t_max, "t_max")
    A = check_state_set(target, P.shape[0], "target set A", proper=True)
    mu = np.asarray(start_law, dtype=np.float64)
    if mu.shape != (P.shape[0],) or not np.isfinite(mu).all() or (mu < 0).any() or abs(mu.sum() - 1) > 1e-9:
        raise ValueError(f"start_law must be a probability vector over the {P.shape[0]} states")
    PT = P.T
    u = np.where(A, 0.0, mu)
    out = np.empty(t_max + 1)
    for s in range(t_max + 1):
        out[s] = 1.0 - u.sum()
        if s < t_max:
            u = np.where(A, 0.0, PT @ u)
    return out


def _reaches(P: sp.csr_array, sources: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """States x in ``allowed`` (or in ``sources``) with a path x -> ... -> sources inside allowed."""
    N = P.shape[0]
    edges = sp.coo_array(P)
    keep = (edges.data > 0) & allowed[edges.row] & (allowed[edges.col] | sources[edges.col])
    src = np.flatnonzero(sources)
    # reversed graph (y -> x for each x -> y) plus a super-source N -> every source state
    rows = np.concatenate([edges.col[keep], np.full(src.size, N)])
    cols = np.concatenate([edges.row[keep], src])
    G = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(N + 1, N + 1))
    reached = breadth_first_order(G, N, directed=True, return_predecessors=False)
    out = np.zeros(N + 1, dtype=bool)
    out[reached] = True
    return out[:N]


def expected_hitting_times(P: Matrix, target: np.ndarray | list | tuple, pi: np.ndarray | None = None) -> np.ndarray:
    """E_x tau_A for every start x: 0 on A, inf where A is not hit almost surely.

    Solves the first-step equations (I - P_RR) k = 1 on the states R of A^c that hit A a.s.:
    GTH-style elimination (no subtractions, accurate for escape probabilities near 1e-17 and
    hitting times of 1e19 steps) when |R| <= :data:`mlmix.theory.matrices.DENSE_LIMIT`, else Krylov (CG on
    D^{1/2} (I - P_RR) D^{-1/2} when P is reversible with respect to ``pi``, computed when not
    given and the chain is irreducible; GMRES/BiCGSTAB otherwise). ValueError when A is empty or
    the whole space; ConvergenceError when the Krylov solver fails.
    """
    P = check_transition_matrix(P)
    N = P.shape[0]
    A = check_state_set(target, N, "target set A", proper=True)
    B = ~A
    Ps = sp.csr_array(P)
    unreachable = B & ~_reaches(Ps, A, B)
    doomed = _reaches(Ps, unreachable, B) if unreachable.any() else unreachable
    R = B & ~doomed
    k = np.zeros(N)
    k[doomed] = np.inf
    idx = np.flatnonzero(R)
    if idx.size == 0:
        return k
    if idx.size <= matrices.DENSE_LIMIT:
        rows = Ps[idx]
        k[idx] = _eliminate(rows[:, idx].toarray(), np.asarray(rows[:, np.flatnonzero(A)].sum(axis=1)).ravel())
        return k
    k[idx] = _krylov_hitting(Ps, idx, pi)
    return k


def _eliminate(Q: np.ndarray, absorb: np.ndarray) -> np.ndarray:
    """Solve k = 1 + Q k (Q = P restricted to A^c, ``absorb`` = P(x, A)) by Grassmann-Taksar-Heyman
    style state elimination: removing state z rescales by its escape mass
    s_z = P(z, A) + sum_{y not yet removed, y != z} P(z, y) instead of 1 - P(z, z), so only sums and
    products of non-negative numbers occur and escape probabilities of 1e-17 keep full relative
    accuracy, where LU on I - Q returns garbage (even negative times). O(|A^c|^3)."""
    Q, absorb = Q.copy(), absorb.copy()
    m = Q.shape[0]
    cost = np.ones(m)
    escape = np.zeros(m)
    for z in range(m - 1, -1, -1):
        rest = slice(0, z)
        escape[z] = absorb[z] + Q[z, rest].sum()
        f = Q[rest, z] / escape[z]
        Q[rest, rest] += np.outer(f, Q[z, rest])
        absorb[rest] += f * absorb[z]
        cost[rest] += f * cost[z]
    k = np.zeros(m)
    for z in range(m):
        k[z] = (cost[z] + Q[z, :z] @ k[:z]) / escape[z]
    return k


def _krylov_hitting(P: sp.csr_array, idx: np.ndarray, pi: np.ndarray | None) -> np.ndarray:
    sub = sp.csr_array(P[idx][:, idx])
    m = idx.size
    diag = 1.0 - sub.diagonal()
    if pi is None:
        try:
            pi = resolve_stationary(P)
        except (ReducibleChainError, ConvergenceError):
            pi = None
    else:
        pi = resolve_stationary(P, pi)
    if pi is not None and is_reversible(P, pi):
        s = np.sqrt(pi[idx])
        C = sp.csr_array(sub.multiply(s[:, None]).multiply((1.0 / s)[None, :]))
        C = (C + C.T) / 2
        op = spla.LinearOperator((m, m), matvec=lambda v: v - C @ v, dtype=np.float64)
        h, _ = krylov_solve(op, s, spd=True, diagonal=diag, what="expected hitting times")
        return h / s
    op = spla.LinearOperator((m, m), matvec=lambda v: v - sub @ v, dtype=np.float64)
    k, _ = krylov_solve(op, np.ones(m), spd=False, diagonal=diag, what="expected hitting times")
    return k
