"""Paper G, sections 3 and 4: the Glauber kernel is a Markov kernel and ergodic under positivity
(Proposition 1, Corollary 2), a compatible law is stationary and reversible (Theorem 3), and
compatibility closes every rectangle (Proposition 4 and its converse); rational instances are also
certified in exact sympy arithmetic."""

from __future__ import annotations

import math

import numpy as np
import sympy
from hypothesis import strategies as st
from scipy.special import log_softmax

from mlmix.errors import ReducibleChainError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.structure import communicating_classes
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.local.rectangles import all_rectangles, compatible_joint, is_compatible
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.theory.sources.contexts import score_table
from mlmix.theory.sources.space import StateSpace
from mlmix.verify import instances as S
from mlmix.verify.regime_instances import (
    SupportedScoreTable,
    _consensus_mask,
    basin_instances,
    zero_conditional_instances,
)
from mlmix.verify.theorems.glauber.glauber_base import (
    CHAIN_RTOL,
    LOCAL_RTOL,
    TV_ATOL,
    GlauberTheorem,
    _conditionals,
    _kernel,
    _pi,
    _positive,
    identity,
)
from mlmix.verify.verdicts import (
    Applicability,
    Attaining,
    Counterexample,
    Part,
    Verdict,
    Violation,
    compare,
    part,
    register,
    verdict,
)

#: Largest state count of the sympy certificates (they are O(N^2) rational operations).
EXACT_LIMIT = 16


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


def _score_instance(q: int, n: int, scores: list, temperature: float = 1.0, kind: str = "score-table") -> S.Instance:
    """A stored score-table instance (for counterexamples)."""
    table = np.asarray(scores, dtype=np.float64)
    return S.Instance(ScoreTable(StateSpace(q, n), table, temperature), kind, {"scores": table.tolist()})


@register
class Prop1(GlauberTheorem):
    id = "glauber.prop1"
    number = "Proposition 1 (App. E: Proposition 9)"
    statement = ("P_T(x,y) = (1/n) sum_i 1[y_{-i}=x_{-i}] pi_i^T(y_i|x_{-i}) is a Markov kernel (rows sum to 1); "
                 "with positive conditionals it is irreducible and aperiodic (P_T(x,x) = (1/n) sum_i "
                 "pi_i^T(x_i|x_{-i}) > 0)")

    def strategy(self) -> st.SearchStrategy:
        return S.half_large(st.one_of(S.instances(max_ratio=60.0), S.rational_table_instances(),
                                      S.rational_joint_instances()), max_ratio=60.0)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        P = glauber_kernel(instance.source)
        rows = np.asarray(P.sum(axis=1)).ravel()
        n = instance.space.length
        cond = _conditionals(instance)
        states = instance.space.all_states()
        own = cond[np.arange(instance.space.size)[:, None], np.arange(n)[None, :], states].sum(axis=1) / n
        diag = P.diagonal()
        rows_part, rows_ok = identity("rows sum to 1", rows, np.ones_like(rows), LOCAL_RTOL * n, 0.0)
        diag_part, diag_ok = identity("P(x,x) = (1/n) sum_i pi_i(x_i|x_-i)", diag, own, LOCAL_RTOL * n)
        classes, _ = communicating_classes(P)
        conditions = {"every row sums to 1": rows_ok, "diagonal matches conditionals": diag_ok,
                      "irreducible": len(classes) == 1, "aperiodic (P(x,x) > 0)": bool(diag.min() > 0)}
        if _is_exact(instance):
            Pe = _exact_kernel(instance)
            sums = [sum((p for (x, _), p in Pe.items() if x == r), sympy.Integer(0)) for r in range(instance.space.size)]
            conditions["exact rows sum to 1"] = all(s == 1 for s in sums)
            conditions["float kernel = exact kernel"] = max(abs(float(p) - P[x, y]) for (x, y), p in Pe.items()) <= 1e-12
        return verdict(rows_part, diag_part, conditions=conditions, communicating_classes=len(classes))

    violations = (Violation(
        "positive conditionals", lambda: zero_conditional_instances(),
        lambda inst: len(communicating_classes(glauber_kernel(inst.source))[0]) > 1,
        "conditionals with zeros give a reducible chain"),)
    counterexamples = (Counterexample(
        "|V| = 2, n = 2, every site forced to symbol 0: 4 communicating classes",
        lambda: S.Instance(SupportedScoreTable(StateSpace(2, 2), np.zeros((2, 2, 2)),
                                                 np.stack([np.ones((2, 2), bool), np.zeros((2, 2), bool)], -1)),
                           "zero-conditionals", {"allowed": "symbol 0 only"}),
        dropped="positive conditionals"),)


