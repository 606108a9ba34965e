"""Sources of conditionals: formulas against brute force, compatibility, temperature, bad input."""

from itertools import combinations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from mlmix.theory.sources.conditionals import (
    IsingModel,
    LogWeightTable,
    PottsModel,
    ScoreTable,
    clique_ising,
)
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_temperature


def _brute_conditionals(log_weight, space, T=1.0):
    """pi_i(v | x_{-i}) = mu(x^{i<-v}) / sum_u mu(x^{i<-u}) straight from the joint."""
    states = space.all_states()
    out = np.empty((space.size, space.length, space.vocab_size))
    for i in range(space.length):
        for v in range(space.vocab_size):
            y = states.copy()
            y[:, i] = v
            out[:, i, v] = log_weight(y) / T
    return out - logsumexp(out, axis=2, keepdims=True)


@settings(max_examples=15)
@given(st.integers(2, 3), st.integers(1, 4), st.integers(0, 10**6), st.sampled_from([0.05, 1.0, 3.0]))
def test_log_weight_table_conditionals_are_the_joints_ratios(q, n, seed, T):
    space = StateSpace(q, n)
    src = LogWeightTable.random(space, seed=seed, scale=2.0, temperature=T)
    states = space.all_states()
    got = src.all_log_conditionals(states)
    np.testing.assert_allclose(got, _brute_conditionals(lambda y: src.log_weights[space.encode(y)], space, T),
                               atol=1e-12)
    np.testing.assert_allclose(logsumexp(got, axis=2), 0.0, atol=1e-12)
    # scores do not depend on the symbol at the queried site
    for i in range(n):
        flipped = states.copy()
        flipped[:, i] = (flipped[:, i] + 1) % q
        np.testing.assert_array_equal(src.scores(states, i), src.scores(flipped, i))


def test_ising_log_weight_matches_definition():
    g = nx.Graph([(0, 1), (1, 2), (0, 2), (2, 3)])
    J = {(0, 1): 0.7, (1, 2): -0.4, (0, 2): 1.1, (2, 3): 0.3}
    h = np.array([0.2, -0.5, 0.0, 0.9])
    m = IsingModel(g, couplings=J, fields=h, beta=0.8)
    states = m.space.all_states()
    s = 2 * states - 1
    direct = 0.8 * (sum(Jv * s[:, u] * s[:, v] for (u, v), Jv in J.items()) + s @ h)
    np.testing.assert_allclose(m.log_weight(states), direct, atol=1e-12)
    C = m.coupling_matrix()
    np.testing.assert_allclose(C, C.T)
    assert C[0, 2] == 1.1 and C[0, 3] == 0.0
    # edge attribute J is the default coupling
    g2 = nx.Graph()
    g2.add_edge(0, 1, J=2.5)
    np.testing.assert_allclose(IsingModel(g2).log_weight(np.array([[1, 1], [0, 1]])), [2.5, -2.5])


def test_clique_ising_counts_ordered_pairs():
    n, C, J, h = 5, [1, 2, 4], 0.3, np.array([0.1, -0.2, 0.4, 0.5, -0.3])
    m = clique_ising(n, C, J, h)
    s = 2 * m.space.all_states() - 1
    direct = s @ h + sum(J * s[:, i] * s[:, j] for i in C for j in C if i != j)
    np.testing.assert_allclose(m.log_weight(m.space.all_states()), direct, atol=1e-12)
    assert m.clique == C
    with pytest.raises(ValueError):
        clique_ising(4, [1], 0.3, 0.0)
    with pytest.raises(ValueError):
        clique_ising(4, [1, 4], 0.3, 0.0)


def test_potts_log_weight_and_conditionals():
    g = nx.cycle_graph(4)
    m = PottsModel.random(g, 3, seed=3, temperature=0.7)
    states = m.space.all_states()
    J = dict(zip(zip(m.edge_u, m.edge_v), m.J))
    direct = sum(Jv * (states[:, u] == states[:, v]) for (u, v), Jv in J.items())
    direct = direct + sum(m.h[i, states[:, i]] for i in range(4))
    np.testing.assert_allclose(m.log_weight(states), direct, atol=1e-12)
    np.testing.assert_allclose(m.all_log_conditionals(states), _brute_conditionals(m.log_weight, m.space, 0.7),
                               atol=1e-12)
    np.testing.assert_allclose(m.joint(), np.exp(direct / 0.7) / np.exp(direct / 0.7).sum(), rtol=1e-12)


