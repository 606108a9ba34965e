"""Paper G's theorems through pytest: one Hypothesis search per theorem, the hypotheses that matter
(smallest instances breaking one hypothesis on which the conclusion fails), exact sympy
certificates on rational instances, and the tightness conventions."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, find, settings
from hypothesis.errors import NoSuchExample

from mlmix.theory.kernels import glauber_kernel
from mlmix.theory.spectral import is_reversible
from mlmix.theory.stationary import stationary_distribution
from mlmix.theory.structure import communicating_classes
from mlmix.verify import strategies as S
from mlmix.verify.core import REGISTRY, search
from mlmix.verify.runner import find_violation, load_theorems
from mlmix.verify.theorems import glauber as G

load_theorems()
GLAUBER = sorted(i for i, t in REGISTRY.items() if t.paper == "glauber-mlm")


def test_every_result_of_the_paper_is_registered():
    assert set(GLAUBER) >= {"glauber.prop1", "glauber.cor2", "glauber.thm3", "glauber.prop4",
                            "glauber.prop4.converse", "glauber.thm5", "glauber.thm5.coupling", "glauber.lemma6",
                            "glauber.cor7", "glauber.thm8.escape", "glauber.thm8.conductance",
                            "glauber.thm8.mixing", "glauber.drift"}


@pytest.mark.parametrize("theorem_id", GLAUBER)
def test_theorem_holds(theorem_id):
    theorem = REGISTRY[theorem_id]
    verdicts = []
    report = search(theorem, examples=25, seed=1, on_verdict=lambda inst, v: verdicts.append(v))
    assert report.holds, report.counterexample
    assert report.examples >= 10
    for v in verdicts:  # looseness factors are >= 1 whenever a bound holds
        assert v.tightness is None or v.tightness >= 1 - 1e-9, (theorem_id, v)


def _smallest(theorem_id, hypothesis_name):
    theorem = REGISTRY[theorem_id]
    violation = next(v for v in theorem.violations if v.hypothesis.startswith(hypothesis_name))
    return theorem, find_violation(theorem, violation, examples=150)


def test_reducible_chain_without_positive_conditionals():
    theorem, inst = _smallest("glauber.cor2", "positive")
    assert not theorem.hypotheses(inst)
    P = glauber_kernel(inst.source)
    classes, closed = communicating_classes(P)
    assert sum(closed) >= 2  # several closed classes: no unique stationary law
    assert not theorem.check(inst).holds
    assert inst.space.size <= 8  # shrinking gives a tiny counterexample
    theorem1, inst1 = _smallest("glauber.prop1", "positive")
    assert not REGISTRY["glauber.prop1"].check(inst1).details["irreducible"]


def test_incompatible_conditionals_break_reversibility_and_eq41():
    theorem, inst = _smallest("glauber.thm3", "a compatible")
    assert G.compatible_joint(inst.source) is None
    P = glauber_kernel(inst.source)
    pi = stationary_distribution(P)
    assert not is_reversible(P, pi, rtol=1e-6)
    verdict = theorem.check(inst)
    assert verdict.details["detailed_balance"] > 1e-6 and verdict.details["eq_4_1"] > 1e-6
    assert inst.space.length == 2  # the smallest incompatible chains live on two sites


def test_incompatible_conditionals_have_a_positive_rectangle():
    theorem, inst = _smallest("glauber.prop4", "compatible")
    verdict = theorem.check(inst)
    assert verdict.lhs > 0 and not verdict.holds


def test_rho_at_least_one_coupling_does_not_contract():
    theorem, inst = _smallest("glauber.thm5", "rho")
    rho = G.influence_matrix(inst.source).rho
    assert rho >= 1
    assert G._max_coupled_distance(G._kernel(inst), inst) >= 1.0


def test_marginless_basin_escapes_at_low_temperature():
    theorem, inst = _smallest("glauber.thm8.mixing", "Assumption 1")
    assert not G.basin_margin(inst.source, inst.basin).all_argmax
    x = int(np.flatnonzero(inst.basin)[0])
    escape = 1 - G._kernel(inst)[x, x]
    assert escape >= 1 / (2 * inst.space.length) - 1e-12


def _settings():
    return settings(max_examples=60, database=None, derandomize=True, deadline=None,
                    suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("theorem_id,flags", [
    ("glauber.prop1", ("exact_rows_sum_to_one", "float_matches_exact")),
    ("glauber.thm3", ("exact_detailed_balance", "exact_stationary")),
    ("glauber.prop4", ("exact_R_zero",)),
])
def test_exact_rational_certificates(theorem_id, flags):
    """Rational instances are certified in sympy arithmetic; pick one with several states."""
    theorem = REGISTRY[theorem_id]
    inst = find(S.rational_joint_instances(), lambda i: i.space.size >= 8 and i.space.length >= 2,
                settings=_settings())
    verdict = theorem.check(inst)
    assert verdict.holds
    for flag in flags:
        assert verdict.details[flag] is True


def test_exact_certificate_detects_an_incompatible_rational_table():
    """A rational table with no compatible joint: the exact rectangle test is False somewhere."""
    inst = find(S.rational_table_instances(), lambda i: i.space.length >= 2 and G.compatible_joint(i.source) is None,
                settings=_settings())
    assert REGISTRY["glauber.prop4"].check(inst).details["exact_R_zero"] is False
    assert REGISTRY["glauber.prop1"].check(inst).details["exact_rows_sum_to_one"] is True


def test_lemma6_tanh_bound_on_score_pairs():
    """TV(softmax(a/T), softmax(b/T)) <= tanh(osc(a-b)/(4T)) <= osc(a-b)/(4T) on every pair Hypothesis
    tries, with equality for two symbols and a - b = (c, -c)."""
    from scipy.special import softmax

    def violates(pair):
        a, b, T = pair
        tv = 0.5 * np.abs(softmax(a / T) - softmax(b / T)).sum()
        d = a - b
        osc = d.max() - d.min()
        return tv > G.tv_bound_from_oscillation(osc, T) + 1e-12 or \
            G.tv_bound_from_oscillation(osc, T) > G.tv_bound_from_oscillation(osc, T, linear=True) + 1e-15

    with pytest.raises(NoSuchExample):
        find(S.score_pairs(), violates, settings=_settings())
    for c, T in [(0.3, 1.0), (2.0, 0.5), (5.0, 3.0)]:
        tv = 0.5 * np.abs(softmax(np.array([c, 0]) / T) - softmax(np.array([0, c]) / T)).sum()
        assert tv == pytest.approx(float(G.tv_bound_from_oscillation(2 * c, T)), rel=1e-12)


def test_thm8_bounds_are_consistent_on_a_constructed_basin():
    inst = find(S.basin_instances(two_wells=True, max_ratio=12.0),
                lambda i: bool(REGISTRY["glauber.thm8.mixing"].hypotheses(i)), settings=_settings())
    for tid in ("glauber.thm8.escape", "glauber.thm8.conductance", "glauber.thm8.mixing"):
        v = REGISTRY[tid].check(inst)
        assert v.holds, (tid, v)
    mixing = REGISTRY["glauber.thm8.mixing"].check(inst)
    assert mixing.lhs >= 1 / (4 * mixing.details["conductance"]) - 1e-9
    assert math.isfinite(mixing.rhs)
