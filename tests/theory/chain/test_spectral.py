"""Stationary law and gaps to relative accuracy: closed forms, 60-digit mpmath references on metastable
chains (gaps 1e-12 .. 1e-300), dense vs Lanczos, reducible chains, and the stated accuracy holding."""

import math

import mpmath as mp
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from chain_representations import MATRIX_REPRESENTATIONS, REPRESENTATIONS, assert_encloses, chain_in, within_seconds
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st

import mlmix.theory.chain.stationary as stationary_module
from mlmix.errors import ReducibleChainError, UnresolvedError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.shortcuts import (
    additive_gap,
    is_reversible,
    multiplicative_gap,
    poincare_constant,
    spectral_gap,
)
from mlmix.theory.chain.spectral import additive_reversibilization, dirichlet_form, reversible_gap, time_reversal
from mlmix.theory.chain.stationary import certified_error, log_potential, stationary_distribution
from mlmix.theory.chain.structure import communicating_classes
from mlmix.theory.kernels.assembled import block_kernel, glauber_kernel
from mlmix.theory.linalg.elimination import eliminate
from mlmix.theory.linalg.matrix_operator import MatrixOperator
from mlmix.theory.reference import (
    birth_death,
    ising_cycle_gap,
    mp_additive,
    mp_chain,
    mp_gap,
    mp_stationary,
    noisy_ferromagnet,
)
from mlmix.theory.results import Result
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, PottsModel, ScoreTable
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_transition_matrix

DPS = 60


def mp_reversible_gap(P, dps=DPS):
    """Reference gap of a reversible P in ``dps``-digit arithmetic (:mod:`mlmix.theory.reference`)."""
    with mp.workdps(dps):
        return float(mp_gap(mp_chain(P)))


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@settings(max_examples=20)
@given(st.floats(0.01, 0.99), st.floats(0.01, 0.99))
def test_two_state_closed_forms(rep, a, b):
    ch = chain_in(rep, two_state(a, b))
    np.testing.assert_allclose(ch.stationary.value, np.array([b, a]) / (a + b), rtol=1e-13)
    assert ch.is_reversible
    assert float(ch.spectral_gap) == pytest.approx(a + b, rel=1e-13)
    assert float(ch.additive_gap) == pytest.approx(a + b, rel=1e-13)
    if rep == "operator":  # matrix-free, 1 + lambda_min is only bounded below (Gershgorin): an enclosure
        assert_encloses(ch.absolute_spectral_gap, 1 - abs(1 - a - b), slack=1e-13)
    else:
        assert float(ch.absolute_spectral_gap) == pytest.approx(1 - abs(1 - a - b), abs=1e-13)
    assert float(ch.poincare_constant) == pytest.approx(1 / (a + b), rel=1e-13)


@pytest.mark.parametrize("a, b", [(1e-12, 1e-12), (1e-12, 3e-12), (1e-100, 0.3), (1e-300, 1e-300), (1e-300, 0.5)])
def test_two_state_metastable_gap_to_full_relative_accuracy(a, b, matrix_representation):
    """The gap a + b of [[1-a, a], [b, 1-b]] for rates down to 1e-300 (1 - a rounds to 1); the sparse
    algorithms enclose it (Lanczos cannot resolve a gap below the rounding of 1 - lambda_2), and so does
    the matrix-free route, or it refuses a law below 1e-300 by name."""
    ch = chain_in(matrix_representation, two_state(a, b))
    if matrix_representation == "operator" and min(a, b) / (a + b) < 1e-299:
        with pytest.raises(ValueError, match="underflows"):
            ch.spectral_gap
        return
    gap = ch.spectral_gap
    assert_encloses(gap, a + b, slack=1e-15 * (a + b))
    if matrix_representation != "dense":
        return
    assert gap.resolved
    assert abs(gap.value / (a + b) - 1) <= max(gap.rel_error, 1e-15)
    assert gap.rel_error < 1e-10
    assert ch.log_stationary.value[1] == pytest.approx(np.log(a / (a + b)), rel=1e-14)


