"""Exact Wasserstein distance W1 between two laws on V^n with the Hamming cost, as a certified interval.

    W1(mu, nu) = min over couplings gamma of mu and nu of sum gamma(x, y) d_H(x, y)

is a linear programme (scipy ``linprog``, HiGHS). Two formulations, chosen by size (Beckmann also when HiGHS rejects the
Kantorovich programme of near-deterministic laws as infeasible):

* **Kantorovich on the supports** (few states carry mass, e.g. one Glauber step from x and from y:
  at most n(|V|-1)+1 states each): variables gamma(x, y) for x in supp mu, y in supp nu; many such
  pairs are solved as one block-diagonal programme.
* **Beckmann flow on the Hamming graph** (full supports, e.g. t-step laws): d_H is the shortest-path
  metric of the Hamming graph (unit edges), so W1 = min sum_e |f_e| over flows f on its edges with
  divergence mu - nu: 2 |E| = N n (|V|-1) variables instead of N^2.

Certificate: the returned (lower, upper) enclose the true W1 whatever the solver's tolerances.
``upper`` is the cost of the primal solution plus n times the L1 norm of its constraint residual
(the mass left unmatched moves at most n steps); ``lower`` is the dual objective of the solver's
potential made feasible (the c-transform for Kantorovich, division by its Lipschitz constant for
Beckmann), a feasible dual point.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from mlmix.errors import NumericalError
from mlmix.theory.sources.space import StateSpace

#: The largest state space this module accepts: the Beckmann programme has N n (|V|-1) sparse flow
#: variables (HiGHS: ~0.5 s at 729 states, ~3 s at 2187, ~15 s at 4096 on one core).
MAX_STATES = 4096

#: Allowance for the rounding of the final sums (per unit of transport distance).
ROUNDOFF = 1e-14

_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def hamming_edges(space: StateSpace) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges (u, w) of the Hamming graph of V^n (w = u with one site changed)."""
    idx = np.arange(space.size)
    us, ws = [], []
    for i in range(space.length):
        nb = space.neighbours(idx, i)
        for v in range(space.vocab_size):
            moved = nb[:, v] != idx
            us.append(idx[moved])
            ws.append(nb[moved, v])
    return np.concatenate(us), np.concatenate(ws)


def _block(mu: np.ndarray, nu: np.ndarray, space: StateSpace, support_tol: float):
    """Kantorovich LP data on the supports: cost, constraint matrix, right-hand side, supports."""
    a, b = np.flatnonzero(mu > support_tol), np.flatnonzero(nu > support_tol)
    C = space.hamming(a[:, None], b[None, :]).astype(np.float64)
    m, k = a.size, b.size
    rows = np.concatenate([np.repeat(np.arange(m), k), m + np.tile(np.arange(k), m)])
    cols = np.concatenate([np.arange(m * k), np.arange(m * k)])
    A = sp.csr_array((np.ones(2 * m * k), (rows, cols)), shape=(m + k, m * k))
    p, q = mu[a], nu[b]
    return C, A, np.concatenate([p, q * (p.sum() / q.sum())]), p, q


def _kantorovich_many(pairs: list[tuple[np.ndarray, np.ndarray]], space: StateSpace,
                      support_tol: float) -> tuple[np.ndarray, np.ndarray]:
    """One block-diagonal LP for many pairs: the sum of independent programmes is minimised block by
    block, so each block of the optimum is optimal for its own pair."""
    blocks = [_block(mu, nu, space, support_tol) for mu, nu in pairs]
    res = linprog(np.concatenate([C.ravel() for C, *_ in blocks]), A_eq=sp.block_diag([A for _, A, *_ in blocks],
                  format="csr"), b_eq=np.concatenate([b for _, _, b, _, _ in blocks]), bounds=(0, None),
                  method="highs", options=_OPTIONS)
    if res.status != 0:
        raise NumericalError(f"W1 linear programme failed: {res.message}")
    n = space.length
    lower, upper = np.empty(len(pairs)), np.empty(len(pairs))
    x_off = y_off = 0
    for k, ((C, A, _, p, q), (mu, nu)) in enumerate(zip(blocks, pairs)):
        size, rows = C.size, A.shape[0]
        gamma = np.clip(res.x[x_off:x_off + size], 0, None)
        duals = res.eqlin.marginals[y_off:y_off + rows]
        x_off, y_off = x_off + size, y_off + rows
        # the masses below support_tol are left out: they move at most n steps
        dropped = float(mu[mu <= support_tol].sum() + nu[nu <= support_tol].sum())
        residual = float(np.abs(A @ gamma - np.concatenate([p, q])).sum())
        upper[k] = float(C.ravel() @ gamma) + n * (residual + dropped) + ROUNDOFF * n
        u = duals[:p.size]
        v = np.min(C - u[:, None], axis=0)  # c-transform: u_i + v_j <= C_ij holds exactly
        lower[k] = max(0.0, float(p @ u + q @ v) - n * dropped - ROUNDOFF * n)
    return lower, upper


def _beckmann(mu: np.ndarray, nu: np.ndarray, space: StateSpace) -> tuple[float, float]:
    u, w = hamming_edges(space)
    E, N = u.size, space.size
    A = sp.csr_array((np.concatenate([np.ones(E), -np.ones(E)]), (np.concatenate([u, w]),
                      np.concatenate([np.arange(E), np.arange(E)]))), shape=(N, E))
    b = mu - nu
    b = b - b.mean()  # the divergence of a flow sums to 0; the shift is within the residual below
    res = linprog(np.ones(E), A_eq=A, b_eq=b, bounds=(0, None), method="highs", options=_OPTIONS)
    if res.status != 0:
        raise NumericalError(f"W1 linear programme failed: {res.message}")
    f = np.clip(res.x, 0, None)
    residual = float(np.abs(A @ f - (mu - nu)).sum())
    upper = float(f.sum()) + space.length * (residual + ROUNDOFF)
    phi = res.eqlin.marginals
    lipschitz = max(1.0, float(np.abs(phi[u] - phi[w]).max()))
    lower = float((mu - nu) @ phi) / lipschitz - space.length * ROUNDOFF
    return max(0.0, lower), upper


def hamming_w1(pairs: list[tuple[np.ndarray, np.ndarray]], space: StateSpace,
               support_tol: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) arrays enclosing W1(mu, nu) for each pair, Hamming cost on ``space`` (at most
    :data:`MAX_STATES` states; a Beckmann programme at 2187 states takes a few seconds). Pairs with small supports share one block-diagonal Kantorovich programme; the others
    get a Beckmann programme each."""
    if space.size > MAX_STATES:
        raise ValueError(f"exact W1 linear programmes are limited to {MAX_STATES} states, got {space.size}")
    pairs = [(np.asarray(mu, dtype=np.float64), np.asarray(nu, dtype=np.float64)) for mu, nu in pairs]
    small = [np.count_nonzero(mu > support_tol) * np.count_nonzero(nu > support_tol) <= 2 * space.size * space.length
             for mu, nu in pairs]
    lower, upper = np.empty(len(pairs)), np.empty(len(pairs))
    idx = [k for k, s in enumerate(small) if s]
    if idx:
        try:
            lower[idx], upper[idx] = _kantorovich_many([pairs[k] for k in idx], space, support_tol)
        except NumericalError:  # HiGHS can call supports with masses spanning 1e-28..1 infeasible: the flow
            # formulation (full supports, divergence right-hand side) solves them
            small = [False] * len(pairs)
    for k in (k for k, s in enumerate(small) if not s):
        lower[k], upper[k] = _beckmann(*pairs[k], space)
    return lower, upper
