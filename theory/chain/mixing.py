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

**Transient states** (one closed class C, transient set T, tau = the entrance time into C): the
bounds above are those of the closed class, d_C(t) = max_{x in C} TV(P^t(x, .), pi); they bound
d(t) from below only. With q(s) = max_x P_x(tau > s) (:class:`TransientDecay`):

    max(q(t), d_C(t), TV(P^t(x*, .), pi)) <= d(t) <= min_{0 <= s <= t} q(s) + d_C(t - s)

(pi(T) = 0 gives TV >= P^t(x, T) = P_x(tau > t); the strong Markov property at tau gives the
upper bound, d_C being non-increasing), and q is submultiplicative, q(a + b) <= q(a) q(b), with
q(s) <= m / (s + 1) for m = max_x E_x tau (Markov's inequality). In particular d(0) = 1. With
h = max_x (graph distance from x to C), q(s) = 1 for s < h; when the transient states hold no
cycle (each its own class, no holding), tau <= L surely for L the longest path out of them, so
q(s) = 0 for s >= L.

On a matrix-free kernel (:func:`operator_mixing_bounds`): reversible heat-bath kernels are
positive semi-definite (an average of conditional expectations), so the absolute gap is gamma and
t_rel = 1 / gamma; with the conductance's named set and, for any chain, Fill's bound from the
multiplicative gap, the bounds above through :class:`MixingBounds`. TV(mu P^t, pi) from a start law
(:func:`distance_from`) by t applications of P^T, rounding t gamma per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components

from mlmix.errors import MemoryLimitError, NumericalError
from mlmix.limits import DENSE_SPECTRAL_LIMIT, MEAN_EXIT_LIMIT, MIXING_LIMIT
from mlmix.progress import seconds_for, steps
from mlmix.theory.chain.hitting import expected_hitting_times
from mlmix.theory.chain.spectral import operator_absolute_gap
from mlmix.theory.chain.structure import tree_depths
from mlmix.theory.results import DEFAULT_RTOL, EPS, NAMES, Result, VectorResult
from mlmix.validation import Matrix, check_eps, check_memory, check_state_set, check_steps, check_vector

if TYPE_CHECKING:
    import torch

    from mlmix.theory.chain.markov_chain import Chain
    from mlmix.theory.linalg.operator import TransitionOperator

#: Doubling stops at 2^MAX_DOUBLINGS steps.
MAX_DOUBLINGS = 62

#: Work budget (stored entries times steps) of the transient-decay profile, and its step cap.
TRANSIENT_WORK = 10**8
TRANSIENT_STEPS = 2**16



@dataclass(frozen=True, eq=False)
class TransientDecay:
    """Certified enclosures of q(s) = max_x P_x(tau_C > s), the probability of not having entered the
    closed class C by step s from the slowest start (module docstring).

    ``q_lower``/``q_upper``: enclosures for s = 0..steps (from v_{s+1} = P_TT v_s, v_0 = 1, non-negative
    sums: relative error <= (1 + 2 k u)^s - 1 for rows of at most k entries, plus s e_0 for the rows'
    deviation e_0 from sum 1); ``curve_lower``: lower bounds on TV(P^s(x*, .), pi) from the slowest start
    x* (or None); ``mean_exit``: an upper bound on max_x E_x tau (or None). Beyond ``steps``, q is bounded
    by submultiplicativity."""

    q_lower: np.ndarray
    q_upper: np.ndarray
    curve_lower: np.ndarray | None = None
    mean_exit: float | None = None
    depth: int = 0  # the largest graph distance from a state to C: q(s) = 1 exactly for s < depth
    longest: int | None = None  # no cycle (nor holding) among the transient states: tau <= longest surely
    row_error: float = 0.0  # e_0: a holding probability of at most e_0 may hide in the rows' rounding

    @property
    def steps(self) -> int:
        return int(self.q_upper.size - 1)

    def upper(self, s: int) -> float:
        """A certified upper bound on q(s)."""
        if self.longest is not None and s >= self.longest:
            return min(1.0, s * self.row_error)  # tau > s needs a holding step among the first s
        if s <= self.steps:
            return float(self.q_upper[s])
        best = 1.0
        S, qS = self.steps, float(self.q_upper[-1])
        if S > 0 and qS < 1:
            best = min(best, math.exp((s // S) * math.log(qS)) if qS > 0 else 0.0)
        if self.mean_exit is not None:
            m = math.ceil(2 * self.mean_exit)  # q(m) <= mean_exit / (m + 1) < 1/2
            rate = self.mean_exit / (m + 1)
            best = min(best, math.exp((s // m) * math.log(rate)) if rate > 0 else 0.0)
        return best

    def lower(self, s: int) -> float:
        """A certified lower bound on d(s) from the transient part: max(q(s), TV from x*)."""
        if s < self.depth:
            return 1.0
        if s > self.steps:
            return 0.0
        lo = float(self.q_lower[s])
        if self.curve_lower is not None:
            lo = max(lo, float(self.curve_lower[s]))
        return lo

    def first_below(self, level: float) -> int | None:
        """The smallest s with upper(s) <= level (None when no bound reaches it)."""
        if self.longest is not None and self.upper(self.longest) <= level and not (self.q_upper <= level).any():
            return self.longest
        if level <= 0:
            return None
        hit = np.flatnonzero(self.q_upper <= level)
        if hit.size:
            return int(hit[0])
        cands = []
        S, qS = self.steps, float(self.q_upper[-1])
        if S > 0 and 0 < qS < 1:
            cands.append(S * math.ceil(math.log(level) / math.log(qS)))
        elif S > 0 and qS == 0:
            cands.append(S)
        if self.mean_exit is not None:
            m = math.ceil(2 * self.mean_exit)
            rate = self.mean_exit / (m + 1)
            cands.append(m * math.ceil(math.log(level) / math.log(rate)) if rate > 0 else m)
        return min(cands) if cands else None


def transient_decay(P: Matrix, transient: np.ndarray, pi: np.ndarray, *, pi_rel_error: float | None = None,
                    mean_exit: float | None = None, work: int = TRANSIENT_WORK,
                    max_steps: int = TRANSIENT_STEPS) -> TransientDecay:
    """The :class:`TransientDecay` of a chain whose transient states are the mask ``transient``: q(s)
    for s up to min(``max_steps``, ``work`` / nnz(P)) by sparse products, and the TV curve from the
    start slowest to leave T (the argmax of P_x(tau > s) at the last step) over the same steps."""
    Ps = sp.csr_array(P)
    T = np.flatnonzero(transient)
    Q = Ps[T][:, T]
    k = max(int(np.diff(Q.indptr).max()) if Q.nnz else 1, 1)
    e0 = float(np.abs(np.asarray(Ps[T].sum(axis=1)).ravel() - 1.0).max())
    steps = int(max(1, min(max_steps, work // max(Ps.nnz, 1))))
    check_memory(8.0 * (3 * (steps + 1) + 4 * T.size), f"the transient-decay profile of {T.size} states")
    grow = math.log1p(2 * (k + 1) * EPS)
    q = np.empty(steps + 1)
    v = np.ones(T.size)
    q[0] = 1.0
    last = steps
    for s in range(1, steps + 1):
        w = Q @ v
        q[s] = float(w.max())
        if q[s] == 0.0:
            last = s
            break
        v = w  # the last non-zero profile: its argmax is the slowest start
    q = q[: last + 1]
    s_arr = np.arange(q.size)
    rel = np.expm1(s_arr * grow)
    absolute = s_arr * (e0 + 1e-300)  # the rows' deviation from stochastic, and underflow
    q_up = np.minimum(np.minimum.accumulate(q * (1 + rel) + absolute), 1.0)
    q_lo = np.maximum(q / (1 + rel) - absolute, 0.0)
    q_lo[0] = 1.0
    curve = None
    if pi_rel_error is not None and last > 0:
        x = int(T[np.argmax(v)])
        mu = np.zeros(Ps.shape[0])
        mu[x] = 1.0
        c = tv_curve(Ps, last, pi, mu, pi_rel_error)
        curve = np.maximum(np.asarray(c.value) - c.abs_error, 0.0)
    if mean_exit is None and q_up[-1] > 1e-3 and T.size <= MEAN_EXIT_LIMIT:

        m = expected_hitting_times(Ps, ~np.asarray(transient, dtype=bool))
        if m.rel_error is not None and m.rel_error < 1 and np.isfinite(m.value).all():
            mean_exit = float(np.max(m.value)) * (1 + m.rel_error) / (1 - 4 * EPS)

    sccs = connected_components(Q, directed=True, connection="strong")[0] if T.size else 0
    acyclic = sccs == T.size and not (Q.diagonal() > 0).any() and Q.nnz <= TRANSIENT_WORK // 25
    longest = _longest_path(Q) if acyclic else None  # a Python loop over the edges: capped
    return TransientDecay(q_lo, q_up, curve, mean_exit, _depth(Ps, transient), longest, e0)


def _longest_path(Q: sp.csr_array) -> int:
    """The most steps a chain can spend in an acyclic transient set with sub-stochastic block Q before
    leaving it: L(x) = 1 + max(0, L(y) for y with Q(x, y) > 0), by Kahn's topological order (O(nnz))."""
    m = Q.shape[0]
    G = sp.csr_array(Q)
    G.eliminate_zeros()
    indptr, indices = G.indptr.tolist(), G.indices.tolist()
    pending = np.diff(G.indptr).tolist()  # successors inside T not yet finished
    R = sp.csr_array(G.T)
    rptr, rind = R.indptr.tolist(), R.indices.tolist()
    L = [0] * m
    ready = [x for x in range(m) if pending[x] == 0]
    while ready:
        y = ready.pop()
        L[y] = 1 + max((L[z] for z in indices[indptr[y]:indptr[y + 1]]), default=0)
        for x in rind[rptr[y]:rptr[y + 1]]:
            pending[x] -= 1
            if pending[x] == 0:
                ready.append(x)
    return max(L, default=0)


def _depth(P: sp.csr_array, transient: np.ndarray) -> int:
    """max_x (graph distance from x to the non-transient states), by one breadth-first search of the
    reversed graph from a super-source joined to every closed state; O(nnz)."""


    N = P.shape[0]
    coo = P.tocoo()
    keep = coo.data > 0
    closed = np.flatnonzero(~np.asarray(transient, dtype=bool))
    rows = np.concatenate([coo.col[keep], np.full(closed.size, N)])
    cols = np.concatenate([coo.row[keep], closed])
    G = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(N + 1, N + 1))
    _, pred = breadth_first_order(G, N, directed=True, return_predecessors=True)
    return int(tree_depths(pred, N).max()) - 1


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
    transient: TransientDecay | None = None  # the entrance into the closed class (transient states)

    def t_mix_interval(self, eps: float) -> tuple[float, float, list[str]]:
        """(lower, upper, how) for t_mix(eps)."""
        lo, hi, how = 0.0, math.inf, []
        log2e = math.log(1 / (2 * eps))
        if self.reversible and self.abs_gap is not None and self.abs_gap.lower is not None:
            g_hi = self.abs_gap.upper
            if g_hi is not None and g_hi > 0:
                lo = max(lo, (1 / g_hi - 1) * log2e)
            how.append("relaxation time (reversible)")
        if self.modulus_gap is not None and self.modulus_gap.upper is not None and 0 < self.modulus_gap.upper < 1:
            lo = max(lo, log2e / -math.log1p(-self.modulus_gap.upper))
            how.append("eigenvalue lower bound")
        if self.mult_gap is not None and self.mult_gap.lower is not None and self.mult_gap.lower > 0:
            how.append("Fill's bound (multiplicative reversibilization)")
        if self.set_phi_upper is not None and self.set_mass is not None and self.set_phi_upper > 0:
            lo = max(lo, (1 - self.set_mass - eps) / self.set_phi_upper)
            how.append("conductance of the witness set")
        # lo and hi are computed from certified enclosures in a few floating-point operations
        lo = math.ceil(lo * (1 - 16 * EPS)) if lo > 0 else 0.0
        tr = self.transient
        if tr is None:
            return lo, self._closed_time_upper(eps), how
        unmixed = np.flatnonzero([tr.lower(s) > eps for s in range(tr.steps + 1)])
        lo = max(lo, int(unmixed[-1]) + 1 if unmixed.size else 0, tr.depth)
        for frac in (0.5, 0.1, 0.9, 0.01, 0.99):
            s = tr.first_below(frac * eps)
            if s is not None:
                hi = min(hi, s + self._closed_time_upper(eps - tr.upper(s)))
        how.append("entrance into the closed class (transient states)")
        return lo, hi, how

    def _closed_time_upper(self, eps: float) -> float:
        """A t with d_C(t) <= eps certified (inf when none): relaxation time (reversible) or Fill."""
        hi = math.inf
        if eps <= 0:
            return hi
        if self.log_pi_min == 0:  # a single state: d_C(t) = 0
            return 0
        if self.reversible and self.abs_gap is not None and self.abs_gap.lower is not None and self.abs_gap.lower > 0:
            hi = min(hi, math.ceil((-math.log(eps) - self.log_pi_min) / self.abs_gap.lower))
        if self.mult_gap is not None and self.mult_gap.lower is not None and self.mult_gap.lower > 0:
            rate = -0.5 * math.log1p(-min(self.mult_gap.lower, 1 - 1e-16))
            tail = 0.5 * self._log_odds() + math.log(1 / (2 * eps))
            hi = min(hi, math.ceil(max(tail, 0.0) / rate))
        return max(hi, 0)

    def log_distance_upper(self, t: int) -> float:
        """log of a certified upper bound on d(t) (inf when none): the closed class's spectral bound,
        and with transient states min_s q(s) + d_C(t - s) over a grid of s."""
        closed = self._closed_log_upper(t)
        tr = self.transient
        if tr is None:
            return closed
        grid = {0, t} | {t >> j for j in range(1, 64)} | {t - (t >> j) for j in range(1, 64)}
        grid |= {s for s in (tr.first_below(10.0**-k) for k in range(0, 320, 4)) if s is not None and s <= t}
        best = 1.0
        for s in grid:
            best = min(best, tr.upper(s) + math.exp(min(self._closed_log_upper(t - s), 0.0)))
        return math.log(max(best, 5e-324))  # an underflow is no proof that d(t) = 0

    def _closed_log_upper(self, t: int) -> float:
        """log of the spectral upper bound on d_C(t) (the closed class; inf when none)."""
        if self.log_pi_min == 0:  # a single state: d_C(t) = 0
            return -math.inf
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
    hi = min(1.0, max(math.exp(log_up), 5e-324)) if log_up < 0 else 1.0  # exp(log_up) may underflow
    if log_up == -math.inf:  # a proof that d(t) = 0 (e.g. a one-state closed class, all entered by t)
        hi = 0.0
    lo = 0.0
    details = {"log10_upper": log_up / math.log(10) if math.isfinite(log_up) else None}
    method = "certified spectral upper bound"
    if bounds.transient is not None:
        lo = bounds.transient.lower(t)
        method += (" of the closed class plus the entrance time from the transient states; lower bound "
                   "max_x P_x(tau_C > t) and the TV distance from the slowest start")
    if N <= MIXING_LIMIT:
        pw = _Powers(P, pi, pi_rel_error)
        err = pw.err(t)
        if err < 0.5:
            d = pw.tv(pw.power(t))
            lo, hi = max(lo, d - err), min(hi, d + err)
            method = ("dense P^t by repeated squaring with row renormalisation (rounding bound t (e0 + 2 N u)/2), "
                      "intersected with the certified spectral upper bound")
    if lo == hi:
        return Result.exact("d(t)", lo, method, **details)
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

    t_max = check_steps(t_max, "t_max")
    N = P.shape[0]
    check_memory(8.0 * (t_max + 1), f"a distance curve of {t_max + 1} points")
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
    if bounds.transient is None and 1 - math.exp(bounds.log_pi_min) <= eps:
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
    if b_lo == b_hi:  # the certified bounds meet
        return Result.exact("t_mix", int(b_lo), method)
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


# ------------------------------------------------------------ matrix-free (a TransitionOperator)

def _psd(op: TransitionOperator) -> bool:
    """P reversible with every eigenvalue >= 0 (its absolute gap is its gap)."""
    return op.reversible and op.lambda_min >= 0


def operator_bounds(op: TransitionOperator, pi: VectorResult, gap: Result, conductance: Result,
                    multiplicative_gap: Result | None = None) -> MixingBounds:
    """The :class:`MixingBounds` of a matrix-free kernel from the gap (reversible: the absolute gap
    min(gap, 1 + lambda_min) of :func:`~mlmix.theory.chain.spectral.operator_absolute_gap`, the gap itself
    when positive semi-definite, ``op.lambda_min >= 0``), the conductance's named set and, for any chain,
    Fill's bound from the multiplicative gap when given."""
    import torch  # deferred: only the matrix-free route loads torch

    log_min = torch.tensor(float(np.min(pi.log_value)), dtype=torch.float64, device=op.device)
    return MixingBounds(float(op.comm.allreduce_(log_min, "min")), op.reversible,
                        abs_gap=(gap if _psd(op) else operator_absolute_gap(op, gap)) if op.reversible else None,
                        mult_gap=multiplicative_gap,
                        set_mass=conductance.details.get("set_mass"),
                        set_phi_upper=conductance.details.get("set_conductance_upper"))


def operator_mixing_bounds(op: TransitionOperator, pi: VectorResult, gap: Result, conductance: Result,
                           eps: float = 0.25, multiplicative_gap: Result | None = None) -> Result:
    """Certified bounds on the worst-start TV t_mix(eps) (module docstring) from
    :func:`operator_bounds`."""
    eps = check_eps(eps)
    lower, upper, how = operator_bounds(op, pi, gap, conductance, multiplicative_gap).t_mix_interval(eps)
    if _psd(op):
        how.append("P is positive semi-definite (an average of conditional expectations, or lambda_min >= 0 by "
                   "Gershgorin), so t_rel = 1/gap")
    return Result.interval(NAMES["t_mix"], lower, upper if math.isfinite(upper) else None,
                           "worst-start TV mixing time, certified bounds: " + "; ".join(how),
                           "the exact worst-start t_mix needs dense powers of P; bounds only at this size", eps=eps)


def operator_tv_distance(bounds: MixingBounds, t: int) -> Result:
    """d(t) = max_x TV(P^t(x, .), pi) on a matrix-free kernel: the certified spectral upper bound of
    ``bounds`` (:func:`operator_bounds`; the worst start over all states is not computable matrix-free)."""
    t = check_steps(t)
    log_up = bounds.log_distance_upper(t)
    hi = min(1.0, max(math.exp(log_up), 5e-324)) if log_up < 0 else 1.0
    return Result.interval(NAMES["tv_distance"], 0.0, hi, "certified spectral upper bound",
                           "the worst start over all states needs the powers of P: only the upper bound is "
                           "computed matrix-free (distance_curve gives TV(mu P^t, pi) from a start)",
                           log10_upper=log_up / math.log(10) if math.isfinite(log_up) else None)


def distance_from(op: TransitionOperator, mu: np.ndarray, t_max: int, pi: torch.Tensor,
                  pi_rel_error: float | None) -> VectorResult:
    """TV(mu P^t, pi) for t = 0..t_max by t_max applications of P^T (``mu`` over all states, ``pi`` this
    process's part); ``abs_error`` bounds every entry (t gamma of rounding per step plus pi's L1 error)."""
    from mlmix.theory.linalg.operator_vectors import global_total, local_part, rounding  # deferred: torch

    m = local_part(op, mu).to(op.dtype)
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


# ------------------------------------------------------------ the questions of a Chain

def chain_mixing_bounds(chain: Chain) -> MixingBounds:
    """The body of :meth:`ChainFacts.mixing_bounds`."""
    if chain.facts.representation == "operator":
        return operator_bounds(chain.op, chain.stationary, chain.additive_gap, chain.conductance,
                               None if chain.is_reversible else chain.multiplicative_gap)
    core = chain.facts.core
    log_pi_min = float(core.facts.logpi.min())
    witness = chain.conductance.details if core.n_states > 1 else {}
    rev = core.is_reversible
    mult = None
    if not rev:
        try:
            mult = chain.multiplicative_gap
        except MemoryLimitError:
            mult = None
    # the modulus gap where it is computed (up to DENSE_SPECTRAL_LIMIT states); beyond, its lower end is
    # 1 - sqrt(1 - g_mult), the multiplicative gap's, which mult already carries: no Krylov-Schur run here
    mod = None if rev or core.n_states > DENSE_SPECTRAL_LIMIT else chain.absolute_spectral_gap
    return MixingBounds(log_pi_min, rev, chain.absolute_spectral_gap if rev else None, mod, mult,
                        witness.get("set_mass"), chain.conductance.upper, chain.facts.transient_decay)


def chain_transient_decay(chain: Chain) -> TransientDecay | None:
    """The body of :meth:`ChainFacts.transient_decay`."""
    if chain.facts.core is chain:
        return None
    return transient_decay(chain.P, chain.structure.transient, np.exp(chain.facts.logpi),
                                  pi_rel_error=chain.facts.pi_rel_error)


def chain_mixing_time(chain: Chain, eps: float = 0.25, max_states: int = MIXING_LIMIT) -> Result:
    """The body of :meth:`Chain.mixing_time`."""
    eps = check_eps(eps)
    d = chain.period
    if d > 1 and eps < 1 - 1 / d:
        return Result.interval("t_mix", math.inf, None, f"period {d} from a breadth-first search",
                               f"the chain is periodic (period {d}): d(t) >= 1 - 1/{d} > eps for every t, so "
                               "t_mix is infinite")
    if chain.facts.representation == "operator":  # bounded, not computed (``max_states`` does not apply)
        return operator_mixing_bounds(chain.op, chain.stationary, chain.additive_gap, chain.conductance, eps,
                                             None if chain.is_reversible else chain.multiplicative_gap)
    try:
        return certified_mixing_time(chain.P, eps, np.exp(chain.facts.logpi), chain.facts.mixing_bounds(),
                                            pi_rel_error=chain.facts.pi_rel_error, max_states=max_states)
    except MemoryLimitError as err:
        lo, hi, how = chain.facts.mixing_bounds().t_mix_interval(eps)
        return Result.interval("t_mix", lo, hi if math.isfinite(hi) else None,
                               "certified bounds: " + ", ".join(how), str(err))


def chain_tv_distance(chain: Chain, t: int) -> Result:
    """The body of :meth:`Chain.tv_distance`."""
    if chain.facts.representation == "operator":
        return operator_tv_distance(chain.facts.mixing_bounds(), t)
    return certified_tv_distance(chain.P, t, np.exp(chain.facts.logpi), chain.facts.mixing_bounds(),
                              pi_rel_error=chain.facts.pi_rel_error)


def chain_distance_curve(chain: Chain, t_max: int, start: int | np.ndarray | None = None, progress: bool = True) -> VectorResult:
    """The body of :meth:`Chain.distance_curve`."""
    if chain.facts.representation == "operator" and start is None:
        return chain.facts.matrix.distance_curve(t_max, progress=progress)
    if start is not None and np.ndim(start) == 0:
        mu = np.zeros(chain.n_states)
        mu[check_state_set(start, chain.n_states, "start")] = 1.0
        start = mu
    elif start is not None:
        start = check_vector(start, chain.n_states, "start", probability=True)
    if chain.facts.representation == "operator":
        return distance_from(chain.op, start, check_steps(t_max, "t_max"), chain.facts.pi_t, chain.facts.pi_rel_error)
    return tv_curve(chain.P, t_max, np.exp(chain.facts.logpi), start, chain.facts.pi_rel_error, progress=progress)
