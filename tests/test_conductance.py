"""Conductance: closed forms, exhaustive search vs brute force, Cheeger/sweep interval containment."""

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_spectral import _double_well, two_state

from mlmix.theory import matrices
from mlmix.theory.conditionals import IsingModel, PottsModel, ScoreTable
from mlmix.theory.conductance import (
    conductance_bounds,
    exact_conductance,
    set_conductance,
    sweep_cut,
)
from mlmix.theory.kernels import glauber_kernel
from mlmix.theory.spectral import additive_gap, stationary


@settings(max_examples=25)
@given(st.floats(0.01, 0.99), st.floats(0.01, 0.99))
def test_two_state_conductance(a, b):
    """pi = (b, a)/(a+b): Phi({0}) = a, Phi({1}) = b, and the set with pi <= 1/2 is the one
    whose own exit rate is the larger one, so Phi* = max(a, b)."""
    P = two_state(a, b)
    assert set_conductance(P, [0]) == pytest.approx(a, rel=1e-12)
    assert set_conductance(P, np.array([False, True])) == pytest.approx(b, rel=1e-12)
    phi, mask = exact_conductance(P)
    assert phi == pytest.approx(max(a, b), rel=1e-12)
    assert set_conductance(P, mask) == pytest.approx(phi, rel=1e-12)


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


@settings(max_examples=8)
@given(st.integers(0, 10**6), st.sampled_from([0.5, 1.0, 2.0]))
def test_exhaustive_search_matches_brute_force(seed, T):
    P = glauber_kernel(ScoreTable.random(2, 3, seed=seed, temperature=T)).toarray()
    pi = stationary(P).pi
    phi, mask = exact_conductance(P, pi)
    assert phi == pytest.approx(_brute_force(P, pi), rel=1e-12)
    assert pi[mask].sum() <= 0.5 + 1e-12
    assert set_conductance(P, np.flatnonzero(mask), pi) == pytest.approx(phi, rel=1e-12)


@settings(max_examples=10)
@given(st.integers(0, 10**6))
def test_flow_balance_for_non_reversible_chains(seed):
    """Q(S, S^c) = Q(S^c, S) under stationarity, reversible or not."""
    P = glauber_kernel(ScoreTable.random(3, 2, seed=seed))
    pi = stationary(P).pi
    S = np.random.default_rng(seed).random(9) < 0.5
    if S.any() and not S.all():
        assert pi[S].sum() * set_conductance(P, S, pi) == pytest.approx(
            pi[~S].sum() * set_conductance(P, ~S, pi), rel=1e-10)


@settings(max_examples=10)
@given(st.integers(0, 10**6), st.sampled_from(["scores", "ising"]))
def test_exact_value_lies_in_the_cheeger_sweep_interval(seed, kind):
    src = (ScoreTable.random(2, 4, seed=seed, temperature=0.7) if kind == "scores"
           else IsingModel(nx.cycle_graph(4), couplings=1.0 + seed % 3, fields=0.1 * (seed % 5), beta=1.0))
    P = glauber_kernel(src)
    pi = stationary(P).pi
    exact = conductance_bounds(P, pi)
    assert exact.exact == exact.lower == exact.upper
    approx = conductance_bounds(P, pi, max_exact_states=0)
    assert approx.exact is None
    assert approx.lower <= exact.exact * (1 + 1e-10)
    assert exact.exact <= approx.upper * (1 + 1e-10)
    gap = additive_gap(P, pi)
    assert gap / 2 <= exact.exact * (1 + 1e-10) and exact.exact <= np.sqrt(2 * gap) + 1e-12
    assert pi[approx.set].sum() <= 0.5 + 1e-12
    if "sweep" in approx.method.split("upper")[1]:
        assert set_conductance(P, approx.set, pi) == pytest.approx(approx.upper, rel=1e-10)


def test_sweep_finds_the_bottleneck_of_a_double_well(monkeypatch):
    P, pi = _double_well()
    half = np.arange(P.shape[0]) < P.shape[0] // 2
    value, side = sweep_cut(P, np.arange(P.shape[0], dtype=float), pi)
    # the best prefix of the natural order is the left well (or its mirror image)
    assert value == pytest.approx(set_conductance(P, side, pi), rel=1e-10)
    assert value <= set_conductance(P, half, pi) * (1 + 1e-10)
    monkeypatch.setattr(matrices, "DENSE_LIMIT", 8)  # sparse eigensolver path
    b = conductance_bounds(P, pi)
    assert b.lower <= value * (1 + 1e-9) and b.upper == pytest.approx(value, rel=1e-6)


def test_sparse_bounds_contain_the_exact_conductance(monkeypatch):
    P = glauber_kernel(PottsModel.random(nx.path_graph(3), 2, seed=1, coupling_scale=2.0))
    exact, _ = exact_conductance(P)
    monkeypatch.setattr(matrices, "DENSE_LIMIT", 4)
    b = conductance_bounds(P, max_exact_states=0)
    assert b.lower <= exact <= b.upper * (1 + 1e-10)


def test_bad_sets_and_sizes():
    P = two_state(0.2, 0.3)
    with pytest.raises(ValueError, match="empty"):
        set_conductance(P, [])
    with pytest.raises(ValueError, match="empty"):
        set_conductance(P, np.zeros(2, dtype=bool))
    with pytest.raises(ValueError, match="whole"):
        set_conductance(P, [0, 1])
    with pytest.raises(ValueError, match="indices"):
        set_conductance(P, [2])
    with pytest.raises(ValueError, match="mask"):
        set_conductance(P, np.array([True, False, True]))
    with pytest.raises(TypeError):
        set_conductance(P, [0.5])
    with pytest.raises(ValueError, match="2\\^N"):
        exact_conductance(np.full((21, 21), 1 / 21))
    with pytest.raises(ValueError, match="f must"):
        sweep_cut(P, np.array([1.0, np.nan]))
