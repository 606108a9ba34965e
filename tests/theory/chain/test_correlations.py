"""Time correlations, relaxation and fingerprints: closed forms (two-state chains: C(t) = E f E g + var (1-a-b)^t;
rotating cycles; birth-death chains), 40-digit mpmath references on every representation and both routes
(spectral and powers) up to t = 10^6, metastable chains (gaps 1e-12 .. 1e-300) where the answer is enclosed or
refused by name, Hypothesis identities (C(0) = E_pi[fg], C(t) -> E f E g, spectral = powers, the fingerprint's
sum = C(t), relaxation from pi constant), bad input refused with one line."""

import math
import subprocess
import sys

import mpmath as mp
import numpy as np
import pytest
from chain_representations import REPRESENTATIONS, chain_in
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st
from spectral_references import birth_death, mp_correlation, random_chain, rotating_cycle

TIMES = [0, 1, 7, 1000, 10**6]


def routes(chain):
    """The routes that apply to the chain: powers always, spectral where it is not refused."""
    try:
        chain.correlation(np.ones(chain.n_states), t=0, method="spectral")
        return ("powers", "spectral")
    except ValueError as err:
        assert "\n" not in str(err) and "spectral route does not apply" in str(err)
        return ("powers",)


def assert_within(out, exact):
    """Every value of a time-indexed result within its stated bound of the exact one."""
    values = np.atleast_1d(out.value if out.value is not None else np.nan)
    bounds = np.atleast_1d(out.details["error_bounds"]) if "error_bounds" in out.details else None
    if bounds is None:  # a single-time Result: resolved within rel_error, else its interval holds the answer
        if out.resolved:
            assert abs(out.value - exact) <= out.rel_error * abs(out.value) + 1e-300, (out, exact)
        else:
            assert out.lower <= exact <= out.upper, (out, exact)
        return
    exact = np.asarray(exact, dtype=np.float64)
    assert np.all(np.abs(values - exact) <= bounds * (1 + 1e-12) + 1e-300), (values - exact, bounds)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("a, b", [(0.3, 0.1), (1e-6, 4e-6), (1e-12, 3e-13), (1e-300, 2e-300)])
def test_two_state_closed_form(rep, a, b):
    """f = g = 1_0: C(t) = pi_0^2 + pi_0 pi_1 (1 - a - b)^t, with the 40-digit power; both routes."""
    chain = chain_in(rep, two_state(a, b))
    f = np.array([1.0, 0.0])
    p0 = mp.mpf(b) / (mp.mpf(a) + mp.mpf(b))
    exact = [float(p0**2 + p0 * (1 - p0) * (1 - mp.mpf(a) - mp.mpf(b)) ** t) for t in TIMES]
    for method in routes(chain):
        out = chain.correlation(f, f, TIMES, method=method)
        assert_within(out, exact)
        if rep != "operator" or a > 1e-9:  # a matrix-free law of a metastable chain has no entrywise bound
            assert np.all(out.details["error_bounds"] < 1e-8), (method, out.details["error_bounds"])


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("n, p", [(5, 0.3), (6, 0.05)])
def test_rotating_cycle(rep, n, p):
    """Non-reversible: the spectral route is refused by name, the powers agree with 40 digits; C(t) tends to
    E f E g (pi uniform)."""
    chain = chain_in(rep, rotating_cycle(n, p))
    assert routes(chain) == ("powers",)
    rng = np.random.default_rng(n)
    f, g = rng.normal(size=n), rng.normal(size=n)
    out = chain.correlation(f, g, TIMES)
    assert_within(out, [float(mp_correlation(rotating_cycle(n, p), f, g, t)) for t in TIMES])
    assert out.value[-1] == pytest.approx(f.mean() * g.mean(), abs=1e-9)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("barrier", [0.2, 1e-12, 1e-200])
