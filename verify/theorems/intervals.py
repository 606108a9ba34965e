"""The ends of the exact engine's intervals, checked against independent computations.

A reported interval is only as good as its ends: an upper end rounded down, a lower end off by one or a
one-ulp inward rounding leave every figure plausible and every other check green. Each theorem here
compares the ends the library reports with a computation that shares no code with it:

* ``engine.tmix-ends``: t_mix(eps) = min{t : d(t) <= eps}, d(t) = max_x TV(P^t(x, .), pi), by direct
  successive products P^t = P^(t-1) P in numpy (no squaring, no bisection) with a rounding margin, and pi
  by an LU solve of pi (I - P) = 0, sum pi = 1. Both the exact path and the certified-bounds path
  (``max_states=0``) must contain it; their ends must be integers; the certified upper end must be at
  least the real bound it rounds (reversible: t_rel log(1/(eps pi_min)); otherwise Fill's
  (log((1 - pi_min)/pi_min)/2 + log(1/(2 eps))) / -log sigma_2), the certified lower end at least
  (t_rel - 1) log(1/(2 eps)), t_rel and sigma_2 from numpy's symmetric eigensolver / SVD of
  D^(1/2) P D^(-1/2).
* ``engine.kemeny-ends``: K = sum_{lambda != 1} 1/(1 - lambda) on chains with transient states (one closed
  class) and irreducible samplers: exactly in rationals (tr (I - P + 1 pi^T)^-1 - 1 by Fraction
  elimination) for integer-weight matrices, else from numpy's eigenvalues cross-checked with the float
  fundamental matrix; both the dense result and the trace-and-gap interval (``dense_limit=0``) must
  contain it. Their ends are attained: by P = J/N (every non-unit eigenvalue 0) both ends of the
  trace-and-gap interval.
* ``engine.interval-arithmetic``: ``Result`` + - * / contain every combination of the operands' end points,
  computed in exact rationals, with the lower end compared to the largest float below the exact minimum
  (so one ulp inward fails), and a resolved result's relative error covers the enclosure.

An interval the engine refuses to build (``Result`` raises ValueError on lower > upper or a value outside
its enclosure) is a failed check here, not a crash: that is exactly what an end off by one produces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from mlmix.errors import InvalidResultError, NumericalError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.results import EPS, Result
from mlmix.verify import instances as S
from mlmix.verify.chain_instances import MatrixInstance, stochastic_matrices
from mlmix.verify.regime_instances import zero_conditional_instances
from mlmix.verify.verdicts import Attaining, Part, Theorem, Verdict, register, verdict

PAPER = "engine"

#: Largest chain of the sampler instances (3^4: n = 4 sites, |V| = 3).
MAX_STATES = 81

#: Steps of the direct powers; a t_mix beyond it is only known to exceed it.
T_CAP = 96

#: Relative accuracy an independent reference must reach to be compared (else the instance is trivial).
REF_RTOL = 1e-6


@dataclass(eq=False)
class Case:
    """A chain for the engine checks: the dense matrix, how to build the library's chain, the t_mix level,
    integer weights when P = W / row sums exactly (for rational references), and the regime."""

    P: np.ndarray
    build: Callable[..., Chain]
    eps: float
    about: dict
    regime_: dict
    weights: np.ndarray | None = field(default=None, repr=False)

    def regime(self) -> dict:
        return self.regime_

    def describe(self) -> dict:
        out = dict(self.about, eps=self.eps)
        if self.P.shape[0] <= 8:
            out["P"] = np.round(self.P, 6).tolist()
        return out


def _from_instance(inst: S.Instance) -> Case:
    chain = Chain.from_source(inst.source)
    P = chain.to_dense()
    return Case(P, lambda **kw: Chain(chain.P, **kw), inst.eps, inst.describe(), inst.regime())


def _from_matrix(m: MatrixInstance, eps: float) -> Case:
    P = m.dense()
    return Case(P, lambda **kw: Chain(P, **kw), eps, m.describe(), m.regime(), m.weights)


def weighted_case(W: np.ndarray, eps: float, kind: str) -> Case:
    """The chain P = W / row sums of a non-negative integer matrix W."""
    P = W / W.sum(axis=1, keepdims=True)
    return Case(P, lambda **kw: Chain(P, **kw), eps, {"kind": kind, "weights": W.tolist()},
                {"n": None, "vocab": None, "temperature": None, "states": P.shape[0], "reversible": None}, W)


def sampler_cases() -> st.SearchStrategy:
    """Glauber chains of any source, on shapes with n >= 4 and |V| >= 3 (81 states) in three draws out of
    four nominally (Hypothesis favours the first branch: measured about half), t_mix level 1/4, 1/10, 1/100."""
    def case(inst: S.Instance, eps: float) -> Case:
        inst.eps = eps
        return _from_instance(inst)
    large = S.instances(S.large_sources(MAX_STATES), MAX_STATES)
    generic = S.instances(S.any_sources(MAX_STATES), MAX_STATES)
    either = st.sampled_from((False, True, True, True)).flatmap(lambda big: large if big else generic)
    return st.builds(case, either, st.sampled_from([0.25, 0.1, 0.01]))


def transient_cases(max_states: int = 8) -> st.SearchStrategy:
    """Integer-weight chains with transient states and one closed class."""
    return st.tuples(stochastic_matrices(max_states, transient=True), st.sampled_from([0.25, 0.1, 0.01])) \
        .map(lambda a: _from_matrix(*a))


def zero_conditional_cases() -> st.SearchStrategy:
    """Glauber chains of score tables with forbidden symbols that keep one closed class (transient states)."""
    def case(inst: S.Instance) -> Case | None:
        c = _from_instance(inst)
        chain = c.build()
        return c if len(chain.closed_classes) == 1 and chain.period == 1 else None
    return zero_conditional_instances(MAX_STATES).map(case).filter(lambda c: c is not None)


def _mixed(kinds: dict[str, st.SearchStrategy], order: tuple[str, ...]) -> st.SearchStrategy:
    """An explicit first choice among strategies, in the proportions of ``order`` (nested ``one_of`` draws
    its branches unevenly)."""
    return st.sampled_from(order).flatmap(lambda k: kinds[k])


# ---------------------------------------------------------------------------------- independent references


def stationary(P: np.ndarray) -> np.ndarray:
    """pi (I - P) = 0, sum pi = 1 by an LU solve (one closed class), clipped at 0 and renormalised."""
    N = P.shape[0]
    A = (np.eye(N) - P).T
    A[-1] = 1.0
    b = np.zeros(N)
    b[-1] = 1.0
    pi = np.clip(np.linalg.solve(A, b), 0.0, None)
    return pi / pi.sum()


def distances(P: np.ndarray, pi: np.ndarray, t_max: int) -> np.ndarray:
    """d(t) = max_x TV(P^t(x, .), pi) for t = 0..t_max, P^t by successive products."""
    M = np.eye(P.shape[0])
    out = np.empty(t_max + 1)
    for t in range(t_max + 1):
        out[t] = 0.5 * np.abs(M - pi[None, :]).sum(axis=1).max()
        M = M @ P
    return out


@dataclass(frozen=True)
class MixingReference:
    """t_mix by direct powers: ``t`` when decided, else None; ``beyond``: t_mix > T_CAP is certain."""

    t: int | None
    beyond: bool
    margin: float


def distance_reference(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(d(t), its margin) for t = 0..T_CAP by :func:`distances`: the margin adds the rounding of the products,
    t * 4 N u, and the stationary law's error from its residual and the spectral gap."""
    N = P.shape[0]
    pi = stationary(P)
    res = float(np.abs(pi @ P - pi).sum())
    ev = np.sort(np.abs(1 - np.linalg.eigvals(P)))
    gap = float(ev[1]) if N > 1 else 1.0
    margin_pi = (res + 8 * N * EPS) / max(gap, 1e-300)
    return distances(P, pi, T_CAP), np.arange(T_CAP + 1) * 4 * N * EPS + margin_pi + 1e-13


