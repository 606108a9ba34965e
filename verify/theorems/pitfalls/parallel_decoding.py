"""Paper P, section 2.4: parallel decoding and the eq. (5) clique Ising model (Proposition 3 and
Remark 1, the two modes of Propositions 4, 5 and 8, Corollary 3, the convexity of Proposition 9, and
the k-Gibbs speedup)."""

from __future__ import annotations

from itertools import combinations
from math import log

import networkx as nx
import numpy as np
from hypothesis import strategies as st

from mlmix.theory.chain.shortcuts import spectral_gap
from mlmix.theory.kernels.assembled import independent_parallel_kernel, k_gibbs_kernel
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable
from mlmix.theory.sources.space import StateSpace
from mlmix.theory.training.exponential_family import IsingFamily
from mlmix.theory.training.modes import (
    CliqueIsing,
    assumption5,
    c_R1,
    c_stuck,
    clique_count_law,
    clique_count_parallel_kernel,
    clique_kernel,
    k_gibbs_visit_probabilities,
    mode_masks,
    parallel_stuck_probabilities,
    prop4_steps,
    prop5_steps,
)
from mlmix.theory.training.pseudolikelihood import (
    MaskDistribution,
    PseudoLikelihood,
)
from mlmix.verify.pitfalls_strategies import (
    JointInstance,
    ModesInstance,
    PLInstance,
    SymmetricClique,
    joint_instances,
    modes_instances,
    pl_instances,
    stuck_instances,
    symmetric_cliques,
)
from mlmix.verify.theorems.glauber.glauber_base import identity
from mlmix.verify.theorems.pitfalls.pitfalls_base import _PTheorem
from mlmix.verify.verdicts import (
    Applicability,
    Attaining,
    Counterexample,
    OnFirst,
    Part,
    Verdict,
    part,
    register,
    verdict,
)

# ----------------------------------------------------------------------------------------------
# Section 2.4: parallel decoding and the eq. (5) model


def _product_defect(P: np.ndarray, space: StateSpace) -> tuple[np.ndarray, np.ndarray]:
    """Each row of P next to the product of its one-site marginals, both flattened."""
    n, q = space.length, space.vocab_size
    rows = P.reshape((P.shape[0],) + (q,) * n)
    prods = []
    for row in rows:
        margs = [row.sum(axis=tuple(a for a in range(n) if a != i)) for i in range(n)]
        prod = margs[0]
        for m in margs[1:]:
            prod = np.multiply.outer(prod, m)
        prods.append(prod.ravel())
    return P.ravel(), np.concatenate(prods)


@register
class Proposition3(_PTheorem):
    id = "pitfalls.prop3"
    number = "Proposition 3"
    statement = ("(informal) parallel decoding with independent per-position sampling implements exactly the kernels "
                 "whose rows are product distributions over positions; checked: the rows of the independent parallel "
                 "sampler (Def. 11) factorise into their one-site marginals, and k-Gibbs rows (k >= 2) do not")
    conventions = ("Randomness only at the output: a network fed external noise implements any kernel. A fixed-site "
                   "Gibbs update is a product; a random-scan one is a mixture over sites (pitfalls.remark.1gibbs).")

    def strategy(self) -> st.SearchStrategy:
        return joint_instances(max_n=3)

    def check(self, instance: JointInstance) -> Verdict:
        space = instance.source.space
        P = np.asarray(independent_parallel_kernel(instance.source))
        rows, prods = _product_defect(P, space)
        main, ok = identity("parallel-sampler row = product of its marginals", rows, prods, 1e-10, 1e-14)
        G = k_gibbs_kernel(instance.source, 2).toarray()
        g_rows, g_prods = _product_defect(G, space)
        return verdict(main, conditions={"every row factorises": ok,
                                         "2-Gibbs rows are not products": bool(np.abs(g_rows - g_prods).max() > 1e-6)})


def _random_scan_ising() -> JointInstance:

    model = IsingModel(nx.path_graph(2), couplings=1.0)
    return JointInstance(LogWeightTable(model.space, model.log_joint()), 1, 0, 1.0)


