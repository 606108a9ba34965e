"""The questions the peers' users ask (PyDTMC, QuantEcon.py, deeptime): eigenvalues with error bounds,
implied timescales, per-class stationary laws, cyclic classes, absorbing chains, and the exact zero
absolute gap of a periodic chain; checked against exact rationals and closed forms."""

import cmath
import math
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.sources.conditionals import IsingModel


def _rational_inverse(M: list[list[Fraction]]) -> list[list[Fraction]]:
    n = len(M)
    A = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(M)]
    for c in range(n):
        p = next(r for r in range(c, n) if A[r][c] != 0)
        A[c], A[p] = A[p], A[c]
        A[c] = [x / A[c][c] for x in A[c]]
        for r in range(n):
            if r != c and A[r][c] != 0:
                A[r] = [x - A[r][c] * y for x, y in zip(A[r], A[c])]
    return [row[n:] for row in A]


def test_absorbing_chain_against_exact_rationals(matrix_chain_of):
    """PyDTMC's and the issue's example [[1,0,0],[.2,.7,.1],[.3,.3,.4]]: N = (I - Q)^-1 exactly."""
    P = [[Fraction(1), Fraction(0), Fraction(0)], [Fraction(1, 5), Fraction(7, 10), Fraction(1, 10)],
         [Fraction(3, 10), Fraction(3, 10), Fraction(2, 5)]]
    chain = matrix_chain_of(np.array(P, dtype=float))
    N_exact = _rational_inverse([[int(i == j) - P[1 + i][1 + j] for j in range(2)] for i in range(2)])
    N = chain.fundamental_matrix()
    assert list(N.details["transient"]) == [1, 2]
    exact = np.array(N_exact, dtype=float)
    assert np.abs(N.value / exact - 1).max() <= N.rel_error
    steps = chain.expected_steps_to_absorption()
    np.testing.assert_allclose(steps.value, [float(sum(r)) for r in N_exact], rtol=steps.rel_error)
    B = chain.absorption_probabilities()
    np.testing.assert_allclose(B.value, [[1.0], [1.0]], rtol=B.rel_error)


def test_gamblers_ruin(matrix_chain_of):
    """Fair walk on 0..n absorbed at both ends: P_i(hit n) = i / n and E_i steps = i (n - i)."""
    n = 40
    P = np.zeros((n + 1, n + 1))
    P[0, 0] = P[n, n] = 1.0
    for i in range(1, n):
        P[i, i - 1] = P[i, i + 1] = 0.5
    for chain in (matrix_chain_of(P), Chain(sp.csr_array(P))):
        T = np.arange(1, n)
        B = chain.absorption_probabilities()
        assert [list(c) for c in B.details["classes"]] == [[0], [n]]
        assert np.abs(B.value[:, 1] / (T / n) - 1).max() <= B.rel_error
        steps = chain.expected_steps_to_absorption()
        assert np.abs(steps.value / (T * (n - T)) - 1).max() <= steps.rel_error
        assert chain.fundamental_matrix().value.shape == (n - 1, n - 1)


def test_per_class_stationary_laws(matrix_chain_of):
    """QuantEcon's reducible example: two closed classes and a transient state."""
    P = np.array([[0.4, 0.6, 0, 0, 0], [0.2, 0.8, 0, 0, 0], [0, 0, 0.5, 0.5, 0], [0, 0, 0.3, 0.7, 0],
                  [0.1, 0, 0.2, 0, 0.7]])
    laws = matrix_chain_of(P).stationary_distributions()
    exact = np.array([[0.25, 0.75, 0, 0, 0], [0, 0, 0.375, 0.625, 0]])
    np.testing.assert_allclose(laws.value, exact, rtol=max(laws.rel_error, 1e-15), atol=0)


def test_cyclic_classes_and_the_exact_zero_absolute_gap_of_a_periodic_chain(matrix_chain_of):
    """A period-3 chain: the absolute spectral gap is exactly 0 (not [0, 2e-15]), t_rel is infinite;
    the eigenvalues include the three cube roots of unity (dense and CSR)."""
    P = np.array([[0, 0.5, 0.5, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0.4, 0.6], [1, 0, 0, 0, 0], [1, 0, 0, 0, 0]])
    chain = matrix_chain_of(P)
    assert chain.period == 3
    classes = chain.cyclic_classes()
    assert [list(c) for c in classes] == [[0], [1, 2], [3, 4]]
    gap = chain.absolute_spectral_gap
    assert gap.value == 0 and gap.rel_error == 0 and "period 3" in gap.method
    assert chain.relaxation_time.upper is None
    ev = chain.eigenvalues()
    cube_roots = sorted(np.abs(np.asarray(ev.value)[:3] ** 3 - 1))
    assert max(cube_roots) <= 3 * ev.details["error_bounds"][:3].max() + 1e-15


def test_reversible_eigenvalues_and_timescales_of_a_metastable_two_state_chain(matrix_chain_of):
    a, b = 1e-12, 3e-12
    chain = matrix_chain_of(np.array([[1 - a, a], [b, 1 - b]]))
    ev = chain.eigenvalues()
    assert ev.value[0] == 1.0 or abs(ev.value[0] - 1) <= ev.details["error_bounds"][0]
    assert abs(ev.value[1] - (1 - a - b)) <= ev.details["error_bounds"][1]
    ts = chain.implied_timescales()
    exact = -1 / math.log1p(-(a + b))
    assert ts.details["lower"][0] <= exact <= ts.details["upper"][0]


def test_non_reversible_eigenvalues_with_condition_numbers(matrix_chain_of):
    """P = (1 - s) I + s C (C the cyclic shift on 5 states) is normal: eigenvalues 1 - s + s w^j
    exactly, condition numbers 1."""
    m, s = 5, 0.3
    P = (1 - s) * np.eye(m) + s * np.roll(np.eye(m), 1, axis=1)
    ev = matrix_chain_of(P).eigenvalues()
    assert np.allclose(ev.details["condition_numbers"], 1.0, atol=1e-12)
    exact = [1 - s + s * cmath.exp(2j * math.pi * j / m) for j in range(m)]
    for lam, err in zip(ev.value, ev.details["error_bounds"]):
        assert min(abs(lam - e) for e in exact) <= err
    assert abs(ev.value[0] - 1) <= ev.details["error_bounds"][0]
    assert np.all(np.diff(np.abs(ev.value)) <= 1e-15)  # decreasing modulus
    ts = matrix_chain_of(P).implied_timescales(3)
    assert ts.value.shape == (2,) and ts.value[0] == pytest.approx(-1 / math.log(abs(exact[1])), rel=1e-12)


def test_sparse_reversible_eigenvalues_against_dense(chain_of):
    """Ising cycle of 13 sites: the top eigenvalues of the sparse chain, and the second of the chain in
    each representation within the two stated error bounds of each other."""
    src = IsingModel(nx.cycle_graph(13), beta=0.4)
    sparse = Chain.from_source(src, representation="sparse")
    ev = sparse.eigenvalues(4)
    op = chain_of(source=src).eigenvalues(2)
    assert abs(ev.value[1] - op.value[1]) <= ev.details["error_bounds"][1] + op.details["error_bounds"][1]
    assert ev.value[0] == pytest.approx(1.0, abs=ev.details["error_bounds"][0] + 1e-15)
    assert np.all(np.diff(ev.value) <= 0)
