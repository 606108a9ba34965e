"""Asymptotic variance: closed form, autocovariance series, reversible bound, dense vs Krylov."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, settings
from hypothesis import strategies as st
from test_spectral import _double_well, two_state

from mlmix.errors import ConvergenceError
from mlmix.theory import matrices
from mlmix.theory.conditionals import IsingModel, PottsModel, ScoreTable
from mlmix.theory.kernels import glauber_kernel
from mlmix.theory.matrices import krylov_solve
from mlmix.theory.spectral import additive_eigenpairs, spectral_gap, stationary
from mlmix.theory.variance import (
    asymptotic_variance,
    poisson_solution,
    variance_bound_reversible,
)


@settings(max_examples=30)
@given(st.floats(0.01, 0.99), st.floats(0.01, 0.99))
def test_two_state_indicator_closed_form(a, b):
    """sigma^2(1_{state 0}) = a b (2 - a - b) / (a + b)^3."""
    P = two_state(a, b)
    expected = a * b * (2 - a - b) / (a + b) ** 3
    assert asymptotic_variance(P, np.array([1.0, 0.0])) == pytest.approx(expected, rel=1e-10)
    assert asymptotic_variance(P, np.array([3.0, 3.0])) == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=10)
@given(st.integers(0, 10**6))
def test_matches_autocovariance_series(seed):
    """Var(f) + 2 sum_k Cov(f(X_0), f(X_k)), summed until the terms vanish."""
    P = glauber_kernel(ScoreTable.random(2, 3, seed=seed)).toarray()
    pi = stationary(P).pi
    f = np.random.default_rng(seed).standard_normal(P.shape[0])
    fb = f - pi @ f
    total, v = pi @ fb**2, fb.copy()
    for _ in range(5000):
        v = P @ v
        term = pi @ (fb * v)
        total += 2 * term
        if abs(term) < 1e-16:
            break
    assert asymptotic_variance(P, f, pi) == pytest.approx(total, rel=1e-9)
    g, _ = poisson_solution(P, f, pi)
    np.testing.assert_allclose(g - P @ g, fb, atol=1e-12)
    assert abs(pi @ g) < 1e-12


def test_reversible_bound_holds_and_is_attained_by_the_second_eigenvector():
    P = glauber_kernel(IsingModel(nx.cycle_graph(5), couplings=0.8, fields=0.3))
    pi = stationary(P).pi
    rng = np.random.default_rng(0)
    for f in rng.standard_normal((5, P.shape[0])):
        assert asymptotic_variance(P, f, pi) <= variance_bound_reversible(P, f, pi) * (1 + 1e-10)
    _, vecs = additive_eigenpairs(P, pi)
    f2 = vecs[:, 1]
    assert asymptotic_variance(P, f2, pi) == pytest.approx(variance_bound_reversible(P, f2, pi), rel=1e-9)
    gap = spectral_gap(P, pi)
    assert variance_bound_reversible(P, f2, pi) == pytest.approx(2 / gap - 1, rel=1e-9)  # Var(f2) = 1


@pytest.mark.parametrize("kind", ["reversible", "non-reversible"])
def test_dense_and_krylov_paths_agree(monkeypatch, kind):
    src = PottsModel.random(nx.cycle_graph(5), 3, seed=1) if kind == "reversible" else ScoreTable.random(3, 5, seed=1)
    P = glauber_kernel(src)
    pi = stationary(P).pi
    f = src.space.all_states()[:, 0].astype(float) + 0.5 * src.space.all_states()[:, 2]
    dense = asymptotic_variance(P, f, pi)
    monkeypatch.setattr(matrices, "DENSE_LIMIT", 16)
    _, method = poisson_solution(P, f, pi)
    assert ("CG" in method) == (kind == "reversible")
    assert asymptotic_variance(P, f, pi) == pytest.approx(dense, rel=1e-8)


def test_metastable_variance_is_large_and_consistent(monkeypatch):
    P, pi = _double_well()
    f = (np.arange(P.shape[0]) > P.shape[0] // 2).astype(float)  # in the right well
    dense = asymptotic_variance(P, f, pi)
    assert dense > 1e4
    assert dense <= variance_bound_reversible(P, f, pi) * (1 + 1e-8)
    monkeypatch.setattr(matrices, "DENSE_LIMIT", 8)
    assert asymptotic_variance(sp.csr_array(P), f, pi) == pytest.approx(dense, rel=1e-6)


def test_krylov_failure_raises_convergence_error():
    A = sp.diags_array(np.linspace(1e-6, 1, 400))
    op = spla.aslinearoperator(A)
    with pytest.raises(ConvergenceError, match="did not converge"):
        krylov_solve(op, np.ones(400), spd=True, maxiter=2)
    x, method = krylov_solve(op, np.ones(400), spd=True, maxiter=5000)
    np.testing.assert_allclose(A @ x, 1.0, rtol=1e-7)
    assert "CG" in method


def test_bad_functions():
    P = two_state(0.2, 0.3)
    with pytest.raises(ValueError, match="vector"):
        asymptotic_variance(P, np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        asymptotic_variance(P, np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="not reversible"):
        variance_bound_reversible(glauber_kernel(ScoreTable.random(2, 3, seed=1)), np.ones(8))
