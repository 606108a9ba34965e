"""Paper G (Mixing Times of Glauber Dynamics on Masked Language Models): every result as a
checkable theorem object whose check can fail.

Each check computes both sides of every inequality exactly on an instance of at most 729 states
(81 for the Wasserstein linear programmes of Theorem 5): transition matrices from
:mod:`mlmix.theory.kernels.assembled`, stationary laws by GTH elimination or detailed balance (entrywise
relative accuracy), exact worst-start TV mixing times, local quantities from
:mod:`mlmix.theory.local.influence`, :mod:`mlmix.theory.local.rectangles` and :mod:`mlmix.theory.local.margins`.
Identities compare two independent computations (the kernel against the conditionals, the
stationary law of the chain against a closed-form joint, Kolmogorov cycle ratios against the
rectangle statistic), so that scaling one side by 2 makes the check fail. Rational instances
(positive integer weights at T = 1) are also certified in exact sympy arithmetic.

The paper's appendix restates four results under other numbers (Prop. 9 = Prop. 1,
Thm 10 = Thm 5, Lemma 11 = Lemma 6, Thm 12 = Thm 8); the ``number`` of each object names both.
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx
import numpy as np
import sympy
from hypothesis import strategies as st
from scipy.special import log_softmax, softmax

from mlmix.errors import ReducibleChainError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.structure import communicating_classes
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.linalg.matrices import to_dense
from mlmix.theory.local.influence import (
    aggregate_influence,
    contraction_temperature,
    influence_and_oscillation,
    influence_matrix,
    score_oscillation,
    tv_bound_from_oscillation,
)
from mlmix.theory.local.margins import basin_margin, count_drift
from mlmix.theory.local.rectangles import all_rectangles, compatible_joint, is_compatible
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable
from mlmix.theory.sources.contexts import score_table
from mlmix.theory.sources.space import StateSpace
from mlmix.verify import instances as S
from mlmix.verify.verdicts import (
    Applicability,
    Attaining,
    Counterexample,
    Part,
    Theorem,
    Verdict,
    Violation,
    compare,
    part,
    register,
    verdict,
)
from mlmix.verify.wasserstein import hamming_w1

#: Relative error of quantities computed from softmax conditionals (a few ulps per operation).
LOCAL_RTOL = 1e-12
#: Relative error of quantities built from a stationary law (GTH / detailed balance are entrywise
#: accurate to a few hundred ulps on <= 729 states) and matrix powers.
CHAIN_RTOL = 1e-9
#: Absolute error of a worst-start TV distance computed from dense matrix powers.
TV_ATOL = 1e-10

#: Largest state count of the sympy certificates (they are O(N^2) rational operations).
EXACT_LIMIT = 16


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


def _pi(P: np.ndarray) -> np.ndarray:
    """The stationary law (GTH elimination or detailed balance: entrywise relative accuracy)."""
    return Chain(P).stationary.value


def _conditionals(inst: S.Instance) -> np.ndarray:
    """pi_i(v | x_{-i}) for every state, site and symbol, from the scores (independent of the kernel)."""
    return softmax(score_table(inst.source) / inst.source.temperature, axis=-1)


def identity(name: str, a: np.ndarray, b: np.ndarray, rtol: float, atol: float = 0.0) -> tuple[Part, bool]:
    """Two computations of the same array: the part compares them at the entry where ``b`` is largest
    in modulus (so scaling one side fails unless that entry is 0); the flag says whether every entry
    agrees within rtol |b| + atol."""
    a, b = np.ravel(np.asarray(a, dtype=np.float64)), np.ravel(np.asarray(b, dtype=np.float64))
    k = int(np.argmax(np.abs(b)))
    ok = bool((np.abs(a - b) <= rtol * np.maximum(np.abs(a), np.abs(b)) + atol).all())
    return part(name, a[k], b[k], "==", rtol, atol, ratio=False), ok


def mixing_part(name: str, P: np.ndarray, eps: float, pi: np.ndarray, bound: float, relation: str) -> Part:
    """t_mix(eps) against ``bound``: exact when the chain's powers resolve it, else its certified
    interval, whose width becomes the error of the side (a violation is then reported only when the
    whole interval violates the bound) (:meth:`mlmix.theory.chain.markov_chain.Chain.mixing_time`)."""
    if pi.min() < 1e-300:  # the stationary law underflows: t_mix is not resolvable here (an unknown side)
        return Part(name, bound, bound, relation, math.inf, 0.0)
    t = Chain(P, stationary=pi).mixing_time(eps)
    if t.resolved:
        return Part(name, float(t.value), bound, relation, 0.0, LOCAL_RTOL * abs(bound))
    lo = float(t.lower or 0.0)
    hi = float(t.upper) if t.upper is not None else max(lo, bound)
    return Part(name, (lo + hi) / 2, bound, relation, (hi - lo) / 2, LOCAL_RTOL * abs(bound))


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


def two_spin_ising(J: float = 0.4, T: float = 1.3) -> S.Instance:
    """Two spins, coupling J, zero fields: rho_01 = tanh(J/T) = tanh(Delta/(4T)) (a zero local field is
    attainable), and the same-site maximal coupling is the optimal one (W1 = 1 - (1 - rho)/2)."""
    model = IsingModel(nx.path_graph(2), couplings=J).at_temperature(T)
    return S.Instance(model, "ising", {"edges": [[0, 1]], "J": [J], "h": [0.0, 0.0]})


def singleton_basin(margin: float = 1.0, T: float = 0.5) -> S.Instance:
    """B = {00} on {0,1}^2 with every exit token exactly ``margin`` below: P(00, B^c) = 1/(1 + e^{gamma/T})."""
    space = StateSpace(2, 2)
    table = np.zeros((2, 2, 2))
    basin = np.zeros(4, dtype=bool)
    basin[0] = True
    S.boost_basin(table, space, basin, margin)
    return S.Instance(ScoreTable(space, table, T), "basin-table", {"scores": table.tolist(), "margin": margin},
                      basin=basin)


def line_basin(margin: float = 1.0, T: float = 0.5) -> S.Instance:
    """B = {000, 100} on {0,1}^3 (site 0 moves inside B): m_x = 2 < n = 3 exit sites at both states, every
    exit token exactly ``margin`` below, so P(x, B^c) = (2/3)/(1 + e^{gamma/T}) exactly (a bound with n in
    place of m_x is 3/2 looser here)."""
    space = StateSpace(2, 3)
    states = space.all_states()
    table = np.zeros((3, 4, 2))
    basin = (states[:, 1] == 0) & (states[:, 2] == 0)
    S.boost_basin(table, space, basin, margin)
    return S.Instance(ScoreTable(space, table, T), "basin-table", {"scores": table.tolist(), "margin": margin},
                      basin=basin)


def _score_instance(q: int, n: int, scores: list, temperature: float = 1.0, kind: str = "score-table") -> S.Instance:
    """A stored score-table instance (for counterexamples)."""
    table = np.asarray(scores, dtype=np.float64)
    return S.Instance(ScoreTable(StateSpace(q, n), table, temperature), kind, {"scores": table.tolist()})


# ----------------------------------------------------------------------------------------------


class GlauberTheorem(Theorem):
    paper = "glauber"


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
        "positive conditionals", lambda: S.zero_conditional_instances(),
        lambda inst: len(communicating_classes(glauber_kernel(inst.source))[0]) > 1,
        "conditionals with zeros give a reducible chain"),)
    counterexamples = (Counterexample(
        "|V| = 2, n = 2, every site forced to symbol 0: 4 communicating classes",
        lambda: S.Instance(S.SupportedScoreTable(StateSpace(2, 2), np.zeros((2, 2, 2)),
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
                                      S.basin_instances(max_states=81, two_wells=True, max_ratio=20.0)), 256)

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
        "positive conditionals", lambda: S.zero_conditional_instances(),
        lambda inst: sum(communicating_classes(glauber_kernel(inst.source))[1]) > 1,
        "conditionals with zeros give several closed classes, hence several stationary laws"),)
    counterexamples = (Counterexample(
        "|V| = 2, n = 2, each site copies the other: 00 and 11 absorbing (two closed classes)",
        lambda: S.Instance(S.SupportedScoreTable(StateSpace(2, 2), np.zeros((2, 2, 2)), S._consensus_mask(2, 2)),
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


# ----------------------------------------------------------------------------------------------
# Theorem 5


def _adjacent_pairs(space) -> np.ndarray:
    """Every unordered adjacent pair (x, y), x < y, as an array (M, 2)."""
    idx = np.arange(space.size)
    out = []
    for i in range(space.length):
        nb = space.neighbours(idx, i)
        for v in range(space.vocab_size):
            keep = nb[:, v] > idx
            out.append(np.stack([idx[keep], nb[keep, v]], axis=1))
    return np.concatenate(out)


def coupled_distances(P: np.ndarray, inst: S.Instance) -> np.ndarray:
    """For every adjacent pair (x, y = x^{j<-b}) of :func:`_adjacent_pairs`: E[d_H(X_1, Y_1)] under the
    coupling 'same site k, maximal coupling of the two conditionals at k', conditionals read off the
    kernel rows: E = (1/n) sum_{k != j} (1 + TV_k(x, y))."""
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
    pairs = _adjacent_pairs(space)
    x, y = pairs[:, 0], pairs[:, 1]
    j = np.argmax(space.decode(x) != space.decode(y), axis=1)
    disagree = 1.0 - np.minimum(cond[x], cond[y]).sum(axis=-1)  # (M, n)
    disagree[np.arange(x.size), j] = -1.0  # site j: both resample from the same conditional, d drops to 0
    return (1.0 + disagree).sum(axis=1) / n


def _max_coupled_distance(P: np.ndarray, inst: S.Instance) -> float:
    return float(coupled_distances(P, inst).max())


def _aggregate_below_one(instance: S.Instance, aggregate: str) -> Applicability:
    """Positive conditionals and the aggregate influence ("rho": column sums, "alpha": row sums) < 1."""
    if not _positive(instance):
        return _positive(instance)
    kappa = getattr(aggregate_influence(influence_matrix(instance.source).rho_ij), aggregate)
    return Applicability(kappa < 1, f"{aggregate} = {kappa:.4g} >= 1")


#: Times and number of sampled pairs of the multi-step Wasserstein check of Theorem 5.
W1_TIMES = (2, 3, 5)
W1_PAIRS = 6


@register
class Thm5(GlauberTheorem):
    id = "glauber.thm5"
    number = "Theorem 5 (App. E: Theorem 10)"
    statement = ("rho = max_j sum_{i!=j} rho_ij < 1 => there is a coupling with E d_H(X_t, Y_t) <= "
                 "(1 - (1-rho)/n)^t d_H(x, y) for all x, y, t; checked through the exact Wasserstein distance "
                 "W1(P^t(x,.), P^t(y,.)) (Hamming cost, linear programme) for every adjacent pair at t = 1 "
                 "and sampled pairs at t = 2, 3, 5")
    conventions = ("rho with column sums (influence exerted by site j): the reading the path coupling needs; with "
                   "row sums (Dobrushin's alpha) the contraction is false (glauber.thm5.row.contraction).")
    budget = 0.4

    def strategy(self) -> st.SearchStrategy:
        return S.contraction_instances(S.mostly_incompatible(81), max_states=81, eps=False)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _aggregate_below_one(instance, "rho")

    def check(self, instance: S.Instance) -> Verdict:
        space = instance.space
        n = space.length
        rho = influence_matrix(instance.source).rho
        kappa = 1 - (1 - rho) / n
        P = _kernel(instance)
        pairs = _adjacent_pairs(space)
        lo, hi = hamming_w1([(P[x], P[y]) for x, y in pairs], space)
        k = int(np.argmax(hi))
        one = Part("one step, adjacent pairs: W1 <= 1 - (1-rho)/n", hi[k], kappa, "<=", hi[k] - lo[k],
                   LOCAL_RTOL * 10)
        # several t: the worst adjacent pair, the farthest pair from it, and seeded random pairs
        rng = np.random.default_rng(space.size * 7919 + int(1e6 * instance.source.temperature) % 7919)
        x0, y0 = pairs[k]
        far = int(np.argmax(space.hamming(x0, np.arange(space.size))))
        chosen = [(x0, y0), (x0, far)] + [tuple(rng.choice(space.size, 2, replace=False)) for _ in range(W1_PAIRS - 2)]
        worst = None
        for t in W1_TIMES:
            Pt = np.linalg.matrix_power(P, t)
            l_t, h_t = hamming_w1([(Pt[a], Pt[b]) for a, b in chosen], space)
            for (a, b), lo_ab, hi_ab in zip(chosen, l_t, h_t):
                d = int(space.hamming(a, b))
                ratio = hi_ab / (kappa**t * d)
                if worst is None or ratio > worst[0]:
                    worst = (ratio, hi_ab / d, kappa**t, (hi_ab - lo_ab) / d, t, [int(a), int(b)])
        _, lhs, rhs, err, t, pair = worst
        multi = Part("t steps: W1 / d_H(x,y) <= (1 - (1-rho)/n)^t", lhs, rhs, "<=", err, LOCAL_RTOL * 10 * t)
        return verdict(one, multi, rho=rho, worst_pair_t1=[int(x0), int(y0)], worst_multi={"t": t, "pair": pair})

    attaining = (Attaining("two spins, J = 0.4, T = 1.3, zero fields: W1 = 1 - (1 - rho)/2 (the same-site maximal "
                           "coupling is optimal)", two_spin_ising, looseness=(1.0001, 1.0001)),)
    violations = (Violation(
        "rho < 1", lambda: S.high_temperature_instances(S.any_sources(81), max_states=81, low=0.05, high=0.5),
        lambda inst: _max_coupled_distance(_kernel(inst), inst) >= 1.0,
        "rho >= 1: some adjacent pair is not brought closer by the coupling (E d_H(X_1, Y_1) >= 1)"),)


def cold_product() -> S.Instance:
    """Four independent binary sites at T = 0.1 (rho = 0), eps = 0.01."""
    inst = S.Instance(S.product_table(2, 4, 0, 4.0).at_temperature(0.1), "product", {"seed": 0, "scale": 4.0})
    inst.eps = 0.01
    return inst


def _contraction_mixing(instance: S.Instance, kappa: float, name: str) -> Verdict:
    """Thm 5's consequences for an aggregate influence kappa < 1: exact t_mix(eps) against
    ceil(n log(n/eps)/(1-kappa)), and d(t) <= n (1-(1-kappa)/n)^t for every t up to 2 t_mix."""
    n, eps = instance.space.length, instance.eps
    P = _kernel(instance)
    chain = Chain(P)
    bound = math.ceil(n * math.log(n / eps) / (1 - kappa))
    mix = mixing_part(f"t_mix(eps) <= ceil(n log(n/eps)/(1-{name}))", P, eps, chain.stationary.value, bound, "<=")
    curve = chain.distance_curve(min(2 * int(mix.lhs + mix.lhs_error) + 1, 4 * bound))
    d, err = np.asarray(curve), float(curve.abs_error)
    envelope = n * (1 - (1 - kappa) / n) ** np.arange(d.size)
    ratios = np.where(d > 1e3 * err, d / envelope, 0.0)
    s = int(np.argmax(ratios))
    env = Part(f"d(t) <= n (1-(1-{name})/n)^t", d[s], envelope[s], "<=", err, LOCAL_RTOL * envelope[s])
    return verdict(mix, env, t_mix=mix.lhs, bound=bound, worst_t=int(s), kappa=kappa)


class _ContractionMixing(GlauberTheorem):
    """Theorem 5's mixing consequences with the aggregate influence named by ``aggregate``."""

    aggregate: str
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return S.contraction_instances(S.mostly_incompatible(243), max_states=243)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _aggregate_below_one(instance, self.aggregate)

    def check(self, instance: S.Instance) -> Verdict:
        agg = aggregate_influence(influence_matrix(instance.source).rho_ij)
        return _contraction_mixing(instance, getattr(agg, self.aggregate), self.aggregate)

    attaining = (Attaining("independent near-deterministic sites (product table, |V| = 2, n = 4, T = 0.1, eps = 0.01): "
                           "t_mix = 0.875 x the bound, and d(t) / (n (1 - 1/n)^t) -> 1", lambda: cold_product(), looseness=(1.1429, 1.0001)),)


