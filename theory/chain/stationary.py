"""The stationary law pi P = pi of a chain with one closed class, to relative accuracy in every entry.

* Reversible chains (Kolmogorov's criterion, decided in log space): pi ∝ exp(phi) with phi built
  along a spanning tree from phi(y) - phi(x) = log P(x, y) - log P(y, x). Any size, O(nnz); every
  entry keeps its relative accuracy (as a logarithm even below 1e-308).
* Dense non-reversible chains: GTH state elimination (:mod:`mlmix.theory.linalg.elimination`), entrywise
  relative accuracy, logarithms exact where pi underflows.
* Large sparse non-reversible chains: a Krylov solve (replaced by GTH, up to
  :data:`~mlmix.limits.DENSE_STATIONARY_LIMIT` states, where it fails to converge or to certify) of the grounded system A x = b,
  A = (I - P_RR)^T, b = P_zR^T (x = pi_R / pi_z, a non-singular M-matrix system whose solution is
  positive), checked afterwards: non-negative and with residual ||pi P - pi||_1 below the target;
  otherwise power iteration polishes it, and failing that a ConvergenceError (never an eigenvector
  with negative entries).

Accuracy of a non-reversible law: the a-posteriori certificate of :func:`certified_error` (entrywise,
rigorous: residual plus its rounding, pushed through A^-1 >= 0 by a verified supersolution); for
GTH the smaller of it and O'Cinneide's worst case 8 N^3 u. Where the certificate cannot be
verified (a Krylov solve cannot resolve the tiny entries of a metastable law) ``rel_error`` is None
and the accuracy is the residual ||pi P - pi||_1 (normwise).

A chain with transient states and a single closed class C has the unique law that is zero off C
(computed on C). Several closed classes: ReducibleChainError naming them.

On a matrix-free kernel (:class:`~mlmix.theory.kernels.operators.KernelOperator`,
:func:`operator_stationary`): reversible (compatible source), log pi = log mu_T - log Z exactly, from
the joint in log space (entrywise relative accuracy of a few ulps of |log pi|). Otherwise GMRES on
(I - P^T + u 1^T) pi = u (u uniform; the solution has sum 1 and solves pi P = pi), with the residual
r = pi P - pi reported and the entrywise certificate of :func:`certify_stationary`: the M-matrix
supersolution argument of :func:`certify_supersolution` with A = (I - P^T) grounded at z applied
matrix-free (A v = v - P^T v, its rounding <= gamma (v + P^T v) for v >= 0,
:func:`~mlmix.theory.linalg.operator_vectors.rounding`) and the solves A v = c by GMRES on the
regularised system (I - P^T + u 1^T) y = c'. Where that fails (a metastable law), the a-posteriori
bound of :func:`stationary_error_bound` (with f = (pi_hat - pi) / pi, (I - P*) f = -r / pi,
E(f, f) >= gamma Var_pi(f))

    ||pi_hat - pi||_1 <= ||r / pi||_{L^2(pi)} / gamma,
    |pi_hat(x) / pi(x) - 1| <= ||r / pi||_{L^2(pi)} / (gamma sqrt(pi(x)))

evaluated at pi_hat and the computed additive gap gamma (first order).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse.csgraph import breadth_first_order
from scipy.special import logsumexp

from mlmix.errors import ConvergenceError
from mlmix.limits import DENSE_STATIONARY_LIMIT
from mlmix.progress import Convergence
from mlmix.theory.chain.structure import Structure, chain_structure, tree_depths
from mlmix.theory.linalg.elimination import eliminate
from mlmix.theory.linalg.matrices import to_dense
from mlmix.theory.results import EPS, NAMES, VectorResult
from mlmix.validation import Matrix, check_memory, check_real, check_transition_matrix

if TYPE_CHECKING:
    import torch

    from mlmix.theory.chain.markov_chain import Chain
    from mlmix.theory.linalg.operator import TransitionOperator

#: Relative residual target of the iterative (sparse) stationary solve.
ITERATIVE_RTOL = 1e-12


def log_potential(P: Matrix) -> tuple[np.ndarray, np.ndarray] | None:
    """(phi, err) with pi ∝ exp(phi) when P is reversible, else None (Kolmogorov's criterion).

    phi is accumulated along a BFS spanning tree of the transition graph from the log-ratios
    log P(x, y) - log P(y, x), then every edge is checked in log space (so violations among states
    of tiny mass are seen). ``err[x]`` bounds the rounding error of phi(x) (summed along its tree
    path). None also when some P(x, y) > 0 has P(y, x) = 0, or the graph is not connected.
    """
    N = P.shape[0]
    if N == 1:
        return np.zeros(1), np.zeros(1)
    A = sp.csr_array(P, copy=True)
    A.setdiag(0.0)
    A.eliminate_zeros()
    A.sort_indices()
    AT = sp.csr_array(A.T)
    AT.sort_indices()
    if A.nnz != AT.nnz or not (np.array_equal(A.indptr, AT.indptr) and np.array_equal(A.indices, AT.indices)):
        return None
    la, lat = np.log(A.data), np.log(AT.data)
    ratio = la - lat
    edge_err = 2 * EPS * (np.abs(la) + np.abs(lat) + np.abs(ratio))
    order, pred = breadth_first_order(A, 0, directed=False, return_predecessors=True)
    if order.size < N:
        return None
    rows = np.repeat(np.arange(N, dtype=np.int64), np.diff(A.indptr))
    keys = rows * N + A.indices
    child = order[1:]
    at = np.searchsorted(keys, pred[child].astype(np.int64) * N + child)
    inc, inc_err = np.zeros(N), np.zeros(N)
    inc[child], inc_err[child] = ratio[at], edge_err[at]
    phi = tree_depths(pred, 0, inc)
    err = tree_depths(pred, 0, inc_err) + EPS * np.abs(phi)
    defect = np.abs(ratio - (phi[A.indices] - phi[rows]))
    if defect.size and (defect > 1e-9 * (1.0 + np.abs(phi).max())).any():
        return None
    return phi - phi.max(), err


def stationary_law(P: Matrix, structure: Structure | None = None) -> VectorResult:
    """The unique stationary law of P (validated here), with its method and accuracy."""
    P = check_transition_matrix(P)
    return compute_stationary(P, structure or chain_structure(P))


def stationary_distribution(P: Matrix) -> np.ndarray:
    """The stationary law as a plain array (:attr:`mlmix.theory.chain.markov_chain.Chain.stationary`)."""
    return np.asarray(stationary_law(P))


def compute_stationary(P: Matrix, structure: Structure, dense_limit: int = DENSE_STATIONARY_LIMIT) -> VectorResult:
    """As :func:`stationary_law` for an already validated P and its structure; non-reversible chains of
    at most ``dense_limit`` states use GTH, larger ones the Krylov solve. The one choice between them
    is made here: a Krylov law that does not converge or whose entrywise certificate fails (a
    metastable chain, whose tiny entries it cannot resolve and whose small residual bounds nothing)
    is replaced by GTH's up to :data:`~mlmix.limits.DENSE_STATIONARY_LIMIT` states, whatever
    ``dense_limit`` says."""
    N = P.shape[0]
    C = structure.recurrent_class()
    if C.size < N:
        sub = (P[C][:, C] if not sp.issparse(P) else sp.csr_array(P)[C][:, C])
        inner = compute_stationary(sub, chain_structure(sub), dense_limit)
        pi, logpi = np.zeros(N), np.full(N, -np.inf)
        pi[C], logpi[C] = inner.value, inner.log_value
        return VectorResult("stationary law", pi, inner.method + f"; zero on the {N - C.size} transient states",
                            inner.rel_error, inner.abs_error, _residual(P, pi), logpi, dict(inner.details))
    pot = log_potential(P)
    if pot is not None:
        phi, err = pot
        logpi = phi - logsumexp(phi)
        rel = float(np.expm1(err.max() + N * EPS))
        return _result(P, logpi, "detailed balance along a spanning tree (reversible; log space)", rel)
    if N <= dense_limit:
        return _gth(P)
    try:
        law = _iterative(sp.csr_array(P))
    except ConvergenceError as err:
        if N > DENSE_STATIONARY_LIMIT:
            raise
        return _gth(P, f"the Krylov solve did not converge ({err})")
    if law.rel_error is None and N <= DENSE_STATIONARY_LIMIT:
        return _gth(P, "the Krylov law's entrywise certificate failed")
    return law


def _gth(P: Matrix, why: str = "") -> VectorResult:
    """GTH state elimination on the dense form of P, with the smaller of the a-posteriori certificate
    and O'Cinneide's worst case as its entrywise bound; ``why`` says why a sparse chain came here."""
    N = P.shape[0]
    dense = to_dense(P)
    el = eliminate(dense)
    logpi = el.log_stationary()
    # O'Cinneide (1993): GTH's entrywise relative error is at most about 8 N^3 u (a worst case)
    worst = 8.0 * N**3 * EPS
    cert = certified_error(dense, logpi, int(el.order[0]), el.solve_transposed)
    how = "a-posteriori certificate" if cert < worst else "O'Cinneide's worst case 8 N^3 u"
    where = f"dense; log space; {why}" if why else "dense; log space"
    return _result(P, logpi, f"GTH state elimination ({where}); error bound: {how}", min(cert, worst, 1.0))


def certified_error(P: Matrix, logpi: np.ndarray, z: int, solve: Callable[[np.ndarray], np.ndarray]) -> float:
    """A rigorous bound on max_x |pi_hat(x) / pi(x) - 1| for pi_hat = exp(logpi) (inf when it cannot
    be certified), P irreducible with the convention that its diagonal is 1 minus the off-diagonal sum.

    Grounded at z, x = pi_R / pi_z solves A x = b with A = diag(d) - P_RR^T (d_i the off-diagonal row
    sums of P), a non-singular M-matrix, so A^{-1} >= 0, and b = P_zR^T. With r = b - A x_hat,
    |x - x_hat| = |A^{-1} r| <= A^{-1} s for s = |fl(r)| + gamma (b + |A| x_hat) (the rounding of r).
    Any v with A v >= s has v >= A^{-1} s, so v bounds the error entrywise: delta = max v / x_hat and
    |pi_hat / pi - 1| <= 2 delta / (1 - delta). ``solve(c)`` approximates the full-length solution
    of A v = c (v_z = 0); v solves it for s plus a margin that covers the rounding of the check
    fl(A v) - gamma |A| v >= s, the margin (and, for an inexact solve, s itself) enlarged up to four
    times before giving up.
    """
    return _certify(*_off_diagonal(P), logpi, z, solve)


def _off_diagonal(P: Matrix) -> tuple[Matrix, np.ndarray, int]:
    """(P_off^T, d, terms): the transposed off-diagonal part of P (one CSR copy, or a view of one
    dense copy), its row sums d, and the longest of those sums and of the sums in P_off^T x (a row or
    a column of P_off), which sets the rounding constant."""
    N = P.shape[0]
    if sp.issparse(P):
        offT = sp.csr_array(sp.csr_array(P).T)
        offT.setdiag(0.0)
        offT.eliminate_zeros()
        d = np.bincount(offT.indices, offT.data, minlength=N)
        terms = max(np.diff(offT.indptr).max(initial=0), np.bincount(offT.indices, minlength=N).max(initial=0))
        return offT, d, int(terms)
    off = np.array(P, dtype=np.float64)
    np.fill_diagonal(off, 0.0)
    nz = off != 0
    return off.T, off.sum(axis=1), int(max(nz.sum(axis=0).max(initial=0), nz.sum(axis=1).max(initial=0)))


def _certify(offT: Matrix, d: np.ndarray, terms: int, logpi: np.ndarray, z: int,
             solve: Callable[[np.ndarray], np.ndarray]) -> float:
    """:func:`certified_error` from the pieces of :func:`_off_diagonal`: A v computed as d v - P_off^T v,
    its rounding bounded by gamma |A| v."""
    N = d.size
    k = terms + 4
    gamma = 2 * k * EPS / (1 - k * EPS)
    R = np.ones(N, dtype=bool)
    R[z] = False

    def apply(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # (A v, gamma |A| v) on the full length, row z dropped
        flow = offT @ v
        return (d * v - flow)[R], gamma * (d * v + flow)[R]

    return certify_supersolution(apply, logpi, z, solve)


def certify_supersolution(apply: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], logpi: np.ndarray,
                          z: int | None, solve: Callable[[np.ndarray], np.ndarray], *,
                          log_z: float | None = None,
                          reduce: Callable[[float, str], float] | None = None) -> float:
    """The bound of :func:`certified_error` from applications of A = (I - P^T) grounded at z alone (no
    matrix needed): ``apply(v)`` returns, for v >= 0 with v_z = 0 on the full length, fl(A v) on the
    states other than z and a bound on its rounding error there; ``solve(c)`` approximates the
    full-length solution of A v = c (v_z = 0). With x = pi_hat / pi_hat_z (x_z = 1, so
    (I - P^T) x restricted to R is A x_R - b), s = |fl((I - P^T) x)_R| + its rounding bound, and a
    verified supersolution fl(A v) - rounding >= s, delta = max v / x bounds the error (A^-1 >= 0).

    Sharded vectors: ``logpi`` is this process's slice, ``z`` the local index of the ground state on
    the process that holds it (None elsewhere), ``log_z`` = log pi_hat_z on every process, and
    ``reduce(value, op)`` ('sum', 'min', 'max') combines a number over the processes; ``apply`` and
    ``solve`` are then collective."""
    def combine(value: float, op: str) -> float:
        return value if reduce is None else reduce(value, op)

    N = int(combine(logpi.size, "sum"))
    with np.errstate(over="ignore"):
        x = np.exp(logpi - (logpi[z] if log_z is None else log_z))
    R = np.ones(logpi.size, dtype=bool)
    if z is not None:
        R[z] = False
    if not combine(float(np.isfinite(x).all() and (x[R] > 0).all()), "min"):
        return np.inf
    Ax, errAx = apply(x)  # (offT @ x)_i carries b_i = P_zi through x_z = 1
    s = np.zeros(logpi.size)
    s[R] = np.abs(Ax) + errAx
    v = solve(s)
    for k in range(4):
        if not combine(float(np.isfinite(v).all()), "min"):  # the solve overflowed or broke down
            return np.inf
        _, errAv = apply(v)
        rhs = s * (1 + k / 2)  # from the second try on, slack for an inexact solve
        rhs[R] += 4.0 ** (k + 1) * errAv
        v = np.clip(solve(rhs), 0.0, None)
        if not combine(float(np.isfinite(v).all()), "min"):
            return np.inf
        if z is not None:
            v[z] = 0.0
        Av, errAv = apply(v)
        if combine(float((Av - errAv >= s[R]).all()), "min"):
            delta = combine(float((v[R] / x[R]).max(initial=0.0)), "max")
            return 2 * delta / (1 - delta) + N * EPS if delta < 0.5 else np.inf
    return np.inf


def _result(P: Matrix, logpi: np.ndarray, method: str, rel: float) -> VectorResult:
    """pi = exp(log pi): exponentiating adds a relative error of |log pi| u per entry."""
    pi = np.exp(logpi)
    rel = min(rel + 2 * EPS * float(np.abs(logpi[np.isfinite(logpi)]).max(initial=0.0)), 1.0)
    return VectorResult("stationary law", pi, method, rel, None, _residual(P, pi), logpi)


def _residual(P: Matrix, pi: np.ndarray) -> float:
    return float(np.abs(P.T @ pi - pi).sum())


def _iterative(P: sp.csr_array) -> VectorResult:
    """Grounded Krylov solve with checks (module docstring). A is applied from P_off^T (no grounded
    copy is built), and the same pieces serve the certificate."""
    # deferred: the Krylov engine imports torch, which dense chains never load
    from mlmix.theory.linalg.krylov import bicgstab, gmres

    N = P.shape[0]
    check_memory(8.0 * (P.nnz * 1.5 + 70 * N), f"iterative stationary solve of {N} states")
    z = int(np.argmax(P.diagonal()))  # ground at a state that is hard to leave: usually heavy
    R = np.ones(N, dtype=bool)
    R[z] = False
    offT, d, terms = _off_diagonal(P)
    dR = d[R]

    def grounded(v: np.ndarray) -> np.ndarray:  # A v = d_R v - (P_off^T [v; 0])_R
        full = np.zeros(N)
        full[R] = v
        return dR * v - (offT @ full)[R]

    A = spla.LinearOperator((N - 1, N - 1), matvec=grounded, dtype=np.float64)
    unit = np.zeros(N)
    unit[z] = 1.0
    b = (offT @ unit)[R]
    M = spla.LinearOperator(A.shape, matvec=lambda v: v / dR, dtype=np.float64)

    def krylov(rhs: np.ndarray, restarts: int = 200) -> tuple[np.ndarray, str]:
        sol = gmres(A, rhs, preconditioner=M, restart=50, rtol=ITERATIVE_RTOL, max_matvecs=51 * restarts,
                    patience=restarts)
        x = sol.x.numpy()
        if sol.converged and not (x < -1e-10 * max(x.max(), 1.0)).any():
            return x, "GMRES(50)"
        sol = bicgstab(A, rhs, x0=np.clip(x, 0, None), preconditioner=M, rtol=ITERATIVE_RTOL,
                       max_matvecs=2 * min(20 * N, 50 * restarts))
        return sol.x.numpy(), "BiCGSTAB"

    x, solver = krylov(b)
    if not np.isfinite(x).all():  # a breakdown: NaN or inf is no law (and would pass every check below)
        raise ConvergenceError(f"stationary law of {N} states: the Krylov solve ({solver}) broke down with "
                               "non-finite entries")
    method = f"{solver} on the grounded system (diag(d) - P_RR^T) x = P_zR^T, Jacobi preconditioned"
    pi = np.empty(N)
    pi[R], pi[z] = np.clip(x, 0.0, None), 1.0
    pi /= pi.sum()
    res = _residual(P, pi)
    if res > 1e-9:  # polish by power iteration (keeps pi non-negative)
        for _ in range(2000):
            pi = P.T @ pi
            pi /= pi.sum()
            res = _residual(P, pi)
            if res <= 1e-9:
                method += ", polished by power iteration"
                break
    if res > 1e-9 or (pi < 0).any():
        raise ConvergenceError(f"stationary law of {N} states: the iterative solve reached residual "
                               f"||pi P - pi||_1 = {res:.2g} only (metastable chain?); use a dense limit that "
                               "fits (GTH) or the matrix-free engine")
    with np.errstate(divide="ignore"):
        logpi = np.log(pi)

    # The certificate's solves A v = c spread over all states, where the grounded system may converge
    # slowly: first (I - P^T) y = c' (c'_z = -sum c_R) with the well-conditioned B = I - P^T + u 1^T
    # (B y = (I - P^T) y when 1^T c' = 0), v = y - (y_z / pi_z) pi; where that loses the smallest
    # entries, the grounded system itself (at most 20 restarts). The certificate's check covers
    # whatever a solve misses.
    u = np.full(N, 1.0 / N)
    B = spla.LinearOperator((N, N), matvec=lambda y: d * y - offT @ y + u * y.sum(), dtype=np.float64)
    MB = spla.LinearOperator((N, N), matvec=lambda y: y / (d + u), dtype=np.float64)

    def regularised(c: np.ndarray) -> np.ndarray:
        rhs = c.copy()
        rhs[z] = -c[R].sum()
        y = gmres(B, rhs, preconditioner=MB, restart=50, rtol=ITERATIVE_RTOL, max_matvecs=51 * 20, patience=20).x.numpy()
        return y - (y[z] / pi[z]) * pi

    def grounded_solve(c: np.ndarray) -> np.ndarray:
        out = np.zeros(N)
        out[R] = krylov(c[R], restarts=20)[0]
        return out

    rel = np.inf
    if np.isfinite(logpi).all():
        for solve in (regularised, grounded_solve):
            rel = _certify(offT, d, terms, logpi, z, solve)
            if rel < 1:
                break
    if rel < 1:
        return _result(P, logpi, method + "; error bound: a-posteriori certificate", rel)
    return VectorResult("stationary law", pi, method, None, None, res, logpi,
                        {"accuracy": "normwise: residual ||pi P - pi||_1 (the entrywise certificate failed: "
                                     "entries far below it are not resolved relatively)"})


def log_space_stationary(L: np.ndarray) -> VectorResult:
    """The stationary law of an irreducible chain given by the logarithms of its off-diagonal entries
    L (N, N; -inf where P(x, y) = 0; the diagonal is ignored, as the holding probability is 1 minus
    the row's moves), by GTH state elimination carried out in log space, so that entries far below
    the float64 range (exp(-800)) keep their weight:

        for k = N-1, ..., 1:  s_k = logsumexp_{j<k} L[k, j],
                              L[i, j] <- logaddexp(L[i, j], L[i, k] + L[k, j] - s_k)   (i, j < k),
        log x_0 = 0,  log x_k = logsumexp_{i<k}(log x_i + L[i, k]) - s_k,   log pi = log x - logsumexp(log x).

    Subtraction-free like GTH (O'Cinneide's entrywise bound 8 N^3 u), with each product or quotient
    an addition of logarithms whose magnitude stays below N (1 + max|L|) (the eliminated entries are
    transition probabilities of censored chains, at least min P^N), so the relative error of every
    entry of pi is at most expm1(8 N^3 eps N (2 + max|L|)) (None when that is not below 1). ``value``
    underflows where pi does; ``log_value`` does not."""
    A = np.array(L, dtype=np.float64)
    N = A.shape[0]
    check_memory(16.0 * N * N, f"log-space elimination on {N} states")
    np.fill_diagonal(A, -np.inf)
    s = np.zeros(N)
    with np.errstate(invalid="ignore"):
        for k in range(N - 1, 0, -1):
            s[k] = logsumexp(A[k, :k])
            if not np.isfinite(s[k]):
                raise ValueError("log-space elimination needs an irreducible chain")
            A[:k, :k] = np.logaddexp(A[:k, :k], A[:k, k:k + 1] + A[k:k + 1, :k] - s[k])
    logx = np.zeros(N)
    for k in range(1, N):
        logx[k] = logsumexp(logx[:k] + A[:k, k]) - s[k]
    logpi = logx - logsumexp(logx)
    finite = np.abs(np.asarray(L)[np.isfinite(L)])
    delta = 8.0 * N**3 * EPS * N * (2.0 + float(finite.max(initial=0.0)))
    rel = float(np.expm1(delta)) if delta < 0.5 else None
    return VectorResult("stationary law", np.exp(logpi), "GTH state elimination in log space on the logarithms of "
                        f"the transition probabilities (N = {N}); relative error <= expm1(8 N^4 eps (2 + max|log P|))",
                        rel, None, None, logpi)


# ------------------------------------------------------------ matrix-free (a TransitionOperator)

#: Relative residual of the GMRES solve for a non-reversible stationary law.
STATIONARY_RTOL = 1e-13

#: Steps pi <- pi P tried to clear round-off below zero from a GMRES law before giving up.
SMOOTHING_STEPS = 32


def _l1_residual(op: TransitionOperator, pi: torch.Tensor) -> float:
    from mlmix.theory.linalg.operator_vectors import global_total  # deferred: torch

    out = op.apply(pi, "measures")
    return global_total(op, out.sub_(pi).abs_())


def operator_stationary(op: TransitionOperator, *, rtol: float = STATIONARY_RTOL, progress: bool = False) -> VectorResult:
    """The stationary law of ``op`` over this process's states (see the module docstring).

    An operator that knows its joint law (``op.log_joint``: a reversible kernel on a compatible source):
    exact from log mu_T (``rel_error`` bounds the entrywise relative error from the rounding of log mu).
    Otherwise (a non-reversible kernel, an assembled matrix) GMRES; ``residual`` = ||pi P - pi||_1, and ``abs_error`` /
    ``rel_error`` stay None until :func:`stationary_error_bound` supplies the gap.
    Raises ConvergenceError when GMRES stalls above ``rtol``.
    """
    import torch  # deferred: only the matrix-free route loads torch

    from mlmix.theory.linalg.krylov import gmres
    from mlmix.theory.linalg.operator_vectors import global_total

    rtol = check_real(rtol, "rtol", minimum=0.0, open_min=True)
    comm = op.comm
    if op.log_joint is not None:
        log_mu, err = op.log_joint
        lm = log_mu.reshape(-1)
        m = comm.allreduce_(lm.max().clone(), "max")
        z = global_total(op, (lm - m).exp())
        log_pi = lm - (m + math.log(z))
        n_total = op.n_states
        rel = math.expm1(2 * err + 4 * EPS * (float(comm.allreduce_(log_pi.abs().max().clone(), "max"))
                                               + math.log(n_total) + 1))
        pi = log_pi.exp()
        residual = _l1_residual(op, pi.to(op.dtype))
        return VectorResult(NAMES["stationary"], pi.cpu().numpy(), "exact from the joint law in log space: log pi = "
                            "log mu_T - log Z (reversible heat-bath kernel)", rel_error=rel, residual=residual,
                            log_value=log_pi.cpu().numpy(), details={"representation": "operator"})
    N = op.n_states
    u = torch.full((op.local_size,), 1.0 / N, dtype=op.dtype, device=op.device)

    def system(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:  # (I - P^T + u 1^T) x
        op.apply(x, "measures", out)
        return out.neg_().add_(x).add_(u, alpha=global_total(op, x))

    report = Convergence("stationary law (GMRES)", progress)
    sol = gmres(system, u, x0=u.clone(), comm=comm, restart=30, rtol=rtol, progress=report)
    if not sol.converged:
        raise ConvergenceError(f"stationary law: GMRES(30) reached relative residual {sol.relative_residual:.2e} "
                               f"after {sol.matvecs} applications, not {rtol:g}")
    pi = sol.x
    pi.div_(global_total(op, pi))
    method = f"GMRES(30) on (I - P^T + u 1^T) pi = u, {sol.matvecs} applications"
    steps = 0
    while float(comm.allreduce_(pi.min().clone(), "min")) <= 0:  # round-off below zero: smooth by pi <- pi P
        if steps > SMOOTHING_STEPS:
            raise ConvergenceError("stationary law: entries stay <= 0 after smoothing; the chain may be reducible")
        pi = op.apply(pi.clamp_(min=0.0), "measures")
        pi.div_(global_total(op, pi))
        steps += 1
    if steps:
        method += f", then {steps} step(s) pi <- pi P to clear round-off below zero"
    residual = _l1_residual(op, pi)
    return VectorResult(NAMES["stationary"], pi.cpu().numpy(), method, residual=residual,
                        log_value=pi.log().cpu().numpy(), details={"representation": "operator"})


def stationary_error_bound(op: TransitionOperator, pi: VectorResult, gap_lower: float) -> VectorResult:
    """``pi`` with the a-posteriori bounds of the module docstring filled in from the residual
    r = pi P - pi and a lower bound on the additive gap (unchanged for an exact law)."""
    import torch  # deferred: only the matrix-free route loads torch

    if pi.rel_error is not None or gap_lower <= 0:
        return pi
    t = torch.as_tensor(pi.value, device=op.device, dtype=op.dtype)
    rel, pi_min = first_order_pi_error(op, t, gap_lower)
    return VectorResult(pi.name, pi.value, pi.method + "; error bound ||r/pi||_pi / gap (first order)",
                        rel_error=rel, abs_error=rel * math.sqrt(pi_min), residual=pi.residual,
                        log_value=pi.log_value, details=dict(pi.details))


def first_order_pi_error(op: TransitionOperator, pi: torch.Tensor, gap: float) -> tuple[float, float]:
    """(||r / pi||_pi / (gap sqrt(pi_min)), pi_min), r = pi P - pi: the entrywise relative error bound
    of a computed pi (module docstring); also bounds the perturbation of D^{1/2} S D^{-1/2} it causes
    (as ||B|| <= 1). |r| is taken with the rounding of its computation, gamma (pi P + pi): a residual
    that rounds to 0 (pi P - pi below the rounding of pi P) bounds nothing."""
    from mlmix.theory.linalg.operator_vectors import global_total, rounding  # deferred: torch

    Ppi = op.apply(pi, "measures")
    r = (Ppi - pi).abs_().add_(Ppi.add_(pi), alpha=rounding(op))
    chi = math.sqrt(global_total(op, r.square_().div_(pi)))
    pi_min = float(op.comm.allreduce_(pi.min().clone(), "min"))
    return chi / (gap * math.sqrt(pi_min)), pi_min


def certify_stationary(op: TransitionOperator, pi: VectorResult) -> VectorResult:
    """``pi`` with the entrywise certificate of the module docstring when it verifies (``rel_error``
    bounds max_x |pi_hat(x) / pi(x) - 1|); unchanged when it does not or when ``pi`` already has an
    entrywise bound (the exact law of a reversible kernel). Sharded operators: every process calls it
    with its slice."""
    import torch  # deferred: only the matrix-free route loads torch

    from mlmix.theory.linalg.krylov import gmres
    from mlmix.theory.linalg.operator_vectors import as_numpy, as_tensor, rounding

    if pi.log_value is None or pi.rel_error is not None:
        return pi
    comm = op.comm

    def reduce(value: float, how: str) -> float:
        return float(comm.allreduce_(torch.tensor(float(value), dtype=torch.float64, device=op.device), how))

    logpi = np.asarray(pi.log_value, dtype=np.float64)
    N = op.n_states
    log_z = reduce(float(logpi.max()), "max")  # ground at the heaviest state, on the lowest rank holding it
    owner = reduce(comm.rank if float(logpi.max()) == log_z else comm.world_size, "min")
    z = int(np.argmax(logpi)) if comm.rank == owner else None
    R = np.ones(logpi.size, dtype=bool)
    if z is not None:
        R[z] = False
    gamma = rounding(op)

    def apply(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = as_numpy(op.apply(as_tensor(op, v), "measures"))
        return (v - w)[R], gamma * (v + w)[R]

    pi_hat = np.exp(logpi)
    u = torch.full((op.local_size,), 1.0 / N, dtype=op.dtype, device=op.device)

    def system(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:  # (I - P^T + u 1^T) x
        op.apply(x, "measures", out)
        return out.neg_().add_(x).add_(u, alpha=float(comm.allreduce_(x.sum(dtype=torch.float64))))

    def solve(c: np.ndarray) -> np.ndarray:  # A v = c with v_z = 0, through the regularised system
        rhs = c.copy()
        total = reduce(float(c[R].sum()), "sum")
        if z is not None:
            rhs[z] = -total
        y = as_numpy(gmres(system, as_tensor(op, rhs), comm=comm, restart=30, rtol=1e-12, max_matvecs=600).x)
        y_z = reduce(float(y[z]) if z is not None else 0.0, "sum")
        return y - (y_z / math.exp(log_z)) * pi_hat

    try:
        rel = certify_supersolution(apply, logpi, z, solve, log_z=log_z, reduce=reduce)
    except np.linalg.LinAlgError:  # GMRES broke down on a system singular in floating point: no certificate
        return pi
    if not rel < 1:
        return pi
    rel = min(rel + 2 * EPS * reduce(float(np.abs(logpi).max()), "max"), 1.0)  # exp(log pi); ||error||_1 <= rel
    return VectorResult(pi.name, pi.value, pi.method + "; error bound: a-posteriori certificate (M-matrix "
                        "supersolution, matrix-free)", rel, rel, pi.residual, pi.log_value, dict(pi.details))


# ------------------------------------------------------------ the choice for a Chain

def chain_is_reversible(chain: Chain) -> bool:
    """Detailed balance pi(x) P(x, y) = pi(y) P(y, x) of a chain
    (:attr:`Chain.is_reversible <mlmix.theory.chain.markov_chain.Chain.is_reversible>`). Routes: a
    matrix-free kernel is reversible when its source is compatible; with a law given by the caller,
    max |Q - Q^T| <= 1e-10 max Q for the edge measure Q = diag(pi) P; otherwise Kolmogorov's criterion
    in log space on the closed class (:func:`log_potential`; transient states carry no mass), after
    ReducibleChainError for several closed classes and UnderflowError where P cannot stand for the chain."""
    if chain.facts.representation == "operator":
        return chain.op.reversible
    if chain.facts.given is not None:
        Q = sp.csr_array(chain.P).multiply(chain.facts.given[:, None])
        return bool(abs(Q - Q.T).max() <= 1e-10 * abs(Q).max())
    chain.facts.recurrent  # several closed classes: ReducibleChainError
    chain.facts.check_resolved()
    return log_potential(chain.facts.core.P) is not None


def chain_stationary_law(chain: Chain) -> VectorResult:
    """The law pi P = pi a chain's algorithms use, before a first-order bound is attached
    (:attr:`ChainFacts.stationary_law <mlmix.theory.chain.chain_facts.ChainFacts.stationary_law>`). Routes, in order:

    * matrix-free: :func:`operator_stationary` then :func:`certify_stationary` (a ValueError where the
      chain is not irreducible: transient states of a :class:`~mlmix.theory.linalg.matrix_operator.MatrixOperator`,
      or a kernel's conditional underflowing to 0, where irreducibility is not established matrix-free);
    * a law given by the caller: taken as it is, its residual ||pi P - pi||_1 reported;
    * classes changed by underflow (:attr:`ChainFacts.underflow`): the log-space law of the kernel
      (:func:`~mlmix.theory.chain.underflow.log_space_law`), as P cannot stand for the chain;
    * otherwise a dense or CSR matrix: :func:`compute_stationary` (detailed balance, GTH up to
      :data:`~mlmix.limits.DENSE_STATIONARY_LIMIT` states or the chain's own ``dense_limit``, a
      certified Krylov solve beyond), widened where P has subnormal entries: each pi(x) moves within
      rho^(N-1) = sqrt(1 + eps) (:attr:`ChainFacts.subnormal`)."""
    if chain.facts.representation == "operator":
        if not chain.is_irreducible:
            if chain.op.matrix is not None:
                chain.facts.recurrent  # several closed classes: ReducibleChainError naming them
                raise ValueError(f"{int(chain.structure.transient.sum())} transient state(s): the matrix-free route "
                                 "needs an irreducible chain; analyse the matrix itself (Chain(P))")
            raise ValueError("some conditionals underflow to 0: irreducibility is not established matrix-free "
                             "(raise the temperature, or analyse the matrix)")
        return certify_stationary(chain.op, operator_stationary(chain.op, progress=chain.solver_progress))
    if chain.facts.given is not None:
        with np.errstate(divide="ignore"):
            logpi = np.log(chain.facts.given)
        res = float(np.abs(chain.P.T @ chain.facts.given - chain.facts.given).sum())
        return VectorResult(NAMES["stationary"], chain.facts.given, "given by the caller (residual checked)", None, None,
                            res, logpi)
    if chain.facts.underflow is not None:
        return chain.facts.log_space_law()
    limit = DENSE_STATIONARY_LIMIT if chain.facts.dense_limit_given is None else chain.dense_limit
    st = compute_stationary(chain.P, chain.structure, limit)
    if not chain.facts.subnormal[0]:
        return st
    eps, _ = chain.facts.subnormal  # pi moves within rho^(N-1) = sqrt(1 + eps)
    return chain.facts.rounded_vector(st, math.sqrt(1 + eps) - 1 if math.isfinite(eps) else math.inf)


def chain_stationary(chain: Chain) -> VectorResult:
    """pi P = pi with its accuracy (:attr:`Chain.stationary <mlmix.theory.chain.markov_chain.Chain.stationary>`):
    the law of :func:`chain_stationary_law`, and where it has no entrywise bound

    * matrix-free: the first-order bound of :func:`stationary_error_bound`,
      ||r / pi||_pi / (gamma sqrt(pi_min)), from the lower end of the operator's additive gap gamma
      (the law as it is when that gap has no lower end);
    * a matrix chain that is non-reversible on its closed class (not given by the caller, not several
      closed classes): the same bound from :func:`chain_pi_error`, attached when it is below 1 (else the
      accuracy stays the residual, normwise). A reversible law is exact to its stated accuracy already."""
    st = chain.facts.stationary_law
    if chain.facts.representation == "operator":
        gap = chain.facts.operator_gap.gap if st.rel_error is None else None
        return st if gap is None or gap.lower is None else stationary_error_bound(chain.op, st, gap.lower)
    if st.rel_error is not None or chain.facts.given is not None or chain.facts.reducible_given or chain.facts.core.is_reversible:
        return st
    delta, how = chain.facts.pi_error
    if not delta < 1:  # no useful bound: the accuracy stays the residual (normwise)
        return st
    return VectorResult(st.name, st.value, f"{st.method}; error bound {how}", delta, None, st.residual,
                        st.log_value, dict(st.details))


def chain_pi_error(chain: Chain) -> tuple[float, str]:
    """(delta, how): a bound on max_x |pi_hat(x) / pi(x) - 1| for the law the analysis uses (on the
    closed class; :attr:`ChainFacts.pi_error <mlmix.theory.chain.chain_facts.ChainFacts.pi_error>`). Routes: 0
    for a law given by the caller (taken as exact); a matrix-free law's own bound (inf when it has
    none); a certified law's certificate; else the first-order bound

        delta <= ||r / pi||_pi / (gamma sqrt(pi_min)),   r = pi_hat P - pi_hat,

    gamma the lower end of the additive gap computed with pi_hat (inf when pi_hat has a zero entry
    or the gap has no positive lower end)."""
    core = chain.facts.core
    st = core.facts.stationary_law
    if chain.facts.given is not None:
        return 0.0, "given"
    if chain.facts.representation == "operator":  # the operator's law carries its own bound
        rel = chain.stationary.rel_error
        return (math.inf, "not bounded") if rel is None else (rel, "certified")
    if st.rel_error is not None:
        return st.rel_error, "certified"
    how = "||r/pi||_pi / (gap sqrt(pi_min)) (first order)"
    pi = st.value
    if not pi.min() > 0:  # a zero (unresolved) entry: no bound, and no gap to build from pi_hat
        return math.inf, how
    gap_lower = core.facts.raw_gap_and_mode[0].lower or 0.0
    if gap_lower <= 0:
        return math.inf, how
    r = core.P.T @ pi - pi
    chi = math.sqrt(float(np.sum(r * r / pi)))
    return chi / (gap_lower * math.sqrt(float(pi.min()))), how