@register
class Remark1Gibbs(_PTheorem):
    id = "pitfalls.remark.1gibbs"
    number = "Section 2.4.1 remark (1-Gibbs transitions)"
    statement = ("'the standard 1-Gibbs sampler encodes a product distribution for each transition'. FALSE for "
                 "random scan: a row is a mixture over the chosen site, not a product (true for a fixed site)")
    refuted_in = "docs/theorems.md, Paper P, Proposition 3"

    def strategy(self) -> st.SearchStrategy:
        return joint_instances(max_n=3)

    def check(self, instance: JointInstance) -> Verdict:
        space = instance.source.space
        G = k_gibbs_kernel(instance.source, 1).toarray()
        rows, prods = _product_defect(G, space)
        k = int(np.argmax(np.abs(rows - prods)))
        return verdict(part("random-scan row = product of its marginals", rows[k], prods[k], "==", 1e-10, 1e-14,
                            ratio=False))

    counterexamples = (Counterexample(
        "Ising on 2 spins with J = 1: from (-1, -1) the random-scan row puts mass 0 on (+1, +1) but its marginals do not",
        _random_scan_ising),)


class _ModesTheorem(_PTheorem):
    def strategy(self) -> st.SearchStrategy:
        return modes_instances()

    def hypotheses(self, instance: ModesInstance) -> Applicability:
        a5 = assumption5(instance.spec)
        return Applicability(a5.holds, a5.reason)


@register
class Proposition4(_ModesTheorem):
    id = "pitfalls.prop4"
    number = "Proposition 4"
    statement = ("eq. (5) model under Assumption 5, k-Gibbs with k >= |C|: from any start, X_t visits R_1 for some t "
                 "in 1..T, T = ceil(log_{c_R1} delta), with probability >= 1 - delta; checked exactly (clique chain) at "
                 "the worst start: one step max_x P(x, R_1^c) <= c_R1, and the failure probability <= delta")
    conventions = "eq. (5) with ordered pairs (as printed) or unordered pairs (as the proofs compute); both checked."

    def strategy(self) -> st.SearchStrategy:
        return modes_instances(edge_delta=True)

    def check(self, instance: ModesInstance) -> Verdict:
        spec, k, delta = instance.spec, instance.k, instance.delta
        c = c_R1(spec, k)
        T = prop4_steps(c, delta)
        fail = 1.0 - float(k_gibbs_visit_probabilities(spec, k, T).min())
        one_step = 1.0 - float(np.asarray(clique_kernel(spec, "k-gibbs", k).todense())[:, -1].min())
        return verdict(Part("max_x P(x, R_1^c) <= c_R1", one_step, c, "<=", 1e-12, 1e-15),
                       Part("P(no visit to R_1 in 1..T) <= delta", fail, delta, "<=", 1e-12, 0.0), T=T, c_R1=c)

    attaining = (Attaining("the clique is the whole model (n = |C| = 2), J = 4, h = (0.01, 0.01), unordered pairs, k = 2 "
                           "(an exact sampler): P(x, R_1^c) = p(R_1^c) = c_R1 / 1.000007, and delta = c_R1 (1 + 1e-6) "
                           "gives T = 1: P(no visit) = delta / 1.000008",
                           lambda: _prop4_edge(CliqueIsing(2, (0, 1), 4.0, (0.01, 0.01), "unordered"), 2),
                           looseness=(1.00001, 1.00001)),)


def _prop4_edge(spec: CliqueIsing, k: int) -> ModesInstance:
    """delta = c_R1 (1 + 1e-6): the smallest delta giving Proposition 4 the horizon T = 1."""
    return ModesInstance(spec, k, c_R1(spec, k) * (1 + 1e-6))


@register
class Proposition5(_ModesTheorem):
    id = "pitfalls.prop5"
    number = "Proposition 5"
    statement = ("eq. (5) model under Assumption 5: the independent parallel sampler from x with sum_C x <= -2 "
                 "keeps sum_C X_t <= -2 for all t in 1..T, T = floor((delta/2) e^{c_stuck}), with probability "
                 ">= 1 - delta. FALSE for |C| = 2 and small J0 (the proof's Hoeffding radius r = -1 + tanh(J0)|C|/2 "
                 "must be positive)")
    refuted_in = "docs/theorems.md, Paper P, Proposition 5"
    conventions = "Both pair conventions; the counterexample fails under either."

    def strategy(self) -> st.SearchStrategy:
        return stuck_instances()

    def check(self, instance: ModesInstance) -> Verdict:
        spec, delta = instance.spec, instance.delta
        c = c_stuck(spec)
        T = prop5_steps(c, delta)
        fail = 1.0 - float(np.nanmin(parallel_stuck_probabilities(spec, T)))
        return verdict(Part("P(leave {sum_C x <= -2} within T) <= delta", fail, delta, "<=", 1e-12, 0.0),
                       trivial="T = 0: nothing to check" if T == 0 else None, T=T, c_stuck=c,
                       hoeffding_radius=hoeffding_radius(spec))

    counterexamples = (Counterexample(
        "n = |C| = 2, h = (0.001, 0), J = 0.002 (ordered pairs), delta = 2 e^{-c_stuck}(1 + 1e-6): T = 1, exact stay "
        "probability 0.2518 < 0.2628 = 1 - delta",
        lambda: ModesInstance(CliqueIsing(2, (0, 1), 0.002, (0.001, 0.0)), 2,
                              float(2 * np.exp(-c_stuck(CliqueIsing(2, (0, 1), 0.002, (0.001, 0.0)))) * (1 + 1e-6)))),)