def test_birth_death_against_mpmath(rep, barrier):
    """A birth-death chain with a barrier in the middle: both routes within their bounds of 40 digits."""
    P = birth_death([0.3, 0.25, barrier, 0.4, 0.2], [0.1, 0.35, 0.3, 0.15, 0.45])
    chain = chain_in(rep, P)
    f = np.array([2.0, -1.0, 0.5, 3.0, 0.0, -2.0])
    g = np.arange(6.0)
    exact = [float(mp_correlation(P, f, g, t)) for t in TIMES]
    for method in routes(chain):
        assert_within(chain.correlation(f, g, TIMES, method=method), exact)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_rows_summing_short_of_one(rep):
    """Rows summing to 1 - 1e-10 (within the tolerance): the chain is its off-diagonal entries, and the spectral
    route (computed from the stored diagonal) is charged the difference; both routes hold 40 digits."""
    P = two_state(0.3, 0.1) - np.eye(2) * 1e-10
    chain = chain_in(rep, P)
    f = np.array([1.0, -2.0])
    exact = [float(mp_correlation(P, f, f, t)) for t in TIMES]
    for method in routes(chain):
        assert_within(chain.correlation(f, f, TIMES, method=method), exact)


@pytest.mark.parametrize("tiny", [1e-12, 1e-100, 1e-300])
def test_metastable_spectral_stays_honest(tiny):
    """Random reversible 6-state chains with barriers of 1e-12 .. 1e-300: the spectral route's normwise bound
    holds against 40 digits at every time, and the single-time answer is a value only when resolved."""
    P = random_chain(5, 6, True, tiny)
    chain = chain_in("dense", P)
    f = np.array([1.0, 0, 0, 0, 0, 0])
    g = np.array([0, 0, 0, 1.0, 0, 0])
    exact = [float(mp_correlation(P, f, g, t)) for t in TIMES]
    for method in routes(chain):
        assert_within(chain.correlation(f, g, TIMES, method=method), exact)
        single = chain.correlation(f, g, 10**6, method=method)
        assert_within(single, exact[-1])


def test_spectral_refused_by_name_where_it_cannot_bound():
    """The matrix-free law of a 1e-300 chain has no entrywise bound: spectral refused with the reason, powers
    give an interval holding the answer."""
    chain = chain_in("operator", two_state(1e-300, 2e-300))
    with pytest.raises(ValueError, match="no entrywise error bound"):
        chain.correlation([1.0, 0.0], t=5, method="spectral")
    out = chain.correlation([1.0, 0.0], t=5)
    assert not out.resolved and out.reason and out.lower <= 4 / 9 <= out.upper


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_relaxation(rep):
    """E_mu[f(X_t)] of the two-state chain: pi_0 + (mu_0 - pi_0) (1 - a - b)^t; from pi it is E_pi f at every t."""
    a, b = 0.2, 0.05
    chain = chain_in(rep, two_state(a, b))
    f = np.array([1.0, 0.0])
    exact = [b / (a + b) + (1 - b / (a + b)) * (1 - a - b) ** t for t in TIMES]
    for method in routes(chain):
        assert_within(chain.relaxation(0, f, TIMES, method=method), exact)
    pi = chain.stationary.value
    assert_within(chain.relaxation(pi, f, TIMES), [pi[0]] * len(TIMES))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 7), st.booleans())
