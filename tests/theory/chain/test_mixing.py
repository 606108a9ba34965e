"""Worst-start TV mixing: closed forms, agreement of the entry points, rounding control (a distance is
always in [0, 1]; an unresolvable t_mix is an interval that contains the truth), certified bounds."""

import math

import mpmath as mp
import networkx as nx
import numpy as np
import pytest
from chain_representations import MATRIX_REPRESENTATIONS, assert_encloses, chain_in
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.errors import UnresolvedError
from mlmix.theory.chain.shortcuts import distance_curve, mixing_time, tv_distance
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable


def two_state_t_mix(a, b, eps):
    """d(t) = max(a, b)/(a + b) |1 - a - b|^t: the smallest t with d(t) <= eps, in 350 digits (so
    that 1 - a - b is exact for rates down to 1e-300)."""
    with mp.workdps(350):
        a, b = mp.mpf(a), mp.mpf(b)
        c, lam = max(a, b) / (a + b), abs(1 - a - b)
        if c <= eps:
            return 0
        if lam == 0:  # a + b = 1: d(1) = 0
            return 1
        return int(mp.ceil(mp.log(mp.mpf(eps) / c) / mp.log(lam)))


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@settings(max_examples=30)
@given(st.floats(0.02, 0.98), st.floats(0.02, 0.98), st.sampled_from([0.25, 0.1, 0.01]))
def test_two_state_distance_and_mixing_time_closed_form(rep, a, b, eps):
    ch = chain_in(rep, two_state(a, b))
    expected = max(a, b) / (a + b) * np.abs(1 - a - b) ** np.arange(13)
    np.testing.assert_allclose(ch.distance_curve(12), expected, rtol=1e-9, atol=1e-15)
    t = ch.mixing_time(eps)
    t_closed = two_state_t_mix(a, b, eps)
    if t.resolved:
        assert t.value == t_closed
    else:  # only when d sits within rounding of eps at t_closed or t_closed - 1; matrix-free: bounds
        assert rep == "operator" or t.upper is not None
        assert_encloses(t, t_closed)


@pytest.mark.parametrize("a", [1e-4, 1e-6])
def test_large_mixing_times_by_squaring(a, matrix_chain_of):
    ch = matrix_chain_of(two_state(a, a))  # d(t) = (1 - 2a)^t / 2
    t = ch.mixing_time()
    if ch.representation == "operator":  # matrix-free: certified bounds, and d(t) bounded above
        truth = two_state_t_mix(a, a, 0.25)
        assert_encloses(t, truth)
        assert_encloses(ch.tv_distance(truth), 0.5 * (1 - 2 * a) ** truth, slack=1e-12)
        return
    assert t.value == two_state_t_mix(a, a, 0.25) and t.rel_error == 0
    assert float(ch.tv_distance(t.value)) <= 0.25 < float(ch.tv_distance(t.value - 1))


@pytest.mark.parametrize("a, width", [(1e-9, 1e-5), (1e-12, 2e-3), (1e-20, 3.0), (1e-100, 3.0)])
def test_metastable_mixing_time_is_a_certified_interval_containing_the_truth(a, width, matrix_chain_of):
    """t_mix ~ 1/(2a): beyond what renormalised squaring resolves to one step. The certified bracket
    (squaring with rounding bounds, and the relaxation-time bounds (t_rel - 1) log 2 <= t_mix <=
    t_rel log(4 / pi_min)) contains the closed form; roundoff is never reported as a value."""
    ch = matrix_chain_of(two_state(a, a))
    t = ch.mixing_time()
    truth = two_state_t_mix(a, a, 0.25)
    assert not t.resolved
    assert_encloses(t, truth)
    if ch.representation == "sparse" and a < 1e-12:  # Lanczos cannot resolve the gap 2a: no upper end
        assert t.upper is None and t.lower >= 1
        return
    if ch.representation == "operator":  # the Krylov law and gap of a metastable chain: wider, or no upper end
        assert t.lower >= 0 and (t.upper is None or t.upper >= t.lower)
        return
    assert t.upper / t.lower - 1 < width
    with pytest.raises(UnresolvedError):
        int(t)