@pytest.mark.parametrize("n", [3, 4, 6])
@pytest.mark.parametrize("beta", [0.5, 2.0, 6.0, 10.0, 15.0, 20.0])
def test_ising_cycle_gap_matches_the_closed_form(n, beta, representation):
    """Gaps from 0.06 down to 1e-35: relative error <= 1e-12 and within the stated bound (dense); the
    CSR and matrix-free chains enclose it."""
    ch = chain_in(representation, source=IsingModel(nx.cycle_graph(n), beta=beta))
    gap = ch.spectral_gap
    exact = ising_cycle_gap(n, beta)
    assert_encloses(gap, exact, slack=1e-13 * exact)
    assert_encloses(ch.relaxation_time, 1 / exact, slack=1e-13 / exact)
    if representation != "dense":
        return
    err = abs(gap.value / exact - 1)
    assert err <= 1e-12 and err <= gap.rel_error
    assert gap.lower <= exact <= gap.upper
    assert float(ch.poincare_constant) == pytest.approx(1 / exact, rel=1e-12)
    assert float(ch.relaxation_time) == pytest.approx(1 / exact, rel=1e-12)  # 1 + lambda_min is O(1)


@pytest.mark.parametrize("depth", [10.0, 30.0, 80.0, 200.0])
def test_biased_birth_death_gap_against_high_precision(depth, matrix_representation, matrix_chain_of):
    """Gaps from 1e-5 to 1e-87 against mpmath with 60 + depth/2 digits (enough for the barrier): dense
    to full relative accuracy, CSR (Lanczos) and matrix-free within their stated accuracy or interval."""
    P, V = birth_death(depth=depth)
    ch = matrix_chain_of(P)
    ref = mp_reversible_gap(P, dps=int(60 + depth / 2))
    with within_seconds(30):
        gap = ch.spectral_gap
    assert_encloses(gap, ref, slack=1e-13 * ref)
    if matrix_representation == "dense":
        assert gap.resolved and gap.rel_error < 1e-9
    # stationary law: exp(-V) to relative accuracy in every entry (masses down to ~e^-200)
    logpi = -V - np.log(np.exp(-V - (-V).max()).sum()) + V.min()
    if matrix_representation == "operator":  # a Krylov law: within its certificate, or not bounded (None)
        st = ch.stationary
        assert st.rel_error is None or np.abs(np.expm1(st.log_value - logpi)).max() <= st.rel_error
        return
    np.testing.assert_allclose(ch.log_stationary.value, logpi, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T", [1.0, 0.2, 0.05, 0.02])
def test_non_reversible_metastable_additive_gap_against_high_precision(T, matrix_representation, matrix_chain_of):
    """A non-reversible chain whose additive gap goes from 0.06 down to 6e-31, against mpmath with
    enough digits for the barrier: dense to full relative accuracy, CSR (Krylov law, Lanczos gap)
    within its stated accuracy or its interval."""
    P = glauber_kernel(noisy_ferromagnet().at_temperature(T)).toarray()
    ch = matrix_chain_of(P)
    assert not ch.is_reversible
    with mp.workdps(60 + int(2 / T)):
        M = mp_chain(P)
        pi = mp_stationary(M)
        ref = float(mp_gap(mp_additive(M, pi)))  # S = (P + P*)/2, then its gap
    with within_seconds(30):
        st = ch.stationary
        gap = ch.additive_gap
    actual = max(abs(float(mp.mpf(v) / p) - 1) for v, p in zip(st.value, pi))
    assert_encloses(gap, ref, slack=1e-13 * ref)
    if matrix_representation != "dense":
        assert st.rel_error is None or actual <= st.rel_error
        return
    assert actual <= st.rel_error < 1e-9 and "certificate" in st.method  # rigorous and tight
    assert abs(gap.value / ref - 1) <= max(gap.rel_error, 1e-13) and gap.rel_error < 1e-8
    assert not ch.spectral_gap.resolved and "not reversible" in ch.spectral_gap.reason


@pytest.mark.parametrize("T", [0.2, 0.02])
def test_the_stationary_certificate_catches_a_wrong_law(T):
    """certified_error bounds the error of whatever law it is given: a law perturbed by 1e-7 in one
    entry gets a bound of at least 1e-7, never the bound of the correct law."""
    P = glauber_kernel(noisy_ferromagnet().at_temperature(T)).toarray()
    el = eliminate(P)
    logpi = el.log_stationary()
    z = int(el.order[0])
    good = certified_error(P, logpi, z, el.solve_transposed)
    assert good < 1e-10
    for x in (int(np.argmin(logpi)), int(np.argmax(logpi))):
        bad = logpi.copy()
        bad[x] += 1e-7
        assert certified_error(P, bad, z, el.solve_transposed) >= 0.9e-7


def test_a_metastable_sparse_law_is_certified_or_labelled_normwise():
    """The Krylov path on a law spanning 1e-20: either its certificate holds (checked against GTH) or
    rel_error is None and the method says the accuracy is normwise, never a bound that does not hold."""
    P = glauber_kernel(noisy_ferromagnet().at_temperature(0.05))
    it = Chain(P, dense_limit=4).stationary
    gth = Chain(P).stationary
    assert gth.value.min() < 1e-12 and gth.rel_error < 1e-9
    if it.rel_error is None:
        assert "normwise" in it.details["accuracy"] and it.residual < 1e-9
    else:
        assert np.abs(it.value / gth.value - 1).max() <= it.rel_error + gth.rel_error


def test_stationary_law_keeps_relative_accuracy_where_it_underflows(chain_of):
    """Independent spins, one flip costs e^-300: pi spans e^1800 (underflows); the logarithms stay
    exact and the gap (1/n for a product of heat-bath spins) is still right (the CSR chain encloses it;
    matrix-free, what needs pi in linear space is refused by name)."""
    ch = chain_of(source=IsingModel(nx.empty_graph(6), fields=1.0, beta=150.0))
    logpi = ch.log_stationary.value
    if ch.representation == "operator":
        assert logpi.max() - logpi.min() == pytest.approx(6 * 300.0, rel=1e-12)
        with pytest.raises(ValueError, match="underflows"):
            ch.spectral_gap
        return
    if ch.representation == "sparse":
        assert np.isfinite(logpi).all() and logpi.max() - logpi.min() == pytest.approx(6 * 300.0, rel=1e-12)
        assert_encloses(ch.spectral_gap, 1 / 6, slack=1e-12)
        return
    assert ch.stationary.value.min() == 0.0 and np.isfinite(logpi).all()
    assert logpi.max() - logpi.min() == pytest.approx(6 * 300.0, rel=1e-12)
    assert float(ch.spectral_gap) == pytest.approx(1 / 6, rel=1e-12)


@pytest.mark.parametrize("q, n", [(2, 1), (2, 3), (3, 2), (2, 5), (3, 4)])
def test_product_measure_glauber_gap_is_one_over_n(q, n, representation):
    space = StateSpace(q, n)
    rng = np.random.default_rng(q * 10 + n)
    marg = rng.standard_normal((n, q))
    lw = sum(marg[i][space.all_states()[:, i]] for i in range(n))
    ch = chain_in(representation, source=LogWeightTable(space, lw))
    assert float(ch.spectral_gap) == pytest.approx(1.0 / n, rel=1e-12)


def test_dense_and_lanczos_paths_agree_and_lanczos_is_honest_when_metastable():
    P = glauber_kernel(PottsModel.random(nx.cycle_graph(5), 3, seed=2))
    dense = Chain(P).spectral_gap
    sparse = Chain(P, dense_limit=16).spectral_gap
    assert "Lanczos" in sparse.method and sparse.resolved
    assert sparse.value == pytest.approx(dense.value, rel=1e-8)
    # a gap of 1.4e-18 is below Lanczos' resolution: an interval that contains it, never roundoff
    meta = Chain.from_source(IsingModel(nx.cycle_graph(6), beta=10.0), dense_limit=16).spectral_gap
    assert not meta.resolved and meta.lower <= ising_cycle_gap(6, 10.0) <= meta.upper
    with pytest.raises(UnresolvedError, match="not resolved"):
        float(meta)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@settings(max_examples=8)
@given(st.integers(0, 10**6), st.sampled_from([0.3, 1.0]))
def test_dirichlet_form_identities(rep, seed, T):
    src = ScoreTable.random(3, 3, seed=seed, temperature=T)
    P = glauber_kernel(src)
    ch = chain_in(rep, source=src)
    pi, logpi = ch.stationary.value, ch.log_stationary.value
    S = additive_reversibilization(P, logpi)
    rng = np.random.default_rng(seed)
    f, g = rng.standard_normal((2, P.shape[0]))
    assert dirichlet_form(P, f, g, pi) == pytest.approx(dirichlet_form(S, f, g, pi), rel=1e-10, abs=1e-12)
    D = P.toarray()
    assert ch.dirichlet_form(f) == pytest.approx(0.5 * np.sum(pi[:, None] * D * (f[:, None] - f[None, :]) ** 2),
                                                 rel=1e-10)
    var = pi @ (f - pi @ f) ** 2
    assert var <= float(ch.poincare_constant) * ch.dirichlet_form(f) * (1 + 1e-10)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@settings(max_examples=5)
@given(st.integers(0, 10**6))
def test_reversibilizations_and_the_multiplicative_gap(rep, seed):
    src = ScoreTable.random(2, 4, seed=seed)
    P = glauber_kernel(src)
    ch = chain_in(rep, source=src)
    pi, logpi = ch.stationary.value, ch.log_stationary.value
    R = time_reversal(P, logpi)
    np.testing.assert_allclose(R.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(pi @ R, pi, atol=1e-14)
    np.testing.assert_allclose(time_reversal(R, logpi).toarray(), P.toarray(), atol=1e-12)
    assert ch.additive_reversibilization().is_reversible
    assert ch.multiplicative_reversibilization().is_reversible
    s = np.sqrt(pi)  # 1 - sigma_2(B)^2 with B = D^1/2 P D^-1/2, by an SVD
    sig = np.linalg.svd(P.toarray() * s[:, None] / s[None, :], compute_uv=False)
    assert float(ch.multiplicative_gap) == pytest.approx(1 - sig[1] ** 2, rel=1e-9)


def test_reversible_gap_identities_and_the_absolute_gap(representation):
    src = IsingModel(nx.cycle_graph(5), couplings=0.7, fields=0.2)
    P = glauber_kernel(src)
    ch = chain_in(representation, source=src)
    evals = np.sort(np.linalg.eigvals(P.toarray()).real)
    assert float(ch.spectral_gap) == pytest.approx(1 - evals[-2], rel=1e-10)
    assert float(ch.absolute_spectral_gap) == pytest.approx(1 - max(evals[-2], -evals[0]), rel=1e-10)
    # reversible: P* P = P^2, so the multiplicative gap is 1 - lambda_*^2
    lam = 1 - float(ch.absolute_spectral_gap)
    mult = ch.multiplicative_gap
    assert_encloses(mult, 1 - lam**2, slack=1e-10)
    if representation == "operator":  # derived from the absolute gap's enclosure: an interval, said so
        assert mult.upper - mult.lower < 1e-9
        return
    assert float(mult) == pytest.approx(1 - lam**2, rel=1e-10)
    # the plain functions are the same numbers (dense), within the stated accuracy (CSR)
    assert is_reversible(P)
    if representation == "csr":
        assert_encloses(ch.spectral_gap, spectral_gap(P))
        return
    assert spectral_gap(P) == float(ch.spectral_gap) and poincare_constant(P) == float(ch.poincare_constant)
    assert multiplicative_gap(P) == float(ch.multiplicative_gap)


def test_non_reversible_absolute_gap_from_the_eigenvalues(representation):
    src = ScoreTable.random(2, 3, seed=1)
    P = glauber_kernel(src)
    ch = chain_in(representation, source=src)
    ev = np.linalg.eigvals(P.toarray())
    second = np.sort(np.abs(ev))[-2]
    assert float(ch.absolute_spectral_gap) == pytest.approx(1 - second, rel=1e-10)
    with pytest.raises(UnresolvedError, match="not reversible"):
        spectral_gap(P)
    assert_encloses(ch.additive_gap, additive_gap(P))
    if representation == "dense":
        assert additive_gap(P) == float(ch.additive_gap)


def test_low_temperature_non_reversibility_among_tiny_masses_is_detected():
    """Detailed balance fails only where pi is ~1e-19 of its maximum: a test scaled by max pi P misses
    it, Kolmogorov's criterion in log space does not."""
    P = glauber_kernel(ScoreTable.random(2, 4, seed=1, temperature=0.01))
    pi = stationary_distribution(P)
    assert pi.min() < 1e-15
    Q = P.toarray() * pi[:, None]
    assert np.abs(Q - Q.T).max() < 1e-10 * Q.max()
    assert log_potential(P) is None
    for rep in MATRIX_REPRESENTATIONS:
        assert not chain_in(rep, P).is_reversible


def test_two_closed_classes_are_named_and_a_transient_state_is_allowed(matrix_chain_of):
    P = np.array([[0.5, 0.5, 0, 0, 0], [0.5, 0.5, 0, 0, 0], [0.2, 0, 0.6, 0.2, 0], [0, 0, 0, 0.3, 0.7],
                  [0, 0, 0, 0.4, 0.6]])
    classes, closed = communicating_classes(P)
    assert sorted(tuple(c) for c, cl in zip(classes, closed) if cl) == [(0, 1), (3, 4)]
    with pytest.raises(ReducibleChainError, match="2 closed classes") as err:
        matrix_chain_of(P).stationary
    assert sorted(tuple(c) for c in err.value.closed_classes) == [(0, 1), (3, 4)]
    assert "closed classes" in matrix_chain_of(P).summary()["reason"]
    T = np.array([[0.5, 0.5, 0.0], [0.2, 0.8, 0.0], [0.1, 0.1, 0.8]])
    if matrix_chain_of.args == ("operator",):  # the matrix-free route needs one class: refused by name
        for M in (np.array([[1.0, 0.0], [1.0, 0.0]]), T):
            with pytest.raises(ValueError, match="1 transient state"):
                matrix_chain_of(M).stationary
        return
    # one closed class and transient states: the unique law vanishes on the transient states
    np.testing.assert_array_equal(matrix_chain_of(np.array([[1.0, 0.0], [1.0, 0.0]])).stationary.value, [1.0, 0.0])
    ch = matrix_chain_of(T)
    np.testing.assert_allclose(ch.stationary.value, [2 / 7, 5 / 7, 0.0], rtol=1e-14)
    assert float(ch.spectral_gap) == pytest.approx(0.7, rel=1e-13) and "transient" in ch.spectral_gap.method


def test_gaps_of_a_reducible_chain_with_a_given_law_are_exactly_zero(matrix_representation):
    src = LogWeightTable.random(StateSpace(2, 3), 1)
    P = block_kernel(src, [(0,), (1,), (2,)], [0.5, 0.5, 0.0]).toarray()
    pi = src.joint()
    assert len(communicating_classes(P)[0]) == 2
    for M in (P, sp.csr_array(P)):
        assert additive_gap(M, pi) == 0.0
    if matrix_representation == "operator":  # a given law is an option of a matrix: one-line TypeError
        with pytest.raises(TypeError, match="options of a matrix"):
            chain_in(matrix_representation, P, stationary=pi)
        return
    ch = chain_in(matrix_representation, P, stationary=pi)
    assert ch.conductance.value == 0.0 and ch.additive_gap.value == 0.0
    assert not ch.poincare_constant.resolved


def test_a_given_law_must_be_stationary(matrix_chain_of):
    if matrix_chain_of.args == ("operator",):  # a given law is an option of a matrix
        with pytest.raises(TypeError, match="options of a matrix"):
            matrix_chain_of(two_state(0.2, 0.3), stationary=[0.6, 0.4])
        return
    with pytest.raises(ValueError, match="not stationary"):
        matrix_chain_of(two_state(0.2, 0.3), stationary=[0.5, 0.5])
    for bad in ([0.5, 0.6], [0.2, 0.3, 0.5], [np.nan, 1.0]):
        with pytest.raises(ValueError, match="stationary"):
            matrix_chain_of(two_state(0.2, 0.3), stationary=bad)
    good = matrix_chain_of(two_state(0.2, 0.3), stationary=[0.6, 0.4])  # pi = (b, a) / (a + b)
    np.testing.assert_allclose(good.stationary.value, [0.6, 0.4], rtol=1e-15)


def test_explicit_zeros_do_not_mutate_the_callers_matrix(matrix_chain_of):
    data = np.array([0.5, 0.5, 0.0, 0.25, 0.5, 0.25, 0.0, 0.5, 0.5])
    P = sp.csr_array((data.copy(), np.tile([0, 1, 2], 3), [0, 3, 6, 9]), shape=(3, 3))
    matrix_chain_of(P).summary()
    assert P.nnz == 9 and np.array_equal(P.data, data)


@pytest.mark.parametrize("bad, exc, msg", [
    (np.ones((2, 3)) / 3, ValueError, "square"),
    (np.ones(4), ValueError, "2-dimensional"),
    (np.array([[0.5, np.nan], [0.5, 0.5]]), ValueError, "NaN"),
    (np.array([[1.5, -0.5], [0.5, 0.5]]), ValueError, "negative"),
    (np.array([[0.5, 0.4], [0.5, 0.5]]), ValueError, "row 0"),
    (np.zeros((0, 0)), ValueError, "non-empty"),
    ("P", TypeError, "numpy array"),
    ([["a", "b"], ["c", "d"]], TypeError, "real numbers"),
])
def test_bad_matrices(bad, exc, msg):
    with pytest.raises(exc, match=msg):
        check_transition_matrix(bad)
    for build in (Chain, MatrixOperator):  # the matrix-free presentation validates the same way
        with pytest.raises(exc, match=msg):
            build(bad)


def test_tolerance_of_row_sums():
    check_transition_matrix(np.array([[0.5, 0.5 + 5e-10], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="sum to 1"):
        check_transition_matrix(sp.csr_array(np.array([[0.5, 0.5 + 5e-9], [0.5, 0.5]])))


def test_sparse_non_reversible_stationary_is_checked_and_non_negative():
    P = glauber_kernel(ScoreTable.random(3, 5, seed=3, temperature=0.7))
    gth = Chain(P).stationary
    assert gth.method.startswith("GTH")
    it = Chain(P, dense_limit=16).stationary
    assert "grounded" in it.method and it.residual < 1e-9 and (it.value >= 0).all()
    # the Krylov law carries a verified entrywise certificate, and it covers the distance to GTH's law
    assert "certificate" in it.method and 0 < it.rel_error < 1e-8
    assert np.abs(it.value / gth.value - 1).max() <= it.rel_error + gth.rel_error


def test_matrix_free_multiplicative_gap_matches_the_dense_one():
    """1 - sigma_2^2 by Lanczos on C^T C (P* P never formed) equals the dense accurate gap of P* P, and
    gives large non-reversible chains Fill's upper bound on t_mix."""
    P = glauber_kernel(ScoreTable.random(3, 5, seed=0, temperature=0.7))
    dense = Chain(P).multiplicative_gap
    sparse = Chain(P, dense_limit=16)
    assert "C^T C" in sparse.multiplicative_gap.method
    assert sparse.multiplicative_gap.value == pytest.approx(dense.value, rel=1e-9)
    t = sparse.mixing_time(max_states=16)  # no dense squaring: certified bounds only
    assert not t.resolved and t.lower <= int(Chain(P).mixing_time()) <= t.upper
    assert "Fill" in t.method


def test_widening_maps_the_enclosure_and_knows_when_to_give_up():
    r = Result.approximate("q", 2.0, 1e-9, "m")
    w = r.widened(1e-8, "; charged")
    assert w.resolved and w.rel_error == pytest.approx(1.1e-8 / (1 - 1e-8), rel=1e-12) and w.method == "m; charged"
    assert w.lower == pytest.approx(2 * (1 - 1e-9) / (1 + 1e-8), rel=1e-15)
    assert w.upper == pytest.approx(2 * (1 + 1e-9) / (1 - 1e-8), rel=1e-15)
    coarse = r.widened(1e-3, "")
    assert not coarse.resolved and "1e-06" in coarse.reason and coarse.lower < 2 < coarse.upper
    unbounded = r.widened(math.inf, "", within=(0.0, 1.0))
    assert not unbounded.resolved and (unbounded.lower, unbounded.upper) == (0.0, 1.0)


@pytest.mark.parametrize("delta", [1e-4, 1e-7])
def test_an_error_in_pi_moves_the_additive_gap_by_at_most_the_charge(delta):
    """The charge 2 delta / (1 - delta) for a law with entrywise error delta holds, and is within a
    factor 3 of what a perturbation attains on this chain: a charge of delta / 2 would be too small."""
    P = np.array([[0.5, 0.5, 0.0], [0.0, 0.999, 0.001], [0.3, 0.0, 0.7]])
    logpi = Chain(P).log_stationary.value

    def gap(lp):
        return reversible_gap(additive_reversibilization(P, lp), lp, name="g", dense=True)[0].value

    g = gap(logpi)
    moved = []
    for signs in [(1, -1, 1), (1, -1, -1), (-1, 1, 1), (-1, 1, -1), (1, 1, -1), (-1, -1, 1)]:
        pt = np.exp(logpi) * (1 + delta * np.array(signs))
        pt /= pt.sum()
        d = float(np.abs(pt / np.exp(logpi) - 1).max())
        change = abs(gap(np.log(pt)) / g - 1)
        assert change <= 2 * d / (1 - d)
        moved.append(change / d)
    assert max(moved) > 0.5


def test_a_non_reversible_gap_carries_the_error_of_its_stationary_law():
    P = glauber_kernel(noisy_ferromagnet().at_temperature(0.05)).toarray()
    ch = Chain(P)
    delta = ch.stationary.rel_error
    assert ch.additive_gap.rel_error >= 2 * delta and "widened by pi's error" in ch.additive_gap.method
    assert ch.multiplicative_gap.rel_error >= 2 * delta and ch.conductance.rel_error >= 2 * delta


def test_an_uncertified_sparse_law_gives_enclosures_not_numbers(monkeypatch):
    """At T = 0.005 the Krylov law cannot be certified (pi spans 1e-120; at T = 0.02 it is, to 2.4e-4):
    the gap, the conductance and t_mix become enclosures that contain the dense (certified) values,
    with numbers on both sides of the conductance in [0, 1]. (Below DENSE_STATIONARY_LIMIT states such a
    law is replaced by GTH's: the limit is lowered to 0 to reach the path of a large chain.)"""
    monkeypatch.setattr(stationary_module, "DENSE_STATIONARY_LIMIT", 0)
    P = glauber_kernel(noisy_ferromagnet().at_temperature(0.005))
    sparse, dense = Chain(P, dense_limit=4), Chain(P.toarray())
    assert sparse.stationary.rel_error is None and "normwise" in sparse.stationary.details["accuracy"]
    gap, ref = sparse.additive_gap, dense.additive_gap.value
    assert not gap.resolved and gap.lower <= ref <= gap.upper
    cond, ref = sparse.conductance, dense.conductance  # the dense one is an enclosure too, here
    assert not cond.resolved and 0.0 <= cond.lower <= cond.upper <= 1.0
    assert cond.lower <= ref.upper and ref.lower <= cond.upper  # both contain Phi*
    t = sparse.mixing_time()
    assert not t.resolved and t.lower is not None
