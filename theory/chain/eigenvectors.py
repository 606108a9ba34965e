"""Left and right eigenvectors of a transition matrix (the spectral decomposition), with certified residuals.

Normalisation (deeptime's and msmtools'): right eigenvectors r_i (P r_i = lambda_i r_i, columns) and left ones
l_i (l_i P = lambda_i l_i, columns holding the row vectors) with l_i . r_j = delta_ij, r_1 = 1 and l_1 = pi.

* **Reversible, irreducible** (real spectrum): from the orthonormal eigenvectors v_i of the symmetric
  S = D^1/2 P D^-1/2 (:func:`~mlmix.theory.chain.spectrum.eigenvalues`: LAPACK ``eigh`` or Lanczos), r_i =
  v_i / sqrt(pi) and l_i = v_i sqrt(pi) (pi from log pi: masses of 1e-300 keep their digits), so the r_i are
  orthonormal in <., .>_pi. Where the eigenvalues around lambda_i are known, the angle between v_i and the
  true eigenvector of S is at most its residual over its separation from the rest of the spectrum
  (Davis and Kahan's sin theta theorem): ``details['angle_bounds']`` of the right vectors (inf where the
  separation is not certified positive).
* **Otherwise** (dense): LAPACK ``eig`` with left and right vectors, complex where the spectrum is; each
  r_i scaled to unit 2-norm and l_i to l_i . r_i = 1 (l_1 to sum 1).

Certificate: the residuals ||P r_i - lambda_i r_i||_2 / ||r_i||_2 and ||l_i P - lambda_i l_i||_2 / ||l_i||_2,
recomputed with the chain's own products (the matrix with the holding probabilities 1 - off-diagonal row
sum, or the matrix-free operator) and charged their rounding, gamma sqrt(N) (1 + |lambda_i|) + rho
(:mod:`mlmix.theory.chain.propagation`): ``details['residual_bounds']``. The eigenvalues carry the enclosures
of :func:`~mlmix.theory.chain.spectrum.eigenvalues` (``details['error_bounds']``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mlmix.theory.chain.propagation import Stepper, chain_stepper, holding_matrix
from mlmix.theory.chain.spectral import symmetric_form
from mlmix.theory.chain.spectrum import eigenvalues
from mlmix.theory.results import EPS, VectorResult
from mlmix.validation import Matrix

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain


@dataclass(frozen=True)
class Eigenpairs:
    """The eigenvalues with their enclosures and the right (``right.value[:, i]``) and left
    (``left.value[:, i]``) eigenvectors with their certified residuals (module doc)."""

    values: VectorResult
    right: VectorResult
    left: VectorResult

    def __repr__(self) -> str:
        return (f"<Eigenpairs k = {len(self.values)}: {self.values.name} {np.array2string(self.values.value, precision=6)}; "
                f"largest residual {float(np.max(self.right.details['residual_bounds'])):.1e} (right), "
                f"{float(np.max(self.left.details['residual_bounds'])):.1e} (left)>")


def _apply(stepper: Stepper, V: np.ndarray, measures: bool) -> np.ndarray:
    """Each column of V (complex allowed) times P (``measures``: V^T P as columns) by the chain's products."""
    cols = []
    for v in V.T:
        out = stepper.apply(np.ascontiguousarray(v.real), measures)
        if np.iscomplexobj(v):
            out = out + 1j * stepper.apply(np.ascontiguousarray(v.imag), measures)
        cols.append(out)
    return np.stack(cols, axis=1)


def residual_bounds(stepper: Stepper, lam: np.ndarray, V: np.ndarray, measures: bool) -> np.ndarray:
    """||V_i P - lam_i V_i|| (``measures``) or ||P V_i - lam_i V_i||, relative to ||V_i||_2, plus the rounding of
    the products and the distance rho to the chain's matrix (module doc)."""
    R = _apply(stepper, V, measures) - V * lam
    norms = np.linalg.norm(V, axis=0)
    rounding = stepper.gam * math.sqrt(stepper.n_states) * (1 + np.abs(lam)) + stepper.rho
    return np.linalg.norm(R, axis=0) / norms + 2 * rounding


def perron_first(V: np.ndarray, theta: np.ndarray, log_pi: np.ndarray) -> np.ndarray:
    """The eigenvectors of S with the one of the eigenvalue 1 replaced by sqrt(pi) (known: the stationary law,
    exact up to its own error, where eigh mixes nearly degenerate vectors of a metastable chain), the others
    orthogonalised to it and renormalised, each signed with its largest entry positive."""
    V = V.copy()
    top = int(np.argmax(theta))
    root = np.exp(log_pi / 2)
    V[:, top] = root / np.linalg.norm(root)
    for i in range(V.shape[1]):
        if i != top:
            V[:, i] -= (V[:, top] @ V[:, i]) * V[:, top]
            V[:, i] /= np.linalg.norm(V[:, i])
    return V * np.where(V[np.argmax(np.abs(V), axis=0), np.arange(V.shape[1])] < 0, -1.0, 1.0)


