"""Certified brackets (mlmix.empirical.model_constants.certify): on tiny random BERT/RoBERTa/ModernBERT models (Hypothesis
over frames, alphabets, temperatures, pass budgets and seeds) every bracket of rho, alpha, Delta and T*
contains the supremum enumerated from the tabulated table by theory/local, and a bracket shrunk by 1% is
caught; Theorem 5's verdict follows the brackets (applies / does not apply with its witnesses / undecided);
the hooks (lower bounds, relaxation with Lemma 6) and bad input."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import tiny_masked_lm

from mlmix.empirical.model_constants import certify as cf
from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.local.influence import aggregate_influence, contraction_temperature, influence_and_oscillation
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable


class Queried(Conditionals):
    """A score table seen only through queries (no table at hand: enumeration costs passes)."""

    def __init__(self, table: ScoreTable) -> None:
        super().__init__(table.space, table.temperature)
        self.table_ = table

    def site_scores(self, contexts, site):
        return self.table_.site_scores(contexts, site)


@functools.lru_cache(maxsize=None)
def model(arch: str, seed: int):
    return tiny_masked_lm(arch, seed=seed)


def enumerated(table) -> dict:
    """The suprema over every context, from the exact pass of theory/local on the whole table."""
    infl, osc = influence_and_oscillation(table)
    agg = aggregate_influence(infl.rho_ij)
    t_star = contraction_temperature(osc.delta_ij)
    return {"rho": agg.rho, "alpha": agg.alpha, "delta": 4 * t_star, "contraction_temperature": t_star}


def contains(result, value: float) -> bool:
    return (result.lower is None or result.lower <= value) and (result.upper is None or value <= result.upper)


def shrunk_caught(result, value: float) -> bool:
    """A bracket shrunk by 1% of the supremum at a tight end (within 0.5% of it) no longer contains it."""
    caught = []
    if result.upper is not None and result.upper <= value * 1.005:
        caught.append(not value <= result.upper - 0.01 * value)
    if result.lower is not None and result.lower >= value * 0.995 and value > 0:
        caught.append(not result.lower + 0.01 * value <= value)
    return all(caught)


frames = st.tuples(st.integers(2, 4), st.lists(st.sampled_from(["a", "b", "c", "!"]), min_size=0, max_size=2),
                   st.randoms(use_true_random=False))


@settings(max_examples=12, deadline=None)
@given(arch=st.sampled_from(["bert", "roberta", "modernbert"]), seed=st.integers(0, 2), frame=frames,
       alphabet=st.sampled_from(["a b", "a b c", "a c !"]), T=st.floats(0.3, 4.0),
       max_passes=st.sampled_from([None, 1, 40, 400]), sample_seed=st.integers(0, 100))
def test_every_bracket_contains_the_enumerated_supremum(arch, seed, frame, alphabet, T, max_passes, sample_seed):
    n, fixed, rnd = frame
    tokens = ["_"] * n + fixed
    rnd.shuffle(tokens)
    m, tok = model(arch, seed)
    mlm = MaskedLMConditionals(m, tok, frame=" ".join(tokens), candidates=alphabet, device="cpu", temperature=T)
    table = tab.tabulate(mlm, use_cache=False, progress=False, log=lambda _: None)
    truth = enumerated(table)
    out = cf.certify(mlm, max_passes=max_passes, use_cache=False, seed=sample_seed, block_rows=7)
    enumerable = max_passes is None or cf.passes_needed(mlm.space) <= max_passes
    assert (out.method == "enumeration") == enumerable
    for name, value in truth.items():
        r = getattr(out, name)
        assert contains(r, value), (name, r, value)
        if enumerable:
            # width: float64 rounding and the stated score accuracy of the dtype (score_accuracy.py)
            assert r.value is not None and shrunk_caught(r, value) and r.upper - r.lower <= 1e-3 * value + 1e-3
    assert out.rho.upper <= n - 1 and out.passes <= (max_passes or out.passes)
    verdict = out.theorem5["verdict"]
    if verdict == cf.APPLIES:
        assert truth["rho"] < 1
    elif verdict == cf.NOT_APPLY:
        assert truth["rho"] >= 1


def test_the_checker_catches_a_bracket_shrunk_by_one_percent():
    table = ScoreTable.random(3, 3, seed=4, scale=2.0, temperature=0.7)
    truth = enumerated(table)
    out = cf.certify(table)
    assert out.method == "enumeration" and out.passes == 0
    for name, value in truth.items():
        r = getattr(out, name)
        assert contains(r, value) and shrunk_caught(r, value)
        assert not r.lower <= value <= r.upper - 0.01 * value
        assert not r.lower + 0.01 * value <= value <= r.upper


def test_verdicts_follow_the_brackets():
    hot = ScoreTable.random(3, 3, seed=1, scale=1.0, temperature=50.0)
    out = cf.certify(hot)
    assert out.theorem5["verdict"] == cf.APPLIES and out.rho.upper < 1
    cold = Queried(hot.at_temperature(0.05))
    assert cf.certify(cold).method == "enumeration"  # 27 queries fit: the exact values
    sampled = cf.certify(cold, max_passes=26, seed=0, lower_bounds=cf.random_context_lower_bounds)  # bounds only: a sampled rho >= 1 refutes
    assert sampled.method.startswith("lower: maxima over") and sampled.rho.lower >= 1
    assert sampled.theorem5["verdict"] == cf.NOT_APPLY and sampled.rho.upper == 2.0
    none = cf.certify(cold, max_passes=1, lower_bounds=cf.random_context_lower_bounds)  # no context fits: [0, n - 1]
    assert none.theorem5["verdict"] == cf.UNDECIDED and (none.rho.lower, none.rho.upper) == (0.0, 2.0)
    assert none.delta.upper is None and none.contraction_temperature.upper is None


def test_a_relaxation_gives_upper_ends_and_lemma_6_turns_delta_into_rho():
    table = ScoreTable.random(3, 3, seed=2, scale=1.0, temperature=1.5)
    truth = enumerated(table)
    infl, osc = influence_and_oscillation(table)
    relax = lambda source: {"delta_upper": osc.delta_ij, "method": "oracle"}  # noqa: E731
    out = cf.certify(Queried(table), max_passes=1, relaxation=relax)
    expected = aggregate_influence(np.tanh(osc.delta_ij / (4 * 1.5))).rho
    assert out.rho.upper == pytest.approx(expected, rel=1e-12) and contains(out.rho, truth["rho"])
    assert out.contraction_temperature.upper == pytest.approx(truth["contraction_temperature"], rel=1e-12)
    if 1.5 > out.contraction_temperature.upper:
        assert out.theorem5["verdict"] == cf.APPLIES
    hook = lambda source, max_passes, seed: {"rho_lower": infl.rho_ij, "passes": 7, "witnesses": ["w"]}  # noqa: E731
    out = cf.certify(Queried(table), max_passes=1, lower_bounds=hook)
    assert out.passes == 7 and out.witnesses == ["w"] and out.rho.lower == pytest.approx(truth["rho"], rel=1e-12)
    assert contains(out.rho, truth["rho"]) and out.delta.lower == 0.0


def test_the_temperature_argument_and_bad_input():
    table = ScoreTable.random(2, 3, seed=0, temperature=1.0)
    assert cf.certify(table, temperature=3.0).temperature == 3.0
    for kwargs, match in (({"max_passes": -1}, "max-passes"), ({"temperature": -1.0}, "emperature"),
                          ({"budget_s": 0.0}, "budget")):
        with pytest.raises(ValueError, match=match):
            cf.certify(table, **kwargs)
    with pytest.raises(ValueError, match="n >= 2"):
        cf.certify(ScoreTable.random(2, 1, seed=0))
