"""Stationary law, reversibility, reversibilizations, Dirichlet form and gaps: closed forms,
identities, dense vs sparse paths, metastable and reducible chains, bad input."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.errors import ReducibleChainError
from mlmix.theory import matrices
from mlmix.theory.conditionals import IsingModel, LogWeightTable, PottsModel, ScoreTable
from mlmix.theory.kernels import block_kernel, glauber_kernel
from mlmix.theory.space import StateSpace
from mlmix.theory.spectral import (
    absolute_spectral_gap,
    additive_eigenpairs,
    additive_gap,
    additive_reversibilization,
    check_irreducible,
    communicating_classes,
    dirichlet_form,
    eigenvalues,
    is_reversible,
    log_potential,
    multiplicative_gap,
    multiplicative_reversibilization,
    poincare_constant,
    relaxation_time,
    reversible_eigenvalues,
    spectral_gap,
    stationary,
    time_reversal,
)
from mlmix.validation import check_transition_matrix


def two_state(a, b):
    return np.array([[1 - a, a], [b, 1 - b]])


@settings(max_examples=30)
@given(st.floats(0.01, 0.99), st.floats(0.01, 0.99))
def test_two_state_closed_forms(a, b):
    P = two_state(a, b)
    np.testing.assert_allclose(stationary(P).pi, np.array([b, a]) / (a + b), rtol=1e-12)
    assert is_reversible(P)
    assert spectral_gap(P) == pytest.approx(a + b, rel=1e-12)
    assert additive_gap(P) == pytest.approx(a + b, rel=1e-12)
    assert absolute_spectral_gap(P) == pytest.approx(1 - abs(1 - a - b), abs=1e-12)
    assert relaxation_time(P) == pytest.approx(1 / (1 - abs(1 - a - b)), rel=1e-9)
    assert poincare_constant(P) == pytest.approx(1 / (a + b), rel=1e-12)


@pytest.mark.parametrize("q, n", [(2, 1), (2, 3), (3, 2), (2, 5), (3, 4)])
def test_product_measure_glauber_gap_is_one_over_n(q, n):
    space = StateSpace(q, n)
    rng = np.random.default_rng(q * 10 + n)
    marg = rng.standard_normal((n, q))
    lw = sum(marg[i][space.all_states()[:, i]] for i in range(n))
    P = glauber_kernel(LogWeightTable(space, lw))
    assert spectral_gap(P) == pytest.approx(1.0 / n, abs=1e-12)
    assert additive_gap(P) == pytest.approx(1.0 / n, abs=1e-12)


@settings(max_examples=15)
@given(st.integers(0, 10**6), st.sampled_from([0.3, 1.0]))
def test_dirichlet_form_of_p_equals_that_of_additive_reversibilization(seed, T):
    P = glauber_kernel(ScoreTable.random(3, 3, seed=seed, temperature=T))
    pi = stationary(P).pi
    S = additive_reversibilization(P, pi)
    rng = np.random.default_rng(seed)
    f, g = rng.standard_normal((2, P.shape[0]))
    assert dirichlet_form(P, f, g, pi) == pytest.approx(dirichlet_form(S, f, g, pi), rel=1e-10, abs=1e-12)
    # E(f, f) = (1/2) sum pi(x) P(x,y) (f(x) - f(y))^2 by definition
    D = P.toarray()
    direct = 0.5 * np.sum(pi[:, None] * D * (f[:, None] - f[None, :]) ** 2)
    assert dirichlet_form(P, f, pi=pi) == pytest.approx(direct, rel=1e-10)
    # Poincare: Var(f) <= C E(f, f)
    var = pi @ (f - pi @ f) ** 2
    assert var <= poincare_constant(P, pi) * dirichlet_form(P, f, pi=pi) * (1 + 1e-10)


@settings(max_examples=15)
@given(st.integers(0, 10**6))
def test_time_reversal_and_reversibilizations(seed):
    P = glauber_kernel(ScoreTable.random(2, 4, seed=seed))
    pi = stationary(P).pi
    R = time_reversal(P, pi)
    np.testing.assert_allclose(R.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(pi @ R, pi, atol=1e-14)
    np.testing.assert_allclose(time_reversal(R, pi).toarray(), P.toarray(), atol=1e-12)
    S = additive_reversibilization(P, pi)
    assert is_reversible(S)
    M = multiplicative_reversibilization(P, pi)
    assert is_reversible(M, pi)
    np.testing.assert_allclose(stationary(P).residual, 0, atol=1e-13)
    # multiplicative gap = 1 - sigma_2(B)^2 with B = D^1/2 P D^-1/2
    s = np.sqrt(pi)
    B = P.toarray() * s[:, None] / s[None, :]
    sig = np.linalg.svd(B, compute_uv=False)
    assert multiplicative_gap(P, pi) == pytest.approx(1 - sig[1] ** 2, abs=1e-12)


def test_reversible_identities_between_gaps():
    P = glauber_kernel(IsingModel(nx.cycle_graph(5), couplings=0.7, fields=0.2))
    pi = stationary(P).pi
    abs_gap = absolute_spectral_gap(P, pi)
    # reversible: P*P = P^2, so 1 - lambda_2(P*P) = 1 - lambda_*^2
    assert multiplicative_gap(P, pi) == pytest.approx(1 - (1 - abs_gap) ** 2, abs=1e-12)
    evals = np.sort(np.linalg.eigvals(P.toarray()).real)
    assert spectral_gap(P, pi) == pytest.approx(1 - evals[-2], abs=1e-12)
    assert reversible_eigenvalues(P, pi, "SA", 1)[0] == pytest.approx(evals[0], abs=1e-12)
    assert abs(eigenvalues(P, 1)[0] - 1) < 1e-12
    vals, vecs = additive_eigenpairs(P, pi, k=2)
    np.testing.assert_allclose(P @ vecs[:, 1], vals[1] * vecs[:, 1], atol=1e-12)
    np.testing.assert_allclose(pi @ vecs**2, 1.0, atol=1e-12)


def test_non_reversible_spectral_gap_refuses():
    P = glauber_kernel(ScoreTable.random(2, 3, seed=1))
    with pytest.raises(ValueError, match="not reversible"):
        spectral_gap(P)
    # absolute gap from the moduli of P's eigenvalues
    ev = np.linalg.eigvals(P.toarray())
    second = np.sort(np.abs(ev))[-2]
    assert absolute_spectral_gap(P) == pytest.approx(1 - second, abs=1e-12)


def test_low_temperature_non_reversibility_among_tiny_masses_is_detected():
    """Detailed balance can fail only where pi is ~1e-19 of its maximum; a test scaled by
    max pi(x)P(x,y) misses it, Kolmogorov's criterion in log space does not."""
    P = glauber_kernel(ScoreTable.random(2, 4, seed=1, temperature=0.01))
    pi = stationary(P).pi
    assert pi.min() < 1e-15
    Q = P.toarray() * pi[:, None]
    assert np.abs(Q - Q.T).max() < 1e-10 * Q.max()  # invisible at the global scale
    assert log_potential(P) is None
    assert not is_reversible(P, pi)
    # the reversible potential keeps full relative accuracy at low temperature
    ising = IsingModel(nx.cycle_graph(6), beta=4.0, fields=0.5)
    np.testing.assert_allclose(stationary(glauber_kernel(ising)).pi, ising.joint(), rtol=1e-12)