@register
class Thm5Mixing(_ContractionMixing):
    id = "glauber.thm5.mixing"
    number = "Theorem 5 (mixing consequence)"
    statement = ("rho < 1 => d(t) <= n (1-(1-rho)/n)^t and t_mix(eps) <= ceil(n log(n/eps) / (1-rho)) "
                 "(exact worst-start t_mix, eps in {1/4, 1/10, 1/100})")
    conventions = "rho with column sums; TV is half L1; d(t) is the worst start."
    aggregate = "rho"


@register
class Thm5Row(_ContractionMixing):
    id = "glauber.thm5.row"
    number = "Theorem 5 (Dobrushin reading, mixing)"
    statement = ("alpha = max_i sum_{j!=i} rho_ij < 1 => d(t) <= n (1-(1-alpha)/n)^t and "
                 "t_mix(eps) <= ceil(n log(n/eps) / (1-alpha)) (the paper's sum is lost; with row sums the "
                 "mixing bound survives, the Hamming contraction does not)")
    conventions = "alpha with row sums (influence received by site i)."
    aggregate = "alpha"


#: A Gaussian score table (|V| = 2, n = 3) at the temperature where rho = 0.9: alpha = 0.893 < 1, yet
#: an adjacent pair has W1 = 0.9667 > 1 - (1 - alpha)/n = 0.9642 (found by a seeded search).
ROW_COUNTEREXAMPLE = {"q": 2, "n": 3, "seed": 5, "scale": 1.0, "temperature": 1.3369}


