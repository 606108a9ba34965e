"""mu P^t and expected transition counts: two-state closed forms up to t = 10^6, exact Fractions on small
chains, 40-digit mpmath, every representation and both routes (squaring and single applications), metastable
chains; Hypothesis properties (mu P^t sums to 1, counts sum to n, counts' row sums the occupation); bad input
refused with one line."""

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from chain_representations import REPRESENTATIONS, chain_in
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st
from spectral_references import mp_law, random_chain, rotating_cycle

from mlmix.theory.chain.propagation import matrix_stepper, propagate, transition_counts


def exact_counts(P_float, mu, n):
    """E[C(a, b)] over the rationals (holding 1 - the off-diagonal row sum)."""
    N = P_float.shape[0]
    P = [[Fraction(float(P_float[i, j])) if i != j else Fraction(0) for j in range(N)] for i in range(N)]
    for i in range(N):
        P[i][i] = 1 - sum(P[i])
    law = [Fraction(float(x)) for x in mu]
    occ = [Fraction(0)] * N
    for _ in range(n):
        occ = [o + x for o, x in zip(occ, law)]
        law = [sum(law[i] * P[i][j] for i in range(N)) for j in range(N)]
    return np.array([[float(occ[a] * P[a][b]) for b in range(N)] for a in range(N)])


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("a, b", [(0.3, 0.1), (1e-12, 3e-13), (1e-300, 2e-300)])
def test_two_state_law_closed_form(rep, a, b):
    """mu P^t = pi + (mu_0 - pi_0) (1 - a - b)^t (1, -1) from state 0, within the stated L1 bound."""
    chain = chain_in(rep, two_state(a, b))
    times = [0, 1, 13, 1000, 10**6]
    out = chain.propagate(0, times)
    p0 = b / (a + b)
    for row, t, bound in zip(out.value, times, out.details["error_bounds"]):
        lam_t = np.exp(t * np.log1p(-(a + b)))
        exact = np.array([p0 + (1 - p0) * lam_t, (1 - p0) * (1 - lam_t)])
        assert np.abs(row - exact).sum() <= bound + 1e-300
    assert out.abs_error < 1e-8


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_law_against_mpmath(rep):
    """A non-reversible and a metastable reversible chain, from a random law, against 40 digits."""
    for P in (rotating_cycle(5, 0.3), random_chain(4, 6, True, 1e-200)):
        chain = chain_in(rep, P)
        mu = np.random.default_rng(1).random(P.shape[0])
        mu /= mu.sum()
        times = [0, 2, 77, 10**5]
        out = chain.propagate(mu, times)
        for row, t, bound in zip(out.value, times, out.details["error_bounds"]):
            exact = np.array([float(x) for x in mp_law(P, mu, t)])
            assert np.abs(row - exact).sum() <= bound


