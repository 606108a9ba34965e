"""Transition path theory: closed forms (two-state chains, a rotating cycle, birth-death chains), exact
rational references (Fractions) on small reversible and non-reversible chains, metastable chains down to
1e-300, on dense, CSR and matrix-free chains; Hypothesis identities (flux conservation, q+ + q- = 1 and the
net flux w(i, j) (q+(j) - q+(i))_+ of a reversible chain, F_AB = F_BA, masses last in A and B summing to 1,
pathway shares summing to 1); bad sets refused with one line."""

from fractions import Fraction

import helpers
import numpy as np
import pytest
import scipy.sparse as sp
import sympy
from chain_representations import REPRESENTATIONS, assert_encloses, chain_in
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.chain.transition_paths import pathway_decomposition


def _solve(M, b):
    """x with M x = b over the rationals (sympy's LU on Rationals), as Fractions."""
    x = sympy.Matrix([[sympy.Rational(v.numerator, v.denominator) for v in row] for row in M]).LUsolve(
        sympy.Matrix([sympy.Rational(v.numerator, v.denominator) for v in b]))
    return [Fraction(int(v.p), int(v.q)) for v in x]


def _exact_committor(P, A, B):
    """P_x(tau_B < tau_A) over the rationals (the diagonal is 1 - the off-diagonal row sum)."""
    n = len(P)
    C = [i for i in range(n) if i not in A and i not in B]
    q = [Fraction(1) if i in B else Fraction(0) for i in range(n)]
    if C:
        M = [[(sum(P[i][k] for k in range(n) if k != i) if i == j else -P[i][j]) for j in C] for i in C]
        x = _solve(M, [sum(P[i][j] for j in B) for i in C])
        for i, v in zip(C, x):
            q[i] = v
    return q


def exact_tpt(P_float, A, B):
    """(pi, q+, q-, F, rate k_AB, rate k_BA) of the float matrix's chain in exact rational arithmetic."""
    n = P_float.shape[0]
    P = [[Fraction(float(P_float[i, j])) if i != j else Fraction(0) for j in range(n)] for i in range(n)]
    # pi L = 0, L = diag(out) - offdiag; replace the last equation by sum pi = 1
    M = [[(sum(P[j][k] for k in range(n) if k != j) if i == j else -P[j][i]) for j in range(n)] for i in range(n)]
    M[-1] = [Fraction(1)] * n
    pi = _solve(M, [Fraction(0)] * (n - 1) + [Fraction(1)])
    R = [[pi[j] * P[j][i] / pi[i] if i != j else Fraction(0) for j in range(n)] for i in range(n)]
    qp, qm = _exact_committor(P, A, B), _exact_committor(R, B, A)
    qpb, qmb = _exact_committor(P, B, A), _exact_committor(R, A, B)
    F = sum(pi[i] * qm[i] * P[i][j] * qp[j] for i in A for j in range(n) if j != i)
    rate = F / sum(p * q for p, q in zip(pi, qm))
    rate_back = F / sum(p * q for p, q in zip(pi, qmb))
    return pi, qp, qm, F, rate, rate_back, qpb


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("a, b", [(0.3, 0.1), (1e-300, 0.4), (1e-150, 1e-160)])
def test_two_state_closed_forms(rep, a, b):
    """A = {0}, B = {1}: F = pi_0 a = ab / (a + b), k_AB = a, k_BA = b, mfpt 1/a and 1/b, one path."""
    tp = chain_in(rep, two_state(a, b)).transition_paths([0], [1])
    assert_encloses(tp.total_flux, a * b / (a + b))
    assert_encloses(tp.total_flux_back, a * b / (a + b))
    assert_encloses(tp.rate, a)
    assert_encloses(tp.rate_back, b)
    assert_encloses(tp.mfpt, 1 / a)
    assert_encloses(tp.mfpt_back, 1 / b)
    paths = tp.pathways()
    if tp.total_flux.resolved:
        assert paths.details["paths"] == [[0, 1]] and paths.value[0] == pytest.approx(1.0)
    else:  # the matrix-free stationary law of a 1e-300 chain has no entrywise bound: intervals, no channels
        assert rep == "operator" and paths.details["paths"] == [] and "not resolved" in paths.method


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("n, k, p", [(6, 3, 0.3), (7, 2, 0.05)])
def test_rotating_cycle(rep, n, k, p):
    """P(i, i + 1) = p on a cycle (non-reversible), A = {0}, B = {k}: q+ and q- are 1 on the arc 1..k-1 and
    0 on the other, F = p / n, k_AB = p / k, the mean first passage time k / p, one channel 0 -> 1 -> ... -> k."""
    P = np.eye(n) * (1 - p)
    for i in range(n):
        P[i, (i + 1) % n] = p
    chain = chain_in(rep, P)
    assert not chain.is_reversible
    tp = chain.transition_paths([0], [k])
    arc = np.zeros(n)
    arc[1:k] = 1
    np.testing.assert_allclose(tp.forward_committor.value, arc + (np.arange(n) == k), atol=1e-12)
    np.testing.assert_allclose(tp.backward_committor.value, arc + (np.arange(n) == 0), atol=1e-12)
    assert_encloses(tp.total_flux, p / n)
    assert_encloses(tp.rate, p / k)
    assert_encloses(tp.mfpt, k / p)
    assert_encloses(tp.mfpt_back, (n - k) / p)
    assert tp.pathways().details["paths"] == [list(range(k + 1))]


