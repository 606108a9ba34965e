"""Paper P theorem objects: searches that hold and whose weakened bounds are caught, stored
counterexamples (Prop 5, Prop 8 under the l-infinity reading, Theorem 1 and Lemma 2 without
realizability, Prop 9 off the natural parameters), exact closed forms (Lemma 3's rationals, Lemma 8
and Hoeffding on tiny cases, the count reduction of Corollary 3)."""

from math import comb

import mpmath as mp
import networkx as nx
import numpy as np
import pytest

from mlmix.theory.sources.space import StateSpace
from mlmix.theory.training.exponential_family import IsingFamily
from mlmix.theory.training.modes import (
    CliqueIsing,
    c_stuck,
    clique_count_law,
    clique_count_parallel_kernel,
    clique_kernel,
)
from mlmix.theory.training.pseudolikelihood import MaskDistribution, PseudoLikelihood
from mlmix.verify.exact_laws import empirical_tv_law, upper_quantile
from mlmix.verify.pitfalls_strategies import BernoulliSum, EmpiricalLaw, ModesInstance, PLInstance
from mlmix.verify.theorems.pitfalls.pitfalls_base import loewner_ratio
from mlmix.verify.verdicts import REGISTRY, UNCHECKED, search

PAPER_P = [tid for tid, th in REGISTRY.items() if th.paper == "pitfalls"]
CHECKED = [tid for tid in PAPER_P if REGISTRY[tid].refuted_in is None]

#: Every numbered result of paper P (PDF numbering): a theorem object or a not-checkable entry.
NUMBERED = ["Lemma 1", "Lemma 2", "Theorem 1", "Theorem 2", "Proposition 1", "Theorem 3", "Theorem 4",
            "Proposition 2", "Proposition 3", "Proposition 4", "Proposition 5", "Lemma 3", "Lemma 4", "Lemma 5",
            "Proposition 6", "Proposition 7", "Lemma 6", "Lemma 7", "Corollary 1", "Corollary 2", "Lemma 8",
            "Proposition 8", "Corollary 3", "Lemma 9", "Lemma 10", "Lemma 11", "Proposition 9"]


def test_every_numbered_result_is_catalogued():
    numbers = [e.number for e in list(REGISTRY.values()) + list(UNCHECKED.values()) if e.paper == "pitfalls"]
    for n in NUMBERED:
        assert any(x == n or x.startswith(n + " ") for x in numbers), n
    for entry in UNCHECKED.values():
        assert len(entry.reason) > 40  # a reason, not a placeholder


@pytest.mark.parametrize("tid", CHECKED)
def test_search_holds_and_weakened_bound_is_caught(tid):
    report = search(REGISTRY[tid], examples=60, seed=1)
    assert report.status == "holds", report.counterexample
    assert report.weakened == "caught", (report.weakened_by, report.weakened_parts)
    assert report.nontrivial >= 1


@pytest.mark.parametrize("tid", [t for t in PAPER_P if REGISTRY[t].counterexamples])
def test_stored_counterexamples_fail_as_documented(tid):
    report = search(REGISTRY[tid], examples=5, seed=0)
    assert all(s["as_expected"] for s in report.stored), report.stored


def test_refuted_prop5_is_known_false_and_the_repaired_version_excludes_the_counterexample():
    stated, repaired = REGISTRY["pitfalls.prop5"], REGISTRY["pitfalls.prop5.repaired"]
    report = search(stated, examples=60, seed=0)
    assert report.status == "known false" and not report.unexpected
    spec = CliqueIsing(2, (0, 1), 0.002, (0.001, 0.0))
    instance = ModesInstance(spec, 2, 2 * np.exp(-c_stuck(spec)) * (1 + 1e-6))
    v = stated.check(instance)
    assert stated.hypotheses(instance) and not v.holds and v.details["T"] == 1
    # independently, by hand: from (-1, -1) each spin of the parallel sampler stays at -1 with
    # 1 / (1 + e^{2 (h_i - w)}), w = 2J the ordered-pairs edge weight; delta = 2 e^{-c_stuck} (1 + 1e-6)
    # with c_stuck = 2 (-1 + tanh(J0) |C| / 2)^2 / |C|, J0 = J - ||h||_1
    with mp.workdps(30):
        w, J0 = mp.mpf("0.004"), mp.mpf("0.002") - mp.mpf("0.001")
        stay = 1 / ((1 + mp.exp(2 * (mp.mpf("0.001") - w))) * (1 + mp.exp(2 * (0 - w))))
        delta = 2 * mp.exp(-(-1 + mp.tanh(J0)) ** 2) * (1 + mp.mpf("1e-6"))
    assert 1 - v.lhs == pytest.approx(float(stay), rel=1e-12) and 1 - v.rhs == pytest.approx(float(1 - delta), rel=1e-12)
    assert float(stay) < float(1 - delta)  # the stated conclusion fails by 0.011
    assert not repaired.hypotheses(instance)


