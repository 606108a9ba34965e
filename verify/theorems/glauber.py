"""Paper G (Mixing Times of Glauber Dynamics on Masked Language Models): every result as a
checkable theorem object.

Each check computes both sides exactly on a small instance (|V|^n <= 256): transition matrices
from :mod:`mlmix.theory.kernels`, chain quantities from :mod:`mlmix.theory.spectral`, :mod:`mlmix.theory.mixing`,
:mod:`mlmix.theory.conductance`, :mod:`mlmix.theory.hitting`, local quantities from :mod:`mlmix.theory.influence`, :mod:`mlmix.theory.rectangles` and :mod:`mlmix.theory.margins`.
Rational instances (positive integer weights at T = 1) are also certified in exact sympy
arithmetic: Prop. 1 row sums, Thm 3 detailed balance and stationarity, Prop. 4 R = 0.

Tolerances (relative, see :func:`mlmix.verify.core.compare`): LOCAL_RTOL for identities between local
quantities computed in two ways (float64 round-off of softmax sums), CHAIN_RTOL for identities
that involve a stationary law or matrix powers (linear solves). Integer quantities (t_mix) are
compared exactly.

Tightness is the looseness factor of a bound: bound / exact for an upper bound, exact / bound for
a lower bound (>= 1 whenever the bound holds; 1 means tight).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import sympy
from hypothesis import strategies as st

from mlmix.errors import ReducibleChainError
from mlmix.theory.chain import Chain
from mlmix.theory.conductance import set_conductance
from mlmix.theory.contexts import score_table
from mlmix.theory.hitting import expected_hitting_times
from mlmix.theory.influence import (
    aggregate_influence,
    contraction_temperature,
    influence_and_oscillation,
    influence_matrix,
    score_oscillation,
    tv_bound_from_oscillation,
)
from mlmix.theory.kernels import glauber_kernel
from mlmix.theory.margins import (
    basin_margin,
    count_drift,
    escape_bound,
    mixing_lower_bound,
)
from mlmix.theory.matrices import to_dense
from mlmix.theory.mixing import distance_curve, mixing_time
from mlmix.theory.rectangles import all_rectangles, compatible_joint, is_compatible
from mlmix.theory.stationary import stationary_distribution
from mlmix.theory.structure import communicating_classes
from mlmix.verify import strategies as S
from mlmix.verify.core import Applicability, Theorem, Verdict, compare, register
from mlmix.verify.runner import Violation

LOCAL_RTOL = 1e-9
CHAIN_RTOL = 1e-7

#: Largest state count of the sympy certificates (they are O(N^2) rational operations).
EXACT_LIMIT = 16

#: Ratio bound spread/T for theorems that need t_mix, stationary laws or exit times (probabilities
#: stay >= e^{-12}, so gaps stay far above float64 round-off).
CHAIN_RATIO = 12.0


def _all(verdict: Verdict, **conditions: bool) -> Verdict:
    """The verdict, failing unless every named condition holds; conditions land in details."""
    details = dict(verdict.details, **{k: bool(v) for k, v in conditions.items()})
    return dataclasses.replace(verdict, holds=verdict.holds and all(conditions.values()), details=details)


def _positive(inst: S.Instance) -> Applicability:
    """Strictly positive conditionals pi_i(v|x_{-i}) > 0 (finite scores, no float underflow)."""
    table = score_table(inst.source)
    if not np.isfinite(table).all():
        return Applicability(False, "some conditional is zero (a score is -inf)")
    spread = (table.max(axis=-1) - table.min(axis=-1)).max() / inst.source.temperature
    if spread > 700:
        return Applicability(False, f"score spread / T = {spread:.0f} underflows float64 probabilities")
    return Applicability(True)


def _kernel(inst: S.Instance) -> np.ndarray:
    return to_dense(glauber_kernel(inst.source))


def _joint(inst: S.Instance) -> np.ndarray | None:
    return compatible_joint(inst.source)


# ----------------------------------------------------------------------------------------------
# Exact rational certificates


def _exact_conditionals(inst: S.Instance) -> dict[tuple[int, int], list[sympy.Rational]]:
    """pi_i(.|x_{-i}) as sympy Rationals for every state index x and site i (rational instances)."""
    space, w = inst.space, inst.weights
    n, q = space.length, space.vocab_size
    states = space.all_states()
    out = {}
    for i in range(n):
        nb = space.neighbours(np.arange(space.size), i)
        rest = np.delete(states, i, axis=1) @ (q ** np.arange(n - 2, -1, -1, dtype=np.int64)) if n > 1 \
            else np.zeros(space.size, dtype=np.int64)
        for x in range(space.size):
            vals = [int(w[y]) for y in nb[x]] if w.ndim == 1 else [int(v) for v in w[i, rest[x]]]
            total = sum(vals)
            out[x, i] = [sympy.Rational(v, total) for v in vals]
    return out


def _exact_kernel(inst: S.Instance) -> dict[tuple[int, int], sympy.Rational]:
    """P(x, y) in exact rationals (only nonzero entries)."""
    space = inst.space
    n = space.length
    cond = _exact_conditionals(inst)
    P: dict[tuple[int, int], sympy.Rational] = {}
    for x in range(space.size):
        for i in range(n):
            for y, p in zip(space.neighbours(x, i), cond[x, i]):
                P[x, int(y)] = P.get((x, int(y)), sympy.Integer(0)) + p / n
    return P


def _is_exact(inst: S.Instance) -> bool:
    return inst.weights is not None and inst.space.size <= EXACT_LIMIT and inst.source.temperature == 1.0


# ----------------------------------------------------------------------------------------------


class GlauberTheorem(Theorem):
    paper = "glauber-mlm"
    violations: tuple[Violation, ...] = ()

    def describe(self, instance: Any) -> Any:
        return instance.describe()


@register
class Prop1(GlauberTheorem):
    id = "glauber.prop1"
    number = "Proposition 1"
    statement = ("P_T(x,y) = (1/n) sum_i 1[y_{-i}=x_{-i}] pi_i^T(y_i|x_{-i}) is a Markov kernel (rows sum to 1); "
                 "with positive conditionals it is irreducible and aperiodic (P_T(x,x) > 0)")

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(S.instances(), S.rational_table_instances(), S.rational_joint_instances())

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        P = glauber_kernel(instance.source)
        row_error = float(np.abs(np.asarray(P.sum(axis=1)).ravel() - 1.0).max())
        classes, _ = communicating_classes(P)
        exact = {}
        if _is_exact(instance):
            Pe = _exact_kernel(instance)
            sums = [sum((p for (x, _), p in Pe.items() if x == r), sympy.Integer(0)) for r in range(instance.space.size)]
            exact["exact_rows_sum_to_one"] = all(s == 1 for s in sums)
            exact["float_matches_exact"] = max(abs(float(p) - P[x, y]) for (x, y), p in Pe.items()) <= 1e-12
        return _all(compare(row_error, 0.0, "==", LOCAL_RTOL, communicating_classes=len(classes)),
                    irreducible=len(classes) == 1, aperiodic=float(P.diagonal().min()) > 0, **exact)

    violations = (Violation(
        "positive conditionals", lambda: S.zero_conditional_instances(),
        lambda inst: len(communicating_classes(glauber_kernel(inst.source))[0]) > 1,
        "conditionals with zeros give a reducible chain"),)


@register
class Cor2(GlauberTheorem):
    id = "glauber.cor2"
    number = "Corollary 2"
    statement = ("positive conditionals => a unique stationary law mu_T (one eigenvalue of modulus 1, equal to 1) "
                 "and d(t) = max_x TV(P^t(x,.), mu_T) decreases to 0: d(t_mix(eps)) <= eps")

    def strategy(self) -> st.SearchStrategy:
        return S.instances(max_states=64, max_ratio=CHAIN_RATIO, eps=True)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        P = _kernel(instance)
        try:
            pi = stationary_distribution(P)
        except ReducibleChainError as err:
            return Verdict(False, math.nan, instance.eps, "<=", -math.inf, None,
                           {"unique_stationary": False, "closed_classes": len(err.closed_classes)})
        moduli = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
        chain = Chain(P, stationary=pi)
        t = int(chain.mixing_time(instance.eps))
        times = sorted(set(range(min(t, 32) + 1)) | {t - 1, t} | {2**k for k in range(int(math.log2(t)) + 1)})
        d = [chain.tv_distance(s) for s in times]  # certified intervals [lower, upper]
        lo, hi = np.array([r.lower for r in d]), np.array([r.upper for r in d])
        return _all(compare(hi[-1], instance.eps, "<=", CHAIN_RTOL, t_mix=t, second_modulus=float(moduli[1])),
                    single_unit_eigenvalue=abs(moduli[0] - 1) < 1e-9 and moduli[1] < 1 - 1e-12,
                    d_non_increasing=bool((lo[1:] <= hi[:-1] + 1e-12).all()),
                    d_before_t_mix_above_eps=lo[-2] > instance.eps)

    violations = (Violation(
        "positive conditionals", lambda: S.zero_conditional_instances(),
        lambda inst: sum(communicating_classes(glauber_kernel(inst.source))[1]) > 1,
        "conditionals with zeros give several closed classes, hence several stationary laws"),)


def _balance_defects(P: np.ndarray, mu: np.ndarray, inst: S.Instance) -> dict[str, float]:
    """Relative defects of stationarity, detailed balance and eq. (4.1) for a candidate law mu."""
    F = mu[:, None] * P
    pair = np.abs(F - F.T) / np.maximum(np.maximum(F, F.T), 1e-300)
    stat = float(np.abs(mu @ P - mu).sum() / mu.sum())
    space, T = inst.space, inst.source.temperature
    logc = score_table(inst.source) / T  # log pi_i(v) up to a per-fibre constant
    log_mu = np.log(mu)
    eq41 = 0.0
    for i in range(space.length):
        nb = space.neighbours(np.arange(space.size), i)  # mu(x^{i<-a}) / mu(x^{i<-b}) vs pi_i(a)/pi_i(b)
        lhs = log_mu[nb] - log_mu[nb][:, :1]
        rhs = logc[:, i, :] - logc[:, i, :1]
        eq41 = max(eq41, float(np.abs(lhs - rhs).max()))
    return {"stationarity": stat, "detailed_balance": float(pair.max()), "eq_4_1": eq41}


@register
class Thm3(GlauberTheorem):
    id = "glauber.thm3"
    number = "Theorem 3"
    statement = ("if a compatible mu exists (Def. 1), mu is stationary for P_T and P_T is reversible: "
                 "mu(x)P(x,y) = mu(y)P(y,x); single-mask ratios equal stationary ratios (eq. 4.1)")

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(S.instances(S.compatible_sources(), max_ratio=CHAIN_RATIO), S.rational_joint_instances())

    def hypotheses(self, instance: S.Instance) -> Applicability:
        if _joint(instance) is None:
            return Applicability(False, "no compatible joint (some rectangle has R > 0)")
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        """mu = the compatible joint when there is one, else the chain's stationary law (converse)."""
        P = _kernel(instance)
        mu = _joint(instance)
        compatible = mu is not None
        if not compatible:
            mu = stationary_distribution(P)
        defects = _balance_defects(P, mu, instance)
        exact = {}
        if compatible and _is_exact(instance):
            Pe = _exact_kernel(instance)
            total = sum(int(v) for v in instance.weights)
            p = [sympy.Rational(int(v), total) for v in instance.weights]
            exact["exact_detailed_balance"] = all(p[x] * v == p[y] * Pe.get((y, x), 0) for (x, y), v in Pe.items())
            flow = [sympy.Integer(0)] * len(p)
            for (x, y), v in Pe.items():
                flow[y] += p[x] * v
            exact["exact_stationary"] = flow == p
        worst = max(defects.values())
        return _all(compare(worst, 0.0, "==", CHAIN_RTOL, compatible=compatible, **defects), **exact)

    violations = (Violation(
        "a compatible joint exists", lambda: S.instances(S.score_table_sources(64), max_ratio=CHAIN_RATIO),
        lambda inst: not Thm3().check(inst).holds,
        "incompatible score tables: the stationary law is not reversible and breaks eq. (4.1)"),)


