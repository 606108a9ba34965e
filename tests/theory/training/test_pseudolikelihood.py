"""Weighted pseudolikelihood: derivatives, information equality, Gamma_PL, exact rational cross-check."""

from itertools import product

import networkx as nx
import numpy as np
import pytest
import sympy
from hypothesis import given, settings

from mlmix.theory.training.exponential_family import IsingFamily, NearSingularError, PottsFamily
from mlmix.theory.training.pseudolikelihood import (
    MaskDistribution,
    PseudoLikelihood,
    asymptotic_covariance,
    fit_pseudolikelihood,
    sample_pair_weights,
)
from mlmix.verify.pitfalls_strategies import pl_instances


def _pl(inst):
    data = inst.family.probabilities(inst.theta) if inst.data is None else inst.data
    return PseudoLikelihood(inst.family, inst.masks, data)


@settings(max_examples=20)
@given(pl_instances(with_data=True) | pl_instances(adaptive=True, with_data=True))
def test_gradient_and_hessian_match_finite_differences(inst):
    pl, theta = _pl(inst), inst.theta
    d, eps = inst.family.dimension, 1e-5
    E = np.eye(d) * eps
    fd_grad = np.array([(pl.loss(theta + E[i]) - pl.loss(theta - E[i])) / (2 * eps) for i in range(d)])
    np.testing.assert_allclose(pl.gradient(theta), fd_grad, atol=1e-7)
    fd_hess = np.array([(pl.gradient(theta + E[i]) - pl.gradient(theta - E[i])) / (2 * eps) for i in range(d)])
    np.testing.assert_allclose(pl.hessian(theta), fd_hess, atol=1e-7)
    loss, grad = pl.loss_and_gradient(theta)
    assert loss == pytest.approx(pl.loss(theta), rel=1e-13)
    np.testing.assert_allclose(grad, pl.gradient(theta), atol=1e-14)


@settings(max_examples=20)
@given(pl_instances() | pl_instances(adaptive=True))
def test_information_equality_at_the_truth(inst):
    """P Lemma 2 / Lemma 5: Hessian = gradient covariance at theta*; and the population gradient is 0."""
    pl = _pl(inst)
    H = pl.hessian(inst.theta)
    np.testing.assert_allclose(pl.gradient_covariance(inst.theta), H, atol=1e-12 * max(1, np.abs(H).max()))
    np.testing.assert_allclose(pl.gradient(inst.theta), 0.0, atol=1e-13)
    assert pl.excess_loss(inst.theta) == pytest.approx(0.0, abs=1e-13)


def test_information_equality_fails_off_the_truth():
    """The equality needs realizability: with misspecified data H != Cov (so the check can fail)."""
    fam = IsingFamily(nx.path_graph(3))
    theta = np.array([0.2, -0.1, 0.3, 0.9, -0.6])
    masks = MaskDistribution.k_subsets(fam.space, 1)
    pl = PseudoLikelihood(fam, masks, fam.probabilities(theta + np.array([0.5, 0, 0, -0.7, 0])))
    assert np.abs(pl.hessian(theta) - pl.gradient_covariance(theta)).max() > 1e-2


@settings(max_examples=15)
@given(pl_instances())
def test_full_masks_give_the_mle(inst):
    """k = n: Gamma^n = I^{-1} (P Theorem 1's endpoint); mask-averaged (n-1)-PL is also the MLE,
    because its loss is C log p(x) minus single-site marginals, which the MLE matches exactly."""
    fam, theta = inst.family, inst.theta
    n = fam.space.length
    inv = fam.inverse_fisher(theta)
    for k, averaged in ((n, False), (n - 1, True)):
        gamma = asymptotic_covariance(fam, theta, MaskDistribution.k_subsets(fam.space, k), averaged).gamma
        np.testing.assert_allclose(gamma, inv, atol=1e-9 * np.abs(inv).max())


