"""Paper P theorem objects: Hypothesis searches, the Prop 5 counterexample, Loewner checks."""

import json

import numpy as np
import pytest

import mlmix.verify.theorems.pitfalls as pitfalls
from mlmix.theory.exponential_family import IsingFamily
from mlmix.theory.ising_modes import CliqueIsing, c_stuck
from mlmix.theory.pseudolikelihood import MaskDistribution
from mlmix.verify.core import REGISTRY, search
from mlmix.verify.pitfalls_strategies import KInstance, ModesInstance, PLInstance

EXPECTED = {"pitfalls.lemma2", "pitfalls.lemma5", "pitfalls.thm1", "pitfalls.thm1.mle", "pitfalls.thm2",
            "pitfalls.thm3", "pitfalls.prop1", "pitfalls.prop6", "pitfalls.prop4", "pitfalls.prop5",
            "pitfalls.prop5.repaired", "pitfalls.prop8.modes", "pitfalls.prop8.bijection", "pitfalls.prop9",
            "pitfalls.kgibbs_speedup"}

TRUE_AS_STATED = sorted(EXPECTED - {"pitfalls.prop5"})


def test_registry():
    ours = {tid for tid, th in REGISTRY.items() if th.paper == "gmlm-pitfalls"}
    assert EXPECTED <= ours


@pytest.mark.parametrize("tid", TRUE_AS_STATED)
def test_search_finds_no_violation(tid):
    report = search(REGISTRY[tid], examples=25, seed=1)
    assert report.holds, report.counterexample
    assert report.examples >= 15
    json.dumps(report.as_dict())


def test_kgibbs_speedup_ratio_is_reported():
    report = search(REGISTRY["pitfalls.kgibbs_speedup"], examples=25, seed=2)
    assert report.holds and report.tightness_median >= 1.0


def test_refuted_prop5_is_marked_and_the_repaired_version_excludes_the_counterexample():
    stated, repaired = REGISTRY["pitfalls.prop5"], REGISTRY["pitfalls.prop5.repaired"]
    assert stated.refuted_in and repaired.refuted_in is None
    spec = CliqueIsing(n=2, clique=(0, 1), J=0.002, h=(0.001, 0.0))
    delta = 2 * np.exp(-c_stuck(spec)) * (1 + 1e-6)
    instance = ModesInstance(spec, 2, delta)
    assert stated.hypotheses(instance) and not stated.check(instance).holds
    assert not repaired.hypotheses(instance)


def test_prop5_counterexample_is_found_and_minimal():
    report = search(REGISTRY["pitfalls.prop5"], examples=60, seed=0)
    assert not report.holds and not report.unexpected  # documented, so `mlmix verify` exits 0
    ce = report.counterexample
    assert len(ce["instance"]["clique"]) == 2 and ce["lhs"] < ce["rhs"]
    assert ce["details"]["hoeffding_radius"] < 0 and ce["details"]["T"] >= 1


def test_prop5_documented_counterexample():
    spec = CliqueIsing(2, (0, 1), 0.002, (0.001, 0.0))
    delta = 2 * np.exp(-c_stuck(spec)) * (1 + 1e-6)
    verdict = REGISTRY["pitfalls.prop5"].check(ModesInstance(spec, 2, delta))
    assert not verdict.holds and verdict.details["T"] == 1
    assert verdict.lhs == pytest.approx(0.2518, abs=1e-4) and verdict.rhs == pytest.approx(0.2628, abs=1e-4)
    big = CliqueIsing(8, range(8), 0.8 + 3.0, (0.1,) * 8)
    assert REGISTRY["pitfalls.prop5"].check(ModesInstance(big, 8, 0.3)).holds


def test_prop8_equality_case():
    """Prop 8's second inequality is attained (not strict) with J0 = J - ||h||_1 when the other clique
    field vanishes (unordered pairs); our check is the non-strict version."""
    spec = CliqueIsing(2, (0, 1), 0.5 + 0.25, (0.5, 0.0), "unordered")
    v = REGISTRY["pitfalls.prop8.modes"].check(ModesInstance(spec, 2, 0.5))
    assert v.holds and v.details["Rm1_over_rest_minus_2J0"] == pytest.approx(0.0, abs=1e-12)


def test_loewner_margin():
    A = np.diag([1.0, 2.0])
    assert pitfalls.loewner_margin(A, A + np.diag([0.0, 1.0]))[0] == pytest.approx(0.0)
    margin, scale = pitfalls.loewner_margin(A, np.diag([0.5, 5.0]))
    assert margin == pytest.approx(-0.5 / 5.0) and scale == pytest.approx(5.0)
    non_symmetric = np.array([[0.0, 1.0], [-1.0, 0.0]])  # its symmetric part is 0
    assert pitfalls.loewner_margin(np.zeros((2, 2)), non_symmetric)[0] == pytest.approx(0.0)


def test_theorem2_can_fail_with_a_too_small_constant():
    """The Loewner check is sensitive: Gamma_PL <= c I^{-1} fails for c below the needed constant."""
    import networkx as nx

    fam = IsingFamily(nx.cycle_graph(4))
    theta = np.array([0.2, -0.1, 0.3, 0.0, 0.6, -0.5, 0.4, 0.7])
    inst = PLInstance(fam, theta, MaskDistribution.k_subsets(fam.space, 1))
    v = REGISTRY["pitfalls.thm2"].check(inst)
    assert v.holds and v.tightness >= 1
    needed = v.details["needed_constant"]
    from mlmix.theory.pseudolikelihood import asymptotic_covariance

    gamma = asymptotic_covariance(fam, theta, inst.masks).gamma
    margin, _ = pitfalls.loewner_margin(gamma, 0.99 * needed * fam.inverse_fisher(theta))
    assert margin < -1e-6


def test_near_singular_instances_are_not_applicable():
    import networkx as nx

    fam = IsingFamily(nx.path_graph(3))
    theta = np.array([15.0, 15.0, 15.0, 0.0, 0.0])
    app = REGISTRY["pitfalls.thm1"].hypotheses(KInstance(fam, theta, 1))
    assert not app.ok and "near-singular" in app.reason
    app = REGISTRY["pitfalls.thm2"].hypotheses(PLInstance(fam, theta, MaskDistribution.k_subsets(fam.space, 2)))
    assert not app.ok and "near-singular" in app.reason


def test_assumption5_gates_the_mode_theorems():
    spec = CliqueIsing(10, range(4), 1.0, (5.0,) * 10)
    app = REGISTRY["pitfalls.prop4"].hypotheses(ModesInstance(spec, 4, 0.1))
    assert not app.ok and "J0" in app.reason