def hoeffding_radius(spec) -> float:
    """r = -1 + tanh(J0) |C| / 2, the deviation the proof of Prop 5 feeds to Hoeffding's inequality."""
    return float(-1.0 + np.tanh(spec.J0) * spec.size / 2.0)


@register
class Proposition5Repaired(Proposition5):
    """Not attainable: the failure probability rests on Hoeffding's inequality and a union bound over the T
    steps, and stays hundreds of times below delta. The least loose instance found (|C| = 5..10, J in
    0.5..8, T = 1..3, delta the smallest giving T, both pair conventions) is stored: |C| = 10, J = 0.7,
    h_G = 0.01, unordered pairs, T = 1, failure 0.0025 against delta = 0.906 (363 x)."""

    id = "pitfalls.prop5.repaired"
    number = "Proposition 5 (with r > 0)"
    statement = ("Proposition 5 with the hypothesis its proof uses made explicit: Assumption 5 and a positive "
                 "Hoeffding radius r = -1 + tanh(J0)|C|/2 (so |C| >= 3). Same exact check at the worst start")
    refuted_in = None
    conventions = ("The failure probability stays far below delta when r > 0 (a Hoeffding and union bound), so the "
                   "check is shown to fail by dropping r > 0 (the stored counterexample), not by scaling delta.")
    weaken_by_hypothesis = True

    def hypotheses(self, instance: ModesInstance) -> Applicability:
        base = super().hypotheses(instance)
        if not base:
            return base
        r = hoeffding_radius(instance.spec)
        return Applicability(r > 0, "" if r > 0 else f"Hoeffding radius r = {r:.3g} <= 0")

    counterexamples = (Counterexample(
        "the Proposition 5 counterexample (|C| = 2): r = -0.999 < 0, and the conclusion fails",
        Proposition5.counterexamples[0].build, dropped="r > 0"),)
    attaining = (Attaining("|C| = n = 10, J = 0.7, h = 0.001 per clique site, unordered pairs, delta = 2 "
                           "e^{-c_stuck} (1 + 1e-6) (T = 1): failure 0.0025, delta 363 x that (the least loose found)",
                           lambda: _prop5_edge(CliqueIsing(10, tuple(range(10)), 0.7, (0.001,) * 10, "unordered")),
                           looseness=362.9),)


def _prop5_edge(spec: CliqueIsing) -> ModesInstance:
    """delta = 2 e^{-c_stuck} (1 + 1e-6): the smallest delta giving Proposition 5 the horizon T = 1."""
    return ModesInstance(spec, spec.size, float(2 * np.exp(-c_stuck(spec)) * (1 + 1e-6)))


def _ratio_part(name: str, log_lhs: float, log_rhs: float) -> Part:
    """A ratio p(a)/p(b) >= bound, with both sides as exponentials of log values (relative accuracy 1e-12)."""
    lhs, rhs = float(np.exp(log_lhs)), float(np.exp(log_rhs))
    return Part(name, lhs, rhs, ">=", 1e-11 * lhs, 1e-12 * rhs)