@pytest.mark.parametrize("t", [0, 1, 5, 1000, 10**5])
def test_squaring_and_single_steps_agree(t):
    """The two routes (dense squaring, CSR single applications) on the same chain, within the sum of their bounds."""
    P = random_chain(7, 5, False)
    mu = np.full(5, 0.2)
    squaring, steps = matrix_stepper(P, t), matrix_stepper(sp.csr_array(P), 0)
    assert squaring.squares is not None and steps.squares is None
    a, b = propagate(squaring, mu, np.array([t])), propagate(steps, mu, np.array([t]))
    assert np.abs(a.value - b.value).sum() <= a.abs_error + b.abs_error
    ca, cb = transition_counts(squaring, P, mu, t), transition_counts(steps, P, mu, t)
    assert np.abs((ca.value - cb.value).toarray()).sum() <= ca.abs_error + cb.abs_error


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("n", [0, 1, 2, 9])
def test_counts_against_exact_rationals(rep, n):
    P = random_chain(3, 4, False)
    mu = np.array([0.5, 0.25, 0.25, 0.0])
    out = chain_in(rep, P).transition_counts(mu, n)
    exact = exact_counts(P, mu, n)
    assert np.abs(out.value.toarray() - exact).sum() <= out.abs_error + 1e-15


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("n", [1, 1000, 10**6])
def test_counts_two_state_closed_form(rep, n):
    """From state 0: occupation of 0 = n pi_0 + pi_1 (1 - lambda^n) / (1 - lambda), E[C(0, 1)] = a times it."""
    a, b = 0.3, 0.1
    out = chain_in(rep, two_state(a, b)).transition_counts(0, n)
    p0, lam = b / (a + b), 1 - a - b
    o0 = n * p0 + (1 - p0) * (1 - lam**n) / (1 - lam)
    o1 = n - o0
    exact = np.array([[o0 * (1 - a), o0 * a], [o1 * b, o1 * (1 - b)]])
    assert np.abs(out.value.toarray() - exact).sum() <= out.abs_error
    assert out.abs_error <= 1e-6 * n


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 6), st.integers(0, 3000), st.booleans())
def test_properties(seed, N, n, sparse):
    """mu P^t sums to 1 and counts sum to n, each within the stated bound; the counts' row sums are the
    occupation, whose first term is mu."""
    P = random_chain(seed, N, seed % 2 == 0) if N > 1 else np.ones((1, 1))
    chain = chain_in("csr" if sparse else "dense", P)
    mu = np.random.default_rng(seed).random(N)
    mu /= mu.sum()
    law = chain.propagate(mu, n)
    assert abs(law.value.sum() - 1) <= law.abs_error + N * 1e-16
    assert np.all(law.value >= 0)
    counts = chain.transition_counts(mu, n)
    assert abs(counts.value.sum() - n) <= counts.abs_error + n * N * 1e-15
    np.testing.assert_allclose(np.asarray(counts.value.sum(axis=1)).ravel(), counts.details["occupation"],
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda c: c.propagate([0.5, 0.6], 3), "sum"),
    (lambda c: c.propagate([0.5, np.nan], 3), "NaN|finite"),
    (lambda c: c.propagate(0, -1), ">= 0"),
    (lambda c: c.propagate(5, 1), "start state"),
    (lambda c: c.propagate(0, [1.5]), "int"),
    (lambda c: c.transition_counts(0, -2), ">= 0"),
    (lambda c: c.transition_counts([1.0], 2), "over the 2 states"),
])
def test_bad_input_one_line(call, message):
    chain = chain_in("dense", two_state(0.3, 0.1))
    with pytest.raises((ValueError, TypeError), match=message) as err:
        call(chain)
    assert "\n" not in str(err.value)


def _sparse_walk(n: int, seed: int) -> sp.csr_array:
    """A lazy non-reversible walk on n states: a step forward on a cycle plus one random jump per state."""
    rng = np.random.default_rng(seed)
    i = np.arange(n)
    W = sp.csr_array((np.r_[np.full(n, 0.3), rng.uniform(0.05, 0.2, n)], (np.r_[i, i], np.r_[(i + 1) % n,
                                                                                        rng.integers(0, n, n)])),
                     shape=(n, n))
    W.setdiag(0)
    W.eliminate_zeros()
    return sp.csr_array(W + sp.diags_array(1 - W.sum(axis=1)))


def test_matrix_free_applications_agree_with_csr():
    """1,500 states: t applications of the matrix-free operator (not its matrix: squaring costs more) against the
    CSR chain's, within the sum of the bounds; correlations too."""
    P = _sparse_walk(1500, 2)
    op, csr = chain_in("operator", P), chain_in("csr", P)
    mu = np.zeros(1500)
    mu[:10] = 0.1
    a, b = op.propagate(mu, [0, 3, 40]), csr.propagate(mu, [0, 3, 40])
    assert "matrix-free" in a.method and "CSR" in b.method
    assert np.all(np.abs(a.value - b.value).sum(axis=1) <= a.details["error_bounds"] + b.details["error_bounds"])
    f = np.sin(np.arange(1500.0))
    ca, cb = op.correlation(f, f, [0, 25], method="powers"), csr.correlation(f, f, [0, 25], method="powers")
    assert np.all(np.abs(ca.value - cb.value) <= ca.details["error_bounds"] + cb.details["error_bounds"])


def test_too_many_applications_refused_in_one_line():
    chain = chain_in("csr", _sparse_walk(5000, 1))
    with pytest.raises(ValueError, match="applications of P") as err:
        chain.propagate(0, 10**8)
    assert "\n" not in str(err.value)
