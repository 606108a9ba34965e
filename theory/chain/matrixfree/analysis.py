"""Chain quantities of a matrix-free kernel (:mod:`mlmix.theory.kernels.operators`), each with its accuracy.

* **Stationary law.** Reversible (compatible source): log pi = log mu_T - log Z exactly, from the
  joint in log space (entrywise relative accuracy of a few ulps of |log pi|). Otherwise GMRES on
  (I - P^T + u 1^T) pi = u (u uniform; the solution has sum 1 and solves pi P = pi), with the
  residual r = pi P - pi reported and the entrywise certificate of
  :func:`mlmix.theory.chain.matrixfree.solves.certify_stationary` (rigorous, as on the CSR route); where
  that fails (a metastable law), the a-posteriori bound (with f = (pi_hat - pi) / pi,
  (I - P*) f = -r / pi, E(f, f) >= gamma Var_pi(f))

      ||pi_hat - pi||_1 <= ||r / pi||_{L^2(pi)} / gamma,
      |pi_hat(x) / pi(x) - 1| <= ||r / pi||_{L^2(pi)} / (gamma sqrt(pi(x)))

  evaluated at pi_hat and the computed additive gap gamma (first order).
* **Gap.** gamma = 1 - lambda_2 of S = (P + P*)/2 (= P when reversible): thick-restart Lanczos
  (:func:`mlmix.theory.linalg.krylov.lanczos`) on the symmetric D^{1/2} S D^{-1/2}, sqrt(pi)
  deflated. The value is the Rayleigh quotient E(f, f) / Var_pi(f) of the Ritz function f = y /
  sqrt(pi), with E summed as non-negative terms (so a small gap keeps its relative accuracy); it is
  an upper bound on gamma (variational). The lower bound is value - ||r|| with r = B y - theta y
  recomputed with the operator (Weyl), plus the rounding of B y and, for non-reversible chains, the
  error of pi_hat in B. It assumes the Krylov space did not miss an eigenvalue above lambda_2
  (seeded pseudo-random start); the result is :meth:`Result.checked`, an interval when ||r|| is too
  large for the requested accuracy.
* **Conductance.** Phi* in [gamma_lower / 2, min(Phi(S), sqrt(2 gamma_upper))] (Cheeger, valid for
  non-reversible chains through (P + P*)/2), S the best sweep set {f < t} of the Ritz function over
  up to ``bins`` thresholds (all of them on small chains: then it is the exact sweep), with Phi(S)
  recomputed as a sum of non-negative flows for the lighter side.
* **t_mix(eps)** (worst-start TV): reversible heat-bath kernels are positive semi-definite (an
  average of conditional expectations), so the absolute gap is gamma and t_rel = 1 / gamma;
  (t_rel - 1) log(1 / (2 eps)) <= t_mix(eps) <= t_rel log(1 / (eps pi_min)) (LPW Thms 12.4, 12.5),
  and, for any chain, t_mix(eps) >= (pi(S^c) - eps) / Phi(S) (THEOREMS.md 1.16) and Fill's
  d(t) <= (1/2) sigma_2^t sqrt((1 - pi_min) / pi_min) with 1 - sigma_2^2 the gap of P* P (Lanczos on
  C^T C, C = D^{1/2} P D^{-1/2}), all through :class:`mlmix.theory.chain.mixing.MixingBounds`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator

from mlmix.errors import ConvergenceError
from mlmix.progress import Convergence
from mlmix.theory.chain.absorbing import Absorption, absorption_probabilities, expected_steps, fundamental_matrix
from mlmix.theory.chain.conductance import sweep_profile
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.matrixfree.solves import (
    asymptotic_variance,
    certify_stationary,
    committor,
    distance_from,
    global_total,
    hitting_probabilities,
    hitting_times,
    kemeny_bounds,
)
from mlmix.theory.chain.mixing import MixingBounds
from mlmix.theory.chain.nonreversible_gap import absolute_gap, kernel_functions
from mlmix.theory.chain.spectrum import implied_timescales
from mlmix.theory.chain.structure import Structure
from mlmix.theory.kernels.operators import KernelOperator, kernel_operator
from mlmix.theory.linalg.krylov import gmres, inner, lanczos, norm
from mlmix.theory.results import DEFAULT_RTOL, EPS, NAMES, Result, VectorResult, results_frame
from mlmix.validation import check_eps, check_int, check_real, check_state_set, check_steps, check_vector

#: Relative accuracy the gap is driven to (the residual ||r|| <= GAP_RTOL x gap), when reachable.
GAP_RTOL = 1e-8

#: Relative residual of the GMRES solve for a non-reversible stationary law.
STATIONARY_RTOL = 1e-13

#: Thresholds tried by the sweep cut (every distinct value of f on chains with fewer states).
SWEEP_BINS = 1 << 16

_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64
_MIX1 = -4658895280553007687    # 0xBF58476D1CE4E5B9
_MIX2 = -7723592293110705685    # 0x94D049BB133111EB


def _shr(z: torch.Tensor, s: int, out: torch.Tensor) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic), written into ``out``."""
    return torch.bitwise_right_shift(z, s, out=out).bitwise_and_((1 << (64 - s)) - 1)


