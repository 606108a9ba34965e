"""Sensitivities of pi, of an eigenvalue, of a committor and of a mean first passage time: closed forms on
two- and three-state chains (differentiated by hand), central differences at 50+ digits (mpmath, step 1e-20,
subtraction-free GTH references) on small reversible and non-reversible chains and on a metastable chain
(1e-200), on dense, CSR and matrix-free chains; Hypothesis properties (sum_k dpi_k = 0, dpi = 0 along a
direction that keeps pi invariant, the Jacobian contracted with E is the directional derivative); bad input
refused with one line."""

import helpers
import mpmath as mp
import numpy as np
import pytest
from chain_representations import REPRESENTATIONS, chain_in
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.reference import mp_central_difference, mp_committor, mp_gth_stationary, mp_passage_times


def within(result, exact, slack=0.0):
    """Every entry of a certified derivative within its stated entrywise bound of ``exact``."""
    exact = np.asarray([float(x) for x in exact]) if not isinstance(exact, np.ndarray) else exact
    bound = result.details["bound"]
    assert np.all(np.abs(np.asarray(result.value) - exact) <= bound + slack), (result.value, exact, bound)


def direction(P, seed, relative=True):
    """A direction keeping P stochastic: off-diagonal r_ij P_ij (relative) or r_ij on P's pattern, r in [-1, 1],
    and minus their row sum on the diagonal."""
    rng = np.random.default_rng(seed)
    R = rng.uniform(-1, 1, P.shape) * (P > 0)
    E = R * P if relative else R
    np.fill_diagonal(E, 0.0)
    np.fill_diagonal(E, -E.sum(axis=1))
    return E


def random_chain(seed, n, reversible, tiny=1.0):
    """:func:`helpers.random_chain` with pairs of moves drawn with probability 0.6."""
    return helpers.random_chain(seed, n, reversible, tiny, density=0.6)


def unit(n, i, j):
    """e_i (e_j - e_i)^T: the derivative with respect to P(i, j), P(i, i) compensating."""
    E = np.zeros((n, n))
    E[i, j], E[i, i] = 1.0, -1.0
    return E


# ------------------------------------------------------------------ closed forms

@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("a, b", [(0.3, 0.1), (0.05, 0.7), (1e-150, 0.4)])
def test_two_state_closed_forms(rep, a, b):
    """pi = (b, a) / (a + b): dpi_0/da = -b/(a+b)^2, dpi_0/db = a/(a+b)^2 (and dpi_1 = -dpi_0); the second
    eigenvalue 1 - a - b: -1 for both; E_0 tau_1 = 1/a: -1/a^2."""
    chain = chain_in(rep, two_state(a, b))
    s = (a + b) ** 2
    exact = np.zeros((2, 2, 2))
    exact[0, 0, 1], exact[1, 0, 1] = -b / s, b / s
    exact[0, 1, 0], exact[1, 1, 0] = a / s, -a / s
    if rep == "operator" and a < 1e-10:  # the matrix-free law of a 1e-150 chain has no entrywise bound
        with pytest.raises(ValueError, match="not bounded entrywise") as err:
            chain.stationary_sensitivity()
        assert "\n" not in str(err.value)
    else:
        J = chain.stationary_sensitivity()
        within(J, exact)
        assert J.rel_error < 1e-10
    k = chain.mfpt_sensitivity([1], unit(2, 0, 1))
    within(k, np.array([-1 / a**2, 0.0]))
    lam = chain.eigenvalue_sensitivity(1, unit(2, 0, 1))
    if a > 1e-10:
        assert abs(lam.value + 1) <= lam.details["abs_bound"] + 1e-15
        np.testing.assert_allclose(chain.eigenvalue_sensitivity(1).value, [[0, -1], [-1, 0]], atol=1e-12)
    else:  # lambda_2 = 1 - b - 1e-150 is resolved, and so is its derivative
        assert lam.resolved and abs(lam.value + 1) <= 1e-9


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_three_state_committor_closed_form(rep):
    """A = {0}, B = {2}: q+(1) = P(1, 2) / (P(1, 0) + P(1, 2)), so dq+(1)/dP(1, 2) = P(1, 0) / s^2 and
    dq+(1)/dP(1, 0) = -P(1, 2) / s^2; no other entry moves it (rows 0 and 2 are absorbed)."""
    P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    J = chain_in(rep, P).committor_sensitivity([0], [2])
    exact = np.zeros((3, 3, 3))
    exact[1, 1, 2], exact[1, 1, 0] = 0.1 / 0.16, -0.3 / 0.16
    within(J, exact)


