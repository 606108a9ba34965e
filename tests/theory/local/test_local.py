"""Local quantities (mlmix.theory.local.influence, .rectangles, .margins): brute-force cross-checks, closed forms, lower-bound property of
samples, batching for large vocabularies, exact compatibility test against the Glauber chain."""

from itertools import combinations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax

from mlmix.errors import MemoryLimitError
from mlmix.theory.chain.stationary import stationary_distribution
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.local import rectangles as rectangles_module
from mlmix.theory.local.influence import (
    aggregate_influence,
    contraction_temperature,
    influence_matrix,
    score_oscillation,
    tv_bound_from_oscillation,
)
from mlmix.theory.local.margins import (
    basin_margin,
    count_drift,
    escape_bound,
    mixing_lower_bound,
    state_margins,
)
from mlmix.theory.local.rectangles import (
    all_rectangles,
    compatible_joint,
    is_compatible,
    rectangle_statistic,
    rectangle_summary,
    sample_rectangles,
)
from mlmix.theory.sources import contexts as contexts_module
from mlmix.theory.sources.conditionals import (
    Conditionals,
    IsingModel,
    LogWeightTable,
    PottsModel,
    ScoreTable,
)
from mlmix.theory.sources.contexts import TopK
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import memory_limit
from mlmix.verify import instances as S
from mlmix.verify.regime_instances import drift_instances


def brute_influence(src):
    """rho_ij, Delta_ij and the one-step spread by looping over every pair with the source's own
    per-site calls."""
    space, T = src.space, src.temperature
    n, q = space.length, space.vocab_size
    rho, delta = np.zeros((n, n)), np.zeros((n, n))
    spread = np.zeros(n)
    for x in space.all_states():
        for j in range(n):
            for b in range(q):
                y = x.copy()
                y[j] = b
                total = 0.0
                for i in range(n):
                    if i == j:
                        continue
                    sx, sy = src.scores(x[None], i)[0], src.scores(y[None], i)[0]
                    tv = 0.5 * np.abs(softmax(sx / T) - softmax(sy / T)).sum()
                    rho[i, j] = max(rho[i, j], tv)
                    total += tv
                    diff = sx - sy
                    delta[i, j] = max(delta[i, j], diff.max() - diff.min())
                spread[j] = max(spread[j], total)
    return rho, delta, spread


@pytest.mark.parametrize("src", [ScoreTable.random(3, 3, seed=1, temperature=0.7),
                                 PottsModel.random(nx.path_graph(3), 3, seed=4, temperature=1.3),
                                 IsingModel(nx.cycle_graph(4), couplings=0.8, fields=[0.3, -0.2, 0, 0.5])])
def test_influence_and_oscillation_match_brute_force(src):
    rho, delta, spread = brute_influence(src)
    res = influence_matrix(src)
    osc = score_oscillation(src)
    assert res.exact and osc.exact
    np.testing.assert_allclose(res.rho_ij, rho, atol=1e-13)
    np.testing.assert_allclose(osc.delta_ij, delta, atol=1e-12)
    np.testing.assert_allclose(res.spread, spread, atol=1e-13)
    # the sampled path over every state and every replacement (pairs queried one by one) agrees
    full = influence_matrix(src, src.space.all_states(), np.arange(src.space.vocab_size))
    np.testing.assert_allclose(full.spread, spread, atol=1e-13)
    n, q = src.space.length, src.space.vocab_size
    assert res.pairs == src.space.size * n * (q - 1)
    # the one-step coupling spread never exceeds the column sums
    assert (res.spread <= rho.sum(axis=0) + 1e-12).all()


def test_two_spin_ising_closed_form_attains_lemma6():
    """n = 2, coupling J, no field: rho_01 = tanh(beta J / T) and Delta_01 = 4 beta |J|, so the
    tanh bound of Lemma 6 is attained; T* of Cor. 7 is beta |J|."""
    g = nx.Graph([(0, 1)])
    for J, beta, T in [(0.7, 1.0, 0.5), (-1.3, 0.5, 2.0), (2.0, 1.5, 0.3)]:
        src = IsingModel(g, couplings=J, beta=beta, temperature=T)
        rho = influence_matrix(src).rho_ij
        delta = score_oscillation(src).delta_ij
        assert rho[0, 1] == pytest.approx(np.tanh(beta * abs(J) / T), rel=1e-12)
        assert delta[0, 1] == pytest.approx(4 * beta * abs(J), rel=1e-12)
        assert tv_bound_from_oscillation(delta, T)[0, 1] == pytest.approx(rho[0, 1], rel=1e-12)
        assert contraction_temperature(delta) == pytest.approx(beta * abs(J), rel=1e-12)


