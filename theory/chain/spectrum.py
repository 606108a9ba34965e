"""The leading eigenvalues of a transition matrix and the implied timescales, with error bounds.

* **Reversible chains.** P is similar to the symmetric S = D^1/2 P D^-1/2, whose entries are
  S(x, y) = sqrt(P(x, y) P(y, x)) (detailed balance; no stationary law needed, each entry within 2u
  of itself). Eigenpairs (theta_j, v_j) of S (LAPACK ``eigh`` when dense, :func:`~mlmix.theory.linalg.krylov.lanczos` when
  sparse) are checked a posteriori: for a symmetric matrix, every theta_j lies within
  ||S v_j - theta_j v_j|| / ||v_j|| of an eigenvalue of S (Bauer-Fike for normal matrices), to which
  the rounding of forming S and of the residual is added. Real eigenvalues.
* **Non-reversible chains** (dense). Complex eigenvalues from ``scipy.linalg.eig`` with left and
  right vectors l_j, r_j; the condition number kappa_j = ||l_j|| ||r_j|| / |l_j^H r_j| (Wilkinson)
  turns the residual ||P r_j - lambda_j r_j|| / ||r_j|| plus the rounding of P into the first-order
  bound |lambda_j - lambda| <= kappa_j (residual + N u ||P||_F) (first order: stated as such).
* **Implied timescales** t_j = -1 / log |lambda_j| (j >= 2, lag 1; the peers' convention), with the
  enclosure of |lambda_j| mapped through that increasing function.

Eigenvalues are sorted by decreasing modulus (decreasing value when real), lambda_1 = 1 first.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from mlmix.limits import DENSE_SPECTRUM_LIMIT
from mlmix.theory.results import EPS, Result, VectorResult
from mlmix.validation import Matrix, check_memory

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain


def _symmetric(P: Matrix) -> Matrix:
    """S(x, y) = sqrt(P(x, y) P(y, x)) (dense or CSR)."""
    if sp.issparse(P):
        A = sp.csr_array(P)
        return sp.csr_array(A.multiply(sp.csr_array(A.T))).sqrt()
    P = np.asarray(P, dtype=np.float64)
    return np.sqrt(P * P.T)


def eigenvalues(P: Matrix, k: int | None, reversible: bool) -> VectorResult:
    """The ``k`` eigenvalues of largest modulus (all when None, dense only) with per-eigenvalue error
    bounds in ``details["error_bounds"]`` (module docstring); ``abs_error`` is their sum. The eigenvectors
    come along: ``details["vectors"]`` (reversible: orthonormal columns of S = sqrt(P * P^T)) or
    ``details["left_vectors"]`` and ``["right_vectors"]`` (non-reversible: LAPACK's columns)."""
    N = P.shape[0]
    k = N if k is None else int(k)
    if not 1 <= k <= N:
        raise ValueError(f"k must lie in 1..{N}, got {k}")
    dense = N <= DENSE_SPECTRUM_LIMIT
    if not dense and (not reversible or k >= N - 1):
        raise ValueError(f"the spectrum of a {'non-reversible ' if not reversible else ''}chain of {N} states is "
                         f"computed densely up to {DENSE_SPECTRUM_LIMIT} states"
                         + ("" if not reversible else f"; ask for k < {N - 1} eigenvalues"))
    if reversible:
        S = _symmetric(P)
        if dense:
            check_memory(8.0 * 3 * N * N, f"the dense spectrum of {N} states")
            Sd = S.toarray() if sp.issparse(S) else S
            theta, V = la.eigh(Sd)
            order = np.argsort(-np.abs(theta), kind="stable")[:k]
            method = "LAPACK eigh of S = sqrt(P * P^T) (reversible)"
        else:
            # deferred: the Krylov engine imports torch, which dense chains never load
            from mlmix.theory.linalg.krylov import lanczos

            pairs = lanczos(sp.csr_array(S), np.random.default_rng(0).standard_normal(N), k=k, which="LM",
                            tol=lambda theta: 1e-14 * abs(theta), max_matvecs=max(20_000, 50 * N))
            theta, V = pairs.values, pairs.vectors.numpy().T
            order = np.argsort(-np.abs(theta), kind="stable")
            method = "thick-restart Lanczos on S = sqrt(P * P^T) (reversible)" + (
                "" if pairs.converged and theta.size == k else f" (did not converge: {theta.size} of {k} values, "
                "each certified on its own; an eigenvalue among the k largest may be missing)")
        theta, V = theta[order], V[:, order]
        R = S @ V - V * theta
        terms = int(np.max(np.diff(sp.csr_array(S).indptr))) if sp.issparse(S) else N
        res = np.linalg.norm(R, axis=0) / np.linalg.norm(V, axis=0)
        bound = res + (2 * terms + 8) * EPS * (1 + np.abs(theta))
        return VectorResult("eigenvalues", theta, method + "; each within its residual of an eigenvalue of S "
                            "(symmetric: Bauer-Fike), rounding included", None, float(bound.sum()),
                            details={"error_bounds": bound, "residuals": res, "vectors": V})
    check_memory(8.0 * 6 * N * N, f"the dense spectrum of {N} states")
    Pd = P.toarray() if sp.issparse(P) else np.asarray(P, dtype=np.float64)
    lam, L, Rv = la.eig(Pd, left=True, right=True)
    order = np.lexsort((-lam.imag, -lam.real, -np.round(np.abs(lam), 12)))[:k]
    lam, L, Rv = lam[order], L[:, order], Rv[:, order]
    nl, nr = np.linalg.norm(L, axis=0), np.linalg.norm(Rv, axis=0)
    overlap = np.abs(np.sum(L.conj() * Rv, axis=0))
    with np.errstate(divide="ignore"):
        kappa = np.where(overlap > 0, nl * nr / overlap, np.inf)
    res = np.linalg.norm(Pd @ Rv - Rv * lam, axis=0) / nr
    bound = kappa * (res + N * EPS * np.linalg.norm(Pd))
    return VectorResult("eigenvalues", lam, "LAPACK eig with left and right eigenvectors (non-reversible: complex); "
                        "error <= kappa_j (residual + N u ||P||_F), first order", None, float(bound.sum()),
                        details={"error_bounds": bound, "condition_numbers": kappa, "residuals": res,
                                 "left_vectors": L, "right_vectors": Rv})


def reversible_top_two(gap: Result, k: int) -> VectorResult:
    """The eigenvalues 1 (k = 1) and 1 - gap (k = 2) of a reversible chain from its spectral gap, the
    gap's enclosure as the error bound (what a matrix-free kernel answers)."""
    if k == 1:
        return VectorResult("eigenvalues", np.ones(1), "the eigenvalue 1 of a stochastic matrix", None, 0.0,
                            details={"error_bounds": np.zeros(1)})
    mid = gap.value if gap.resolved else (gap.lower + gap.upper) / 2
    err = max(mid - gap.lower, gap.upper - mid)
    return VectorResult("eigenvalues", np.array([1.0, 1.0 - mid]), f"1 and 1 - spectral gap ({gap.method})",
                        None, err, details={"error_bounds": np.array([0.0, err])})


def implied_timescales(ev: VectorResult) -> VectorResult:
    """t_j = -1 / log |lambda_j| for j >= 2 (lag 1), with ``details['lower']`` / ``['upper']`` from the
    enclosure |lambda_j| +- error bound (an infinite timescale where |lambda_j| may be 1)."""
    mod = np.abs(np.asarray(ev.value))[1:]
    err = np.asarray(ev.details["error_bounds"])[1:]

    def t(m: np.ndarray) -> np.ndarray:
        m = np.clip(m, 0.0, 1.0)
        with np.errstate(divide="ignore"):
            return np.where(m >= 1.0, np.inf, np.where(m <= 0.0, 0.0, -1.0 / np.log(m)))

    value, lo, hi = t(mod), t(mod - err), t(mod + err)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(value > 0, np.maximum(hi - value, value - lo) / value, 0.0)
    worst = float(np.max(rel)) if rel.size else 0.0
    return VectorResult("implied timescales", value, f"-1 / log |lambda_j| ({ev.method})",
                        worst if math.isfinite(worst) else None, None,
                        details={"lower": lo, "upper": hi})


def chain_eigenvalues(chain: Chain, k: int | None = None) -> VectorResult:
    """The ``k`` eigenvalues of largest modulus of a chain (all when None), with their error bounds
    (:meth:`Chain.eigenvalues <mlmix.theory.chain.markov_chain.Chain.eigenvalues>`). Routes: a reversible
    matrix-free kernel and k <= 2: [1, 1 - gap] (:func:`reversible_top_two`); any other matrix-free
    question: from the chain's matrix (memory permitting); a dense or CSR matrix: :func:`eigenvalues`,
    symmetric (real) where the chain is irreducible and reversible, complex with condition numbers
    otherwise."""
    if chain.facts.representation == "operator":
        if k in (1, 2) and chain.is_reversible:
            return reversible_top_two(chain.spectral_gap, k)
        return chain.facts.matrix.eigenvalues(k)
    return eigenvalues(chain.P, k, chain.is_irreducible and chain.is_reversible)