def test_mask_averaged_covariance_is_smaller():
    """Averaging each sample over its masks cannot increase the variance: Cov_X(E_K s) <= Cov_{X,K}(s)."""
    fam = IsingFamily(nx.cycle_graph(4))
    theta = np.array([0.1, -0.3, 0.2, 0.0, 0.5, -0.4, 0.6, 0.3])
    for k in (1, 2):
        masks = MaskDistribution.k_subsets(fam.space, k)
        sampled = asymptotic_covariance(fam, theta, masks).gamma
        averaged = asymptotic_covariance(fam, theta, masks, mask_averaged=True).gamma
        assert np.linalg.eigvalsh(sampled - averaged).min() > -1e-10
        assert np.trace(sampled) > np.trace(averaged) + 1e-3


def _exact_single_edge(a, b, c):
    """n = 2, theta = (h0, h1, J) with e^{h0} = a, e^{h1} = b, e^{J} = c (rationals): exact I, H_1, V_1."""
    states = list(product((-1, 1), repeat=2))
    T = [sympy.Matrix([x0, x1, x0 * x1]) for x0, x1 in states]
    w = [a**x0 * b**x1 * c ** (x0 * x1) for x0, x1 in states]
    Z = sum(w)
    p = [wi / Z for wi in w]
    mean = sum((pi * t for pi, t in zip(p, T)), sympy.zeros(3, 1))
    fisher = sum(((t - mean) * (t - mean).T * pi for pi, t in zip(p, T)), sympy.zeros(3, 3))
    H = sympy.zeros(3, 3)
    for site in (0, 1):  # 1-PL: K = {site} with probability 1/2; fibre = the two values of x_site
        for s, (x0, x1) in enumerate(states):
            partner = states.index((-x0, x1) if site == 0 else (x0, -x1))
            q = w[s] / (w[s] + w[partner])
            m = q * T[s] + (1 - q) * T[partner]
            H += sympy.Rational(1, 2) * p[s] * (T[s] - m) * (T[s] - m).T
    return fisher, H


