"""Transition path theory between two disjoint sets of states A and B of an irreducible chain.

With tau the first hitting times (0 on the set itself) and P~(i, j) = pi(j) P(j, i) / pi(i) the time
reversal (Metzner, Schuette and Vanden-Eijnden, Multiscale Model. Simul. 7 (2009), discrete time):

    forward committor   q+(i) = P_i(tau_B < tau_A)       (1 on B, 0 on A),
    backward committor  q-(i) = P~_i(tau_A < tau_B)      (1 on A, 0 on B; 1 - q+ when P is reversible),
    reactive flux       f(i, j) = pi(i) q-(i) P(i, j) q+(j)    (i != j),
    net flux            f+(i, j) = max(f(i, j) - f(j, i), 0),
    total flux          F = sum_(i in A, j) f(i, j)  (= sum_(i in B, j) of the B -> A flux: as many
                        reactive trajectories go one way as the other),
    rate                k_AB = F / sum_i pi(i) q-(i),   mean first passage time  t_AB = 1 / k_AB.

t_AB is the mean time from entering A (coming from B) to the next entrance into B (each reactive
trajectory closes one A -> B -> A cycle, and sum pi q- is the fraction of time last spent in A), deeptime's
and msmtools' ``mfpt`` of a reactive flux. The pathway decomposition removes, repeatedly, the A -> B path of
largest bottleneck (widest path) from the net flux; the bottlenecks, divided by F, are the channels' shares,
which sum to 1 when the decomposition runs to the end (the net flux out of A is F, a path removal keeps
conservation inside C = (A u B)^c, and what is left once A has no outflow is circulation).

Accuracy: every flux is a product of non-negative factors, formed in log space (masses down to
1e-300 and below keep their relative accuracy): each factor carries an enclosure (pi from its stated
entrywise error, each committor from its entrywise relative error or, matrix-free, its entrywise
absolute bound), products and sums of enclosures are enclosures, every log and exp charged with its rounding.
A backward committor of a non-reversible chain comes from the reversal built with the computed pi: its
entries move relatively by at most e = 2 delta / (1 - delta) (delta pi's error) plus rounding, and a committor
is a ratio of forest sums of m-fold products of off-diagonal entries (the Markov chain tree theorem, m the
unknowns), so it moves relatively by at most ((1 + e) / (1 - e))^m - 1, which is charged. The net flux
subtracts: its entries carry an absolute bound. A committor with no bound (a Krylov solve on a large CSR chain)
gives intervals, never a number it cannot certify.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from mlmix.errors import InputValueError
from mlmix.theory.results import DEFAULT_RTOL, EPS, Result, VectorResult
from mlmix.validation import Matrix, check_basins, check_int

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain

#: The most channels :meth:`TransitionPaths.pathways` extracts unless asked for more.
MAX_PATHWAYS = 1000

#: The decomposition stops when the flux still leaving A is at most this fraction of F (float rounding
#: of the subtractions leaves crumbs of that order).
PATHWAY_RTOL = 1e-12


@dataclass(frozen=True)
class Enclosure:
    """A non-negative vector by its logs: value, lower and upper ends (-inf for 0)."""

    log: np.ndarray
    log_lower: np.ndarray
    log_upper: np.ndarray


def committor_enclosure(q: VectorResult, fixed: np.ndarray) -> Enclosure:
    """The enclosure of a committor from its entrywise relative error, else its entrywise absolute bound
    (``details['max_abs_error']``), else [0, 1]; exact on ``fixed`` (the mask of A u B, where it is 0 or 1)."""
    v = np.asarray(q.value, dtype=np.float64)
    if q.rel_error is not None:
        lo, hi = v * (1 - min(q.rel_error, 1.0)), v * (1 + q.rel_error)
    elif q.details.get("max_abs_error") is not None:
        e = float(q.details["max_abs_error"])
        lo, hi = v - e, v + e
    else:
        lo, hi = np.zeros_like(v), np.ones_like(v)
    lo = np.where(fixed, v, np.clip(lo, 0.0, 1.0))
    hi = np.where(fixed, v, np.clip(hi, 0.0, 1.0))
    with np.errstate(divide="ignore"):
        return Enclosure(np.log(v), np.log(lo), np.log(hi))


def law_enclosure(log_pi: np.ndarray, rel_error: float | None) -> Enclosure:
    """pi from log pi and a bound on max |pi_hat / pi - 1| (None: not bounded, pi in (0, 1])."""
    lp = np.asarray(log_pi, dtype=np.float64)
    if rel_error is None or not rel_error < 1:
        return Enclosure(lp, np.full_like(lp, -np.inf), np.zeros_like(lp))
    return Enclosure(lp, lp + math.log1p(-rel_error), lp + math.log1p(rel_error))


def reversal_charge(q: VectorResult, m: int, pi_rel: float | None, log_pi: np.ndarray) -> VectorResult:
    """A committor of the time reversal built with pi_hat, its relative error widened by
    ((1 + e) / (1 - e))^m - 1 (module doc), e = 2 delta / (1 - delta) + the rounding of the reversal's entries
    (exp of a sum of three logs); unbounded when delta is."""
    if q.rel_error is None or pi_rel is None or not pi_rel < 1:
        return VectorResult(q.name, q.value, q.method + "; not certified: the error of the reversal (from pi) is not bounded", None, None, q.residual)
    e = 2 * pi_rel / (1 - pi_rel) + 4 * EPS * (2 * float(np.max(np.abs(log_pi))) + 746.0)
    charge = math.expm1(m * (math.log1p(e) - math.log1p(-e))) if e < 1 else math.inf
    rel = (1 + q.rel_error) * (1 + charge) - 1
    how = f"; on the time reversal P~ = D^-1 P^T D, charged ((1 + e)/(1 - e))^{m} - 1 = {charge:.1e} for pi's error"
    return VectorResult(q.name, q.value, q.method + how, rel if math.isfinite(rel) else None, None, q.residual)


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x)) if x.size else -math.inf
    if not math.isfinite(m):
        return m
    return m + math.log(float(np.exp(x - m).sum()))


def _summed(terms: Enclosure) -> tuple[float, float, float]:
    """(log sum, log lower, log upper) of a sum of non-negative terms given by their enclosures, the
    summation's rounding (n u relative) charged outward."""
    n = max(terms.log.size, 1)
    r = math.log1p(2 * n * EPS)
    return _logsumexp(terms.log), _logsumexp(terms.log_lower) - r, _logsumexp(terms.log_upper) + r


