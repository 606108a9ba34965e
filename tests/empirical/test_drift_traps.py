"""Embedding drift, hitting times and trap detection, with Theorem 8 checked on detected traps."""

from __future__ import annotations

import sys

import networkx as nx
import numpy as np
import pytest

from mlmix.empirical.sampling.drift import (
    NOT_HIT,
    SentenceTransformerEmbedder,
    TokenBagEmbedder,
    cosine_distance,
    drift_from_start,
    embed_records,
    hitting_times,
)
from mlmix.empirical.sampling.simulation import run_chains
from mlmix.empirical.sampling.trap_states import detect_traps, trap_margins, trap_table, window_drift
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.sources.conditionals import PottsModel


def test_one_hot_bag_drift_is_the_cosine_of_token_counts():
    emb = TokenBagEmbedder.one_hot(3)
    states = np.array([[[0, 0, 1, 1]], [[0, 0, 0, 1]], [[2, 2, 2, 2]], [[1, 1, 0, 0]]])  # (R=4, B=1, n=4)
    d = drift_from_start(embed_records(emb, states))[:, 0]
    # counts (2,2,0) vs (3,1,0): cos = 8 / (sqrt(8) sqrt(10)); disjoint support: distance 1; permutation: 0
    np.testing.assert_allclose(d, [0.0, 1 - 8 / np.sqrt(80), 1.0, 0.0], atol=1e-15)
    assert hitting_times(d[:, None], np.array([0, 5, 10, 15]), 0.05).tolist() == [5]
    assert hitting_times(d[:, None], np.array([0, 5, 10, 15]), 0.5).tolist() == [10]
    assert hitting_times(np.zeros((3, 2)), np.arange(3), 0.1).tolist() == [NOT_HIT, NOT_HIT]