#: Steps at which the certified d(t) is held against the direct powers (the spectral upper bound's
#: prefactor (1/2) sqrt((1 - pi_min) / pi_min) matters most at small t).
DISTANCE_STEPS = (0, 1, 2, 4)


def distance_conditions(chain: Chain, P: np.ndarray) -> dict[str, bool]:
    """The certified d(t) of ``chain`` at :data:`DISTANCE_STEPS` against the direct powers: its enclosure is
    built (an empty one, a NumericalError, fails here rather than crashing the check), contains d(t), and
    the spectral upper bound it reports (details ``log10_upper``) is >= d(t)."""
    d, margins = distance_reference(P)
    built = contains = spectral = True
    for t in DISTANCE_STEPS:
        try:
            r = chain.tv_distance(t)
        except NumericalError:
            built = False
            continue
        lo, hi = _end(r.lower, 0.0), _end(r.upper, 1.0)
        contains &= lo - margins[t] <= d[t] <= hi + margins[t]
        log10_upper = r.details.get("log10_upper")
        if log10_upper is not None:
            spectral &= d[t] <= 10.0**log10_upper * (1 + 1e-9) + margins[t]
    return {"certified d(t) is an enclosure (not empty), t = 0, 1, 2, 4": built,
            "certified d(t) contains d(t) by direct powers": contains,
            "spectral upper bound on d(t) >= d(t) by direct powers": spectral}