@register
class Thm5RowContraction(GlauberTheorem):
    id = "glauber.thm5.row.contraction"
    number = "Theorem 5 (Dobrushin reading, contraction)"
    statement = ("alpha = max_i sum_{j!=i} rho_ij < 1 => W1(P(x,.), P(y,.)) <= 1 - (1-alpha)/n for adjacent x, y. "
                 "FALSE: the path coupling needs the column sum rho (glauber.thm5)")
    conventions = "alpha with row sums; the statement holds with column sums."
    refuted_in = "docs/theorems.md, Paper G, Which sum in Theorem 5?"
    budget = 0.4

    def strategy(self) -> st.SearchStrategy:
        return S.contraction_instances(max_states=27, eps=False)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _aggregate_below_one(instance, "alpha")

    def check(self, instance: S.Instance) -> Verdict:
        space = instance.space
        agg = aggregate_influence(influence_matrix(instance.source).rho_ij)
        kappa = 1 - (1 - agg.alpha) / space.length
        P = _kernel(instance)
        pairs = _adjacent_pairs(space)
        lo, hi = hamming_w1([(P[x], P[y]) for x, y in pairs], space)
        k = int(np.argmax(lo))
        return verdict(Part("W1 <= 1 - (1-alpha)/n", lo[k], kappa, "<=", hi[k] - lo[k], LOCAL_RTOL * 10),
                       alpha=agg.alpha, rho=agg.rho, pair=pairs[k].tolist())

    counterexamples = (Counterexample(
        "Gaussian score table |V| = 2, n = 3, seed 5, T = 1.3369: alpha = 0.893, rho = 0.900, and an adjacent pair "
        "has W1 = 0.9667 > 1 - (1-alpha)/n = 0.9642",
        lambda: row_counterexample()),)


def row_counterexample() -> S.Instance:
    """The stored counterexample of :class:`Thm5RowContraction` (see ``ROW_COUNTEREXAMPLE``)."""
    c = ROW_COUNTEREXAMPLE
    src = ScoreTable.random(c["q"], c["n"], seed=c["seed"], scale=c["scale"]).at_temperature(c["temperature"])
    return S.Instance(src, "gaussian-table", dict(c))