def test_score_table_round_trip_and_per_row_sites():
    src = ScoreTable.random(3, 3, seed=1, temperature=0.5)
    states = src.space.all_states()
    copy = ScoreTable.from_conditionals(src, batch_size=7)
    np.testing.assert_array_equal(copy.table, src.table)
    assert copy.temperature == 0.5
    # tabulating a Gibbs source reproduces its conditionals
    ising = IsingModel(nx.path_graph(3), beta=0.9, fields=0.3)
    tab = ScoreTable.from_conditionals(ising)
    np.testing.assert_allclose(tab.all_log_conditionals(ising.space.all_states()),
                               ising.all_log_conditionals(ising.space.all_states()), atol=1e-12)
    sites = np.arange(states.shape[0]) % 3
    mixed = src.log_conditionals(states, sites)
    for i in range(3):
        rows = sites == i
        np.testing.assert_array_equal(mixed[rows], src.log_conditionals(states[rows], i))


def test_temperature_scaling_and_low_temperature_stability():
    src = ScoreTable.random(4, 3, seed=2, scale=50.0)
    ctx = src.space.all_states()[:20]
    cold = src.at_temperature(0.01)
    assert src.temperature == 1.0 and cold.temperature == 0.01
    lc = cold.log_conditionals(ctx, 1)
    assert np.isfinite(lc).all()
    s = src.scores(ctx, 1) / 0.01
    np.testing.assert_allclose(lc, s - logsumexp(s, axis=1, keepdims=True), atol=1e-9)
    assert src.log_joint() is None


@pytest.mark.parametrize("T, exc", [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
                                    (float("inf"), ValueError), (True, TypeError), ("1", TypeError)])
def test_bad_temperature(T, exc):
    with pytest.raises(exc):
        check_temperature(T)
    with pytest.raises(exc):
        ScoreTable.random(2, 2, seed=0, temperature=T)


def test_bad_sources():
    with pytest.raises(ValueError, match="graph nodes"):
        IsingModel(nx.relabel_nodes(nx.path_graph(3), {0: 5}))
    with pytest.raises(ValueError, match="graph nodes"):
        IsingModel(nx.path_graph(3), n=4)
    with pytest.raises(TypeError):
        IsingModel([(0, 1)])
    with pytest.raises(ValueError, match="vocab_size"):
        PottsModel(nx.path_graph(2), q=1)
    with pytest.raises(ValueError, match="fields"):
        PottsModel(nx.path_graph(2), q=3, fields=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="finite"):
        IsingModel(nx.path_graph(2), couplings=float("nan"))
    space = StateSpace(2, 2)
    with pytest.raises(ValueError, match="shape"):
        LogWeightTable(space, np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        LogWeightTable(space, np.array([0.0, np.nan, 0.0, 0.0]))
    with pytest.raises(ValueError, match="zero mass"):
        LogWeightTable(space, np.full(4, -np.inf))
    with pytest.raises(ValueError, match="score table"):
        ScoreTable(space, np.zeros((2, 2, 3)))
    src = ScoreTable.random(2, 3, seed=0)
    with pytest.raises(ValueError, match="contexts"):
        src.log_conditionals(np.zeros((2, 4), dtype=int), 0)
    with pytest.raises(TypeError, match="integer"):
        src.log_conditionals(np.zeros((2, 3)), 0)
    with pytest.raises(ValueError, match="site"):
        src.log_conditionals(np.zeros((2, 3), dtype=int), 3)
    with pytest.raises(ValueError, match="sites"):
        src.log_conditionals(np.zeros((2, 3), dtype=int), np.array([0, 1, 2]))


def test_every_rectangle_of_a_compatible_source_closes():
    """G Prop 4 on Ising: the two paths around a rectangle carry the same log-ratio."""
    m = IsingModel(nx.complete_graph(3), couplings=0.7, fields=[0.1, -0.3, 0.2], beta=1.3)
    space = m.space
    L = m.all_log_conditionals(space.all_states())
    for x in range(space.size):
        for i, j in combinations(range(3), 2):
            xi, xj = space.neighbours(x, i)[1 - space.decode(x)[i]], space.neighbours(x, j)[1 - space.decode(x)[j]]
            xij = space.neighbours(xi, j)[1 - space.decode(x)[j]]
            dx = space.decode(np.array([x, xi, xj, xij]))

            def step(a, site, b):
                return L[a, site, dx[b][site]] - L[a, site, space.decode(a)[site]]

            path1 = step(x, i, 1) + step(xi, j, 3)
            path2 = step(x, j, 2) + step(xj, i, 3)
            assert abs(path1 - path2) < 1e-12