def test_ising_at_beta_10_reports_bounds_not_null(chain_of):
    ch = chain_of(source=IsingModel(nx.cycle_graph(6), beta=10.0))
    t = ch.mixing_time()
    rel = ch.relaxation_time  # an enclosure where the gap (1.4e-18) is below the sparse resolution
    assert not t.resolved and "periodic" not in t.reason
    assert t.lower >= (rel.lower - 1) * math.log(2) * (1 - 1e-9)
    pi_min = ch.stationary.value.min()
    if rel.resolved:
        assert t.upper <= math.ceil(rel.value * math.log(4 / pi_min) * (1 + 1e-9))
    else:
        assert rel.reason and (t.upper is None or t.upper >= t.lower)


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@settings(max_examples=30)
@given(st.integers(0, 10**6), st.integers(0, 62), st.sampled_from([0.05, 1.0]))
def test_tv_distance_is_always_in_0_1_and_the_interval_contains_the_closed_form(rep, seed, k, T):
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(0.01, 0.99, size=2)
    t = 2**k
    d = chain_in(rep, two_state(a, b)).tv_distance(t)
    assert 0.0 <= d.lower <= d.upper <= 1.0
    with mp.workdps(40):
        truth = float(max(a, b) / (a + b) * mp.power(abs(1 - mp.mpf(a) - mp.mpf(b)), t))
    assert d.lower <= truth * (1 + 1e-9) and truth <= d.upper * (1 + 1e-9) + 1e-300
    P = glauber_kernel(ScoreTable.random(2, 3, seed=seed, temperature=T))
    d2 = chain_in(rep, P).tv_distance(t)
    assert 0.0 <= d2.lower <= d2.upper <= 1.0


def test_the_issue_example_tv_distance_at_2_to_the_62(matrix_chain_of):
    d = matrix_chain_of(np.array([[0.9, 0.1], [0.2, 0.8]])).tv_distance(2**62)
    assert d.lower == 0.0 and d.upper < 1e-300 and not d.resolved
    assert d.details["log10_upper"] < -1e17


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@settings(max_examples=12)
@given(st.integers(0, 10**6), st.sampled_from([0.25, 0.05]), st.sampled_from([0.3, 1.0]))
def test_curve_single_time_and_bisection_agree(rep, seed, eps, T):
    P = glauber_kernel(ScoreTable.random(2, 3, seed=seed, temperature=T))
    ch = chain_in(rep, P)
    pi = ch.stationary.value
    if rep == "operator":  # t_mix and d(t) bounded; the worst-start curve from the matrix; one start matrix-free
        t = int(chain_in("dense", P).mixing_time(eps))
        assert_encloses(ch.mixing_time(eps), t)
        d = ch.distance_curve(t + 2)
        assert_encloses(ch.tv_distance(t), d[t], slack=1e-12)
        Pt = np.linalg.matrix_power(P.toarray(), t)
        x = int(np.argmin(pi))
        assert ch.distance_curve(t, start=x)[t] == pytest.approx(0.5 * np.abs(Pt[x] - pi).sum(), abs=1e-10)
        return
    t = int(ch.mixing_time(eps))
    d = ch.distance_curve(t + 2)
    assert np.all(np.diff(d) <= 1e-12)
    assert d[t] <= eps and (t == 0 or d[t - 1] > eps)
    assert float(ch.tv_distance(t)) == pytest.approx(d[t], abs=1e-12)
    Pt = np.linalg.matrix_power(P.toarray(), t)  # worst start, computed independently
    assert d[t] == pytest.approx(max(0.5 * np.abs(Pt[x] - pi).sum() for x in range(P.shape[0])), abs=1e-12)
    assert d[0] == pytest.approx(1 - pi.min(), abs=1e-12)
    # the plain functions are thin calls into the same code (the default representation: equal to rounding)
    assert mixing_time(P, eps) == t and tv_distance(P, t) == pytest.approx(float(ch.tv_distance(t)), abs=1e-12)
    np.testing.assert_allclose(distance_curve(P, t + 2), np.asarray(d), rtol=0, atol=1e-12)
    # from one start: the same TV as row x of P^t
    x = int(np.argmin(pi))
    dx = ch.distance_curve(t, start=x)
    assert dx[t] == pytest.approx(0.5 * np.abs(Pt[x] - pi).sum(), abs=1e-12) and dx[t] <= d[t] + 1e-12


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@settings(max_examples=10)
@given(st.integers(0, 10**6), st.sampled_from([0.25, 0.05]))
def test_certified_bounds_bracket_the_exact_t_mix_of_non_reversible_chains(rep, seed, eps):
    """Fill's upper bound, the eigenvalue and conductance lower bounds, for non-reversible chains."""
    P = glauber_kernel(ScoreTable.random(2, 3, seed=seed, temperature=0.5))
    ch = chain_in(rep, P)
    t = int(chain_in("dense", P).mixing_time(eps))
    if rep == "operator":
        assert_encloses(ch.mixing_time(eps), t)
    lo, hi, how = ch.facts.mixing_bounds().t_mix_interval(eps)
    assert lo <= t <= hi and "Fill's bound (multiplicative reversibilization)" in how