def test_aggregates_are_column_and_row_sums():
    r = np.array([[0.0, 0.1, 0.5], [0.2, 0.0, 0.1], [0.3, 0.0, 0.0]])
    agg = aggregate_influence(r + np.eye(3))  # the diagonal is ignored
    assert agg.rho == pytest.approx(0.6) and agg.source_site == 2  # column j = 2: 0.5 + 0.1
    assert agg.alpha == pytest.approx(0.6) and agg.target_site == 0  # row i = 0: 0.1 + 0.5
    r2 = np.array([[0.0, 0.9], [0.05, 0.0]])
    agg2 = aggregate_influence(r2)
    assert (agg2.rho, agg2.alpha, agg2.source_site) == (0.9, 0.9, 1)
    with pytest.raises(ValueError):
        aggregate_influence(np.zeros((2, 3)))


@settings(max_examples=15)
@given(st.integers(0, 2**31), st.integers(1, 12), st.integers(1, 3))
def test_samples_give_lower_bounds(seed, count, k):
    src = ScoreTable.random(3, 3, seed=seed % 1000, temperature=0.8)
    rng = np.random.default_rng(seed)
    exact = influence_matrix(src)
    exact_osc = score_oscillation(src)
    ctx = rng.integers(0, 3, size=(count, 3))
    for rule in (None, k, TopK(k), rng.integers(0, 3, size=2)):
        est = influence_matrix(src, ctx, rule, rng=rng)
        osc = score_oscillation(src, ctx, rule, rng=rng)
        assert not est.exact and not osc.exact
        assert (est.rho_ij <= exact.rho_ij + 1e-12).all()
        assert (osc.delta_ij <= exact_osc.delta_ij + 1e-12).all()
    full = influence_matrix(src, src.space.all_states())
    np.testing.assert_allclose(full.rho_ij, exact.rho_ij, atol=1e-14)
    assert not full.exact


def test_top_k_replacements_are_the_models_own_top_symbols():
    src = ScoreTable.random(5, 3, seed=3)
    ctx = np.array([[0, 1, 2], [4, 4, 0]])
    k = 2
    explicit = []
    for j in range(3):
        s = src.scores(ctx, j)
        s[np.arange(2), ctx[:, j]] = -np.inf
        explicit.append(np.argsort(-s, axis=1)[:, :k])
    top = influence_matrix(src, ctx, TopK(k))
    # the same pairs, given site by site as explicit per-context candidates
    for j in range(3):
        one = influence_matrix(src, ctx, explicit[j])
        assert one.rho_ij[:, j] == pytest.approx(top.rho_ij[:, j], abs=1e-14)
    assert top.pairs == 2 * 3 * k


class EmbeddingScores(Conditionals):
    """An MLM-shaped source: |V| large, scores from summed context embeddings; counts its calls."""

    def __init__(self, q: int, n: int, temperature: float = 1.0):
        super().__init__(StateSpace(q, n), temperature)
        rng = np.random.default_rng(0)
        self.E = rng.standard_normal((q, 6))
        self.W = rng.standard_normal((n, 6, 6))
        self.rows = []

    def scores(self, contexts, sites):
        self.rows.append(len(contexts))
        return super().scores(contexts, sites)

    def site_scores(self, contexts, site):
        h = self.E[np.delete(contexts, site, axis=1)].sum(axis=1) @ self.W[site]
        return h @ self.E.T


def test_large_vocabulary_batches_and_chunking(monkeypatch):
    src = EmbeddingScores(3000, 6, temperature=2.0)
    rng = np.random.default_rng(1)
    ctx = rng.integers(0, 3000, size=(3, 6))
    ref = influence_matrix(src, ctx, TopK(4))
    ref_osc = score_oscillation(src, ctx, 3, rng=np.random.default_rng(5))
    monkeypatch.setattr(contexts_module, "QUERY_FLOATS", 3000 * 5)  # at most 5 rows per call
    src.rows.clear()
    small = influence_matrix(src, ctx, TopK(4))
    assert max(src.rows) <= 5
    np.testing.assert_allclose(small.rho_ij, ref.rho_ij, atol=1e-14)
    small_osc = score_oscillation(src, ctx, 3, rng=np.random.default_rng(5))
    np.testing.assert_allclose(small_osc.delta_ij, ref_osc.delta_ij, atol=1e-12)
    assert small.pairs == 3 * 6 * 4
    margins = state_margins(src, ctx)
    s = src.scores(ctx, 2)
    cur = s[np.arange(3), ctx[:, 2]]
    s[np.arange(3), ctx[:, 2]] = -np.inf
    np.testing.assert_allclose(margins.gap[:, 2], cur - s.max(axis=1))


