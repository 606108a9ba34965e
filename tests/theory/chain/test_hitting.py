"""Hitting probabilities, hitting times and committors: absorbed-chain powers, first-step equations,
Kac, gambler's ruin, metastable values against high-precision references, dense vs Krylov."""

import mpmath as mp
import networkx as nx
import numpy as np
import pytest
from chain_representations import REPRESENTATIONS, chain_in
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.chain.hitting import (
    committor,
    expected_hitting_times,
    hitting_probabilities,
    hitting_time_distribution,
)
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.linalg import absorbed
from mlmix.theory.sources.conditionals import IsingModel, PottsModel, ScoreTable


def _absorbed(P, A):
    """The chain stopped on A: rows of A replaced by the identity."""
    M = P.copy()
    M[A] = 0.0
    M[A, A] = 1.0
    return M


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@settings(max_examples=12)
@given(st.integers(0, 10**6), st.integers(0, 7))
def test_hitting_probabilities_are_absorbed_chain_powers(rep, seed, t):
    """h_t = (absorbed P)^t 1_A, from the function and from the chain of the source in each
    representation (within its stated error)."""
    src = ScoreTable.random(2, 3, seed=seed)
    P = glauber_kernel(src).toarray()
    A = np.random.default_rng(seed).random(8) < 0.3
    if not A.any() or A.all():
        A[0], A[1] = True, False
    exact = np.linalg.matrix_power(_absorbed(P, A), t)[:, A].sum(axis=1)
    h = hitting_probabilities(P, A, t)
    np.testing.assert_allclose(h, exact, atol=1e-13)
    assert (h[A] == 1).all()
    via = chain_in(rep, source=src).hitting_probabilities(A, t)
    assert via.rel_error is not None and (np.abs(via.value - exact) <= via.rel_error * exact + 1e-13).all()
    assert (via.value[A] == 1).all()
    # the distribution from a start law mixes the per-start probabilities linearly
    mu = np.random.default_rng(seed + 1).dirichlet(np.ones(8))
    cdf = hitting_time_distribution(P, mu, np.flatnonzero(A), t)
    assert cdf[t] == pytest.approx(mu @ h, abs=1e-13)
    assert np.all(np.diff(cdf) >= -1e-15)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@settings(max_examples=12)
@given(st.integers(0, 10**6))
def test_expected_times_solve_first_step_equations_and_sum_tails(rep, seed):
    src = ScoreTable.random(2, 3, seed=seed)
    P = glauber_kernel(src).toarray()
    A = np.zeros(8, dtype=bool)
    A[seed % 8] = True
    k = expected_hitting_times(P, A)
    B = ~A
    assert (k[A] == 0).all()
    np.testing.assert_allclose(k[B], 1 + P[B] @ k, rtol=1e-10)
    via = chain_in(rep, source=src).hitting_time(A)  # the chain's times solve the same equations
    assert via.rel_error is not None and (via.value[A] == 0).all()
    np.testing.assert_allclose(via.value[B], 1 + P[B] @ via.value, rtol=via.rel_error + 1e-12)
    # E tau = sum_{t >= 0} P(tau > t), from the hitting probabilities
    x = int(np.flatnonzero(B)[0])
    cdf = hitting_time_distribution(P, np.eye(8)[x], A, 4000)
    assert k[x] == pytest.approx((1 - cdf).sum(), rel=1e-8)
    # Kac: E_a[return time to a] = 1 / pi(a)
    a = seed % 8
    pi = Chain(P).stationary.value
    return_time = 1 + P[a] @ k
    assert return_time == pytest.approx(1 / pi[a], rel=1e-10)


def test_two_state_hitting(matrix_chain_of):
    a, b = 0.3, 0.1
    P = two_state(a, b)
    ch = matrix_chain_of(P)
    for k in (expected_hitting_times(P, [1]), ch.hitting_time([1])):
        np.testing.assert_allclose(k, [1 / a, 0])
    for h in (hitting_probabilities(P, [1], 5), ch.hitting_probabilities([1], 5)):
        np.testing.assert_allclose(h, [1 - (1 - a) ** 5, 1])


