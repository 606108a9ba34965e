"""Krylov solvers on matrix-free operators: the largest eigenpair of a symmetric operator (thick-restart
Lanczos) and a non-symmetric linear system (restarted GMRES).

Vectors are torch tensors; every inner product goes through a communicator
(:mod:`mlmix.theory.linalg.distributed`), so the same code runs on one process or on a sharded state
vector. Neither solver certifies anything by itself: they return what the caller needs to do so
(the Ritz vector, whose residual the caller recomputes with the operator; GMRES's true residual).

Thick-restart Lanczos (Wu and Simon, SIAM J. Matrix Anal. Appl. 22 (2000)): a Lanczos basis of
``basis_size`` vectors with full re-orthogonalisation (the three-term step, then one classical
Gram-Schmidt pass against the whole basis: "twice is enough"); at a restart the ``keep`` largest
Ritz vectors and the last Lanczos vector are kept, so T becomes an arrowhead matrix. The Ritz
value's residual ||A y - theta y|| is estimated as beta_m |e_m^T s| for free at each restart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from mlmix.theory.linalg.distributed import LOCAL, Comm

#: Columns updated at a time when the kept Ritz vectors overwrite the basis in place.
_CHUNK = 1 << 14

ApplyFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
ProgressFn = Callable[[int, float, float], None]


def inner(comm: Comm, V: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """V @ w summed over all processes (V a matrix of row vectors or a single vector)."""
    return comm.allreduce_(V @ w)


def norm(comm: Comm, w: torch.Tensor) -> float:
    """The Euclidean norm of a (sharded) vector."""
    return math.sqrt(float(inner(comm, w, w)))


@dataclass(frozen=True, eq=False)
class RitzPair:
    """The largest Ritz pair found: ``value`` theta, unit ``vector`` y, ``residual_estimate`` of
    ||A y - theta y||, ``next_value`` (the second Ritz value: an estimate, from below by Cauchy
    interlacing, of the next eigenvalue), ``matvecs`` used, whether the tolerance was met."""

    value: float
    vector: torch.Tensor
    residual_estimate: float
    next_value: float | None
    matvecs: int
    converged: bool


def lanczos_largest(apply: ApplyFn, v0: torch.Tensor, *, tol: Callable[[float], float], comm: Comm = LOCAL,
                    basis_size: int = 16, keep: int | None = None, max_matvecs: int = 20_000,
                    progress: ProgressFn | None = None) -> RitzPair:
    """Largest eigenpair of a symmetric operator by thick-restart Lanczos.

    ``apply(v, out)`` writes A v into ``out`` and returns it; ``v0`` is the start vector (keep it
    orthogonal to any eigenvector you deflate; ``apply`` must then project its output too).
    Stops when the residual estimate beta |s_m| <= ``tol(theta)``, or when ``max_matvecs`` is reached
    or the estimate, already within 1000 x the tolerance, has not improved by 10% in eight restarts
    (the rounding floor; ``converged`` False). Memory:
    ``basis_size + 1`` vectors.
    """
    m = int(basis_size)
    if m < 4:
        raise ValueError(f"basis_size must be >= 4, got {basis_size}")
    keep = max(1, min(m - 2, m // 2 if keep is None else int(keep)))
    v0_norm = norm(comm, v0)
    if not (math.isfinite(v0_norm) and v0_norm > 0):
        raise ValueError(f"the start vector v0 must be finite and non-zero, got norm {v0_norm}")
    N = v0.numel()
    V = torch.empty((m + 1, N), dtype=v0.dtype, device=v0.device)
    V[0].copy_(v0).div_(v0_norm)
    del v0  # the caller's start vector is not needed again (frees it when passed as a temporary)
    T = np.zeros((m, m))
    k, matvecs, best, stale = 0, 0, math.inf, 0
    floor = 64 * float(torch.finfo(V.dtype).eps)
    while True:
        end, beta = m, 0.0
        for j in range(k, m):
            w = apply(V[j], V[j + 1])
            matvecs += 1
            first = range(0, j + 1) if j == k else range(j - 1, j + 1)  # arrowhead after a restart
            h = inner(comm, V[first.start:j + 1], w)
            w.addmv_(V[first.start:j + 1].T, h, alpha=-1.0)
            h2 = inner(comm, V[:j + 1], w)  # second pass against the whole basis
            w.addmv_(V[:j + 1].T, h2, alpha=-1.0)
            h = h.cpu().numpy()
            T[first.start:j + 1, j] = h
            T[j, first.start:j + 1] = h
            T[j, j] += float(h2[j])
            beta = norm(comm, w)
            if beta <= floor * max(1.0, abs(T[j, j])):  # invariant subspace: the Ritz values are exact
                end, beta = j + 1, 0.0
                break
            w.div_(beta)
            if j + 1 < m:
                T[j, j + 1] = T[j + 1, j] = beta
        theta, S = np.linalg.eigh((T[:end, :end] + T[:end, :end].T) / 2)
        order = np.argsort(-theta)
        theta, S = theta[order], S[:, order]
        residual = beta * abs(S[end - 1, 0])
        if progress is not None:
            progress(matvecs, residual, tol(theta[0]))
        target = tol(theta[0])
        stale = 0 if residual < 0.9 * best or residual > 1e3 * target else stale + 1  # stalled near the target
        best = min(best, residual)
        converged = residual <= target
        if converged or end < m or matvecs >= max_matvecs or stale >= 8:
            y = torch.mv(V[:end].T, torch.as_tensor(S[:, 0], dtype=V.dtype, device=V.device))
            y.div_(norm(comm, y))
            return RitzPair(float(theta[0]), y, float(residual), float(theta[1]) if end > 1 else None, matvecs,
                            bool(converged or end < m))
        Sk = torch.as_tensor(S[:, :keep].T.copy(), dtype=V.dtype, device=V.device)
        for c in range(0, N, _CHUNK):  # V[:keep] <- S_k^T V[:m], in place, chunk by chunk
            V[:keep, c:c + _CHUNK] = Sk @ V[:m, c:c + _CHUNK]
        V[keep].copy_(V[m])
        T[:] = 0.0
        T[np.arange(keep), np.arange(keep)] = theta[:keep]
        T[keep, :keep] = T[:keep, keep] = beta * S[m - 1, :keep]
        k = keep


@dataclass(frozen=True, eq=False)
class LinearSolve:
    """GMRES's solution, its true relative residual ||b - A x|| / ||b||, matvecs used, convergence."""

    x: torch.Tensor
    relative_residual: float
    matvecs: int
    converged: bool