def _with_dense_limit(monkeypatch, limit):
    monkeypatch.setattr(matrices, "DENSE_LIMIT", limit)


@pytest.mark.parametrize("kind", ["reversible", "non-reversible"])
def test_dense_and_sparse_paths_agree(monkeypatch, kind):
    src = (PottsModel.random(nx.cycle_graph(5), 3, seed=2) if kind == "reversible"
           else ScoreTable.random(3, 5, seed=2))
    P = glauber_kernel(src)
    dense = stationary(P.toarray())
    figures = lambda M, pi: (additive_gap(M, pi), absolute_spectral_gap(M, pi), multiplicative_gap(M, pi))  # noqa
    dense_figs = figures(P.toarray(), dense.pi)
    _with_dense_limit(monkeypatch, 16)
    sparse = stationary(P)
    np.testing.assert_allclose(sparse.pi, dense.pi, rtol=1e-8)
    np.testing.assert_allclose(figures(P, sparse.pi), dense_figs, rtol=1e-7)
    if kind == "reversible":
        monkeypatch.undo()
        g = spectral_gap(P)
        _with_dense_limit(monkeypatch, 16)
        assert spectral_gap(P) == pytest.approx(g, rel=1e-8)
    else:
        assert "ARPACK" in sparse.method or "BiCGSTAB" in sparse.method


