"""PCCA+: fuzzy memberships of m metastable sets and the coarse-grained chain (Roeblitz and Weber 2013,
"Fuzzy spectral clustering by PCCA+", Adv. Data Anal. Classif. 7, 147-179).

For a reversible chain with stationary law pi, let X = [x_1, ..., x_m] (N, m) hold the m eigenvectors of
the largest eigenvalues 1 = l_1 >= ... >= l_m of P, pi-orthonormal (X^T D_pi X = I, D_pi = diag(pi)) with
x_1 = 1. PCCA+ looks for memberships chi = X A (A an invertible m x m matrix) that are

* a partition of unity, chi 1 = 1: the first row of A sums to 1 and every other row to 0;
* non-negative, chi >= 0: given the other rows, A[0, j] = -min_l sum_{i >= 1} X[l, i] A[i, j] makes column
  j non-negative, and dividing A by the sum of its first row (a positive scalar: the columns of the lower
  rows sum to 0) restores the partition of unity while keeping chi >= 0;
* as crisp as the span of X allows: A = X^T D_pi chi, so A[0, j] = pi(chi_j) and sum_i A[i, j]^2 is the
  squared pi-norm of chi_j (it lies in span X); since chi_j <= 1, the crispness
  f(A) = sum_j sum_i A[i, j]^2 / A[0, j] <= m, with equality exactly when every chi_j is an indicator.

The search starts at the inner-simplex vertices (Weber and Galliat 2002: m rows of X spanning a wide
simplex, A_0 = X[vertices]^-1, :func:`inner_simplex_vertices`) made feasible,
and maximises f over the (m - 1)^2 free entries A[1:, 1:] by Nelder-Mead (the other entries follow from
the constraints above). The coarse-grained chain is the Galerkin projection

    P_c = (chi^T D_pi chi)^-1 chi^T D_pi P chi = I - (chi^T D_pi chi)^-1 E,   its stationary law pi_c = chi^T pi,

with E = chi^T D_pi (I - P) chi the Dirichlet form of the memberships, summed over the off-diagonal entries
(subtraction-free on its diagonal, so the small exit rates of metastable sets are not lost to rounding).
Its rows sum to 1 (chi 1 = 1) and, because span chi = span X is invariant under P, equals A^-1 L A with
L = diag(l_1..l_m): its eigenvalues are the m slow eigenvalues of P (``details['invariance_residual']``
measures ||P chi - chi P_c||, the departure from invariance in floating point). The crisp assignment sends
each state to the set of its largest membership (ties within 1e-12 to the first set).

Accuracy: eigenvectors of nearly equal slow eigenvalues are computed in floating point, so chi and P_c are
descriptions, not certified quantities (no error bound is claimed); each carries its residuals. A
non-reversible chain is refused by name: its generalised variant (G-PCCA+, a real Schur basis instead of
eigenvectors) is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize

from mlmix.errors import ConvergenceError, InputValueError, NumericalError
from mlmix.limits import DENSE_EIGEN_LIMIT
from mlmix.theory.results import EPS, VectorResult
from mlmix.validation import Matrix, check_int

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain

#: Nelder-Mead stops when the crispness moves by less than this between iterations (relative to m).
CRISPNESS_TOL = 1e-12

#: States of mass >= this times max pi are trusted with their eigenvector rows (v = w / sqrt(pi) keeps the
#: eigensolver's error below 1e-11 there, as in :mod:`~mlmix.theory.chain.metastable`); they bound chi >= 0 and
#: pick the vertices.
TRUSTED_MASS = 1e-10

#: Memberships equal to this many decimals are a tie in the crisp assignment (it goes to the first set).
TIE_DIGITS = 12

#: Sweeps of x = P x / lambda over the light states (:func:`_refined`).
REFINEMENTS = 50

#: Entries of P per row block of :func:`dirichlet_matrix` (bounds its memory at about 8 (m + 3) bytes each).
DIRICHLET_BLOCK = 1 << 20

#: The most Nelder-Mead iterations per free entry of A.
ITERATIONS_PER_ENTRY = 2000


@dataclass(frozen=True)
class PCCA:
    """PCCA+ of a reversible chain into m sets (module doc): memberships chi (N, m), the coarse matrix P_c
    (m, m) and its stationary law pi_c, the crisp assignment and sets (masks), the crispness f(A) / m."""

    memberships: VectorResult
    coarse_matrix: VectorResult
    coarse_stationary: VectorResult
    assignment: np.ndarray
    sets: list[np.ndarray]
    crispness: float  # f(A) / m in (0, 1]: 1 for crisp memberships (floating point, not certified)
    eigenvalues: np.ndarray

    @property
    def min_membership(self) -> float:
        """The smallest entry of chi (>= 0 up to the rounding of X A)."""
        return float(self.memberships.details["min_entry"])

    def __repr__(self) -> str:
        masses = ", ".join(f"{m:.4g}" for m in self.coarse_stationary.value)
        return (f"<PCCA+ into {len(self.sets)} sets: coarse masses {masses}; crispness {self.crispness:.6g}; "
                f"min chi {self.min_membership:.2e}>")


def slow_eigenpairs(P, pi: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` largest eigenvalues of S = (P + P*)/2 and their eigenvectors v = D^{-1/2} w
    (columns, pi-orthonormal), largest first."""
    N = P.shape[0]
    count = check_int(count, "count", minimum=1, maximum=N)
    if not (pi > np.finfo(np.float64).tiny).all():
        raise ValueError("the stationary law underflows on some states: the symmetrised eigenvectors "
                         "D^{-1/2} w are not representable in float64")
    r = np.sqrt(pi)
    if sp.issparse(P):
        Ps = sp.csr_array(P)
        A = sp.diags_array(r) @ Ps @ sp.diags_array(1.0 / r)
        A = (A + A.T) * 0.5
    else:
        Pd = np.asarray(P, dtype=np.float64)
        A = r[:, None] * Pd / r[None, :]
        A = (A + A.T) * 0.5
    if N <= DENSE_EIGEN_LIMIT:
        A = A.toarray() if sp.issparse(A) else A
        vals, vecs = np.linalg.eigh(A)
        vals, vecs = vals[::-1][:count], vecs[:, ::-1][:, :count]
    else:
        # deferred: the Krylov engine imports torch, which dense chains never load
        from mlmix.theory.linalg.krylov import lanczos

        pairs = lanczos(sp.csr_array(A), r, k=count, which="LA", tol=lambda theta: 1e-13 * max(abs(theta), 1.0),
                        max_matvecs=max(20_000, 50 * N))
        if not pairs.converged or pairs.values.size < count:
            raise ConvergenceError(f"the {count} slowest modes of {N} states: Lanczos found {pairs.values.size} "
                                   f"in {pairs.matvecs} products without converging")
        vals, vecs = pairs.values, pairs.vectors.numpy().T
    return vals, vecs / r[:, None]