def _bound(q):
    """The entrywise error a committor states: relative, absolute (matrix-free), or none (then it says so and
    only [0, 1] is claimed)."""
    if q.rel_error is not None:
        return q.rel_error * np.abs(q.value) + 1e-300
    if q.details.get("max_abs_error") is not None:
        return q.details["max_abs_error"]
    assert "not certified" in q.method
    return 1.0


def birth_death(up, down):
    """The chain on 0..n with P(j, j + 1) = up[j], P(j + 1, j) = down[j]."""
    n = len(up) + 1
    P = np.zeros((n, n))
    for j, (u, d) in enumerate(zip(up, down)):
        P[j, j + 1], P[j + 1, j] = u, d
    return P + np.diag(1 - P.sum(axis=1))


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("barrier", [0.2, 1e-30, 1e-300])
def test_birth_death_effective_conductance(rep, barrier):
    """A = {0}, B = {n}: every edge carries the net flux F = 1 / sum_j 1 / (pi_j P(j, j + 1)) (the chain's
    effective conductance), q+(k) = sum_(j<k) 1/w_j / sum_j 1/w_j; a barrier of 1e-300 in the middle keeps
    every figure's relative accuracy (exact rational reference)."""
    up = [0.3, 0.25, barrier, 0.4, 0.2]
    down = [0.1, 0.35, 0.3, 0.15, 0.45]
    P = birth_death(up, down)
    n = P.shape[0]
    chain = chain_in(rep, P)
    if rep == "operator" and barrier == 1e-300:  # pi(5) = 3e-302: the matrix-free solvers refuse such a law
        with pytest.raises(ValueError, match="underflows"):
            chain.transition_paths([0], [n - 1])
        return
    tp = chain.transition_paths([0], [n - 1])
    pi, qp, _, F, rate, rate_back, _ = exact_tpt(P, [0], [n - 1])
    w = [pi[j] * Fraction(up[j]) for j in range(n - 1)]
    R = sum(1 / x for x in w)
    assert F == 1 / R
    assert_encloses(tp.total_flux, float(F))
    assert_encloses(tp.rate, float(rate))
    assert_encloses(tp.rate_back, float(rate_back))
    exact = np.array([float(sum(1 / x for x in w[:k]) / R) for k in range(n)])
    assert np.all(np.abs(tp.forward_committor.value - exact) <= _bound(tp.forward_committor))
    paths = tp.pathways()
    if not tp.total_flux.resolved:  # matrix-free CG leaves committors of 1e-30 uncertified: no channels claimed
        assert rep == "operator" and paths.details["paths"] == [] and "not resolved" in paths.method
        return
    net = tp.net_flux.value.toarray()
    for j in range(n - 1):
        assert net[j, j + 1] == pytest.approx(float(F), rel=1e-9, abs=0)
    assert paths.details["paths"] == [list(range(n))]


def _random_chain(seed: int, n: int, reversible: bool, tiny: float = 1.0) -> np.ndarray:
    """:func:`helpers.random_chain` with ``tiny`` on the moves out of state 0's half only (non-reversible)."""
    return helpers.random_chain(seed, n, reversible, tiny, tiny_back=False)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("reversible", [True, False])