@register
class Prop4(GlauberTheorem):
    id = "glauber.prop4"
    number = "Proposition 4"
    statement = ("compatible conditionals => every rectangle has R = |[l(x00->x10)+l(x10->x11)] - "
                 "[l(x00->x01)+l(x01->x11)]| = 0")

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(S.instances(S.compatible_sources()), S.rational_joint_instances())

    def hypotheses(self, instance: S.Instance) -> Applicability:
        if _joint(instance) is None:
            return Applicability(False, "no compatible joint")
        return Applicability(True)

    def check(self, instance: S.Instance) -> Verdict:
        rects = all_rectangles(instance.source)
        scale = max(1.0, float(np.abs(score_table(instance.source)).max()) / instance.source.temperature)
        exact = {}
        if _is_exact(instance):
            cond = _exact_conditionals(instance)
            enc = instance.space.encode
            ok = True
            for k in range(rects.count):
                x, i, j, a2, b2 = rects.states[k], rects.i[k], rects.j[k], rects.a_new[k], rects.b_new[k]
                x10, x01 = x.copy(), x.copy()
                x10[i], x01[j] = a2, b2
                a, b = x[i], x[j]
                path1 = cond[int(enc(x)), i][a2] / cond[int(enc(x)), i][a] * cond[int(enc(x10)), j][b2] / cond[int(enc(x10)), j][b]
                path2 = cond[int(enc(x)), j][b2] / cond[int(enc(x)), j][b] * cond[int(enc(x01)), i][a2] / cond[int(enc(x01)), i][a]
                ok &= path1 == path2
            exact["exact_R_zero"] = ok
        return _all(compare(rects.max / scale, 0.0, "==", LOCAL_RTOL, rectangles=rects.count, mean_R=rects.mean),
                    **exact)

    violations = (Violation(
        "compatible conditionals", lambda: S.instances(S.incompatible_sources(64)),
        lambda inst: not Prop4().check(inst).holds, "incompatible conditionals have a rectangle with R > 0"),)