@register
class Thm5Coupling(GlauberTheorem):
    id = "glauber.thm5.coupling"
    number = "Theorem 5 (proof: one-step path coupling)"
    statement = ("same site in both copies, maximal coupling of the two conditionals: for every adjacent pair, "
                 "E[d_H(X_1,Y_1)] = 1 - 1/n + (1/n) sum_{i!=j} TV_i(x,y) <= 1 - (1-rho)/n")
    conventions = "rho with column sums; TV_i(x, y) = TV(pi_i(.|x_-i), pi_i(.|y_-i)) <= rho_ij."
    budget = 0.5

    def strategy(self) -> st.SearchStrategy:
        return S.contraction_instances(max_states=729, eps=False)

    def check(self, instance: S.Instance) -> Verdict:
        n = instance.space.length
        rho = influence_matrix(instance.source).rho
        worst = _max_coupled_distance(_kernel(instance), instance)
        return verdict(Part("E d_H(X_1,Y_1) <= 1 - (1-rho)/n", worst, 1 - (1 - rho) / n, "<=", LOCAL_RTOL * 10 * n,
                            LOCAL_RTOL * 10), rho=rho)

    attaining = (Attaining("two spins with zero fields: TV_1(x, y) = rho_10", two_spin_ising, looseness=1.0001),)


@register
class Lemma6(GlauberTheorem):
    id = "glauber.lemma6"
    number = "Lemma 6 (App. E: Lemma 11)"
    statement = ("rho_ij(T) <= tanh(Delta_ij/(4T)) <= Delta_ij/(4T), Delta_ij = sup osc_v(s_i(v|x_-i) - s_i(v|y_-i)) "
                 "over x, y differing at j")
    conventions = ("Delta with the oscillation (max - min) and the factor 1/(4T); the sup-norm convention takes "
                   "1/(2T). Never mix them.")

    def strategy(self) -> st.SearchStrategy:
        return S.half_large(st.one_of(S.instances(max_states=729, max_ratio=200.0),
                                      S.instances(st.one_of(S.ising_sources(), S.potts_sources()), max_ratio=200.0)),
                            max_ratio=200.0)

    def check(self, instance: S.Instance) -> Verdict:
        influence, oscillation = influence_and_oscillation(instance.source)
        rho, delta = influence.rho_ij, oscillation.delta_ij
        T = instance.source.temperature
        tanh = tv_bound_from_oscillation(delta, T)
        linear = tv_bound_from_oscillation(delta, T, linear=True)
        off = ~np.eye(rho.shape[0], dtype=bool)
        q = instance.space.vocab_size
        atol = 10 * q * np.finfo(float).eps
        i, j = np.unravel_index(np.argmax(np.where(off, rho / np.maximum(tanh, 1e-300), -np.inf)), rho.shape)
        a, b = np.unravel_index(np.argmax(np.where(off & (linear > 0), tanh / np.maximum(linear, 1e-300), -np.inf)),
                                rho.shape)
        trivial = "Delta = 0: rho = 0 = bound" if delta[off].max() == 0 else None
        return verdict(Part("rho_ij <= tanh(Delta_ij/(4T))", rho[i, j], tanh[i, j], "<=", atol, LOCAL_RTOL * tanh[i, j]),
                       Part("tanh(Delta/(4T)) <= Delta/(4T)", tanh[a, b], linear[a, b], "<=", LOCAL_RTOL * tanh[a, b],
                            LOCAL_RTOL * linear[a, b]),
                       trivial=trivial, pair=[int(i), int(j)])

    attaining = (Attaining("two spins with zero fields: rho_01 = tanh(J/T) = tanh(Delta_01/(4T))", two_spin_ising, looseness=(1.0001, 1.0314)),)


@register
class Lemma6Softmax(GlauberTheorem):
    id = "glauber.lemma6.softmax"
    number = "Lemma 6 (proof: softmax Lipschitz estimate)"
    statement = ("for score vectors a, b and T > 0: TV(softmax(a/T), softmax(b/T)) <= tanh(osc(a-b)/(4T)) "
                 "<= osc(a-b)/(4T); attained for two symbols with a - b = (c, -c)")
    conventions = "TV is half L1; osc(w) = max w - min w."

    def strategy(self) -> st.SearchStrategy:
        return S.score_pairs()

    def regime(self, instance: Any) -> dict:
        return {"vocab": len(instance[0]), "temperature": instance[2]}

    def describe(self, instance: Any) -> Any:
        a, b, T = instance
        return {"a": a.tolist(), "b": b.tolist(), "temperature": T}

    def check(self, instance: Any) -> Verdict:
        a, b, T = instance
        tv = 0.5 * float(np.abs(softmax(a / T) - softmax(b / T)).sum())
        d = a - b
        osc = float(d.max() - d.min())
        tanh = float(tv_bound_from_oscillation(osc, T))
        atol = 10 * a.size * np.finfo(float).eps
        trivial = "a - b constant: both laws equal" if osc == 0 else None
        return verdict(Part("TV <= tanh(osc/(4T))", tv, tanh, "<=", atol, LOCAL_RTOL * tanh),
                       Part("tanh(osc/(4T)) <= osc/(4T)", tanh, osc / (4 * T), "<=", LOCAL_RTOL * tanh,
                            LOCAL_RTOL * osc / T), trivial=trivial)

    attaining = (Attaining("a = (0.6, 0), b = (0, 0.6), T = 1: TV = tanh(1.2/4) exactly",
                           lambda: (np.array([0.6, 0.0]), np.array([0.0, 0.6]), 1.0), looseness=(1.0001, 1.0299)),)


@register
class Cor7(GlauberTheorem):
    id = "glauber.cor7"
    number = "Corollary 7"
    statement = ("T > T* = (1/4) max_j sum_{i!=j} Delta_ij => rho(T) <= T*/T < 1 and t_mix(eps) <= "
                 "ceil(n log(n/eps) / (1 - T*/T)) (Theorem 5 with the oscillation bound)")
    conventions = "Delta with the oscillation and 1/(4T) (the sup-norm reading has threshold Delta^inf/2)."
    budget = 0.25

    def strategy(self) -> st.SearchStrategy:
        return S.contraction_instances(max_states=243, low=1.0, high=20.0, modes=("cor7",))

    def hypotheses(self, instance: S.Instance) -> Applicability:
        if not _positive(instance):
            return _positive(instance)
        t_star = contraction_temperature(score_oscillation(instance.source).delta_ij)
        return Applicability(instance.source.temperature > t_star, f"T <= T* = {t_star:.4g}")

    def check(self, instance: S.Instance) -> Verdict:
        influence, oscillation = influence_and_oscillation(instance.source)
        ratio = contraction_temperature(oscillation.delta_ij) / instance.source.temperature
        rho = influence.rho
        if ratio == 0:
            return verdict(Part("rho <= T*/T", rho, 0.0, "<=", 10 * instance.space.length * np.finfo(float).eps, 0.0),
                           trivial="Delta = 0: rho = 0 = T*/T (product conditionals)")
        n, eps = instance.space.length, instance.eps
        P = _kernel(instance)
        bound = math.ceil(n * math.log(n / eps) / (1 - ratio))
        mix = mixing_part("t_mix(eps) <= ceil(n log(n/eps)/(1 - T*/T))", P, eps, _pi(P), bound, "<=")
        return verdict(Part("rho <= T*/T", rho, ratio, "<=", 10 * n * np.finfo(float).eps, LOCAL_RTOL * ratio),
                       mix, bound=bound)

    attaining = (Attaining("two spins, J = 1, zero fields, T = 20 (T* = 1): rho = tanh(1/20) against T*/T = 1/20 "
                           "(a threshold (1/2) max_j sum_i Delta_ij would be 2x looser)",
                           lambda: two_spin_ising(1.0, 20.0), looseness=(1.0009, 2.5)),)