@register
class Proposition8Modes(_ModesTheorem):
    id = "pitfalls.prop8.modes"
    number = "Proposition 8 (1)"
    statement = ("eq. (5) under Assumption 5: p(x) > p(y) >= e^{2 J0} p(z) for x in R_1, y in R_-1, z elsewhere "
                 "(min p(R_1)/max p(R_-1) >= 1, min p(R_-1)/max p(rest) >= e^{2 J0})")
    conventions = ("Assumption 5 with ||h||_1; under the l-infinity reading (J - max|h_i| >= J0) the statement is "
                   "false (stored counterexample). The second inequality is attained (equality) under unordered "
                   "pairs, so the paper's strict '>' is false there; with ordered pairs it is strict.")

    def strategy(self) -> st.SearchStrategy:
        return modes_instances(tight=True)

    def check(self, instance: ModesInstance) -> Verdict:
        spec = instance.spec
        log_p = spec.model().log_joint()
        R1, Rm1 = mode_masks(spec)
        rest = ~(R1 | Rm1)
        return verdict(_ratio_part("min p(R_1) / max p(R_-1) >= 1", log_p[R1].min() - log_p[Rm1].max(), 0.0),
                       _ratio_part("min p(R_-1) / max p(rest) >= e^{2 J0}", log_p[Rm1].min() - log_p[rest].max(),
                                   2 * instance.J0), J0=instance.J0, norm=instance.norm)

    attaining = (Attaining("|C| = n = 2, h = (0.5, 0), J = 0.75, unordered pairs: p(R_-1) = e^{2 J0} max p(rest) exactly",
                           lambda: ModesInstance(CliqueIsing(2, (0, 1), 0.75, (0.5, 0.0), "unordered"), 2, 0.5), looseness=(2.7183, 1.0001)),)

    counterexamples = (Counterexample(
        "l-infinity reading of Assumption 5: n = 3, C = {0, 1}, h = (0.73, 0.08, -0.4), J = 0.95, unordered pairs "
        "(J - max|h| = 0.22 = J0 but J - ||h||_1 < 0): min p(R_-1)/max p(rest) = 0.698 < e^{2 J0} = 1.553",
        lambda: ModesInstance(CliqueIsing(3, (0, 1), 0.95, (0.73, 0.08, -0.4), "unordered"), 2, 0.5, "linf"),
        dropped="Assumption 5 (J - ||h||_1 >= J0)"),)


@register
class Proposition8Bijection(_ModesTheorem):
    id = "pitfalls.prop8.bijection"
    number = "Proposition 8 (2)"
    statement = ("eq. (5) under Assumption 5: f(x) = x with the clique set to -1 maps R_1 onto R_-1 and "
                 "p(x) = e^{2 h_G} p(f(x)); log p from the exponential-family implementation, not the model's")

    def check(self, instance: ModesInstance) -> Verdict:
        spec = instance.spec
        family = IsingFamily(spec.model().graph if spec.convention == "unordered" else _clique_graph(spec),
                             spec.convention)
        log_p = family.log_probabilities(family.parameters(spec.model()))
        R1, Rm1 = mode_masks(spec)
        space = StateSpace(2, spec.n)
        states = space.all_states()[R1]
        image = states.copy()
        image[:, list(spec.clique)] = 0
        target = space.encode(image)
        gap = log_p[R1] - log_p[target]
        main, ok = identity("log p(x) - log p(f(x)) = 2 h_G", gap, np.full(gap.shape, 2 * spec.h_G), 1e-9, 1e-12)
        return verdict(main, conditions={"every x in R_1": ok,
                                         "f is a bijection R_1 -> R_-1": bool(Rm1[target].all() and
                                                                               np.unique(target).size == R1.sum() ==
                                                                               Rm1.sum())})


def _clique_graph(spec: CliqueIsing) -> nx.Graph:
    graph = nx.empty_graph(spec.n)
    graph.add_edges_from((a, b) for i, a in enumerate(spec.clique) for b in spec.clique[i + 1:])
    return graph


