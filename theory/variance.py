"""MCMC asymptotic variance of ergodic averages through the Poisson equation.

For a stationary chain and f: X -> R, the CLT variance of (1/t) sum_{s<t} f(X_s) is
(THEOREMS.md section 1)

    sigma^2(f) = Var_pi(f) + 2 sum_{k>=1} Cov_pi(f(X_0), f(X_k)) = <f_bar, (2Z - I) f_bar>_pi,

with f_bar = f - pi(f) and the fundamental matrix Z = (I - P + 1 pi^T)^{-1}. Z is never formed:
g = Z f_bar solves (I - P + 1 pi^T) g = f_bar, equivalently the Poisson equation (I - P) g = f_bar
with pi(g) = 0, and sigma^2(f) = 2 <f_bar, g>_pi - <f_bar, f_bar>_pi.

Dense LAPACK solve up to :data:`mlmix.theory.matrices.DENSE_LIMIT` states; above, Krylov: CG on the
symmetrised system D^{1/2} (I - P + 1 pi^T) D^{-1/2} = I - B + sqrt(pi) sqrt(pi)^T (B = D^{1/2} P
D^{-1/2} symmetric) when P is reversible, GMRES/BiCGSTAB on I - P + 1 pi^T otherwise.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mlmix.errors import ConvergenceError
from mlmix.theory.matrices import krylov_solve, prefer_dense, to_dense
from mlmix.theory.spectral import is_reversible, resolve_stationary, spectral_gap
from mlmix.validation import Matrix, check_transition_matrix


def _check_function(f: np.ndarray, n_states: int) -> np.ndarray:
    f = np.asarray(f, dtype=np.float64)
    if f.shape != (n_states,):
        raise ValueError(f"f must be a vector over the {n_states} states, got shape {f.shape}")
    if not np.isfinite(f).all():
        raise ValueError("f contains NaN or infinite values")
    return f


def poisson_solution(P: Matrix, f: np.ndarray, pi: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """g = Z f_bar: the solution of (I - P) g = f - pi(f) with pi(g) = 0, and the solver used."""
    P = check_transition_matrix(P)
    N = P.shape[0]
    pi = resolve_stationary(P, pi)
    f_bar = _check_function(f, N)
    f_bar = f_bar - pi @ f_bar
    if prefer_dense(P):
        A = np.eye(N) - to_dense(P) + np.outer(np.ones(N), pi)
        return np.linalg.solve(A, f_bar), "dense LU solve of (I - P + 1 pi^T) g = f_bar"
    P = sp.csr_array(P)
    diag = 1.0 - P.diagonal() + pi
    if is_reversible(P, pi):
        s = np.sqrt(pi)
        B = sp.csr_array(P.multiply(s[:, None]).multiply((1.0 / s)[None, :]))
        B = (B + B.T) / 2
        op = spla.LinearOperator((N, N), matvec=lambda v: v - B @ v + s * (s @ v), dtype=np.float64)
        h, method = krylov_solve(op, s * f_bar, spd=True, diagonal=diag, what="Poisson equation")
        return h / s, method + " on the symmetrised Poisson system"
    op = spla.LinearOperator((N, N), matvec=lambda v: v - P @ v + pi @ v, dtype=np.float64)
    g, method = krylov_solve(op, f_bar, spd=False, diagonal=diag, what="Poisson equation")
    return g, method + " on (I - P + 1 pi^T) g = f_bar"


def asymptotic_variance(P: Matrix, f: np.ndarray, pi: np.ndarray | None = None) -> float:
    """sigma^2(f) = <f_bar, (2Z - I) f_bar>_pi = 2 <f_bar, g>_pi - Var_pi(f), g = Z f_bar.

    ``pi`` defaults to the stationary law (ReducibleChainError when not unique). Raises
    ConvergenceError when the Krylov solver fails or the result is negative beyond rounding.
    """
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    g, method = poisson_solution(P, f, pi)
    f_bar = _check_function(f, P.shape[0])
    f_bar = f_bar - pi @ f_bar
    var = float(pi @ f_bar**2)
    cross = float(pi @ (f_bar * g))
    sigma2 = 2.0 * cross - var
    if sigma2 < 0:  # sigma^2 >= 0 always; allow rounding relative to the two terms
        if sigma2 < -1e-8 * (var + 2.0 * abs(cross)):
            raise ConvergenceError(f"asymptotic variance came out negative ({sigma2:.3g}) after {method}")
        sigma2 = 0.0
    return sigma2


def variance_bound_reversible(P: Matrix, f: np.ndarray, pi: np.ndarray | None = None) -> float:
    """(2 / gap - 1) Var_pi(f): an upper bound on sigma^2(f) for reversible P (ValueError otherwise)."""
    P = check_transition_matrix(P)
    pi = resolve_stationary(P, pi)
    f = _check_function(f, P.shape[0])
    var = float(pi @ (f - pi @ f) ** 2)
    return (2.0 / spectral_gap(P, pi) - 1.0) * var
