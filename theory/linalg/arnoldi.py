"""The eigenvalue of largest modulus of a non-symmetric operator: Krylov-Schur (Stewart, SIAM J. Matrix
Anal. Appl. 23 (2001)) on the primitives of the one Krylov engine (:mod:`mlmix.theory.linalg.krylov`).

An Arnoldi basis V of ``basis_size`` vectors (classical Gram-Schmidt, always twice: "twice is enough")
gives A V_m = V_{m+1} H with H of size (m + 1) x m; the Ritz values are the eigenvalues of H_m (its
first m rows) and the residual of a unit Ritz pair (theta, V_m s) is exactly |h_{m+1}^T s| (the last
row of H). At a restart the real Schur form H_m = Z T Z^T is reordered so that the ``keep`` Ritz
values of largest modulus lead (a complex pair kept whole), V_p <- V_m Z_p, H <- [T_p; h_{m+1}^T Z_p],
and Arnoldi continues from the last basis vector: the Krylov-Schur relation is kept without implicit
shifts. Everything is real (a complex Ritz pair is a 2 x 2 block of T).

No certificate: for a non-normal A a small residual ||A y - theta y|| only says that theta is an
eigenvalue of A + E with ||E|| = ||A y - theta y|| (a point of the pseudospectrum), which may be far
from every eigenvalue of A. Callers report the Ritz value as an estimate and certify by other means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
import torch

from mlmix.theory.linalg.krylov import _basis, _vector, inner, norm, subtract
from mlmix.theory.linalg.operator import OperatorLike, as_operator
from mlmix.theory.linalg.sharding import Comm


@dataclass(frozen=True, eq=False)
class ArnoldiRitz:
    """The Ritz value of largest modulus found: ``value`` (complex), ``residual`` ||A y - theta y|| of its
    unit Ritz vector (from the Krylov-Schur relation), ``matvecs`` used, whether ``residual <= tol``."""

    value: complex
    residual: float
    matvecs: int
    converged: bool


def largest_modulus(A: OperatorLike, v0: torch.Tensor | np.ndarray, *, tol: float, comm: Comm | None = None,
                    basis_size: int = 40, keep: int | None = None, max_matvecs: int = 20_000) -> ArnoldiRitz:
    """The Ritz value of largest modulus of ``A`` by Krylov-Schur (module docstring), stopped when its
    residual is <= ``tol``, when the basis spans an invariant subspace (the Ritz values are then
    eigenvalues of A up to rounding), or after ``max_matvecs`` products (``converged`` False).
    ``comm`` only for an ``apply(v, out)`` function. Memory: ``basis_size + 1`` vectors."""
    v0 = _vector(v0)
    op = as_operator(A, like=v0, comm=comm)
    comm = op.comm
    m = int(basis_size)
    if m < 4:
        raise ValueError(f"basis_size must be >= 4, got {basis_size}")
    keep = min(m - 3, m // 2 if keep is None else int(keep))
    v0_norm = norm(comm, v0)
    if not (math.isfinite(v0_norm) and v0_norm > 0):
        raise ValueError(f"the start vector v0 must be finite and non-zero, got norm {v0_norm}")
    V = _basis(m + 1, v0)
    V[0].copy_(v0).div_(v0_norm)
    H = np.zeros((m + 1, m))
    start, matvecs = 0, 0
    floor = 64 * float(torch.finfo(V.dtype).eps)
    while True:
        end = m
        for j in range(start, m):
            w = op.apply(V[j], V[j + 1])
            matvecs += 1
            h = inner(comm, V[:j + 1], w)
            subtract(V[:j + 1], h, w)
            h2 = inner(comm, V[:j + 1], w)  # the second pass
            subtract(V[:j + 1], h2, w)
            H[:j + 1, j] = (h + h2).cpu().numpy()
            beta = norm(comm, w)
            scale = max(1.0, float(np.abs(H[:j + 1, j]).max()))
            if beta <= floor * scale:  # invariant subspace: the Ritz values are eigenvalues
                H[j + 1, j], end = 0.0, j + 1
                break
            H[j + 1, j] = beta
            w.div_(beta)
        theta, S = la.eig(H[:end, :end], check_finite=False)
        best = int(np.argmax(np.abs(theta)))
        s = S[:, best] / np.linalg.norm(S[:, best])
        residual = float(abs(H[end, :end] @ s)) if end == m else 0.0
        if residual <= tol or end < m or matvecs >= max_matvecs:
            return ArnoldiRitz(complex(theta[best]), residual, matvecs, residual <= tol)
        moduli = np.sort(np.abs(theta))[::-1]
        cut = moduli[keep - 1] * (1 - 1e-12)
        T, Z, p = la.schur(H[:m, :m], output="real", sort=lambda re, im: math.hypot(re, im) >= cut)
        p = int(min(max(p, 1), m - 2))
        if p < m - 2 and T[p, p - 1] != 0:  # never split a 2 x 2 block (a complex pair)
            p += 1
        Zp = torch.as_tensor(Z[:, :p].T.copy(), dtype=V.dtype, device=V.device)
        V[:p] = Zp @ V[:m]
        V[p].copy_(V[m])
        last = H[m, :m] @ Z[:, :p]
        H[:] = 0.0
        H[:p, :p] = T[:p, :p]
        H[p, :p] = last
        start = p
