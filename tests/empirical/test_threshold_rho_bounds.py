"""Theorem 5's threshold from every certified rho_ij(T) bound that holds at every T and does not increase in T.

The head's ellipsoid bound enters in its monotone envelope (``influence_upper(..., monotone=True)``): checked
non-increasing on a grid, at least the pointwise bound at every larger temperature (the envelope is a
supremum over T' >= T; on a head built so that the pointwise bound rises with T, the pointwise bound would
not do), and sound: at the threshold, the rho(T) enumerated from a float64 copy of a tiny random BERT
(every context, logits read off ``model(input_ids)``) is below 1, and the threshold is at or below the one
of Lemma 6 alone.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import WORDS, tiny_masked_lm
from test_head_bound import brute_force

from mlmix.empirical.model_constants.certify import _aggregate, _lemma6, certify, theorem5_threshold
from mlmix.empirical.model_constants.head_bound import HeadParts, head_parts, influence_upper
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.verify.theorems.head_bound_checks import envelope_margin, leading_letter_head

GRID = np.geomspace(0.05, 500.0, 240)


def test_the_pointwise_ellipsoid_bound_can_rise_with_t_and_the_envelope_does_not():
    parts = leading_letter_head(30.0)
    pointwise = np.array([influence_upper(parts, T) for T in GRID])
    envelope = np.array([influence_upper(parts, T, monotone=True) for T in GRID])
    assert (np.diff(pointwise) > 0).any()  # the plain bound is not monotone here
    assert (np.diff(envelope) <= 0).all()
    for k, T in enumerate(GRID):  # the envelope is above the bound at every larger temperature
        assert envelope[k] >= pointwise[k:].max() * (1 - 1e-12)
    env, point = envelope_margin(parts)  # verify's part: the pointwise bound in the envelope's place fails it
    assert env >= point and influence_upper(parts, 1.0) < 0.5 * point


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 50), q=st.integers(2, 6), centred=st.booleans(), spread=st.floats(0.0, 40.0))
def test_the_envelope_is_non_increasing_and_above_the_pointwise_bound(seed, q, centred, spread):
    rng = np.random.default_rng(seed)
    d = 5
    parts = HeadParts(rng.normal(size=d), rng.normal(size=(q, d)), centred, "random",
                      rng.normal(size=q) * spread, np.zeros(q))
    envelope = np.array([influence_upper(parts, T, monotone=True) for T in GRID])
    pointwise = np.array([influence_upper(parts, T) for T in GRID])
    assert (np.diff(envelope) <= 0).all()
    assert (envelope >= pointwise * (1 - 1e-12)).all()


@pytest.mark.parametrize("arch", ["bert", "roberta"])
@pytest.mark.parametrize("seed", [0, 3])
def test_the_threshold_is_at_most_lemma6s_and_the_enumerated_rho_is_below_one_there(arch, seed):
    n, letters = 3, WORDS[:3]
    model, tok = tiny_masked_lm(arch, seed=seed, hidden=8, layers=1)
    source = MaskedLMConditionals(model, tok, n, candidates=" ".join(letters), device="cpu", temperature=1.0)
    cert = certify(source, max_passes=1, use_cache=False)  # the bounds route: head bound and ellipsoid only
    th = cert.threshold
    t5 = th["temperature"]
    lemma6 = theorem5_threshold(cert.delta_upper)["temperature"]
    assert "ellipsoid" in th["method"] and t5 <= lemma6
    parts = head_parts(model, tok.convert_tokens_to_ids(list(letters)))
    off = ~np.eye(n, dtype=bool)
    e = cert.score_accuracy.error

    def B(T: float) -> float:
        pairs = np.minimum(_lemma6(cert.delta_upper, T), influence_upper(parts, T, monotone=True) + e / T)
        return _aggregate(pairs * off, 0)

    assert B(t5) < 1 <= B(0.99 * t5)  # a threshold moved down by 1% is caught
    for factor in (1.0, 1.3, 3.0):
        _, rho = brute_force(model, tok, n, letters, t5 * factor)
        assert rho.sum(axis=0).max() <= B(t5 * factor) < 1


def test_the_enumeration_route_takes_the_head_bound_too_and_a_table_alone_cannot():
    model, tok = tiny_masked_lm("bert", seed=1, hidden=8, layers=1)
    source = MaskedLMConditionals(model, tok, 2, candidates=" ".join(WORDS[:3]), device="cpu", temperature=1.0)
    cert = certify(source, use_cache=False, log=lambda _: None)
    assert cert.method == "enumeration" and "ellipsoid" in cert.threshold["method"]
    assert cert.threshold["temperature"] <= theorem5_threshold(cert.delta_upper)["temperature"]
    only_lemma6 = certify(source, use_cache=False, log=lambda _: None, head_bound=None)
    assert "ellipsoid" not in only_lemma6.threshold["method"]
    assert only_lemma6.threshold == theorem5_threshold(only_lemma6.delta_upper)


def test_a_threshold_from_rho_bounds_alone():
    f = lambda T: np.full((3, 3), 0.8 / T) * (1 - np.eye(3))  # noqa: E731 (2 * 0.8 / T < 1 <=> T > 1.6)
    th = theorem5_threshold(None, rho_upper_at=((f, "a bound"),))
    assert th["temperature"] == pytest.approx(1.6, rel=1e-8) and "a bound" in th["method"]
    never = theorem5_threshold(None, rho_upper_at=((lambda T: np.ones((3, 3)), "TV <= 1"),))
    assert never["temperature"] is None and "at or above 1" in never["why"]