def hash_uniform(start: int, stop: int, seed: int, device: torch.device) -> torch.Tensor:
    """Uniform numbers in [0, 1) from the global state index (splitmix64): the same vector however
    the states are sharded over processes."""
    offset = torch.tensor(seed, dtype=torch.int64, device=device) * _MIX1  # int64 products wrap around
    z = torch.arange(start, stop, dtype=torch.int64, device=device).mul_(_GOLDEN).add_(offset)
    t = torch.empty_like(z)  # in place: fresh vectors of this size cost their page faults
    for shift, mix in ((30, _MIX1), (27, _MIX2), (31, None)):
        z.bitwise_xor_(_shr(z, shift, t))
        if mix is not None:
            z.mul_(mix)
    return _shr(z, 11, t).to(torch.float64).mul_(2.0**-53)


# ------------------------------------------------------------------------------------------ stationary law

def _l1_residual(op: KernelOperator, pi: torch.Tensor) -> float:
    out = op.apply(pi, "measures")
    return global_total(op, out.sub_(pi).abs_())


def operator_stationary(op: KernelOperator, *, rtol: float = STATIONARY_RTOL, progress: bool = False) -> VectorResult:
    """The stationary law of ``op`` over this process's states (see the module docstring).

    Reversible: exact from log mu_T (``rel_error`` bounds the entrywise relative error from the
    rounding of log mu). Otherwise GMRES; ``residual`` = ||pi P - pi||_1, and ``abs_error`` /
    ``rel_error`` stay None until :func:`stationary_error_bound` supplies the gap.
    Raises ConvergenceError when GMRES stalls above ``rtol``.
    """
    rtol = check_real(rtol, "rtol", minimum=0.0, open_min=True)
    comm = op.comm
    if op.reversible:
        log_mu, err = op.log_joint
        lm = log_mu.reshape(-1)
        m = comm.allreduce_(lm.max().clone(), "max")
        z = global_total(op, (lm - m).exp())
        log_pi = lm - (m + math.log(z))
        n_total = op.n_states
        rel = math.expm1(2 * err + 4 * EPS * (float(comm.allreduce_(log_pi.abs().max().clone(), "max"))
                                               + math.log(n_total) + 1))
        pi = log_pi.exp()
        residual = _l1_residual(op, pi.to(op.dtype))
        return VectorResult(NAMES["stationary"], pi.cpu().numpy(), "exact from the joint law in log space: log pi = "
                            "log mu_T - log Z (reversible heat-bath kernel)", rel_error=rel, residual=residual,
                            log_value=log_pi.cpu().numpy(), details={"representation": "operator"})
    N = op.n_states
    u = torch.full((op.local_size,), 1.0 / N, dtype=op.dtype, device=op.device)

    def system(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:  # (I - P^T + u 1^T) x
        op.apply(x, "measures", out)
        return out.neg_().add_(x).add_(u, alpha=global_total(op, x))

    report = Convergence("stationary law (GMRES)", progress)
    sol = gmres(system, u, x0=u.clone(), comm=comm, restart=30, rtol=rtol, progress=report)
    if not sol.converged:
        raise ConvergenceError(f"stationary law: GMRES(30) reached relative residual {sol.relative_residual:.2e} "
                               f"after {sol.matvecs} applications, not {rtol:g}")
    pi = sol.x
    pi.div_(global_total(op, pi))
    method = f"GMRES(30) on (I - P^T + u 1^T) pi = u, {sol.matvecs} applications"
    steps = 0
    while float(comm.allreduce_(pi.min().clone(), "min")) <= 0:  # round-off below zero: smooth by pi <- pi P
        if steps > op.space.length:
            raise ConvergenceError("stationary law: entries stay <= 0 after smoothing; the chain may be reducible")
        pi = op.apply(pi.clamp_(min=0.0), "measures")
        pi.div_(global_total(op, pi))
        steps += 1
    if steps:
        method += f", then {steps} step(s) pi <- pi P to clear round-off below zero"
    residual = _l1_residual(op, pi)
    return VectorResult(NAMES["stationary"], pi.cpu().numpy(), method, residual=residual,
                        log_value=pi.log().cpu().numpy(), details={"representation": "operator"})


def stationary_error_bound(op: KernelOperator, pi: VectorResult, gap_lower: float) -> VectorResult:
    """``pi`` with the a-posteriori bounds of the module docstring filled in from the residual
    r = pi P - pi and a lower bound on the additive gap (unchanged for an exact law)."""
    if pi.rel_error is not None or gap_lower <= 0:
        return pi
    t = torch.as_tensor(pi.value, device=op.device, dtype=op.dtype)
    rel, pi_min = _first_order_pi_error(op, t, gap_lower)
    return VectorResult(pi.name, pi.value, pi.method + "; error bound ||r/pi||_pi / gap (first order)",
                        rel_error=rel, abs_error=rel * math.sqrt(pi_min), residual=pi.residual,
                        log_value=pi.log_value, details=dict(pi.details))


# ------------------------------------------------------------------------------------------ gap

@dataclass(frozen=True, eq=False)
class GapResult:
    """The additive gap (a :class:`Result`), the Ritz function f = y / sqrt(pi) (local tensor, the
    Fiedler-type function whose sweep cuts bound the conductance) and the solver's figures."""

    gap: Result
    fiedler: torch.Tensor
    matvecs: int
    residual: float


def _symmetric_operator(op: KernelOperator, pi: torch.Tensor):
    """u -> D^{1/2} S D^{-1/2} u: from the square-rooted conditionals when reversible, else
    (1/2) [ r P(u / r) + ((r u) P) / r ] with r = sqrt(pi)."""
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


def _top_ritz(op: KernelOperator, sym, w: torch.Tensor, *, rtol: float, basis_size: int, max_matvecs: int,
              seed: int, progress: bool, what: str):
    """The largest Ritz pair of the symmetric ``sym`` with ``w`` (its eigenvector of eigenvalue 1)
    deflated, and the residual ||B y - theta y|| recomputed with the undeflated operator."""
    comm = op.comm

    def deflated(u: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        sym(u, out)
        return out.sub_(w, alpha=float(inner(comm, w, out)))

    unit = float(torch.finfo(op.dtype).eps) / 2
    floor = 8 * unit * (op.space.length * op.space.vocab_size + 4)
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


def _checked_pi(op: KernelOperator, pi: VectorResult) -> torch.Tensor:
    pi_t = torch.as_tensor(pi.value, device=op.device).to(op.dtype)
    pi_min = float(op.comm.allreduce_(pi_t.min().clone(), "min"))
    if not pi_min > 1e-300:
        raise ValueError(f"the stationary law underflows (smallest entry {pi_min:.3g}); raise the temperature")
    return pi_t


def _unit_sqrt(op: KernelOperator, pi_t: torch.Tensor) -> torch.Tensor:
    w = pi_t.sqrt()
    return w.div_(norm(op.comm, w))


def operator_gap(op: KernelOperator, pi: VectorResult, *, rtol: float = GAP_RTOL, basis_size: int = 16,
                 max_matvecs: int = 20_000, seed: int = 0, target_rtol: float = DEFAULT_RTOL,
                 progress: bool = False) -> GapResult:
    """gamma = 1 - lambda_2((P + P*)/2), the Poincaré gap (the spectral gap when P is reversible),
    as a certified :class:`Result` (see the module docstring). ``rtol``: drive the residual to
    rtol x gamma; ``target_rtol``: the accuracy below which the value is reported as an interval."""
    if op.n_states < 2:
        raise ValueError("a gap needs at least 2 states")
    pi_t = _checked_pi(op, pi)
    ritz, y, theta, residual, details = _top_ritz(op, _symmetric_operator(op, pi_t), _unit_sqrt(op, pi_t),
                                                  rtol=rtol, basis_size=basis_size, max_matvecs=max_matvecs,
                                                  seed=seed, progress=progress, what="gap")
    f = y.div_(pi_t.sqrt())  # the Ritz function in L^2(pi)
    mean = global_total(op, pi_t * f)
    var = global_total(op, pi_t * (f - mean).square())
    value = op.dirichlet_form(f, pi_t) / var
    unit = float(torch.finfo(op.dtype).eps) / 2
    n_terms = op.space.length * op.space.vocab_size + math.log2(max(op.n_states, 2))
    margin = 8 * unit * n_terms + (0.0 if pi.rel_error is None else 2 * pi.rel_error)
    rounding = 2 * unit * (op.space.length * op.space.vocab_size + 2)
    pi_error = 0.0 if op.reversible else _pi_perturbation(op, pi, pi_t, max(value - residual, value / 2))
    abs_error = residual + rounding + pi_error + 4 * unit
    which = "D^1/2 P D^-1/2 (reversible, from sqrt conditionals)" if op.reversible else \
        "D^1/2 (P + P*)/2 D^-1/2 (additive reversibilization, with the computed pi)"
    method = (f"thick-restart Lanczos on {which}, sqrt(pi) deflated, {ritz.matvecs} applications "
              f"(basis {basis_size}); value = E(f,f)/Var(f) of the Ritz function (an upper bound); "
              f"lower bound value - ||r||, ||r|| = {residual:.2e} (Weyl; assumes no eigenvalue above "
              f"lambda_2 was missed)")
    if pi_error:
        details["pi_error"] = pi_error
    gap = Result.checked(NAMES["additive_gap"], value, abs_error, method, rtol=target_rtol, lower=0.0,
                         upper=value * (1 + margin), **details)
    return GapResult(gap, f, ritz.matvecs, residual)


def operator_multiplicative_gap(op: KernelOperator, pi: VectorResult, additive_gap: Result, *,
                                rtol: float = GAP_RTOL, basis_size: int = 16, max_matvecs: int = 20_000,
                                seed: int = 0, target_rtol: float = DEFAULT_RTOL, progress: bool = False) -> Result:
    """1 - sigma_2(P)^2, the gap of P* P (Fill's bound on t_mix for any chain): Lanczos on C^T C with
    C = D^{1/2} P D^{-1/2} (two applications per step, P* P never formed), sqrt(pi) deflated; an
    interval 1 - theta +- (||r|| + rounding + 2 x the error of pi in C)."""
    pi_t = _checked_pi(op, pi)
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
    rounding = 4 * unit * (op.space.length * op.space.vocab_size + 2)
    pi_error = 0.0
    if not op.reversible and (pi.rel_error is not None or additive_gap.lower):
        pi_error = 2 * _pi_perturbation(op, pi, pi_t, additive_gap.lower or 0.0)
    method = (f"thick-restart Lanczos on C^T C, C = D^1/2 P D^-1/2 (P* P never formed), sqrt(pi) deflated, "
              f"{ritz.matvecs} steps of two applications; error <= ||r|| = {residual:.2e} (Weyl)")
    return Result.checked(NAMES["multiplicative_gap"], 1.0 - theta, residual + rounding + pi_error + 4 * unit, method,
                          rtol=target_rtol, lower=0.0, upper=1.0, **details)


def _start_vector(op: KernelOperator, w: torch.Tensor, seed: int) -> torch.Tensor:
    """Pseudo-random (a hash of the global state index, so the same however sharded), orthogonal to w."""
    start = op.comm.rank * op.local_size
    v0 = (hash_uniform(start, start + op.local_size, seed, op.device) - 0.5).to(op.dtype)
    return v0.sub_(w, alpha=float(inner(op.comm, w, v0)))


def _pi_perturbation(op: KernelOperator, pi: VectorResult, pi_t: torch.Tensor, gap: float) -> float:
    """A bound on ||B_hat - B|| for B = D^{1/2} S D^{-1/2} built with pi_hat: with an entrywise relative
    bound delta on pi_hat (the certificate), every entry of the non-negative B moves by at most
    delta / (1 - delta) of itself and ||B|| <= 1; otherwise the first-order bound below."""
    if pi.rel_error is not None and pi.rel_error < 1:
        return pi.rel_error / (1 - pi.rel_error)
    return _first_order_pi_error(op, pi_t, gap)[0] if gap > 0 else math.inf


def _first_order_pi_error(op: KernelOperator, pi: torch.Tensor, gap: float) -> tuple[float, float]:
    """(||r / pi||_pi / (gap sqrt(pi_min)), pi_min), r = pi P - pi: the entrywise relative error bound
    of a computed pi (module docstring); also bounds the perturbation of D^{1/2} S D^{-1/2} it causes
    (as ||B|| <= 1)."""
    r = op.apply(pi, "measures").sub_(pi)
    chi = math.sqrt(global_total(op, r.square_().div_(pi)))
    pi_min = float(op.comm.allreduce_(pi.min().clone(), "min"))
    return chi / (gap * math.sqrt(pi_min)), pi_min


# ------------------------------------------------------------------------------------------ conductance

def _thresholds(op: KernelOperator, f: torch.Tensor, bins: int) -> torch.Tensor:
    stride = max(1, (op.n_states + bins - 1) // bins)
    sample = op.comm.all_gather_cat(f[::stride].contiguous())
    values = torch.unique(sample)  # sorted
    if values.numel() > bins:
        values = values[torch.linspace(0, values.numel() - 1, bins, device=values.device).long()].unique()
    return values


def operator_conductance(op: KernelOperator, pi: VectorResult, gap: GapResult, *,
                         bins: int = SWEEP_BINS) -> Result:
    """Phi* = min over pi(S) <= 1/2 of Q(S, S^c) / pi(S): an interval (module docstring), with the
    named set (``set``: this process's mask), its size, mass and conductance in ``details``."""
    comm = op.comm
    pi_t = torch.as_tensor(pi.value, device=op.device).to(op.dtype)
    f = gap.fiedler
    thr = _thresholds(op, f, bins)
    K = thr.numel()
    bucket = torch.searchsorted(thr, f.contiguous(), right=True)  # number of thresholds <= f(x)
    pairs = ((bx, by, (px * cxy).double()) for px, cxy, (bx,), (by,) in op.fibre_pairs(pi_t, [bucket]))
    cut, light = sweep_profile(K, bucket, pi_t.double(), pairs, reduce=comm.allreduce_)  # sets {bucket < k}
    ratio = torch.where(light > 0, cut / light.clamp(min=1e-300), torch.full_like(cut, math.inf))
    k = int(torch.argmin(ratio)) + 1
    S = bucket < k
    mass_s = global_total(op, torch.where(S, pi_t, 0.0))
    mass_c = global_total(op, torch.where(S, 0.0, pi_t))
    if mass_s > mass_c:
        S, mass_s, mass_c = ~S, mass_c, mass_s
    size = int(comm.allreduce_(S.sum()))
    phi_s = op.escape_flow(S, pi_t) / mass_s
    unit = float(torch.finfo(op.dtype).eps) / 2
    margin = 8 * unit * (op.space.length * op.space.vocab_size + math.log2(op.n_states)) + \
        (2 * pi.rel_error if pi.rel_error is not None else 0.0)
    phi_upper = phi_s * (1 + margin)
    g = gap.gap
    cheeger_upper = math.sqrt(2 * g.upper) if g.upper is not None else math.inf
    upper = min(phi_upper, cheeger_upper)
    lower = g.lower / 2 if g.lower is not None else 0.0
    method = ("lower: Cheeger gap/2 (gap's lower bound); upper: "
              + (f"Phi(S) of the best of {K} sweep sets of the Ritz function, recomputed as a sum of flows"
                 if phi_upper <= cheeger_upper else "Cheeger sqrt(2 gap)"))
    return Result.interval(NAMES["conductance"], lower, upper, method,
                           "Phi* is a minimum over 2^N sets: only an enclosure is computable at this size",
                           set_size=size, set_mass=mass_s, set=S.cpu().numpy(), set_conductance=phi_s,
                           set_conductance_upper=phi_upper, log10_upper=math.log10(upper) if upper > 0 else None,
                           sweep_thresholds=K)


# ------------------------------------------------------------------------------------------ mixing

def operator_mixing_bounds(op: KernelOperator, pi: VectorResult, gap: Result, conductance: Result,
                           eps: float = 0.25, multiplicative_gap: Result | None = None) -> Result:
    """Certified bounds on the worst-start TV t_mix(eps) (module docstring), by
    :class:`mlmix.theory.chain.mixing.MixingBounds` from the gap (reversible: positive semi-definite, so the
    absolute gap is the gap), the conductance's named set and, for any chain, Fill's bound from the
    multiplicative gap when given."""
    eps = check_eps(eps)
    log_min = torch.tensor(float(np.min(pi.log_value)), dtype=torch.float64, device=op.device)
    bounds = MixingBounds(float(op.comm.allreduce_(log_min, "min")), op.reversible,
                          abs_gap=gap if op.reversible else None, mult_gap=multiplicative_gap,
                          set_mass=conductance.details.get("set_mass"),
                          set_phi_upper=conductance.details.get("set_conductance_upper"))
    lower, upper, how = bounds.t_mix_interval(eps)
    if op.reversible:
        how.append("P is positive semi-definite (an average of conditional expectations), so t_rel = 1/gap")
    return Result.interval(NAMES["t_mix"], lower, upper if math.isfinite(upper) else None,
                           "worst-start TV mixing time, certified bounds: " + "; ".join(how),
                           "the exact worst-start t_mix needs dense powers of P; bounds only at this size", eps=eps)


# ------------------------------------------------------------------------------------------ the chain object

def _renamed(r: Result, name: str, note: str = "") -> Result:
    return Result(name, r.value, note + r.method, r.rel_error, r.lower, r.upper, r.reason, dict(r.details))


class _Positive(Structure):
    """The structure of a kernel whose conditionals are all positive: every state reaches every other
    by single-site moves (one class), and each move keeps the state with positive probability
    (period 1). No transition graph is stored (``graph`` is None)."""

    def period(self, states: np.ndarray | None = None) -> int:
        return 1


class OperatorChain(Chain):
    """:class:`mlmix.theory.chain.markov_chain.Chain` on a matrix-free kernel: what ``Chain.from_source(...,
    representation="operator")`` returns. Every member of ``Chain`` is defined here (a test checks
    it): gaps, conductance and t_mix bounds (module docstring), and the solves of
    :mod:`mlmix.theory.chain.matrixfree.solves` (hitting times, committors, the asymptotic variance, distances
    from a start law, Kemeny bounds). What needs the matrix itself (``save``, ``to_scipy``,
    ``to_dense``, the derived chains of a non-reversible kernel, the worst-start d(t) curve) builds
    it from the source when it fits the memory limit and otherwise raises the one-line
    MemoryLimitError of the builder when called. ``op`` may be sharded
    (:mod:`mlmix.theory.linalg.sharding`): vectors are then this process's slice."""

    representation = "operator"

    def __init__(self, op: KernelOperator, *, name: str | None = None, gap_rtol: float = GAP_RTOL,
                 basis_size: int = 16, bins: int = SWEEP_BINS, progress: bool = False) -> None:
        self.op = op
        self.n_states = op.n_states
        self.name = name or f"{op.description} on {op.n_states} states"
        self.source: Any = None
        self.kernel: str | None = None
        self._k: int | None = None
        self.representation_reason = "a given operator"
        self.dense_limit = 0
        self._dense_limit_given = None
        self._given = None
        self._gap_rtol, self._basis, self._bins, self._progress = gap_rtol, basis_size, bins, progress
        self.timings: dict[str, float] = {}

    @classmethod
    def from_source(cls, source: Any, kernel: str = "glauber", *, k: int | None = None, name: str | None = None,
                    **options: Any) -> "OperatorChain":
        """The matrix-free chain of a sampler on ``source`` (``options`` go to
        :func:`mlmix.theory.kernels.operators.kernel_operator`: device, dtype, comm)."""

        chain = cls(kernel_operator(source, kernel, 2 if k is None else k, **options), name=name)
        chain.source, chain.kernel, chain._k = source, kernel, k
        return chain

    def __repr__(self) -> str:
        return f"<OperatorChain {self.name}>"

    def _timed(self, key: str, compute):
        t0 = time.perf_counter()
        out = compute()
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0
        return out

    # ---------------------------------------------------------------- the matrix, when it fits
    @cached_property
    def _matrix(self) -> Chain:
        """The same chain as a CSR matrix, built from the source (memory checked by the builder)."""
        if self.source is None or self.kernel not in ("glauber", "k-gibbs"):
            raise ValueError("this matrix-free chain was built from an operator alone: build it with "
                             "Chain.from_source(source, representation='sparse') to get its matrix")
        return Chain.from_source(self.source, self.kernel, k=self._k, representation="sparse", name=self.name)

    @property
    def P(self) -> Any:
        """The transition operator: a ``scipy.sparse.linalg.LinearOperator`` (``@`` applies P to a function,
        ``.T @`` to a measure) on one process; the :class:`KernelOperator` itself when sharded."""
        if self.op.comm.world_size > 1:
            return self.op

        N = self.n_states
        return LinearOperator((N, N), matvec=lambda f: self.op.matvec(np.ravel(f)),
                              rmatvec=lambda mu: self.op.rmatvec(np.ravel(mu)), dtype=np.float64)

    def to_scipy(self) -> Any:
        return self._matrix.to_scipy()

    def to_dense(self) -> np.ndarray:
        return self._matrix.to_dense()

    def save(self, path: str | Path) -> None:
        """Write the matrix (built from the source, memory permitting), as :meth:`Chain.save`."""
        self._matrix.save(path)

    def simulate(self, steps: int, start: int | np.ndarray | None = None, *, chains: int = 1,
                 seed: int | None = 0) -> np.ndarray:
        """Trajectories as :meth:`Chain.simulate`, on the matrix built from the source (memory permitting);
        a start drawn from the stationary law uses this chain's certified law."""
        if start is None:
            pi = np.asarray(self.stationary, dtype=np.float64)
            rng = np.random.default_rng(seed)
            start = np.minimum(np.searchsorted(np.cumsum(pi), rng.random(check_int(chains, "chains", minimum=1))
                                               * pi.sum(), side="right"), self.n_states - 1)
        return self._matrix.simulate(steps, start, chains=chains, seed=seed)

    @classmethod
    def load(cls, path: str | Path) -> Chain:
        """A saved matrix is read back as a :class:`Chain` (:meth:`Chain.load`)."""
        return Chain.load(path)

    # ---------------------------------------------------------------- structure
    @property
    def is_dense(self) -> bool:
        return False

    @cached_property
    def structure(self) -> Structure:
        """Positive conditionals: one aperiodic class, without a graph (:class:`_Positive`); otherwise that
        of the matrix (memory permitting)."""
        if self.op.conditionals_positive():
            return _Positive(np.zeros(self.op.local_size, dtype=np.int64), np.array([True]), None)
        return self._matrix.structure

    @property
    def is_irreducible(self) -> bool:
        """Every single-site (block) move has positive probability: V^n is one class."""
        return self.op.conditionals_positive()

    @property
    def period(self) -> int:
        return self.structure.period()

    @property
    def is_reversible(self) -> bool:
        return self.op.reversible

    # ---------------------------------------------------------------- stationary law
    @cached_property
    def _stationary(self) -> VectorResult:
        if not self.is_irreducible:
            raise ValueError("some conditionals underflow to 0: irreducibility is not established matrix-free "
                             "(raise the temperature, or analyse the matrix)")

        def compute() -> VectorResult:

            return certify_stationary(self.op, operator_stationary(self.op, progress=self._progress))

        return self._timed("stationary_s", compute)

    @cached_property
    def _logpi(self) -> np.ndarray:
        return self._stationary.log_value

    @cached_property
    def _pi_t(self) -> torch.Tensor:
        return _checked_pi(self.op, self.stationary)

    @cached_property
    def _gap(self) -> GapResult:
        return self._timed("gap_s", lambda: operator_gap(self.op, self._stationary, rtol=self._gap_rtol,
                                                          basis_size=self._basis, progress=self._progress))

    @cached_property
    def stationary(self) -> VectorResult:
        """pi, with its accuracy: exact-in-log-space for a reversible chain, the entrywise certificate
        (:func:`mlmix.theory.chain.matrixfree.solves.certify_stationary`) for another; where that fails, the
        first-order bound, which needs the gap."""
        pi = self._stationary
        if pi.rel_error is not None:
            return pi
        gap = self._gap.gap
        return pi if gap.lower is None else stationary_error_bound(self.op, pi, gap.lower)

    @property
    def _pi_rel_error(self) -> float | None:
        rel = self.stationary.rel_error
        return rel if rel is not None and rel < 1 else None

    # ---------------------------------------------------------------- gaps and conductance
    @property
    def additive_gap(self) -> Result:
        return self._gap.gap

    @property
    def spectral_gap(self) -> Result:
        if not self.is_reversible:
            return Result.missing(NAMES["spectral_gap"], "matrix-free",
                                  "not reversible (complex spectrum): see additive_gap / poincare_constant")
        return _renamed(self._gap.gap, NAMES["spectral_gap"])

    @property
    def poincare_constant(self) -> Result:
        return self.additive_gap.reciprocal(NAMES["poincare_constant"])

    @cached_property
    def absolute_spectral_gap(self) -> Result:
        """Reversible: the spectral gap (a positive semi-definite kernel); otherwise
        :func:`~mlmix.theory.chain.nonreversible_gap.absolute_gap` on the operator."""
        if not self.is_reversible:
            return _renamed(absolute_gap(kernel_functions(self.op), self.n_states, lambda: self._pi_t,
                                         lambda: self.multiplicative_gap), NAMES["absolute_spectral_gap"])
        return _renamed(self._gap.gap, NAMES["absolute_spectral_gap"], "a reversible heat-bath kernel is positive "
                        "semi-definite, so this is the spectral gap; ")

    @property
    def relaxation_time(self) -> Result:
        return self.absolute_spectral_gap.reciprocal(NAMES["relaxation_time"])

    @cached_property
    def conductance(self) -> Result:
        return self._timed("conductance_s", lambda: operator_conductance(self.op, self.stationary, self._gap,
                                                                          bins=self._bins))

    def set_conductance(self, S: np.ndarray) -> Result:
        """Phi(S) = Q(S, S^c) / pi(S) of a set (this process's boolean mask), flows summed as non-negative
        terms."""
        op = self.op
        mask = torch.as_tensor(check_state_set(S, op.local_size, "S"), device=op.device)
        pi = torch.as_tensor(self.stationary.value, device=op.device).to(op.dtype)
        mass = global_total(op, torch.where(mask, pi, 0.0))
        if not 0 < mass < 1:
            raise ValueError("S must be a proper subset of the states")
        unit = float(torch.finfo(op.dtype).eps) / 2
        rel = 8 * unit * (op.space.length * op.space.vocab_size + math.log2(op.n_states)) + \
            2 * (self.stationary.rel_error or 0.0)
        return Result.approximate(NAMES["set_conductance"], op.escape_flow(mask, pi) / mass, rel,
                                  "flows summed as non-negative terms (matrix-free)", set_size=int(mask.sum()),
                                  set_mass=mass)

    @cached_property
    def multiplicative_gap(self) -> Result:
        """1 - sigma_2(P)^2 (Fill's bound): Lanczos on C^T C for a non-reversible chain; for a reversible
        one 1 - (1 - absolute gap)^2 from the absolute gap's enclosure."""
        if self.is_reversible:
            g = self.absolute_spectral_gap
            lo, hi = (None if g.lower is None else 1 - (1 - g.lower) ** 2), (None if g.upper is None else
                                                                              1 - (1 - g.upper) ** 2)
            return Result.interval(NAMES["multiplicative_gap"], lo, hi, "1 - (1 - absolute gap)^2 (reversible: "
                                   "sigma_2 = lambda_*)", "derived from the absolute gap's enclosure")
        return self._timed("multiplicative_gap_s", lambda: operator_multiplicative_gap(
            self.op, self._stationary, self.additive_gap, rtol=self._gap_rtol, basis_size=self._basis,
            progress=self._progress))

    # ---------------------------------------------------------------- mixing
    def _bounds(self) -> MixingBounds:
        op = self.op
        log_min = torch.tensor(float(np.min(self.stationary.log_value)), dtype=torch.float64, device=op.device)
        mult = None if self.is_reversible else self.multiplicative_gap
        cond = self.conductance
        return MixingBounds(float(op.comm.allreduce_(log_min, "min")), op.reversible,
                            abs_gap=self.additive_gap if op.reversible else None, mult_gap=mult,
                            set_mass=cond.details.get("set_mass"),
                            set_phi_upper=cond.details.get("set_conductance_upper"))

    def mixing_time(self, eps: float = 0.25, max_states: int | None = None) -> Result:
        """Certified bounds on the worst-start TV t_mix(eps) (module docstring; ``max_states`` is
        ignored: t_mix is bounded, not computed)."""
        mult = None if self.is_reversible else self.multiplicative_gap
        return operator_mixing_bounds(self.op, self.stationary, self.additive_gap, self.conductance, eps, mult)

    def tv_distance(self, t: int) -> Result:
        """d(t) = max_x TV(P^t(x, .), pi): the certified spectral upper bound (worst start over all
        states: not computable matrix-free)."""
        t = check_steps(t)
        log_up = self._bounds().log_distance_upper(t)
        hi = min(1.0, max(math.exp(log_up), 5e-324)) if log_up < 0 else 1.0
        return Result.interval(NAMES["tv_distance"], 0.0, hi, "certified spectral upper bound",
                               "the worst start over all states needs the powers of P: only the upper bound is "
                               "computed matrix-free (distance_curve gives TV(mu P^t, pi) from a start)",
                               log10_upper=log_up / math.log(10) if math.isfinite(log_up) else None)

    def distance_curve(self, t_max: int, start: int | np.ndarray | None = None, progress: bool = True) -> VectorResult:
        """TV(mu P^t, pi) for t = 0..t_max from a start state index or start law (t_max applications of
        P^T); the worst-start curve (``start=None``) needs the matrix (memory permitting). ``progress``:
        that curve's cost estimate and bar (:meth:`Chain.distance_curve`)."""
        if start is None:
            return self._matrix.distance_curve(t_max, progress=progress)
        t_max = check_steps(t_max, "t_max")
        if np.ndim(start) == 0:
            mu = np.zeros(self.n_states)
            mu[check_state_set(start, self.n_states, "start")] = 1.0
        else:
            mu = check_vector(start, self.n_states, "start", probability=True)
        return distance_from(self.op, mu, t_max, self._pi_t, self._pi_rel_error)

    # ---------------------------------------------------------------- solves
    def asymptotic_variance(self, f: np.ndarray) -> Result:
        """sigma^2(f) through the Poisson equation (:func:`mlmix.theory.chain.matrixfree.solves.asymptotic_variance`)."""

        f = check_vector(f, self.n_states, "f")
        return asymptotic_variance(self.op, f, self._pi_t, self.additive_gap, self._pi_rel_error)

    @cached_property
    def kemeny_constant(self) -> Result:
        """Bounds on K (:func:`mlmix.theory.chain.matrixfree.solves.kemeny_bounds`)."""

        return kemeny_bounds(self.op, self.additive_gap)

    def hitting_time(self, target: np.ndarray) -> VectorResult:
        """E_x tau_A for every start x, certified entrywise."""

        A = check_state_set(target, self.n_states, "target set A")
        return hitting_times(self.op, A, self._pi_t)

    def hitting_probabilities(self, target: np.ndarray, t: int) -> VectorResult:
        """P_x(tau_A <= t) for every start x."""

        return hitting_probabilities(self.op, check_state_set(target, self.n_states, "target set A"),
                                     check_steps(t))

    def committor(self, A: np.ndarray, B: np.ndarray) -> VectorResult:
        """q(x) = P_x(tau_B < tau_A), with an entrywise error bound."""

        Am = check_state_set(A, self.n_states, "A")
        Bm = check_state_set(B, self.n_states, "B")
        if (Am & Bm).any():
            raise ValueError("A and B must be disjoint")
        return committor(self.op, Am, Bm, self._pi_t)

    def mean_first_passage_times(self, target: np.ndarray | int | None = None) -> VectorResult:
        """E_x tau_target for a target state or set; with no target the matrix M[i, j] = E_i tau_j, one
        matrix-free hitting solve per column, up to :data:`MFPT_LIMIT` states (as :class:`Chain`)."""
        return Chain.mean_first_passage_times(self, target)

    def dirichlet_form(self, f: np.ndarray, g: np.ndarray | None = None) -> float:
        """E(f, g) = (1/2) sum pi(x) P(x, y) (f(x) - f(y)) (g(x) - g(y)): E(f, f) as non-negative terms,
        E(f, g) by polarization (E(f + g) - E(f - g)) / 4."""
        op, pi = self.op, self._pi_t
        f_t = op._tensor(check_vector(f, self.n_states, "f"), "f")
        if g is None:
            return op.dirichlet_form(f_t, pi)
        g_t = op._tensor(check_vector(g, self.n_states, "g"), "g")
        return (op.dirichlet_form(f_t + g_t, pi) - op.dirichlet_form(f_t - g_t, pi)) / 4

    # ---------------------------------------------------------------- derived chains
    def time_reversal(self) -> Chain:
        """P* (= P for a reversible kernel: this chain; otherwise from the matrix)."""
        return self if self.is_reversible else self._matrix.time_reversal()

    def additive_reversibilization(self) -> Chain:
        """(P + P*)/2 (= P for a reversible kernel: this chain; otherwise from the matrix)."""
        return self if self.is_reversible else self._matrix.additive_reversibilization()

    def multiplicative_reversibilization(self) -> Chain:
        """P* P, from the matrix (memory permitting)."""
        return self._matrix.multiplicative_reversibilization()

    # ---------------------------------------------------------------- spectrum, classes, absorption
    def eigenvalues(self, k: int | None = None) -> VectorResult:
        """[1, 1 - gap] of a reversible kernel for k <= 2 (the gap's enclosure as the error bound);
        otherwise from the matrix (memory permitting)."""
        if k is None or k > 2 or not self.is_reversible:
            return self._matrix.eigenvalues(k)
        gap = self.spectral_gap
        if k == 1:
            return VectorResult("eigenvalues", np.ones(1), "the eigenvalue 1 of a stochastic matrix", None, 0.0,
                                details={"error_bounds": np.zeros(1)})
        mid = gap.value if gap.resolved else (gap.lower + gap.upper) / 2
        err = max(mid - gap.lower, gap.upper - mid)
        return VectorResult("eigenvalues", np.array([1.0, 1.0 - mid]), f"1 and 1 - spectral gap ({gap.method})",
                            None, err, details={"error_bounds": np.array([0.0, err])})

    def implied_timescales(self, k: int | None = None) -> VectorResult:
        """t_j = -1 / log |lambda_j| from :meth:`eigenvalues`."""

        return implied_timescales(self.eigenvalues(k))

    def stationary_distributions(self) -> VectorResult:
        """One closed class (positive conditionals): the stationary law as one row."""
        if not isinstance(self.structure, _Positive):
            return self._matrix.stationary_distributions()
        pi = self.stationary
        return VectorResult("stationary laws of the closed classes", pi.value[None, :], pi.method, pi.rel_error,
                            details={"classes": self.structure.closed_classes})

    def cyclic_classes(self) -> list[np.ndarray]:
        """Period 1 (positive conditionals): one cyclic class, every state."""
        if not isinstance(self.structure, _Positive):
            return self._matrix.cyclic_classes()
        return [np.arange(self.op.local_size)]

    @cached_property
    def _absorption(self) -> Absorption:
        if not isinstance(self.structure, _Positive):
            return self._matrix._absorption
        return Absorption(np.zeros(0, dtype=np.int64), self.structure.closed_classes, None, 0.0)

    def fundamental_matrix(self) -> VectorResult:
        return fundamental_matrix(self._absorption)

    def absorption_probabilities(self) -> VectorResult:
        return absorption_probabilities(self._absorption)

    def expected_steps_to_absorption(self) -> VectorResult:
        return expected_steps(self._absorption)

    # ---------------------------------------------------------------- report
    @property
    def progress(self) -> bool:  # type: ignore[override]
        """Whether the Krylov solvers print their progress lines (the ``progress`` given at construction,
        or a ``summary(progress=True)``); assignable like :attr:`Chain.progress`."""
        return self._progress

    @progress.setter
    def progress(self, on: bool) -> None:
        self._progress = bool(on)

    def summary(self, eps: float = 0.25, include_stationary: bool = False, mixing_limit: int | None = None,
                progress: bool = True, as_frame: bool = False) -> Any:
        """The keys of :meth:`Chain.summary` (``mixing_limit`` is ignored: t_mix is bounded, not computed);
        the seconds spent are in :attr:`timings`. ``progress``: the Krylov solvers' progress lines, as
        for a chain built with ``progress=True`` (a line every few seconds of a long solve); ``as_frame``:
        a ``pandas.DataFrame`` (:func:`~mlmix.theory.results.results_frame`)."""
        eps = check_eps(eps)
        self._progress = self._progress or progress
        out: dict[str, Any] = {"n_states": self.n_states, "representation": f"matrix-free operator ({self.op})",
                               "irreducible": self.is_irreducible, "closed_classes": 1, "period": self.period,
                               "reversible": self.is_reversible,
                               "stationary": self.stationary.as_dict(values=include_stationary)}
        for key in ("spectral_gap", "absolute_spectral_gap", "relaxation_time", "additive_gap",
                    "poincare_constant", "conductance", "kemeny_constant"):
            out[key] = getattr(self, key)
        out["eps"] = eps
        out["t_mix"] = self.mixing_time(eps)
        return results_frame(out) if as_frame else out


def analyse_operator(op: KernelOperator, eps: float = 0.25, *, gap_rtol: float = GAP_RTOL, basis_size: int = 16,
                     bins: int = SWEEP_BINS, progress: bool = False) -> dict[str, Any]:
    """Every figure ``mlmix exact`` reports, matrix-free (:meth:`OperatorChain.summary` with the
    Results themselves and the stationary law as a :class:`VectorResult`)."""
    chain = OperatorChain(op, gap_rtol=gap_rtol, basis_size=basis_size, bins=bins, progress=progress)
    out = chain.summary(eps)
    out["stationary"] = chain.stationary
    out["timings"] = dict(chain.timings)
    return out


def summary_dict(analysis: dict[str, Any], include_stationary: bool = False) -> dict[str, Any]:
    """:func:`analyse_operator`'s result for :func:`mlmix.files.dumps_json`: the stationary law as its
    dict, with its values only when ``include_stationary``."""
    return {**analysis, "stationary": analysis["stationary"].as_dict(values=include_stationary)}