@register
class Prop4Converse(GlauberTheorem):
    id = "glauber.prop4.converse"
    number = "Proposition 4 (converse, exact test)"
    statement = ("on V^n a compatible joint exists iff every rectangle has R = 0 (4-cycles generate the cycle "
                 "space of the Hamming graph); the joint integrated along paths is then the Glauber stationary law")

    def strategy(self) -> st.SearchStrategy:
        return S.instances(max_ratio=CHAIN_RATIO)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        by_rectangles = is_compatible(instance.source)
        mu = _joint(instance)
        residual = 0.0
        if mu is not None:
            residual = float(np.abs(mu @ _kernel(instance) - mu).sum())
        return _all(compare(residual, 0.0, "==", CHAIN_RTOL, compatible=by_rectangles),
                    tests_agree=by_rectangles == (mu is not None))


def _max_coupled_distance(P: np.ndarray, inst: S.Instance) -> float:
    """max over adjacent pairs (x, y = x^{j<-b}) of E[d_H(X_1, Y_1)] under the coupling 'same site k,
    maximal coupling of the two conditionals at k', conditionals read off the kernel rows:
    E = (1/n) sum_{k != j} (1 + P(disagree at k)), P(disagree) = 1 - sum_v min(p_v, q_v)."""
    space = inst.space
    n, N = space.length, space.size
    idx = np.arange(N)
    cond = np.empty((N, n, space.vocab_size))
    for k in range(n):
        nb = space.neighbours(idx, k)
        c = n * P[idx[:, None], nb]
        c[nb == idx[:, None]] = 0.0
        c[nb == idx[:, None]] = 1.0 - c.sum(axis=1)
        cond[:, k] = c
    worst = 0.0
    for j in range(n):
        for y in space.neighbours(idx, j).T:
            moved = y != idx
            disagree = 1.0 - np.minimum(cond[idx[moved]], cond[y[moved]]).sum(axis=-1)  # (M, n)
            disagree[:, j] = -1.0  # site j: both resample from the same conditional, d drops to 0
            worst = max(worst, float((1.0 + disagree).sum(axis=1).max()) / n) if moved.any() else worst
    return worst