# ----------------------------------------------------------------------------------------------
# Theorem 8


def _basin_hypotheses(instance: S.Instance) -> Applicability:
    B = instance.basin
    if B is None or B.all() or not B.any():
        return Applicability(False, "the basin must be a proper non-empty set")
    margin = basin_margin(instance.source, B)
    if not margin.holds:
        return Applicability(False, f"Assumption 1 fails (gamma = {margin.gamma:.4g}, all argmax = {margin.all_argmax})")
    return _positive(instance)


def _sharp_escape(gamma: float, T: float, q: int, exits: np.ndarray, n: int) -> np.ndarray:
    """(m_x/n) (|V|-1) / (|V|-1 + e^{gamma/T}) (the per-state bound of the proof, before e^{-gamma/T})."""
    with np.errstate(over="ignore"):
        return exits / n * (q - 1) / (q - 1 + np.exp(gamma / T))


def _paper_escape(gamma: float, T: float, q: int, exits: np.ndarray, n: int) -> np.ndarray:
    return exits / n * (q - 1) * np.exp(-gamma / T)


@register
class Thm8Escape(GlauberTheorem):
    id = "glauber.thm8.escape"
    number = "Theorem 8 (escape; App. E: Theorem 12)"
    statement = ("Assumption 1 on B with margin gamma => for every x in B: P_T(x, B^c) <= (m_x/n)(|V|-1)/(|V|-1 + "
                 "e^{gamma/T}) <= (m_x/n)(|V|-1) e^{-gamma/T}, m_x the number of exit sites of x")
    conventions = "Assumption 1 read as in THEOREMS.md 1.20 (margin on exit tokens; exit sites hold an argmax)."

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(S.basin_instances(max_states=729, max_ratio=60.0), S.metastable_instances(243))

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _basin_hypotheses(instance)

    def check(self, instance: S.Instance) -> Verdict:
        B = instance.basin
        margin = basin_margin(instance.source, B)
        cond = _conditionals(instance)
        space = instance.space
        T, q, n = instance.source.temperature, space.vocab_size, space.length
        # escape probabilities from the conditionals: (1/n) sum_i pi_i(exit tokens), no kernel subtraction
        escape = np.zeros(margin.states.size)
        for i in range(n):
            out = ~B[space.neighbours(margin.states, i)]
            escape += (cond[margin.states, i] * out).sum(axis=1) / n
        kernel_escape = _kernel(instance)[np.ix_(margin.states, np.flatnonzero(~B))].sum(axis=1)
        sharp = _sharp_escape(margin.gamma, T, q, margin.exit_sites, n)
        paper = _paper_escape(margin.gamma, T, q, margin.exit_sites, n)
        exiting = np.flatnonzero(margin.exit_sites > 0)
        k = int(exiting[np.argmax(escape[exiting] / sharp[exiting])])
        m = int(exiting[np.argmax(sharp[exiting] / paper[exiting])])
        return verdict(
            Part("P(x, B^c) <= (m_x/n)(|V|-1)/(|V|-1+e^{gamma/T})", escape[k], sharp[k], "<=", LOCAL_RTOL * escape[k],
                 LOCAL_RTOL * sharp[k]),
            Part("(|V|-1)/(|V|-1+e^{gamma/T}) <= (|V|-1) e^{-gamma/T}", sharp[m], paper[m], "<=",
                 LOCAL_RTOL * sharp[m], LOCAL_RTOL * paper[m]),
            conditions={"kernel rows agree": bool(np.allclose(kernel_escape, escape, rtol=1e-9, atol=1e-15))},
            gamma=margin.gamma, gamma_over_T=margin.gamma / T, state=int(margin.states[k]))

    attaining = (Attaining("B = {00} on {0,1}^2, margin 1, T = 1/2: P(00, B^c) = 1/(1 + e^{gamma/T}) exactly",
                           singleton_basin, looseness=(1.0001, 1.1354)),
                 Attaining("B = {000, 100} on {0,1}^3 (m_x = 2 < n = 3 exit sites), margin 1, T = 1/2: "
                           "P(x, B^c) = (2/3)/(1 + e^{gamma/T}) exactly", line_basin, looseness=(1.0001, 1.1354)))


def _conductance(P: np.ndarray, pi: np.ndarray, B: np.ndarray) -> float:
    """Phi(B) = sum_{x in B} pi(x) P(x, B^c) / pi(B) (a sum of positive terms: relative accuracy)."""
    return float(pi[B] @ P[np.ix_(B, ~B)].sum(axis=1) / pi[B].sum())


@register
class Thm8Conductance(GlauberTheorem):
    id = "glauber.thm8.conductance"
    number = "Theorem 8 (conductance)"
    statement = ("Assumption 1 on B => Phi(B) = Q(B, B^c)/mu_T(B) <= max_x (m_x/n)(|V|-1)/(|V|-1+e^{gamma/T}) "
                 "<= (|V|-1) e^{-gamma/T}, mu_T the stationary law of the (non-reversible) chain")

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(S.basin_instances(max_states=729, max_ratio=60.0),
                         S.basin_instances(max_states=243, two_wells=True, max_ratio=60.0), S.metastable_instances(243))

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _basin_hypotheses(instance)

    def check(self, instance: S.Instance) -> Verdict:
        B = instance.basin
        margin = basin_margin(instance.source, B)
        P = _kernel(instance)
        chain = Chain(P)
        phi = _conductance(P, chain.stationary.value, B)
        T, q, n = instance.source.temperature, instance.space.vocab_size, instance.space.length
        sharp = float(_sharp_escape(margin.gamma, T, q, margin.exit_sites, n).max())
        paper = (q - 1) * math.exp(-margin.gamma / T)
        return verdict(Part("Phi(B) <= max_x (m_x/n)(|V|-1)/(|V|-1+e^{gamma/T})", phi, sharp, "<=", CHAIN_RTOL * phi,
                            LOCAL_RTOL * sharp),
                       Part("Phi(B) <= (|V|-1) e^{-gamma/T}", phi, paper, "<=", CHAIN_RTOL * phi, LOCAL_RTOL * paper),
                       gamma=margin.gamma, gamma_over_T=margin.gamma / T,
                       gap=chain.additive_gap.value if instance.space.size <= 243 else None)

    attaining = (Attaining("B = {00} on {0,1}^2, margin 1, T = 1/2: Phi(B) = P(00, B^c) = the per-state bound",
                           singleton_basin, looseness=(1.0001, 1.1354)),
                 Attaining("B = {000, 100} on {0,1}^3 (m_x = 2 < n = 3 exit sites), margin 1, T = 1/2: Phi(B) = "
                           "(2/3)/(1 + e^{gamma/T}) = the per-state bound", line_basin, looseness=(1.0001, 1.7031)))


