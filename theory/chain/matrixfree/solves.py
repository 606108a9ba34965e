"""Questions about a matrix-free chain (:mod:`mlmix.theory.kernels.operators`) that need solves with P itself,
each with an a-posteriori accuracy (issue 20).

Rounding: one application of P (or of P^T) to a non-negative vector v sums at most
k = sum_K |V|^|K| + 8 non-negative products per entry (the blocks K and their fibres; the 8 cover the
rounding of the stored coefficients w_K c_K), so |fl(P v) - P v| <= gamma_k P v, gamma_k = 2 k u / (1 - k u)
(:func:`rounding`); for a signed v, P |v| takes the place of P v.

* **Stationary certificate** (:func:`certify_stationary`): the M-matrix supersolution argument of
  :func:`mlmix.theory.chain.stationary.certify_supersolution` with A = (I - P^T) grounded at z applied
  matrix-free (A v = v - P^T v, its rounding <= gamma (v + P^T v) for v >= 0) and the solves A v = c
  by GMRES on the regularised system (I - P^T + u 1^T) y = c'.
* **Hitting times** E_x tau_A: (I - P_UU) h = 1 on U = A^c, h = 0 on A. With r = 1 - (I - P_UU) h_hat
  and M = (I - P_UU)^-1 >= 0, h - h_hat = M r, so |h - h_hat| <= ||r||_inf M 1 = ||r||_inf h entrywise:
  the relative error of every entry is at most rho / (1 - rho), rho = ||r||_inf plus its rounding.
* **Committors** q(x) = P_x(tau_B < tau_A): (I - P_CC) q = P 1_B on C = (A u B)^c; the same argument
  gives |q - q_hat| <= rho E_x tau_{A u B} entrywise (those hitting times computed and certified too).
* **Asymptotic variance** sigma^2(f) = 2 <f_bar, g>_pi - <f_bar, f_bar>_pi, (I - P + 1 pi^T) g = f_bar
  (Poisson equation, Kipnis-Varadhan; THEOREMS.md 1): |error| <= 2 ||f_bar||_pi ||r||_pi / gamma with r the
  residual and gamma a lower bound on the additive gap (E(h, h) >= gamma Var_pi(h)).
* **Distance from a start law**: TV(mu P^t, pi) by t applications of P^T, rounding t gamma per step.
* **Kemeny constant** of a reversible heat-bath kernel (positive semi-definite: an average of
  conditional expectations), K = sum_{j >= 2} 1 / (1 - lambda_j) with 0 <= lambda_j <= 1 - gamma:
  1 + lambda <= 1 / (1 - lambda) <= 1 + lambda / gamma (the chord of a convex function), and
  sum_{j >= 2} lambda_j = tr P - 1 with tr P = N sum_K w_K |V|^-|K| exactly (the conditionals of a
  block sum to 1 over its values), so K lies in [N - 2 + tr P, N - 1 + (tr P - 1) / gamma]. A
  non-reversible kernel: Re lambda_j in [-1, 1 - gamma_add] and 1/2 <= Re 1/(1 - lambda_j) <= 1/Re(1 - lambda_j)
  give K in [(N - 1)/2, (N - 1)/2 + (tr P + N - 2) / (2 gamma_add)]
  (:func:`mlmix.theory.chain.variance.kemeny_interval`).

Reversible kernels solve the symmetric positive definite forms D^1/2 (I - P_UU) D^-1/2 by conjugate
gradients (from the square-rooted conditionals); others use GMRES. Every solve runs on one process or
sharded (torch.distributed): sets and functions over all states are cut to each process's part, inner
products and maxima are reduced over the processes, and the results are gathered.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mlmix.theory.chain.mixing import _pi_l1_error
from mlmix.theory.chain.stationary import certify_supersolution
from mlmix.theory.chain.variance import kemeny_interval
from mlmix.theory.kernels.operators import KernelOperator
from mlmix.theory.linalg.krylov import LinearSolve, conjugate_gradient, gmres
from mlmix.theory.results import EPS, NAMES, Result, VectorResult

#: Relative residual the solves of this module are driven to.
SOLVE_RTOL = 1e-13

#: Operator applications a solve may use.
MAX_MATVECS = 20_000


def rounding(op: KernelOperator) -> float:
    """gamma_k of one application of ``op`` (module docstring)."""
    q = op.space.vocab_size
    k = sum(q ** len(b.sites) for b in op.blocks) + 8
    unit = float(torch.finfo(op.dtype).eps) / 2
    return 2 * k * unit / (1 - k * unit)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).cpu().numpy()


def _t(op: KernelOperator, v: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(v, device=op.device).to(op.dtype)


# Sharded vectors: process r holds the states r L .. (r + 1) L - 1 (L = op.local_size, the leading sites
# sharded); arguments over all states are cut to this process's part, results gathered in rank order.

def _local(op: KernelOperator, v: np.ndarray) -> torch.Tensor:
    """This process's part of a vector over all states (all of it on one process)."""
    start = op.comm.rank * op.local_size
    return torch.as_tensor(np.asarray(v)[start:start + op.local_size], device=op.device)


