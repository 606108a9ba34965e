"""The pass cap and the threshold temperature of certify (mlmix.empirical.model_constants.certify): a masked LM's
ledger counts every forward pass (one per masked row, the rate measurement's included) and certify never
makes more than ``max_passes`` of them, whatever the route; the threshold temperature of Theorem 5 is the
root of a bound that decreases in T, brackets it within 1e-9, lies at or below T*'s upper end, and above it
the enumerated rho(T) of the model is < 1 at every temperature tried; an end moved by 1% is caught."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import tiny_masked_lm

from mlmix.empirical.model_constants import certify as cf
from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.errors import PassCapError
from mlmix.theory.local.influence import aggregate_influence, influence_and_oscillation
from mlmix.theory.sources.conditionals import ScoreTable


@functools.lru_cache(maxsize=None)
def model(arch: str, seed: int):
    return tiny_masked_lm(arch, seed=seed)


def source(arch: str = "bert", seed: int = 0, frame: str = "_ _ a _", T: float = 1.0) -> MaskedLMConditionals:
    m, tok = model(arch, seed)
    return MaskedLMConditionals(m, tok, frame=frame, candidates="a b c", device="cpu", temperature=T)


def lemma6_bound(delta_upper: np.ndarray, T: float) -> float:
    return aggregate_influence(np.tanh(delta_upper / (4 * T))).rho


@settings(max_examples=10, deadline=None)
@given(arch=st.sampled_from(["bert", "roberta", "modernbert"]), cap=st.integers(0, 400),
       budget=st.sampled_from([None, 600.0]), seed=st.integers(0, 5))
def test_certify_never_makes_more_passes_than_the_cap(arch, cap, budget, seed):
    mlm = source(arch, seed % 2)
    before = mlm.ledger.used
    out = cf.certify(mlm, max_passes=cap, budget_s=budget, use_cache=False, seed=seed, log=lambda _: None)
    assert out.passes == mlm.ledger.used - before <= cap
    assert (out.method == "enumeration") == (cf.passes_needed(mlm.space) <= out.passes)
    assert mlm.ledger.cap is None  # the cap was the call's own


def test_the_ledger_refuses_a_pass_past_its_cap_before_making_it():
    mlm = source()
    mlm.ledger.cap = 5
    copy = mlm.at_temperature(2.0)  # temperature copies share the ledger
    copy.scores(np.zeros((5, 3), dtype=np.int64), 0)
    with pytest.raises(PassCapError, match="exceed the cap of 5"):
        mlm.scores(np.zeros((1, 3), dtype=np.int64), 1)
    assert mlm.ledger.used == 5 and mlm.ledger.max_abs_score > 0


@pytest.mark.parametrize("arch, T", [("bert", 1.0), ("roberta", 0.4), ("modernbert", 2.5)])
def test_above_the_threshold_the_enumerated_rho_is_below_one(arch, T):
    mlm = source(arch, 1, T=T)
    out = cf.certify(mlm, use_cache=False, log=lambda _: None)
    assert out.method == "enumeration"
    th = out.threshold
    t5, below = th["temperature"], th["below"]
    assert 0 <= below < t5 and t5 - below <= 1e-9 * t5 and t5 <= out.contraction_temperature.upper
    assert lemma6_bound(out.delta_upper, t5) < 1 <= lemma6_bound(out.delta_upper, below) + 1e-12
    table = tab.tabulate(mlm, use_cache=False, progress=False, log=lambda _: None)
    for factor in (1.0, 1.01, 1.5, 3.0, 10.0):  # the enumerated rho of the model, at and above the threshold
        infl, _ = influence_and_oscillation(table.at_temperature(t5 * factor))
        assert aggregate_influence(infl.rho_ij).rho < 1
    assert lemma6_bound(out.delta_upper, t5 * 0.99) >= 1  # a threshold moved down by 1% is caught


def test_the_threshold_of_known_delta_matrices():
    d = np.array([[0.0, 2.0], [2.0, 0.0]])  # one term per column: tanh(1 / 2T) < 1 at every T, until its
    assert 0.02 < cf.theorem5_threshold(d)["temperature"] < 0.04  # rounded-up value reaches 1 (1 - tanh < 8u)
    d3 = np.full((3, 3), 4.0) - 4.0 * np.eye(3)  # two terms of tanh(1/T): 2 tanh(1/T) < 1 <=> T > 1/atanh(1/2)
    th = cf.theorem5_threshold(d3)
    assert th["temperature"] == pytest.approx(1 / np.arctanh(0.5), rel=1e-8)
    assert cf.theorem5_threshold(np.zeros((3, 3)))["temperature"] == 0.0
    none = cf.theorem5_threshold(None, "no bound here")
    assert none["temperature"] is None and none["why"] == "cannot be certified within the budget: no bound here"


def test_a_score_table_without_delta_upper_ends_cannot_be_certified_and_says_why():
    table = ScoreTable.random(3, 4, seed=0, temperature=1.0)
    from test_certify import Queried  # a table seen only through queries

    out = cf.certify(Queried(table), max_passes=10)
    assert out.threshold["temperature"] is None
    assert "enumeration needs 108 passes, over the 10" in out.threshold["why"]
