"""The one Krylov engine of mlmix: extreme eigenpairs of a symmetric operator (thick-restart Lanczos)
and linear systems (restarted GMRES, BiCGSTAB, conjugate gradients, each optionally preconditioned).

Every solver takes anything :func:`~mlmix.theory.linalg.operator.as_operator` accepts: an assembled
matrix (dense or CSR: the chains below the matrix-free size) or a matrix-free, possibly sharded,
operator. Vectors are torch tensors; every inner product goes through the operator's communicator
(:mod:`mlmix.theory.linalg.sharding`), so the same code runs on one process or on a sharded state
vector. No solver certifies anything by itself: they return what the caller needs to do so (the
Ritz vectors, whose residuals the caller recomputes with the operator; a solve's true residual).

Thick-restart Lanczos (Wu and Simon, SIAM J. Matrix Anal. Appl. 22 (2000)): a Lanczos basis of
``basis_size`` vectors with full re-orthogonalisation (the three-term step, then one classical
Gram-Schmidt pass against the whole basis: "twice is enough"); at a restart the ``keep`` largest
Ritz vectors and the last Lanczos vector are kept, so T becomes an arrowhead matrix. The Ritz
value's residual ||A y - theta y|| is estimated as beta_m |e_m^T s| for free at each restart.

On a CPU the products with the basis (:func:`inner`, :func:`subtract`) read it two rows at a time in
column blocks, and each row of a basis is padded by 4 KB: both keep the memory bus near its stream
rate, where a product streaming a dozen rows that lie a power of two of bytes apart ran at about half
of it (``benchmarks/bench_bandwidth.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from mlmix.errors import ConvergenceError
from mlmix.theory.linalg.operator import Operator, OperatorLike, as_operator
from mlmix.theory.linalg.sharding import Comm

#: Columns updated at a time when the kept Ritz vectors overwrite the basis in place.
_CHUNK = 1 << 14

#: Orderings of Ritz values: the wanted end of the spectrum first.
_ORDER = {"LA": lambda theta: -theta, "SA": lambda theta: theta, "LM": lambda theta: -np.abs(theta)}

ProgressFn = Callable[[int, float, float], None]


def _vector(v: torch.Tensor | np.ndarray) -> torch.Tensor:
    """A vector as a torch tensor (a float64 ndarray is shared, not copied)."""
    return torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64)) if isinstance(v, np.ndarray) else v


#: On a CPU a product with many basis vectors reads them two at a time, in column blocks of 2^18
#: entries (the block of w stays in cache): a matrix-vector product that streams a dozen long rows at
#: once reaches about half the memory bandwidth (a Lanczos pass over 9 to 16 rows of 2^24: 0.40 s at
#: once, 0.22 s two by two; docs/benchmarks.md has the command).
_ROWS, _COLUMNS = 2, 1 << 18


def _blocked(V: torch.Tensor) -> bool:
    return V.dim() == 2 and V.shape[0] > _ROWS and V.shape[1] > _COLUMNS and V.device.type == "cpu"


def _tiles(V: torch.Tensor):
    """(row group, column block) of V, column block by column block: rows two at a time, the last
    group taking the remainder (one row alone is slow)."""
    rows = V.shape[0]
    bounds = [g * _ROWS for g in range(max(1, rows // _ROWS))] + [rows]
    groups = [slice(a, b) for a, b in zip(bounds, bounds[1:])]
    for c in range(0, V.shape[1], _COLUMNS):
        for r in groups:
            yield r, slice(c, c + _COLUMNS)


def _basis(rows: int, like: torch.Tensor) -> torch.Tensor:
    """An uninitialised (rows, n) basis of contiguous rows. On a CPU each row is followed by 4 KB of
    padding: rows a power of two of bytes apart fall on the same memory banks and slow the products
    above (a Lanczos pass over 9 to 16 rows of 2^24: 0.22 s unpadded, 0.185 s padded)."""
    n = like.numel()
    pad = 512 if like.device.type == "cpu" and n > _COLUMNS else 0
    return torch.empty((rows, n + pad), dtype=like.dtype, device=like.device)[:, :n]


def inner(comm: Comm, V: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """V @ w summed over all processes (V a matrix of row vectors or a single vector)."""
    if not _blocked(V):
        return comm.allreduce_(V @ w)
    h = torch.zeros(V.shape[0], dtype=V.dtype)
    for r, cols in _tiles(V):
        h[r].addmv_(V[r, cols], w[cols])
    return comm.allreduce_(h)


def subtract(V: torch.Tensor, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """w -= V^T h in place (V a matrix of row vectors, h their coefficients), blocked as :func:`inner`."""
    if not _blocked(V):
        return w.addmv_(V.T, h, alpha=-1.0)
    for r, cols in _tiles(V):
        w[cols].addmv_(V[r, cols].T, h[r], alpha=-1.0)
    return w


def norm(comm: Comm, w: torch.Tensor) -> float:
    """The Euclidean norm of a (sharded) vector."""
    return math.sqrt(float(inner(comm, w, w)))


@dataclass(frozen=True, eq=False)
class RitzPairs:
    """The k wanted Ritz pairs found, best first: ``values`` theta_1..theta_k, unit ``vectors`` (k, n),
    ``residual_estimates`` of ||A y_j - theta_j y_j||, ``next_value`` (the next Ritz value: an
    estimate, by Cauchy interlacing, of the next eigenvalue), ``matvecs`` used, whether every
    wanted residual met its tolerance. ``value``, ``vector`` and ``residual_estimate`` are the first."""

    values: np.ndarray
    vectors: torch.Tensor
    residual_estimates: np.ndarray
    next_value: float | None
    matvecs: int
    converged: bool

    @property
    def value(self) -> float:
        return float(self.values[0])

    @property
    def vector(self) -> torch.Tensor:
        return self.vectors[0]

    @property
    def residual_estimate(self) -> float:
        return float(self.residual_estimates[0])


def lanczos(A: OperatorLike, v0: torch.Tensor | np.ndarray, *, tol: Callable[[float], float], k: int = 1, which: str = "LA",
            comm: Comm | None = None, basis_size: int | None = None, keep: int | None = None,
            max_matvecs: int = 20_000, progress: ProgressFn | None = None) -> RitzPairs:
    """The ``k`` extreme eigenpairs of a symmetric operator by thick-restart Lanczos (module docstring):
    ``which`` "LA" (largest), "SA" (smallest) or "LM" (largest modulus), repeated eigenvalues counted
    with their multiplicity.

    ``v0`` is the start vector (a tensor, or a float64 ndarray: then the pairs are on the CPU; keep it
    orthogonal to any eigenvector you deflate, and make the operator project its output too); ``comm``
    only for an ``apply(v, out)`` function. Stops when every wanted residual estimate beta |s_mj| <=
    ``tol(theta_j)``, or when ``max_matvecs`` is reached or the worst estimate, already within 1000 x
    its tolerance, has not improved by 10% in eight restarts (the rounding floor; ``converged`` False).
    Raises ConvergenceError (never numpy's LinAlgError) when the operator returns non-finite values or
    the projected tridiagonal eigenproblem does not converge.

    A single-vector Krylov space holds one direction of each eigenspace, so a repeated eigenvalue shows
    once. For k > 1 the converged pairs are therefore locked and the search repeated on the operator
    deflated by them, from a new random vector orthogonal to them, until a search finds nothing that
    ranks among the k best (each search adds at least one pair). Memory: ``basis_size + 1`` vectors
    (default max(24, 2 k + 8); a larger basis restarts less often: on a 177,147-state chain 24 vectors
    needed half the products of 16), plus the k locked ones.
    """
    v0 = _vector(v0)
    op = as_operator(A, like=v0, comm=comm)
    if which not in _ORDER:
        raise ValueError(f"which must be one of {', '.join(_ORDER)}, got {which!r}")
    pairs = _thick_restart(op, v0, tol=tol, k=k, which=which, basis_size=basis_size, keep=keep,
                           max_matvecs=max_matvecs, progress=progress)
    N = v0.numel() if op.comm.world_size == 1 else None
    if k == 1 or not pairs.converged or N is None:
        return pairs
    key, found = _ORDER[which], pairs
    rng = torch.Generator(device="cpu").manual_seed(20240601)
    while pairs.matvecs < max_matvecs and pairs.values.size < N:
        Y = pairs.vectors

        def deflated(v: torch.Tensor, out: torch.Tensor, Y: torch.Tensor = Y) -> torch.Tensor:
            op.apply(v - Y.T @ (Y @ v), out)
            return out.sub_(Y.T @ (Y @ out))

        start = torch.randn(N, generator=rng, dtype=v0.dtype).to(v0.device)
        for _ in range(2):
            start -= Y.T @ (Y @ start)
        more = _thick_restart(Operator(deflated, N, v0.dtype, v0.device), start, tol=tol,
                              k=min(k, N - Y.shape[0]), which=which, basis_size=basis_size, keep=keep,
                              max_matvecs=max_matvecs - pairs.matvecs, progress=progress)
        matvecs = pairs.matvecs + more.matvecs
        if not more.converged or (pairs.values.size >= k and key(more.values[:1])[0] >= key(pairs.values[-1:])[0]):
            # a search that did not converge leaves open whether a better pair was missed
            return RitzPairs(pairs.values, pairs.vectors, pairs.residual_estimates, found.next_value, matvecs,
                             more.converged)
        values = np.concatenate([pairs.values, more.values])
        order = np.argsort(key(values), kind="stable")[:k]
        vectors = torch.cat([pairs.vectors, more.vectors])[torch.as_tensor(order)]
        residuals = np.concatenate([pairs.residual_estimates, more.residual_estimates])[order]
        pairs = RitzPairs(values[order], vectors, residuals, found.next_value, matvecs, True)
    # out of products (not converged), or every eigenpair found
    return RitzPairs(pairs.values, pairs.vectors, pairs.residual_estimates, found.next_value, pairs.matvecs,
                     pairs.values.size >= min(k, N) and pairs.matvecs < max_matvecs)


def _thick_restart(op: Operator, v0: torch.Tensor, *, tol: Callable[[float], float], k: int, which: str,
                   basis_size: int | None, keep: int | None, max_matvecs: int,
                   progress: ProgressFn | None) -> RitzPairs:
    """One thick-restart Lanczos run (module docstring) for :func:`lanczos`."""
    comm = op.comm
    if which not in _ORDER:
        raise ValueError(f"which must be one of {', '.join(_ORDER)}, got {which!r}")
    k = int(k)
    m = max(24, 2 * k + 8) if basis_size is None else int(basis_size)
    if m < 4 or not 1 <= k <= m - 2:
        raise ValueError(f"basis_size must be >= 4 and >= k + 2, got basis_size {basis_size}, k {k}")
    keep = max(k, min(m - 2, max(m // 2, k + 2) if keep is None else int(keep)))
    v0_norm = norm(comm, v0)
    if not (math.isfinite(v0_norm) and v0_norm > 0):
        raise ValueError(f"the start vector v0 must be finite and non-zero, got norm {v0_norm}")
    N = v0.numel()
    V = _basis(m + 1, v0)
    V[0].copy_(v0).div_(v0_norm)
    del v0  # the caller's start vector is not needed again (frees it when passed as a temporary)
    T = np.zeros((m, m))
    start, matvecs, best, stale = 0, 0, math.inf, 0
    floor = 64 * float(torch.finfo(V.dtype).eps)
    key = _ORDER[which]
    while True:
        end, beta = m, 0.0
        for j in range(start, m):
            w = op.apply(V[j], V[j + 1])
            matvecs += 1
            first = range(0, j + 1) if j == start else range(j - 1, j + 1)  # arrowhead after a restart
            h = inner(comm, V[first.start:j + 1], w)
            subtract(V[first.start:j + 1], h, w)
            h2 = inner(comm, V[:j + 1], w)  # second pass against the whole basis
            subtract(V[:j + 1], h2, w)
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
        if not (np.isfinite(T[:end, :end]).all() and math.isfinite(beta)):
            raise ConvergenceError(f"Lanczos: the operator returned non-finite values after {matvecs} products "
                                   "(no eigenpair can be computed)")
        try:
            theta, S = np.linalg.eigh((T[:end, :end] + T[:end, :end].T) / 2)
        except np.linalg.LinAlgError as err:  # LAPACK's tridiagonal QR did not converge
            raise ConvergenceError(f"Lanczos: the projected eigenproblem did not converge ({err})") from err
        order = np.argsort(key(theta), kind="stable")
        theta, S = theta[order], S[:, order]
        wanted = min(k, end)
        residuals = beta * np.abs(S[end - 1, :wanted])
        targets = np.array([tol(float(t)) for t in theta[:wanted]])
        if progress is not None:
            progress(matvecs, float(residuals.max()), float(targets.min()))
        excess = float(np.max(residuals / np.maximum(targets, 1e-300)))
        stale = 0 if excess < 0.9 * best or excess > 1e3 else stale + 1  # stalled near the target
        best = min(best, excess)
        converged = bool((residuals <= targets).all()) and wanted == k
        if converged or end < m or matvecs >= max_matvecs or stale >= 8:
            Y = torch.as_tensor(S[:, :wanted].T.copy(), dtype=V.dtype, device=V.device) @ V[:end]
            for row in Y:
                row.div_(norm(comm, row))
            # an invariant subspace (end < m) holds fewer than k eigenvalues, each exact
            return RitzPairs(theta[:wanted].copy(), Y, residuals, float(theta[wanted]) if end > wanted else None,
                             matvecs, bool(converged or end < m))
        Sk = torch.as_tensor(S[:, :keep].T.copy(), dtype=V.dtype, device=V.device)
        for c in range(0, N, _CHUNK):  # V[:keep] <- S_k^T V[:m], in place, chunk by chunk
            V[:keep, c:c + _CHUNK] = Sk @ V[:m, c:c + _CHUNK]
        V[keep].copy_(V[m])
        T[:] = 0.0
        T[np.arange(keep), np.arange(keep)] = theta[:keep]
        T[keep, :keep] = T[:keep, keep] = beta * S[m - 1, :keep]
        start = keep


@dataclass(frozen=True, eq=False)
class LinearSolve:
    """GMRES's solution, its true relative residual ||b - A x|| / ||b||, matvecs used, convergence."""

    x: torch.Tensor
    relative_residual: float
    matvecs: int
    converged: bool


def _preconditioner(M: OperatorLike | None, op: Operator) -> Operator | None:
    """The operator z = M^{-1} v of a preconditioner given as anything :func:`as_operator` accepts."""
    return None if M is None else as_operator(M, like=op.new(), comm=None if isinstance(M, Operator) else op.comm)


def gmres(A: OperatorLike, b: torch.Tensor | np.ndarray, *, x0: torch.Tensor | np.ndarray | None = None, comm: Comm | None = None,
          preconditioner: OperatorLike | None = None, restart: int = 30, rtol: float = 1e-12,
          max_matvecs: int = 5_000, patience: int = 3, progress: ProgressFn | None = None) -> LinearSolve:
    """Solve A x = b by GMRES(``restart``) with classical Gram-Schmidt (a second pass where the first
    loses more than 30% of the norm: the DGKS criterion) and Givens rotations, right-preconditioned by ``preconditioner`` (z = M^{-1} v: Arnoldi on A M^{-1}, x = M^{-1} y)
    when given; the true residual is recomputed at every restart and decides convergence
    (||b - A x|| <= rtol ||b||); ``patience`` restarts without halving it stop the solve; a breakdown (a
    non-finite or singular Hessenberg factor, e.g. a preconditioner that overflows on a 1e-200 chain) returns
    the iterate so far, not converged. ``comm`` only for an ``apply(v, out)`` function. Memory: ``restart + 3`` vectors (+ 1 with a preconditioner)."""
    b = _vector(b)
    op = as_operator(A, like=b, comm=comm)
    comm = op.comm
    Minv = _preconditioner(preconditioner, op)
    m = int(restart)
    norm_b = norm(comm, b)
    x = torch.zeros_like(b) if x0 is None else _vector(x0).clone()
    if norm_b == 0:
        return LinearSolve(torch.zeros_like(b), 0.0, 0, True)
    V = _basis(m + 1, b)
    r = torch.empty_like(b)
    z = torch.empty_like(b) if Minv is not None else None
    matvecs, best, stale = 0, math.inf, 0
    while True:
        op.apply(x, r)
        matvecs += 1
        r.neg_().add_(b)
        beta = norm(comm, r)
        rel = beta / norm_b
        if progress is not None:
            progress(matvecs, rel, rtol)
        stale = 0 if rel < best / 2 else stale + 1
        best = min(best, rel)
        if rel <= rtol or matvecs >= max_matvecs or stale >= patience:
            return LinearSolve(x, rel, matvecs, rel <= rtol)
        V[0].copy_(r).div_(beta)
        H = np.zeros((m + 1, m))
        cs, sn = np.zeros(m), np.zeros(m)
        g = np.zeros(m + 1)
        g[0] = beta
        used = 0
        for j in range(m):
            w = op.apply(V[j] if Minv is None else Minv.apply(V[j], z), V[j + 1])
            matvecs += 1
            hw = inner(comm, V[:j + 2], w)  # the projections and, last (w is V[j + 1]), ||w||^2: one pass
            h, before = hw[:j + 1], math.sqrt(max(float(hw[j + 1]), 0.0))
            subtract(V[:j + 1], h, w)
            after = norm(comm, w)
            if after < 0.7 * before:  # cancellation: a second pass (Daniel, Gragg, Kaufman and Stewart 1976)
                h2 = inner(comm, V[:j + 1], w)
                subtract(V[:j + 1], h2, w)
                h = h + h2
                after = norm(comm, w)
            H[:j + 1, j] = h.cpu().numpy()
            H[j + 1, j] = after
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
        R = np.triu(H[:used, :used])
        if not (np.isfinite(R).all() and np.isfinite(g[:used]).all() and np.all(np.diag(R) != 0)):
            # a breakdown (an overflowed or singular Hessenberg factor): x so far, not converged
            return LinearSolve(x, rel, matvecs, False)
        coef = np.linalg.solve(R, g[:used]) if used else np.zeros(0)
        step = torch.mv(V[:used].T, torch.as_tensor(coef, dtype=b.dtype, device=b.device))
        x.add_(step if Minv is None else Minv.apply(step, z))


def bicgstab(A: OperatorLike, b: torch.Tensor | np.ndarray, *, x0: torch.Tensor | np.ndarray | None = None, comm: Comm | None = None,
             preconditioner: OperatorLike | None = None, rtol: float = 1e-12, max_matvecs: int = 10_000,
             progress: ProgressFn | None = None) -> LinearSolve:
    """Solve A x = b by BiCGSTAB (van der Vorst 1992), right-preconditioned by ``preconditioner``
    (z = M^{-1} v) when given: two products per step, short recurrences (7 vectors), for systems where
    restarted GMRES stalls. The true residual is recomputed at the end and decides convergence
    (||b - A x|| <= rtol ||b||); a breakdown (rho or omega = 0) ends the iteration early."""
    b = _vector(b)
    op = as_operator(A, like=b, comm=comm)
    comm = op.comm
    Minv = _preconditioner(preconditioner, op)
    precondition = (lambda v, out: out.copy_(v)) if Minv is None else Minv.apply
    norm_b = norm(comm, b)
    x = torch.zeros_like(b) if x0 is None else _vector(x0).clone()
    if norm_b == 0:
        return LinearSolve(torch.zeros_like(b), 0.0, 0, True)
    r = torch.empty_like(b)
    op.apply(x, r)
    r.neg_().add_(b)
    r_hat = r.clone()
    p, v, s, t = torch.zeros_like(b), torch.zeros_like(b), torch.empty_like(b), torch.empty_like(b)
    y, zz = torch.empty_like(b), torch.empty_like(b)
    rho = alpha = omega = 1.0
    matvecs = 1
    while matvecs < max_matvecs:
        rho_new = float(inner(comm, r_hat, r))
        if rho_new == 0 or omega == 0:
            break
        beta = (rho_new / rho) * (alpha / omega)
        p.sub_(v, alpha=omega).mul_(beta).add_(r)
        op.apply(precondition(p, y), v)
        denominator = float(inner(comm, r_hat, v))
        if denominator == 0:
            break
        alpha = rho_new / denominator
        torch.add(r, v, alpha=-alpha, out=s)
        x.add_(y, alpha=alpha)
        op.apply(precondition(s, zz), t)
        matvecs += 2
        tt = float(inner(comm, t, t))
        omega = float(inner(comm, t, s)) / tt if tt > 0 else 0.0
        x.add_(zz, alpha=omega)
        torch.add(s, t, alpha=-omega, out=r)
        rho = rho_new
        rel = norm(comm, r) / norm_b
        if progress is not None:
            progress(matvecs, rel, rtol)
        if rel <= 0.5 * rtol:
            break
    op.apply(x, r)
    matvecs += 1
    rel = norm(comm, r.neg_().add_(b)) / norm_b
    return LinearSolve(x, rel, matvecs, rel <= rtol)


def conjugate_gradient(A: OperatorLike, b: torch.Tensor | np.ndarray, *, comm: Comm | None = None,
                       preconditioner: OperatorLike | None = None, rtol: float = 1e-13, max_matvecs: int = 20_000,
                       progress: ProgressFn | None = None) -> LinearSolve:
    """Solve A x = b for a symmetric positive definite A by conjugate gradients (Hestenes and Stiefel
    1952), preconditioned by a symmetric positive definite ``preconditioner`` (z = M^{-1} r) when
    given; the true residual ||b - A x|| is recomputed every 50 steps and at the end and decides
    convergence (<= rtol ||b||). Memory: 4 vectors (5 with a preconditioner)."""
    b = _vector(b)
    op = as_operator(A, like=b, comm=comm)
    comm = op.comm
    Minv = _preconditioner(preconditioner, op)
    norm_b = norm(comm, b)
    x = torch.zeros_like(b)
    if norm_b == 0:
        return LinearSolve(x, 0.0, 0, True)
    r = b.clone()
    z = r if Minv is None else Minv.apply(r, torch.empty_like(b))
    p = z.clone()
    Ap = torch.empty_like(b)
    rz = float(inner(comm, r, z))
    matvecs = 0
    while True:
        op.apply(p, Ap)
        matvecs += 1
        pAp = float(inner(comm, p, Ap))
        if not pAp > 0:
            break
        alpha = rz / pAp
        x.add_(p, alpha=alpha)
        r.sub_(Ap, alpha=alpha)
        if matvecs % 50 == 0:  # replace the recursive residual by the true one
            op.apply(x, r)
            matvecs += 1
            r.neg_().add_(b)
        rr = float(inner(comm, r, r))
        if progress is not None:
            progress(matvecs, math.sqrt(rr) / norm_b, rtol)
        if math.sqrt(rr) <= 0.5 * rtol * norm_b or matvecs >= max_matvecs:
            break
        if Minv is not None:
            Minv.apply(r, z)
        rz_new = float(inner(comm, r, z))
        p.mul_(rz_new / rz).add_(z)
        rz = rz_new
    op.apply(x, r)
    matvecs += 1
    rel = norm(comm, r.neg_().add_(b)) / norm_b
    return LinearSolve(x, rel, matvecs, rel <= rtol)