def logged_result(name: str, log_v: float, log_lo: float, log_hi: float, method: str, **details: Any) -> Result:
    """A positive quantity from its log and the logs of its enclosure: a value when the enclosure is within
    :data:`DEFAULT_RTOL`, otherwise the interval with the reason; ``details['log_value']`` holds the natural
    log (a value below float64's range is an interval [0, tiny] with that log)."""
    details = {"log_value": log_v, **details}
    v, lo, hi = math.exp(log_v) if log_v < 710 else math.inf, math.exp(log_lo), math.exp(log_hi) if log_hi < 710 else None
    if log_v == -math.inf:
        return Result.exact(name, 0.0, method, **details) if log_hi == -math.inf else Result.interval(
            name, 0.0, hi, method, "the flux is 0 in floating point but not certified to be", **details)
    rel = max(math.expm1(log_hi - log_v), -math.expm1(log_lo - log_v))
    if v > 0 and math.isfinite(v) and rel <= DEFAULT_RTOL:
        return Result.approximate(name, v, rel, method, **details)
    if v == 0:
        return Result.interval(name, 0.0, hi, method, f"below float64's range: log = {log_v:.6g}", **details)
    return Result.interval(name, min(lo, v), None if hi is None else max(hi, v), method,
                           f"the enclosure is {rel:.1e} wide relative to the value: not resolved to {DEFAULT_RTOL:g}",
                           **details)