def _double_well(m=40, depth=9.0):
    """Birth-death chain on 0..2m with pi ∝ exp(-V), V a double well with barrier ``depth``."""
    x = np.linspace(-1, 1, 2 * m + 1)
    V = depth * (x**2 - 1) ** 2
    N = V.size
    P = np.zeros((N, N))
    for k in range(N):
        for j in (k - 1, k + 1):
            if 0 <= j < N:
                P[k, j] = 0.5 * min(1.0, np.exp(V[k] - V[j]))  # Metropolis
        P[k, k] = 1 - P[k].sum()
    pi = np.exp(-V)
    return P, pi / pi.sum()


def test_metastable_double_well(monkeypatch):
    P, pi_true = _double_well()
    st_ = stationary(P)
    np.testing.assert_allclose(st_.pi, pi_true, rtol=1e-11)
    gap = spectral_gap(P)
    assert 5e-7 < gap < 2e-6  # the regime of a gap ~1e-6
    # cross-check against a symmetric eigensolver in extended precision-free form: eigvals of P
    ev = np.sort(np.linalg.eigvals(P).real)
    assert gap == pytest.approx(1 - ev[-2], rel=1e-6)
    _with_dense_limit(monkeypatch, 8)
    assert additive_gap(sp.csr_array(P), st_.pi) == pytest.approx(gap, rel=1e-6)


def test_two_closed_classes_are_named():
    P = np.array([[0.5, 0.5, 0, 0, 0], [0.5, 0.5, 0, 0, 0], [0.2, 0, 0.6, 0.2, 0], [0, 0, 0, 0.3, 0.7],
                  [0, 0, 0, 0.4, 0.6]])
    classes, closed = communicating_classes(P)
    assert sorted(tuple(c) for c, cl in zip(classes, closed) if cl) == [(0, 1), (3, 4)]
    with pytest.raises(ReducibleChainError, match="2 closed") as err:
        stationary(P)
    assert sorted(tuple(c) for c in err.value.closed_classes) == [(0, 1), (3, 4)]
    with pytest.raises(ReducibleChainError):
        check_irreducible(sp.csr_array(P))
    with pytest.raises(ReducibleChainError):
        spectral_gap(P)


def test_gaps_of_a_reducible_chain_with_given_pi_are_exactly_zero():
    # block dynamics that never resamples site 2: two closed classes, the joint is stationary and
    # 1_{x_2 = 0} has E(f, f) = 0, so every gap is 0 and C = inf (the eigensolvers alone return
    # +-1e-16 noise here, i.e. a Poincaré constant of 9e15)
    src = LogWeightTable.random(StateSpace(2, 3), 1)
    P = block_kernel(src, [(0,), (1,), (2,)], [0.5, 0.5, 0.0]).toarray()
    pi = src.joint()
    assert len(communicating_classes(P)[0]) == 2 and np.allclose(pi @ P, pi)
    for M in (P, sp.csr_array(P)):
        assert additive_gap(M, pi) == 0.0
        assert multiplicative_gap(M, pi) == 0.0
        assert poincare_constant(M, pi) == np.inf