@register
class Thm8Mixing(GlauberTheorem):
    """The exponential bound is attained as gamma/T grows (two wells, ratio 1 + e^{-gamma/T}). The first bound,
    t_mix(1/4) >= (mu(B^c) - 1/4)/Phi(B), is not attained at eps = 1/4 on these chains: on an exact sampler
    (n = 1, t_mix = 1, Phi(B) = mu(B^c)) its ratio is mu(B^c)/(mu(B^c) - 1/4) >= 4/3 (and Assumption 1
    keeps mu(B) > 1/|V| there); the least loose instance found (|V| = 16, 1.367) is stored with the two-well one (2.708)."""

    id = "glauber.thm8.mixing"
    number = "Theorem 8 (mixing)"
    statement = ("Assumption 1 on B and mu_T(B) <= 1/2 => t_mix >= 1/(4 Phi(B)) >= e^{gamma/T} / (4(|V|-1)); "
                 "checked through the sharper t_mix(1/4) >= (mu_T(B^c) - 1/4)/Phi(B) the proof uses")
    conventions = ("Needs only stationarity of mu_T (valid for the non-reversible chain). The paper's 1/(4 Phi(B)) "
                   "is implied by (mu(B^c) - 1/4)/Phi(B) when mu(B) <= 1/2 and is checked as a condition: on Glauber "
                   "chains satisfying Assumption 1, t_mix 4 Phi(B) stayed >= 2.5, so that form alone cannot be "
                   "shown to fail by a factor 2.")
    budget = 0.5

    def strategy(self) -> st.SearchStrategy:
        return S.basin_instances(max_states=128, two_wells=True, max_ratio=40.0)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        ok = _basin_hypotheses(instance)
        if not ok:
            return ok
        mass = float(_pi(_kernel(instance))[instance.basin].sum())
        return Applicability(mass <= 0.5, f"mu_T(B) = {mass:.4g} > 1/2")

    def check(self, instance: S.Instance) -> Verdict:
        B = instance.basin
        margin = basin_margin(instance.source, B)
        P = _kernel(instance)
        pi = _pi(P)
        phi = _conductance(P, pi, B)
        general = (float(pi[~B].sum()) - 0.25) / phi
        mix = mixing_part("t_mix(1/4) >= (mu(B^c) - 1/4)/Phi(B)", P, 0.25, pi, general, ">=")
        T, q = instance.source.temperature, instance.space.vocab_size
        exponential = math.exp(margin.gamma / T) / (4 * (q - 1))
        return verdict(mix, Part("1/(4 Phi(B)) >= e^{gamma/T}/(4(|V|-1))", 1 / (4 * phi), exponential, ">=",
                                 CHAIN_RTOL / (4 * phi), LOCAL_RTOL * exponential),
                       conditions={"t_mix >= 1/(4 Phi(B))": mix.lhs + mix.lhs_error >= 1 / (4 * phi) * (1 - CHAIN_RTOL)},
                       gamma=margin.gamma, conductance=phi, mass=float(pi[B].sum()),
                       gap=Chain(P, stationary=pi).additive_gap.value)

    violations = (Violation(
        "Assumption 1 (argmax at exit-causing sites)", lambda: S.marginless_basin_instances(),
        lambda inst: _escape_beyond_positive_margin(inst),
        "a basin state that is not an argmax at one site escapes with probability >= 1/(2n) at every T: "
        "the margin of its other exit pairs no longer bounds the escape"),
        Violation("mu_T(B) <= 1/2", lambda: S.basin_instances(max_states=27, max_ratio=12.0),
                  lambda inst: not Thm8Mixing().check(inst).holds,
                  "a single deep basin holds most of the mass: the chain mixes fast (into B) although Phi(B) is tiny"))
    counterexamples = (Counterexample(
        "|V| = 2, n = 2, basin B = {00} with margin 2 at T = 1/2 and no second well: mu(B) = 0.96 > 1/2, "
        "t_mix(1/4) = 2 < 1/(4 Phi(B))",
        lambda: single_well_instance(), dropped="mu_T(B) <= 1/2"),)
    attaining = (
        Attaining("wells {00} and {11} on {0,1}^2, margin 2, T = 1/2: Phi(B) = P(00, B^c) = 1/(1 + e^{gamma/T}), so "
                  "1/(4 Phi) is e^{gamma/T}/4 (1 + e^{-gamma/T}) = 1.0183 x the exponential bound (t_mix = 2.708 x "
                  "the first bound)", lambda: wells_instance(2, 2, (0, 3), 2.0, 0.5), looseness=(2.7085, 1.0184)),
        Attaining("one site, |V| = 16, B = {0} with margin 0.1, T = 1 (an exact sampler: t_mix = 1, Phi(B) = "
                  "mu(B^c)): t_mix / ((mu(B^c) - 1/4)/Phi) = mu(B^c)/(mu(B^c) - 1/4) = 1.367, the best ratio "
                  "found for the first bound (> 4/3 on every exact sampler)",
                  lambda: wells_instance(16, 1, (0,), 0.1, 1.0), looseness=(1.3670, 14.573)))


def wells_instance(q: int, n: int, wells: tuple[int, ...], margin: float, T: float) -> S.Instance:
    """A score table on V^n with every state of ``wells`` (state indices) boosted by ``margin`` (each on its
    own, the first last): Assumption 1 holds on B = {wells[0]} with margin gamma = ``margin``."""
    space = StateSpace(q, n)
    table = np.zeros((n, q ** (n - 1), q))
    for w in reversed(wells):
        well = np.zeros(space.size, dtype=bool)
        well[w] = True
        S.boost_basin(table, space, well, margin)
    basin = np.zeros(space.size, dtype=bool)
    basin[wells[0]] = True
    return S.Instance(ScoreTable(space, table, T), "basin-table", {"scores": table.tolist(), "margin": margin},
                      basin=basin)


def single_well_instance() -> S.Instance:
    """A single deep well B = {00} on {0,1}^2 (scores 0 boosted by margin 2) at T = 1/2."""
    space = StateSpace(2, 2)
    table = np.zeros((2, 2, 2))
    basin = np.zeros(4, dtype=bool)
    basin[0] = True
    S.boost_basin(table, space, basin, 2.0)
    return S.Instance(ScoreTable(space, table, 0.5), "basin-table", {"scores": table.tolist(), "margin": 2.0},
                      basin=basin)