def test_prop8_equality_case_under_unordered_pairs():
    """Prop 8's second inequality is attained with J0 = J - ||h||_1 when the other clique field
    vanishes (unordered pairs): the paper's strict '>' fails, the non-strict check holds."""
    spec = CliqueIsing(2, (0, 1), 0.5 + 0.25, (0.5, 0.0), "unordered")
    v = REGISTRY["pitfalls.prop8.modes"].check(ModesInstance(spec, 2, 0.5))
    assert v.holds and v.parts[1].lhs == pytest.approx(v.parts[1].rhs, rel=1e-12)
    ordered = REGISTRY["pitfalls.prop8.modes"].check(ModesInstance(CliqueIsing(2, (0, 1), 0.75, (0.5, 0.0)), 2, 0.5))
    assert ordered.parts[1].lhs > 1.5 * ordered.parts[1].rhs  # strict under the ordered reading


def test_lemma3_rationals():
    v = REGISTRY["pitfalls.lemma3"].check("paper example")
    assert v.holds and v.parts[0].lhs == pytest.approx(6 / 7, rel=1e-12) and v.parts[1].lhs == pytest.approx(0.75)


def test_lemma8_is_nearly_attained_for_one_fair_coin():
    """n = 1 draw of a fair coin: TV(p~, p) = 1/2 always; the radius sqrt(8/(16 delta)) stays above it
    (within a factor 1.5 at delta = 0.95), so halving the radius fails."""
    values, probs = empirical_tv_law(np.array([0.5, 0.5]), 1)
    assert upper_quantile(values, probs, 0.95) == pytest.approx(0.5)
    v = REGISTRY["pitfalls.lemma8"].check(EmpiricalLaw((0.5, 0.5), 1, 0.95))
    assert v.holds and not v.weakened_holds(0.5)


def test_hoeffding_exact_tail():
    """One fair coin, t = 0.49: P(|S - 1/2| >= t) = 1 <= 2 e^{-2 t^2} = 1.24, and not <= half of it."""
    v = REGISTRY["pitfalls.lemma6"].check(BernoulliSum((0.5,), 0.49))
    assert v.main.lhs == pytest.approx(1.0) and v.main.rhs == pytest.approx(1.0)  # the bound is capped at 1
    v = REGISTRY["pitfalls.lemma6"].check(BernoulliSum((0.5, 0.5), 1.0))
    assert v.main.lhs == pytest.approx(0.5) and v.main.rhs == pytest.approx(2 * np.exp(-1.0))
    assert v.holds and not v.weakened_holds(0.5)


def test_clique_count_reduction_matches_the_clique_chain():
    """With equal clique fields the +1 count under the parallel sampler is a Markov chain: lumping the
    exact 2^|C| clique kernel gives the count kernel, and the law of the count is the clique law's."""
    c, J, h = 4, 0.3, 0.2
    spec = CliqueIsing(c, tuple(range(c)), J, (h,) * c)
    P = np.asarray(clique_kernel(spec, "parallel"))
    counts = StateSpace(2, c).all_states().sum(axis=1)
    K = clique_count_parallel_kernel(c, spec.edge_weight, h)
    for x in range(2**c):
        lumped = np.bincount(counts, weights=P[x], minlength=c + 1)
        assert np.allclose(lumped, K[counts[x]], atol=1e-13)
    joint = np.exp(spec.clique_model().log_joint())
    law = np.bincount(counts, weights=joint / joint.sum(), minlength=c + 1)
    assert np.allclose(law, clique_count_law(c, spec.edge_weight, h), atol=1e-13)
    assert np.isclose(K.sum(axis=1), 1).all() and comb(c, 2) == 6


def test_loewner_ratio():
    A = np.diag([1.0, 2.0])
    assert loewner_ratio(A, A) == pytest.approx(1.0)
    assert loewner_ratio(np.diag([0.5, 5.0]), A) == pytest.approx(2.5)


def test_theorem2_is_attained_and_fails_with_a_smaller_constant():
    fam = IsingFamily(nx.cycle_graph(4))
    theta = np.array([0.2, -0.1, 0.3, 0.0, 0.6, -0.5, 0.4, 0.7])
    v = REGISTRY["pitfalls.thm2"].check(PLInstance(fam, theta, MaskDistribution.k_subsets(fam.space, 1)))
    assert v.holds and v.main.tightness >= 1 and not v.weakened_holds(0.99 * v.main.lhs / v.main.rhs)