def mixing_reference(P: np.ndarray, eps: float) -> MixingReference:
    """The first t with d(t) <= eps, decided only where every d(s), s <= t, is farther than the margin from
    eps (rounding of the products, t * 4 N u, plus the stationary law's error from its residual and the
    spectral gap)."""
    d, margins = distance_reference(P)
    for t in range(T_CAP + 1):
        if abs(d[t] - eps) <= margins[t]:
            return MixingReference(None, False, float(margins[t]))
        if d[t] < eps:
            return MixingReference(t, False, float(margins[t]))
    return MixingReference(None, True, float(margins[-1]))


def reversible_rates(P: np.ndarray, pi: np.ndarray) -> tuple[float, float, float]:
    """(absolute spectral gap, sigma_2 of D^(1/2) P D^(-1/2), relative accuracy) by numpy (dense LAPACK)."""
    s = np.sqrt(pi)
    A = s[:, None] * P / s[None, :]
    sym = np.linalg.eigvalsh((A + A.T) / 2)
    lam = np.sort(np.abs(sym))[::-1]
    sv = np.linalg.svd(A, compute_uv=False)
    abs_gap = 1 - float(lam[1])
    acc = 16 * P.shape[0] * EPS / max(min(abs_gap, 1 - float(sv[1])), 1e-300)
    return abs_gap, float(sv[1]), acc


def _end(x: float | None, default: float) -> float:
    return default if x is None else float(x)


def _refused(err: ValueError) -> bool:
    """Whether a ValueError is the Result constructor refusing a broken enclosure."""
    return isinstance(err, InvalidResultError)


def _refusal(names: tuple[str, ...], err: ValueError) -> Verdict:
    """A failing verdict: the engine could not build its own interval (each part compared as +inf <= 0)."""
    return verdict(*(Part(n, math.inf, 0.0, "<=") for n in names), refused=str(err))


def _is_integer_end(x: float | None) -> bool:
    return x is None or math.isinf(x) or float(x).is_integer()


# ---------------------------------------------------------------------------------- t_mix


class EngineTheorem(Theorem):
    paper = PAPER


TMIX_PARTS = ("exact path: lower end <= t_mix", "exact path: t_mix <= upper end",
              "certified bounds: lower end <= t_mix", "certified bounds: t_mix <= upper end",
              "certified upper end >= the real bound it rounds up", "certified lower end >= (t_rel - 1) log(1/(2 eps))")