def _gather(op: KernelOperator, t: torch.Tensor) -> np.ndarray:
    """A sharded vector over all states, on every process."""
    return _np(op.comm.all_gather_cat(t.contiguous()))


def global_total(op: KernelOperator, t: torch.Tensor, how: str = "sum") -> float:
    """sum (or max, min) over all states of a sharded vector (this process's part ``t``)."""
    part = t.sum(dtype=torch.float64) if how == "sum" else (t.max() if how == "max" else t.min()).double()
    return float(op.comm.allreduce_(part, how))


# ------------------------------------------------------------------------------------------ stationary law

def certify_stationary(op: KernelOperator, pi: VectorResult) -> VectorResult:
    """``pi`` with the entrywise certificate of the module docstring when it verifies (``rel_error``
    bounds max_x |pi_hat(x) / pi(x) - 1|); unchanged when it does not or when ``pi`` already has an
    entrywise bound (the exact law of a reversible kernel). Sharded operators: every process calls it
    with its slice."""
    if pi.log_value is None or pi.rel_error is not None:
        return pi
    comm = op.comm

    def reduce(value: float, how: str) -> float:
        return float(comm.allreduce_(torch.tensor(float(value), dtype=torch.float64, device=op.device), how))

    logpi = np.asarray(pi.log_value, dtype=np.float64)
    N = op.n_states
    log_z = reduce(float(logpi.max()), "max")  # ground at the heaviest state, on the lowest rank holding it
    owner = reduce(comm.rank if float(logpi.max()) == log_z else comm.world_size, "min")
    z = int(np.argmax(logpi)) if comm.rank == owner else None
    R = np.ones(logpi.size, dtype=bool)
    if z is not None:
        R[z] = False
    gamma = rounding(op)

    def apply(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = _np(op.apply(_t(op, v), "measures"))
        return (v - w)[R], gamma * (v + w)[R]

    pi_hat = np.exp(logpi)
    u = torch.full((op.local_size,), 1.0 / N, dtype=op.dtype, device=op.device)

    def system(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:  # (I - P^T + u 1^T) x
        op.apply(x, "measures", out)
        return out.neg_().add_(x).add_(u, alpha=float(comm.allreduce_(x.sum(dtype=torch.float64))))

    def solve(c: np.ndarray) -> np.ndarray:  # A v = c with v_z = 0, through the regularised system
        rhs = c.copy()
        total = reduce(float(c[R].sum()), "sum")
        if z is not None:
            rhs[z] = -total
        y = _np(gmres(system, _t(op, rhs), comm=comm, restart=30, rtol=1e-12, max_matvecs=600).x)
        y_z = reduce(float(y[z]) if z is not None else 0.0, "sum")
        return y - (y_z / math.exp(log_z)) * pi_hat

    rel = certify_supersolution(apply, logpi, z, solve, log_z=log_z, reduce=reduce)
    if not rel < 1:
        return pi
    rel = min(rel + 2 * EPS * reduce(float(np.abs(logpi).max()), "max"), 1.0)  # exp(log pi); ||error||_1 <= rel
    return VectorResult(pi.name, pi.value, pi.method + "; error bound: a-posteriori certificate (M-matrix "
                        "supersolution, matrix-free)", rel, rel, pi.residual, pi.log_value, dict(pi.details))


# ------------------------------------------------------------------------------------------ absorbed solves

def _absorbed(op: KernelOperator, unknown: torch.Tensor, b: torch.Tensor, pi: torch.Tensor) -> tuple[
        torch.Tensor, LinearSolve, str]:
    """x with x = 0 off ``unknown`` and (I - P_UU) x = b on it (b = 0 off U)."""
    keep = unknown.to(op.dtype)
    if op.reversible:  # D^1/2 (I - P_UU) D^-1/2 is symmetric positive definite
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


def _mask(op: KernelOperator, S: np.ndarray) -> torch.Tensor:
    return _local(op, np.asarray(S, dtype=bool))


def hitting_times(op: KernelOperator, A: np.ndarray, pi: torch.Tensor) -> VectorResult:
    """E_x tau_A for every start x (``A`` a boolean mask; the chain irreducible), certified entrywise."""
    name = NAMES["hitting_time"]
    Am = _mask(op, A)
    if global_total(op, Am.to(torch.float64), "min") > 0:
        return VectorResult(name, np.zeros(op.n_states), "every state is in A", 0.0)
    U = ~Am
    one = U.to(op.dtype)
    h, sol, how = _absorbed(op, U, one, pi)
    h = h * one
    gamma = rounding(op)
    Ph = op.apply(h, "functions")
    P_abs = op.apply(h.abs(), "functions")
    r = (one - (h - Ph * one)) * one
    rho = global_total(op, (r.abs() + gamma * (one + h.abs() + P_abs) * one), "max")
    rel = rho / (1 - rho) if rho < 1 else None
    return VectorResult(name, _gather(op, h), how + f"; entrywise error <= rho / (1 - rho), rho = ||r||_inf = {rho:.1e} "
                        "(M = (I - P_UU)^-1 >= 0, M 1 = E tau_A)", rel, None, sol.relative_residual,
                        details={"representation": "operator"})


def committor(op: KernelOperator, A: np.ndarray, B: np.ndarray, pi: torch.Tensor) -> VectorResult:
    """q(x) = P_x(tau_B < tau_A) (masks), with the entrywise absolute error bound rho E_x tau_{A u B}
    (``details['max_abs_error']``; ``abs_error`` its sum, ``rel_error`` the entrywise relative bound
    where every q > 0)."""
    Am, Bm = _mask(op, A), _mask(op, B)
    C = ~(Am | Bm)
    keep = C.to(op.dtype)
    inB = Bm.to(op.dtype)
    b = op.apply(inB, "functions").mul_(keep)
    x, sol, how = _absorbed(op, C, b, pi)
    x = x * keep
    gamma = rounding(op)
    Px = op.apply(x, "functions")
    r = (b - (x - Px * keep)) * keep
    rho = global_total(op, (r.abs() + gamma * (x.abs() + op.apply(x.abs(), "functions") + b) * keep), "max")
    k = hitting_times(op, _gather(op, ~C).astype(bool), pi)
    q = x + inB
    name = NAMES["committor"]
    if k.rel_error is None or not rho < 1:
        return VectorResult(name, _gather(op, q), how + "; not certified (the residual or E tau_{A u B} is not bounded)",
                            None, None, sol.relative_residual, details={"representation": "operator"})
    bound = rho * np.asarray(k.value) * (1 + k.rel_error)
    qn = _gather(op, q)
    rel = float(np.max(bound / qn)) if (qn > 0).all() else None
    return VectorResult(name, qn, how + f"; |error| <= rho E_x tau_(A u B) entrywise, rho = {rho:.1e}",
                        rel if rel is not None and rel < 1 else None, float(bound.sum()), sol.relative_residual,
                        details={"representation": "operator", "max_abs_error": float(bound.max())})


def hitting_probabilities(op: KernelOperator, A: np.ndarray, t: int) -> VectorResult:
    """P_x(tau_A <= t) by t backward steps h <- 1_A + 1_{A^c} P h (non-negative: entrywise relative
    rounding (1 + gamma)^t - 1)."""
    Am = _mask(op, A)
    inA = Am.to(op.dtype)
    h = inA.clone()
    for _ in range(t):
        h = op.apply(h, "functions").mul_(1 - inA).add_(inA)
    rel = math.expm1(t * math.log1p(rounding(op)))
    return VectorResult(NAMES["hitting_probabilities"], _gather(op, h), f"{t} backward steps (matrix-free)", rel)


# ------------------------------------------------------------------------------------------ averages

def asymptotic_variance(op: KernelOperator, f: np.ndarray, pi: torch.Tensor, gap: Result,
                        pi_rel_error: float | None = None) -> Result:
    """sigma^2(f) through the Poisson equation (module docstring), on one process or sharded. The error
    bound adds the effect of pi's entrywise relative error ``pi_rel_error`` on 2 <f_bar, g>_pi - Var_pi(f),
    3 rel (2 <|f_bar g|>_pi + Var_pi f), as on the dense route."""
    ft = _local(op, f).to(op.dtype)
    fbar = ft - global_total(op, pi * ft)
    if op.reversible:  # D^1/2 (I - P + 1 pi^T) D^-1/2 = I - B + sqrt(pi) sqrt(pi)^T: positive definite
        r = pi.sqrt()

        def sym(y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            op.apply(y, "symmetric", out)
            return out.neg_().add_(y).add_(r, alpha=global_total(op, r * y))

        sol = conjugate_gradient(sym, fbar * r, comm=op.comm, rtol=SOLVE_RTOL, max_matvecs=MAX_MATVECS)
        g = sol.x / r
        how = f"conjugate gradients on D^1/2 (I - P + 1 pi^T) D^-1/2, {sol.matvecs} applications"
    else:
        def apply(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            op.apply(x, "functions", out)
            return out.neg_().add_(x).add_(global_total(op, pi * x))

        sol = gmres(apply, fbar, comm=op.comm, restart=50, rtol=SOLVE_RTOL, max_matvecs=MAX_MATVECS)
        g = sol.x
        how = f"GMRES(50) on (I - P + 1 pi^T) g = f_bar, {sol.matvecs} applications"
    Pg = op.apply(g, "functions")
    res = fbar - (g - Pg + global_total(op, pi * g))
    res = res.abs_().add_(op.apply(g.abs(), "functions").add_(g.abs()).add_(fbar.abs()), alpha=rounding(op))
    var = global_total(op, pi * fbar.square())
    sigma2 = 2.0 * global_total(op, pi * fbar * g) - var
    g_lo = gap.lower or 0.0
    err = 2.0 * math.sqrt(var * global_total(op, pi * res.square())) / g_lo if g_lo > 0 else math.inf
    err += 8 * EPS * op.n_states ** 0.5 * (abs(sigma2) + var)  # the inner products
    err += 3.0 * (pi_rel_error or 0.0) * (2.0 * global_total(op, pi * (fbar * g).abs()) + var)  # pi's own error
    return Result.checked(NAMES["asymptotic_variance"], sigma2, err, how + "; error <= 2 ||f_bar||_pi ||r||_pi / gap "
                          "(r with its rounding)", lower=0.0)


def distance_from(op: KernelOperator, mu: np.ndarray, t_max: int, pi: torch.Tensor,
                  pi_rel_error: float | None) -> VectorResult:
    """TV(mu P^t, pi) for t = 0..t_max by t_max applications of P^T (``mu`` over all states, ``pi`` this
    process's part); ``abs_error`` bounds every entry (t gamma of rounding per step plus pi's L1 error)."""
    m = _local(op, mu).to(op.dtype)
    p = pi.to(op.dtype)
    out = np.empty(t_max + 1)
    for t in range(t_max + 1):
        out[t] = 0.5 * global_total(op, (m - p).abs())
        if t < t_max:
            m = op.apply(m, "measures")
            m.div_(global_total(op, m))
    gamma = rounding(op)
    err = 0.5 * (t_max * 2 * gamma + _pi_l1_error(pi_rel_error) + 2 * op.n_states * EPS)
    return VectorResult(NAMES["distance_curve"], out, f"{t_max} applications of P^T from the start law "
                        "(matrix-free)", None, err)


def kemeny_bounds(op: KernelOperator, gap: Result) -> Result:
    """Bounds on K from tr P = N sum_K w_K |V|^-|K| (exact for any heat-bath kernel: a block's conditionals
    sum to 1 over its values) and ``gap``, the additive gap: the interval of
    :func:`mlmix.theory.chain.variance.kemeny_interval`, with lambda_min = 0 for a reversible (positive
    semi-definite) kernel and the non-reversible bounds otherwise (module docstring)."""
    q = op.space.vocab_size
    trace = op.n_states * sum(b.weight * q ** -len(b.sites) for b in op.blocks)
    how = " = N sum_K w_K |V|^-|K|" + (" (a positive semi-definite heat-bath kernel)" if op.reversible else "")
    return kemeny_interval(op.n_states, trace, gap, 0.0, how=how, reversible=op.reversible)