def test_unreachable_targets_give_infinite_times(matrix_chain_of):
    # 0 -> {1, 3}; 1 -> target 2; 3 absorbing outside the target; 4 only reaches 2
    P = np.array([[0.0, 0.5, 0.0, 0.5, 0.0],
                  [0.0, 0.5, 0.5, 0.0, 0.0],
                  [0.0, 0.0, 1.0, 0.0, 0.0],
                  [0.0, 0.0, 0.0, 1.0, 0.0],
                  [0.0, 0.0, 0.5, 0.0, 0.5]])
    ch = matrix_chain_of(P)
    if ch.representation == "operator":  # several closed classes: the matrix-free solves refuse by name
        with pytest.raises(ValueError, match="2 closed classes"):
            ch.hitting_time([2])
        np.testing.assert_allclose(ch.hitting_probabilities([2], 200).value[[0, 3]], [0.5, 0.0], atol=1e-12)
        return
    for k in (expected_hitting_times(P, [2]), ch.hitting_time([2]).value):
        assert k[0] == np.inf and k[3] == np.inf
        np.testing.assert_allclose(k[[1, 2, 4]], [2.0, 0.0, 2.0])
    for h in (hitting_probabilities(P, [2], 200), ch.hitting_probabilities([2], 200).value):
        np.testing.assert_allclose(h[[0, 3]], [0.5, 0.0], atol=1e-12)


@pytest.mark.parametrize("kind", ["reversible", "non-reversible"])
def test_dense_and_krylov_paths_agree(monkeypatch, kind):
    src = PottsModel.random(nx.cycle_graph(5), 3, seed=5) if kind == "reversible" else ScoreTable.random(3, 5, seed=5)
    P = glauber_kernel(src)
    target = np.flatnonzero(src.space.all_states().sum(axis=1) == 0)  # the all-zero state
    dense = expected_hitting_times(P, target)
    assert "GTH" in dense.method
    monkeypatch.setattr(absorbed, "DENSE_HITTING_LIMIT", 16)
    sparse = expected_hitting_times(P, target)
    assert sparse.residual < 1e-8 and "GMRES" in sparse.method or "BiCGSTAB" in sparse.method
    np.testing.assert_allclose(sparse, dense, rtol=1e-8)


def test_ising_symmetry_of_hitting_times(chain_of):
    """Spin-flip symmetry of a field-free Ising model: times to all-plus from x equal times to
    all-minus from the flipped state; the chain of the source in each representation (the operator's
    conjugate gradients included) within its stated accuracy of the dense GTH times."""
    m = IsingModel(nx.cycle_graph(5), beta=0.7)
    P = glauber_kernel(m)
    N = m.space.size
    k_plus = expected_hitting_times(P, [N - 1])
    k_minus = expected_hitting_times(P, [0])
    np.testing.assert_allclose(k_plus, k_minus[::-1], rtol=1e-10)
    ch = chain_of(source=m)
    got = ch.hitting_time([N - 1])
    assert got.rel_error is not None and got.rel_error < 1e-8
    np.testing.assert_allclose(got.value, k_plus, rtol=got.rel_error + k_plus.rel_error, atol=0)
    np.testing.assert_allclose(ch.hitting_time([0]).value, got.value[::-1], rtol=1e-8)


def test_hitting_the_whole_space_is_immediate(matrix_chain_of):
    P = two_state(0.2, 0.3)
    ch = matrix_chain_of(P)
    np.testing.assert_array_equal(expected_hitting_times(P, [0, 1]), [0.0, 0.0])
    np.testing.assert_array_equal(hitting_probabilities(P, [0, 1], 3), [1.0, 1.0])
    np.testing.assert_array_equal(ch.hitting_time([0, 1]).value, [0.0, 0.0])
    np.testing.assert_array_equal(ch.hitting_probabilities([0, 1], 3).value, [1.0, 1.0])


