"""Kernels: entries against their definitions, exact (sympy) row sums and detailed balance,
stationary laws of Glauber / block / adaptive / parallel samplers, cross-checks between builders."""

import networkx as nx
import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.chain.shortcuts import is_reversible
from mlmix.theory.chain.stationary import stationary_distribution
from mlmix.theory.kernels.assembled import (
    adaptive_block_kernel,
    block_kernel,
    glauber_kernel,
    independent_parallel_kernel,
    k_gibbs_kernel,
    k_subsets,
)
from mlmix.theory.sources.conditionals import (
    IsingModel,
    LogWeightTable,
    PottsModel,
    ScoreTable,
    clique_ising,
)
from mlmix.theory.sources.space import StateSpace


def _glauber_by_definition(src):
    """P(x, y) = (1/n) sum_i 1[y_{-i} = x_{-i}] pi_i(y_i | x_{-i}), state by state."""
    space = src.space
    states = space.all_states()
    L = np.exp(src.all_log_conditionals(states))
    P = np.zeros((space.size, space.size))
    for x in range(space.size):
        for i in range(space.length):
            for v, y in enumerate(space.neighbours(x, i)):
                P[x, y] += L[x, i, v] / space.length
    return P


@settings(max_examples=12)
@given(st.integers(2, 3), st.integers(1, 4), st.integers(0, 10**6), st.floats(0.2, 3.0))
def test_glauber_entries_match_definition(q, n, seed, T):
    src = ScoreTable.random(q, n, seed=seed, temperature=T)
    P = glauber_kernel(src)
    D = P.toarray()
    np.testing.assert_allclose(D, _glauber_by_definition(src), atol=1e-14)
    np.testing.assert_allclose(D.sum(axis=1), 1.0, atol=1e-13)
    assert (np.diag(D) > 0).all()
    space = src.space
    far = space.hamming(np.arange(space.size)[:, None], np.arange(space.size)[None, :]) > 1
    assert (D[far] == 0).all()


@pytest.mark.parametrize("src", [
    IsingModel(nx.cycle_graph(4), couplings=0.8, fields=0.3, beta=1.1),
    PottsModel.random(nx.path_graph(3), 3, seed=4),
    LogWeightTable.random(StateSpace(3, 3), seed=5, scale=2.0, temperature=0.4),
    clique_ising(5, [0, 1, 2], 0.4, [0.2, 0.1, 0.0, -0.3, 0.5]),
], ids=["ising", "potts", "table", "clique"])
def test_glauber_of_a_joint_is_reversible_with_the_joint_stationary(src):
    """Paper G Thm 3."""
    P = glauber_kernel(src)
    mu = src.joint()
    np.testing.assert_allclose(stationary_distribution(P), mu, rtol=1e-10)
    Q = P.toarray() * mu[:, None]
    np.testing.assert_allclose(Q, Q.T, atol=1e-15)
    assert is_reversible(P, mu)


def test_random_score_tables_give_non_reversible_glauber():
    """The converse of G Thm 3 fails: an incompatible table breaks detailed balance."""
    P = glauber_kernel(ScoreTable.random(2, 3, seed=0))
    assert not is_reversible(P)


def test_exact_rational_row_sums_and_detailed_balance_on_a_tiny_ising():
    """sympy: with t = e^{1/2}, every weight of Ising(beta=1, J=1, h=1/2) on a path of 3 sites is a
    power of t, so the Glauber kernel is a matrix of rational functions of t; row sums are exactly 1
    and detailed balance holds exactly; our float kernel equals it evaluated at t = e^{1/2}."""
    t = sympy.Symbol("t", positive=True)
    model = IsingModel(nx.path_graph(3), couplings=1.0, fields=0.5, beta=1.0)
    space = model.space
    states = space.all_states()
    s = 2 * states - 1
    # w(x) = sum_edges s_i s_j + (1/2) sum_i s_i, an integer multiple of 1/2 => weight t^(2 w)
    two_w = [int(round(2 * (s[k, 0] * s[k, 1] + s[k, 1] * s[k, 2]) + s[k].sum())) for k in range(space.size)]
    weight = [t**e for e in two_w]
    n = space.length
    P = sympy.zeros(space.size, space.size)
    for x in range(space.size):
        for i in range(n):
            fibre = [int(y) for y in space.neighbours(x, i)]
            Z = sum(weight[y] for y in fibre)
            for y in fibre:
                P[x, y] += weight[y] / (n * Z)
    for x in range(space.size):
        assert sympy.cancel(sum(P[x, :]) - 1) == 0
        for y in range(space.size):
            assert sympy.cancel(weight[x] * P[x, y] - weight[y] * P[y, x]) == 0
    numeric = np.array(P.subs(t, sympy.exp(sympy.Rational(1, 2))).evalf(30).tolist(), dtype=np.float64)
    np.testing.assert_allclose(glauber_kernel(model).toarray(), numeric, atol=1e-15)


