"""Stationary law, reversibility, reversibilizations, Dirichlet form, gaps and Poincaré constants.

Notation: pi P = pi, D = diag(pi), time reversal P* = D^{-1} P^T D, additive reversibilization
S = (P + P*)/2, multiplicative P* P. Self-adjoint operators on L^2(pi) are diagonalised through
the symmetric matrix D^{1/2} A D^{-1/2}. Dense LAPACK below :data:`mlmix.theory.matrices.DENSE_LIMIT`
states, ARPACK (eigs / eigsh) above; a solver that does not converge raises ConvergenceError.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse.csgraph import breadth_first_order, connected_components

from mlmix.errors import ConvergenceError, ReducibleChainError
from mlmix.theory.matrices import prefer_dense, to_dense
from mlmix.validation import Matrix, check_transition_matrix, check_vector


def communicating_classes(P: Matrix) -> tuple[list[np.ndarray], list[bool]]:
    """Strongly connected components of the transition graph and whether each is closed."""
    P = check_transition_matrix(P)
    G = sp.csr_array(P, copy=True)  # eliminate_zeros works in place: never touch the caller's arrays
    G.eliminate_zeros()
    count, labels = connected_components(G, directed=True, connection="strong")
    coo = G.tocoo()
    leaving = np.zeros(count, dtype=bool)
    leaving[labels[coo.row][labels[coo.row] != labels[coo.col]]] = True
    classes = [np.flatnonzero(labels == c) for c in range(count)]
    return classes, [not leaving[c] for c in range(count)]


def check_irreducible(P: Matrix) -> None:
    """Raise ReducibleChainError naming the closed classes when P is not irreducible."""
    classes, closed = communicating_classes(P)
    if len(classes) > 1:
        closed_cls = [c for c, is_closed in zip(classes, closed) if is_closed]
        shown = "; ".join(f"{{{', '.join(map(str, c[:8]))}{', ...' if c.size > 8 else ''}}} ({c.size} states)"
                          for c in closed_cls[:5])
        raise ReducibleChainError(
            f"chain is reducible: {len(classes)} communicating classes, {len(closed_cls)} closed: {shown}",
            closed_cls)


@dataclass(frozen=True)
class StationaryResult:
    """Stationary law with the solver used and the residual ||pi P - pi||_1."""

    pi: np.ndarray
    method: str
    residual: float


#: Tolerance on |log P(x,y) - log P(y,x) - (phi(y) - phi(x))| in the reversibility test
#: (relative to 1 + max |phi|): a relative error of ~1e-9 on the ratios P(x,y) / P(y,x).
LOG_BALANCE_TOL = 1e-9

#: Dense non-reversible chains up to this size get the GTH algorithm, which keeps every entry of
#: pi to full relative accuracy; above it, LU (GTH as a fallback when pi spans > 8 decades).
GTH_LIMIT = 512


def log_potential(P: Matrix) -> np.ndarray | None:
    """phi with pi ∝ exp(phi) when P is reversible (Kolmogorov's criterion), else None.

    phi is built along a BFS spanning tree of the transition graph from
    phi(y) - phi(x) = log P(x, y) - log P(y, x), then every edge is checked in log space:
    the test is invariant to the scale of pi, so detailed-balance violations among states of tiny
    mass are caught and pi keeps full relative accuracy. None also when the support of P is not
    symmetric or the graph is not connected. O(nnz + N log(depth)) (pointer jumping).
    """
    P = check_transition_matrix(P)
    N = P.shape[0]
    A = sp.csr_array(P, copy=True)
    A.setdiag(0.0)
    A.eliminate_zeros()
    A.sort_indices()
    AT = sp.csr_array(A.T)
    AT.sort_indices()
    if N == 1:
        return np.zeros(1)
    if A.nnz != AT.nnz or not (np.array_equal(A.indptr, AT.indptr) and np.array_equal(A.indices, AT.indices)):
        return None  # P(x, y) > 0 but P(y, x) = 0 for some pair
    ratio = np.log(A.data) - np.log(AT.data)  # entry k = (x, y): log P(x,y) - log P(y,x)
    order, pred = breadth_first_order(A, 0, directed=False, return_predecessors=True)
    if order.size < N:
        return None
    rows = np.repeat(np.arange(N, dtype=np.int64), np.diff(A.indptr))
    keys = rows * N + A.indices
    child = order[1:]
    inc = np.zeros(N)
    inc[child] = ratio[np.searchsorted(keys, pred[child].astype(np.int64) * N + child)]
    anc = pred.astype(np.int64)
    anc[0] = 0
    phi = inc
    while (anc != 0).any():  # pointer jumping: phi(v) = sum of increments from the root to v
        phi = phi + phi[anc]
        anc = anc[anc]
    err = np.abs(ratio - (phi[A.indices] - phi[rows]))
    if err.size and err.max() > LOG_BALANCE_TOL * (1.0 + np.abs(phi).max()):
        return None
    return phi - phi.max()


def _gth(P: np.ndarray) -> np.ndarray:
    """Grassmann-Taksar-Heyman state reduction: subtraction-free, so every pi(x) is accurate to a
    few ulps relative to itself, however small. O(N^3) with N numpy rank-one updates."""
    A = np.array(P, dtype=np.float64, copy=True)
    N = A.shape[0]
    for k in range(N - 1, 0, -1):
        A[:k, k] /= A[k, :k].sum()
        A[:k, :k] += np.outer(A[:k, k], A[k, :k])
    pi = np.zeros(N)
    pi[0] = 1.0
    for k in range(1, N):
        pi[k] = pi[:k] @ A[:k, k]
    return pi


def stationary(P: Matrix, tol: float = 1e-10) -> StationaryResult:
    """The unique stationary law of an irreducible chain: pi P = pi, sum pi = 1.

    Reversible P (any size): pi ∝ exp(phi) from :func:`log_potential`, exact up to rounding.
    Otherwise, dense: GTH state reduction up to :data:`GTH_LIMIT` states, else LU solve of
    (I - P)^T pi = 0 with one equation replaced by sum pi = 1 (GTH if pi spans > 8 decades).
    Sparse: ARPACK eigs on P^T for the eigenvalue of largest modulus; if its residual exceeds
    ``tol`` (tiny gaps), BiCGSTAB on the non-singular system (I - P^T + u 1^T) pi = u, u = 1/N.
    Raises ReducibleChainError (naming closed classes) or ConvergenceError.
    """
    P = check_transition_matrix(P)
    check_irreducible(P)
    N = P.shape[0]
    phi = log_potential(P)
    if phi is not None:
        pi, method = np.exp(phi), "detailed balance along a spanning tree (reversible)"
    elif prefer_dense(P) and N <= GTH_LIMIT:
        pi, method = _gth(to_dense(P)), "GTH state reduction (dense)"
    elif prefer_dense(P):
        A = np.eye(N) - to_dense(P).T
        A[-1, :] = 1.0
        b = np.zeros(N)
        b[-1] = 1.0
        pi, method = np.linalg.solve(A, b), "dense LU solve"
        if pi.min() <= 1e-8 * pi.max():  # LU loses the relative accuracy of small entries
            pi, method = _gth(to_dense(P)), "GTH state reduction (dense; pi spans > 8 decades)"
    else:
        PT = sp.csr_array(P.T)
        try:
            vals, vecs = spla.eigs(PT, k=1, which="LM", v0=np.full(N, 1.0 / N), tol=tol / 10, ncv=min(N, 32))
            pi, method = np.real(vecs[:, 0]), "ARPACK eigs on P^T"
        except spla.ArpackNoConvergence:
            pi, method = np.full(N, 1.0 / N), "ARPACK eigs on P^T (not converged)"
        pi = pi / pi.sum()
        if _residual(P, pi) > tol:
            u = np.full(N, 1.0 / N)
            op = spla.LinearOperator((N, N), matvec=lambda v: v - PT @ v + u * v.sum(), dtype=np.float64)
            sol, info = spla.bicgstab(op, u, x0=np.clip(pi, 0, None), rtol=tol / 10, maxiter=20 * N)
            pi, method = sol, "BiCGSTAB on (I - P^T + u 1^T) pi = u"
            if info != 0:
                raise ConvergenceError(f"stationary law: {method} did not converge (info={info})")
    pi = np.clip(np.real(pi), 0.0, None)
    pi /= pi.sum()
    res = _residual(P, pi)
    if res > max(tol, 1e-12) * 100:
        raise ConvergenceError(f"stationary law: residual ||pi P - pi||_1 = {res:.3g} after {method}")
    return StationaryResult(pi, method, res)


def stationary_distribution(P: Matrix, tol: float = 1e-10) -> np.ndarray:
    """pi with pi P = pi for irreducible P (see :func:`stationary` for the method and residual)."""
    return stationary(P, tol).pi


def _residual(P: Matrix, pi: np.ndarray) -> float:
    return float(np.abs(P.T @ pi - pi).sum())


def resolve_stationary(P: Matrix, pi: np.ndarray | None = None) -> np.ndarray:
    """The given ``pi`` after validation (shape, finite, strictly positive, sums to 1 within 1e-9),
    or the stationary law of P when ``pi`` is None. A given pi is trusted to be stationary."""
    if pi is None:
        pi = stationary_distribution(P)
        if (pi <= 0).any():
            raise ValueError(f"the stationary law underflows float64: pi(x) = 0 at {(pi <= 0).sum()} states "
                             f"(smallest positive {pi[pi > 0].min():.3g}); raise the temperature or rescale")
        return pi
    return check_vector(pi, P.shape[0], "pi", positive=True, probability=True)


def flow_matrix(P: Matrix, pi: np.ndarray | None = None) -> Matrix:
    """Q(x, y) = pi(x) P(x, y) (ergodic flow)."""
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    return sp.csr_array(P.multiply(pi[:, None])) if sp.issparse(P) else P * pi[:, None]


def is_reversible(P: Matrix, pi: np.ndarray | None = None, rtol: float = 1e-10) -> bool:
    """Detailed balance pi(x) P(x, y) = pi(y) P(y, x) for all x, y.

    Decided by Kolmogorov's criterion in log space (:func:`log_potential`), which does not depend
    on the accuracy of a computed pi and sees violations among states of tiny mass. When ``pi`` is
    given it must also satisfy detailed balance, to ``rtol`` times max_xy pi(x) P(x, y).
    Raises ReducibleChainError for a reducible chain (no unique stationary law).
    """
    P = check_transition_matrix(P)
    if log_potential(P) is None:
        check_irreducible(P)
        return False
    if pi is None:
        return True
    Q = flow_matrix(P, pi)
    return bool(abs(Q - Q.T).max() <= rtol * abs(Q).max())


def time_reversal(P: Matrix, pi: np.ndarray | None = None) -> Matrix:
    """P*(x, y) = pi(y) P(y, x) / pi(x)."""
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    if sp.issparse(P):
        return sp.csr_array(sp.diags_array(1.0 / pi) @ sp.csr_array(P.T) @ sp.diags_array(pi))
    return (P.T * pi[None, :]) / pi[:, None]


def additive_reversibilization(P: Matrix, pi: np.ndarray | None = None) -> Matrix:
    """S = (P + P*)/2: same stationary law and same Dirichlet form as P."""
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    return (P + time_reversal(P, pi)) / 2


def multiplicative_reversibilization(P: Matrix, pi: np.ndarray | None = None) -> Matrix:
    """P* P (first P*, then P): self-adjoint on L^2(pi), eigenvalues = squared singular values of P."""
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    return time_reversal(P, pi) @ P


def dirichlet_form(P: Matrix, f: np.ndarray, g: np.ndarray | None = None, pi: np.ndarray | None = None) -> float:
    """E(f, g) = (1/2) sum_{x,y} pi(x) P(x,y) (f(x) - f(y)) (g(x) - g(y))
             = <f, g>_pi - (<f, P g>_pi + <g, P f>_pi) / 2 = <f, (I - S) g>_pi.
    """
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    f = np.asarray(f, dtype=np.float64)
    g = f if g is None else np.asarray(g, dtype=np.float64)
    if f.shape != (P.shape[0],) or g.shape != (P.shape[0],):
        raise ValueError(f"f and g must be vectors over the {P.shape[0]} states")
    return float(pi @ (f * g) - 0.5 * (pi @ (f * (P @ g)) + pi @ (g * (P @ f))))


def _symmetrized(P: Matrix, pi: np.ndarray) -> Matrix:
    """B = D^{1/2} P D^{-1/2} (so D^{1/2} P* D^{-1/2} = B^T)."""
    if sp.issparse(P):
        coo = sp.coo_array(P)
        data = coo.data * np.sqrt(pi[coo.row] / pi[coo.col])
        return sp.csr_array((data, (coo.row, coo.col)), shape=P.shape)
    s = np.sqrt(pi)
    return P * s[:, None] / s[None, :]


def _symmetric_extremes(A: Matrix, which: str, k: int, v0: np.ndarray, tol: float,
                        vectors: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """k largest ('LA', descending) or smallest ('SA', ascending) eigenvalues of a symmetric matrix,
    with the matching orthonormal eigenvectors as columns when ``vectors``."""
    if k > A.shape[0]:
        raise ValueError(f"{k} eigenvalues requested from a chain with {A.shape[0]} state(s); a gap needs >= 2 states")
    if not sp.issparse(A):
        sym = (A + A.T) / 2
        vals, vecs = np.linalg.eigh(sym) if vectors else (np.linalg.eigvalsh(sym), None)
        order = np.arange(vals.size)[::-1][:k] if which == "LA" else np.arange(min(k, vals.size))
    else:
        try:
            res = spla.eigsh(A, k=k, which=which, v0=v0, tol=tol, ncv=min(A.shape[0], max(4 * k + 1, 24)),
                             return_eigenvectors=vectors, maxiter=50 * A.shape[0])
        except spla.ArpackNoConvergence as err:
            raise ConvergenceError(f"ARPACK eigsh ({which}, k={k}) did not converge: {err}") from err
        vals, vecs = res if vectors else (res, None)
        order = np.argsort(-vals if which == "LA" else vals, kind="stable")
    return (vals[order], vecs[:, order]) if vectors else vals[order]


def _reversible_symmetric(P: Matrix, pi: np.ndarray) -> Matrix:
    """D^{1/2} P D^{-1/2} symmetrised, after checking that P is reversible (ValueError if not)."""
    if not is_reversible(P, pi):
        raise ValueError("P is not reversible with respect to its stationary law; "
                         "use additive_gap / poincare_constant for non-reversible chains")
    B = _symmetrized(to_dense(P) if prefer_dense(P) else P, pi)
    return (B + B.T) / 2


def reversible_eigenvalues(P: Matrix, pi: np.ndarray | None = None, which: str = "LA", k: int = 2,
                           tol: float = 1e-12) -> np.ndarray:
    """The k largest ('LA', descending) or smallest ('SA', ascending) eigenvalues of a reversible P,
    via the symmetric D^{1/2} P D^{-1/2} (ValueError when P is not reversible)."""
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    if which not in ("LA", "SA"):
        raise ValueError(f"which must be 'LA' or 'SA', got {which!r}")
    return _symmetric_extremes(_reversible_symmetric(P, pi), which, k, np.sqrt(pi), tol)


def spectral_gap(P: Matrix, pi: np.ndarray | None = None) -> float:
    """1 - lambda_2 for reversible P (ValueError otherwise)."""
    return float(1.0 - reversible_eigenvalues(P, pi, "LA", 2)[1])


def _is_reducible(P: Matrix) -> bool:
    """More than one communicating class: with a given positive pi, the indicator of a closed class
    has E(f, f) = 0 < Var_pi(f), so every gap is exactly 0 (eigensolvers return rounding noise)."""
    return len(communicating_classes(P)[0]) > 1


def additive_gap(P: Matrix, pi: np.ndarray | None = None, tol: float = 1e-12) -> float:
    """1 - lambda_2((P + P*)/2): the largest c with E(f, f) >= c Var_pi(f); equals the spectral gap
    when P is reversible. Exactly 0 for a reducible P with a given pi."""
    P = check_transition_matrix(P)
    pi_given = pi is not None  # (pi = None: resolve_stationary refuses reducible chains)
    pi = resolve_stationary(P, pi)
    if pi_given and _is_reducible(P):
        return 0.0
    B = _symmetrized(to_dense(P) if prefer_dense(P) else P, pi)
    A = (B + B.T) / 2
    return float(1.0 - _symmetric_extremes(A, "LA", 2, np.sqrt(pi), tol)[1])


def additive_eigenpairs(P: Matrix, pi: np.ndarray | None = None, k: int = 2,
                        tol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """Top k eigenvalues of S = (P + P*)/2 (descending) and right eigenvectors S f = lambda f as
    columns, orthonormal in L^2(pi); the first is the constant function 1 (up to sign).

    Computed as f = D^{-1/2} u from the symmetric D^{1/2} S D^{-1/2} u = lambda u. The second
    column is the Fiedler-type vector whose sweep cuts bound the conductance
    (:mod:`mlmix.theory.conductance`).
    """
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    B = _symmetrized(to_dense(P) if prefer_dense(P) else P, pi)
    vals, vecs = _symmetric_extremes((B + B.T) / 2, "LA", k, np.sqrt(pi), tol, vectors=True)
    return vals, vecs / np.sqrt(pi)[:, None]


def poincare_constant(P: Matrix, pi: np.ndarray | None = None) -> float:
    """C = sup_f Var_pi(f) / E(f, f) = 1 / gap((P + P*)/2) (inf when that gap is 0)."""
    gap = additive_gap(P, pi)
    return float(np.inf) if gap <= 0 else 1.0 / gap


def multiplicative_gap(P: Matrix, pi: np.ndarray | None = None, tol: float = 1e-12) -> float:
    """1 - lambda_2(P* P) = 1 - sigma_2(P)^2, sigma_2 the second singular value of P on L^2(pi).
    Exactly 0 for a reducible P with a given pi."""
    P = check_transition_matrix(P)
    if P.shape[0] < 2:
        raise ValueError(f"a gap needs >= 2 states; the chain has {P.shape[0]}")
    pi_given = pi is not None
    pi = resolve_stationary(P, pi)
    if pi_given and _is_reducible(P):
        return 0.0
    B = _symmetrized(to_dense(P) if prefer_dense(P) else P, pi)
    if sp.issparse(B):
        N = B.shape[0]
        op = spla.LinearOperator((N, N), matvec=lambda v: B.T @ (B @ v), dtype=np.float64)
        try:
            vals = spla.eigsh(op, k=2, which="LA", v0=np.sqrt(pi), tol=tol, return_eigenvectors=False)
        except spla.ArpackNoConvergence as err:
            raise ConvergenceError(f"ARPACK eigsh on P*P did not converge: {err}") from err
        lam2 = np.sort(vals)[0]
    else:
        lam2 = np.linalg.svd(B, compute_uv=False)[1] ** 2
    return float(1.0 - lam2)


def eigenvalues(P: Matrix, k: int = 6, tol: float = 1e-12) -> np.ndarray:
    """The k eigenvalues of P of largest modulus (complex), sorted by decreasing modulus."""
    P = check_transition_matrix(P)
    N = P.shape[0]
    if prefer_dense(P) or k >= N - 1:
        vals = np.linalg.eigvals(to_dense(P))
    else:
        try:
            vals = spla.eigs(sp.csr_array(P), k=k, which="LM", tol=tol, ncv=min(N, max(2 * k + 1, 32)),
                             return_eigenvectors=False)
        except spla.ArpackNoConvergence as err:
            raise ConvergenceError(f"ARPACK eigs (k={k}) did not converge: {err}") from err
    order = np.argsort(-np.abs(vals), kind="stable")
    return vals[order][:k]


def absolute_spectral_gap(P: Matrix, pi: np.ndarray | None = None) -> float:
    """1 - lambda_*, lambda_* = max{|lambda| : lambda eigenvalue of P, lambda != 1}.

    Reversible: lambda_* = max(lambda_2, |lambda_min|) from the symmetric matrix; otherwise from
    the eigenvalue moduli of P (a rate for the spectrum, not a Poincaré constant).
    """
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    if is_reversible(P, pi):
        B = _reversible_symmetric(P, pi)
        top = _symmetric_extremes(B, "LA", 2, np.sqrt(pi), 1e-12)
        bottom = _symmetric_extremes(B, "SA", 1, np.sqrt(pi), 1e-12)
        return float(1.0 - max(top[1], abs(bottom[0])))
    vals = eigenvalues(P, k=2)
    return float(1.0 - abs(vals[1]))


def relaxation_time(P: Matrix, pi: np.ndarray | None = None) -> float:
    """t_rel = 1 / absolute spectral gap (inf when the gap is 0)."""
    gap = absolute_spectral_gap(P, pi)
    return float(np.inf) if gap <= 0 else 1.0 / gap