def symmetric_residuals(P: Matrix, theta: np.ndarray, V: np.ndarray) -> np.ndarray:
    """||S v_i - theta_i v_i|| / ||v_i|| for S = sqrt(P * P^T) of the chain's matrix (with its holding probabilities),
    plus the rounding of forming S and the products, (2 N + 8) u (1 + |theta_i|) + rho."""
    M, rho = holding_matrix(P)
    S = symmetric_form(M)
    res = np.linalg.norm(S @ V - V * theta, axis=0) / np.linalg.norm(V, axis=0)
    return res + (2 * P.shape[0] + 8) * EPS * (1 + np.abs(theta)) + rho


def angle_bounds(theta: np.ndarray, residuals: np.ndarray, errors: np.ndarray, n_states: int) -> np.ndarray:
    """sin of the angle between each computed eigenvector of a symmetric matrix and the true one: its
    residual over its separation (Davis-Kahan), the separation from the other computed eigenvalues less their
    enclosures and, when not all are known, from the modulus of the last one (inf where not positive)."""
    k = theta.size
    out = np.full(k, np.inf)
    for i in range(k):
        others = np.delete(np.arange(k), i)
        sep = np.min(np.abs(theta[i] - theta[others]) - errors[others]) if others.size else np.inf
        if k < n_states:
            sep = min(sep, abs(theta[i]) - abs(theta[-1]) - errors[-1]) if i < k - 1 else -1.0
        sep -= errors[i]
        if sep > 0:
            out[i] = min(residuals[i] / sep, 1.0)
    return out


def eigenpairs(ev: VectorResult, P: Matrix, log_pi: np.ndarray | None, stepper: Stepper) -> Eigenpairs:
    """The eigenvectors of :func:`~mlmix.theory.chain.spectrum.eigenvalues`' answer ``ev`` for the matrix ``P``,
    normalised as in the module doc (``log_pi``: the stationary law of a reversible chain, None for the LAPACK
    ``eig`` route), with the residuals recomputed by ``stepper``."""
    lam = np.asarray(ev.value)
    if "vectors" in ev.details:
        V = perron_first(np.asarray(ev.details["vectors"], dtype=np.float64), lam, log_pi)
        half = np.exp(log_pi / 2)[:, None]
        R, L = V / half, V * half
        res_s = symmetric_residuals(P, lam, V)
        angles = angle_bounds(lam, res_s, np.asarray(ev.details["error_bounds"]), stepper.n_states)
        how = ("from the orthonormal eigenvectors v_i of S = D^1/2 P D^-1/2 (v_1 = sqrt(pi), the others orthogonalised "
               "to it): r_i = v_i / sqrt(pi), l_i = v_i sqrt(pi)")
        extra = {"angle_bounds": angles}
    else:
        R = np.asarray(ev.details["right_vectors"])
        L = np.asarray(ev.details["left_vectors"]).conj()
        R = R / np.linalg.norm(R, axis=0)
        L = L / np.sum(L * R, axis=0)
        if abs(lam[0] - 1) < 1e-8:  # the Perron pair: l_1 = pi (sum 1), r_1 = 1
            s = np.sum(L[:, 0])
            L[:, 0], R[:, 0] = L[:, 0] / s, R[:, 0] * s
        if not np.iscomplexobj(lam) or not np.any(lam.imag):
            R, L = R.real, L.real
        how = "LAPACK eig, r_i of unit norm and l_i . r_i = 1"
        extra = {}
    res_r, res_l = residual_bounds(stepper, lam, R, False), residual_bounds(stepper, lam, L, True)
    check = "; residuals recomputed with " + stepper.method + ", rounding included"
    right = VectorResult("right eigenvectors", R, how + check, None, None, float(res_r.max()),
                         details={"residual_bounds": res_r, **extra})
    left = VectorResult("left eigenvectors", L, how + check, None, None, float(res_l.max()),
                        details={"residual_bounds": res_l})
    return Eigenpairs(ev, right, left)


def chain_eigenvectors(chain: Chain, k: int | None = None) -> Eigenpairs:
    """The body of :meth:`Chain.eigenvectors`: the ``k`` eigenpairs of largest modulus (all when None) of the
    chain's matrix (a matrix-free chain's matrix, memory permitting), symmetric where the chain is irreducible
    and reversible; residuals by the chain's own products (the operator's applications, matrix-free)."""
    P = chain.facts.matrix_P
    reversible = chain.is_irreducible and chain.is_reversible
    ev = eigenvalues(P, k, reversible)
    return eigenpairs(ev, P, chain.stationary.log_value if reversible else None, chain_stepper(chain, 1))