def _contraction_verdict(instance: S.Instance, kappa: float, **details: float) -> Verdict:
    """Thm 5's conclusions for an aggregate influence kappa < 1: exact t_mix(eps) against
    ceil(n log(n/eps)/(1-kappa)), and d(t) <= n (1-(1-kappa)/n)^t for every t <= t_mix."""
    n, eps = instance.space.length, instance.eps
    P = _kernel(instance)
    t = mixing_time(P, eps)
    bound = math.ceil(n * math.log(n / eps) / (1 - kappa))
    d = distance_curve(P, t)
    envelope = n * (1 - (1 - kappa) / n) ** np.arange(t + 1)
    return _all(compare(t, bound, "<=", 0.0, tightness=bound / t, **details),
                distance_below_envelope=bool((d <= envelope + CHAIN_RTOL * np.maximum(1.0, envelope)).all()))


class _ContractionTheorem(GlauberTheorem):
    """Thm 5 with the aggregate influence named by ``aggregate`` ("rho" or "alpha")."""

    aggregate: str

    def strategy(self) -> st.SearchStrategy:
        return S.high_temperature_instances()

    def hypotheses(self, instance: S.Instance) -> Applicability:
        kappa = getattr(aggregate_influence(influence_matrix(instance.source).rho_ij), self.aggregate)
        return Applicability(kappa < 1, f"{self.aggregate} = {kappa:.4g} >= 1")

    def check(self, instance: S.Instance) -> Verdict:
        agg = aggregate_influence(influence_matrix(instance.source).rho_ij)
        return _contraction_verdict(instance, getattr(agg, self.aggregate), rho=agg.rho, alpha=agg.alpha)


