"""Format helpers and Krylov solves for transition matrices (dense ndarray or scipy.sparse).

Validation lives in :mod:`mlmix.validation`, exceptions in :mod:`mlmix.errors`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mlmix.errors import ConvergenceError
from mlmix.validation import Matrix

#: GMRES restarts without halving the true residual after which the solve counts as stalled (at the
#: floating-point floor of an ill-conditioned system, e.g. a metastable chain's Poisson equation, it
#: otherwise runs out its whole budget: minutes on 25 states) and BiCGSTAB is tried.
STALL_RESTARTS = 50


def to_dense(P: Matrix) -> np.ndarray:
    return P.toarray() if sp.issparse(P) else np.asarray(P)


def krylov_solve(A: Matrix | spla.LinearOperator, b: np.ndarray, *, spd: bool, diagonal: np.ndarray | None = None,
                 rtol: float = 1e-10, maxiter: int = 20_000, what: str = "linear system") -> tuple[np.ndarray, str]:
    """Solve A x = b with a Krylov method: CG when A is symmetric positive definite (``spd``), else
    GMRES(60) then BiCGSTAB if GMRES stalls (:data:`STALL_RESTARTS` restarts without halving the
    residual) or runs out of ``maxiter``. ``diagonal`` (diag of A) gives a Jacobi preconditioner.

    Never factorises A (sparse LU fills in catastrophically on Hamming graphs). Returns the
    solution and the method used; raises :class:`ConvergenceError` when the true residual
    ||A x - b|| exceeds 100 * rtol * ||b||.
    """
    # deferred: the Krylov engine imports torch, which dense chains never load
    from mlmix.theory.linalg.krylov import bicgstab, conjugate_gradient, gmres

    n = b.shape[0]
    M = None
    if diagonal is not None:
        inv = 1.0 / np.where(np.abs(diagonal) > 0, diagonal, 1.0)
        M = spla.LinearOperator((n, n), matvec=lambda v: inv * v, dtype=np.float64)
    norm_b = float(np.linalg.norm(b))
    if norm_b == 0:
        return np.zeros(n), "zero right-hand side"
    attempts = [("CG", lambda: conjugate_gradient(A, b, preconditioner=M, rtol=rtol, max_matvecs=maxiter))] if spd \
        else [("GMRES(60)", lambda: gmres(A, b, preconditioner=M, restart=60, rtol=rtol, max_matvecs=61 * maxiter,
                                          patience=min(maxiter, STALL_RESTARTS))),
              ("BiCGSTAB", lambda: bicgstab(A, b, preconditioner=M, rtol=rtol, max_matvecs=2 * maxiter + 1))]
    worst = np.inf
    for name, solve in attempts:
        x = solve().x.numpy()
        residual = float(np.linalg.norm(A @ x - b))
        if residual <= 100 * rtol * norm_b:
            return x, f"{name} (Jacobi preconditioned, relative residual {residual / norm_b:.1e})" \
                if M is not None else f"{name} (relative residual {residual / norm_b:.1e})"
        worst = min(worst, residual / norm_b)
    raise ConvergenceError(f"{what}: {' and '.join(n for n, _ in attempts)} did not converge "
                           f"(best relative residual {worst:.3g}, target {rtol:g}, maxiter {maxiter})")
