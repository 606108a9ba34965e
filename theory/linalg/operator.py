"""The one operator type every Krylov solver of mlmix accepts (like ``scipy.sparse.linalg.LinearOperator``).

An :class:`Operator` is a linear map A on R^N, possibly sharded over processes: ``apply(v, out)``
writes A v into ``out`` (torch tensors of this process's ``n`` entries) and returns it; ``comm``
sums inner products over processes (:mod:`mlmix.theory.linalg.sharding`). Every solver of
:mod:`mlmix.theory.linalg.krylov` takes anything :func:`as_operator` accepts, so the assembled
chains (dense ndarray, scipy CSR, a ``scipy.sparse.linalg.LinearOperator``) and the matrix-free
ones (:class:`~mlmix.theory.kernels.operators.KernelOperator` products, sharded or on a GPU) run
through the same Lanczos, GMRES, BiCGSTAB and conjugate gradients.

A matrix on the CPU is applied through numpy views of the torch vectors (no copy of the vector
in, one of the product out): the product itself is scipy's or numpy's, exactly the arithmetic an
ARPACK or scipy solve does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from mlmix.theory.linalg.sharding import LOCAL, Comm

ApplyFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True, eq=False)
class Operator:
    """A linear map on this process's ``n`` entries: ``apply(v, out)`` writes A v into ``out`` and
    returns it; vectors have ``dtype`` and live on ``device``; ``comm`` reduces across processes."""

    apply: ApplyFn
    n: int
    dtype: torch.dtype = torch.float64
    device: torch.device = torch.device("cpu")
    comm: Comm = LOCAL

    def __call__(self, v: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return self.apply(v, out)

    def new(self) -> torch.Tensor:
        """An uninitialised vector of the operator's size, dtype and device."""
        return torch.empty(self.n, dtype=self.dtype, device=self.device)


OperatorLike = Any  # Operator | ApplyFn | np.ndarray | scipy sparse | scipy LinearOperator


def as_operator(A: OperatorLike, *, like: torch.Tensor | None = None, comm: Comm | None = None) -> Operator:
    """The :class:`Operator` of ``A``: an Operator (returned as is), a dense ndarray, a scipy sparse
    matrix or ``LinearOperator`` (square, applied in float64 on the CPU), or a function
    ``apply(v, out)`` whose size, dtype and device are those of ``like`` (a vector it acts on).
    ``comm`` is the communicator of a function; an Operator or a matrix brings its own (local)."""
    if isinstance(A, Operator):
        if comm is not None and comm is not A.comm:
            raise ValueError("the operator already has its communicator; do not pass comm")
        return A
    if callable(A) and not isinstance(A, (np.ndarray, spla.LinearOperator)) and not sp.issparse(A):
        if like is None:
            raise TypeError("a function apply(v, out) needs a vector it acts on (like=) for its size")
        return Operator(A, like.numel(), like.dtype, like.device, LOCAL if comm is None else comm)
    if comm is not None and comm is not LOCAL:
        raise ValueError("an assembled matrix is applied on one process; its communicator is local")
    if sp.issparse(A):
        M = sp.csr_array(A)
    elif isinstance(A, spla.LinearOperator):
        M = A
    elif isinstance(A, np.ndarray):
        M = np.asarray(A, dtype=np.float64)
    else:
        raise TypeError(f"cannot use a {type(A).__name__} as a linear operator")
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"a square operator is needed, got shape {M.shape}")

    def apply(v: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        out.copy_(torch.from_numpy(np.asarray(M @ v.numpy(), dtype=np.float64).reshape(-1)))
        return out

    return Operator(apply, int(M.shape[0]))