def test_cosine_distance_and_embedders_refuse_bad_input(monkeypatch):
    np.testing.assert_allclose(cosine_distance([1.0, 0.0], [[0.0, 2.0], [-3.0, 0.0]]), [1.0, 2.0])
    with pytest.raises(ValueError, match="zero"):
        cosine_distance([0.0, 0.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="symbols"):
        TokenBagEmbedder.one_hot(3).embed(np.array([[0, 3]]))
    with pytest.raises(ValueError, match="threshold"):
        hitting_times(np.zeros((2, 1)), np.arange(2), 0.0)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install sentence-transformers"):
        SentenceTransformerEmbedder("any-local-model", decode=lambda s: [])


def _synthetic_trap(q: int = 200, n: int = 6):
    """Records every 10 steps, 0..1000; the chain sits in the all-0 state for steps 300..700 and is
    elsewhere in constant states of distinct symbols (so every distance is 0 or exactly 1)."""
    steps = np.arange(0, 1001, 10)
    states = np.empty((len(steps), n), dtype=np.int64)
    for r, t in enumerate(steps):
        states[r] = 0 if 300 <= t <= 700 else 1 + r
    return steps, states, TokenBagEmbedder.one_hot(q).embed(states)


def test_window_drift_and_detection_on_a_known_trap():
    steps, states, emb = _synthetic_trap()
    W = window_drift(steps, emb, 100)
    # window of record t holds the 10 records t+10 .. t+100; W = (number not at the trap) / 10 inside
    assert W[steps == 300][0] == 0.0 and W[steps == 610][0] == 0.1 and W[steps == 620][0] == pytest.approx(0.2)
    assert W[steps == 290][0] == 1.0 and np.isnan(W[steps > 900]).all()
    traps = detect_traps(steps, states, emb, window=100, threshold=0.12, chain=3)
    assert len(traps) == 1
    t = traps[0]
    assert (t.chain, t.start, t.end, t.duration, t.state) == (3, 300, 710, 410, (0,) * 6)
    assert t.occupancy == pytest.approx(41 / 42)
    assert detect_traps(steps, states, emb, window=100, threshold=0.05) == [
        type(t)(0, 300, 700, (0,) * 6, 1.0)]
    # a one-record excursion at step 500 splits the flagged records but not the union of their windows
    states[steps == 500] = 150
    emb = TokenBagEmbedder.one_hot(200).embed(states)
    flagged = steps[window_drift(steps, emb, 100) < 0.12]
    assert flagged.tolist() == [t for t in range(300, 620, 10) if t != 500]
    assert [(t.start, t.end, t.state) for t in detect_traps(steps, states, emb, 100, 0.12)] == [(300, 710, (0,) * 6)]


def test_theorem_8_on_the_traps_of_a_cold_potts_chain():
    J, T, q, n = 1.0, 0.25, 3, 4
    src = PottsModel(nx.cycle_graph(n), q, couplings=J, temperature=T)
    tr = run_chains(src, np.zeros((2, n), dtype=np.int64), 4000, seeds=[5, 6], record_every=5)
    emb = embed_records(TokenBagEmbedder.one_hot(q), tr.states)
    traps = [t for b in range(2) for t in detect_traps(tr.steps, tr.states[:, b], emb[:, b], 300, 0.12, chain=b)]
    assert traps and all(len(set(t.state)) == 1 for t in traps)  # ground states of the ferromagnet
    P = glauber_kernel(src).toarray()
    rows = trap_table(src, traps)
    for row in rows:
        x = src.space.encode(np.array(row["state"]))
        assert row["exit_probability"] == pytest.approx(1 - P[x, x], rel=1e-12)
        # closed form: gap 2J at every site, exit = 2e^{-2J/T} / (1 + 2e^{-2J/T}) <= (q-1) e^{-gamma/T}
        assert row["min_gap"] == pytest.approx(2 * J) and row["all_argmax"]
        e = np.exp(-2 * J / T)
        assert row["exit_probability"] == pytest.approx(2 * e / (1 + 2 * e))
        assert row["exit_bound"] == pytest.approx((q - 1) * e)
        assert row["exit_probability"] <= row["exit_bound"]
        assert row["predicted_stay"] <= row["expected_stay"]


def test_exit_probability_of_a_deep_trap_does_not_cancel_to_zero():
    # ground state of a cold Potts cycle: gap 2J at every site, exit = 2e^{-2J/T} / (1 + 2e^{-2J/T})
    # ~ 2e^{-80}; computing it as 1 - P(stay) gave exactly 0 and an infinite expected stay
    J, T, q, n = 1.0, 0.025, 3, 4
    src = PottsModel(nx.cycle_graph(n), q, couplings=J, temperature=T)
    m = trap_margins(src, np.zeros((1, n), dtype=np.int64))[0]
    e = np.exp(-2 * J / T)
    assert m.exit_probability == pytest.approx(2 * e / (1 + 2 * e), rel=1e-9, abs=0)
    assert m.expected_stay == pytest.approx((1 + 2 * e) / (2 * e), rel=1e-9)
    assert 0 < m.exit_probability <= m.exit_bound * (1 + 1e-12)  # tight here: exit = bound (1 - 2e^{-2J/T})


def test_margins_exclude_the_prefix_and_flag_non_argmax_tokens():
    src = PottsModel(nx.path_graph(3), 2, couplings=1.0, temperature=0.5)
    m_full, m_free = trap_margins(src, np.array([[1, 0, 0], [1, 0, 0]]), prefix=0)[0], \
        trap_margins(src, np.array([[1, 0, 0]]), prefix=1)[0]
    # site 0 (value 1, neighbour 0) is not an argmax: gap -1; sites 1, 2: gaps 0 (1 vs 1) and 1
    assert m_full.gaps == (-1.0, 0.0, 1.0) and not m_full.all_argmax and m_full.exit_bound is None
    assert m_free.gaps == (0.0, 1.0) and m_free.min_gap == 0.0 and m_free.mean_gap == 0.5
    with pytest.raises(ValueError, match="prefix"):
        trap_margins(src, np.array([[1, 0, 0]]), prefix=3)


def test_bag_and_concat_embedders_of_an_mlm():
    from mlm_fixtures import tiny_masked_lm

    from mlmix.empirical.models.mlm import MaskedLMConditionals
    from mlmix.empirical.sampling.drift import ConcatEmbedder

    mlm = MaskedLMConditionals(*tiny_masked_lm("bert", seed=5), 3, device="cpu")
    bag = TokenBagEmbedder.from_mlm(mlm)
    weight = mlm.model.get_input_embeddings().weight.detach().double().numpy()
    np.testing.assert_array_equal(bag.table, weight[mlm.support_ids])
    x = np.array([[0, 1, 3], [3, 1, 0]])
    e = bag.embed(x)
    np.testing.assert_allclose(e[0], weight[mlm.support_ids[[0, 1, 3]]].mean(axis=0))
    assert cosine_distance(e[0], e[1]) == pytest.approx(0.0, abs=1e-12)  # a bag ignores order
    hamming = ConcatEmbedder.one_hot(4).embed(x)
    assert cosine_distance(hamming[0], hamming[1]) == pytest.approx(2 / 3)  # d_H / n
    with pytest.raises(TypeError, match="language-model source"):
        TokenBagEmbedder.from_mlm(PottsModel(nx.path_graph(2), 2))
