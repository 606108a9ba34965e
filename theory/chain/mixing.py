"""Worst-start total-variation distance d(t) and mixing time t_mix(eps), exact where floating point
can resolve them and certified bounds where it cannot.

Definitions (THEOREMS.md 1.17; paper G Cor. 2 and Thm 5 are checked against them):

    d(t) = max_x TV(P^t(x, .), pi),   TV(p, q) = (1/2) sum_y |p(y) - q(y)|,
    t_mix(eps) = min{t >= 0 : d(t) <= eps}.

This is the worst-start TV distance (the maximum over every deterministic start, equivalently
over every start law); not the L1 distance, not one chosen start, not capped at an iteration
budget. d is non-increasing, which the bisection relies on.

**Exact path** (dense, up to :data:`MIXING_LIMIT` states): powers P^(2^k) by repeated squaring,
each product's rows renormalised to sum 1 (so a computed TV distance always lies in [0, 1]), then
bisection. Rounding is tracked: if fl(P) differs from P by e_0 in the row-sum norm and each
product adds at most 2 N u, the computed P^t is within t (e_0 + 2 N u) of the true one
(||A^2 - B^2|| <= 2 ||A - B|| for stochastic matrices), so the computed d(t) is within
err(t) = t (e_0 + 2 N u) / 2 + ||pi error||_1 / 2. t_mix is reported exactly only when
d(t_mix) + err <= eps < d(t_mix - 1) - err; otherwise (metastable chains, t ~ 1e15 and beyond)
the result is an interval.

**Certified bounds** (any size; THEOREMS.md 1.15-1.16):

* reversible: (t_rel - 1) log(1/(2 eps)) <= t_mix(eps) <= ceil(t_rel log(1/(eps pi_min)));
* any chain: t_mix(eps) >= log(1/(2 eps)) / log(1/|lambda|) for each eigenvalue lambda != 1;
  Fill: d(t) <= (1/2) sigma_2^t sqrt((1 - pi_min)/pi_min), sigma_2^2 = 1 - gap(P* P);
  conductance: t_mix(eps) >= (pi(S^c) - eps) / Phi(S) for every set S.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp

from mlmix.errors import NumericalError
from mlmix.limits import MIXING_LIMIT
from mlmix.theory.results import DEFAULT_RTOL, EPS, Result, VectorResult
from mlmix.validation import Matrix, check_eps, check_memory, check_steps

#: Doubling stops at 2^MAX_DOUBLINGS steps.
MAX_DOUBLINGS = 62


@dataclass(frozen=True)
class MixingBounds:
    """Certified inputs for the mixing bounds (each optional): rates as Results (their enclosures are
    used), log pi_min (pi_min itself may underflow), and a set S given by its mass and conductance
    upper bound."""

    log_pi_min: float
    reversible: bool
    abs_gap: Result | None = None  # absolute spectral gap (reversible: 1/t_rel)
    modulus_gap: Result | None = None  # 1 - |lambda_2| (any chain)
    mult_gap: Result | None = None  # gap of P* P (Fill)
    set_mass: float | None = None
    set_phi_upper: float | None = None

    def t_mix_interval(self, eps: float) -> tuple[float, float, list[str]]:
        """(lower, upper, how) for t_mix(eps)."""
        lo, hi, how = 0.0, math.inf, []
        log2e = math.log(1 / (2 * eps))
        if self.reversible and self.abs_gap is not None and self.abs_gap.lower is not None:
            g_lo, g_hi = self.abs_gap.lower, self.abs_gap.upper
            if g_hi is not None and g_hi > 0:
                lo = max(lo, (1 / g_hi - 1) * log2e)
            if g_lo > 0:
                hi = min(hi, math.ceil((-math.log(eps) - self.log_pi_min) / g_lo))
            how.append("relaxation time (reversible)")
        if self.modulus_gap is not None and self.modulus_gap.upper is not None and 0 < self.modulus_gap.upper < 1:
            lo = max(lo, log2e / -math.log1p(-self.modulus_gap.upper))
            how.append("eigenvalue lower bound")
        if self.mult_gap is not None and self.mult_gap.lower is not None and self.mult_gap.lower > 0:
            rate = -0.5 * math.log1p(-min(self.mult_gap.lower, 1 - 1e-16))
            tail = 0.5 * self._log_odds() + log2e
            hi = min(hi, math.ceil(max(tail, 0.0) / rate))
            how.append("Fill's bound (multiplicative reversibilization)")
        if self.set_phi_upper is not None and self.set_mass is not None and self.set_phi_upper > 0:
            lo = max(lo, (1 - self.set_mass - eps) / self.set_phi_upper)
            how.append("conductance of the witness set")
        # lo and hi are computed from certified enclosures in a few floating-point operations
        return (math.ceil(lo * (1 - 16 * EPS)) if lo > 0 else 0.0), hi, how

    def log_distance_upper(self, t: int) -> float:
        """log of a certified upper bound on d(t) (inf when none)."""
        rates = []
        if self.reversible and self.abs_gap is not None and self.abs_gap.lower:
            rates.append(math.log1p(-min(self.abs_gap.lower, 1 - 1e-16)))
        if self.mult_gap is not None and self.mult_gap.lower:
            rates.append(0.5 * math.log1p(-min(self.mult_gap.lower, 1 - 1e-16)))
        if not rates:
            return math.inf
        return math.log(0.5) + 0.5 * self._log_odds() + t * min(rates)

    def _log_odds(self) -> float:
        """log((1 - pi_min) / pi_min), from log pi_min."""
        return math.log1p(-math.exp(self.log_pi_min)) - self.log_pi_min


def _pi_l1_error(pi_rel_error: float | None) -> float:
    """A bound on ||pi_hat - pi||_1 from the entrywise relative error (without one, only the
    trivial 2: then no distance to pi is resolved)."""
    return 2.0 if pi_rel_error is None else min(pi_rel_error, 2.0)


class _Powers:
    """Dense powers of P with row renormalisation and the rounding error bound of each."""

    def __init__(self, P: Matrix, pi: np.ndarray, pi_rel_error: float | None, dense: bool = True) -> None:
        """``dense=False`` keeps a sparse P sparse (for products of a dense power with P only)."""
        N = P.shape[0]
        copies = MAX_DOUBLINGS // 4 + 3 if dense else 3
        check_memory(8.0 * N * N * copies, f"exact TV mixing of {N} states (dense powers)")
        if dense or not sp.issparse(P):
            M = P.toarray() if sp.issparse(P) else np.array(P, dtype=np.float64, copy=True)
            sums = M.sum(axis=1)
            M /= sums[:, None]
        else:
            M = sp.csr_array(P, dtype=np.float64, copy=True)
            sums = np.asarray(M.sum(axis=1)).ravel()
            M.data /= np.repeat(sums, np.diff(M.indptr))
        e0 = float(np.abs(sums - 1).max()) + 2 * N * EPS
        self.P = M
        self.pi = pi
        self.step = e0 + 2 * N * EPS  # error added per step of the power
        self.pi_err = _pi_l1_error(pi_rel_error) + 2 * N * EPS

    def err(self, t: int) -> float:
        return 0.5 * (t * self.step + self.pi_err)

    def tv(self, M: np.ndarray) -> float:
        return float(0.5 * np.abs(M - self.pi[None, :]).sum(axis=1).max())

    @staticmethod
    def product(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        C = A @ B
        C /= C.sum(axis=1, keepdims=True)
        return C

    def power(self, t: int) -> np.ndarray:
        """P^t by binary powering."""
        R, S = np.eye(self.P.shape[0]), self.P
        while t:
            if t & 1:
                R = self.product(R, S)
            t >>= 1
            if t:
                S = self.product(S, S)
        return R


def certified_tv_distance(P: Matrix, t: int, pi: np.ndarray, bounds: MixingBounds, *,
                          pi_rel_error: float | None = None, rtol: float = DEFAULT_RTOL) -> Result:
    """d(t) for one t: the intersection of the computed value's rounding interval with the certified
    spectral upper bound (which takes over when t is too large for the powers to be trusted). A value
    is reported only when that interval is narrower than ``rtol`` relative to its lower end."""
    t = check_steps(t)
    N = P.shape[0]
    log_up = bounds.log_distance_upper(t)
    lo, hi = 0.0, (min(1.0, max(math.exp(log_up), 5e-324)) if log_up < 0 else 1.0)  # d(t) > 0 always
    details = {"log10_upper": log_up / math.log(10) if math.isfinite(log_up) else None}
    method = "certified spectral upper bound"
    if N <= MIXING_LIMIT:
        pw = _Powers(P, pi, pi_rel_error)
        err = pw.err(t)
        if err < 0.5:
            d = pw.tv(pw.power(t))
            lo, hi = max(lo, d - err), min(hi, d + err)
            method = ("dense P^t by repeated squaring with row renormalisation (rounding bound t (e0 + 2 N u)/2), "
                      "intersected with the certified spectral upper bound")
    if hi < lo:
        raise NumericalError(f"d({t}): the computed interval [{lo:.3g}, {hi:.3g}] is empty")
    if lo > 0 and hi - lo <= rtol * lo:
        return Result("d(t)", (lo + hi) / 2, method, (hi - lo) / (lo + hi), lo, hi, None, details)
    reason = (f"d({t}) is below the resolution of the computed powers: only the certified interval is known"
              if hi < 1e-3 else f"d({t}) is not resolved at the accuracy target")
    return Result.interval("d(t)", lo, hi, method, reason, **details)


def tv_curve(P: Matrix, t_max: int, pi: np.ndarray, start: np.ndarray | None = None,
             pi_rel_error: float | None = None, progress: bool = False) -> VectorResult:
    """d(t) for t = 0..t_max: worst start (the N x N powers P^t, t_max products), or TV(mu P^t, pi)
    from a start law ``mu`` (vector-matrix products, any size). ``abs_error`` bounds every entry's
    rounding. A sparse P multiplies the dense power by the sparse matrix (N nnz(P) operations per
    step instead of 2 N^3); ``progress``: cost estimate and bar (:mod:`mlmix.progress`)."""
    from mlmix.progress import seconds_for, steps

    t_max = check_steps(t_max, "t_max")
    N = P.shape[0]
    out = np.empty(t_max + 1)
    if start is None:
        pw = _Powers(P, pi, pi_rel_error, dense=not sp.issparse(P))
        M = np.eye(N)
        per_step = 2.0 * N * (pw.P.nnz if sp.issparse(pw.P) else N * N)
        how = "sparse" if sp.issparse(pw.P) else "dense"
        for t in steps(range(t_max + 1), "distance curve d(t)", total=t_max + 1, enabled=progress,
                       expected=seconds_for(t_max * per_step), cost=f"{N:,} states, {how} products"):
            out[t] = pw.tv(M)
            if t < t_max:
                M = pw.product(M, pw.P)
        return VectorResult("d(t), worst start", out, f"powers P^t (dense N x N, times the {how} P) with row "
                            "renormalisation", None, pw.err(t_max))
    mu = np.asarray(start, dtype=np.float64)
    PT = P.T
    step = 2 * N * EPS
    for t in range(t_max + 1):
        out[t] = 0.5 * float(np.abs(mu - pi).sum())
        if t < t_max:
            mu = PT @ mu
            mu /= mu.sum()
    err = 0.5 * (t_max * (step + 2 * N * EPS) + _pi_l1_error(pi_rel_error))
    return VectorResult("TV(mu P^t, pi)", out, "vector-matrix products from the start law", None, err)


def certified_mixing_time(P: Matrix, eps: float, pi: np.ndarray, bounds: MixingBounds, *,
                          pi_rel_error: float | None = None, max_states: int = MIXING_LIMIT) -> Result:
    """t_mix(eps): exact (dense squaring and bisection, with the rounding verified) when resolvable and
    the chain has at most ``max_states`` states, otherwise the certified interval of
    :class:`MixingBounds` (module docstring)."""
    eps = check_eps(eps)
    N = P.shape[0]
    b_lo, b_hi, how = bounds.t_mix_interval(eps)
    if 1 - math.exp(bounds.log_pi_min) <= eps:
        return Result.exact("t_mix", 0, "d(0) = 1 - pi_min <= eps")
    reason = None
    if N <= max_states:
        pw = _Powers(P, pi, pi_rel_error)
        exact, t_lo, t_hi = _squaring(pw, eps)
        if exact is not None:
            return Result.exact("t_mix", exact, "worst-start TV distance, exact: repeated squaring of dense P "
                                "(rows renormalised) and bisection, rounding verified at t_mix and t_mix - 1")
        b_lo, b_hi = max(b_lo, t_lo), min(b_hi, t_hi)
        if math.isfinite(t_hi):
            how.append("dense squaring with rounding bounds")
            reason = ("near t_mix the rounding of the dense powers exceeds the change of d(t) per step: "
                      "only the certified bracket is known")
        else:
            reason = ("the rounding of the dense powers exceeds the distance to eps before the chain mixes "
                      f"(certified d(t) > eps up to t = {t_lo - 1})")
    else:
        reason = f"{N} states exceed the exact dense limit of {max_states}"
    method = "certified bounds: " + (", ".join(how) if how else "none available")
    if math.isinf(b_hi):
        return Result.interval("t_mix", b_lo, None, method, reason + "; no upper bound available")
    return Result.interval("t_mix", b_lo, b_hi, method, reason)


def _squaring(pw: _Powers, eps: float) -> tuple[int | None, int, float]:
    """Certified bracket of t_mix by squaring: (exact t_mix or None, t_lo, t_hi) with t_lo <= t_mix <=
    t_hi (t_hi = inf when the powers could not certify mixing before their rounding grew too large).

    Every evaluated t is certified one way or the other: d(t) - err(t) > eps proves t_mix > t, and
    d(t) + err(t) <= eps proves t_mix <= t (d is non-increasing). Two binary descents over the stored
    powers P^(2^j) find the last certified-unmixed and the first certified-mixed t; they meet (an exact
    t_mix) unless the rounding is larger than the change of d per step near t_mix.
    """
    powers = [pw.P]  # powers[j] = P^(2^j)
    unmixed = 0  # d(t) > eps certified for t = unmixed (d(0) = 1 - pi_min > eps is checked by the caller)
    while True:
        t = 2 ** (len(powers) - 1)
        d, err = pw.tv(powers[-1]), pw.err(t)
        if d - err > eps:
            unmixed = t
        if d + err <= eps:
            break
        if err > eps / 4 or len(powers) > MAX_DOUBLINGS:
            return None, unmixed + 1, math.inf
        powers.append(pw.product(powers[-1], powers[-1]))
    top = len(powers) - 1

    def descend(keep: Callable[[float, float], bool]) -> int:
        t, A = 0, np.eye(pw.P.shape[0])
        for j in range(top - 1, -1, -1):
            cand = pw.product(A, powers[j])
            if keep(pw.tv(cand), pw.err(t + 2**j)):
                t, A = t + 2**j, cand
        return t

    t_lo = max(descend(lambda d, e: d - e > eps), unmixed) + 1  # last certified unmixed, plus one
    t_hi = descend(lambda d, e: d + e > eps) + 1  # first certified mixed (d + err <= eps)
    t_hi = max(t_hi, t_lo)
    return (t_lo if t_lo == t_hi else None), t_lo, t_hi