@register
class MixingTimeEnds(EngineTheorem):
    id = "engine.tmix-ends"
    number = "t_mix interval ends"
    statement = ("t_mix(eps) = min{t : max_x TV(P^t(x, .), pi) <= eps} lies in every interval the engine reports (exact "
                 "path and certified bounds); the ends are integers; the certified upper end is the ceiling of a bound "
                 "at least t_rel log(1/(eps pi_min)) (reversible) or Fill's bound, the lower end at least "
                 "(t_rel - 1) log(1/(2 eps)) (reversible)")
    attaining = (Attaining("two states, P = [[9, 1], [1, 9]] / 10, eps = 1/100: t_mix = 18, both exact ends attained, "
                           "the certified bracket [16, 27] within 2.3% of its real bounds",
                           lambda: weighted_case(np.array([[9, 1], [1, 9]]), 0.01, "two-state"),
                           (1.0001, 1.0001, 1.1251, 1.5001, 1.0226, 1.0193)),)
    budget = 0.3  # the library's transient-decay profile of a slowly draining chain takes ~0.2 s

    def strategy(self) -> st.SearchStrategy:
        return _mixed({"sampler": sampler_cases(), "matrix": transient_cases()}, ("sampler", "sampler", "matrix"))

    def check(self, case: Case) -> Verdict:
        ref = mixing_reference(case.P, case.eps)
        try:
            chain = case.build()
            exact = chain.mixing_time(case.eps)
            certified = chain.mixing_time(case.eps, max_states=0)
        except ValueError as err:
            if _refused(err):
                return _refusal(TMIX_PARTS[:4], err)
            raise
        parts = []
        truth_low = T_CAP + 1 if ref.beyond else ref.t  # a certified lower bound on t_mix (or the value)
        for label, r in (("exact path", exact), ("certified bounds", certified)):
            lo, hi = _end(r.lower, 0.0), _end(r.upper, math.inf)
            if ref.t is not None:
                parts.append(Part(f"{label}: lower end <= t_mix", lo, ref.t, "<="))
            if truth_low is not None and math.isfinite(hi):
                parts.append(Part(f"{label}: t_mix <= upper end", truth_low, hi, "<="))
        integer = all(_is_integer_end(x) for r in (exact, certified) for x in (r.lower, r.upper, r.value))
        if not chain.structure.transient.any() and chain.n_states > 1:
            pi = stationary(case.P)
            abs_gap, sigma2, acc = reversible_rates(case.P, pi)
            if acc <= REF_RTOL:
                pi_min = float(pi.min())
                if chain.is_reversible:
                    upper_real = math.log(1 / (case.eps * pi_min)) / abs_gap
                    lower_real = (1 / abs_gap - 1) * math.log(1 / (2 * case.eps))
                    parts.append(Part("certified lower end >= (t_rel - 1) log(1/(2 eps))", _end(certified.lower, 0.0),
                                      lower_real, ">=", 0.0, acc * abs(lower_real) + 1e-9))
                else:
                    tail = 0.5 * math.log((1 - pi_min) / pi_min) + math.log(1 / (2 * case.eps))
                    upper_real = max(tail, 0.0) / -math.log(sigma2) if sigma2 > 0 else 0.0
                if certified.upper is not None and case.eps < 1 - pi_min:
                    parts.append(Part("certified upper end >= the real bound it rounds up", certified.upper,
                                      upper_real, ">=", 0.0, acc * upper_real + 1e-9))
        trivial = None if parts else "the direct powers decide no t_mix here (beyond the cap, or at the margin)"
        if not parts:
            parts.append(Part("exact path: t_mix <= upper end", 0.0, 1.0, "<="))
        conditions = {"integer ends": integer, **distance_conditions(chain, case.P)}
        return verdict(*parts, conditions=conditions, trivial=trivial, t_mix=ref.t,
                       beyond_cap=ref.beyond, exact=exact.as_dict(), certified=certified.as_dict())


# ---------------------------------------------------------------------------------- Kemeny


def _solve_exact(A: list[list[Fraction]], b: list[Fraction]) -> list[Fraction]:
    """A x = b by Gaussian elimination in rationals."""
    n = len(A)
    M = [row[:] + [b[i]] for i, row in enumerate(A)]
    for c in range(n):
        p = next(r for r in range(c, n) if M[r][c] != 0)
        M[c], M[p] = M[p], M[c]
        for r in range(n):
            if r != c and M[r][c] != 0:
                f = M[r][c] / M[c][c]
                M[r] = [x - f * y for x, y in zip(M[r], M[c])]
    return [M[i][n] / M[i][i] for i in range(n)]


def kemeny_exact(W: np.ndarray) -> Fraction:
    """K = tr (I - P + 1 pi^T)^-1 - 1 for P = W / row sums, in exact rationals."""
    n = W.shape[0]
    P = [[Fraction(int(W[i, j]), int(W[i].sum())) for j in range(n)] for i in range(n)]
    A = [[(1 if i == j else 0) - P[j][i] for j in range(n)] for i in range(n)]  # (I - P)^T
    A[-1] = [Fraction(1)] * n
    pi = _solve_exact(A, [Fraction(0)] * (n - 1) + [Fraction(1)])
    Z = [[(1 if i == j else 0) - P[i][j] + pi[j] for j in range(n)] for i in range(n)]
    trace = Fraction(0)
    for k in range(n):  # column k of Z^-1, its k-th entry
        trace += _solve_exact(Z, [Fraction(int(i == k)) for i in range(n)])[k]
    return trace - 1