# ------------------------------------------------------------------ finite differences at 50+ digits

@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("reversible", [True, False])
def test_against_central_differences(rep, reversible):
    """pi, q+ (A = {0}, B = {4}) and E_x tau_{3} along a random direction, and pi's and q+'s Jacobian entries,
    each within its stated bound of the 50-digit central difference, and the bounds tight (1e-12)."""
    P = random_chain(7, 6, reversible)
    chain = chain_in(rep, P)
    assert chain.is_reversible == reversible
    E = direction(P, 1, relative=False)
    cases = [(chain.stationary_sensitivity(E), mp_gth_stationary),
             (chain.committor_sensitivity([0], [4], E), lambda W: mp_committor(W, [0], [4])),
             (chain.mfpt_sensitivity([3], E), lambda W: mp_passage_times(W, [3]))]
    for got, quantity in cases:
        within(got, mp_central_difference(quantity, P, E))
        assert got.rel_error < 1e-9
    Jpi, Jq = chain.stationary_sensitivity(), chain.committor_sensitivity([0], [4])
    for i, j in [(0, 1), (2, 5), (5, 0), (3, 3)]:
        Eij = unit(6, i, j)
        within_entry = mp_central_difference(mp_gth_stationary, P, Eij)
        assert np.all(np.abs(Jpi.value[:, i, j] - [float(x) for x in within_entry]) <= Jpi.details["bound"][:, i, j])
        ref_q = mp_central_difference(lambda W: mp_committor(W, [0], [4]), P, Eij)
        assert np.all(np.abs(Jq.value[:, i, j] - [float(x) for x in ref_q]) <= Jq.details["bound"][:, i, j])


@pytest.mark.parametrize("reversible", [True, False])
def test_eigenvalue_against_central_differences(reversible):
    """d lambda_2 along E within its (first-order) bound of the 50-digit central difference of mpmath's
    eigenvalue (the one nearest the float one)."""
    P = random_chain(11, 5, reversible)
    E = direction(P, 2, relative=False)
    got = chain_in("dense", P).eigenvalue_sensitivity(1, E)
    target = got.details["eigenvalue"]
    with mp.workdps(50):
        h = mp.mpf("1e-20")

        def eig(t):
            M = mp.matrix([[mp.mpf(float(P[x, y])) + t * mp.mpf(float(E[x, y])) for y in range(5)] for x in range(5)])
            for x in range(5):
                M[x, x] = 1 - mp.fsum(M[x, y] for y in range(5) if y != x)
            return min(mp.eig(M, left=False, right=False), key=lambda z: abs(z - target))

        ref = float(mp.re((eig(h) - eig(-h)) / (2 * h)))
    assert got.resolved
    assert abs(got.value - ref) <= got.details["abs_bound"]
    assert got.details["abs_bound"] < 1e-9


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_metastable_chain(rep):
    """Moves between the two halves scaled by 1e-200: dpi, dq+ and dE tau along a relative direction keep their
    entrywise relative accuracy (references at 300 digits: pi's entries near 1 move by 1e-200 of themselves),
    where m_ik and m_jk are 1e200 and their difference O(1); the matrix-free law there has no entrywise bound, and
    pi's derivative is refused with one line; lambda_2's derivative, not separated from 1, is an open interval."""
    P = random_chain(5, 6, True, tiny=1e-200)
    chain = chain_in(rep, P)
    E = direction(P, 3)
    if rep == "operator":  # the matrix-free law of a 1e-200 chain has no entrywise bound: refused, one line
        with pytest.raises(ValueError, match="not bounded entrywise") as err:
            chain.stationary_sensitivity(E)
        assert "\n" not in str(err.value)
    else:
        dpi = chain.stationary_sensitivity(E)
        within(dpi, mp_central_difference(mp_gth_stationary, P, E, dps=300))
        assert dpi.rel_error < 1e-10
    dq = chain.committor_sensitivity([0], [5], E)
    within(dq, mp_central_difference(lambda W: mp_committor(W, [0], [5]), P, E, dps=300))
    dk = chain.mfpt_sensitivity([5], E)
    within(dk, mp_central_difference(lambda W: mp_passage_times(W, [5]), P, E, dps=300))
    assert dk.rel_error < 1e-10
    # lambda_2 = 1 - O(1e-200) is not separated from 1 in float64: no number is claimed for its derivative
    lam = chain.eigenvalue_sensitivity(1, E)
    assert not lam.resolved and "not separated" in lam.reason and lam.lower is None and lam.upper is None
    assert chain.eigenvalue_sensitivity(1).rel_error is None