def _dobrushin(M: np.ndarray) -> float:
    """delta(M) = max_{x,y} TV(M(x,.), M(y,.)) (Dobrushin's ergodic coefficient)."""
    return float(max(0.5 * np.abs(M[x][None, :] - M).sum(axis=1).max() for x in range(M.shape[0])))


@register
class Cor2(GlauberTheorem):
    id = "glauber.cor2"
    number = "Corollary 2"
    statement = ("positive conditionals => a unique stationary law mu_T (mu_T P_T = mu_T, one eigenvalue of modulus "
                 "1) and d(t) = max_x TV(P^t(x,.), mu_T) -> 0; checked through the convergence bound "
                 "d(jn) <= delta(P^n)^j, delta = Dobrushin's coefficient max_{x,y} TV(P^n(x,.), P^n(y,.)) < 1")
    conventions = "TV is half the L1 distance; d(t) is the worst start (max over x), not one start."
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return S.half_large(st.one_of(S.instances(max_states=256, max_ratio=30.0),
                                      basin_instances(max_states=81, two_wells=True, max_ratio=20.0)), 256)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        P = _kernel(instance)
        n = instance.space.length
        try:
            res = Chain(P).stationary
        except ReducibleChainError as err:
            # several closed classes refute uniqueness: their number against the one the corollary gives
            return compare(len(err.closed_classes), 1.0, "==", name="closed classes == 1")
        pi = res.value
        stat, stat_ok = identity("mu P = mu", pi @ P, pi, CHAIN_RTOL)
        moduli = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
        Pn = np.linalg.matrix_power(P, n)
        delta = _dobrushin(Pn)
        # d(jn) <= delta^j for j = 1..J while delta^j stays resolved
        J = max(1, min(12, int(math.log(1e-8) / math.log(delta)) if 0 < delta < 1 else 1))
        M, worst = np.eye(P.shape[0]), None
        for j in range(1, J + 1):
            M = M @ Pn
            d = float(0.5 * np.abs(M - pi[None, :]).sum(axis=1).max())
            candidate = (d, delta**j, j)
            if worst is None or d / delta**j > worst[0] / worst[1]:
                worst = candidate
        d, bound, j = worst
        conv = Part("d(jn) <= delta(P^n)^j", d, bound, "<=", TV_ATOL, CHAIN_RTOL * bound)
        return verdict(conv, stat, conditions={"mu P = mu everywhere": stat_ok,
                                               "one eigenvalue of modulus 1": bool(moduli[1] < 1 - 1e-12 or
                                                                                  res.residual < 1e-12),
                                               "delta(P^n) < 1": delta < 1},
                       j=j, dobrushin=delta, second_modulus=float(moduli[1]))

    violations = (Violation(
        "positive conditionals", lambda: zero_conditional_instances(),
        lambda inst: sum(communicating_classes(glauber_kernel(inst.source))[1]) > 1,
        "conditionals with zeros give several closed classes, hence several stationary laws"),)
    counterexamples = (Counterexample(
        "|V| = 2, n = 2, each site copies the other: 00 and 11 absorbing (two closed classes)",
        lambda: S.Instance(SupportedScoreTable(StateSpace(2, 2), np.zeros((2, 2, 2)), _consensus_mask(2, 2)),
                           "zero-conditionals", {"allowed": "copy the other site"}),
        dropped="positive conditionals"),)
    attaining = (Attaining("two independent binary sites, each with score h = 8 on symbol 0, T = 1: mu_T is nearly "
                           "the point mass at 00, so d(n) = TV(P^n(11,.), mu) = TV(P^n(11,.), P^n(00,.)) / (1 + "
                           "e^{-h}): delta(P^n) / d(n) = 1 + e^{-8} = 1.000335",
                           lambda: field_product_instance(8.0), looseness=1.00034),)