def _escape_beyond_positive_margin(inst: S.Instance) -> bool:
    """For a singleton basin {x}: P_T(x, B^c) > (m_x/n)(|V|-1) e^{-g/T}, g = the smallest positive gap
    s_i(x_i) - s_i(v) over exit pairs (the margin Assumption 1 would give without the argmax part)."""
    x = int(np.flatnonzero(inst.basin)[0])
    scores = score_table(inst.source)[x]  # (n, q)
    current = scores[np.arange(inst.space.length), inst.space.decode(x)]
    gaps = (current[:, None] - scores)[scores != current[:, None]]
    g = float(gaps[gaps > 0].min()) if (gaps > 0).any() else math.inf
    escape = 1.0 - float(_kernel(inst)[x, x])
    return escape > (inst.space.vocab_size - 1) * math.exp(-g / inst.source.temperature)


# ----------------------------------------------------------------------------------------------
# Section 5.4: the drift of a count statistic


def _count(inst: S.Instance) -> np.ndarray:
    A = np.zeros(inst.space.vocab_size, dtype=bool)
    A[list(inst.symbols)] = True
    return A[inst.space.all_states()].sum(axis=1)


@register
class Drift(GlauberTheorem):
    id = "glauber.drift"
    number = "Section 5.4 (drift of the count statistic)"
    statement = ("D(x) = (1/n) sum_i (1[x_i not in A] pi_i(A|x_{-i}) - 1[x_i in A] pi_i(V\\A|x_{-i})) equals "
                 "E[N(X_1) - N(x)] under P_T = P(N up) - P(N down) (|Delta N| <= 1 per step)")

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(S.drift_instances(max_states=729, max_ratio=40.0), S.count_instances())

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _positive(instance)

    def check(self, instance: S.Instance) -> Verdict:
        N = _count(instance).astype(np.float64)
        D = count_drift(instance.source, instance.space.all_states(), instance.symbols)
        P = _kernel(instance)
        up = (P * (N[None, :] == N[:, None] + 1)).sum(axis=1)
        down = (P * (N[None, :] == N[:, None] - 1)).sum(axis=1)
        main, ok = identity("D = E[N(X_1) - N(x)]", D, P @ N - N, LOCAL_RTOL * 100, LOCAL_RTOL * 100)
        steps, steps_ok = identity("D = P(up) - P(down)", D, up - down, LOCAL_RTOL * 100, LOCAL_RTOL * 100)
        boundary = N == instance.level
        return verdict(main, steps, conditions={"every state": ok, "every state (up - down)": steps_ok,
                                                "|Delta N| <= 1": bool(np.abs(P @ N - N).max() <= 1)},
                       boundary_min_drift=float(D[boundary].min()) if boundary.any() else None)


