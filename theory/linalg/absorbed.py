"""Absorbed solves: (I - P_UU) x = b on a set U of states whose rows leak mass to absorbing sets, the linear
system behind hitting times, absorption probabilities and committors (:mod:`mlmix.theory.chain.hitting`).

* :func:`solve_absorbed` (a matrix): a non-singular M-matrix system with a non-negative right-hand side, solved
  by GTH elimination (subtraction-free: entrywise relative error <= 8 m^3 u, O'Cinneide) up to
  :data:`~mlmix.limits.DENSE_HITTING_LIMIT` unknowns, by a Krylov method with its residual reported beyond.
* :func:`operator_absorbed` (a matrix-free :class:`~mlmix.theory.linalg.operator.TransitionOperator`): conjugate
  gradients on D^1/2 (I - P_UU) D^-1/2 (symmetric positive definite) for a reversible kernel with pi at hand,
  GMRES(50) otherwise; on one process or sharded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from mlmix.limits import DENSE_HITTING_LIMIT
from mlmix.theory.linalg.elimination import eliminate
from mlmix.theory.linalg.matrices import krylov_solve
from mlmix.theory.results import EPS
from mlmix.validation import Matrix

if TYPE_CHECKING:
    import torch

    from mlmix.theory.linalg.krylov import LinearSolve
    from mlmix.theory.linalg.operator import TransitionOperator


def solve_absorbed(P: Matrix, unknown: np.ndarray, exits: list[np.ndarray], rhs: np.ndarray | None,
                    what: str) -> tuple[np.ndarray, str, float | None, float | None]:
    """Solve (I - P_UU) x = b on the states ``unknown`` where the exits (masks of absorbing sets) carry
    the rest of each row's mass; b = ``rhs`` (on U) or, when None, the flow into exits[0].
    Returns (x on U, method, entrywise rel_error, residual)."""
    idx = np.flatnonzero(unknown)
    m = idx.size
    Ps = sp.csr_array(P)
    rows = Ps[idx]
    ex = np.stack([np.asarray(rows[:, np.flatnonzero(e)].sum(axis=1)).ravel() for e in exits], axis=1)
    if m <= DENSE_HITTING_LIMIT:
        el = eliminate(rows[:, idx].toarray(), exits=ex, eliminate_mask=np.ones(m, dtype=bool))
        x = el.exit_solution()[:, 0] if rhs is None else el.solve(rhs)
        return x, f"GTH elimination of the {m} unknown states (subtraction-free)", min(8.0 * m**3 * EPS, 1.0), None
    sub = sp.csr_array(rows[:, idx])
    b = ex[:, 0] if rhs is None else rhs
    op = sp.eye_array(m, format="csr") - sub
    x, method = krylov_solve(op, b, spd=False, diagonal=op.diagonal(), what=what)
    res = float(np.linalg.norm(op @ x - b) / max(np.linalg.norm(b), 1e-300))
    return x, method, None, res


def operator_absorbed(op: TransitionOperator, unknown: torch.Tensor, b: torch.Tensor, pi: torch.Tensor | None) -> tuple[
        torch.Tensor, LinearSolve, str]:
    """x with x = 0 off ``unknown`` and (I - P_UU) x = b on it (b = 0 off U): conjugate gradients on the
    symmetrised system when the chain is reversible and pi is at hand, else GMRES(50) (pi is only a
    preconditioner here: the a-posteriori bounds do not use it)."""

    from mlmix.theory.linalg.krylov import conjugate_gradient, gmres  # deferred: torch
    from mlmix.theory.linalg.operator_vectors import MAX_MATVECS, SOLVE_RTOL

    keep = unknown.to(op.dtype)
    if op.reversible and pi is not None:  # D^1/2 (I - P_UU) D^-1/2 is symmetric positive definite
        r = pi.sqrt()

        def sym(y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            op.apply(y * keep, "symmetric", out)
            return out.mul_(keep).neg_().add_(y)

        sol = conjugate_gradient(sym, b * r, comm=op.comm, rtol=SOLVE_RTOL, max_matvecs=MAX_MATVECS)
        how = f"conjugate gradients on D^1/2 (I - P_UU) D^-1/2 (reversible), {sol.matvecs} applications"
        return sol.x / r, sol, how

    def apply(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        op.apply(x * keep, "functions", out)
        return out.mul_(keep).neg_().add_(x)

    sol = gmres(apply, b, comm=op.comm, restart=50, rtol=SOLVE_RTOL, max_matvecs=MAX_MATVECS)
    return sol.x, sol, f"GMRES(50) on (I - P_UU) x = b, {sol.matvecs} applications"