def test_exact_rational_single_edge():
    a, b, c = sympy.Rational(3, 2), sympy.Rational(1, 2), sympy.Rational(3)
    fisher, H = _exact_single_edge(a, b, c)
    fam = IsingFamily(nx.path_graph(2))
    theta = np.log([1.5, 0.5, 3.0])
    np.testing.assert_allclose(fam.fisher_information(theta), np.array(fisher, dtype=float), rtol=1e-12)
    res = asymptotic_covariance(fam, theta, MaskDistribution.k_subsets(fam.space, 1))
    np.testing.assert_allclose(res.hessian, np.array(H, dtype=float), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(res.gamma, np.array(H.inv(), dtype=float), rtol=1e-10)
    # Theorem 1 on this instance, exactly: Gamma^1 - I^{-1} is PSD
    diff = H.inv() - fisher.inv()
    assert all(sympy.nsimplify(ev) >= 0 for ev in diff.eigenvals())


def test_gradient_covariance_against_monte_carlo():
    fam = IsingFamily(nx.path_graph(3))
    theta = np.array([0.2, -0.4, 0.1, 0.7, -0.5])
    masks = MaskDistribution.weighted(fam.space, [(0,), (1, 2), (0, 2)], [0.5, 0.3, 0.2])
    pl = PseudoLikelihood(fam, masks, fam.probabilities(theta))
    rng = np.random.default_rng(3)
    states = fam.sample(theta, 100_000, rng)
    blocks = masks.sample(states, rng)
    scores = np.zeros((states.size, fam.dimension))
    log_p = fam.log_weights(theta)
    for b in range(masks.m):
        members, logq = masks.conditionals(log_p, b)
        pos = np.empty(fam.space.size, dtype=np.int64)
        pos[members.ravel()] = np.repeat(np.arange(members.shape[0]), members.shape[1])
        sel = blocks == b
        rows = members[pos[states[sel]]]
        mean = np.einsum("fs,fsd->fd", np.exp(logq[pos[states[sel]]]), fam.table[rows])
        scores[sel] = fam.table[states[sel]] - mean
    mc = np.cov(scores.T)
    V = pl.gradient_covariance(theta)
    np.testing.assert_allclose(mc, V, atol=0.02)


def test_fit_recovers_theta_on_population_data():
    fam = PottsFamily(nx.path_graph(3), 3)
    theta = np.linspace(-0.5, 0.6, fam.dimension)
    masks = MaskDistribution.k_subsets(fam.space, 2)
    res = fit_pseudolikelihood(PseudoLikelihood(fam, masks, fam.probabilities(theta)))
    assert res.success
    np.testing.assert_allclose(res.x, theta, atol=1e-5)


def test_sample_pair_weights_and_mask_sampling():
    fam = IsingFamily(nx.path_graph(3))
    masks = MaskDistribution.k_subsets(fam.space, 2)
    states = np.array([0, 0, 5, 7])
    W = sample_pair_weights(states, None, masks)
    np.testing.assert_allclose(W.sum(axis=1), [0.5, 0, 0, 0, 0, 0.25, 0, 0.25])
    np.testing.assert_allclose(W[0], [1 / 6] * 3)
    Wb = sample_pair_weights(states, np.array([0, 2, 1, 1]), masks)
    assert Wb[0, 0] == Wb[0, 2] == 0.25 and Wb[5, 1] == Wb[7, 1] == 0.25
    rng = np.random.default_rng(0)
    probs = np.tile([0.6, 0.3, 0.1], (8, 1))
    adaptive = MaskDistribution.adaptive_masks(fam.space, masks.blocks, probs)
    draws = adaptive.sample(np.zeros(30000, dtype=np.int64), rng)
    np.testing.assert_allclose(np.bincount(draws) / draws.size, [0.6, 0.3, 0.1], atol=0.015)


def test_loss_is_cross_entropy_of_conditionals():
    """excess loss = loss - loss of the data's own conditionals (a KL, so >= 0)."""
    fam = IsingFamily(nx.complete_graph(3), "ordered")
    theta = np.array([0.1, 0.2, -0.3, 0.4, -0.2, 0.5])
    data = np.random.default_rng(0).dirichlet(np.ones(8))
    masks = MaskDistribution.k_subsets(fam.space, 2)
    pl = PseudoLikelihood(fam, masks, data)
    W = pl.pair_weights
    own = 0.0
    for b in range(masks.m):
        members = masks.fibres(b)
        w = W[members, b]
        own -= float(np.sum(w * np.log(w / w.sum(axis=1, keepdims=True))))
    assert pl.excess_loss(theta) == pytest.approx(pl.loss(theta) - own, rel=1e-12)
    assert pl.excess_loss(theta) > 0


def test_errors():
    fam = IsingFamily(nx.path_graph(3))
    masks = MaskDistribution.k_subsets(fam.space, 1)
    with pytest.raises(ValueError, match="data must be"):
        PseudoLikelihood(fam, masks, np.ones((8, 2)) / 16)
    with pytest.raises(ValueError, match="masks live on"):
        PseudoLikelihood(IsingFamily(nx.path_graph(4)), masks, np.ones(16) / 16)
    with pytest.raises(ValueError, match="cover"):
        MaskDistribution.weighted(fam.space, [(0, 1)])
    with pytest.raises(ValueError, match="k must lie"):
        MaskDistribution.k_subsets(fam.space, 4)
    with pytest.raises(ValueError, match="p_K\\(K \\| x\\) = 0"):
        adaptive = MaskDistribution.adaptive_masks(fam.space, [(0, 1), (2,)], np.tile([1.0, 0.0], (8, 1)))
        sample_pair_weights(np.array([0]), np.array([1]), adaptive)
    with pytest.raises(NearSingularError, match="pseudolikelihood Hessian"):
        asymptotic_covariance(fam, np.array([30.0, 30.0, 30.0, 0.0, 0.0]), masks)
    with pytest.raises(ValueError, match="adaptive masks have no fixed weights"):
        MaskDistribution.adaptive_masks(fam.space, [(0, 1, 2)], np.ones((8, 1))).weights