def test_rectangle_by_hand():
    space = StateSpace(2, 2)
    table = np.array([[[0.0, 1.0], [0.5, -1.0]],    # site 0, context x_1 = 0 / 1
                      [[2.0, 0.0], [0.0, 3.0]]])    # site 1, context x_0 = 0 / 1
    src = ScoreTable(space, table, temperature=0.5)
    # x = (0, 0), i = 0 -> a' = 1, j = 1 -> b' = 1; l = (s(new) - s(old)) / T
    path1 = (1.0 - 0.0) + (3.0 - 0.0)      # site 0 in context x_1=0, then site 1 in context x_0=1
    path2 = (0.0 - 2.0) + (-1.0 - 0.5)     # site 1 in context x_0=0, then site 0 in context x_1=1
    R = rectangle_statistic(src, np.array([[0, 0]]), 0, 1, 1, 1)
    assert R[0] == pytest.approx(abs(path1 - path2) / 0.5)
    assert rectangle_statistic(src.at_temperature(1.0), np.array([[0, 0]]), 0, 1, 1, 1)[0] == \
        pytest.approx(abs(path1 - path2))
    rects = all_rectangles(src)
    assert rects.count == 4  # 4 states x 1 pair x 1 x 1
    assert np.allclose(rects.values, rects.values[0])  # every rectangle of {0,1}^2 is the same square
    for bad in [dict(i=0, j=0), dict(i=0, j=2), dict(i=0, j=1, a_new=2)]:
        args = dict(i=0, j=1, a_new=1, b_new=1) | bad
        with pytest.raises(ValueError):
            rectangle_statistic(src, np.array([[0, 0]]), **args)


@settings(max_examples=25)
@given(S.any_sources(max_states=81))
def test_exact_compatibility_test_agrees_with_reconstruction(drawn):
    src, kind, _ = drawn
    n, q = src.space.length, src.space.vocab_size
    rects = all_rectangles(src)
    assert rects.count == src.space.size * n * (n - 1) // 2 * (q - 1) ** 2
    mu = compatible_joint(src)
    assert is_compatible(src) == (mu is not None)
    if mu is not None:  # the reconstructed joint is the Glauber stationary law (Thm 3)
        np.testing.assert_allclose(mu, stationary_distribution(glauber_kernel(src)), rtol=1e-7, atol=1e-12)
        if hasattr(src, "joint"):
            np.testing.assert_allclose(mu, src.joint(), rtol=1e-9, atol=1e-14)
    if kind in ("ising", "potts", "log-weights"):
        assert mu is not None
    if kind.startswith("perturbed") and n >= 2:
        assert mu is None and rects.max > 0


def test_sample_rectangles_records_and_top_k():
    src = ScoreTable.random(6, 4, seed=2)
    ctx = np.random.default_rng(0).integers(0, 6, size=(10, 4))
    for top_k in (None, 2):
        rs = sample_rectangles(src, ctx, 40, np.random.default_rng(3), top_k=top_k)
        assert rs.count == 40 and not rs.exact
        rows = np.arange(40)
        assert (rs.i != rs.j).all()
        assert (rs.a_new != rs.states[rows, rs.i]).all() and (rs.b_new != rs.states[rows, rs.j]).all()
        np.testing.assert_allclose(rs.values, rectangle_statistic(src, rs.states, rs.i, rs.j, rs.a_new, rs.b_new))
        if top_k:
            s = src.scores(rs.states, rs.i)
            s[rows, rs.states[rows, rs.i]] = -np.inf
            rank = (s > s[rows, rs.a_new][:, None]).sum(axis=1)
            assert (rank < top_k).all()
        assert rs.record(0)["R"] == rs.values[0]
    lw = LogWeightTable.random(StateSpace(3, 3), seed=1)
    assert sample_rectangles(lw, ctx[:, :3] % 3, 50, np.random.default_rng(0), top_k=2).max < 1e-12
    with pytest.raises(ValueError):
        sample_rectangles(src, ctx, 0, np.random.default_rng(0))


@settings(max_examples=20)
@given(drift_instances(max_states=81))
def test_drift_equals_kernel_expectation(inst):
    states = inst.space.all_states()
    A = np.zeros(inst.space.vocab_size, dtype=bool)
    A[list(inst.symbols)] = True
    N = A[states].sum(axis=1)
    P = glauber_kernel(inst.source)
    D = count_drift(inst.source, states, inst.symbols)
    np.testing.assert_allclose(D, P @ N - N, atol=1e-12)
    np.testing.assert_allclose(count_drift(inst.source, states, A), D)


