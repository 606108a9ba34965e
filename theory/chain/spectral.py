"""Spectral gaps, Poincaré constants and relaxation times, to relative accuracy.

Notation: pi P = pi, D = diag(pi), time reversal P* = D^{-1} P^T D, additive reversibilization
S = (P + P*)/2 (same Dirichlet form as P), multiplicative reversibilization P* P. For a reversible
S the matrix B = D^{1/2} S D^{-1/2} is symmetric with entries B_xy = sqrt(S_xy S_yx) (no pi
needed) and L = I - B has the eigenvalues 1 - lambda_k(S) in [0, 2].

* **Gap** gamma = 1 - lambda_2(S), the smallest non-zero eigenvalue of L; the **Poincaré constant**
  is 1/gamma (THEOREMS.md 1.15; paper P's convention "E(f, f) >= Var(f)/C"). Floating-point
  eigensolvers on P or B lose gaps below ~1e-16 in the cancellation 1 - lambda_2. Dense chains
  avoid it: GTH elimination (:mod:`mlmix.theory.linalg.elimination`) gives L = X diag(e) X^T with every
  entry of X and e accurate to a few ulps, X unit triangular with |X_ij| <= 1 (diagonal pivoting
  on the escape probabilities), so the non-zero eigenvalues of L are those of
  F^T F = diag(e')^{1/2} X'^T X' diag(e')^{1/2} (X' = X without the ground column), all determined
  to relative accuracy ~ N u cond(X'^T X') (Demmel et al. 1999; Dopico, Koev & Molera 2009). The gap
  is the smallest of them, computed as 1 / lambda_max of the graded inverse
  diag(e')^{-1/2} (X'^T X')^{-1} diag(e')^{-1/2}: a largest eigenvalue, which a backward-stable
  eigensolver gets to relative accuracy. Tested against closed forms and 60-digit arithmetic down to
  gaps of 1e-35 (``tests/test_spectral.py``).
* Large sparse chains: Lanczos (:mod:`mlmix.theory.linalg.krylov`) on B with the known top eigenvector sqrt(pi) deflated; the
  eigenvalue's absolute error is bounded by the residual norm, so a gap below it is reported as an
  interval (upper end: the Rayleigh quotient E(f, f) / Var(f) of the Ritz vector, a sum of
  non-negative terms and hence a certified upper bound).
* **Absolute spectral gap** 1 - max{|lambda| : lambda != 1}: for reversible chains the minimum of
  the gap and 1 + lambda_min (absolute accuracy, from the symmetric eigensolver; for chains with
  P(x, x) >= delta it is at least 2 delta); for non-reversible chains from the eigenvalues of P with
  their condition numbers (an interval when unresolved). The **relaxation time** is its inverse.

On a matrix-free kernel (:func:`operator_gap`): gamma = 1 - lambda_2 of S = (P + P*)/2 (= P when
reversible) by thick-restart Lanczos (:func:`mlmix.theory.linalg.krylov.lanczos`) on the symmetric
D^{1/2} S D^{-1/2}, sqrt(pi) deflated. The value is the Rayleigh quotient E(f, f) / Var_pi(f) of the
Ritz function f = y / sqrt(pi), with E summed as non-negative terms (so a small gap keeps its
relative accuracy); it is an upper bound on gamma (variational). The lower bound is value - ||r|| with
r = B y - theta y recomputed with the operator (Weyl), plus the rounding of B y and, for
non-reversible chains, the error of pi_hat in B. It assumes the Krylov space did not miss an
eigenvalue above lambda_2 (seeded pseudo-random start); the result is :meth:`Result.checked`, an
interval when ||r|| is too large for the requested accuracy. The multiplicative gap 1 - sigma_2^2
(:func:`operator_multiplicative_gap`) is the same Lanczos on C^T C, C = D^{1/2} P D^{-1/2}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.linalg.lapack import dpocon

from mlmix.errors import ConvergenceError, UnresolvedError
from mlmix.limits import DENSE_SPECTRAL_LIMIT, EIGH_LIMIT
from mlmix.progress import Convergence
from mlmix.theory.chain.stationary import first_order_pi_error
from mlmix.theory.chain.structure import chain_structure, product_classes
from mlmix.theory.linalg.elimination import Elimination, eliminate
from mlmix.theory.linalg.matrices import to_dense
from mlmix.theory.results import DEFAULT_RTOL, EPS, NAMES, Result, VectorResult, renamed
from mlmix.validation import Matrix, check_memory, check_vector

if TYPE_CHECKING:
    import torch

    from mlmix.theory.chain.markov_chain import Chain
    from mlmix.theory.linalg.operator import TransitionOperator

# ----------------------------------------------------------------------------------- reversibilizations

def time_reversal(P: Matrix, logpi: np.ndarray) -> Matrix:
    """P*(x, y) = pi(y) P(y, x) / pi(x), formed as exp(log P(y,x) + log pi(y) - log pi(x)) so that
    stationary masses spanning hundreds of decades do not overflow. A law with a zero entry (log pi
    = -inf, or NaN) defines no P* (pi(x) divides): UnresolvedError, never NaN entries."""
    if not np.isfinite(logpi).all():
        raise UnresolvedError("time reversal P* = D^-1 P^T D: the stationary law has zero or non-finite entries "
                              "(log pi not finite), so P* is undefined")
    if sp.issparse(P):
        T = sp.coo_array(P).T.tocoo()  # entry (x, y) holds P(y, x)
        with np.errstate(divide="ignore"):  # explicit zeros (zero conditionals) stay 0
            data = np.exp(np.log(T.data) + logpi[T.col] - logpi[T.row])
        return sp.csr_array((data, (T.row, T.col)), shape=P.shape)
    Pt = np.asarray(P).T
    with np.errstate(divide="ignore"):
        out = np.exp(np.log(Pt) + logpi[None, :] - logpi[:, None])
    return np.where(Pt > 0, out, 0.0)


def additive_reversibilization(P: Matrix, logpi: np.ndarray) -> Matrix:
    """S = (P + P*)/2: reversible with respect to pi, same Dirichlet form as P (THEOREMS.md 1.14)."""
    return (P + time_reversal(P, logpi)) / 2


def multiplicative_reversibilization(P: Matrix, logpi: np.ndarray) -> Matrix:
    """P* P: reversible with respect to pi, eigenvalues sigma_k(P)^2 (Fill's bound uses its gap)."""
    return time_reversal(P, logpi) @ P


def symmetric_form(S: Matrix) -> Matrix:
    """B = D^{1/2} S D^{-1/2} of a reversible S: B_xy = sqrt(S_xy S_yx)."""
    if sp.issparse(S):
        S = sp.csr_array(S)
        R = S.sqrt()
        return sp.csr_array(R.multiply(R.T))
    R = np.sqrt(np.asarray(S))
    return R * R.T  # sqrt(S_xy) sqrt(S_yx): no underflow of the product


def dirichlet_form(P: Matrix, f: np.ndarray, g: np.ndarray | None, pi: np.ndarray) -> float:
    """E(f, g) = (1/2) sum_{x,y} pi(x) P(x, y) (f(x) - f(y)) (g(x) - g(y)) (THEOREMS.md 1.14),
    summed edge by edge (for g = f: a sum of non-negative terms, accurate to a few ulps)."""
    g = f if g is None else g
    coo = sp.coo_array(P)
    w = pi[coo.row] * coo.data
    return float(0.5 * np.sum(w * (f[coo.row] - f[coo.col]) * (g[coo.row] - g[coo.col])))


def variance_lower_bound(f: np.ndarray, pi: np.ndarray) -> float:
    """A certified lower bound on Var_pi(f) = sum pi (f - c)^2 - (pi(f) - c)^2 for the computed mean c."""
    c = float(pi @ f)
    d = f - c
    second = float(pi @ (d * d))
    drift = abs(float(pi @ d)) + 4 * EPS * float(pi @ np.abs(d))
    return max(second * (1 - 4 * EPS * f.size) - drift * drift, 0.0)


def rayleigh_upper_bound(S: Matrix, f: np.ndarray, pi: np.ndarray) -> float:
    """E_S(f, f) / Var_pi(f) (an upper bound on the gap of S, valid for any non-constant f), with
    the numerator rounded up and the denominator down."""
    var = variance_lower_bound(f, pi)
    if var <= 0:
        return float("inf")
    return dirichlet_form(S, f, None, pi) * (1 + 8 * EPS * f.size) / var


# ----------------------------------------------------------------------------------- the gap

def reversible_gap(S: Matrix, logpi: np.ndarray, *, rtol: float = DEFAULT_RTOL, name: str = "spectral gap",
                   el: Elimination | None = None, dense: bool | None = None) -> tuple[Result, np.ndarray]:
    """gamma = 1 - lambda_2(S) of an irreducible reversible S (with stationary log-law ``logpi``), and
    a slowest-mode function f (S f = lambda_2 f up to accuracy; used for sweep cuts). ``el``: GTH
    factors of S already computed (complete, last state the heaviest). ``dense``: use the dense
    algorithm (default: up to :data:`DENSE_SPECTRAL_LIMIT` states)."""
    N = S.shape[0]
    if N < 2:
        return Result.missing(name, "-", "a gap needs at least 2 states"), np.zeros(N)
    labels = chain_structure(S).labels
    if labels.max() > 0:  # a precondition of the elimination and of Lanczos' deflation
        return (Result.exact(name, 0.0, f"the matrix is reducible ({int(labels.max()) + 1} classes, each closed "
                             "since it is reversible): eigenvalue 1 is repeated"), (labels == 0).astype(np.float64))
    if (N <= DENSE_SPECTRAL_LIMIT) if dense is None else dense:
        return _dense_gap(S, logpi, name, el)
    return _lanczos_gap(sp.csr_array(S), logpi, rtol, name)


def _dense_gap(S: Matrix, logpi: np.ndarray, name: str, el: Elimination | None) -> tuple[Result, np.ndarray]:
    N = S.shape[0]
    check_memory(8.0 * N * N * 5, f"the accurate gap of {N} states")
    if el is None:
        dense = S.toarray() if sp.issparse(S) else np.asarray(S, dtype=np.float64)
        el = eliminate(dense, last=int(np.argmax(logpi)))
    X, e = el.symmetric_factor()
    Xp, ep = X[:, 1:], e[1:]
    G = Xp.T @ Xp
    c, lower = la.cho_factor(G, lower=False, check_finite=False)
    rcond, _ = dpocon(c, np.abs(G).sum(axis=0).max())
    kappa = 1.0 / max(rcond, EPS)
    emin = float(ep.min())
    s = np.sqrt(emin / ep)
    H = s[:, None] * la.cho_solve((c, lower), np.diag(s), check_finite=False)
    H = (H + H.T) / 2
    if H.shape[0] <= EIGH_LIMIT:
        top = [H.shape[0] - 1, H.shape[0] - 1]
        vals, vecs = la.eigh(H, subset_by_index=top, check_finite=False)
        if vals.size == 0:  # dsyevr can return nothing for a massively degenerate top eigenvalue
            vals, vecs = la.eigh(H, check_finite=False)
        lam, u, residual = float(vals[-1]), vecs[:, -1], 0.0
    else:
        # deferred: the Krylov engine imports torch, which dense chains never load
        from mlmix.theory.linalg.krylov import lanczos

        u = lanczos(H, np.ones(H.shape[0]), tol=lambda theta: 1e-14 * abs(theta),
                    max_matvecs=max(20_000, 50 * H.shape[0])).vector.numpy()
        lam = float(u @ (H @ u))
        residual = float(np.linalg.norm(H @ u - lam * u)) / lam
    gap = emin / lam
    rel = 30 * N * EPS * kappa + residual
    # the slowest mode: w = X' diag(e')^{1/2} u is an eigenvector of L; f = D^{-1/2} w
    w = Xp @ (np.sqrt(ep) * u)
    f = np.empty(N)
    f[el.order] = w
    f = _scaled_mode(f, logpi)
    method = ("GTH-accurate LDL^T of D^1/2 (I - S) D^-1/2 (escape pivoting), then the largest eigenvalue "
              "of the graded inverse; relative error <= 30 N u cond(X'^T X')")
    return Result.approximate(name, gap, rel, method, cond=kappa), f


def _scaled_mode(w: np.ndarray, logpi: np.ndarray) -> np.ndarray:
    """f = w / sqrt(pi), computed in log scale (saturating instead of overflowing)."""
    with np.errstate(divide="ignore"):
        mag = np.log(np.abs(w)) - logpi / 2
    finite = np.isfinite(mag)
    top = mag[finite].max() if finite.any() else 0.0
    return np.sign(w) * np.exp(np.clip(mag - top, -700.0, 0.0))


def lanczos_gap(B: spla.LinearOperator, logpi: np.ndarray, name: str, method: str, *, rtol: float = DEFAULT_RTOL,
                upper: Callable[[np.ndarray], float] | None = None) -> tuple[Result, np.ndarray]:
    """1 - lambda_2 of a symmetric operator B whose top eigenvector is sqrt(pi) (eigenvalue 1): Lanczos
    (:func:`~mlmix.theory.linalg.krylov.lanczos`) on B with sqrt(pi) deflated. |lambda - theta| <= ||B v - theta v|| for a unit Ritz pair, so
    the residual bounds the error; ``upper(f)`` gives a certified upper bound from the mode f = v/sqrt(pi)
    (a Rayleigh quotient). Returns the Result and the mode."""
    # deferred: the Krylov engine imports torch, which dense chains never load
    from mlmix.theory.linalg.krylov import lanczos

    N = B.shape[0]
    sq = np.exp(logpi / 2)
    sq /= np.linalg.norm(sq)
    op = spla.LinearOperator(B.shape, matvec=lambda v: B @ v - sq * (sq @ v), dtype=np.float64)
    v0 = np.random.default_rng(0).standard_normal(N)
    # the residual is the gap's absolute error: ask for 1e-10 of the gap itself, down to the rounding floor
    try:
        ritz = lanczos(op, v0 - sq * (sq @ v0), tol=lambda theta: max(1e-10 * (1.0 - theta), 64 * EPS),
                       max_matvecs=max(20_000, 50 * N))
    except ConvergenceError as err:
        return Result.missing(name, method, f"Lanczos failed: {err}"), np.zeros(N)
    v = ritz.vector.numpy()
    lam = float(v @ (op @ v))  # the Rayleigh quotient of the unit Ritz vector
    resid = float(np.linalg.norm(op @ v - lam * v)) + 10 * EPS
    converged = ritz.converged
    f = _scaled_mode(v, logpi)
    hi = min(upper(f), 2.0) if upper is not None else None
    out = Result.checked(name, 1.0 - lam, resid, method + "; error <= residual norm", rtol=rtol, lower=0.0, upper=hi,
                         residual=resid, converged=converged)
    return out, f


def _lanczos_gap(S: sp.csr_array, logpi: np.ndarray, rtol: float, name: str) -> tuple[Result, np.ndarray]:
    N = S.shape[0]
    check_memory(8.0 * (3 * S.nnz + 30 * N), f"Lanczos on {N} states")
    pi = np.exp(logpi)
    return lanczos_gap(spla.aslinearoperator(symmetric_form(S)), logpi, name,
                       "Lanczos on D^1/2 S D^-1/2 with sqrt(pi) deflated", rtol=rtol,
                       upper=lambda f: rayleigh_upper_bound(S, f, pi))


# ------------------------------------------------------------ matrix-free (a TransitionOperator)

#: Relative accuracy the gap is driven to (the residual ||r|| <= GAP_RTOL x gap), when reachable.
GAP_RTOL = 1e-8


@dataclass(frozen=True, eq=False)
class GapResult:
    """The additive gap (a :class:`Result`), the Ritz function f = y / sqrt(pi) (local tensor, the
    Fiedler-type function whose sweep cuts bound the conductance) and the solver's figures."""

    gap: Result
    fiedler: torch.Tensor
    matvecs: int
    residual: float


def _symmetric_operator(op: TransitionOperator, pi: torch.Tensor):
    """u -> D^{1/2} S D^{-1/2} u: the operator's symmetric mode when reversible (formed without pi), else
    (1/2) [ r P(u / r) + ((r u) P) / r ] with r = sqrt(pi)."""
    import torch  # deferred: only the matrix-free route loads torch

    if op.reversible:
        return lambda u, out: op.apply(u, "symmetric", out)
    r = pi.sqrt()
    t1, t2 = torch.empty_like(r), torch.empty_like(r)

    def apply(u: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        torch.div(u, r, out=t1)
        op.apply(t1, "functions", out).mul_(r)
        torch.mul(u, r, out=t1)
        op.apply(t1, "measures", t2).div_(r)
        return out.add_(t2).mul_(0.5)

    return apply


def _top_ritz(op: TransitionOperator, sym, w: torch.Tensor, *, rtol: float, basis_size: int, max_matvecs: int,
              seed: int, progress: bool, what: str):
    """The largest Ritz pair of the symmetric ``sym`` with ``w`` (its eigenvector of eigenvalue 1)
    deflated, and the residual ||B y - theta y|| recomputed with the undeflated operator."""
    import torch  # deferred: only the matrix-free route loads torch

    from mlmix.theory.linalg.krylov import inner, lanczos, norm

    comm = op.comm

    def deflated(u: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        sym(u, out)
        return out.sub_(w, alpha=float(inner(comm, w, out)))

    unit = float(torch.finfo(op.dtype).eps) / 2
    floor = 8 * unit * (op.terms + 4)
    ritz = lanczos(deflated, _start_vector(op, w, seed), tol=lambda th: max(rtol * (1.0 - th), floor),
                   comm=comm, basis_size=basis_size, max_matvecs=max_matvecs,
                   progress=Convergence(f"{what} (Lanczos)", progress))
    y = ritz.vector
    y.sub_(w, alpha=float(inner(comm, w, y)))
    y.div_(norm(comm, y))
    By = sym(y, torch.empty_like(y))
    theta = float(inner(comm, y, By))
    residual = norm(comm, By.sub_(y, alpha=theta))
    details: dict[str, Any] = {"residual": residual, "ritz_value": theta, "matvecs": ritz.matvecs,
                               "lanczos_converged": ritz.converged, "representation": "operator",
                               "dtype": str(op.dtype).replace("torch.", "")}
    if ritz.next_value is not None and theta > ritz.next_value:
        details["estimated_error"] = residual**2 / (theta - ritz.next_value)  # Temple, with an estimated gap
    return ritz, y, theta, residual, details


def checked_pi(op: TransitionOperator, pi: VectorResult) -> torch.Tensor:
    """pi as a tensor of the operator (this process's slice); ValueError where its smallest entry underflows."""
    import torch  # deferred: only the matrix-free route loads torch

    pi_t = torch.as_tensor(pi.value, device=op.device).to(op.dtype)
    pi_min = float(op.comm.allreduce_(pi_t.min().clone(), "min"))
    if not pi_min > 1e-300:
        raise ValueError(f"the stationary law underflows (smallest entry {pi_min:.3g}); raise the temperature")
    return pi_t


def _unit_sqrt(op: TransitionOperator, pi_t: torch.Tensor) -> torch.Tensor:
    from mlmix.theory.linalg.krylov import norm  # deferred: torch

    w = pi_t.sqrt()
    return w.div_(norm(op.comm, w))


def operator_gap(op: TransitionOperator, pi: VectorResult, *, rtol: float = GAP_RTOL, basis_size: int = 16,
                 max_matvecs: int = 20_000, seed: int = 0, target_rtol: float = DEFAULT_RTOL,
                 progress: bool = False) -> GapResult:
    """gamma = 1 - lambda_2((P + P*)/2), the Poincaré gap (the spectral gap when P is reversible),
    as a certified :class:`Result` (see the module docstring). ``rtol``: drive the residual to
    rtol x gamma; ``target_rtol``: the accuracy below which the value is reported as an interval."""
    import torch  # deferred: only the matrix-free route loads torch

    from mlmix.theory.linalg.operator_vectors import global_total

    if op.n_states < 2:
        raise ValueError("a gap needs at least 2 states")
    pi_t = checked_pi(op, pi)
    ritz, y, theta, residual, details = _top_ritz(op, _symmetric_operator(op, pi_t), _unit_sqrt(op, pi_t),
                                                  rtol=rtol, basis_size=basis_size, max_matvecs=max_matvecs,
                                                  seed=seed, progress=progress, what="gap")
    f = y.div_(pi_t.sqrt())  # the Ritz function in L^2(pi)
    mean = global_total(op, pi_t * f)
    var = global_total(op, pi_t * (f - mean).square())
    value = op.dirichlet_form(f, pi_t) / var
    unit = float(torch.finfo(op.dtype).eps) / 2
    n_terms = op.terms + math.log2(max(op.n_states, 2))
    # the law enters E(f,f) / Var(f) and the deflation (non-reversible: the operator too) unless it is
    # exact; delta bounds its entrywise relative error (certificate, else first order), and with it the
    # quotient moves by 2 delta, a reversible P's deflation w w^T by at most 2 ||w_hat - w||
    delta = 0.0 if op.log_joint is not None else _pi_perturbation(op, pi, pi_t, max(value - residual, value / 2))
    margin = 8 * unit * n_terms + 2 * delta
    rounding = 2 * unit * (op.terms + 2)
    pi_error = (2 if op.reversible else 1) * delta
    abs_error = residual + rounding + pi_error + 4 * unit
    which = "D^1/2 P D^-1/2 (reversible, the operator's symmetric mode, formed without pi)" if op.reversible else \
        "D^1/2 (P + P*)/2 D^-1/2 (additive reversibilization, with the computed pi)"
    method = (f"thick-restart Lanczos on {which}, sqrt(pi) deflated, {ritz.matvecs} applications "
              f"(basis {basis_size}); value = E(f,f)/Var(f) of the Ritz function (an upper bound); "
              f"lower bound value - ||r||, ||r|| = {residual:.2e} (Weyl; assumes no eigenvalue above "
              f"lambda_2 was missed)")
    if pi_error:
        details["pi_error"] = pi_error
    gap = Result.checked(NAMES["additive_gap"], value, abs_error, method, rtol=target_rtol, lower=0.0,
                         upper=value * (1 + margin) if margin < 1 else 2.0, **details)
    return GapResult(gap, f, ritz.matvecs, residual)


def operator_multiplicative_gap(op: TransitionOperator, pi: VectorResult, additive_gap: Result, *,
                                rtol: float = GAP_RTOL, basis_size: int = 16, max_matvecs: int = 20_000,
                                seed: int = 0, target_rtol: float = DEFAULT_RTOL, progress: bool = False) -> Result:
    """1 - sigma_2(P)^2, the gap of P* P (Fill's bound on t_mix for any chain): Lanczos on C^T C with
    C = D^{1/2} P D^{-1/2} (two applications per step, P* P never formed), sqrt(pi) deflated; an
    interval 1 - theta +- (||r|| + rounding + 2 x the error of pi in C)."""
    import torch  # deferred: only the matrix-free route loads torch

    pi_t = checked_pi(op, pi)
    r = pi_t.sqrt()
    t1 = torch.empty_like(r)

    def gram(u: torch.Tensor, out: torch.Tensor) -> torch.Tensor:  # C^T C u
        torch.div(u, r, out=t1)
        op.apply(t1, "functions", out).mul_(r)  # C u
        out.mul_(r)
        op.apply(out, "measures", t1)
        return torch.div(t1, r, out=out)

    ritz, _, theta, residual, details = _top_ritz(op, gram, _unit_sqrt(op, pi_t), rtol=rtol, basis_size=basis_size,
                                                  max_matvecs=max_matvecs, seed=seed, progress=progress,
                                                  what="multiplicative gap")
    unit = float(torch.finfo(op.dtype).eps) / 2
    rounding = 4 * unit * (op.terms + 2)
    pi_error = 0.0
    if op.log_joint is None and (pi.rel_error is not None or additive_gap.lower):
        pi_error = 2 * _pi_perturbation(op, pi, pi_t, additive_gap.lower or 0.0)
    method = (f"thick-restart Lanczos on C^T C, C = D^1/2 P D^-1/2 (P* P never formed), sqrt(pi) deflated, "
              f"{ritz.matvecs} steps of two applications; error <= ||r|| = {residual:.2e} (Weyl)")
    return Result.checked(NAMES["multiplicative_gap"], 1.0 - theta, residual + rounding + pi_error + 4 * unit, method,
                          rtol=target_rtol, lower=0.0, upper=1.0, **details)


def _start_vector(op: TransitionOperator, w: torch.Tensor, seed: int) -> torch.Tensor:
    """Pseudo-random (a hash of the global state index, so the same however sharded), orthogonal to w."""
    from mlmix.theory.linalg.krylov import inner  # deferred: torch
    from mlmix.theory.linalg.operator_vectors import hash_uniform

    start = op.comm.rank * op.local_size
    v0 = (hash_uniform(start, start + op.local_size, seed, op.device) - 0.5).to(op.dtype)
    return v0.sub_(w, alpha=float(inner(op.comm, w, v0)))


def _pi_perturbation(op: TransitionOperator, pi: VectorResult, pi_t: torch.Tensor, gap: float) -> float:
    """A bound on ||B_hat - B|| for B = D^{1/2} S D^{-1/2} built with pi_hat: with an entrywise relative
    bound delta on pi_hat (the certificate), every entry of the non-negative B moves by at most
    delta / (1 - delta) of itself and ||B|| <= 1; otherwise the first-order bound below."""
    if pi.rel_error is not None and pi.rel_error < 1:
        return pi.rel_error / (1 - pi.rel_error)
    return first_order_pi_error(op, pi_t, gap)[0] if gap > 0 else math.inf


def operator_absolute_gap(op: TransitionOperator, gap: Result) -> Result:
    """The absolute spectral gap min(gap, 1 + lambda_min) of a reversible matrix-free P from its
    spectral gap ``gap`` and the operator's bound lambda_min >= ``op.lambda_min``: the gap itself when
    that bound is >= 0 (a reversible heat-bath kernel is positive semi-definite; a lazy matrix by
    Gershgorin), else the interval [min(gap's lower end, 1 + op.lambda_min), min(gap's upper end, 1)]
    (1 - max |lambda| <= 1); unresolved for a non-reversible P."""
    name = NAMES["absolute_spectral_gap"]
    if not op.reversible:
        return Result.missing(name, "matrix-free", "eigenvalues of a non-reversible P are not computed matrix-free")
    if op.lambda_min >= 0:
        return Result(name, gap.value, "P is reversible and positive semi-definite (lambda_min >= 0), so this is "
                      "the spectral gap; " + gap.method, gap.rel_error, gap.lower, gap.upper, gap.reason,
                      dict(gap.details))
    bottom = 1.0 + op.lambda_min
    lower = None if gap.lower is None else min(gap.lower, bottom)
    upper = 1.0 if gap.upper is None else min(gap.upper, 1.0)
    return Result.interval(name, lower, upper, f"min(gap, 1 + lambda_min) with lambda_min >= {op.lambda_min:.6g} "
                           "(Gershgorin on the holding probabilities); " + gap.method,
                           "the smallest eigenvalue of P is not computed matrix-free")


def multiplicative_from_absolute(g: Result) -> Result:
    """1 - sigma_2^2 = 1 - (1 - absolute gap)^2 of a reversible chain (sigma_2 = lambda_*), from the
    absolute gap's enclosure."""
    lo = None if g.lower is None else 1 - (1 - g.lower) ** 2
    hi = None if g.upper is None else 1 - (1 - g.upper) ** 2
    return Result.interval(NAMES["multiplicative_gap"], lo, hi, "1 - (1 - absolute gap)^2 (reversible: "
                           "sigma_2 = lambda_*)", "derived from the absolute gap's enclosure")


def operator_dirichlet_form(op: TransitionOperator, pi: torch.Tensor, f: np.ndarray, g: np.ndarray | None) -> float:
    """E(f, g) = (1/2) sum pi(x) P(x, y) (f(x) - f(y)) (g(x) - g(y)) on a matrix-free kernel: E(f, f) as
    non-negative terms, E(f, g) by polarization (E(f + g) - E(f - g)) / 4."""
    f_t = op.vector(f, "f")
    if g is None:
        return op.dirichlet_form(f_t, pi)
    g_t = op.vector(g, "g")
    return (op.dirichlet_form(f_t + g_t, pi) - op.dirichlet_form(f_t - g_t, pi)) / 4


def multiplicative_gap_sparse(P: sp.csr_array, logpi: np.ndarray, rtol: float = DEFAULT_RTOL) -> Result:
    """1 - sigma_2(P)^2 of a large chain, matrix-free: D^1/2 P* P D^-1/2 = C^T C with
    C = D^1/2 P D^-1/2, so Lanczos needs two sparse products per step and never forms P* P."""
    N = P.shape[0]
    classes = product_classes(P)
    if classes > 1:
        return Result.exact("multiplicative gap", 0.0, f"P* P is reducible ({classes} classes, from the "
                            "bipartite graph of P's entries): sigma_2(P) = 1")
    check_memory(8.0 * (3 * P.nnz + 30 * N), f"Lanczos on P* P of {N} states")
    coo = sp.coo_array(P)
    C = sp.csr_array((coo.data * np.exp((logpi[coo.row] - logpi[coo.col]) / 2), (coo.row, coo.col)), shape=P.shape)
    CT = sp.csr_array(C.T)
    op = spla.LinearOperator(P.shape, matvec=lambda v: CT @ (C @ v), dtype=np.float64)
    return lanczos_gap(op, logpi, "multiplicative gap", "Lanczos on C^T C, C = D^1/2 P D^-1/2 (P* P "
                       "never formed) with sqrt(pi) deflated", rtol=rtol)[0]


def bottom_gap(S: Matrix, logpi: np.ndarray, rtol: float = DEFAULT_RTOL, dense: bool | None = None) -> Result:
    """1 + lambda_min(S) of a reversible S (absolute accuracy ~ N u from the symmetric eigensolver)."""
    N = S.shape[0]
    B = symmetric_form(S)
    if (N <= DENSE_SPECTRAL_LIMIT) if dense is None else dense:
        dense = B.toarray() if sp.issparse(B) else B
        lam = float(la.eigvalsh((dense + dense.T) / 2, subset_by_index=[0, 0], check_finite=False)[0])
        err = 4 * N * EPS
        method = "LAPACK symmetric eigensolver on D^1/2 S D^-1/2; absolute error <= 4 N u"
    else:
        # deferred: the Krylov engine imports torch, which dense chains never load
        from mlmix.theory.linalg.krylov import lanczos

        Bc = sp.csr_array(B)
        v = lanczos(Bc, np.random.default_rng(0).standard_normal(N), which="SA",
                    tol=lambda theta: 1e-12 * abs(theta), max_matvecs=max(20_000, 50 * N)).vector.numpy()
        lam = float(v @ (Bc @ v))  # the Rayleigh quotient of the unit Ritz vector
        err = float(np.linalg.norm(Bc @ v - lam * v)) + 10 * EPS
        method = "Lanczos (smallest eigenvalue) on D^1/2 S D^-1/2; error <= residual norm"
    return Result.checked("1 + lambda_min", 1.0 + lam, err, method, rtol=rtol, lower=0.0, upper=2.0)


def modulus_gap(P: Matrix, rtol: float = DEFAULT_RTOL) -> Result:
    """1 - |lambda_2| of a non-reversible P (lambda_2 the eigenvalue other than 1 of largest modulus) from
    all its eigenvalues (dense), with the first-order error bound u ||P||_F kappa(lambda) from the
    eigenvalue condition numbers. Every representation and size goes through
    :func:`mlmix.theory.chain.nonreversible_gap.absolute_gap`, which calls this up to
    :data:`DENSE_SPECTRAL_LIMIT` states."""
    N = P.shape[0]
    name = "1 - |lambda_2|"
    if N < 2:
        return Result.missing(name, "-", "a gap needs at least 2 states")
    dense = to_dense(P)
    vals, left, right = la.eig(dense, left=True, right=True, check_finite=False)
    perron = int(np.argmin(np.abs(vals - 1.0)))
    rest = np.delete(np.arange(N), perron)
    k = int(rest[np.argmax(np.abs(vals[rest]))])
    cond = 1.0 / max(abs(np.vdot(left[:, k], right[:, k])), EPS)
    err = 4 * N * EPS * np.linalg.norm(dense) * cond
    method = "LAPACK eigenvalues of P (non-reversible); error <= 4 N u ||P||_F cond(lambda_2)"
    return Result.checked(name, 1.0 - abs(vals[k]), err, method, rtol=rtol, lower=0.0, upper=1.0,
                          eigenvalue=complex(vals[k]).__repr__(), condition_number=cond)


# ------------------------------------------------------------ the choice for a Chain

def chain_unrounded_gap(chain: Chain) -> tuple[Result, np.ndarray]:
    """(gap, mode) of a chain before the subnormal entries of P and the error of pi are charged
    (:attr:`ChainFacts.unrounded_gap_and_mode <mlmix.theory.chain.chain_facts.ChainFacts.unrounded_gap_and_mode>`):
    gamma = 1 - lambda_2(S) with S = P (reversible) or S = (P + P*)/2, and its slowest mode. Routes:

    * matrix-free kernel: :func:`operator_gap` (:func:`chain_operator_gap`), mode its Ritz function;
    * several closed classes with a given positive law: exactly 0 (an indicator has zero Dirichlet form);
    * reversible on the closed class: :func:`reversible_gap` of P, from the GTH factors when dense
      (relative accuracy), Lanczos on the CSR matrix otherwise;
    * non-reversible with a zero entry in the computed law: unresolved, (P + P*)/2 is undefined;
    * non-reversible: :func:`reversible_gap` of :func:`additive_reversibilization` built with pi_hat."""
    if chain.facts.representation == "operator":
        return chain.facts.operator_gap.gap, chain.facts.operator_gap.fiedler
    core = chain.facts.core
    if chain.facts.reducible_given:
        return Result.exact(NAMES["spectral_gap"], 0.0, "several closed classes: the indicator of one has zero "
                            "Dirichlet form"), np.zeros(chain.n_states)
    if core.is_reversible:
        el = core.facts.grounded if core.facts.representation == "dense" else None
        return reversible_gap(core.P, core.facts.logpi, name=NAMES["spectral_gap"], el=el,
                              dense=core.facts.representation == "dense")
    if not np.isfinite(core.facts.logpi).all():  # P* = D^-1 P^T D needs pi_hat > 0 on the irreducible core
        return Result.missing(NAMES["additive_gap"], "-", "the computed stationary law has zero entries (a "
                              "Krylov law that did not resolve a metastable chain): (P + P*)/2 is undefined"
                              ), np.zeros(chain.n_states)
    S = additive_reversibilization(core.P, core.facts.logpi)
    return reversible_gap(S, core.facts.logpi, name=NAMES["additive_gap"], dense=core.facts.representation == "dense")


def chain_gap(chain: Chain) -> tuple[Result, np.ndarray]:
    """(gap, mode) as reported (:attr:`ChainFacts.gap_and_mode <mlmix.theory.chain.chain_facts.ChainFacts.gap_and_mode>`):
    the rounded gap of :attr:`ChainFacts.raw_gap_and_mode`, charged for pi_hat's error (2 delta / (1 - delta),
    :meth:`ChainFacts.charged`) only where pi_hat built the matrix, i.e. the (P + P*)/2 of a non-reversible
    matrix chain; P's own gap (reversible, or several closed classes) and the operator's gap (which
    already holds the error of its pi) are returned as they are."""
    gap, mode = chain.facts.raw_gap_and_mode
    own = chain.facts.representation == "operator" or chain.facts.reducible_given or chain.facts.core.is_reversible
    if own:  # P's own gap: pi is not used (the operator's gap already holds the error of its pi)
        return gap, mode
    return chain.facts.charged(gap, (0.0, 2.0)), mode  # (P + P*)/2 has eigenvalues in [-1, 1]


def chain_operator_gap(chain: Chain) -> GapResult:
    """The matrix-free gap with its Ritz function (:func:`operator_gap` with the chain's solver options)."""
    return operator_gap(chain.op, chain.facts.stationary_law, rtol=chain.facts.gap_rtol, basis_size=chain.facts.basis_size,
                        progress=chain.solver_progress)


def chain_spectral_gap(chain: Chain) -> Result:
    """1 - lambda_2(P) of a reversible chain (on its closed class; the gap of :func:`chain_gap`); for a
    non-reversible chain unresolved, pointing to the additive and the absolute gap (complex spectrum)."""
    if not chain.facts.reducible_given and not chain.facts.core.is_reversible:
        return Result.missing(NAMES["spectral_gap"], "-", "the chain is not reversible (complex spectrum): see "
                              "additive_gap (Poincare) and absolute_spectral_gap (relaxation)")
    return renamed(chain.facts.gap_and_mode[0], NAMES["spectral_gap"], chain.facts.on_core())


def chain_multiplicative_gap(chain: Chain) -> Result:
    """1 - sigma_2(P)^2, the gap of P* P (Fill's bound on t_mix). Routes:

    * matrix-free, reversible: 1 - (1 - absolute gap)^2 (:func:`multiplicative_from_absolute`);
    * matrix-free, non-reversible: :func:`operator_multiplicative_gap` (Lanczos on C^T C);
    * CSR (beyond the dense limit): :func:`multiplicative_gap_sparse` (P* P never formed);
    * dense: :func:`reversible_gap` of :func:`multiplicative_reversibilization`.

    Matrix routes are widened for P's subnormal entries and charged for pi_hat's error:
    pi(x) (P* P)(x, y) = sum_z pi(z) P(z, x) P(z, y) is an edge measure linear in pi."""
    if chain.facts.representation == "operator":
        if chain.is_reversible:
            return multiplicative_from_absolute(chain.absolute_spectral_gap)
        return operator_multiplicative_gap(chain.op, chain.facts.stationary_law, chain.additive_gap, rtol=chain.facts.gap_rtol,
                                           basis_size=chain.facts.basis_size, progress=chain.solver_progress)
    core = chain.facts.core
    if core.facts.representation != "dense":
        return chain.facts.charged(chain.facts.rounded_entries(multiplicative_gap_sparse(sp.csr_array(core.P), core.facts.logpi),
                                                     (0.0, 1.0)), (0.0, 1.0))
    M = multiplicative_reversibilization(core.to_dense(), core.facts.logpi)
    gap = reversible_gap(M, core.facts.logpi, name=NAMES["multiplicative_gap"], dense=True)[0]
    return chain.facts.charged(chain.facts.rounded_entries(gap, (0.0, 1.0)), (0.0, 1.0))


def chain_dirichlet_form(chain: Chain, f: np.ndarray, g: np.ndarray | None = None) -> float:
    """E(f, g) = (1/2) sum pi(x) P(x, y) (f(x) - f(y)) (g(x) - g(y)) (f, g validated here): on a
    matrix-free kernel by :func:`operator_dirichlet_form` (E(f, f) as non-negative terms, E(f, g) by
    polarization), on a dense or CSR matrix by :func:`dirichlet_form` with pi = exp(log pi)."""
    f = check_vector(f, chain.n_states, "f")
    g = None if g is None else check_vector(g, chain.n_states, "g")
    if chain.facts.representation == "operator":
        return operator_dirichlet_form(chain.op, chain.facts.pi_t, f, g)
    return dirichlet_form(chain.P, f, g, np.exp(chain.facts.logpi))
