"""Conductance: closed forms, exhaustive search vs brute force, certified intervals that contain the
exact value and name their set, log-space evaluation for metastable chains."""

import itertools
import math

import networkx as nx
import numpy as np
import pytest
from chain_representations import MATRIX_REPRESENTATIONS, REPRESENTATIONS, assert_encloses, chain_in
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.chain.conductance import conductance_interval, exact_conductance, log_set_conductance, sweep_profile
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.shortcuts import set_conductance
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.reference import birth_death
from mlmix.theory.sources.conditionals import IsingModel, PottsModel, ScoreTable


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@settings(max_examples=15)
@given(st.floats(0.01, 0.99), st.floats(0.01, 0.99))
def test_two_state_conductance(rep, a, b):
    """pi = (b, a)/(a+b): Phi({0}) = a, Phi({1}) = b; the set with pi <= 1/2 is the one whose own exit
    rate is the larger, so Phi* = max(a, b)."""
    ch = chain_in(rep, two_state(a, b))
    assert float(ch.set_conductance([0])) == pytest.approx(a, rel=1e-13)
    assert float(ch.set_conductance(np.array([False, True]))) == pytest.approx(b, rel=1e-13)
    phi = ch.conductance
    if rep == "operator":  # matrix-free: no enumeration of the sets, an enclosure with its sweep set
        assert_encloses(phi, max(a, b), slack=1e-13)
        assert float(ch.set_conductance(phi.details["set"])) <= phi.upper
        return
    assert phi.value == pytest.approx(max(a, b), rel=1e-13)
    assert float(ch.set_conductance(phi.details["set"])) == pytest.approx(phi.value, rel=1e-13)


def _brute_force(P, pi):
    N = P.shape[0]
    best = np.inf
    for r in range(1, N):
        for S in itertools.combinations(range(N), r):
            mass = pi[list(S)].sum()
            if mass <= 0.5 + 1e-12:
                Sc = [y for y in range(N) if y not in S]
                best = min(best, sum(pi[x] * P[x, y] for x in S for y in Sc) / mass)
    return best


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@settings(max_examples=6)
@given(st.integers(0, 10**6), st.sampled_from([0.5, 1.0, 2.0]))
def test_exhaustive_search_matches_brute_force(rep, seed, T):
    """Exhaustive up to 20 states (dense and CSR); the operator's certified interval holds the value."""
    src = ScoreTable.random(2, 3, seed=seed, temperature=T)
    P = glauber_kernel(src).toarray()
    ch = chain_in(rep, source=src)
    phi = ch.conductance
    pi = ch.stationary.value
    if rep == "operator":
        assert_encloses(phi, _brute_force(P, pi), slack=1e-12)
        assert phi.upper == pytest.approx(set_conductance(P, np.flatnonzero(phi.details["set"])), rel=1e-12)
        return
    assert phi.value == pytest.approx(_brute_force(P, pi), rel=1e-12)
    assert pi[phi.details["set"]].sum() <= 0.5 + 1e-12 and phi.details["set_mass"] <= 0.5 + 1e-12
    assert set_conductance(P, np.flatnonzero(phi.details["set"])) == pytest.approx(phi.value, rel=1e-12)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@settings(max_examples=6)
@given(st.integers(0, 10**6))
def test_flow_balance_for_non_reversible_chains(rep, seed):
    """Q(S, S^c) = Q(S^c, S) under stationarity, reversible or not."""
    ch = chain_in(rep, source=ScoreTable.random(3, 2, seed=seed))
    pi = ch.stationary.value
    S = np.random.default_rng(seed).random(9) < 0.5
    if S.any() and not S.all():
        assert pi[S].sum() * float(ch.set_conductance(S)) == pytest.approx(
            pi[~S].sum() * float(ch.set_conductance(~S)), rel=1e-10)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@settings(max_examples=12)