def test_singleton_blocks_reproduce_glauber():
    """Two independent builders: block dynamics over {0},...,{n-1} with uniform weights = Glauber."""
    src = PottsModel.random(nx.cycle_graph(4), 3, seed=7, temperature=0.8)
    np.testing.assert_allclose(block_kernel(src, [[i] for i in range(4)]).toarray(), glauber_kernel(src).toarray(),
                               atol=1e-15)
    np.testing.assert_allclose(k_gibbs_kernel(src, 1).toarray(), glauber_kernel(src).toarray(), atol=1e-15)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_k_gibbs_is_reversible_for_the_joint(k):
    src = LogWeightTable.random(StateSpace(2, 4), seed=k, scale=1.5)
    P = k_gibbs_kernel(src, k)
    mu = src.joint()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-13)
    np.testing.assert_allclose(mu @ P, mu, atol=1e-15)
    Q = P.toarray() * mu[:, None]
    np.testing.assert_allclose(Q, Q.T, atol=1e-15)
    assert len(k_subsets(4, k)) == {1: 4, 2: 6, 3: 4}[k]


def test_n_gibbs_samples_the_joint_in_one_step():
    src = LogWeightTable.random(StateSpace(3, 2), seed=1)
    P = k_gibbs_kernel(src, 2).toarray()
    np.testing.assert_allclose(P, np.tile(src.joint(), (9, 1)), atol=1e-15)


def test_weighted_blocks_mix_block_kernels_linearly():
    src = IsingModel(nx.path_graph(3), couplings=0.6, fields=0.2)
    blocks, w = [[0, 1], [1, 2], [2]], [0.5, 0.3, 0.2]
    P = block_kernel(src, blocks, w).toarray()
    parts = [block_kernel(src, [b] + [[i] for i in range(3) if i not in b], [1.0] + [0.0] * (3 - len(b))).toarray()
             for b in blocks]
    np.testing.assert_allclose(P, sum(wk * Pk for wk, Pk in zip(w, parts)), atol=1e-15)


def _adaptive_instance(seed=0):
    src = LogWeightTable.random(StateSpace(2, 3), seed=seed, scale=1.2)
    blocks = [[0, 1], [1, 2], [0, 2]]
    rng = np.random.default_rng(seed)
    probs = rng.random((8, 3)) + 0.1
    return src, blocks, probs / probs.sum(axis=1, keepdims=True)


def test_extended_adaptive_kernel_is_stationary_for_joint_times_block_law():
    """Paper P Def 8 / eq. (1): the chain on (X, K) keeps p(x) p_K(K | x)."""
    src, blocks, probs = _adaptive_instance()
    P = adaptive_block_kernel(src, blocks, probs, extended=True)
    target = (src.joint()[:, None] * probs).ravel()  # index x * m + K
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-13)
    np.testing.assert_allclose(target @ P, target, atol=1e-15)
    np.testing.assert_allclose(stationary_distribution(P), target, rtol=1e-9)


def test_adaptive_x_chain_is_reversible_and_reduces_to_block_dynamics():
    src, blocks, probs = _adaptive_instance(1)
    P = adaptive_block_kernel(src, blocks, probs).toarray()
    mu = src.joint()
    Q = P * mu[:, None]
    np.testing.assert_allclose(Q, Q.T, atol=1e-15)
    const = np.tile([0.2, 0.5, 0.3], (8, 1))
    np.testing.assert_allclose(adaptive_block_kernel(src, blocks, lambda x: const[: len(x)]).toarray(),
                               block_kernel(src, blocks, [0.2, 0.5, 0.3]).toarray(), atol=1e-15)


def test_independent_parallel_rows_factorise_and_match_definition():
    """Paper P Def 11 / Prop 3: each row is the product of the single-site conditionals."""
    src = ScoreTable.random(2, 3, seed=3)
    space = src.space
    P = independent_parallel_kernel(src)
    states = space.all_states()
    L = np.exp(src.all_log_conditionals(states))
    for x in range(space.size):
        row = P[x].reshape((2,) * 3)
        outer = np.einsum("a,b,c->abc", L[x, 0], L[x, 1], L[x, 2])
        np.testing.assert_allclose(row, outer, atol=1e-15)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-13)
    # a 2-Gibbs row of a coupled joint does not factorise across sites
    joint = IsingModel(nx.complete_graph(3), couplings=1.0)
    row = k_gibbs_kernel(joint, 2).toarray()[0].reshape((2,) * 3)
    marg = [row.sum(axis=tuple(a for a in range(3) if a != i)) for i in range(3)]
    assert np.abs(row - np.einsum("a,b,c->abc", *marg)).max() > 1e-3


def test_bad_kernel_input():
    src = IsingModel(nx.path_graph(3))
    with pytest.raises(ValueError, match="cover"):
        block_kernel(src, [[0, 1]])
    with pytest.raises(ValueError, match="weights"):
        block_kernel(src, [[0, 1], [2]], [0.5, 0.6])
    with pytest.raises(ValueError, match="distinct"):
        block_kernel(src, [[0, 0], [1, 2]])
    with pytest.raises(ValueError, match="k must"):
        k_gibbs_kernel(src, 4)
    with pytest.raises(TypeError, match="joint"):
        k_gibbs_kernel(ScoreTable.random(2, 3, seed=0), 2)
    with pytest.raises(ValueError, match="exceeds"):
        glauber_kernel(src, max_states=4)
    with pytest.raises(ValueError, match="shape"):
        adaptive_block_kernel(src, [[0, 1], [2]], np.full((8, 3), 1 / 3))
    with pytest.raises(ValueError, match="summing"):
        adaptive_block_kernel(src, [[0, 1], [2]], np.full((8, 2), 0.6))
