"""Ising/Potts exponential families: statistics vs models, conventions, Fisher information."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.sources.conditionals import IsingModel, PottsModel, clique_ising
from mlmix.theory.training.exponential_family import (
    IsingFamily,
    NearSingularError,
    PottsFamily,
    checked_inverse,
    condition_number,
)
from mlmix.verify.pitfalls_strategies import families, thetas


@st.composite
def family_and_theta(draw):
    fam = draw(families(max_n=4))
    return fam, draw(thetas(fam, 1.0))


@settings(max_examples=25)
@given(family_and_theta())
def test_model_round_trip_and_log_weights(ft):
    fam, theta = ft
    model = fam.model(theta)
    diff = model.log_joint() - fam.log_weights(theta)  # equal up to the normalising constant
    assert np.ptp(diff) < 1e-12
    np.testing.assert_allclose(fam.parameters(model), theta, atol=1e-12)
    np.testing.assert_allclose(model.joint(), fam.probabilities(theta), atol=1e-14)


@settings(max_examples=20)
@given(family_and_theta())
def test_fisher_information_is_log_partition_hessian(ft):
    fam, theta = ft
    d, eps = fam.dimension, 1e-4
    H = np.zeros((d, d))
    E = np.eye(d) * eps
    for i in range(d):
        for j in range(d):
            H[i, j] = (fam.log_partition(theta + E[i] + E[j]) - fam.log_partition(theta + E[i] - E[j])
                       - fam.log_partition(theta - E[i] + E[j]) + fam.log_partition(theta - E[i] - E[j])) / (4 * eps**2)
    np.testing.assert_allclose(fam.fisher_information(theta), H, atol=2e-6)
    # gradient of A is the mean statistic
    g = np.array([(fam.log_partition(theta + E[i]) - fam.log_partition(theta - E[i])) / (2 * eps) for i in range(d)])
    np.testing.assert_allclose(fam.mean(theta), g, atol=1e-8)


def test_ordered_convention_doubles_the_pair_statistic():
    g = nx.cycle_graph(4)
    unordered, ordered = IsingFamily(g, "unordered"), IsingFamily(g, "ordered")
    rng = np.random.default_rng(1)
    theta_ord = rng.normal(size=ordered.dimension)
    D = np.diag([1.0] * 4 + [2.0] * 4)
    theta_unord = D @ theta_ord  # edge weight 2 J_ord
    np.testing.assert_allclose(ordered.probabilities(theta_ord), unordered.probabilities(theta_unord), atol=1e-14)
    np.testing.assert_allclose(ordered.fisher_information(theta_ord),
                               D @ unordered.fisher_information(theta_unord) @ D, atol=1e-12)
    # the ordered model is exactly paper P eq. (5)/(K.57) as built by clique_ising on a complete graph
    fam = IsingFamily(nx.complete_graph(4), "ordered")
    theta = np.concatenate([[0.1, -0.2, 0.3, 0.0], np.full(6, 0.4)])
    ref = clique_ising(4, range(4), 0.4, [0.1, -0.2, 0.3, 0.0])
    np.testing.assert_allclose(fam.model(theta).log_joint(), ref.log_joint(), atol=1e-12)
    # direct eq. (K.57): sum_i h_i x_i + sum_{i != j} J x_i x_j over ordered pairs
    s = 2.0 * fam.space.all_states() - 1
    direct = s @ theta[:4] + 0.4 * ((s.sum(axis=1) ** 2) - 4)
    assert np.ptp(direct - fam.log_weights(theta)) < 1e-12


def test_potts_fields_are_gauge_fixed():
    g = nx.path_graph(3)
    fam = PottsFamily(g, 3)
    fields = np.array([[0.5, 0.1, -0.3], [1.0, 1.2, 0.0], [0.0, 0.0, 0.7]])
    model = PottsModel(g, 3, couplings={(0, 1): 0.4, (1, 2): -0.2}, fields=fields)
    theta = fam.parameters(model)
    np.testing.assert_allclose(fam.probabilities(theta), model.joint(), atol=1e-14)
    assert condition_number(fam.fisher_information(theta)) < 1e4  # identifiable: h_i(0) = 0


def test_sampling_matches_the_joint():
    fam = IsingFamily(nx.path_graph(3))
    theta = np.array([0.3, -0.5, 0.1, 0.8, -0.4])
    p = fam.probabilities(theta)
    draws = fam.sample(theta, 40000, np.random.default_rng(0))
    freq = np.bincount(draws, minlength=fam.space.size) / draws.size
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / draws.size) + 1e-12)


def test_kl_divergence():
    fam = IsingFamily(nx.path_graph(3))
    theta = np.array([0.3, -0.5, 0.1, 0.8, -0.4])
    assert fam.kl(fam.probabilities(theta), theta) == pytest.approx(0.0, abs=1e-14)
    other = fam.probabilities(theta + 0.3)
    q = fam.probabilities(theta)
    assert fam.kl(other, theta) == pytest.approx(float(np.sum(other * np.log(other / q))), rel=1e-12)


def test_near_singular_fisher_is_refused():
    fam = IsingFamily(nx.path_graph(3))
    theta = np.array([20.0, 20.0, 20.0, 0.0, 0.0])  # almost deterministic: I nearly zero
    with pytest.raises(NearSingularError, match="Fisher information.*condition number"):
        fam.inverse_fisher(theta)
    with pytest.raises(NearSingularError, match="singular"):
        checked_inverse(np.array([[1.0, 1.0], [1.0, 1.0]]), "test matrix")
    A = np.array([[2.0, 0.5], [0.5, 1.0]])
    np.testing.assert_allclose(checked_inverse(A) @ A, np.eye(2), atol=1e-14)


def test_bad_input():
    with pytest.raises(TypeError):
        IsingFamily(nx.DiGraph([(0, 1)]))
    with pytest.raises(ValueError, match="convention"):
        IsingFamily(nx.path_graph(2), "both")
    fam = IsingFamily(nx.path_graph(3))
    with pytest.raises(ValueError, match="theta must have shape"):
        fam.log_weights(np.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        fam.log_weights(np.array([np.nan, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="exceeds"):
        IsingFamily(nx.empty_graph(20))
    with pytest.raises(TypeError):
        fam.parameters(PottsModel(nx.path_graph(3), 2))
    with pytest.raises(ValueError, match="outside"):
        fam.parameters(IsingModel(nx.complete_graph(3), 1.0))
    with pytest.raises(ValueError, match="must sum to 1"):
        fam.kl(np.ones(8), np.zeros(5))


@pytest.mark.parametrize("eps", [1e-10, 1e-6, 1e-3, 0.3])
def test_kl_of_a_law_near_p_theta_against_mpmath(eps):
    """KL(p || p_theta) for p = p_theta (1 + eps f) (a perturbation of mean 0) against the 50-digit value for the
    same float vectors, to 1e-9 + 1e-15 / eps relative (r = p/q - 1 is known to u / |r|), where the plain sum
    loses everything at eps = 1e-10 (a KL of 1e-21 under an error of 1e-16); a zero of p gives its q."""
    import mpmath as mp

    fam = IsingFamily(nx.path_graph(2))
    theta = np.array([0.3, -0.2, 0.5])
    q = fam.probabilities(theta)
    f = np.array([1.0, -1.0, 1.0, -1.0]) * np.array([1 / q[0], 1 / q[1], 1 / q[2], 1 / q[3]]) / 4
    p = q * (1 + eps * f)
    with mp.workdps(50):
        logq = [mp.mpf(float(x)) for x in fam.log_probabilities(theta)]
        exact = mp.fsum(mp.mpf(float(a)) * mp.log(mp.mpf(float(a))) - mp.mpf(float(a)) * lq + mp.exp(lq)
                        - mp.mpf(float(a)) for a, lq in zip(p, logq))
    got = fam.kl(p, theta)
    assert got > 0 and abs(got - float(exact)) <= (1e-9 + 1e-15 / eps) * float(exact)
    zero = np.array([0.0, 0.5, 0.5, 0.0])
    with mp.workdps(50):
        logq = [mp.mpf(float(x)) for x in fam.log_probabilities(theta)]
        exact = mp.fsum([mp.exp(logq[0]), mp.exp(logq[3])] + [mp.mpf(0.5) * (mp.log(0.5) - lq) - mp.mpf(0.5)
                                                               + mp.exp(lq) for lq in logq[1:3]])
    assert abs(fam.kl(zero, theta) - float(exact)) <= 1e-12 * float(exact)