@given(st.integers(0, 10**6), st.sampled_from(["scores", "ising", "potts"]), st.sampled_from([0.3, 1.0]))
def test_certified_interval_brackets_the_enumerated_value(rep, seed, kind, T):
    """For chains small enough to enumerate: the interval path's lower <= exact <= upper, both in
    [0, 1], and upper is Phi of the named set (recomputed independently). Dense and CSR enumerate Phi*;
    the operator cannot (2^N sets): its answer is that certified interval."""
    src = {"scores": lambda: ScoreTable.random(2, 4, seed=seed, temperature=T),
           "ising": lambda: IsingModel(nx.cycle_graph(4), couplings=1.0 + seed % 3, fields=0.1 * (seed % 5),
                                       beta=1 / T),
           "potts": lambda: PottsModel.random(nx.path_graph(3), 2, seed=seed, coupling_scale=2.0,
                                              temperature=T)}[kind]()
    ref = chain_in("dense", source=src)
    exact = ref.conductance
    assert exact.resolved and "exhaustive" in exact.method
    ch = chain_in(rep, source=src)
    if rep == "operator":
        interval = ch.conductance
        assert not interval.resolved and interval.reason
    else:
        assert_encloses(ch.conductance, exact.value, slack=1e-12 * exact.value)
        gap, mode = ch.facts.gap_and_mode
        interval = conductance_interval(ch.P, ch.log_stationary.value, gap, [mode])
    assert 0.0 <= interval.lower <= exact.value * (1 + 1e-12) <= interval.upper * (1 + 2e-12) <= 1.0 + 1e-12
    S = np.zeros(ref.n_states, bool)
    S[interval.details["set"]] = True
    assert interval.details["set_mass"] <= 0.5 + 1e-12 and S.sum() == interval.details["set_size"]
    pi, P = ref.stationary.value, ref.to_dense()
    direct = (pi[S, None] * P[S][:, ~S]).sum() / pi[S].sum()
    assert interval.upper == pytest.approx(direct, rel=1e-10 if rep == "operator" else 1e-12)
    gap = ref.additive_gap
    assert gap.value / 2 <= exact.value * (1 + 1e-12) <= math.sqrt(2 * gap.value)  # Cheeger


def test_metastable_double_well_names_its_bottleneck(matrix_chain_of):
    P, _ = birth_death(m=30, depth=40.0, tilt=0.5)
    ch = matrix_chain_of(P)
    phi = ch.conductance
    if ch.representation == "operator":  # a Krylov law it cannot certify: the enclosure stays honest, [0, 1]
        exact = chain_in("dense", P).conductance
        assert ch.stationary.rel_error is None and phi.lower <= exact.lower <= exact.upper <= phi.upper
        assert not ch.set_conductance(exact.details["set"]).resolved  # Phi(S) with an unbounded law
        return
    # the lower end gap / 2 is 0 on CSR, where Lanczos does not resolve the gap
    assert not phi.resolved and 0.0 <= phi.lower <= phi.upper < 1e-10
    assert phi.lower > 0 or ch.representation == "sparse"
    S = phi.details["set"]
    left = np.arange(P.shape[0]) < P.shape[0] // 2
    assert S[left].all() or S[~left].all()  # the light well, or most of it
    assert float(ch.set_conductance(S)) == pytest.approx(phi.upper, rel=1e-12)
    assert phi.lower >= ch.spectral_gap.lower / 2 * (1 - 1e-9)


def test_log_space_keeps_tiny_flows(matrix_chain_of):
    """Masses of 1e-250 and flows of 1e-300 (products that underflow in linear space)."""
    a = 1e-300
    P = two_state(a, 1e-50)  # pi = (1, 1e-250)/(1 + 1e-250)
    ch = matrix_chain_of(P)
    if ch.representation == "operator":  # a Krylov law cannot see 1e-250 next to 1: not bounded, and said
        assert ch.stationary.rel_error is None
        assert_encloses(ch.conductance, 1e-50)
        assert_encloses(ch.set_conductance([1]), 1e-50)
        return
    log_phi, log_mass = log_set_conductance(P, np.array([False, True]), ch.log_stationary.value)
    assert math.exp(log_phi) == pytest.approx(1e-50, rel=1e-13)
    assert log_mass == pytest.approx(math.log(1e-300 / (1e-300 + 1e-50)), rel=1e-13)
    assert ch.conductance.value == pytest.approx(1e-50, rel=1e-12)  # the light state's exit rate