@register
class Thm5(_ContractionTheorem):
    id = "glauber.thm5"
    number = "Theorem 5"
    statement = ("rho = max_j sum_{i!=j} rho_ij < 1 => d(t) <= n (1-(1-rho)/n)^t and "
                 "t_mix(eps) <= ceil(n log(n/eps) / (1-rho))")
    aggregate = "rho"

    violations = (Violation(
        "rho < 1", lambda: S.high_temperature_instances(low=0.05, high=0.5),
        lambda inst: _max_coupled_distance(_kernel(inst), inst) >= 1.0,
        "rho >= 1: some adjacent pair is not brought closer by the coupling (E d_H(X_1, Y_1) >= 1)"),)


@register
class Thm5Row(_ContractionTheorem):
    id = "glauber.thm5.row"
    number = "Theorem 5 (Dobrushin reading)"
    statement = ("alpha = max_i sum_{j!=i} rho_ij < 1 => d(t) <= n (1-(1-alpha)/n)^t and "
                 "t_mix(eps) <= ceil(n log(n/eps) / (1-alpha)) (the paper's sum is lost; the row sum works too)")
    aggregate = "alpha"


@register
class Thm5Coupling(GlauberTheorem):
    id = "glauber.thm5.coupling"
    number = "Theorem 5 (one-step contraction)"
    statement = ("same-site maximal coupling: for every adjacent pair, E[d_H(X_1,Y_1)] <= 1 - (1-rho)/n "
                 "(path coupling); tightness = exact contraction deficit / (1-rho)")

    def strategy(self) -> st.SearchStrategy:
        return S.high_temperature_instances(S.any_sources(256), max_states=256, eps=False)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return Applicability(True)

    def check(self, instance: S.Instance) -> Verdict:
        n = instance.space.length
        rho = influence_matrix(instance.source).rho
        worst = _max_coupled_distance(_kernel(instance), instance)
        deficit = n * (1 - worst)
        tight = deficit / (1 - rho) if rho < 1 and deficit > 0 else None
        return compare(worst, 1 - (1 - rho) / n, "<=", LOCAL_RTOL, tightness=tight, rho=rho)


