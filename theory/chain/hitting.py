"""Hitting probabilities, expected hitting times and committors of sets of states.

tau_A = min{s >= 0 : X_s in A} (0 when the chain starts in A). With B = A^c:

    h_t(x) = P_x(tau_A <= t):  h_0 = 1_A,  h_{s+1} = 1_A + 1_B (P h_s)            (t products),
    k(x)   = E_x tau_A:        k = 0 on A,  (I - P_BB) k_B = 1                    (first-step equations),
    q(x)   = P_x(tau_B < tau_A) (committor): q = 1 on B, 0 on A, (I - P_CC) q_C = P_CB 1, C = (A u B)^c.

Expected times are infinite from states that can reach, avoiding A, a state from which A is
unreachable (returned as inf). The linear systems are non-singular M-matrix systems with
non-negative right-hand sides: on dense sets they are solved by GTH elimination
(:mod:`mlmix.theory.linalg.elimination`) with no subtraction, so every entry keeps its relative accuracy
(escape probabilities of 1e-17 and hitting times of 1e19 steps included, where LU on I - P_BB
returns garbage); on large sparse sets by a Krylov method with its residual reported. Paper P
Prop. 4 and paper G Thm 8 (exit times from a basin) are checked with these functions.

On a matrix-free kernel (:func:`operator_hitting_times`, :func:`operator_committor`): with
r = 1 - (I - P_UU) h_hat and M = (I - P_UU)^-1 >= 0, h - h_hat = M r, so |h - h_hat| <= ||r||_inf M 1
= ||r||_inf h entrywise: the relative error of every entry is at most rho / (1 - rho), rho = ||r||_inf
plus its rounding. Committors: (I - P_CC) q = P 1_B on C = (A u B)^c; the same argument gives
|q - q_hat| <= rho E_x tau_{A u B} entrywise (those hitting times computed and certified too).
Reversible kernels solve the symmetric positive definite forms D^1/2 (I - P_UU) D^-1/2 by conjugate
gradients (from the square-rooted conditionals); others use GMRES. Every solve runs on one process or
sharded (torch.distributed): sets and functions over all states are cut to each process's part, inner
products and maxima are reduced over the processes, and the results are gathered
(:mod:`mlmix.theory.linalg.operator_vectors`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from mlmix.limits import DOUBLING_LIMIT, HITTING_STEPS, HITTING_WORK, MFPT_LIMIT
from mlmix.progress import dense_seconds
from mlmix.progress import steps as progress_steps
from mlmix.theory.chain.backends import Backend, OperatorBackend, matrix_backend
from mlmix.theory.chain.structure import reaches
from mlmix.theory.linalg.absorbed import solve_absorbed
from mlmix.theory.results import EPS, NAMES, VectorResult
from mlmix.validation import Matrix, check_memory, check_state_set, check_steps, check_vector

if TYPE_CHECKING:
    import torch

    from mlmix.theory.chain.markov_chain import Chain
    from mlmix.theory.linalg.operator import TransitionOperator


def hitting_probabilities(P: Matrix, target: np.ndarray, t: int) -> VectorResult:
    """P_x(tau_A <= t) for every start x (1 on A), by t steps of h <- 1_A + 1_{A^c} P h (non-negative
    sums: entrywise relative error <= 2 t d u, d the largest row length). Beyond
    :data:`HITTING_WORK` / nnz(P) steps: h_t is non-decreasing in t with limit h_inf(x) = P_x(tau_A <
    infinity) (a committor, solved subtraction-free), so h_s <= h_t <= h_inf for s <= t; the value is
    h_inf, its relative error bounded by max (h_inf - h_s) / h_inf plus both rounding bounds."""
    A = check_state_set(target, P.shape[0], "target set A")
    t = check_steps(t)
    Ps = sp.csr_array(P)
    d = max(int(np.diff(Ps.indptr).max()), 1)
    budget = max(1, min(HITTING_STEPS, HITTING_WORK // max(Ps.nnz, 1)))
    m = int((~A).sum())
    if m <= DOUBLING_LIMIT and float(m) ** 3 * 2 * math.log2(t + 1) < min(t, budget + 1) * Ps.nnz:
        return _hitting_by_doubling(Ps, A, t)
    steps = min(t, budget)
    h = A.astype(np.float64)
    for _ in range(steps):
        h = np.where(A, 1.0, Ps @ h)
    if steps == t:
        return VectorResult("P_x(tau_A <= t)", h, f"{t} backward steps", 2 * t * d * EPS)
    limit = absorption_probabilities(Ps, A)
    rel_s = 2 * steps * d * EPS
    lower = h / (1 + rel_s)
    upper = limit.value * (1 + (limit.rel_error if limit.rel_error is not None else np.inf))
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.where(limit.value > 0, (upper - lower) / limit.value, 0.0)
    rel = float(gap.max())
    return VectorResult("P_x(tau_A <= t)", limit.value, f"{t} steps exceed the budget of {budget}: the limit "
                        f"P_x(tau_A < inf) ({limit.method}), bracketed by {steps} backward steps from below",
                        rel if np.isfinite(rel) else None)


def _hitting_by_doubling(P: sp.csr_array, A: np.ndarray, t: int) -> VectorResult:
    """h_t on B = A^c as sum_{s<t} Q^s r (Q = P_BB, r = P_BA 1) by binary doubling of (Q^k, S_k):
    k1 steps then k2 give (Q^k1 Q^k2, S_k1 + Q^k1 S_k2). Only non-negative sums and products:
    relative error <= 4 (m + 2) log2(t + 1) u for m = |B|; O(m^3 log t)."""
    B = np.flatnonzero(~A)
    m = B.size
    check_memory(8.0 * m * m * 5, f"hitting probabilities by doubling on {m} states")
    rows = P[B]
    Q = rows[:, B].toarray()
    r = np.asarray(rows[:, np.flatnonzero(A)].sum(axis=1)).ravel()
    RM, RS = np.eye(m), np.zeros(m)
    BM, BS = Q, r
    k = t
    while k:
        if k & 1:
            RM, RS = RM @ BM, RS + RM @ BS
        k >>= 1
        if k:
            BM, BS = BM @ BM, BS + BM @ BS
    h = A.astype(np.float64)
    h[B] = np.minimum(RS, 1.0)
    return VectorResult("P_x(tau_A <= t)", h, f"sum_(s<t) Q^s r by binary doubling ({t} steps)",
                        4 * (m + 2) * np.log2(t + 1.0) * EPS)


def absorption_probabilities(P: Matrix, target: np.ndarray) -> VectorResult:
    """h(x) = P_x(tau_A < infinity): 1 on A, 0 on the states that cannot reach A, elsewhere the
    probability of reaching A before the states that cannot (a finite chain that can still reach A
    does so or leaves that set almost surely)."""
    N = P.shape[0]
    A = check_state_set(target, N, "target set A")
    live = reaches(P, A, ~A) & ~A
    h = A.astype(np.float64)
    if not live.any():
        return VectorResult("P_x(tau_A < inf)", h, "graph search", 0.0)
    x, method, rel, res = solve_absorbed(P, live, [A, ~(A | live)], None, "absorption probabilities")
    h[live] = x
    return VectorResult("P_x(tau_A < inf)", h, method, rel, None, res)


def hitting_time_distribution(P: Matrix, start_law: np.ndarray, target: np.ndarray, t_max: int) -> VectorResult:
    """P_mu(tau_A <= s) for s = 0..t_max from the start law mu (the mass not yet absorbed is pushed
    forward: u_0 = mu 1_B, u_{s+1} = (u_s P) 1_B, value 1 - sum u_s)."""
    A = check_state_set(target, P.shape[0], "target set A")
    t_max = check_steps(t_max, "t_max")
    mu = check_vector(start_law, P.shape[0], "start_law", probability=True)
    check_memory(8.0 * (t_max + 1), f"a hitting-time distribution of {t_max + 1} points")
    PT = P.T
    u = np.where(A, 0.0, mu)
    out = np.empty(t_max + 1)
    for s in range(t_max + 1):
        out[s] = 1.0 - u.sum()
        if s < t_max:
            u = np.where(A, 0.0, PT @ u)
    return VectorResult("P_mu(tau_A <= s)", out, "forward propagation of the unabsorbed mass", None,
                        2 * (t_max + 1) * P.shape[0] * EPS)


def hitting_times_on(backend: Backend, target: np.ndarray) -> VectorResult:
    """E_x tau_A for every start x on any :class:`~mlmix.theory.chain.backends.Backend`: 0 on A (so 0
    everywhere when A is the whole space), inf where A is not hit almost surely; (I - P_RR) k = 1 on the
    states R that reach A surely, by the backend's absorbed solve, whose a-posteriori rho (a matrix-free
    solve) bounds every entry relatively by rho / (1 - rho), as M 1 = k for M = (I - P_RR)^-1."""
    N = backend.n_states
    A = check_state_set(target, N, "target set A")
    B = ~A
    unreachable = B & ~backend.reaches(A, B)
    doomed = backend.reaches(unreachable, B) if unreachable.any() else unreachable
    R = B & ~doomed
    k = np.zeros(N)
    k[doomed] = np.inf
    name = NAMES["hitting_time"]
    if not R.any():
        return VectorResult(name, k, "graph search: every state outside A is in A or cannot reach it", 0.0)
    sol = backend.absorbed_solve(R, [A], np.ones(int(R.sum())), "expected hitting times")
    k[R] = sol.x
    method, rel = sol.method, sol.rel_error
    if sol.rho is not None:
        rel = sol.rho / (1 - sol.rho) if sol.rho < 1 else None
        method += (f"; entrywise error <= rho / (1 - rho), rho = ||r||_inf = {sol.rho:.1e} "
                   "(M = (I - P_UU)^-1 >= 0, M 1 = E tau_A)")
    return VectorResult(name, k, method, rel, None, sol.residual, details=dict(backend.details))


def committor_on(backend: Backend, A: np.ndarray, B: np.ndarray) -> VectorResult:
    """q(x) = P_x(tau_B < tau_A) on any :class:`~mlmix.theory.chain.backends.Backend`: 1 on B, 0 on A; 0
    where B cannot be reached avoiding A; (I - P_CC) q = P_CB 1 on the rest C. An a-posteriori rho (a
    matrix-free solve) bounds |q - q_hat| by rho E_x tau_(A u B) entrywise (those hitting times certified
    too; ``details['max_abs_error']``, ``abs_error`` its sum, ``rel_error`` the entrywise relative bound
    where every q > 0)."""
    N = backend.n_states
    Am = check_state_set(A, N, "A")
    Bm = check_state_set(B, N, "B")
    if (Am & Bm).any():
        raise ValueError("A and B must be disjoint")
    C = ~(Am | Bm)
    q = Bm.astype(np.float64)
    live = C & backend.reaches(Bm, C)
    name = NAMES["committor"]
    if not live.any():
        return VectorResult(name, q, "graph search", 0.0)
    sol = backend.absorbed_solve(live, [Bm, Am | (C & ~live)], None, "committor")
    q[live] = sol.x
    if sol.rho is None:
        return VectorResult(name, q, sol.method, sol.rel_error, None, sol.residual, details=dict(backend.details))
    k = hitting_times_on(backend, ~C)
    if k.rel_error is None or not sol.rho < 1:
        return VectorResult(name, q, sol.method + "; not certified (the residual or E tau_{A u B} is not bounded)",
                            None, None, sol.residual, details=dict(backend.details))
    bound = sol.rho * np.asarray(k.value) * (1 + k.rel_error)
    rel = float(np.max(bound / q)) if (q > 0).all() else None
    return VectorResult(name, q, sol.method + f"; |error| <= rho E_x tau_(A u B) entrywise, rho = {sol.rho:.1e}",
                        rel if rel is not None and rel < 1 else None, float(bound.sum()), sol.residual,
                        details={**backend.details, "max_abs_error": float(bound.max())})


def expected_hitting_times(P: Matrix, target: np.ndarray) -> VectorResult:
    """E_x tau_A for every start x of the chain of the matrix P (:func:`hitting_times_on`)."""
    return hitting_times_on(matrix_backend(P), target)


def committor(P: Matrix, A: np.ndarray, B: np.ndarray) -> VectorResult:
    """q(x) = P_x(tau_B < tau_A) for the chain of the matrix P (:func:`committor_on`)."""
    return committor_on(matrix_backend(P), A, B)


# ------------------------------------------------------------ matrix-free (a TransitionOperator)

def operator_hitting_times(op: TransitionOperator, A: np.ndarray, pi: torch.Tensor | None) -> VectorResult:
    """E_x tau_A for every start x of a matrix-free kernel (the chain irreducible), certified entrywise
    (:func:`hitting_times_on`)."""
    return hitting_times_on(OperatorBackend(op, lambda: pi), A)


def operator_committor(op: TransitionOperator, A: np.ndarray, B: np.ndarray, pi: torch.Tensor | None) -> VectorResult:
    """q(x) = P_x(tau_B < tau_A) of a matrix-free kernel, certified entrywise (:func:`committor_on`)."""
    return committor_on(OperatorBackend(op, lambda: pi), A, B)


def operator_hitting_probabilities(op: TransitionOperator, A: np.ndarray, t: int) -> VectorResult:
    """P_x(tau_A <= t) by t backward steps h <- 1_A + 1_{A^c} P h (non-negative: entrywise relative
    rounding (1 + gamma)^t - 1)."""
    from mlmix.theory.linalg.operator_vectors import gathered, local_part, rounding  # deferred: torch

    inA = local_part(op, np.asarray(A, dtype=bool)).to(op.dtype)
    h = inA.clone()
    for _ in range(t):
        h = op.apply(h, "functions").mul_(1 - inA).add_(inA)
    rel = math.expm1(t * math.log1p(rounding(op)))
    return VectorResult(NAMES["hitting_probabilities"], gathered(op, h), f"{t} backward steps (matrix-free)", rel)


# ------------------------------------------------------------ the questions of a Chain

def chain_hitting_time(chain: Chain, target: np.ndarray) -> VectorResult:
    """The body of :meth:`Chain.hitting_time`: :func:`hitting_times_on` the chain's backend (widened for P's
    subnormal entries, :attr:`~mlmix.theory.chain.chain_facts.ChainFacts.subnormal`)."""
    return chain.facts.rounded_vector(hitting_times_on(chain.facts.backend, target), chain.facts.subnormal[0])


def chain_hitting_probabilities(chain: Chain, target: np.ndarray, t: int) -> VectorResult:
    """The body of :meth:`Chain.hitting_probabilities`."""
    if chain.facts.representation == "operator":
        return operator_hitting_probabilities(chain.op, check_state_set(target, chain.n_states, "target set A"),
                                              check_steps(t))
    return hitting_probabilities(chain.P, target, t)


def chain_committor(chain: Chain, A: np.ndarray, B: np.ndarray) -> VectorResult:
    """The body of :meth:`Chain.committor`: :func:`committor_on` the chain's backend."""
    return committor_on(chain.facts.backend, A, B)


def chain_mean_first_passage_times(chain: Chain, target: np.ndarray | int | None = None) -> VectorResult:
    """The body of :meth:`Chain.mean_first_passage_times`."""
    if target is not None:
        return chain.hitting_time(target)
    N = chain.n_states
    if N > MFPT_LIMIT:
        raise ValueError(f"the full mean-first-passage matrix is computed up to {MFPT_LIMIT} states; "
                         f"this chain has {N}: give a target")

    cols = [chain.hitting_time(np.array([j])) for j in progress_steps(range(N), "mean first passage times", total=N,
                                                            expected=N * dense_seconds(N, 1.0),
                                                            cost=f"{N} states, one solve per target")]
    M = np.stack([c.value for c in cols], axis=1)
    rel = max((c.rel_error or 0.0) for c in cols)
    return VectorResult("mean first passage times E_i tau_j", M, cols[0].method + ", one elimination per target",
                        rel)