@register
class Corollary3(_PTheorem):
    """Not attainable: with h_G at Assumption 6's threshold (1/2) ln(2(2 - delta)/delta), p(R_-1)/p(R_1) =
    e^{-2 h_G} = delta/(2(2 - delta)) and the other counts carry mass e^{-Omega(J0)}, so the N-Gibbs half
    misses R_1 with probability delta/(4 - delta): the bound delta/2 is (4 - delta)/2 >= 3/2 times the
    exact value (a larger h_G only loosens it). The stored instance reaches 1.505 (delta = 0.99)."""

    id = "pitfalls.cor3"
    number = "Corollary 3"
    statement = ("eq. (5) under Assumptions 5 and 6 (|C| >= 8(1 + ln(4M/delta)), h_G >= (1/2) ln(2(2-delta)/delta), "
                 "J0 >= (|C|/2) ln 2), start with sum_C x <= -2: with probability >= 1 - delta one N-Gibbs step lands "
                 "in R_1 and the independent parallel sampler avoids R_1 for M steps; checked as the two halves, "
                 "each failing with probability <= delta/2, exactly on the count of +1 clique spins (equal clique fields)")
    conventions = ("Assumption 6 forces |C| >= 20, so the clique is reduced to its +1 count (exact when the clique "
                   "fields are equal); isolated spins are independent of the clique. The parallel half is loose by "
                   "many orders of magnitude (a Hoeffding and union bound) and is checked as a condition.")

    def strategy(self) -> st.SearchStrategy:
        return symmetric_cliques()

    def hypotheses(self, instance: SymmetricClique) -> Applicability:
        c, d, M = instance.size, instance.delta, instance.M
        ok = (c >= 8 * (1 + log(4 * M / d)) and instance.h_G >= 0.5 * log(2 * (2 - d) / d)
              and instance.J0 >= 0.5 * c * log(2) and instance.h_G > instance.outside and instance.J0 > 0)
        return Applicability(ok, "" if ok else "Assumption 5 or 6 fails")

    def check(self, instance: SymmetricClique) -> Verdict:
        c = instance.size
        w = 2 * instance.J if instance.convention == "ordered" else instance.J
        field = instance.h_G / c
        law = clique_count_law(c, w, field)
        gibbs_fail = float(law[:-1].sum())  # N-Gibbs samples p exactly: it misses R_1 with probability p(R_1^c)
        P = clique_count_parallel_kernel(c, w, field)
        inside = np.arange(c + 1) < c  # outside R_1
        start = 2 * np.arange(c + 1) - c <= -2
        stay = inside.astype(np.float64)
        for _ in range(instance.M):
            stay = (P[:, inside] @ stay[inside]) * inside
        parallel_fail = float(1 - stay[start].min())
        return verdict(Part("N-Gibbs: P(X_1 not in R_1) <= delta/2", gibbs_fail, instance.delta / 2, "<=",
                            1e-12 * gibbs_fail + 1e-300, 0.0),
                       conditions={"parallel: P(visit R_1 within M) <= delta/2": parallel_fail <= instance.delta / 2},
                       parallel_failure=parallel_fail)

    attaining = (Attaining("|C| = 20, M = 1, delta = 0.99, h_G and J0 = (|C|/2) ln 2 at Assumption 6's thresholds, no "
                           "outside spins: P(X_1 not in R_1) = delta/(4 - delta), the least loose the N-Gibbs half can "
                           "be ((4 - delta)/2 = 1.505 x; see the class docstring)",
                           lambda: SymmetricClique(20, 10 * log(2) + 0.5 * log(2 * 1.01 / 0.99), 0.5 * log(2 * 1.01 / 0.99),
                                                   0.0, 1, 0.99), looseness=1.5051),)


@register
class Proposition9(OnFirst, _PTheorem):
    id = "pitfalls.prop9"
    number = "Proposition 9"
    statement = ("The weighted pseudolikelihood of an Ising (or Potts) model is convex in theta for any data: "
                 "L((a+b)/2) <= (L(a) + L(b))/2 on random segments, and the Hessian (by finite differences of the "
                 "gradient, not the covariance formula) is positive semidefinite")
    conventions = "theta the natural (exponential-family) parameters; a non-linear reparametrisation breaks convexity."
    weaken_by_hypothesis = True

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(st.one_of(pl_instances(with_data=True, scale=2.0),
                                   pl_instances(adaptive=True, with_data=True, scale=2.0)),
                         st.integers(0, 2**16))

    def hypotheses(self, instance) -> Applicability:
        inst = instance[0]
        if inst.label.get("reparametrised"):
            return Applicability(False, "theta enters through a non-linear map (not the natural parameters)")
        return Applicability(True)

    extras = ("segment_seed",)

    def check(self, instance) -> Verdict:
        inst, seed = instance
        pl = PseudoLikelihood(inst.family, inst.masks, inst.data)
        reparam = (lambda t: t**3) if inst.label.get("reparametrised") else (lambda t: t)
        loss = lambda t: pl.loss(reparam(t))
        rng = np.random.default_rng(seed)
        a = inst.theta
        b = a + rng.normal(scale=2.0, size=a.shape)
        mid, avg = loss((a + b) / 2), (loss(a) + loss(b)) / 2
        # second differences along the segment and along coordinates: convexity in every direction tried
        h = 1e-3
        curvature = min(loss(x + h * d) + loss(x - h * d) - 2 * loss(x)
                        for x in (a, (a + b) / 2) for d in [b - a] + list(np.eye(a.size)))
        return verdict(Part("L((a+b)/2) <= (L(a)+L(b))/2", mid, avg, "<=", 1e-12 * abs(mid), 1e-12 * abs(avg)),
                       conditions={"second differences >= 0": curvature >= -1e-9 * max(1.0, abs(mid))})

    counterexamples = (Counterexample(
        "Ising on 2 spins, 1-PL, data (0.1, 0.2, 0.3, 0.4), theta -> theta^3, a = (0.68, 1.1, -1.35), segment seed 99: "
        "L((a+b)/2) = 2.003 > (L(a)+L(b))/2 = 1.902",
        lambda: (PLInstance(IsingFamily(nx.path_graph(2)), np.array([0.68, 1.1, -1.35]),
                            MaskDistribution.k_subsets(StateSpace(2, 2), 1), np.array([0.1, 0.2, 0.3, 0.4]),
                            {"reparametrised": "cube"}), 99),
        dropped="natural parameters (an exponential family in theta)"),)