@register
class Lemma6(GlauberTheorem):
    id = "glauber.lemma6"
    number = "Lemma 6"
    statement = ("rho_ij(T) <= tanh(Delta_ij/(4T)) <= Delta_ij/(4T), from TV(softmax(a/T), softmax(b/T)) "
                 "<= tanh(osc(a-b)/(4T))")

    def strategy(self) -> st.SearchStrategy:
        return S.instances()

    def hypotheses(self, instance: S.Instance) -> Applicability:
        ok = instance.space.length >= 2
        return Applicability(ok, "" if ok else "n = 1 has no pair i != j")

    def check(self, instance: S.Instance) -> Verdict:
        rho = influence_matrix(instance.source).rho_ij
        bound = tv_bound_from_oscillation(score_oscillation(instance.source).delta_ij, instance.source.temperature)
        off = ~np.eye(rho.shape[0], dtype=bool)
        i, j = np.unravel_index(np.argmax(np.where(off, rho - bound, -np.inf)), rho.shape)
        ratios = (bound / np.where(rho > 0, rho, np.nan))[off & (rho > 1e-12)]
        return compare(rho[i, j], bound[i, j], "<=", LOCAL_RTOL,
                       tightness=float(np.nanmin(ratios)) if ratios.size else None, pair=[int(i), int(j)])


@register
class Cor7(GlauberTheorem):
    id = "glauber.cor7"
    number = "Corollary 7"
    statement = "T > T* = (1/4) max_j sum_{i!=j} Delta_ij => rho(T) <= T*/T < 1 (so Theorem 5 applies)"

    def strategy(self) -> st.SearchStrategy:
        return S.high_temperature_instances(S.any_sources(256), max_states=256, low=1.0, high=20.0, eps=False)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        t_star = contraction_temperature(score_oscillation(instance.source).delta_ij)
        return Applicability(instance.source.temperature > t_star, f"T <= T* = {t_star:.4g}")

    def check(self, instance: S.Instance) -> Verdict:
        influence, oscillation = influence_and_oscillation(instance.source)  # one pass for both
        ratio = contraction_temperature(oscillation.delta_ij) / instance.source.temperature
        rho = influence.rho
        return _all(compare(rho, ratio, "<=", LOCAL_RTOL, tightness=ratio / rho if rho > 0 else None),
                    rho_below_one=rho < 1)


def _basin_hypotheses(instance: S.Instance) -> Applicability:
    B = instance.basin
    if B is None or B.all() or not B.any():
        return Applicability(False, "the basin must be a proper non-empty set")
    margin = basin_margin(instance.source, B)
    if not margin.holds:
        return Applicability(False, f"Assumption 1 fails (gamma = {margin.gamma:.4g}, all argmax = {margin.all_argmax})")
    return _positive(instance)


@register
class Thm8Escape(GlauberTheorem):
    id = "glauber.thm8.escape"
    number = "Theorem 8 (escape)"
    statement = "Assumption 1 on B with margin gamma => P_T(x, B^c) <= (m_x/n)(|V|-1) e^{-gamma/T} for every x in B"

    def strategy(self) -> st.SearchStrategy:
        return S.basin_instances()

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _basin_hypotheses(instance)

    def check(self, instance: S.Instance) -> Verdict:
        B = instance.basin
        margin = basin_margin(instance.source, B)
        P = _kernel(instance)
        escape = P[np.ix_(margin.states, np.flatnonzero(~B))].sum(axis=1)
        T, q, n = instance.source.temperature, instance.space.vocab_size, instance.space.length
        bound = np.array([escape_bound(margin.gamma, T, q, int(m), n) for m in margin.exit_sites])
        exiting = margin.exit_sites > 0  # interior states of B cannot leave in one step: 0 <= 0
        k = int(np.flatnonzero(exiting)[np.argmax(escape[exiting] / bound[exiting])])
        tight = bound[escape > 0] / escape[escape > 0]
        return compare(escape[k], bound[k], "<=", LOCAL_RTOL, tightness=float(tight.min()) if tight.size else None,
                       gamma=margin.gamma, state=int(margin.states[k]))


@register
class Thm8Conductance(GlauberTheorem):
    id = "glauber.thm8.conductance"
    number = "Theorem 8 (conductance)"
    statement = "Assumption 1 on B => Phi(B) = Q(B, B^c)/mu_T(B) <= (|V|-1) e^{-gamma/T}"

    def strategy(self) -> st.SearchStrategy:
        return S.basin_instances(max_ratio=CHAIN_RATIO)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _basin_hypotheses(instance)

    def check(self, instance: S.Instance) -> Verdict:
        margin = basin_margin(instance.source, instance.basin)
        phi = set_conductance(_kernel(instance), instance.basin)
        bound = escape_bound(margin.gamma, instance.source.temperature, instance.space.vocab_size)
        return compare(phi, bound, "<=", CHAIN_RTOL, tightness=bound / phi if phi > 0 else None, gamma=margin.gamma)