def test_near_singular_instances_are_not_applicable():
    from mlmix.verify.pitfalls_strategies import KInstance

    fam = IsingFamily(nx.path_graph(3))
    theta = np.array([15.0, 15.0, 15.0, 0.0, 0.0])
    app = REGISTRY["pitfalls.thm1"].hypotheses(KInstance(fam, theta, 1))
    assert not app.ok and "near-singular" in app.reason


def test_assumption5_gates_the_mode_theorems():
    spec = CliqueIsing(10, range(4), 1.0, (5.0,) * 10)
    app = REGISTRY["pitfalls.prop4"].hypotheses(ModesInstance(spec, 4, 0.1))
    assert not app.ok and "J0" in app.reason


# ---- attaining instances: their looseness against closed forms


def test_cor3_attaining_gibbs_half_is_delta_over_four_minus_delta():
    """At Assumption 6's h_G threshold, p(R_1^c) = delta/(4 - delta) (J0 = 10 ln 2 makes the other counts
    negligible): the bound delta/2 is (4 - delta)/2 = 1.505 times looser, the least it can be."""
    (a,) = REGISTRY["pitfalls.cor3"].attaining
    v = REGISTRY["pitfalls.cor3"].check(a.build())
    assert v.main.lhs == pytest.approx(0.99 / (4 - 0.99), rel=1e-6)
    assert v.main.tightness == pytest.approx((4 - 0.99) / 2, rel=1e-6)


def test_thm1_attaining_equality_lies_in_the_kernel_of_the_information_gap():
    """k + 1 = n = 3: I - H_2 = avg_j Cov(E[T | x_j]) has rank <= 3 < 5, so a direction with H_2 v = I v
    exists and Gamma^3 = Gamma^2 there: lambda_max = 1."""
    (a,) = REGISTRY["pitfalls.thm1"].attaining
    inst = a.build()
    masks = MaskDistribution.k_subsets(inst.family.space, 2)
    H2 = PseudoLikelihood(inst.family, masks, inst.family.probabilities(inst.theta)).hessian(inst.theta)
    gap = inst.family.fisher_information(inst.theta) - H2
    assert np.linalg.matrix_rank(gap, tol=1e-10) <= 3
    assert REGISTRY["pitfalls.thm1"].check(inst).main.lhs == pytest.approx(1.0, abs=1e-9)


def test_prop7_and_pinsker_attaining_instances():
    """A point-mass data law on 11: the worst conditional KL is -ln of the model's least likely conditional
    at 11, which is beta. Pinsker near p_theta: TV = 0.005 (and 5e-6), sqrt(KL/2) = TV (1 + O(eps^2))."""
    (a,) = REGISTRY["pitfalls.prop7"].attaining
    inst = a.build()
    p = inst.family.probabilities(inst.theta)  # states 00, 01, 10, 11: the conditionals at 11, by hand
    beta = min(p[3] / (p[3] + p[1]), p[3] / (p[3] + p[2]))
    v = REGISTRY["pitfalls.prop7"].check(inst)
    assert v.main.lhs == pytest.approx(-np.log(beta), rel=1e-12) and v.main.rhs == pytest.approx(-np.log(beta))
    b, b_small = REGISTRY["pitfalls.thm4.pinsker"].attaining
    w = REGISTRY["pitfalls.thm4.pinsker"].check(b.build())
    kl = float(mp.fsum(mp.mpf(x) * mp.log(mp.mpf(x) / mp.mpf(0.25)) for x in b.build().data))
    assert w.main.lhs == pytest.approx(0.005, rel=1e-12) and w.main.rhs == pytest.approx((kl / 2) ** 0.5, rel=1e-9)
    # at 1e-5 the KL (5e-11) is resolved only without cancellation: against 50 digits of sum p log(p/q) - p + q
    # (= KL for laws summing to 1; the float data sums to 1 within 6e-17, which would shift the plain sum by 1e-6)
    w = REGISTRY["pitfalls.thm4.pinsker"].check(b_small.build())
    with mp.workdps(50):
        kl = float(mp.fsum(mp.mpf(x) * mp.log(mp.mpf(x) / mp.mpf(0.25)) - mp.mpf(x) + mp.mpf(0.25)
                           for x in b_small.build().data))
    assert w.main.lhs == pytest.approx(5e-6, rel=1e-9) and w.main.rhs == pytest.approx((kl / 2) ** 0.5, rel=1e-9)