@pytest.mark.parametrize("tiny", [1.0, 1e-200])
def test_against_exact_rationals(rep, reversible, tiny):
    """F, k_AB, k_BA and both committors on 6-state chains (metastable at 1e-200 included) within their stated
    errors of the exact rational answers of the float matrix's chain."""
    P = _random_chain(3, 6, reversible, tiny)
    A, B = [0, 1], [4]
    tp = chain_in(rep, P).transition_paths(A, B)
    pi, qp, qm, F, rate, rate_back, _ = exact_tpt(P, A, B)
    # a matrix-free pi of a 1e-200 chain has no entrywise bound: intervals that hold the answer
    assert (tp.rate.resolved and tp.total_flux.resolved) or (rep == "operator" and tiny < 1)
    assert_encloses(tp.total_flux, float(F))
    assert_encloses(tp.rate, float(rate))
    assert_encloses(tp.rate_back, float(rate_back))
    assert_encloses(tp.mfpt, float(1 / rate))
    for q, exact in ((tp.forward_committor, qp), (tp.backward_committor, qm)):
        assert np.all(np.abs(q.value - np.array([float(x) for x in exact])) <= _bound(q))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(3, 7), st.booleans())
def test_identities(seed, n, reversible):
    """Flux conservation inside C, F_AB = F_BA, the masses last in A and last in B summing to 1, shares
    summing to 1; reversible: q+ + q- = 1 and the net flux is w(i, j) (q+(j) - q+(i))_+."""
    P = _random_chain(seed, n, reversible)
    rng = np.random.default_rng(seed + 1)
    perm = rng.permutation(n)
    A, B = perm[:1 + seed % 2], perm[2:3]
    chain = chain_in("dense", P)
    tp = chain.transition_paths(A, B)
    f = tp.flux.value.toarray()
    C = ~(tp.A | tp.B)
    np.testing.assert_allclose(f.sum(axis=1)[C], f.sum(axis=0)[C], rtol=1e-10, atol=1e-15)
    assert tp.total_flux_back.lower <= tp.total_flux.upper and tp.total_flux.lower <= tp.total_flux_back.upper
    Z, Zb = tp.details["mass_A_last"], tp.details["mass_B_last"]
    assert Z.lower + Zb.lower <= 1 <= Z.upper + Zb.upper
    assert tp.rate.value == pytest.approx(tp.total_flux.value / Z.value, rel=1e-12)
    shares = tp.pathways()
    assert shares.value.sum() + shares.details["remainder"] == pytest.approx(1.0, abs=1e-9)
    assert shares.details["remainder"] < 1e-9
    assert all(tp.A[p[0]] and tp.B[p[-1]] for p in shares.details["paths"])
    if reversible:
        qp, qm = tp.forward_committor.value, tp.backward_committor.value
        np.testing.assert_allclose((qp + qm)[C], 1.0, rtol=1e-12)
        pi = chain.stationary.value
        w = pi[:, None] * P
        expected = w * np.maximum(qp[None, :] - qp[:, None], 0)
        np.fill_diagonal(expected, 0)
        np.testing.assert_allclose(tp.net_flux.value.toarray(), expected, rtol=1e-9, atol=1e-15)


def test_pathways_split_between_channels():
    """Two parallel channels 0 -> 1 -> 3 (flux 0.7) and 0 -> 2 -> 3 (0.3), plus a cross edge 1 -> 2 of 0.2:
    the widest path first, then what is left; shares 0.5, 0.3, 0.2 sum to 1."""
    f = sp.csr_array(np.array([[0, 0.7, 0.3, 0], [0, 0, 0.2, 0.5], [0, 0, 0, 0.5], [0, 0, 0, 0]]))
    A, B = np.array([1, 0, 0, 0], bool), np.array([0, 0, 0, 1], bool)
    out = pathway_decomposition(f, A, B)
    assert out.details["paths"] == [[0, 1, 3], [0, 2, 3], [0, 1, 2, 3]]
    np.testing.assert_allclose(out.value, [0.5, 0.3, 0.2])
    assert out.details["remainder"] == pytest.approx(0.0, abs=1e-15)
    capped = pathway_decomposition(f, A, B, max_paths=1)
    assert capped.details["remainder"] == pytest.approx(0.5)


@pytest.mark.parametrize("A, B, message", [([], [1], "non-empty"), ([0, 1], [1, 2], "disjoint"),
                                           ([0], [7], r"\[0, 4\)")])
def test_bad_sets_are_refused(A, B, message):
    chain = chain_in("dense", _random_chain(1, 4, False))
    with pytest.raises(ValueError, match=message) as err:
        chain.transition_paths(np.array(A, dtype=int), np.array(B, dtype=int))
    assert "\n" not in str(err.value)


def test_a_reducible_chain_is_refused():
    P = np.array([[0.5, 0.5, 0], [0, 0.5, 0.5], [0, 0, 1.0]])
    with pytest.raises(ValueError, match="irreducible"):
        chain_in("dense", P).transition_paths([0], [1])