def test_gamblers_ruin_committor(matrix_chain_of):
    """Biased walk on 0..L, p up, q down: P_x(hit L before 0) = (1 - r^x) / (1 - r^L), r = q/p
    (committor and Chain.committor on dense and CSR)."""
    L, p, q = 12, 0.3, 0.5
    P = np.zeros((L + 1, L + 1))
    for x in range(1, L):
        P[x, x + 1], P[x, x - 1], P[x, x] = p, q, 1 - p - q
    P[0, 0] = P[L, L] = 1.0
    h = committor(P, [0], [L])
    r = q / p
    np.testing.assert_allclose(h, [(1 - r**x) / (1 - r**L) for x in range(L + 1)], rtol=1e-12)
    assert h.rel_error < 1e-10 and "GTH" in h.method
    if matrix_chain_of.args == ("operator",):  # two absorbing states: refused by name matrix-free
        with pytest.raises(ValueError, match="2 closed classes"):
            matrix_chain_of(P).committor([0], [L])
        return
    via = matrix_chain_of(P).committor([0], [L])
    assert via.rel_error < 1e-10
    np.testing.assert_allclose(via.value, [(1 - r**x) / (1 - r**L) for x in range(L + 1)], rtol=1e-12)


def test_metastable_committor_keeps_relative_accuracy(matrix_chain_of):
    """Committors down to 1e-180 across a tilted double well, against 200-digit arithmetic."""
    from mlmix.theory.reference import birth_death

    P, _ = birth_death(m=10, depth=250.0, tilt=5.0)
    N = P.shape[0]
    h = matrix_chain_of(P).committor([0], [N - 1])
    with mp.workdps(200):  # the same chain: diagonal 1 - off-diagonal sums; birth-death committor formula
        up = [mp.mpf(P[k, k + 1]) for k in range(N - 1)]
        down = [mp.mpf(P[k + 1, k]) for k in range(N - 1)]
        w = [mp.mpf(1)]
        for k in range(1, N - 1):
            w.append(w[-1] * down[k - 1] / up[k])  # prod_{j <= k} P(j, j-1) / P(j, j+1)
        S = mp.fsum(w)
        ref = [float(mp.fsum(w[:x]) / S) for x in range(N)]
    assert min(v for v in ref if v > 0) < 1e-100
    if matrix_chain_of.args == ("operator",):  # a Krylov solve cannot see 1e-107 next to 1: it says so
        assert h.rel_error is None and "not certified" in h.method
        return
    np.testing.assert_allclose(h, ref, rtol=1e-11)


def test_bad_targets_and_times(representation):
    """The functions and the chain of a source in each representation refuse the same bad input."""
    P = two_state(0.2, 0.3)
    ch = chain_in(representation, source=ScoreTable.random(2, 3, seed=5))
    for fn in (lambda A: expected_hitting_times(P, A), lambda A: hitting_probabilities(P, A, 3),
               ch.hitting_time, lambda A: ch.hitting_probabilities(A, 3)):
        with pytest.raises(ValueError, match="empty"):
            fn([])
        with pytest.raises(ValueError, match="must lie in"):
            fn([9])
    for ask in (committor, lambda P, A, B: ch.committor(A, B)):
        with pytest.raises(ValueError, match="disjoint"):
            ask(P, [0], [0])
    for probabilities in (lambda A, t: hitting_probabilities(P, A, t), ch.hitting_probabilities):
        with pytest.raises(ValueError, match=">= 0"):
            probabilities([0], -1)
        with pytest.raises(TypeError):
            probabilities([0], 2.5)
    with pytest.raises(ValueError, match="start_law"):
        hitting_time_distribution(P, np.array([0.5, 0.6]), [0], 3)
