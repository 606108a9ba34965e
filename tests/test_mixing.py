"""Worst-start TV mixing: closed forms, agreement of the three entry points, spectral bounds."""

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_spectral import _double_well, two_state

from mlmix.theory.conditionals import IsingModel, ScoreTable
from mlmix.theory.kernels import glauber_kernel
from mlmix.theory.mixing import distance_curve, mixing_time, tv_distance
from mlmix.theory.spectral import absolute_spectral_gap, stationary


@settings(max_examples=30)
@given(st.floats(0.02, 0.98), st.floats(0.02, 0.98), st.sampled_from([0.25, 0.1, 0.01]))
def test_two_state_distance_and_mixing_time_closed_form(a, b, eps):
    """d(t) = max(a, b)/(a + b) |1 - a - b|^t for [[1-a, a], [b, 1-b]]."""
    P = two_state(a, b)
    d = distance_curve(P, 12)
    expected = max(a, b) / (a + b) * np.abs(1 - a - b) ** np.arange(13)
    np.testing.assert_allclose(d, expected, rtol=1e-9, atol=1e-15)
    t_closed = next(t for t in range(10**6) if max(a, b) / (a + b) * abs(1 - a - b) ** t <= eps)
    # skip values within rounding of the threshold
    if all(abs(max(a, b) / (a + b) * abs(1 - a - b) ** t - eps) > 1e-9 for t in (t_closed - 1, t_closed)):
        assert mixing_time(P, eps) == t_closed


def test_large_mixing_time_by_squaring():
    a = 1e-4
    P = two_state(a, a)  # d(t) = (1 - 2a)^t / 2
    expected = math.ceil(math.log(0.5) / math.log(1 - 2 * a))
    assert mixing_time(P) == expected
    assert tv_distance(P, expected) <= 0.25 < tv_distance(P, expected - 1)


@settings(max_examples=12)
@given(st.integers(0, 10**6), st.sampled_from([0.25, 0.05]), st.sampled_from([0.3, 1.0]))
def test_curve_single_time_and_bisection_agree(seed, eps, T):
    P = glauber_kernel(ScoreTable.random(2, 3, seed=seed, temperature=T))
    pi = stationary(P).pi
    t = mixing_time(P, eps, pi)
    d = distance_curve(P, t + 2, pi)
    assert np.all(np.diff(d) <= 1e-12)  # non-increasing
    assert d[t] <= eps and (t == 0 or d[t - 1] > eps)
    assert tv_distance(P, t, pi) == pytest.approx(d[t], abs=1e-12)
    # worst start: the maximum over starts of TV(P^t(x,.), pi), computed independently
    Pt = np.linalg.matrix_power(P.toarray(), t)
    assert d[t] == pytest.approx(max(0.5 * np.abs(Pt[x] - pi).sum() for x in range(P.shape[0])), abs=1e-12)
    assert d[0] == pytest.approx(1 - pi.min(), abs=1e-12)


@pytest.mark.parametrize("beta", [0.3, 1.0])
def test_spectral_bounds_on_t_mix(beta):
    """(t_rel - 1) log(1/(2 eps)) <= t_mix(eps) <= t_rel log(1/(eps pi_min)) for reversible chains."""
    P = glauber_kernel(IsingModel(nx.cycle_graph(6), beta=beta, fields=0.2))
    pi = stationary(P).pi
    t_rel = 1 / absolute_spectral_gap(P, pi)
    for eps in (0.25, 0.01):
        t = mixing_time(P, eps, pi)
        assert (t_rel - 1) * math.log(1 / (2 * eps)) <= t <= t_rel * math.log(1 / (eps * pi.min()))


def test_metastable_mixing_time_is_huge_but_cheap():
    P, pi = _double_well()
    t = mixing_time(P, pi=pi)
    t_rel = 1 / absolute_spectral_gap(P, pi)
    assert 1e5 < t and (t_rel - 1) * math.log(2) <= t <= t_rel * math.log(4 / pi.min())
    d = tv_distance(P, t, pi)
    assert d <= 0.25 < tv_distance(P, t - 1, pi)


def test_periodic_chain_and_caps_are_refused():
    flip = np.array([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="periodic"):
        mixing_time(flip)
    assert distance_curve(flip, 3).tolist() == [0.5, 0.5, 0.5, 0.5]
    P = two_state(0.01, 0.01)
    t = mixing_time(P)
    assert mixing_time(P, t_max=t) == t
    with pytest.raises(ValueError, match="t_max"):
        mixing_time(P, t_max=t - 1)
    with pytest.raises(ValueError, match="t_max"):
        mixing_time(P, t_max=1)
    assert mixing_time(P, eps=0.6) == 0  # d(0) = 1/2


def test_bad_mixing_input():
    P = two_state(0.2, 0.3)
    for eps in (0, 1, -0.1, float("nan")):
        with pytest.raises(ValueError, match="eps"):
            mixing_time(P, eps)
    with pytest.raises(TypeError, match="eps"):
        mixing_time(P, True)
    with pytest.raises(ValueError):
        distance_curve(P, -1)
    with pytest.raises(TypeError):
        tv_distance(P, 1.5)
    with pytest.raises(ValueError, match="limit"):
        mixing_time(np.full((5, 5), 0.2), max_states=4)
    with pytest.raises(ValueError, match="square"):
        mixing_time(np.ones((2, 3)) / 3)