@pytest.mark.parametrize("beta", [0.3, 1.0])
def test_spectral_bounds_on_t_mix(beta, chain_of):
    """(t_rel - 1) log(1/(2 eps)) <= t_mix(eps) <= t_rel log(1/(eps pi_min)) for reversible chains (the
    operator bounds t_mix: its interval lies within them)."""
    ch = chain_of(source=IsingModel(nx.cycle_graph(6), beta=beta, fields=0.2))
    pi = ch.stationary.value
    t_rel = float(ch.relaxation_time)
    for eps in (0.25, 0.01):
        t = ch.mixing_time(eps)
        lo, hi = (t.value, t.value) if t.resolved else (t.lower, t.upper)
        assert (t_rel - 1) * math.log(1 / (2 * eps)) * (1 - 1e-9) <= lo <= hi <= \
            math.ceil(t_rel * math.log(1 / (eps * pi.min())) * (1 + 1e-9))


def test_periodic_chains_say_so(matrix_chain_of):
    flip = np.array([[0.0, 1.0], [1.0, 0.0]])
    ch = matrix_chain_of(flip)
    assert ch.period == 2
    t = ch.mixing_time()
    assert not t.resolved and "periodic (period 2)" in t.reason and t.lower == math.inf
    np.testing.assert_array_equal(ch.distance_curve(3), [0.5, 0.5, 0.5, 0.5])
    assert_encloses(ch.mixing_time(0.6), 0)  # d(0) = 1/2 <= 0.6
    if ch.representation != "operator":  # matrix-free: bounds [0, ?]
        assert int(ch.mixing_time(0.6)) == 0
    cyc = np.roll(np.eye(3), 1, axis=1)
    assert matrix_chain_of(cyc).period == 3 and matrix_chain_of(two_state(0.3, 0.3)).period == 1
    assert matrix_chain_of(0.5 * (np.eye(3) + cyc)).period == 1


def test_bad_mixing_input(matrix_chain_of):
    ch = matrix_chain_of(two_state(0.2, 0.3))
    for eps in (0, 1, -0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eps"):
            ch.mixing_time(eps)
    with pytest.raises(TypeError, match="eps"):
        ch.mixing_time(True)
    with pytest.raises(ValueError):
        ch.distance_curve(-1)
    with pytest.raises(TypeError):
        ch.tv_distance(1.5)
    with pytest.raises(ValueError, match="start"):
        ch.distance_curve(3, start=5)
    with pytest.raises(ValueError, match="start"):
        ch.distance_curve(3, start=[0.5, 0.6])


def test_mixing_time_beyond_the_dense_limit_gives_bounds(representation):
    src = IsingModel(nx.cycle_graph(6), beta=0.4)
    exact = int(chain_in("dense", source=src).mixing_time())
    bounded = chain_in(representation, source=src).mixing_time(max_states=32)
    assert not bounded.resolved and bounded.lower <= exact <= bounded.upper
    assert_encloses(bounded, exact)
    if representation != "operator":  # the operator bounds t_mix at every size (max_states is ignored)
        assert "exceed the exact dense limit of 32" in bounded.reason


def test_mixing_bounds_when_the_smallest_stationary_mass_underflows(representation):
    """pi_min < 1e-308 (T = 1e-3): the bounds use log pi_min (found by the verification search). The
    operator refuses in one line: its conditionals underflow, so irreducibility is not established."""
    import networkx as nx

    from mlmix.theory.sources.conditionals import PottsModel

    src = PottsModel.random(nx.gnp_random_graph(3, 0.3, seed=5), 2, seed=5, coupling_scale=0.25).at_temperature(1e-3)
    ch = chain_in(representation, source=src)
    if representation == "operator":
        with pytest.raises(ValueError, match="underflow"):
            ch.mixing_time(0.25)
        return
    assert ch.stationary.value.min() == 0.0 and np.isfinite(ch.log_stationary.value).all()
    t = ch.mixing_time(0.25)
    assert t.lower is not None and (t.resolved or t.upper is None or t.lower <= t.upper)