def gmres(apply: ApplyFn, b: torch.Tensor, *, x0: torch.Tensor | None = None, comm: Comm = LOCAL,
          restart: int = 30, rtol: float = 1e-12, max_matvecs: int = 5_000,
          progress: ProgressFn | None = None) -> LinearSolve:
    """Solve A x = b by GMRES(``restart``) with classical Gram-Schmidt applied twice and Givens
    rotations; the true residual is recomputed at every restart and decides convergence
    (||b - A x|| <= rtol ||b||). Memory: ``restart + 3`` vectors."""
    m = int(restart)
    norm_b = norm(comm, b)
    x = torch.zeros_like(b) if x0 is None else x0.clone()
    if norm_b == 0:
        return LinearSolve(torch.zeros_like(b), 0.0, 0, True)
    V = torch.empty((m + 1, b.numel()), dtype=b.dtype, device=b.device)
    r = torch.empty_like(b)
    matvecs, best, stale = 0, math.inf, 0
    while True:
        apply(x, r)
        matvecs += 1
        r.neg_().add_(b)
        beta = norm(comm, r)
        rel = beta / norm_b
        if progress is not None:
            progress(matvecs, rel, rtol)
        stale = 0 if rel < best / 2 else stale + 1
        best = min(best, rel)
        if rel <= rtol or matvecs >= max_matvecs or stale >= 3:
            return LinearSolve(x, rel, matvecs, rel <= rtol)
        V[0].copy_(r).div_(beta)
        H = np.zeros((m + 1, m))
        cs, sn = np.zeros(m), np.zeros(m)
        g = np.zeros(m + 1)
        g[0] = beta
        used = 0
        for j in range(m):
            w = apply(V[j], V[j + 1])
            matvecs += 1
            h = inner(comm, V[:j + 1], w)
            w.addmv_(V[:j + 1].T, h, alpha=-1.0)
            h2 = inner(comm, V[:j + 1], w)
            w.addmv_(V[:j + 1].T, h2, alpha=-1.0)
            H[:j + 1, j] = (h + h2).cpu().numpy()
            H[j + 1, j] = norm(comm, w)
            if H[j + 1, j] > 0:
                w.div_(H[j + 1, j])
            for i in range(j):  # previous rotations
                H[i, j], H[i + 1, j] = cs[i] * H[i, j] + sn[i] * H[i + 1, j], -sn[i] * H[i, j] + cs[i] * H[i + 1, j]
            rho = math.hypot(H[j, j], H[j + 1, j])
            cs[j], sn[j] = (H[j, j] / rho, H[j + 1, j] / rho) if rho > 0 else (1.0, 0.0)
            H[j, j], H[j + 1, j] = rho, 0.0
            g[j], g[j + 1] = cs[j] * g[j], -sn[j] * g[j]
            used = j + 1
            if abs(g[j + 1]) <= 0.5 * rtol * norm_b or matvecs >= max_matvecs:
                break
        coef = np.linalg.solve(np.triu(H[:used, :used]), g[:used]) if used else np.zeros(0)
        x.addmv_(V[:used].T, torch.as_tensor(coef, dtype=b.dtype, device=b.device))


def conjugate_gradient(apply: ApplyFn, b: torch.Tensor, *, comm: Comm = LOCAL, rtol: float = 1e-13,
                       max_matvecs: int = 20_000, progress: ProgressFn | None = None) -> LinearSolve:
    """Solve A x = b for a symmetric positive definite A by conjugate gradients (Hestenes and Stiefel
    1952); the true residual ||b - A x|| is recomputed every 50 steps and at the end and decides
    convergence (<= rtol ||b||). Memory: 4 vectors."""
    norm_b = norm(comm, b)
    x = torch.zeros_like(b)
    if norm_b == 0:
        return LinearSolve(x, 0.0, 0, True)
    r = b.clone()
    p = r.clone()
    Ap = torch.empty_like(b)
    rr = float(inner(comm, r, r))
    matvecs = 0
    while True:
        apply(p, Ap)
        matvecs += 1
        pAp = float(inner(comm, p, Ap))
        if not pAp > 0:
            break
        alpha = rr / pAp
        x.add_(p, alpha=alpha)
        r.sub_(Ap, alpha=alpha)
        if matvecs % 50 == 0:  # replace the recursive residual by the true one
            apply(x, r)
            matvecs += 1
            r.neg_().add_(b)
        rr_new = float(inner(comm, r, r))
        if progress is not None:
            progress(matvecs, math.sqrt(rr_new) / norm_b, rtol)
        if math.sqrt(rr_new) <= 0.5 * rtol * norm_b or matvecs >= max_matvecs:
            break
        p.mul_(rr_new / rr).add_(r)
        rr = rr_new
    apply(x, r)
    matvecs += 1
    rel = norm(comm, r.neg_().add_(b)) / norm_b
    return LinearSolve(x, rel, matvecs, rel <= rtol)
