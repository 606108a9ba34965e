"""Continuous-time generators through uniformisation (:mod:`mlmix.theory.chain.generators`): two-state closed
forms (pi, rates, relaxation time 1 / (a + b)), a birth-death generator against mpmath at 40 digits (pi, the
mean time to the top, the spectral gap), Hypothesis: pi and committors do not depend on the uniformisation
rate q >= max |Q_ii|, times scale as 1 / q; what does not carry over is refused by name; bad input one line."""

import math

import mpmath as mp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.chain.generators import NOT_CARRIED, GeneratorChain


def _within(r, exact, slack=0.0):
    assert r.resolved, r
    assert abs(r.value - exact) <= r.rel_error * abs(r.value) + slack, (r, exact)


def _vector_within(v, exact):
    assert v.rel_error is not None, v
    np.testing.assert_array_less(np.abs(v.value - exact), v.rel_error * np.abs(v.value) + 1e-300)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("rate", [None, 7.3])
@pytest.mark.parametrize("a, b", [(0.3, 1.7), (1e-9, 2.5), (4.0, 4.0), (1e-200, 0.5), (1e-300, 3e-300)])
def test_two_state_generator_closed_forms(a, b, rate, sparse):
    Q = np.array([[-a, a], [b, -b]])
    g = GeneratorChain(sp.csr_array(Q) if sparse else Q, rate)
    if rate is None:
        assert g.rate >= b and math.frexp(g.rate)[0] == 0.5 and g.charge == 0  # a power of two: Q / q exact
    _vector_within(g.stationary, np.array([b, a]) / (a + b))
    _within(g.spectral_gap(), a + b)
    _within(g.relaxation_time(), 1 / (a + b))
    _within(g.kemeny_constant(), 1 / (a + b))
    _vector_within(g.hitting_time([1]), np.array([1 / a, 0.0]))
    tp, fig = g.transition_paths([0], [1])
    _within(fig["rate"], a)  # k_AB = F / pi(A) = pi_0 a / pi_0
    _within(fig["rate_back"], b)
    _within(fig["mfpt"], 1 / a)
    _within(fig["total_flux"], a * (b / (a + b)))  # a b underflows at a, b ~ 1e-300
    _within(g.conductance(), max(a, b))  # the set of mass <= 1/2 is the lighter state; Phi = its exit rate
    assert "divided by q" in fig["mfpt"].method and "times q" in fig["rate"].method


def birth_death(n, seed):
    rng = np.random.default_rng(seed)
    up, down = rng.uniform(0.2, 3.0, n - 1), rng.uniform(0.2, 3.0, n - 1)
    Q = np.diag(up, 1) + np.diag(down, -1)
    return Q - np.diag(Q.sum(axis=1)), up, down


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_birth_death_generator_against_mpmath(seed):
    n = 7
    Q, up, down = birth_death(n, seed)
    mp.mp.dps = 40
    w = [mp.mpf(1)]
    for k in range(n - 1):
        w.append(w[-1] * mp.mpf(float(up[k])) / mp.mpf(float(down[k])))
    pi = [x / mp.fsum(w) for x in w]
    # E_0 T_{n-1} = sum_k (sum_{j <= k} pi_j) / (pi_k up_k)
    top = mp.fsum(mp.fsum(pi[:k + 1]) / (pi[k] * mp.mpf(float(up[k]))) for k in range(n - 1))
    # the gap of the symmetrised generator D^1/2 Q D^-1/2
    S = mp.matrix(n, n)
    for i in range(n):
        for j in range(n):
            S[i, j] = mp.sqrt(pi[i]) * mp.mpf(float(Q[i, j])) / mp.sqrt(pi[j])
    S = (S + S.T) / 2
    eig = sorted(mp.eigsy(S, eigvals_only=True), reverse=True)
    for rate in (None, 3.3 * float(np.abs(np.diag(Q)).max())):
        g = GeneratorChain(Q, rate)
        _vector_within(g.stationary, np.array([float(x) for x in pi]))
        target = np.zeros(n, dtype=bool)
        target[-1] = True
        h = g.hitting_time(target)
        assert abs(h.value[0] - float(top)) <= h.rel_error * h.value[0]
        _within(g.spectral_gap(), float(-eig[1]))


@st.composite
def generators(draw):
    n = draw(st.integers(2, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    R = rng.random((n, n)) * (rng.random((n, n)) < 0.5) * 10.0 ** rng.uniform(-3, 3, (n, 1))
    R += np.roll(np.eye(n), 1, axis=1) * rng.uniform(0.1, 1.0)  # a cycle: irreducible
    np.fill_diagonal(R, 0.0)
    return R - np.diag(R.sum(axis=1)), draw(st.floats(1.0, 50.0))


@settings(max_examples=60, deadline=None)
@given(generators())
def test_pi_and_committors_do_not_depend_on_the_uniformisation_rate(case):
    Q, stretch = case
    exits = -np.diag(Q)
    base, other = GeneratorChain(Q), GeneratorChain(Q, float(exits.max()) * stretch)
    n = Q.shape[0]
    A, B = [0], [n - 1]
    for f in (lambda g: g.stationary, lambda g: g.committor(A, B), lambda g: g.hitting_time(B)):
        u, v = f(base), f(other)
        err = (u.rel_error + v.rel_error) * np.abs(u.value) + 1e-300
        np.testing.assert_array_less(np.abs(u.value - v.value), err)
    # the uniformised chains differ: P's own times are q times the continuous-time ones
    steps = other.chain.hitting_time(B).value
    np.testing.assert_allclose(steps / other.rate, base.hitting_time(B).value, rtol=1e-9)


def test_what_does_not_carry_over_is_refused_by_name():
    g = GeneratorChain(np.array([[-1.0, 1.0], [2.0, -2.0]]))
    for name in NOT_CARRIED:
        with pytest.raises(ValueError, match=name) as err:
            getattr(g, name)
        assert "\n" not in str(err.value)
    with pytest.raises(AttributeError):
        g.no_such_quantity


@pytest.mark.parametrize("Q, message", [
    ([[-1.0, 2.0], [1.0, -1.0]], r"rows must sum to 0 .*; row 0"),
    ([[1.0, -1.0], [1.0, -1.0]], r"off-diagonal rates must be >= 0; Q\[0, 1\]"),
    ([[-1.0, 1.0, 0.0], [1.0, -1.0, 0.0]], "square"),
    ([[-np.inf, np.inf], [1.0, -1.0]], "NaN or infinite"),
    ([[0.0, 0.0], [0.0, 0.0]], "no transitions"),
])
def test_bad_generators_are_one_line(Q, message):
    with pytest.raises(ValueError, match=message) as err:
        GeneratorChain(np.array(Q))
    assert "\n" not in str(err.value)


def test_a_rate_below_the_largest_exit_rate_is_refused():
    with pytest.raises(ValueError, match="rate q") as err:
        GeneratorChain(np.array([[-1.0, 1.0], [2.0, -2.0]]), rate=1.5)
    assert "\n" not in str(err.value)
    with pytest.raises(TypeError):
        GeneratorChain("not a matrix")