def field_product_instance(h: float, T: float = 1.0) -> S.Instance:
    """Two independent binary sites, score h on symbol 0 and 0 on symbol 1 at every context."""
    table = np.zeros((2, 2, 2))
    table[:, :, 0] = h
    return _score_instance(2, 2, table.tolist(), T, "product-table")


@register
class Thm3(GlauberTheorem):
    id = "glauber.thm3"
    number = "Theorem 3"
    statement = ("if a compatible mu exists (Def. 1), mu is stationary for P_T and P_T is reversible: "
                 "mu(x)P(x,y) = mu(y)P(y,x); single-mask ratios equal stationary ratios (eq. 4.1): "
                 "pi(x^{i<-a}) / pi(x^{i<-b}) = exp((s_i(a|x_-i) - s_i(b|x_-i))/T)")
    conventions = ("pi is the chain's own stationary law (GTH elimination / detailed balance on P), mu the "
                   "closed-form joint (Ising, Potts, log-weights) or the joint integrated along paths; the two are "
                   "computed independently.")

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(S.instances(S.compatible_sources(), max_ratio=40.0), S.rational_joint_instances())

    def hypotheses(self, instance: S.Instance) -> Applicability:
        if not is_compatible(instance.source):
            return Applicability(False, "no compatible joint (some rectangle has R > 0)")
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        P = _kernel(instance)
        pi = _pi(P)
        lw = instance.source.log_joint()
        mu = np.exp(log_softmax(lw)) if lw is not None else compatible_joint(instance.source)
        if mu is None:  # only reached when the hypothesis is dropped
            mu = pi
        k = int(np.argmax(np.abs(np.log(mu) - np.log(mu).min())))
        low = int(np.argmin(mu))
        stat = part("pi(x)/pi(x_min) = mu(x)/mu(x_min)", pi[k] / pi[low], mu[k] / mu[low], "==", CHAIN_RTOL,
                    ratio=False)
        stat_ok = bool(np.abs(pi / mu - 1).max() <= CHAIN_RTOL * instance.space.size)
        F = pi[:, None] * P
        x, y = np.unravel_index(np.argmax(np.where(np.eye(P.shape[0], dtype=bool), 0, F)), F.shape)
        balance = part("pi(x)P(x,y) = pi(y)P(y,x)", F[x, y], F[y, x], "==", CHAIN_RTOL, ratio=False)
        off = F > 0
        balance_ok = bool((np.abs(F - F.T)[off] <= CHAIN_RTOL * np.maximum(F, F.T)[off]).all())
        # eq. (4.1): stationary ratios along every single-site fibre against the scores
        space, T = instance.space, instance.source.temperature
        table = score_table(instance.source) / T
        log_pi = np.log(pi)
        best, eq_ok = None, True
        for i in range(space.length):
            nb = space.neighbours(np.arange(space.size), i)
            lhs = log_pi[nb] - log_pi[nb][:, :1]
            rhs = table[:, i, :] - table[:, i, :1]
            eq_ok &= bool((np.abs(lhs - rhs) <= CHAIN_RTOL * (1 + np.abs(rhs))).all())
            r, c = np.unravel_index(np.argmax(np.abs(rhs)), rhs.shape)
            if best is None or abs(rhs[r, c]) > abs(best[1]):
                best = (lhs[r, c], rhs[r, c])
        eq41 = part("eq. (4.1): log pi ratio = score difference / T", best[0], best[1], "==", CHAIN_RTOL,
                    atol=CHAIN_RTOL, ratio=False)
        conditions = {"stationary everywhere": stat_ok, "detailed balance everywhere": balance_ok,
                      "eq. (4.1) everywhere": eq_ok}
        if _is_exact(instance):
            Pe = _exact_kernel(instance)
            total = sum(int(v) for v in instance.weights)
            p = [sympy.Rational(int(v), total) for v in instance.weights]
            conditions["exact detailed balance"] = all(p[a] * v == p[b] * Pe.get((b, a), 0) for (a, b), v in Pe.items())
            flow = [sympy.Integer(0)] * len(p)
            for (a, b), v in Pe.items():
                flow[b] += p[a] * v
            conditions["exact stationarity"] = flow == p
        trivial = "uniform law: every ratio is 1" if np.ptp(np.log(mu)) < 1e-12 else None
        return verdict(eq41, stat, balance, conditions=conditions, trivial=trivial)

    violations = (Violation(
        "a compatible joint exists", lambda: S.instances(S.incompatible_sources(64), max_ratio=30.0),
        lambda inst: not Thm3().check(inst).holds,
        "incompatible score tables: the stationary law is not reversible and breaks eq. (4.1)"),)
    counterexamples = (Counterexample(
        "|V| = 2, n = 2, scores 1/2 except s_0(0 | x_1 = 0) = 0: not reversible, eq. (4.1) off by 0.14",
        lambda: _score_instance(2, 2, [[[0.0, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]]]),
        dropped="a compatible joint exists"),)