def _band_escape(P: np.ndarray, N: np.ndarray, lo: int, hi: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """For every start: P(N(X_s) <= lo for some s <= t) and E[number of steps from level hi to hi - 1
    before that, within t steps] (the downward-crossing attempts), on the chain absorbed at {N <= lo}."""
    live = N > lo
    Q = P * live[None, :]
    attempt = (P * ((N[:, None] == hi) & (N[None, :] == hi - 1))).sum(axis=1)
    exit_now = (P * ~live[None, :]).sum(axis=1)
    h = np.zeros(P.shape[0])
    a = np.zeros(P.shape[0])
    for _ in range(t):
        h, a = exit_now + Q @ h, attempt + Q @ a
    return np.where(live, h, 1.0), np.where(live, a, 0.0)


def _ruin(P: np.ndarray, N: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """For every state: P(hit {N <= lo} before {N >= hi}) (exact, by hitting times of an absorbing chain)."""
    inside = (N > lo) & (N < hi)
    # probability of absorbing at the bottom: solve (I - P_II) h = P_I,bottom by elimination
    I = np.flatnonzero(inside)
    h = np.zeros(P.shape[0])
    h[N <= lo] = 1.0
    if I.size:
        A = np.eye(I.size) - P[np.ix_(I, I)]
        h[I] = np.linalg.solve(A, P[np.ix_(I, np.flatnonzero(N <= lo))].sum(axis=1))
    return h


def band_rate(D_plus: np.ndarray, D_minus: np.ndarray, N: np.ndarray, lo: int, hi: int) -> float:
    """lambda* = min over lo < N(x) < hi of log(p_+(x) / p_-(x)) (-inf when some p_+ = 0)."""
    band = (N > lo) & (N < hi)
    with np.errstate(divide="ignore"):
        return float((np.log(D_plus[band]) - np.log(D_minus[band])).min())


def _ruin_bound(lam: float, width: int) -> float:
    """(e^lambda - 1) / (e^{lambda width} - 1): gambler's ruin from one level below the top of a band."""
    return math.expm1(lam) / math.expm1(lam * width)


def _up_down(inst: S.Instance, P: np.ndarray, N: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    up = (P * (N[None, :] == N[:, None] + 1)).sum(axis=1)
    down = (P * (N[None, :] == N[:, None] - 1)).sum(axis=1)
    return up, down


#: Horizons of the band certificate.
BAND_TIMES = (10, 100, 300)


@register
class DriftBand(GlauberTheorem):
    id = "glauber.drift.band"
    number = "Section 5.4 (band certificate, corrected)"
    statement = ("lambda* = min_{lo < N(x) < hi} log(p_+(x)/p_-(x)) > 0 => from every x0 with N(x0) >= hi, "
                 "P(N(X_s) <= lo for some s <= t) <= E[#down-crossing attempts by t] (e^{lambda*}-1)/(e^{lambda*(hi-lo)}-1) "
                 "<= t (e^{lambda*}-1)/(e^{lambda*(hi-lo)}-1); each attempt (a step from hi to hi-1) reaches lo before "
                 "hi with probability <= (e^{lambda*}-1)/(e^{lambda*(hi-lo)}-1)")
    conventions = ("Our correction of the section 5.4 argument (THEOREMS.md 2A): positive drift must hold on a band "
                   "of levels; at the boundary alone it certifies nothing (glauber.drift.boundary).")
    budget = 0.5

    def strategy(self) -> st.SearchStrategy:
        return S.count_instances(max_states=243)

    def _band(self, instance: S.Instance) -> tuple[int, int, float] | None:
        P = _kernel(instance)
        N = _count(instance)
        up, down = _up_down(instance, P, N)
        best = None
        n = instance.space.length
        for lo in range(0, n - 1):
            for hi in range(lo + 2, n + 1):
                lam = band_rate(up, down, N, lo, hi)
                if lam > 1e-6 and (best is None or hi - lo > best[1] - best[0]):
                    best = (lo, hi, lam)
        return best

    def hypotheses(self, instance: S.Instance) -> Applicability:
        ok = _positive(instance)
        if not ok:
            return ok
        band = self._band(instance)
        return Applicability(band is not None, "no band lo < N < hi with positive drift (lambda* > 0)")

    def check(self, instance: S.Instance) -> Verdict:
        lo, hi, lam = self._band(instance)
        P = _kernel(instance)
        N = _count(instance)
        p_bar = _ruin_bound(lam, hi - lo)
        ruin = _ruin(P, N, lo, hi)
        starts = np.flatnonzero(N == hi - 1)
        k = int(starts[np.argmax(ruin[starts])])
        attempt = Part("attempt: P(reach lo before hi | N = hi-1) <= (e^l-1)/(e^{l(hi-lo)}-1)", ruin[k], p_bar, "<=",
                       CHAIN_RTOL * ruin[k] + 1e-15, LOCAL_RTOL * p_bar)
        worst, union_ok = None, True
        deep = N >= hi
        for t in BAND_TIMES:
            h, a = _band_escape(P, N, lo, hi, t)
            ratio = np.where(deep & (a > 0), h / np.maximum(a * p_bar, 1e-300), 0.0)
            s = int(np.argmax(ratio))
            union_ok &= bool((h[deep] <= t * p_bar * (1 + CHAIN_RTOL) + 1e-15).all())
            if worst is None or ratio[s] > worst[0]:
                worst = (ratio[s], h[s], a[s] * p_bar, t, int(s))
        _, h_s, bound, t, s = worst
        escape = Part("escape by t <= E[attempts by t] (e^l-1)/(e^{l(hi-lo)}-1)", h_s, bound, "<=",
                      CHAIN_RTOL * h_s + 1e-15, CHAIN_RTOL * bound)
        return verdict(attempt, escape, conditions={"escape by t <= t (e^l-1)/(e^{l(hi-lo)}-1)": union_ok},
                       band=[lo, hi], rate=lam, t=t, start=s)

    attaining = (Attaining("binary count chain on {0,1}^3, f = (0.2, 0.8, 0.8): p_+/p_- = 2 on both levels of the "
                           "band 0 < N < 3, so N is a gambler's ruin with constant ratio and each attempt reaches lo before hi with "
                           "probability exactly (e^l-1)/(e^{3l}-1) = 1/7, and the union over them is "
                           "1.00047 x the escape probability by t = 300",
                           lambda: S.count_instance(2, (0.2, 0.8, 0.8), 2), looseness=(1.000001, 1.0005)),)


def count_levels(f: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Up and down probabilities of N on levels 0..n for the binary count chain of
    :func:`mlmix.verify.instances.count_table`: N is itself a birth-death chain (sites are
    exchangeable), up from m with ((n-m)/n) f(m), down with (m/n)(1 - f(m-1))."""
    n = len(f)
    m = np.arange(n + 1)
    up = np.array([(n - k) / n * f[k] if k < n else 0.0 for k in m])
    down = np.array([k / n * (1 - f[k - 1]) if k > 0 else 0.0 for k in m])
    return up, down


def count_exit_time(f: tuple[float, ...], k: int) -> float:
    """Mean exit time of B_k = {N >= k} from the boundary {N = k} for the binary count chain
    (:func:`count_levels`, solved exactly on the levels k..n)."""
    up, down = count_levels(f)
    up, down = up[k:], down[k:]
    size = up.size
    A = np.eye(size) - np.diag(1 - up - down) - np.diag(up[:-1], 1) - np.diag(down[1:], -1)
    return float(np.linalg.solve(A, np.ones(size))[0])


def count_exit_within(f: tuple[float, ...], k: int, t: int) -> float:
    """P(N drops below k within t steps | N = k) for the binary count chain (levels k..n, absorbed below);
    Q^t by repeated squaring (t up to 2^62)."""
    up, down = count_levels(f)
    up, down = up[k:], down[k:]
    Q = np.diag(1 - up - down) + np.diag(up[:-1], 1) + np.diag(down[1:], -1)
    stay = np.zeros(up.size)
    stay[0] = 1.0
    power = Q
    while t:
        if t & 1:
            stay = stay @ power
        t >>= 1
        if t:
            power = power @ power
    return float(1.0 - stay.sum())


#: The stored family of the section 5.4 counterexample: f(k-1) = 0.9, f(m >= k) = 0.2, k = n/2.
BOUNDARY_LENGTHS = (10, 12, 16, 20)


def boundary_family(n: int) -> S.CountChain:
    """The count chain of the section 5.4 counterexample at length n (k = n/2)."""
    k = n // 2
    return S.CountChain(tuple(0.5 if m < k - 1 else (0.9 if m == k - 1 else 0.2) for m in range(n)), k)


@register
class DriftBoundary(GlauberTheorem):
    id = "glauber.drift.boundary"
    number = "Section 5.4 (drift certificate, as stated)"
    statement = ("'N is a strict submartingale at the boundary of B_k = {N >= k} (D > 0 on {N = k}), and a standard "
                 "drift argument yields escape times exponential in n', read as the band certificate with the boundary "
                 "rate lambda_k = log(p_+/p_-) on {N = k} extended to the whole basin (band k-1 < N < n+1): started on "
                 "the boundary, the exit time exceeds m = (e^{lambda_k (n-k+2)} - 1)/(2(e^{lambda_k} - 1)) with "
                 "probability >= 1/2. FALSE: f(k-1) = 0.9, f(m >= k) = 0.2, k = n/2 has drift +0.05 on the boundary "
                 "but mean exit time 24.1, 24.5, 24.8, 25.0 for n = 6, 8, 10, 12 (bounded)")
    refuted_in = "docs/theorems.md, Paper G, Section 5.4"
    conventions = ("Checked on binary count-dependent chains (every site sees only the number of w's around it), "
                   "whose count N is exactly a birth-death chain; the corrected statement is glauber.drift.band.")

    def strategy(self) -> st.SearchStrategy:
        return S.boundary_drift_instances()

    def hypotheses(self, instance: S.CountChain) -> Applicability:
        up, down = count_levels(instance.f)
        k = instance.level
        drift = float(up[k] - down[k])
        return Applicability(drift > 0, f"drift on the boundary {{N = k}} is not positive ({drift:.3g})")

    def check(self, instance: S.CountChain) -> Verdict:
        f = instance.f
        n, k = len(f), instance.level
        up, down = count_levels(f)
        lam = math.log(up[k] / down[k])
        m = min(2**62, math.ceil(math.expm1(lam * (n - k + 2)) / (2 * math.expm1(lam))))
        exit_by_m = count_exit_within(f, k, m)
        return verdict(Part("P(exit B_k within m | N = k) <= 1/2", exit_by_m, 0.5, "<=", CHAIN_RTOL, 0.0),
                       m=m, boundary_drift=float(up[k] - down[k]), rate=lam,
                       mean_exit_time_from_boundary=count_exit_time(f, k))

    counterexamples = tuple(Counterexample(
        f"n = {n}, k = {n // 2}, f(k-1) = 0.9, f(m >= k) = 0.2, f(m < k-1) = 0.5: boundary drift +0.05, mean exit "
        f"time {count_exit_time(boundary_family(n).f, n // 2):.1f} (bounded in n)",
        (lambda n=n: boundary_family(n))) for n in BOUNDARY_LENGTHS)
