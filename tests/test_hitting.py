"""Hitting probabilities and times: absorbed-chain powers, first-step equations, Kac, dense vs Krylov."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_spectral import two_state

from mlmix.theory import matrices
from mlmix.theory.conditionals import IsingModel, PottsModel, ScoreTable
from mlmix.theory.hitting import (
    expected_hitting_times,
    hitting_probabilities,
    hitting_time_distribution,
)
from mlmix.theory.kernels import glauber_kernel
from mlmix.theory.spectral import stationary


def _absorbed(P, A):
    """The chain stopped on A: rows of A replaced by the identity."""
    M = P.copy()
    M[A] = 0.0
    M[A, A] = 1.0
    return M


@settings(max_examples=12)
@given(st.integers(0, 10**6), st.integers(0, 7))
def test_hitting_probabilities_are_absorbed_chain_powers(seed, t):
    P = glauber_kernel(ScoreTable.random(2, 3, seed=seed)).toarray()
    A = np.random.default_rng(seed).random(8) < 0.3
    if not A.any() or A.all():
        A[0], A[1] = True, False
    h = hitting_probabilities(P, A, t)
    np.testing.assert_allclose(h, np.linalg.matrix_power(_absorbed(P, A), t)[:, A].sum(axis=1), atol=1e-13)
    assert (h[A] == 1).all()
    # the distribution from a start law mixes the per-start probabilities linearly
    mu = np.random.default_rng(seed + 1).dirichlet(np.ones(8))
    cdf = hitting_time_distribution(P, mu, np.flatnonzero(A), t)
    assert cdf[t] == pytest.approx(mu @ h, abs=1e-13)
    assert np.all(np.diff(cdf) >= -1e-15)


@settings(max_examples=12)
@given(st.integers(0, 10**6))
def test_expected_times_solve_first_step_equations_and_sum_tails(seed):
    P = glauber_kernel(ScoreTable.random(2, 3, seed=seed)).toarray()
    A = np.zeros(8, dtype=bool)
    A[seed % 8] = True
    k = expected_hitting_times(P, A)
    B = ~A
    assert (k[A] == 0).all()
    np.testing.assert_allclose(k[B], 1 + P[B] @ k, rtol=1e-10)
    # E tau = sum_{t >= 0} P(tau > t), from the hitting probabilities
    x = int(np.flatnonzero(B)[0])
    cdf = hitting_time_distribution(P, np.eye(8)[x], A, 4000)
    assert k[x] == pytest.approx((1 - cdf).sum(), rel=1e-8)
    # Kac: E_a[return time to a] = 1 / pi(a)
    a = seed % 8
    pi = stationary(P).pi
    return_time = 1 + P[a] @ k
    assert return_time == pytest.approx(1 / pi[a], rel=1e-10)


def test_two_state_hitting():
    a, b = 0.3, 0.1
    P = two_state(a, b)
    np.testing.assert_allclose(expected_hitting_times(P, [1]), [1 / a, 0])
    np.testing.assert_allclose(hitting_probabilities(P, [1], 5), [1 - (1 - a) ** 5, 1])


def test_unreachable_targets_give_infinite_times():
    # 0 -> {1, 3}; 1 -> target 2; 3 absorbing outside the target; 4 only reaches 2
    P = np.array([[0.0, 0.5, 0.0, 0.5, 0.0],
                  [0.0, 0.5, 0.5, 0.0, 0.0],
                  [0.0, 0.0, 1.0, 0.0, 0.0],
                  [0.0, 0.0, 0.0, 1.0, 0.0],
                  [0.0, 0.0, 0.5, 0.0, 0.5]])
    k = expected_hitting_times(P, [2])
    assert k[0] == np.inf and k[3] == np.inf
    np.testing.assert_allclose(k[[1, 2, 4]], [2.0, 0.0, 2.0])
    np.testing.assert_allclose(hitting_probabilities(P, [2], 200)[[0, 3]], [0.5, 0.0], atol=1e-12)


@pytest.mark.parametrize("kind", ["reversible", "non-reversible"])
def test_dense_and_krylov_paths_agree(monkeypatch, kind):
    src = PottsModel.random(nx.cycle_graph(5), 3, seed=5) if kind == "reversible" else ScoreTable.random(3, 5, seed=5)
    P = glauber_kernel(src)
    target = np.flatnonzero(src.space.all_states().sum(axis=1) == 0)  # the all-zero state
    dense = expected_hitting_times(P, target)
    monkeypatch.setattr(matrices, "DENSE_LIMIT", 16)
    np.testing.assert_allclose(expected_hitting_times(P, target), dense, rtol=1e-8)
    pi = stationary(P).pi
    np.testing.assert_allclose(expected_hitting_times(P, target, pi=pi), dense, rtol=1e-8)


def test_ising_symmetry_of_hitting_times():
    """Spin-flip symmetry of a field-free Ising model: times to all-plus from x equal times to
    all-minus from the flipped state."""
    m = IsingModel(nx.cycle_graph(5), beta=0.7)
    P = glauber_kernel(m)
    N = m.space.size
    k_plus = expected_hitting_times(P, [N - 1])
    k_minus = expected_hitting_times(P, [0])
    np.testing.assert_allclose(k_plus, k_minus[::-1], rtol=1e-10)


def test_bad_targets_and_times():
    P = two_state(0.2, 0.3)
    for fn in (lambda A: expected_hitting_times(P, A), lambda A: hitting_probabilities(P, A, 3)):
        with pytest.raises(ValueError, match="empty"):
            fn([])
        with pytest.raises(ValueError, match="whole"):
            fn([0, 1])
        with pytest.raises(ValueError):
            fn([5])
    with pytest.raises(ValueError, match=">= 0"):
        hitting_probabilities(P, [0], -1)
    with pytest.raises(TypeError):
        hitting_probabilities(P, [0], 2.5)
    with pytest.raises(ValueError, match="start_law"):
        hitting_time_distribution(P, np.array([0.5, 0.6]), [0], 3)