def test_one_state_chain_has_no_gap():
    for gap in (additive_gap, multiplicative_gap, spectral_gap):
        with pytest.raises(ValueError, match=">= 2 states"):
            gap(np.ones((1, 1)))


def test_explicit_zeros_do_not_mutate_the_callers_matrix():
    data = np.array([0.5, 0.5, 0.0, 0.25, 0.5, 0.25, 0.0, 0.5, 0.5])
    P = sp.csr_array((data.copy(), np.tile([0, 1, 2], 3), [0, 3, 6, 9]), shape=(3, 3))
    communicating_classes(P)
    stationary(P)
    assert P.nnz == 9 and np.array_equal(P.data, data)


@pytest.mark.parametrize("bad, exc, msg", [
    (np.ones((2, 3)) / 3, ValueError, "square"),
    (np.ones(4), ValueError, "2-dimensional"),
    (np.array([[0.5, np.nan], [0.5, 0.5]]), ValueError, "NaN"),
    (np.array([[1.5, -0.5], [0.5, 0.5]]), ValueError, "negative"),
    (np.array([[0.5, 0.4], [0.5, 0.5]]), ValueError, "row 0"),
    (np.zeros((0, 0)), ValueError, "non-empty"),
    ("P", TypeError, "numpy array"),
])
def test_bad_matrices(bad, exc, msg):
    with pytest.raises(exc, match=msg):
        check_transition_matrix(bad)
    with pytest.raises(exc):
        stationary(bad)


def test_tolerance_of_row_sums_and_bad_pi():
    check_transition_matrix(np.array([[0.5, 0.5 + 5e-10], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="sum to 1"):
        check_transition_matrix(sp.csr_array(np.array([[0.5, 0.5 + 5e-9], [0.5, 0.5]])))
    P = two_state(0.2, 0.3)
    for pi in ([0.5, 0.6], [1.0, 0.0], [0.2, 0.3, 0.5], [np.nan, 1.0]):
        with pytest.raises(ValueError, match="pi"):
            additive_gap(P, np.array(pi))


def test_underflowing_stationary_law_is_reported():
    # independent spins, one flip costs e^{-300}: P is fine, pi spans e^{1800} and underflows
    P = glauber_kernel(IsingModel(nx.empty_graph(6), fields=1.0, beta=150.0))
    assert P.toarray().min(initial=1, where=P.toarray() > 0) > 1e-140
    with pytest.raises(ValueError, match="underflows"):
        additive_gap(P)


def test_sparse_stationary_falls_back_to_bicgstab(monkeypatch):
    import mlmix.theory.spectral as spectral

    P = glauber_kernel(ScoreTable.random(3, 4, seed=8))
    dense = stationary(P.toarray()).pi

    def no_convergence(*args, **kwargs):
        raise spectral.spla.ArpackNoConvergence("forced", np.zeros(0), np.zeros((0, 0)))

    _with_dense_limit(monkeypatch, 16)
    monkeypatch.setattr(spectral.spla, "eigs", no_convergence)
    res = stationary(P)
    assert "BiCGSTAB" in res.method
    np.testing.assert_allclose(res.pi, dense, rtol=1e-7)


def test_gth_keeps_relative_accuracy_where_lu_loses_it(monkeypatch):
    import mlmix.theory.spectral as spectral

    P = glauber_kernel(ScoreTable.random(2, 4, seed=2, temperature=0.02)).toarray()
    gth = stationary(P)
    assert gth.method.startswith("GTH") and gth.pi.min() < 1e-20
    monkeypatch.setattr(spectral, "GTH_LIMIT", 4)
    res = stationary(P)  # LU first, then GTH because pi spans more than 8 decades
    assert "spans" in res.method
    np.testing.assert_allclose(res.pi, gth.pi, rtol=1e-12)
    # relative accuracy of the smallest entry: pi P = pi holds entrywise to a few ulps
    np.testing.assert_allclose(gth.pi @ P, gth.pi, rtol=1e-12)
