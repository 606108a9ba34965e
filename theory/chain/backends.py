"""The operations the quantities need from a chain, one protocol (:class:`Backend`) with one implementation per
representation (:attr:`ChainFacts.representation <mlmix.theory.chain.chain_facts.ChainFacts.representation>`),
each wrapping the existing algorithms of its room (no algorithm is written here):

* ``apply(v, side)``: P v (``side`` "functions") or v P ("measures");
* ``rounding()``: gamma, the relative rounding of one application to a non-negative vector, entrywise
  |fl(P v) - P v| <= gamma P v (Higham, *Accuracy and Stability*, 3.5: gamma_d = d u / (1 - d u) for d
  non-negative terms per entry; d = N dense, the longest row or column CSR, the operator's own ``terms``);
* ``absorbed_solve(unknown, exits, rhs, what)``: (I - P_UU) x = b on the states U = ``unknown``, whose rows
  leak the rest of their mass to the ``exits`` (b = ``rhs``, or the flow into ``exits[0]``), with its
  certificate (:class:`AbsorbedSolution`);
* ``reaches(sources, allowed)``: the states of ``allowed`` with a path into ``sources`` inside ``allowed``.

Backends: :class:`DenseBackend` (GTH elimination of the unknowns up to
:data:`~mlmix.limits.DENSE_HITTING_LIMIT`), :class:`SparseBackend` (the same, CSR products; Krylov beyond), both
on the chain's matrix by :func:`~mlmix.theory.linalg.absorbed.solve_absorbed`; :class:`OperatorBackend` (a
matrix-free :class:`~mlmix.theory.linalg.operator.TransitionOperator`: conjugate gradients or GMRES by
:func:`~mlmix.theory.linalg.absorbed.operator_absorbed`, certified a posteriori: with r = b - (I - P_UU) x_hat
and M = (I - P_UU)^-1 >= 0, x - x_hat = M r, so |x - x_hat| <= rho M 1 entrywise, rho = ||r||_inf plus the
rounding of computing r). A quantity is written once against the protocol: ``quantity(backend, ...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

import numpy as np
import scipy.sparse as sp

from mlmix.theory.chain.structure import reaches
from mlmix.theory.linalg.absorbed import operator_absorbed, solve_absorbed
from mlmix.theory.results import EPS
from mlmix.validation import Matrix

if TYPE_CHECKING:
    import torch

    from mlmix.theory.linalg.operator import TransitionOperator

#: The sides of :meth:`Backend.apply`: "functions" P v, "measures" v P (the operator's own mode names).
SIDES = ("functions", "measures")


@dataclass(frozen=True)
class AbsorbedSolution:
    """x on the unknown states (in index order) of (I - P_UU) x = b, with its certificate: ``rel_error`` an
    entrywise relative bound known a priori (GTH), or ``rho`` (a posteriori, module doc: |x - x_hat| <= rho
    (I - P_UU)^-1 1 entrywise; for b = 1 that is rho x, a relative rho / (1 - rho)); ``residual`` the relative
    residual of an iterative solve (None after an elimination)."""

    x: np.ndarray
    method: str
    rel_error: float | None
    residual: float | None
    rho: float | None = None


class Backend(Protocol):
    """The operations of a chain the quantities use (module doc)."""

    representation: str
    n_states: int

    @property
    def details(self) -> dict[str, Any]:
        """What a vector result of this backend carries in its ``details`` (the representation, where it is
        not a matrix)."""

    def apply(self, v: np.ndarray, side: str) -> np.ndarray:
        """P v (``side`` "functions") or v P ("measures")."""

    def rounding(self) -> float:
        """gamma of one application to a non-negative vector (module doc)."""

    def absorbed_solve(self, unknown: np.ndarray, exits: list[np.ndarray], rhs: np.ndarray | None,
                       what: str) -> AbsorbedSolution:
        """(I - P_UU) x = b on ``unknown`` (boolean masks over all states; b = ``rhs`` on U or the flow into
        ``exits[0]``)."""

    def reaches(self, sources: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """The states of ``allowed`` (or of ``sources``) with a path into ``sources`` inside ``allowed``."""


def _gamma(d: int) -> float:
    return d * EPS / (1 - d * EPS)


def _check_side(side: str) -> None:
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")


@dataclass(frozen=True)
class DenseBackend:
    """A chain of at most ``dense_limit`` states (P stored dense or CSR): GTH, dense products."""

    P: Matrix
    representation: ClassVar[str] = "dense"

    @property
    def n_states(self) -> int:
        return self.P.shape[0]

    @property
    def details(self) -> dict[str, Any]:
        return {}

    def apply(self, v: np.ndarray, side: str) -> np.ndarray:
        _check_side(side)
        return self.P @ v if side == "functions" else self.P.T @ v

    def rounding(self) -> float:
        return _gamma(self.n_states)

    def absorbed_solve(self, unknown: np.ndarray, exits: list[np.ndarray], rhs: np.ndarray | None,
                       what: str) -> AbsorbedSolution:
        x, method, rel, res = solve_absorbed(self.P, unknown, exits, rhs, what)
        return AbsorbedSolution(x, method, rel, res)

    def reaches(self, sources: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        return reaches(self.P, sources, allowed)


@dataclass(frozen=True)
class SparseBackend(DenseBackend):
    """A CSR chain beyond ``dense_limit``: CSR products, GTH on small unknown sets, Krylov on large ones."""

    representation: ClassVar[str] = "sparse"

    def rounding(self) -> float:
        Ps = sp.csr_array(self.P)
        PT = sp.csr_array(Ps.T)
        return _gamma(max(int(np.max(np.diff(Ps.indptr), initial=0)), int(np.max(np.diff(PT.indptr), initial=0))))


@dataclass(frozen=True)
class OperatorBackend:
    """A matrix-free kernel ``op`` (on one process or sharded); ``pi``: the stationary law as the kernel's
    tensor, or None, asked for only by a solve (it selects conjugate gradients on a reversible kernel)."""

    op: TransitionOperator
    pi: Callable[[], torch.Tensor | None] = lambda: None
    representation: ClassVar[str] = "operator"

    @property
    def n_states(self) -> int:
        return self.op.n_states

    @property
    def details(self) -> dict[str, Any]:
        return {"representation": "operator"}

    def apply(self, v: np.ndarray, side: str) -> np.ndarray:
        """The operator's ``matvec`` (P v) or ``rmatvec`` (v P), float64 (one process)."""
        _check_side(side)
        out = self.op.matvec(np.ravel(v)) if side == "functions" else self.op.rmatvec(np.ravel(v))
        return np.asarray(out, dtype=np.float64)

    def rounding(self) -> float:
        from mlmix.theory.linalg.operator_vectors import rounding  # deferred: torch

        return rounding(self.op)

    def absorbed_solve(self, unknown: np.ndarray, exits: list[np.ndarray], rhs: np.ndarray | None,
                       what: str) -> AbsorbedSolution:
        """The solve of :func:`~mlmix.theory.linalg.absorbed.operator_absorbed` with rho (module doc) from the
        residual and gamma (b + |x| + P |x|), the rounding of computing it."""
        from mlmix.theory.linalg.operator_vectors import gathered, global_total, local_part  # deferred: torch

        op = self.op
        U = local_part(op, unknown)
        keep = U.to(op.dtype)
        if rhs is None:
            b = op.apply(local_part(op, exits[0]).to(op.dtype), "functions").mul_(keep)
        else:
            full = np.zeros(self.n_states)
            full[unknown] = rhs
            b = local_part(op, full).to(op.dtype) * keep
        x, sol, how = operator_absorbed(op, U, b, self.pi())
        x = x * keep
        Px = op.apply(x, "functions")
        r = (b - (x - Px * keep)) * keep
        rho = global_total(op, (r.abs() + self.rounding() * (b + x.abs() + op.apply(x.abs(), "functions")) * keep),
                           "max")
        return AbsorbedSolution(gathered(op, x)[unknown], how, None, sol.relative_residual, rho)

    def reaches(self, sources: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """``allowed`` or ``sources``: the matrix-free routes take the kernel irreducible (its conditionals
        positive), as the kernels that build one are."""
        return allowed | sources


def matrix_backend(P: Matrix) -> DenseBackend:
    """The backend of a bare matrix: :class:`SparseBackend` for a scipy.sparse P, else :class:`DenseBackend`."""
    return SparseBackend(P) if sp.issparse(P) else DenseBackend(P)