@register
class Thm8Mixing(GlauberTheorem):
    id = "glauber.thm8.mixing"
    number = "Theorem 8 (mixing)"
    statement = "Assumption 1 on B and mu_T(B) <= 1/2 => t_mix >= 1/(4 Phi(B)) >= e^{gamma/T} / (4(|V|-1))"

    def strategy(self) -> st.SearchStrategy:
        return S.basin_instances(two_wells=True, max_ratio=CHAIN_RATIO)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        ok = _basin_hypotheses(instance)
        if not ok:
            return ok
        mass = float(stationary_distribution(_kernel(instance))[instance.basin].sum())
        return Applicability(mass <= 0.5, f"mu_T(B) = {mass:.4g} > 1/2")

    def check(self, instance: S.Instance) -> Verdict:
        margin = basin_margin(instance.source, instance.basin)
        P = _kernel(instance)
        t = mixing_time(P)
        phi = set_conductance(P, instance.basin)
        bound = mixing_lower_bound(margin.gamma, instance.source.temperature, instance.space.vocab_size)
        return _all(compare(t, bound, ">=", 0.0, tightness=t / bound, gamma=margin.gamma, conductance=phi),
                    t_mix_above_conductance_bound=t >= 1 / (4 * phi) * (1 - CHAIN_RTOL))

    violations = (Violation(
        "Assumption 1 (argmax at exit-causing sites)", lambda: S.marginless_basin_instances(),
        lambda inst: _escape_beyond_positive_margin(inst),
        "a basin state that is not an argmax at one site escapes with probability >= 1/(2n) at every T: "
        "the margin of its other exit pairs no longer bounds the escape"),)


def _escape_beyond_positive_margin(inst: S.Instance) -> bool:
    """For a singleton basin {x}: P_T(x, B^c) > (m_x/n)(|V|-1) e^{-g/T}, g = the smallest positive gap
    s_i(x_i) - s_i(v) over exit pairs (the margin Assumption 1 would give without the argmax part)."""
    x = int(np.flatnonzero(inst.basin)[0])
    scores = score_table(inst.source)[x]  # (n, q)
    current = scores[np.arange(inst.space.length), inst.space.decode(x)]
    gaps = (current[:, None] - scores)[scores != current[:, None]]
    g = float(gaps[gaps > 0].min()) if (gaps > 0).any() else math.inf
    n = inst.space.length
    escape = 1.0 - float(_kernel(inst)[x, x])
    return escape > escape_bound(g, inst.source.temperature, inst.space.vocab_size, n, n)


@register
class Drift(GlauberTheorem):
    id = "glauber.drift"
    number = "Section 5.4 (drift certificate)"
    statement = ("D(x) = (1/n) sum_i (1[x_i not in A] pi_i(A|x_{-i}) - 1[x_i in A] pi_i(V\\A|x_{-i})) equals "
                 "E[N(X_1) - N(x)] under P_T = P(N up) - P(N down); D > 0 on {N = k} pushes the count into {N >= k}")

    def strategy(self) -> st.SearchStrategy:
        return S.drift_instances(max_states=64)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        space = instance.space
        states = space.all_states()
        A = np.zeros(space.vocab_size, dtype=bool)
        A[list(instance.symbols)] = True
        N = A[states].sum(axis=1).astype(np.float64)
        D = count_drift(instance.source, states, instance.symbols)
        P = _kernel(instance)
        expected = P @ N - N
        up = (P * (N[None, :] == N[:, None] + 1)).sum(axis=1)
        down = (P * (N[None, :] == N[:, None] - 1)).sum(axis=1)
        boundary = N == instance.level
        exits = expected_hitting_times(P, N < instance.level)
        return _all(compare(float(np.abs(D - expected).max()), 0.0, "==", LOCAL_RTOL,
                            boundary_min_drift=float(D[boundary].min()),
                            boundary_mean_exit_time=float(exits[boundary].mean())),
                    single_steps=bool(np.abs(D - (up - down)).max() <= 1e-12))