def test_identities(seed, n, reversible):
    """C(0) = E_pi[fg]; C(10^6) = E f E g within the bound plus |lambda_*|^t ||f|| ||g||; the two routes agree
    within the sum of their bounds; the fingerprint's sum_i lambda_i^t a_i = C(t)."""
    P = random_chain(seed, n, reversible)
    chain = chain_in("dense", P)
    rng = np.random.default_rng(seed)
    f, g = rng.normal(size=n), rng.normal(size=n)
    pi = chain.stationary.value
    c = chain.correlation(f, g, [0, 3, 10**6])
    assert abs(c.value[0] - pi @ (f * g)) <= c.details["error_bounds"][0] + 1e-15
    lam = np.sort(np.abs(np.linalg.eigvals(P)))[-2]
    tail = lam**1e6 * np.abs(f).max() * np.abs(g).max()
    assert abs(c.value[2] - (pi @ f) * (pi @ g)) <= c.details["error_bounds"][2] + tail + 1e-12
    if reversible:
        s = chain.correlation(f, g, [0, 3, 10**6], method="spectral")
        p = chain.correlation(f, g, [0, 3, 10**6], method="powers")
        assert np.all(np.abs(s.value - p.value) <= s.details["error_bounds"] + p.details["error_bounds"])
        fp = chain.fingerprint(f, g)
        lam_all = chain.eigenvectors().values.value
        assert fp.amplitudes.value[0] == pytest.approx((pi @ f) * (pi @ g), abs=1e-12)
        assert np.sum(fp.amplitudes.value * lam_all**3) == pytest.approx(c.value[1], abs=1e-10)
        assert fp.amplitudes.abs_error is None or fp.amplitudes.abs_error < 1e-6


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_fingerprint_two_state(rep):
    """Timescale -1 / log(1 - a - b) with amplitude var_pi(f), and E f^2 for lambda_1 (timescale inf)."""
    a, b = 0.3, 0.1
    fp = chain_in(rep, two_state(a, b)).fingerprint([1.0, 0.0])
    ts, amp = fp.timescales, fp.amplitudes
    assert ts.value[0] == math.inf
    exact_t = -1 / math.log(1 - a - b)
    assert ts.details["lower"][1] <= exact_t <= ts.details["upper"][1]
    p0 = b / (a + b)
    exact = np.array([p0**2, p0 * (1 - p0)])
    assert np.all(np.abs(amp.value - exact) <= amp.details["error_bounds"] + 1e-15)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("a", [1e-12, 1e-100, 1e-300])
def test_fingerprint_metastable_timescale_from_the_gap(rep, a):
    """Gap a + b down to 3e-300: t_2 = -1 / log(1 - a - b) to relative accuracy on a dense chain (eigh alone gives
    [t, inf]); the CSR and matrix-free gaps (Lanczos: absolute accuracy) give an enclosure that holds it."""
    fp = chain_in(rep, two_state(a, 2 * a)).fingerprint([1.0, 0.0])
    exact = float(-1 / mp.log1p(-3 * mp.mpf(a)))
    t2 = fp.timescales
    if t2.rel_error is None:
        assert rep != "dense" and t2.details["lower"][1] <= exact <= t2.details["upper"][1]
    else:
        assert abs(t2.value[1] - exact) <= t2.rel_error * exact


def test_quantity_modules_do_not_import_the_chain():
    """Importing the new quantity modules alone leaves markov_chain unimported (type hints only)."""
    code = ("import sys, importlib\n"
            "for m in ('correlations', 'eigenvectors', 'propagation'):\n"
            "    importlib.import_module('mlmix.theory.chain.' + m)\n"
            "print('mlmix.theory.chain.markov_chain' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_fingerprint_non_reversible_says_it_is_not_certified():
    fp = chain_in("dense", rotating_cycle(5, 0.3)).fingerprint(np.arange(5.0))
    assert fp.amplitudes.abs_error is None and "not certified" in fp.amplitudes.method
    assert fp.timescales.value[0] == math.inf and np.all(np.isfinite(fp.timescales.value[1:]))


@pytest.mark.parametrize("call, message", [
    (lambda c: c.correlation([1.0, 0.0, 0.0]), "over the 2 states"),
    (lambda c: c.correlation([1.0, np.nan]), "NaN|finite"),
    (lambda c: c.correlation([1.0, 0.0], t=-1), ">= 0"),
    (lambda c: c.correlation([1.0, 0.0], t=[]), "1 to"),
    (lambda c: c.correlation([1.0, 0.0], t=2.5), "int"),
    (lambda c: c.correlation([1.0, 0.0], method="fourier"), "method"),
    (lambda c: c.relaxation([0.5, 0.6], [1.0, 0.0]), "sum|probab"),
    (lambda c: c.relaxation(3, [1.0, 0.0]), "start state"),
    (lambda c: c.fingerprint([1.0, 0.0], k=3), "<= 2"),
])
def test_bad_input_one_line(call, message):
    chain = chain_in("dense", two_state(0.3, 0.1))
    with pytest.raises((ValueError, TypeError), match=message) as err:
        call(chain)
    assert "\n" not in str(err.value)