def _path_values(inst: S.Instance, rects) -> tuple[np.ndarray, np.ndarray]:
    """path_1 and path_2 of every rectangle from the log-conditionals log softmax(s/T) (not the raw
    score differences that :func:`all_rectangles` uses)."""
    space = inst.space
    logc = log_softmax(score_table(inst.source) / inst.source.temperature, axis=-1)
    x = rects.states
    rows = np.arange(x.shape[0])
    a, b = x[rows, rects.i], x[rows, rects.j]
    x10, x01 = x.copy(), x.copy()
    x10[rows, rects.i] = rects.a_new
    x01[rows, rects.j] = rects.b_new
    e00, e10, e01 = space.encode(x), space.encode(x10), space.encode(x01)
    edge = lambda e, site, old, new: logc[e, site, new] - logc[e, site, old]
    p1 = edge(e00, rects.i, a, rects.a_new) + edge(e10, rects.j, b, rects.b_new)
    p2 = edge(e00, rects.j, b, rects.b_new) + edge(e01, rects.i, a, rects.a_new)
    return p1, p2


@register
class Prop4(GlauberTheorem):
    id = "glauber.prop4"
    number = "Proposition 4"
    statement = ("compatible conditionals => every rectangle has R = |[l(x00->x10)+l(x10->x11)] - "
                 "[l(x00->x01)+l(x01->x11)]| = 0: both paths equal log mu(x11) - log mu(x00)")

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(S.instances(S.compatible_sources(), max_states=243), S.rational_joint_instances())

    def hypotheses(self, instance: S.Instance) -> Applicability:
        ok = instance.space.length >= 2 and is_compatible(instance.source)
        return Applicability(ok, "" if ok else "no compatible joint (or n = 1: no rectangle)")

    def check(self, instance: S.Instance) -> Verdict:
        rects = all_rectangles(instance.source)
        p1, p2 = _path_values(instance, rects)
        scale = max(1.0, float(np.abs(p1).max()))
        paths, paths_ok = identity("path 1 = path 2", p1, p2, LOCAL_RTOL * 100, LOCAL_RTOL * 100 * scale)
        conditions = {"paths agree on every rectangle": paths_ok,
                      "all_rectangles: R = |path 1 - path 2|": bool(np.abs(rects.values - np.abs(p1 - p2)).max()
                                                                    <= 1e-9 * scale)}
        if _is_exact(instance):
            cond = _exact_conditionals(instance)
            enc = instance.space.encode
            ok = True
            for k in range(rects.count):
                x, i, j, a2, b2 = rects.states[k], rects.i[k], rects.j[k], rects.a_new[k], rects.b_new[k]
                x10, x01 = x.copy(), x.copy()
                x10[i], x01[j] = a2, b2
                a, b = x[i], x[j]
                e, e10, e01 = int(enc(x)), int(enc(x10)), int(enc(x01))
                path1 = cond[e, i][a2] / cond[e, i][a] * cond[e10, j][b2] / cond[e10, j][b]
                path2 = cond[e, j][b2] / cond[e, j][b] * cond[e01, i][a2] / cond[e01, i][a]
                ok &= path1 == path2
            conditions["exact: path products equal"] = ok
        trivial = "every conditional uniform: both paths are 0" if np.abs(p2).max() == 0 else None
        return verdict(paths, conditions=conditions, trivial=trivial, rectangles=rects.count, max_R=rects.max)

    violations = (Violation(
        "compatible conditionals", lambda: S.instances(S.incompatible_sources(64)),
        lambda inst: all_rectangles(inst.source).max > 1e-6, "incompatible conditionals have a rectangle with R > 0"),)
    counterexamples = (Counterexample(
        "|V| = 2, n = 2, scores 1/2 except s_0(0 | x_1 = 0) = 0: its single rectangle has R = 1/2",
        lambda: _score_instance(2, 2, [[[0.0, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]]]),
        dropped="compatible conditionals"),)


