"""Validation and format helpers for transition matrices (dense ndarray or scipy.sparse)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

#: Below this many states the chain algorithms convert to dense LAPACK, which is faster there.
DENSE_LIMIT = 2048

Matrix = np.ndarray | sp.sparray | sp.spmatrix


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
