"""Paper P's side claims checked exactly (verify/theorems/pitfalls_errata.py): the Section 2.3 rate
e^{-2t/C_AT} is false (counterexample in closed form at 50 digits), the factor-1 rates hold and are
nearly attained, C_AT = 1/min w on product laws, and Lemma 1's '0.99' consequence is false
(P(chi^2_1 <= 1) = erf(1/sqrt 2))."""

import math

import mpmath
import numpy as np
import pytest
from scipy.special import erf
from scipy.stats import chi2

from mlmix.theory.sources.conditionals import LogWeightTable
from mlmix.theory.training.block_poincare import tensorization_ratio
from mlmix.theory.training.pseudolikelihood import MaskDistribution
from mlmix.verify.exact_laws import weighted_chi2_cdf
from mlmix.verify.runner import load_theorems
from mlmix.verify.theorems.pitfalls_errata import (
    ProductAT,
    kernel_law,
    light_symbol_instance,
    light_symbol_ratio,
    refresh_law,
)
from mlmix.verify.verdicts import search

THEOREMS = load_theorems()


def test_the_factor_two_rate_fails_on_the_light_symbol_instance_at_fifty_digits():
    discrete = light_symbol_ratio("1e-6", "0.5", 1, continuous=False)
    continuous = light_symbol_ratio("1e-6", "0.5", 1, continuous=True)
    assert discrete > mpmath.exp(-1) + mpmath.mpf("0.08") and continuous > mpmath.exp(-1) + mpmath.mpf("0.19")
    assert float(discrete) == pytest.approx(0.4498, abs=1e-4) and float(continuous) == pytest.approx(0.5580, abs=1e-4)
    # the factor-1 rates hold on the same instance: (1 - 1/2)^1 and e^{-1/2}
    assert discrete < mpmath.mpf("0.5") and continuous < mpmath.exp(-0.5)
    v = THEOREMS["pitfalls.at_rate"].check(light_symbol_instance())
    assert not v.holds and all(v.conditions.values())
    assert v.details["kl_ratio"] == pytest.approx(float(discrete), rel=1e-9)
    assert v.details["kl_ratio_continuous"] == pytest.approx(float(continuous), rel=1e-9)


def test_at_rate_is_known_false_and_its_stored_counterexample_fails():
    report = search(THEOREMS["pitfalls.at_rate"], examples=5, seed=0)
    assert report.status == "known false" and report.stored[0]["conclusion_fails"] is True
    assert search(THEOREMS["pitfalls.at_rate.factor1"], examples=15, seed=1).status == "holds"


def test_kernel_and_refresh_set_laws_agree_for_three_sites_and_unequal_weights():
    rng = np.random.default_rng(3)
    marg = tuple(rng.dirichlet(np.ones(3)) for _ in range(3))
    inst = ProductAT(marg, np.array([0.2, 0.3, 0.5]), rng.dirichlet(np.ones(27)), 3)
    for continuous in (False, True):
        a, b = kernel_law(inst, continuous), refresh_law(inst, continuous)
        assert np.abs(a - b).max() < 1e-12 and b.sum() == pytest.approx(1.0)


def test_c_at_of_a_product_law_is_one_over_the_smallest_weight():
    rng = np.random.default_rng(0)
    marg = tuple(rng.dirichlet(np.ones(2)) for _ in range(3))
    w = np.array([0.5, 0.2, 0.3])
    inst = ProductAT(marg, w, np.zeros(8), 1)
    q = inst.joint()
    source = LogWeightTable(inst.space, np.log(q))
    masks = MaskDistribution.weighted(inst.space, [(0,), (1,), (2,)], w)
    ratios = [tensorization_ratio(source, masks, rng.dirichlet(np.ones(8) * a)) for a in (0.1, 1, 10) for _ in range(30)]
    assert max(ratios) <= inst.c_at * (1 + 1e-9)  # the tensorization upper bound
    r = np.prod([np.array([1.0, 0.0])[inst.space.all_states()[:, 1]] if k == 1 else
                 m[inst.space.all_states()[:, k]] for k, m in enumerate(marg)], axis=0)
    assert tensorization_ratio(source, masks, r) == pytest.approx(1 / 0.2, rel=1e-10)  # attained


def test_weighted_chi_square_law_against_closed_forms_and_sampling():
    lo, hi = weighted_chi2_cdf(np.array([2.5]), 2.5)
    assert lo == hi == pytest.approx(erf(1 / math.sqrt(2)), rel=1e-14)
    for k in (2, 5):
        lo, hi = weighted_chi2_cdf(np.full(k, 0.7), 0.7 * k)
        assert lo <= chi2.cdf(k, k) + 1e-15 and hi >= chi2.cdf(k, k) - 1e-15 and hi - lo < 1e-12
    lam = np.array([3.0, 0.5, 0.05])
    lo, hi = weighted_chi2_cdf(lam, lam.sum())
    z = np.random.default_rng(0).standard_normal((400_000, 3))
    mc = float(((z ** 2) @ lam <= lam.sum()).mean())
    assert hi - lo < 1e-10 and abs(mc - lo) < 5 * math.sqrt(lo * (1 - lo) / 400_000)
    with pytest.raises(ValueError):
        weighted_chi2_cdf(np.array([1.0, -1.0]), 1.0)


def test_lemma1_erratum_is_known_false_with_the_chi_square_one_probability():
    theorem = THEOREMS["pitfalls.lemma1.erratum"]
    report = search(theorem, examples=5, seed=0)
    assert report.status == "known false"
    stored = report.stored[0]
    assert stored["conclusion_fails"] is True
    assert stored["verdict"]["lhs"] == pytest.approx(erf(1 / math.sqrt(2)), abs=1e-12)
    assert stored["verdict"]["lhs"] < 0.99
