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

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

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


#: The directions of :meth:`TransitionOperator.apply`.
MODES = ("functions", "measures", "symmetric")

#: A flow factor pair of :meth:`TransitionOperator.fibre_pairs`: (pi(x), P-factor, data at x, data at y).
FlowPairs = Iterator[tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor]]]


class TransitionOperator(ABC):
    """A Markov kernel P on ``n_states`` states, known by what it does to vectors (this process's
    ``local_size`` entries, torch tensors of ``dtype`` on ``device``; ``comm`` reduces over processes).

    :meth:`apply` ``(u, mode, out)`` is the one product; its three modes are

    * ``"functions"``:  (P u)(x) = sum_y P(x, y) u(y)          (a function u: expectations one step on);
    * ``"measures"``:   (u P)(y) = sum_x u(x) P(x, y) = P^T u  (a measure u: the law one step on);
    * ``"symmetric"``:  D^{1/2} P D^{-1/2} u, D = diag(pi), only when P is ``reversible``: the symmetric
      matrix with entries sqrt(pi(x) / pi(y)) P(x, y) = sqrt(P(x, y) P(y, x)) (detailed balance), which
      an implementation forms without pi (square roots of conditionals, or of P(x, y) P(y, x)).

    The *flows* pi(x) P(x, y), x != y, are the terms of the Dirichlet form
    E(f, f) = (1/2) sum_{x,y} pi(x) P(x, y) (f(x) - f(y))^2 and of the escape flow
    Q(S, S^c) = sum_{x in S, y not in S} pi(x) P(x, y); :meth:`fibre_pairs` yields them slice by
    slice as factors, and :meth:`dirichlet_form` / :meth:`escape_flow` sum them as non-negative terms
    (no cancellation, so a form of 1e-300 keeps its relative accuracy).

    Facts the rounding bounds and the algorithm choices need: :attr:`terms` (non-negative products
    summed per entry of P v), :meth:`trace` (tr P), :attr:`lambda_min` (a lower bound on every real
    eigenvalue), :meth:`conditionals_positive` (one aperiodic class, established without a graph),
    :attr:`log_joint` (log of an unnormalised stationary law when the operator knows one exactly, else
    None: the stationary law then comes from the Krylov route with its certificate) and :attr:`matrix`
    (the assembled P when the operator holds one, else None).
    """

    #: States of the chain (over all processes) and this process's share of them.
    n_states: int
    local_size: int
    comm: Comm = LOCAL
    dtype: torch.dtype = torch.float64
    device: torch.device = torch.device("cpu")
    #: P is reversible with respect to its stationary law (the "symmetric" mode is available).
    reversible: bool = False
    #: (log mu (unnormalised, local tensor), its absolute rounding bound), or None.
    log_joint: tuple[torch.Tensor, float] | None = None
    #: The assembled transition matrix (dense or CSR) when the operator holds one, else None.
    matrix: Any = None
    #: A one-line description for reports.
    description: str = "transition operator"

    @abstractmethod
    def apply(self, u: torch.Tensor, mode: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """P in direction ``mode`` (:data:`MODES`, formulas in the class docstring) on a local tensor of
        this operator's dtype and device, written into ``out`` when given (no checks)."""

    @abstractmethod
    def fibre_pairs(self, pi: torch.Tensor, data: Sequence[torch.Tensor]) -> FlowPairs:
        """The flows pi(x) P(x, y), x != y, slice by slice: tuples (pi(x), p, data at x, data at y) of
        broadcast-compatible tensors whose product pi(x) p is the flow of each pair (pairs x = y may be
        included with any p: every use here multiplies them by a difference that vanishes there). The
        flows of a pair add up to pi(x) P(x, y); a pair is yielded on the process holding x."""

    @abstractmethod
    def conditionals_positive(self) -> bool:
        """Whether the chain is established to be irreducible and aperiodic without building its graph
        (every stored move probability positive; on every process). False: not established."""

    @abstractmethod
    def trace(self) -> float:
        """tr P = sum_x P(x, x) (all processes)."""

    @property
    @abstractmethod
    def terms(self) -> int:
        """How many non-negative products one entry of P v sums (at most): the rounding of an application
        is gamma_k with k = terms + a few for the stored coefficients."""

    @property
    def lambda_min(self) -> float:
        """A lower bound on every real eigenvalue of P (-1 in general; 0 for a positive semi-definite P)."""
        return -1.0

    # ---------------------------------------------------------------- products on numpy or torch vectors
    def vector(self, v: Any, name: str = "vector") -> torch.Tensor:
        """``v`` (numpy or torch) as a local tensor of this operator's dtype and device, its length checked."""
        t = torch.as_tensor(v, device=self.device)
        if t.shape != (self.local_size,):
            raise ValueError(f"{name} must be a vector over the {self.local_size} local states, got shape "
                             f"{tuple(t.shape)}")
        return t.to(self.dtype)

    @staticmethod
    def _like(result: torch.Tensor, template: Any) -> Any:
        return result.cpu().numpy() if isinstance(template, np.ndarray) else result

    def matvec(self, f: Any) -> Any:
        """(P f)(x) = sum_y P(x, y) f(y) for a function f (numpy in, numpy out; torch in, torch out)."""
        return self._like(self.apply(self.vector(f, "f"), "functions"), f)

    def rmatvec(self, mu: Any) -> Any:
        """(mu P)(y) = sum_x mu(x) P(x, y) for a measure mu (= P^T mu)."""
        return self._like(self.apply(self.vector(mu, "mu"), "measures"), mu)

    def symmetric_matvec(self, u: Any) -> Any:
        """D^{1/2} P D^{-1/2} u (D = diag pi) of a reversible P, formed without pi."""
        if not self.reversible:
            raise ValueError("symmetric_matvec needs a reversible kernel")
        return self._like(self.apply(self.vector(u, "u"), "symmetric"), u)

    # ---------------------------------------------------------------- sums of flows
    def dirichlet_form(self, f: torch.Tensor, pi: torch.Tensor) -> float:
        """E(f, f) = (1/2) sum_{x,y} pi(x) P(x, y) (f(x) - f(y))^2 as a sum of non-negative terms
        (no cancellation: accurate to rounding of the sum whatever the size of E). Summed over
        all processes."""
        return float(self.comm.allreduce_(self._flow_sum(pi, f, lambda fx, fy, t: torch.sub(fx, fy, out=t).square_()))) / 2

    def escape_flow(self, inside: torch.Tensor, pi: torch.Tensor) -> float:
        """Q(S, S^c) = sum_{x in S, y not in S} pi(x) P(x, y) for the set S = {inside}, as a sum of
        non-negative terms (all processes)."""
        s = inside.to(pi.dtype)
        return float(self.comm.allreduce_(self._flow_sum(pi, s, lambda sx, sy, t: torch.sub(1, sy, out=t).mul_(sx))))

    def _flow_sum(self, pi: torch.Tensor, data: torch.Tensor, term) -> torch.Tensor:
        """sum over the pairs of :meth:`fibre_pairs` of pi(x) p term(data(x), data(y)), this process's
        part, each term computed into one reused buffer (``term(dx, dy, out)`` writes out)."""
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        # a local buffer: freed on return, and in the dtype of data and pi
        buf = torch.empty(0, dtype=torch.promote_types(data.dtype, pi.dtype), device=self.device)
        for px, cxy, (dx,), (dy,) in self.fibre_pairs(pi, [data]):  # the pairs y = x add exact zeros
            # broadcast views, each dim 1 or whole (torch.broadcast_shapes: 0.3 s of imports)
            shape = tuple(max(sizes) for sizes in zip(px.shape, dx.shape, dy.shape))
            size = math.prod(shape)
            if buf.numel() < size:
                buf = torch.empty(size, dtype=buf.dtype, device=self.device)
            t = term(dx.expand(shape), dy.expand(shape), buf[:size].view(shape))
            total += t.mul_(px).mul_(cxy).sum(dtype=torch.float64)
        return total