def test_ising_at_beta_10_interval_is_in_range(chain_of):
    ch = chain_of(source=IsingModel(nx.cycle_graph(6), beta=10.0))
    phi = ch.conductance
    assert 0.0 <= phi.lower <= phi.upper <= 1.0 and phi.details["set_size"] >= 1
    gap = ch.spectral_gap
    assert phi.lower == pytest.approx(gap.lower / 2, rel=1e-15)
    S = phi.details["set"]
    # Phi(S)'s upper end (an enclosure where pi carries an error), or Cheeger's sqrt(2 gap) if smaller
    assert phi.upper <= ch.set_conductance(S).upper * (1 + 1e-12)
    # dense: the sweep of the accurate slowest mode finds the bottleneck; the CSR and matrix-free sweeps
    # follow a mode of an unresolved gap (1.4e-18): CSR names a set of conductance 0.4, the operator one of
    # conductance 1 and falls back on Cheeger (1.7e-9); both still upper bounds
    assert phi.upper < (1e-16 if ch.representation == "dense" else 0.5)


def test_bad_sets_and_sizes(matrix_chain_of):
    ch = matrix_chain_of(two_state(0.2, 0.3))
    with pytest.raises(ValueError, match="empty"):
        ch.set_conductance([])
    with pytest.raises(ValueError, match="whole"):
        ch.set_conductance([0, 1])
    with pytest.raises(ValueError, match="indices"):
        ch.set_conductance([2])
    with pytest.raises(ValueError, match="mask"):
        ch.set_conductance(np.array([True, False, True]))
    with pytest.raises(TypeError):
        ch.set_conductance([0.5])
    with pytest.raises(ValueError, match="2\\^N"):
        exact_conductance(np.full((21, 21), 1 / 21), np.full(21, -np.log(21)))


@pytest.mark.parametrize("binned", [False, True])
def test_sweep_profile_against_brute_force_in_numpy_and_torch(binned):
    """The one sweep (assembled and matrix-free chains): for every nested set {bucket < k} the cut and the
    light-side mass equal Q(S, S^c) and min(pi(S), 1 - pi(S)) summed directly, on a non-reversible
    chain; torch tensors in two chunks give the same profile as numpy in one."""
    import torch

    rng = np.random.default_rng(3)
    N = 12
    P = rng.uniform(size=(N, N)) * (rng.uniform(size=(N, N)) < 0.5) + np.eye(N)
    P /= P.sum(axis=1, keepdims=True)
    pi = Chain(P).stationary.value
    f = rng.standard_normal(N)
    bucket = np.searchsorted(np.quantile(f, [0.25, 0.5, 0.75]), f, side="right") if binned else \
        np.argsort(np.argsort(f))  # 4 binned sets, or every prefix of the order of f
    K = int(bucket.max())
    row, col = np.nonzero(P)
    cut, light = sweep_profile(K, bucket, pi, [(bucket[row], bucket[col], pi[row] * P[row, col])])
    for k in range(1, K + 1):
        S = bucket < k
        assert cut[k - 1] == pytest.approx((pi[S, None] * P[np.ix_(S, ~S)]).sum(), rel=1e-12)
        assert light[k - 1] == pytest.approx(min(pi[S].sum(), 1 - pi[S].sum()), rel=1e-12)
    t = torch.as_tensor
    half = len(row) // 2
    chunks = [(t(bucket[r]), t(bucket[c]), t(pi[r] * P[r, c])) for r, c in ((row[:half], col[:half]),
                                                                              (row[half:], col[half:]))]
    cut_t, light_t = sweep_profile(K, t(bucket), t(pi), chunks)
    np.testing.assert_allclose(cut_t.numpy(), cut, rtol=1e-13)
    np.testing.assert_allclose(light_t.numpy(), light, rtol=1e-13)
    with pytest.raises(ValueError, match="flows"):
        sweep_profile(K, bucket, pi, [])