def kemeny_reference(case: Case) -> tuple[float, float] | None:
    """(K, absolute error): exact for integer weights; otherwise the eigenvalue sum sum 1/(1 - lambda) over
    the eigenvalues other than the one nearest 1, with the float fundamental matrix's trace as the error
    estimate (None when they disagree beyond REF_RTOL)."""
    if case.weights is not None:
        K = kemeny_exact(case.weights)
        return float(K), abs(float(K)) * 2 * EPS
    P = case.P
    lam = np.linalg.eigvals(P)
    lam = np.delete(lam, int(np.argmin(np.abs(lam - 1))))
    K_eig = float(np.sum(1 / (1 - lam)).real)
    pi = stationary(P)
    K_fun = float(np.trace(np.linalg.inv(np.eye(P.shape[0]) - P + pi[None, :]))) - 1
    err = 4 * abs(K_eig - K_fun) + 1e-12 * abs(K_eig)
    return (K_eig, err) if err <= REF_RTOL * abs(K_eig) else None


KEMENY_PARTS = ("dense: lower end <= K", "dense: K <= upper end", "trace and gap: lower end <= K",
                "trace and gap: K <= upper end")


def uniform_jump(N: int) -> Case:
    """P = J / N: every non-unit eigenvalue 0, K = N - 1 (both ends of the trace-and-gap interval attained)."""
    return weighted_case(np.ones((N, N), dtype=np.int64), 0.25, "J/N")


@register
class KemenyEnds(EngineTheorem):
    id = "engine.kemeny-ends"
    number = "Kemeny constant interval ends"
    statement = ("K = sum_{lambda != 1} 1/(1 - lambda) lies in the engine's interval for K: the dense result (transient "
                 "states: K of the closed class plus tr (I - P_TT)^-1) and the bounds from the trace and the gap "
                 "(N - 2 + tr P <= K <= chord; non-reversible (N - 1)/2 <= K)")
    attaining = (Attaining("P = J/4: both ends of the trace-and-gap interval equal K = 3", lambda: uniform_jump(4),
                           (1.000001, 1.000001, 1.000001, 1.000001)),)
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return _mixed({"zero": zero_conditional_cases(), "sampler": sampler_cases(), "matrix": transient_cases()},
                      ("sampler", "zero", "matrix", "sampler", "zero"))

    def check(self, case: Case) -> Verdict:
        ref = kemeny_reference(case)
        if ref is None:
            return verdict(Part(KEMENY_PARTS[0], 0.0, 1.0, "<="),
                           trivial="the eigenvalue sum and the fundamental matrix disagree: no reference")
        K, err = ref
        try:
            dense = case.build().kemeny_constant
            chain = case.build(dense_limit=0)
            sparse = chain.kemeny_constant if not chain.structure.transient.any() else None
        except ValueError as e:
            if _refused(e):
                return _refusal(KEMENY_PARTS, e)
            raise
        parts = []
        for label, r in (("dense", dense), ("trace and gap", sparse)):
            if r is None:
                continue
            if r.lower is not None:
                parts.append(Part(f"{label}: lower end <= K", r.lower, K, "<=", 0.0, err))
            if r.upper is not None:
                parts.append(Part(f"{label}: K <= upper end", K, r.upper, "<=", err, 0.0))
        if not parts:
            return verdict(Part(KEMENY_PARTS[0], 0.0, 1.0, "<="), trivial="the engine reports no end")
        return verdict(*parts, K=K, dense=dense.as_dict(), trace_and_gap=None if sparse is None else sparse.as_dict())


# ---------------------------------------------------------------------------------- interval arithmetic

OPS: dict[str, Callable[[Any, Any], Any]] = {"+": lambda x, y: x + y, "-": lambda x, y: x - y,
                                             "*": lambda x, y: x * y, "/": lambda x, y: x / y}


def _below(q: Fraction) -> float:
    """The largest float <= q."""
    x = float(q)
    return math.nextafter(x, -math.inf) if Fraction(x) > q else x