def inner_simplex_vertices(X: np.ndarray, candidates: np.ndarray | None = None) -> np.ndarray:
    """k row indices of X (N, k) spanning a large simplex: the row farthest from the mean first,
    then repeatedly the row farthest from the affine hull of those chosen (Gram-Schmidt); only rows
    in the boolean mask ``candidates`` (default all) are eligible."""
    N, k = X.shape
    eligible = np.ones(N, dtype=bool) if candidates is None else candidates
    Y = X - X[eligible].mean(axis=0)
    first = int(np.argmax(np.where(eligible, np.linalg.norm(Y, axis=1), -1.0)))
    chosen = [first]
    Z = Y - Y[first]
    for _ in range(1, k):
        norms = np.where(eligible, np.linalg.norm(Z, axis=1), -1.0)
        nxt = int(np.argmax(norms))
        chosen.append(nxt)
        if norms[nxt] <= 0:
            break
        u = Z[nxt] / norms[nxt]
        Z = Z - np.outer(Z @ u, u)
    return np.array(chosen)


def feasible(free: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The feasible A (module doc) with A[1:, 1:] = ``free``: rows 2..m summing to 0, the first row making
    every column of X A non-negative, A divided by its first row's sum."""
    m = X.shape[1]
    A = np.zeros((m, m))
    A[1:, 1:] = free.reshape(m - 1, m - 1)
    A[1:, 0] = -A[1:, 1:].sum(axis=1)
    A[0, :] = -(X[:, 1:] @ A[1:, :]).min(axis=0)
    return A / A[0, :].sum()


def crispness(A: np.ndarray) -> float:
    """f(A) = sum_j sum_i A[i, j]^2 / A[0, j] (<= m, = m for crisp memberships; -inf where a column has no mass)."""
    if not (A[0, :] > 0).all():
        return -np.inf
    return float(((A**2).sum(axis=0) / A[0, :]).sum())


def optimise(X: np.ndarray, candidates: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(A, iterations): the inner-simplex start made feasible, then Nelder-Mead on -f over A[1:, 1:]."""
    m = X.shape[1]
    vertices = inner_simplex_vertices(X, candidates)
    if candidates is not None and len(vertices) < m:  # fewer than m trusted states span a simplex: all states
        vertices = inner_simplex_vertices(X)
    if len(vertices) < m or not np.linalg.cond(X[vertices]) < 1 / EPS:
        raise NumericalError(f"PCCA+ into {m} sets: the {m} slow eigenvectors do not span an {m}-vertex simplex in "
                             "floating point (fewer distinct metastable states than sets); ask for fewer sets")
    A0 = np.linalg.inv(X[vertices])
    if m == 1:
        return A0, 0
    start = A0[1:, 1:].ravel()

    def objective(free: np.ndarray) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):
            value = crispness(feasible(free, X))
        return -value if np.isfinite(value) else np.inf

    found = minimize(objective, start, method="Nelder-Mead",
                     options={"xatol": 1e-14, "fatol": CRISPNESS_TOL * m,
                              "maxiter": ITERATIONS_PER_ENTRY * (m - 1) ** 2})
    best = found.x if found.fun <= objective(start) else start
    return feasible(best, X), int(found.nit)


def pi_orthonormal(X: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """The slow eigenvectors X (N, m) with x_1 = 1 exactly and the others pi-orthonormalised against it (QR of
    D^1/2 X): near-degenerate slow eigenvalues leave computed eigenvectors off by u / (eigenvalue gap), which
    the crispness identity A = X^T D_pi chi would inherit."""
    r = np.sqrt(pi)
    X = X.copy()
    X[:, 0] = 1.0
    Qr, R = np.linalg.qr(r[:, None] * X)
    X = Qr * np.sign(np.diag(R)) / r[:, None]
    X[:, 0] = 1.0
    return X


def crisp_labels(chi: np.ndarray) -> np.ndarray:
    """The crisp assignment: each state to the set of its largest membership (ties within 1e-12 to the first)."""
    return np.argmax(np.round(chi, TIE_DIGITS), axis=1)


def dirichlet_matrix(P: Matrix, pi: np.ndarray, chi: np.ndarray) -> np.ndarray:
    """E = chi^T D_pi (I - P) chi = (1/2) sum_{i != j} pi_i P_ij (chi(i) - chi(j)) (chi(i) - chi(j))^T (P reversible
    with stationary law pi: chi^T D_pi P chi is then symmetric), from the off-diagonal entries (the chain's
    convention), so that P_c = I - (chi^T D_pi chi)^-1 E keeps small
    coarse rates to their own relative accuracy instead of losing them to 1 - P_c(a, a)."""
    N, m = chi.shape
    E = np.zeros((m, m))
    rows = max(1, DIRICHLET_BLOCK // N)
    for start in range(0, N, rows):  # row blocks: a dense P is never held as N^2 coordinates at once
        C = sp.coo_array(P[start:start + rows])
        i, j = C.row + start, C.col
        off = i != j
        i, j = i[off], j[off]
        d = chi[i] - chi[j]
        E += (d * (pi[i] * C.data[off])[:, None]).T @ d
    return 0.5 * E


def _refined(P: Matrix, X: np.ndarray, vals: np.ndarray, trusted: np.ndarray) -> np.ndarray:
    """X with its rows on light states (not ``trusted``) replaced by :data:`REFINEMENTS` sweeps of the eigenvalue
    equation x = P x / lambda there: v = w / sqrt(pi) amplifies the eigensolver's absolute error by pi^-1/2 on
    light states, while P x / lambda averages the accurate values of their heavy neighbours."""
    light = ~trusted
    if not light.any() or not (vals > 0).all():
        return X
    P_light = P[np.flatnonzero(light)]
    for _ in range(REFINEMENTS):
        X[light] = np.asarray(P_light @ X) / vals[None, :]
    X[:, 0] = 1.0
    return X


def memberships_from_modes(P: Matrix, pi: np.ndarray, X: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(X, A, iterations): the slow eigenvectors X of the reversible P (largest eigenvalues ``vals`` first)
    pi-orthonormalised with x_1 = 1 and refined on light states, and PCCA+'s optimised A (chi = X A)."""
    trusted = pi >= TRUSTED_MASS * pi.max()
    X = _refined(P, pi_orthonormal(X, pi), vals, trusted)
    A, iterations = optimise(X, trusted)
    return X, A, iterations


def pcca(P: Matrix, pi: np.ndarray, m: int) -> PCCA:
    """PCCA+ of the reversible chain with matrix ``P`` (dense or CSR) and stationary law ``pi`` into ``m`` sets
    (module doc); the sets are ordered by coarse mass pi_c, largest first."""
    N = P.shape[0]
    m = check_int(m, "m (the number of PCCA+ sets)", minimum=1, maximum=N)
    vals, X = slow_eigenpairs(P, pi, m)
    X, A, iterations = memberships_from_modes(P, pi, X, vals)
    chi = X @ A
    pi_c = chi.T @ pi
    order = np.argsort(-pi_c, kind="stable")
    chi, pi_c, A = chi[:, order], pi_c[order], A[:, order]
    P_c = np.eye(m) - np.linalg.solve((chi.T * pi) @ chi, dirichlet_matrix(P, pi, chi))
    Pchi = np.asarray(P @ chi)
    invariance = float(np.abs(Pchi - chi @ P_c).max())
    f = crispness(A)
    label = crisp_labels(chi)
    sets = [label == j for j in range(m)]
    how = ("PCCA+ (Roeblitz-Weber 2013): inner-simplex start, Nelder-Mead on the crispness; floating-point "
           "eigenvectors, not certified")
    memberships = VectorResult("PCCA+ memberships chi", chi, how, None, None,
                               float(np.abs(chi.sum(axis=1) - 1.0).max()),
                               details={"min_entry": float(chi.min()), "iterations": iterations})
    coarse = VectorResult("coarse-grained matrix P_c", P_c, "(chi^T D_pi chi)^-1 chi^T D_pi P chi; " + how, None, None,
                          float(np.abs(P_c.sum(axis=1) - 1.0).max()), details={"invariance_residual": invariance})
    coarse_pi = VectorResult("coarse stationary law pi_c", pi_c, "chi^T pi; " + how, None, None,
                             float(np.abs(pi_c @ P_c - pi_c).sum()))
    return PCCA(memberships, coarse, coarse_pi, label, sets, f / m, np.asarray(vals))


def chain_pcca(chain: Chain, m: int) -> PCCA:
    """The body of :meth:`Chain.pcca`: PCCA+ of an irreducible reversible chain from its matrix (dense, CSR, or
    a matrix-free chain's matrix, memory permitting: ``chain.to_scipy()``); a non-reversible chain is refused
    by name (G-PCCA+ is not implemented)."""
    m = check_int(m, "m (the number of PCCA+ sets)", minimum=1, maximum=chain.n_states)
    if not chain.is_irreducible:
        raise InputValueError("PCCA+ needs an irreducible chain (pi > 0 on every state); this one has "
                              f"{len(chain.closed_classes)} closed class(es) and transient states")
    if not chain.is_reversible:
        raise InputValueError("PCCA+ needs a reversible chain (real eigenvectors); the generalised Schur variant "
                              "G-PCCA+ for non-reversible chains is not implemented")
    P = chain.facts.matrix_P
    P = sp.csr_array(P) if sp.issparse(P) else np.asarray(P)
    return pcca(P, np.asarray(chain.stationary, dtype=np.float64), m)
