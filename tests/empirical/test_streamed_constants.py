"""Streamed exact constants (mlmix.empirical.model_constants.streamed_constants): bit for bit the exact rho_ij and
Delta_ij of theory/local on random score tables (Hypothesis over sizes, temperatures and block sizes),
witnesses that attain each maximum, tiny BERT/RoBERTa/ModernBERT models queried directly against their
tabulated tables, and the checkpoint: an interrupted run resumes without redoing its passes, and a
folder refuses another temperature."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import tiny_masked_lm
from scipy.special import softmax

from mlmix.empirical.model_constants import streamed_constants as sc
from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.local.influence import aggregate_influence, contraction_temperature, influence_and_oscillation
from mlmix.theory.sources.conditionals import ScoreTable


def quiet(_):
    return None


@settings(max_examples=25, deadline=None)
@given(q=st.integers(2, 4), n=st.integers(2, 4), seed=st.integers(0, 10**6),
       T=st.floats(0.2, 5.0), block=st.sampled_from([1, 2, 5, 64, 1 << 15]))
def test_streamed_equals_the_exact_pass_bit_for_bit(q, n, seed, T, block):
    table = ScoreTable.random(q, n, seed=seed, scale=2.0, temperature=T)
    infl, osc = influence_and_oscillation(table)
    s = sc.streamed_constants(table, block_rows=block)
    assert np.array_equal(s.rho_ij, infl.rho_ij) and np.array_equal(s.delta_ij, osc.delta_ij)
    assert s.rho == aggregate_influence(infl.rho_ij).rho and s.contraction_temperature == contraction_temperature(
        osc.delta_ij)
    assert s.passes == 0 and s.contexts == q**n


def test_witnesses_attain_each_maximum():
    table = ScoreTable.random(3, 4, seed=5, scale=2.0, temperature=0.8)
    s = sc.streamed_constants(table, block_rows=4)
    for i in range(4):
        for j in range(4):
            if i == j:
                assert s.rho_witness[i][j] is None
                continue
            for matrix, witness in ((s.rho_ij, s.rho_witness), (s.delta_ij, s.delta_witness)):
                x, y = (np.array(witness[i][j][k]) for k in ("x", "y"))
                assert np.flatnonzero(x != y).tolist() in ([j], [])  # y = x^{j<-w}
                a, b = table.site_scores(x[None], i)[0], table.site_scores(y[None], i)[0]
                tv = 0.5 * np.abs(softmax(a / 0.8) - softmax(b / 0.8)).sum()
                osc = (a - b).max() - (a - b).min()
                assert (tv if matrix is s.rho_ij else osc) == pytest.approx(matrix[i, j], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("arch", ["bert", "roberta", "modernbert"])
def test_a_queried_model_matches_its_table(arch, tmp_path):
    model, tok = tiny_masked_lm(arch, seed=13)
    mlm = MaskedLMConditionals(model, tok, frame="c _ ! _ _", candidates="a b c !", device="cpu", temperature=0.9)
    table = tab.tabulate(mlm, cache_dir=tmp_path, progress=False, log=quiet)
    infl, osc = influence_and_oscillation(table)
    notes = []
    s = sc.streamed_constants(mlm, block_rows=5, log=notes.append)
    assert s.passes == 3 * 16 and "48 masked forward passes" in notes[0] and "streamed" in notes[0]
    # float32 forward passes in other batches: equal to the table to float32 rounding of the scores
    np.testing.assert_allclose(s.rho_ij, infl.rho_ij, atol=1e-6)
    np.testing.assert_allclose(s.delta_ij, osc.delta_ij, atol=1e-5)
    from_table = sc.streamed_constants(table, block_rows=5)  # the same scores: bit for bit
    assert np.array_equal(from_table.rho_ij, infl.rho_ij) and np.array_equal(from_table.delta_ij, osc.delta_ij)


def test_an_interrupted_run_resumes_and_a_folder_refuses_other_parameters(tmp_path, monkeypatch):
    model, tok = tiny_masked_lm("bert", seed=3)
    mlm = MaskedLMConditionals(model, tok, frame="_ _ b _", candidates="a b c", device="cpu", temperature=1.3)
    whole = sc.streamed_constants(mlm, block_rows=4)
    calls = {"n": 0}
    original = sc.query_scores

    def failing(source, states, site):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return original(source, states, site)

    monkeypatch.setattr(sc, "query_scores", failing)
    with pytest.raises(KeyboardInterrupt):
        sc.streamed_constants(mlm, folder=tmp_path / "ck", block_rows=4)
    monkeypatch.setattr(sc, "query_scores", original)
    counted = {"rows": 0}

    def counting(source, states, site):
        counted["rows"] += len(states)
        return original(source, states, site)

    monkeypatch.setattr(sc, "query_scores", counting)
    resumed = sc.streamed_constants(mlm, folder=tmp_path / "ck", block_rows=4)
    assert resumed.resumed and counted["rows"] == 27 - 13  # site 0 (9 contexts) and a block of 4 were kept
    np.testing.assert_allclose(resumed.rho_ij, whole.rho_ij, atol=1e-6)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir() if not p.name.startswith(".")) == ["run.json",
                                                                                                "state.json"]
    counted["rows"] = 0
    again = sc.streamed_constants(mlm, folder=tmp_path / "ck", block_rows=4)  # finished: no pass
    assert counted["rows"] == 0 and np.array_equal(again.rho_ij, resumed.rho_ij)
    with pytest.raises(ValueError, match="temperature"):
        sc.streamed_constants(mlm.at_temperature(2.0), folder=tmp_path / "ck", block_rows=4)


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match="n >= 2"):
        sc.streamed_constants(ScoreTable.random(3, 1, seed=0))
    with pytest.raises(ValueError, match="block_rows"):
        sc.streamed_constants(ScoreTable.random(3, 2, seed=0), block_rows=0)