@pytest.mark.parametrize("reversible", [True, False])
def test_against_the_group_inverse(reversible):
    """A second algorithm: the raw partial derivative of the Perron vector is pi_i Z#_jk (Z# the group inverse
    of I - P, by LAPACK), and the stochastic Jacobian is raw[k, i, j] - raw[k, i, i]; the eigenvalue's Jacobian
    contracted with E is its directional derivative."""
    P = random_chain(4, 6, reversible)
    chain = chain_in("dense", P)
    pi = chain.stationary.value
    one = np.ones(6)
    Z = np.linalg.inv(np.eye(6) - P + np.outer(one, pi)) - np.outer(one, pi)
    raw = pi[None, :, None] * Z.T[:, None, :]  # raw[k, i, j] = pi_i Z#_jk
    stochastic = raw - np.diagonal(raw, axis1=1, axis2=2)[:, :, None]
    J = chain.stationary_sensitivity()
    within(J, stochastic, slack=1e-13)
    E = direction(P, 5, relative=False)
    lam = chain.eigenvalue_sensitivity(1, E)
    Jl = chain.eigenvalue_sensitivity(1)
    assert abs(float(np.sum(Jl.value * E)) - lam.value) <= lam.details["abs_bound"] + float(np.sum(Jl.details["bound"]
                                                                                                * np.abs(E)))


# The known answers of msmtools' own tests (tests/analysis/impl/dense/sensitivity_test.py, to the digits printed
# there): raw partial derivatives d x / dT_ij of T as a general matrix.
T4 = np.array([[0.9, 0.04, 0.03, 0.03], [0.02, 0.94, 0.02, 0.02], [0.01, 0.01, 0.94, 0.04], [0.01, 0.01, 0.08, 0.9]])
MSMTOOLS = {
    ("committor", 1): [[0, 0, 0, 0], [0, 10.3806, 13.4948, 17.6471], [0, 3.46021, 4.49826, 5.88235], [0, 0, 0, 0]],
    ("committor", 2): [[0, 0, 0, 0], [0, 1.7301, 2.24913, 2.94118], [0, 10.3806, 13.4948, 17.6471], [0, 0, 0, 0]],
    ("mfpt to 0", 1): [[0, 0, 0, 0], [0, 1875, 2187.5, 2187.5], [0, 2410.71, 2812.5, 2812.5], [0, 1339.29, 1562.5, 1562.5]],
    ("mfpt to 0", 2): [[0, 0, 0, 0], [0, 937.5, 1093.75, 1093.75], [0, 3883.93, 4531.25, 4531.25],
                       [0, 1741.07, 2031.25, 2031.25]],
    ("mfpt to 3", 2): [[102.959, 114.793, 87.574, 0], [180.178, 200.888, 153.254, 0], [669.231, 746.154, 569.231, 0],
                       [0, 0, 0, 0]],
    ("pi", 1): [[0.0868655, 1.2556020, -0.3514107, -0.3514107], [0.1520148, 2.1973013, -0.6149689, -0.6149689],
                [0.3629750, 5.2466298, -1.4683944, -1.4683955], [0.2016525, 2.9147921, -0.8157750, -0.8157744]],
}


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_msmtools_cases_by_the_documented_relation(rep):
    """msmtools' published answers (raw partials) turned into this convention, stochastic[i, j] = raw[i, j] -
    raw[i, i], agree with every representation to the digits msmtools prints; so do its two-state eigenvalue
    cases (raw d lambda_1 = pi_i, stochastic 0; lambda_2 = 1 - a - b: -1)."""
    chain = chain_in(rep, T4)
    got = {"committor": chain.committor_sensitivity([0], [3]), "mfpt to 0": chain.mfpt_sensitivity([0]),
           "mfpt to 3": chain.mfpt_sensitivity([3]), "pi": chain.stationary_sensitivity()}
    for (what, x), raw in MSMTOOLS.items():
        raw = np.array(raw, dtype=float)
        expected = raw - np.diag(raw)[:, None]
        np.testing.assert_allclose(got[what].value[x], expected, rtol=2e-5, atol=2e-5 * np.abs(raw).max())
    two = chain_in(rep, np.array([[0.8, 0.2], [0.05, 0.95]]))
    raw1 = np.array([[0.8, -0.2], [-0.8, 0.2]])
    np.testing.assert_allclose(two.eigenvalue_sensitivity(1).value, raw1 - np.diag(raw1)[:, None], atol=1e-12)
    np.testing.assert_allclose(two.eigenvalue_sensitivity(0).value, np.zeros((2, 2)), atol=1e-12)


