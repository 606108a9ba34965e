"""Validation and format helpers for transition matrices (dense ndarray or scipy.sparse)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

#: Below this many states the chain algorithms convert to dense LAPACK, which is faster there.
DENSE_LIMIT = 2048

Matrix = np.ndarray | sp.sparray | sp.spmatrix


class ConvergenceError(ValueError):
    """An iterative eigen- or linear solver did not reach its tolerance."""


def check_transition_matrix(P: object, tol: float = 1e-9) -> Matrix:
    """Return P as float64 (CSR if sparse) after checking it is a row-stochastic square matrix.

    Raises TypeError for non-matrices and ValueError for non-square shape, NaN/inf or negative
    entries, or a row sum farther than ``tol`` from 1 (the first offending row is named).
    """
    if sp.issparse(P):
        M = sp.csr_array(P, dtype=np.float64)
        data = M.data
        sums = np.asarray(M.sum(axis=1)).ravel()
    elif isinstance(P, (np.ndarray, list, tuple)):
        M = np.asarray(P, dtype=np.float64)
        if M.ndim != 2:
            raise ValueError(f"transition matrix must be 2-dimensional, got shape {M.shape}")
        data = M
        sums = M.sum(axis=1)
    else:
        raise TypeError(f"transition matrix must be a numpy array or scipy sparse matrix, got {type(P).__name__}")
    if M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise ValueError(f"transition matrix must be square and non-empty, got shape {M.shape}")
    if not np.isfinite(data).all():
        raise ValueError("transition matrix contains NaN or infinite entries")
    if (data < 0).any():
        raise ValueError("transition matrix has negative entries")
    bad = np.flatnonzero(np.abs(sums - 1.0) > tol)
    if bad.size:
        raise ValueError(f"transition matrix rows must sum to 1 (tol {tol}); row {bad[0]} sums to {sums[bad[0]]!r}")
    return M


def to_dense(P: Matrix) -> np.ndarray:
    return P.toarray() if sp.issparse(P) else np.asarray(P)


def to_csr(P: Matrix) -> sp.csr_array:
    return sp.csr_array(P)


def prefer_dense(P: Matrix) -> bool:
    """True when the dense algorithms are the faster choice for this matrix."""
    return P.shape[0] <= DENSE_LIMIT


def state_mask(S: np.ndarray | list | tuple, n_states: int) -> np.ndarray:
    """A set of states as a boolean mask of length ``n_states``, from a mask or an index array.

    Raises TypeError for non-integer, non-boolean input and ValueError for out-of-range indices or
    a mask of the wrong length. The set may be empty or everything; callers decide.
    """
    arr = np.asarray(S)
    if arr.ndim == 0:  # a single state index
        arr = arr.reshape(1)
    if arr.dtype == bool:
        if arr.shape != (n_states,):
            raise ValueError(f"boolean set mask must have shape ({n_states},), got {arr.shape}")
        return arr.copy()
    if arr.size == 0:
        return np.zeros(n_states, dtype=bool)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"a set of states must be a boolean mask or integer indices, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"state indices must be a 1-d array, got shape {arr.shape}")
    if arr.min() < 0 or arr.max() >= n_states:
        raise ValueError(f"state indices must lie in [0, {n_states})")
    mask = np.zeros(n_states, dtype=bool)
    mask[arr] = True
    return mask


def krylov_solve(A: Matrix | spla.LinearOperator, b: np.ndarray, *, spd: bool, diagonal: np.ndarray | None = None,
                 rtol: float = 1e-10, maxiter: int = 20_000, what: str = "linear system") -> tuple[np.ndarray, str]:
    """Solve A x = b with a Krylov method: CG when A is symmetric positive definite (``spd``), else
    GMRES(60) then BiCGSTAB if GMRES stalls. ``diagonal`` (diag of A) gives a Jacobi preconditioner.

    Never factorises A (sparse LU fills in catastrophically on Hamming graphs). Returns the
    solution and the method used; raises :class:`ConvergenceError` when the true residual
    ||A x - b|| exceeds 100 * rtol * ||b||.
    """
    n = b.shape[0]
    M = None
    if diagonal is not None:
        inv = 1.0 / np.where(np.abs(diagonal) > 0, diagonal, 1.0)
        M = spla.LinearOperator((n, n), matvec=lambda v: inv * v, dtype=np.float64)
    norm_b = float(np.linalg.norm(b))
    if norm_b == 0:
        return np.zeros(n), "zero right-hand side"
    attempts = [("CG", spla.cg)] if spd else [("GMRES(60)", spla.gmres), ("BiCGSTAB", spla.bicgstab)]
    worst = np.inf
    for name, solver in attempts:
        kwargs = {"restart": 60} if solver is spla.gmres else {}
        x, _ = solver(A, b, rtol=rtol, atol=0.0, maxiter=maxiter, M=M, **kwargs)
        residual = float(np.linalg.norm(A @ x - b))
        if residual <= 100 * rtol * norm_b:
            return x, f"{name} (Jacobi preconditioned, relative residual {residual / norm_b:.1e})" \
                if M is not None else f"{name} (relative residual {residual / norm_b:.1e})"
        worst = min(worst, residual / norm_b)
    raise ConvergenceError(f"{what}: {' and '.join(n for n, _ in attempts)} did not converge "
                           f"(best relative residual {worst:.3g}, target {rtol:g}, maxiter {maxiter})")


def proper_subset(S: np.ndarray | list | tuple, n_states: int, name: str = "S") -> np.ndarray:
    """``S`` as a boolean mask (see :func:`state_mask`), refusing the empty set and the whole space
    (conductance, hitting times and exit times need a proper subset)."""
    mask = state_mask(S, n_states)
    if not mask.any():
        raise ValueError(f"{name} must be a non-empty set of states; got the empty set")
    if mask.all():
        raise ValueError(f"{name} must be a proper subset; got the whole state space")
    return mask


def check_steps(t: object, name: str = "t") -> int:
    """A number of steps: an int >= 0 (TypeError / ValueError otherwise)."""
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(t).__name__}")
    if t < 0:
        raise ValueError(f"{name} must be >= 0, got {t}")
    return int(t)