def _above(q: Fraction) -> float:
    return -_below(-q)


_finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@st.composite
def operands(draw) -> Result:
    """An exact value, an approximate one (relative error 1e-17 .. 1), or an interval (possibly half-open)."""
    kind = draw(st.sampled_from(["exact", "approximate", "interval", "half"]))
    x = draw(_finite)
    scale = draw(st.sampled_from([0.0, 1e-17, 1e-12, 1e-6, 0.1, 1.0]))
    if kind == "exact":
        return Result.exact("x", x, "drawn")
    if kind == "approximate":
        return Result.approximate("x", x, scale, "drawn")
    width = abs(x) * scale + draw(st.sampled_from([0.0, 1e-300, 1.0]))
    if kind == "interval":
        return Result.interval("x", x, x + width, "drawn", "an interval")
    return Result.interval("x", x, None, "drawn", "one side") if draw(st.booleans()) else \
        Result.interval("x", None, x, "drawn", "one side")


@dataclass(frozen=True)
class Arithmetic:
    a: Result
    b: Result
    op: str

    def describe(self) -> dict:
        return {"a": [self.a.lower, self.a.value, self.a.upper], "b": [self.b.lower, self.b.value, self.b.upper],
                "op": self.op}

    def regime(self) -> dict:
        return {}


ARITH_PARTS = ("lower end <= exact minimum", "exact maximum <= upper end", "relative error covers the enclosure")


@register
class IntervalArithmetic(EngineTheorem):
    id = "engine.interval-arithmetic"
    number = "Outward-rounded interval arithmetic"
    statement = ("for Results a, b and op in + - * /, [lower, upper] of a op b contains x op y for every x, y at the "
                 "ends of a and b (exact rationals; the quotient is unbounded when b may be 0); a resolved result's "
                 "relative error covers its enclosure")
    attaining = (Attaining("[1, 2] + [3, 4] = [4, 6]: each end one ulp outward",
                           lambda: Arithmetic(Result.interval("a", 1.0, 2.0, "t", "r"),
                                              Result.interval("b", 3.0, 4.0, "t", "r"), "+"),
                           (1.000001, 1.000001)),)

    def strategy(self) -> st.SearchStrategy:
        return st.builds(Arithmetic, operands(), operands(), st.sampled_from(sorted(OPS)))

    def check(self, inst: Arithmetic) -> Verdict:
        a, b, op = inst.a, inst.b, inst.op
        try:
            c = OPS[op](a, b)
        except ValueError as err:
            if _refused(err):
                return _refusal(ARITH_PARTS[:2], err)
            raise
        pts = lambda r: [Fraction(x) for x in (r.lower, r.upper, r.value) if x is not None and math.isfinite(x)]
        b_may_be_zero = (b.lower is None or b.lower <= 0) and (b.upper is None or b.upper >= 0)
        if op == "/" and b_may_be_zero:
            return verdict(Part("exact maximum <= upper end", 0.0, 1.0, "<="),
                           conditions={"unbounded quotient": c.lower is None and c.upper is None},
                           trivial="the divisor may be 0: only the unbounded enclosure is right")
        zs = [OPS[op](x, y) for x in pts(a) for y in pts(b)]
        parts = []
        if c.lower is not None:
            parts.append(Part(ARITH_PARTS[0], c.lower, _below(min(zs)), "<=", 0.0, 0.0))
        if c.upper is not None:
            parts.append(Part(ARITH_PARTS[1], _above(max(zs)), c.upper, "<=", 0.0, 0.0))
        if c.value is not None and c.value != 0:
            v = Fraction(c.value)
            need = max(abs(z - v) for z in zs) / abs(v)
            parts.append(Part(ARITH_PARTS[2], _above(need), c.rel_error, "<=", 0.0, 0.0, ratio=False))
        unbounded_in = None in (a.lower, a.upper, b.lower, b.upper)
        conditions = {"an unbounded operand leaves a side unknown": not (op in "+-" and unbounded_in)
                      or c.lower is None or c.upper is None}
        if not parts:
            return verdict(Part(ARITH_PARTS[1], 0.0, 1.0, "<="), conditions=conditions,
                           trivial="no finite end to compare")
        return verdict(*parts, conditions=conditions, result=[c.lower, c.value, c.upper])