def test_drift_closed_form_for_independent_sites():
    """No interactions: D(x) = (1/n) sum_i (p_i(A) - 1[x_i in A])."""
    h = np.array([0.4, -1.0, 0.0])
    src = IsingModel(nx.empty_graph(3), fields=h, temperature=0.7)
    p_plus = 1 / (1 + np.exp(-2 * h / 0.7))  # symbol 1 = spin +1
    states = src.space.all_states()
    D = count_drift(src, states, [1])
    np.testing.assert_allclose(D, (p_plus[None, :] - states).mean(axis=1), atol=1e-14)
    assert (count_drift(src, states, []) == 0).all()
    with pytest.raises(ValueError):
        count_drift(src, states, [2])


def test_basin_margin_singleton_matches_state_margins_and_counts():
    src = ScoreTable.random(3, 3, seed=5)
    for x in range(src.space.size):
        basin = np.zeros(src.space.size, dtype=bool)
        basin[x] = True
        m = basin_margin(src, basin)
        sm = state_margins(src, src.space.decode(np.array([x])))
        assert m.gamma == pytest.approx(sm.gamma[0])
        assert m.all_argmax == bool(sm.all_argmax[0]) or m.gamma < 0
        assert m.exit_sites.tolist() == [3] and m.exit_symbols.tolist() == [6]
    whole = basin_margin(src, np.ones(src.space.size, dtype=bool))
    assert whole.gamma == np.inf and whole.holds and whole.exit_sites.sum() == 0
    with pytest.raises(ValueError):
        basin_margin(src, np.zeros(src.space.size, dtype=bool))


def test_basin_margin_by_hand():
    """{0,1}^2 with B = {00, 01}: site 0 is exit-causing at both, site 1 at neither."""
    space = StateSpace(2, 2)
    table = np.array([[[3.0, 1.0], [2.0, 2.0]],   # site 0: context x_1=0 gap 2, x_1=1 tie (gap 0)
                      [[0.0, 5.0], [0.0, 0.0]]])  # site 1: never exit-causing from B
    src = ScoreTable(space, table)
    B = np.array([True, True, False, False])
    m = basin_margin(src, B)
    assert m.gamma == 0.0 and m.all_argmax and not m.holds
    assert m.exit_sites.tolist() == [1, 1] and m.exit_symbols.tolist() == [1, 1]
    table[0, 1, 0] = 2.5
    m2 = basin_margin(ScoreTable(space, table), B)
    assert m2.gamma == pytest.approx(0.5) and m2.holds


def test_escape_and_mixing_bounds():
    assert escape_bound(2.0, 0.5, 4) == pytest.approx(3 * np.exp(-4))
    assert escape_bound(2.0, 0.5, 4, exit_sites=1, length=4) == pytest.approx(0.75 * np.exp(-4))
    assert mixing_lower_bound(2.0, 0.5, 4) == pytest.approx(np.exp(4) / 12)
    assert mixing_lower_bound(1e4, 0.01, 4) == np.inf
    with pytest.raises(ValueError):
        escape_bound(1.0, 1.0, 3, exit_sites=2)
    with pytest.raises(ValueError):
        escape_bound(1.0, 0.0, 3)


def test_bad_inputs_are_refused():
    src = ScoreTable.random(2, 3, seed=0)
    with pytest.raises(ValueError):
        influence_matrix(src, np.zeros((2, 4), dtype=int))
    with pytest.raises(TypeError):
        influence_matrix(src, np.zeros((2, 3)))
    with pytest.raises(ValueError):
        influence_matrix(src, np.zeros((2, 3), dtype=int), replacements=2)  # no rng
    with pytest.raises(ValueError):
        influence_matrix(src, np.zeros((2, 3), dtype=int), replacements=np.array([5]))
    with pytest.raises(ValueError):
        TopK(0)
    with pytest.raises(ValueError):
        influence_matrix(PottsModel(nx.empty_graph(9), 4))  # 4^9 states: refused


def test_n_equals_one_has_no_interactions():
    src = ScoreTable.random(3, 1, seed=0)
    assert influence_matrix(src).rho_ij.shape == (1, 1)
    assert influence_matrix(src).rho == 0.0
    assert all_rectangles(src).count == 0 and is_compatible(src)
    assert compatible_joint(src) is not None


def test_all_rectangles_count_formula():
    for q, n in [(2, 3), (3, 2), (4, 3)]:
        src = ScoreTable.random(q, n, seed=q + n)
        assert all_rectangles(src).count == q ** n * len(list(combinations(range(n), 2))) * (q - 1) ** 2


