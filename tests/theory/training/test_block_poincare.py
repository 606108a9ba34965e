"""Block-dynamics Dirichlet forms (P Prop 1), Poincaré constants and approximate tensorization bounds."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.chain.shortcuts import spectral_gap
from mlmix.theory.chain.spectral import dirichlet_form
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.theory.training.block_poincare import (
    approximate_tensorization,
    block_dynamics_kernel,
    block_poincare_constant,
    fibre_dirichlet_form,
    kernel_dirichlet_form,
    log_sobolev_upper_bound,
    mask_conditioned_kernel,
    pair_distribution,
    tensorization_ratio,
)
from mlmix.theory.training.exponential_family import IsingFamily
from mlmix.theory.training.pseudolikelihood import MaskDistribution
from mlmix.verify.pitfalls_strategies import pl_instances


@settings(max_examples=20)
@given(pl_instances() | pl_instances(adaptive=True), st.integers(0, 1000))
def test_dirichlet_form_two_ways(inst, seed):
    """P Prop 1 on pair functions, and for functions of X the X-chain's <f, (I - P) g>."""
    source = inst.family.model(inst.theta)
    masks = inst.masks
    rng = np.random.default_rng(seed)
    f, g = rng.normal(size=(2, masks.space.size, masks.m))
    assert kernel_dirichlet_form(source, masks, f, g) == pytest.approx(fibre_dirichlet_form(source, masks, f, g),
                                                                      rel=1e-9, abs=1e-12)
    fx, gx = rng.normal(size=(2, masks.space.size))
    mu = source.joint()
    x_chain = dirichlet_form(block_dynamics_kernel(source, masks), fx, gx, mu)
    assert x_chain == pytest.approx(fibre_dirichlet_form(source, masks, fx, gx), rel=1e-9, abs=1e-12)
    assert x_chain == pytest.approx(kernel_dirichlet_form(source, masks, fx, gx), rel=1e-9, abs=1e-12)


def test_pair_chain_is_stationary_and_keeps_the_block():
    fam = IsingFamily(nx.cycle_graph(3))
    theta = np.array([0.2, -0.1, 0.3, 0.5, -0.4, 0.8])
    probs = np.random.default_rng(0).dirichlet(np.ones(3), size=8)
    masks = MaskDistribution.adaptive_masks(fam.space, [(0, 1), (1, 2), (0,)], probs)
    source = fam.model(theta)
    P = mask_conditioned_kernel(source, masks)
    pairs = pair_distribution(source, masks).ravel()
    np.testing.assert_allclose(pairs @ P, pairs, atol=1e-15)
    np.testing.assert_allclose(np.asarray(P.sum(axis=1)).ravel(), 1.0, atol=1e-12)
    rows, cols = P.nonzero()
    assert np.all(rows % 3 == cols % 3)


@pytest.mark.parametrize("n,k", [(3, 1), (4, 2), (4, 3), (5, 2)])
def test_product_measure_poincare_is_n_over_k(n, k):
    """Independent spins: k-Gibbs has gap exactly k/n, so C = n/k (closed form)."""
    fam = IsingFamily(nx.empty_graph(n))
    source = fam.model(np.linspace(-0.8, 0.9, n))
    masks = MaskDistribution.k_subsets(fam.space, k)
    assert block_poincare_constant(source, masks) == pytest.approx(n / k, rel=1e-10)


def test_full_block_is_exact_sampling():
    fam = IsingFamily(nx.complete_graph(3))
    source = fam.model(np.array([0.3, -0.2, 0.1, 0.9, -0.7, 0.4]))
    masks = MaskDistribution.k_subsets(fam.space, 3)
    assert block_poincare_constant(source, masks) == pytest.approx(1.0, rel=1e-12)
    at = approximate_tensorization(source, masks, restarts=2)
    assert at.upper == pytest.approx(1.0) and at.lower == pytest.approx(1.0)  # C_AT = 1 exactly


def test_tensorization_bounds_product_measure():
    """Product measure with 1-Gibbs: Shearer's inequality gives C_AT <= n and Poincaré gives C_AT >= n."""
    n = 3
    fam = IsingFamily(nx.empty_graph(n))
    source = fam.model(np.array([0.4, -0.3, 0.9]))
    masks = MaskDistribution.k_subsets(fam.space, 1)
    at = approximate_tensorization(source, masks, restarts=4)
    assert at.lower == pytest.approx(n, rel=1e-9)
    assert at.best_ratio <= n * (1 + 1e-9)
    assert at.upper >= n
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert tensorization_ratio(source, masks, rng.dirichlet(np.ones(8))) <= n * (1 + 1e-9)


@settings(max_examples=8)
@given(pl_instances(max_n=3) | pl_instances(adaptive=True, max_n=3))
def test_tensorization_bounds_are_ordered(inst):
    source = inst.family.model(inst.theta)
    at = approximate_tensorization(source, inst.masks, restarts=2)
    assert at.poincare >= 1.0 and at.poincare <= at.lower * (1 + 1e-9)
    assert at.lower <= at.upper * (1 + 1e-9)
    if at.witness is not None:
        assert tensorization_ratio(source, inst.masks, at.witness) == pytest.approx(at.best_ratio, rel=1e-9)
    upper, method = log_sobolev_upper_bound(source, inst.masks)
    assert upper == at.upper and method == at.upper_method


def test_log_sobolev_bound_formula():
    fam = IsingFamily(nx.path_graph(3))
    source = fam.model(np.array([0.1, 0.2, -0.3, 0.5, 0.4]))
    masks = MaskDistribution.weighted(fam.space, [(0, 1), (1, 2)], [0.7, 0.3])
    mu = source.joint()
    gap = spectral_gap(block_dynamics_kernel(source, masks), mu)
    expected = np.log(1 / mu.min() - 1) / ((1 - 2 * mu.min()) * gap)
    assert log_sobolev_upper_bound(source, masks)[0] == pytest.approx(expected, rel=1e-12)
    full = MaskDistribution.weighted(fam.space, [(0,), (0, 1, 2)], [0.75, 0.25])
    assert log_sobolev_upper_bound(source, full) == (4.0, "full block [n] with weight w: 1/w")


def test_errors():
    fam = IsingFamily(nx.path_graph(3))
    source = fam.model(np.zeros(5))
    masks = MaskDistribution.k_subsets(fam.space, 1)
    with pytest.raises(TypeError, match="no joint law"):
        block_poincare_constant(ScoreTable.random(2, 3, seed=0), masks)
    with pytest.raises(ValueError, match="masks live on"):
        block_poincare_constant(IsingFamily(nx.path_graph(4)).model(np.zeros(7)), masks)
    with pytest.raises(ValueError, match="must be finite, of shape"):
        fibre_dirichlet_form(source, masks, np.ones(5))
    with pytest.raises(ValueError, match="r = mu"):
        tensorization_ratio(source, masks, source.joint())
    zero = MaskDistribution.adaptive_masks(fam.space, [(0, 1, 2), (0,)], np.tile([1.0, 0.0], (8, 1)))
    with pytest.raises(ValueError, match="p_K\\(K \\| x\\) > 0"):
        mask_conditioned_kernel(source, zero)