@register
class KGibbsSpeedup(_PTheorem):
    id = "pitfalls.kgibbs_speedup"
    number = "Section 2.4 (Lee 2023)"
    statement = ("k-Gibbs mixes at least k times faster than 1-Gibbs: gap(k-Gibbs) >= k gap(1-Gibbs) for the "
                 "same joint (blocks uniform over k-subsets)")

    def strategy(self) -> st.SearchStrategy:
        return joint_instances()

    def check(self, instance: JointInstance) -> Verdict:
        source, k = instance.source, instance.k
        pi = source.joint()
        gap1 = spectral_gap(k_gibbs_kernel(source, 1), pi)
        gapk = spectral_gap(k_gibbs_kernel(source, k), pi)
        ref1, refk = subset_resampling_gap(pi, source.space, 1), subset_resampling_gap(pi, source.space, k)
        trivial = "k = n: one step samples exactly (gap 1)" if k == source.space.length else None
        return verdict(Part("gap(k-Gibbs) >= k gap(1-Gibbs)", gapk, k * gap1, ">=", 1e-11, 1e-11 * k),
                       part("gap(1-Gibbs): engine = dense reference", gap1, ref1, "==", 1e-9, 1e-13, ratio=False),
                       part("gap(k-Gibbs): engine = dense reference", gapk, refk, "==", 1e-9, 1e-13, ratio=False),
                       trivial=trivial, gap_1=gap1, gap_k=gapk)

    attaining = (Attaining("a product law on {0,1}^3, k = 2: gap_k = k/n exactly", lambda: product_joint(), looseness=1.0001),)


def subset_resampling_gap(pi: np.ndarray, space: StateSpace, k: int) -> float:
    """Spectral gap of the k-Gibbs sampler built independently of :mod:`mlmix.theory.kernels.assembled`: for every
    k-subset K, the projection Pi_K(x, y) = 1[y_{-K} = x_{-K}] pi(y) / pi(x_{-K}) (grouping the states by
    their digits off K), averaged over K, symmetrised as D^{1/2} P D^{-1/2} and diagonalised densely
    (1 - second eigenvalue; absolute accuracy ~1e-15)."""
    states = space.all_states()
    n, N = space.length, space.size
    P = np.zeros((N, N))
    subsets = list(combinations(range(n), k))
    for K in subsets:
        rest = [i for i in range(n) if i not in K]
        key = states[:, rest] @ (space.vocab_size ** np.arange(len(rest))) if rest else np.zeros(N, dtype=np.int64)
        same = key[:, None] == key[None, :]
        mass = np.bincount(key, weights=pi)[key]
        P += same * pi[None, :] / mass[:, None]
    P /= len(subsets)
    s = np.sqrt(pi)
    sym = s[:, None] * P / s[None, :]
    return 1.0 - float(np.linalg.eigvalsh((sym + sym.T) / 2)[-2])


def product_joint() -> JointInstance:
    """Three independent binary sites (P(1) = 0.3), k = 2."""

    space = StateSpace(2, 3)
    return JointInstance(LogWeightTable(space, np.log(np.prod(np.where(space.all_states() == 1, 0.3, 0.7), axis=1))),
                         2, 0, 0.0)