def _quantile_reference(values, p):
    return float(np.quantile(values, p))


@settings(max_examples=25)
@given(S.any_sources(max_states=81), st.sampled_from([(0.5, 0.9), (0.0, 0.37, 1.0)]))
def test_streamed_rectangle_summary_equals_the_materialised_rectangles(drawn, probs):
    """Two algorithms: every (x, a', b') one by one (all_rectangles) against the streamed double
    differences of G_r(a, b), one value per unordered rectangle counted four times."""
    src, _, _ = drawn
    rects = all_rectangles(src)
    summary = rectangle_summary(src, quantiles=probs)
    assert summary.count == rects.count and summary.exact
    if rects.count == 0:
        return
    scale = max(1.0, rects.max)
    assert summary.max == pytest.approx(rects.max, abs=1e-12 * scale)
    assert summary.mean == pytest.approx(rects.mean, abs=1e-12 * scale)
    for p in probs:
        assert summary.quantiles[p] == pytest.approx(_quantile_reference(rects.values, p), abs=1e-12 * scale)
    w = summary.worst
    assert w["R"] == summary.max and w["a_new"] != w["state"][w["i"]] and w["b_new"] != w["state"][w["j"]]
    assert rectangle_statistic(src, np.array([w["state"]]), w["i"], w["j"], w["a_new"], w["b_new"])[0] == \
        pytest.approx(w["R"], abs=1e-12 * scale)


def test_rectangle_quantiles_are_exact_order_statistics_with_ties_and_tiny_buffers(monkeypatch):
    """Integer scores make every R an exact small integer (many ties); with chunks of 5 values and at
    most 3 gathered values the selection must bisect down to single bit patterns and still give
    np.quantile exactly."""
    rng = np.random.default_rng(7)
    space = StateSpace(4, 3)
    src = ScoreTable(space, rng.integers(0, 3, size=(3, 16, 4)).astype(float), temperature=1.0)
    values = all_rectangles(src).values
    probs = (0.0, 0.25, 0.5, 0.9, 0.999, 1.0)
    big = rectangle_summary(src, quantiles=probs)
    monkeypatch.setattr(rectangles_module, "SUMMARY_CHUNK", 5)
    monkeypatch.setattr(rectangles_module, "SELECT_CAP", 3)
    small = rectangle_summary(src, quantiles=probs)
    for p in probs:
        assert big.quantiles[p] == small.quantiles[p] == np.quantile(values, p)
    assert big.mean == pytest.approx(values.mean(), rel=1e-15) and small.max == big.max == values.max()
    zero = rectangle_summary(ScoreTable(space, np.zeros((3, 16, 4))), quantiles=(0.5,))
    assert zero.max == zero.quantiles[0.5] == zero.mean == 0.0 and zero.count == 4**3 * 3 * 9


def test_rectangle_summary_as_dict_and_refusals():
    src = ScoreTable.random(3, 3, seed=4)
    d = rectangle_summary(src).as_dict()
    assert set(d) == {"mean", "median", "q90", "max", "count", "worst"}
    with pytest.raises(ValueError, match="quantile"):
        rectangle_summary(src, quantiles=(1.5,))
    with pytest.raises(ValueError, match="exact limit"):
        rectangle_summary(PottsModel(nx.empty_graph(9), 4))


def test_exact_passes_estimate_their_memory_first():
    src = ScoreTable.random(6, 4, seed=1)  # 1,296 states, 116,640 rectangles
    with memory_limit("2MiB"):
        with pytest.raises(MemoryLimitError, match="every rectangle"):
            all_rectangles(src)
        rectangle_summary(src, quantiles=())  # streams: fits
    big = ScoreTable.random(20, 4, seed=1)  # 160,000 states
    with memory_limit("4MiB"), pytest.raises(MemoryLimitError, match="influence pass"):
        influence_matrix(big, max_states=big.space.size)


def test_paper_constants_of_mlmix_exact_reach_past_65536_states():
    """17^4 = 83,521 states (beyond the old 4^8 limit): rho from the vectorised pass and R streamed."""
    from mlmix.theory.local.constants import paper_constants

    src = ScoreTable.random(17, 4, seed=2, temperature=1.5)
    g = paper_constants(src, None, 0.25)
    assert "reason" not in g
    assert g["rho"].value == pytest.approx(influence_matrix(src, max_states=src.space.size).rho, rel=1e-14)
    assert g["rectangle"]["count"] == 17**4 * 6 * 16**2 and g["rectangle"]["median"] <= g["rectangle"]["q90"]