def _edges(P: Matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, cols, log P) of the positive off-diagonal entries."""
    C = sp.coo_array(P)
    keep = (C.row != C.col) & (C.data > 0)
    return C.row[keep], C.col[keep], np.log(C.data[keep])


def edge_flux(P: Matrix, pi: Enclosure, q_minus: Enclosure, q_plus: Enclosure) -> tuple[np.ndarray, np.ndarray, Enclosure]:
    """(rows, cols, log f) on the positive off-diagonal entries of P: f(i, j) = pi(i) q-(i) P(i, j) q+(j) in
    log space, each end widened by the rounding of its three additions and its logs."""
    i, j, lp = _edges(P)
    with np.errstate(invalid="ignore"):
        terms = [pi.log[i], q_minus.log[i], lp, q_plus.log[j]]
        log = sum(terms)
        mag = sum(np.where(np.isfinite(t), np.abs(t), 0.0) for t in terms)
        r = 4 * EPS * (4 + mag)
        lo = pi.log_lower[i] + q_minus.log_lower[i] + lp + q_plus.log_lower[j] - r
        hi = pi.log_upper[i] + q_minus.log_upper[i] + lp + q_plus.log_upper[j] + r
    return i, j, Enclosure(log, lo, hi)


def total_flux(P: Matrix, pi: Enclosure, q_minus: Enclosure, q_plus: Enclosure, source: np.ndarray,
               name: str = "total reactive flux F") -> Result:
    """F = sum_(i in source, j != i) pi(i) q-(i) P(i, j) q+(j) (module doc), in log space."""
    i, _, f = edge_flux(P, pi, q_minus, q_plus)
    out = source[i]
    s = _summed(Enclosure(f.log[out], f.log_lower[out], f.log_upper[out]))
    return logged_result(name, *s, "sum of pi(i) q-(i) P(i, j) q+(j) over i in the source set, j != i, in log space")


def reactive_mass(pi: Enclosure, q_minus: Enclosure, name: str = "sum_i pi(i) q-(i)") -> Result:
    """Z = sum_i pi(i) q-(i), the fraction of time last spent in A (module doc)."""
    with np.errstate(invalid="ignore"):
        r = 4 * EPS * (2 + np.abs(pi.log) + np.where(np.isfinite(q_minus.log), np.abs(q_minus.log), 0.0))
        terms = Enclosure(pi.log + q_minus.log, pi.log_lower + q_minus.log_lower - r,
                          pi.log_upper + q_minus.log_upper + r)
    return logged_result(name, *_summed(terms), "sum of pi q- in log space")


def _ratio(name: str, top: Result, bottom: Result, method: str, invert: bool = False) -> Result:
    """top / bottom (or its reciprocal) from the logs and enclosures of two positive results."""
    a, b = top.details["log_value"], bottom.details["log_value"]
    a_lo = math.log(top.lower) if top.lower else -math.inf
    b_lo = math.log(bottom.lower) if bottom.lower else -math.inf
    a_hi = math.log(top.upper) if top.upper is not None else math.inf
    b_hi = math.log(bottom.upper) if bottom.upper is not None else math.inf
    v, lo, hi = a - b, a_lo - b_hi, a_hi - b_lo
    if invert:
        v, lo, hi = -v, -hi, -lo
    r = 4 * EPS * (2 + abs(a) + abs(b))
    if math.isnan(v) or math.isinf(v):
        return Result.interval(name, None if math.isnan(lo) else math.exp(lo), None, method,
                               f"{top.name} or {bottom.name} is 0 or unbounded: the ratio is not defined")
    return logged_result(name, v, lo - r, hi + r, method)


@dataclass(frozen=True)
class TransitionPaths:
    """The reactive flux between A and B with every TPT quantity (module doc); ``pathways()`` decomposes
    the net flux into channels."""

    A: np.ndarray
    B: np.ndarray
    forward_committor: VectorResult
    backward_committor: VectorResult
    flux: VectorResult
    net_flux: VectorResult
    total_flux: Result
    total_flux_back: Result
    rate: Result
    rate_back: Result
    mfpt: Result
    mfpt_back: Result
    details: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        figures = (self.total_flux, self.rate, self.rate_back, self.mfpt, self.mfpt_back)
        return (f"<TransitionPaths A = {np.flatnonzero(self.A).tolist()}, B = {np.flatnonzero(self.B).tolist()}: "
                + "; ".join(str(r) for r in figures) + ">")

    def pathways(self, max_paths: int = MAX_PATHWAYS) -> VectorResult:
        """The channels' shares of F (largest first) by repeated removal of the widest A -> B path from the
        net flux; ``details['paths']`` the state sequences, ``details['remainder']`` the share left when
        ``max_paths`` stops it early (module doc); none where F itself is not resolved."""
        if not self.total_flux.resolved:
            return VectorResult("pathway shares", np.zeros(0), f"not computed: F is not resolved ({self.total_flux.reason})",
                                None, details={"paths": [], "remainder": 1.0})
        return pathway_decomposition(self.details["net_flux_over_F"], self.A, self.B, max_paths)


def _widest_path(G: sp.csr_array, A: np.ndarray, B: np.ndarray) -> tuple[list[int], float]:
    """The A -> B path of the largest bottleneck in the capacities G (modified Dijkstra), ([], 0) if none."""
    n = G.shape[0]
    width = np.zeros(n)
    prev = np.full(n, -1)
    heap = []
    for a in np.flatnonzero(A):
        width[a] = math.inf
        heap.append((-math.inf, int(a)))
    heapq.heapify(heap)
    done = np.zeros(n, dtype=bool)
    while heap:
        w, u = heapq.heappop(heap)
        w = -w
        if done[u]:
            continue
        done[u] = True
        if B[u]:
            path = [u]
            while prev[path[-1]] >= 0:
                path.append(int(prev[path[-1]]))
            return path[::-1], w
        for k in range(G.indptr[u], G.indptr[u + 1]):
            v, c = int(G.indices[k]), G.data[k]
            b = min(w, c)
            if c > 0 and not done[v] and not A[v] and b > width[v]:
                width[v], prev[v] = b, u
                heapq.heappush(heap, (-b, v))
    return [], 0.0


def pathway_decomposition(net_flux: Matrix, A: np.ndarray, B: np.ndarray, max_paths: int = MAX_PATHWAYS) -> VectorResult:
    """Shares of F carried by the channels of the net flux f+ (a matrix, A and B masks), largest bottleneck
    first: find the widest A -> B path, record its bottleneck b, subtract b along it, repeat until the flux
    leaving A is below :data:`PATHWAY_RTOL` F or ``max_paths`` channels are found. The shares sum to 1 minus
    ``details['remainder']``; they are those of the computed net flux, whose accuracy the caller states."""
    max_paths = check_int(max_paths, "max_paths", minimum=1)
    C = sp.coo_array(net_flux)
    off = (C.row != C.col) & (C.data > 0)
    G = sp.csr_array((C.data[off].astype(np.float64), (C.row[off], C.col[off])), shape=C.shape)
    G.sum_duplicates()
    G.sort_indices()
    rows = np.repeat(np.arange(G.shape[0]), np.diff(G.indptr))
    F = float(G.data[A[rows] & ~A[G.indices]].sum())
    if not F > 0:
        return VectorResult("pathway shares", np.zeros(0), "no net flux leaves A", None, details={"paths": [],
                                                                                              "remainder": 0.0})
    G.data /= F  # work in units of F: fluxes far below float64's range stay resolved
    paths, shares = [], []
    left = 1.0
    while len(paths) < max_paths and left > PATHWAY_RTOL:
        path, b = _widest_path(G, A, B)
        if not path or not b > 0:
            break
        for u, v in zip(path[:-1], path[1:]):
            k = G.indptr[u] + int(np.searchsorted(G.indices[G.indptr[u]:G.indptr[u + 1]], v))
            G.data[k] = max(G.data[k] - b, 0.0)
        paths.append(path)
        shares.append(b)
        left -= b
    left = max(left, 0.0)
    return VectorResult("pathway shares", np.asarray(shares),
                        f"{len(paths)} widest-path removals from the net flux (bottleneck / F)", None,
                        details={"paths": paths, "remainder": float(left)})


def _matrix_result(name: str, shape: tuple[int, int], i: np.ndarray, j: np.ndarray, f: Enclosure, log_F: float,
                   method: str) -> tuple[VectorResult, sp.csr_array, sp.csr_array, sp.csr_array]:
    """The flux matrix (absolute units) with its entrywise relative bound, and its value and ends in units of F."""
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = [sp.csr_array((np.exp(x - log_F), (i, j)), shape=shape) for x in (f.log, f.log_lower, f.log_upper)]
        rel = np.maximum(np.expm1(f.log_upper - f.log), -np.expm1(f.log_lower - f.log))
    rel = rel[np.isfinite(f.log)]
    worst = float(rel.max()) if rel.size else 0.0
    value = sp.csr_array((np.exp(f.log), (i, j)), shape=shape)
    return (VectorResult(name, value, method, worst if math.isfinite(worst) else None),) + tuple(scaled)


def transition_paths(P: Matrix, log_pi: np.ndarray, pi_rel: float | None, A: Any, B: Any, q_plus: VectorResult,
                     q_minus: VectorResult, q_plus_back: VectorResult, q_minus_back: VectorResult) -> TransitionPaths:
    """Every TPT quantity (module doc) from plain values: P's entries, log pi with its entrywise relative error,
    and the four committors: q+ = P(tau_B < tau_A), q- (backward, A -> B), and those of B -> A:
    P(tau_A < tau_B) and the backward P~(tau_B < tau_A) (for a reversible chain q- is ``q_plus_back`` and
    the backward committor of B -> A is ``q_plus``)."""
    Am, Bm = check_basins(A, B, P.shape[0])
    pi = law_enclosure(log_pi, pi_rel)
    fixed = Am | Bm
    qp, qm = committor_enclosure(q_plus, fixed), committor_enclosure(q_minus, fixed)
    qpb, qmb = committor_enclosure(q_plus_back, fixed), committor_enclosure(q_minus_back, fixed)
    F = total_flux(P, pi, qm, qp, Am)
    F_back = total_flux(P, pi, qmb, qpb, Bm, "total reactive flux F (B -> A)")
    Z, Z_back = reactive_mass(pi, qm), reactive_mass(pi, qmb, "sum_i pi(i) q-(i) (B -> A)")
    rate = _ratio("rate k_AB", F, Z, "F / sum_i pi(i) q-(i)")
    rate_back = _ratio("rate k_BA", F_back, Z_back, "F / sum_i pi(i) q-(i) of B -> A")
    mfpt = _ratio("mean first passage time A -> B", F, Z, "1 / k_AB = sum_i pi(i) q-(i) / F", invert=True)
    mfpt_back = _ratio("mean first passage time B -> A", F_back, Z_back, "1 / k_BA", invert=True)
    i, j, f = edge_flux(P, pi, qm, qp)
    log_F = F.details["log_value"]
    log_F = log_F if math.isfinite(log_F) else 0.0
    flux, v, lo, hi = _matrix_result("reactive flux f(i, j)", P.shape, i, j, f, log_F,
                                     "pi(i) q-(i) P(i, j) q+(j) in log space")
    net = (v - v.T).maximum(0)
    err = (hi - lo.T).maximum(0) - net
    err = err.maximum(net - (lo - hi.T).maximum(0))
    scale = math.exp(log_F)
    net_flux = VectorResult("net reactive flux f+(i, j)", sp.csr_array(net * scale), "max(f(i, j) - f(j, i), 0)", None,
                            float(err.sum()) * scale if err.nnz else 0.0,
                            details={"max_abs_error": float(err.max()) * scale if err.nnz else 0.0})
    return TransitionPaths(Am, Bm, q_plus, q_minus, flux, net_flux, F, F_back, rate, rate_back, mfpt, mfpt_back,
                           {"mass_A_last": Z, "mass_B_last": Z_back, "net_flux_over_F": sp.csr_array(net)})


def chain_transition_paths(chain: Chain, A: Any, B: Any) -> TransitionPaths:
    """The body of :meth:`Chain.transition_paths`: the committors by the chain's own route (GTH, Krylov or
    matrix-free, :func:`~mlmix.theory.chain.hitting.chain_committor`), the backward ones as committors of the
    time reversal (non-reversible) or of the swapped sets (reversible); the fluxes from P's entries
    (``chain.to_scipy()``: a matrix-free chain's matrix, memory permitting)."""
    Am, Bm = check_basins(A, B, chain.n_states)
    if not chain.is_irreducible:
        raise InputValueError("transition path theory needs an irreducible chain (pi > 0 on every state); "
                              f"this one has {len(chain.closed_classes)} closed class(es) and transient states")
    st = chain.stationary
    q_plus, q_plus_back = chain.committor(Am, Bm), chain.committor(Bm, Am)
    if chain.is_reversible:
        q_minus, q_minus_back = q_plus_back, q_plus
    else:
        rev = chain.time_reversal()
        m = int((~(Am | Bm)).sum())
        q_minus = reversal_charge(rev.committor(Bm, Am), m, st.rel_error, st.log_value)
        q_minus_back = reversal_charge(rev.committor(Am, Bm), m, st.rel_error, st.log_value)
    return transition_paths(chain.to_scipy(), st.log_value, st.rel_error, Am, Bm, q_plus, q_minus, q_plus_back,
                            q_minus_back)