# ------------------------------------------------------------------ properties

def circulation(n, pi, seed):
    """A direction with pi E = 0: E = D^-1 K, K with zero row and column sums (a random cycle of flows)."""
    rng = np.random.default_rng(seed)
    K = np.zeros((n, n))
    cycle = rng.permutation(n)[: max(2, n - 1)]
    for a, b in zip(cycle, np.roll(cycle, -1)):
        K[a, b] += 1.0
        K[a, a] -= 1.0
    return K / pi[:, None] * 1e-3 * pi.min()


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.integers(3, 7), st.booleans())
def test_properties(seed, n, reversible):
    """sum_k dpi_k = 0; dpi = 0 along a direction keeping pi invariant (pi E = 0); the Jacobian contracted with
    E is the directional derivative; each within the stated bounds."""
    P = random_chain(seed, n, reversible)
    chain = chain_in("dense", P)
    E = direction(P, seed + 1, relative=False)
    d = chain.stationary_sensitivity(E)
    assert abs(d.value.sum()) <= d.details["bound"].sum()
    J = chain.stationary_sensitivity()
    contracted = np.einsum("kij,ij->k", J.value, E)
    assert np.all(np.abs(contracted - d.value) <= d.details["bound"] + np.einsum("kij,ij->k", J.details["bound"],
                                                                                 np.abs(E)) + 1e-15)
    still = chain.stationary_sensitivity(circulation(n, chain.stationary.value, seed))
    assert np.all(np.abs(still.value) <= still.details["bound"])
    Jq = chain.committor_sensitivity([0], [n - 1])
    dq = chain.committor_sensitivity([0], [n - 1], E)
    assert np.all(np.abs(np.einsum("xij,ij->x", Jq.value, E) - dq.value)
                  <= dq.details["bound"] + np.einsum("xij,ij->x", Jq.details["bound"], np.abs(E)) + 1e-15)


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("call, message", [
    (lambda c: c.stationary_sensitivity(np.ones((4, 4))), "must keep P stochastic"),
    (lambda c: c.stationary_sensitivity(np.zeros((3, 3))), "shape of P"),
    (lambda c: c.stationary_sensitivity(np.full((4, 4), np.nan)), "NaN"),
    (lambda c: c.eigenvalue_sensitivity(7), "index"),
    (lambda c: c.committor_sensitivity([0], [0]), "disjoint"),
    (lambda c: c.mfpt_sensitivity([9]), r"\[0, 4\)"),
])
def test_bad_input_is_refused(call, message):
    chain = chain_in("dense", random_chain(1, 4, False))
    with pytest.raises(ValueError, match=message) as err:
        call(chain)
    assert "\n" not in str(err.value)


def test_beyond_the_size_limits_one_line():
    P = random_chain(2, 40, False)
    with pytest.raises(ValueError, match="up to 32 states") as err:
        chain_in("csr", P).stationary_sensitivity()
    assert "\n" not in str(err.value)


def test_complex_eigenvalue_and_reducible_chain_are_refused():
    P = np.array([[0.1, 0.9, 0], [0, 0.1, 0.9], [0.9, 0, 0.1]])  # a rotation: lambda_2,3 complex
    with pytest.raises(ValueError, match="complex"):
        chain_in("dense", P).eigenvalue_sensitivity(1)
    with pytest.raises(ValueError, match="irreducible"):
        chain_in("dense", np.array([[0.5, 0.5, 0], [0, 0.5, 0.5], [0, 0, 1.0]])).stationary_sensitivity()