@register
class Prop4Converse(GlauberTheorem):
    id = "glauber.prop4.converse"
    number = "Proposition 4 (converse, exact test)"
    statement = ("on V^n with positive conditionals, a compatible joint exists iff every rectangle has R = 0 (4-cycles "
                 "generate the cycle space of the Hamming graph); Kolmogorov's ratio around each rectangle of P_T "
                 "is e^{+-R}, so R > 0 makes P_T non-reversible, and with R = 0 the joint integrated along paths is "
                 "stationary")

    def strategy(self) -> st.SearchStrategy:
        return S.instances(max_states=243, max_ratio=30.0)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        if instance.space.length < 2:
            return Applicability(False, "n = 1: no rectangle")
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        rects = all_rectangles(instance.source)
        P = _kernel(instance)
        space = instance.space
        k = int(np.argmax(rects.values))
        x, i, j, a2, b2 = rects.states[k], rects.i[k], rects.j[k], rects.a_new[k], rects.b_new[k]
        x10, x01, x11 = x.copy(), x.copy(), x.copy()
        x10[i] = x11[i] = a2
        x01[j] = x11[j] = b2
        e = [int(space.encode(s)) for s in (x, x10, x11, x01)]
        forward = P[e[0], e[1]] * P[e[1], e[2]] * P[e[2], e[3]] * P[e[3], e[0]]
        backward = P[e[1], e[0]] * P[e[2], e[1]] * P[e[3], e[2]] * P[e[0], e[3]]
        kolmogorov = part("|log Kolmogorov cycle ratio| = R", abs(math.log(forward / backward)), rects.values[k], "==",
                          1e-9, 1e-12, ratio=False)
        compatible = bool(is_compatible(instance.source))
        mu = compatible_joint(instance.source)
        parts = [kolmogorov]
        if mu is not None:
            stat, stat_ok = identity("integrated joint is stationary", mu @ P, mu, CHAIN_RTOL)
            parts.append(stat)
        else:
            stat_ok = True
        trivial = "compatible: R = 0 and the cycle ratio is 1" if compatible else None
        return verdict(*parts, conditions={"rectangle test agrees with path integration": compatible == (mu is not None),
                                           "integrated joint stationary everywhere": stat_ok},
                       trivial=trivial, compatible=compatible, max_R=rects.max)
