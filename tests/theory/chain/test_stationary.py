"""``theory/chain/stationary.py``: the stationary law to relative accuracy in every entry, against exact
rationals (sympy) on a tiny chain and mpmath on metastable ones; the a-posteriori certificate bounds the
real error and grows with it; transient states, several closed classes and bad input."""

import mpmath as mp
import numpy as np
import pytest
import scipy.sparse as sp
import sympy
from chain_representations import MATRIX_REPRESENTATIONS, chain_in
from helpers import two_state

from mlmix.errors import ReducibleChainError
from mlmix.theory.chain.stationary import (
    certified_error,
    compute_stationary,
    log_potential,
    stationary_distribution,
    stationary_law,
)
from mlmix.theory.chain.structure import chain_structure
from mlmix.theory.linalg.elimination import eliminate
from mlmix.theory.reference import birth_death, mp_chain, mp_stationary


def dyadic_chain(n: int, seed: int, denominator: int = 64) -> tuple[np.ndarray, list[list[sympy.Rational]]]:
    """A random positive n-state chain whose entries are k / 64: exact in float64, so the float chain
    and the rational one are the same chain. Returns (P as floats, P as sympy rationals)."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(denominator - n, rng.dirichlet(np.ones(n)), size=n) + 1
    exact = [[sympy.Rational(int(k), denominator) for k in row] for row in counts]
    return counts / denominator, exact


def exact_law(exact: list[list[sympy.Rational]]) -> list[sympy.Rational]:
    """pi P = pi, sum pi = 1 over the rationals (the null space of (P - I)^T)."""
    n = len(exact)
    (v,) = (sympy.Matrix(exact).T - sympy.eye(n)).nullspace()
    return list(v / sum(v))


def rel_errors(pi: np.ndarray, ref) -> np.ndarray:
    return np.array([abs(float((sympy.Rational(float(p)) - r) / r)) for p, r in zip(pi, ref)])


def two_wells(escape_a: float = 1e-13, escape_b: float = 1e-15) -> np.ndarray:
    """Two non-reversible 3-cycles (0 -> 1 -> 2 -> 0 and 3 -> 4 -> 5 -> 3, mostly forwards) joined only by
    2 -> 3 (probability ``escape_a``) and 5 -> 0 (``escape_b``): a metastable chain whose bottleneck ratio,
    hence its gap, is about ``escape_a``."""
    P = np.zeros((6, 6))
    for well in (0, 3):
        for i in range(3):
            x, nxt, prv = well + i, well + (i + 1) % 3, well + (i - 1) % 3
            P[x, nxt], P[x, prv] = 0.5, 0.125
    P[2, 3], P[5, 0] = escape_a, escape_b
    np.fill_diagonal(P, 1 - P.sum(axis=1))
    return P


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gth_law_of_a_random_chain_against_exact_rationals(seed):
    P, exact = dyadic_chain(4, seed)
    assert log_potential(P) is None  # a random positive chain is not reversible: the GTH path
    pi = stationary_law(P)
    assert "GTH" in pi.method and "certificate" in pi.method
    err = rel_errors(pi.value, exact_law(exact))
    assert err.max() <= pi.rel_error < 1e-13  # the bound holds and is a few ulps
    assert abs(pi.value.sum() - 1) < 1e-15 and pi.residual < 1e-15
    np.testing.assert_allclose(pi.log_value, np.log(pi.value), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(stationary_distribution(P), pi.value)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chain_law_of_a_random_chain_against_exact_rationals(seed, matrix_chain_of):
    """Chain.stationary on dense (GTH) and CSR (a Krylov solve on the grounded system): each within its
    certified relative error of the exact rational law."""
    P, exact = dyadic_chain(4, seed)
    pi = matrix_chain_of(P).stationary
    assert pi.rel_error is not None and rel_errors(pi.value, exact_law(exact)).max() <= pi.rel_error < 1e-12


def test_the_certificate_bounds_the_real_error_and_catches_a_perturbation():
    """certified_error on the GTH law is a few ulps and above the true error; the same law with one entry
    moved by 1e-7 gets a bound >= its true error (>= 1e-7), for the dense and the sparse form of P."""
    P, exact = dyadic_chain(4, 7)
    ref = exact_law(exact)
    el = eliminate(P)
    logpi, z = el.log_stationary(), int(el.order[0])
    for form in (P, sp.csr_array(P)):
        good = certified_error(form, logpi, z, el.solve_transposed)
        assert rel_errors(np.exp(logpi), ref).max() <= good < 1e-13
        for x in range(4):
            bad = logpi.copy()
            bad[x] += 1e-7
            true = rel_errors(np.exp(bad - np.log(np.exp(bad).sum())), ref).max()
            assert true > 0.5e-7
            assert true <= certified_error(form, bad, z, el.solve_transposed) < 1e-5


def test_the_certificate_refuses_a_law_with_a_zero_entry():
    P, _ = dyadic_chain(4, 3)
    el = eliminate(P)
    logpi = el.log_stationary()
    logpi[1] = -np.inf
    assert certified_error(P, logpi, int(el.order[0]), el.solve_transposed) == np.inf


def test_metastable_non_reversible_law_to_relative_accuracy_against_mpmath(matrix_representation, matrix_chain_of):
    """Escapes 1e-13 and 1e-30 (bottleneck ratio, an upper bound on the gap, below 1e-12): every entry,
    down to pi ~ 1e-17 in the light well 0..2, to the certified relative accuracy, checked with 60 digits
    (an absolute error of 1e-16 would be all of the light well's mass); Chain.stationary in each matrix
    representation to its own stated accuracy (or none stated)."""
    P = two_wells(1e-13, 1e-30)
    pi = stationary_law(P)
    assert "GTH" in pi.method
    chain_pi = matrix_chain_of(P).stationary
    with mp.workdps(60):
        ref = mp_stationary(mp_chain(P))
        actual = max(abs(float(mp.mpf(float(v)) / r - 1)) for v, r in zip(pi.value, ref))
        chain_actual = max(abs(float(mp.mpf(float(v)) / r - 1)) for v, r in zip(chain_pi.value, ref))
    assert actual <= pi.rel_error < 1e-12
    assert chain_pi.rel_error is None or chain_actual <= chain_pi.rel_error
    light = np.arange(3)
    assert pi.value[light].max() < 1e-16
    bottleneck = float(pi.value[2] * P[2, 3] / pi.value[light].sum())
    assert bottleneck < 1e-12  # it is metastable: gap <= 2 x this ratio
    # the light well's mass relative to the heavy one's (about escape_b / escape_a), to relative accuracy
    assert pi.value[3:].sum() / pi.value[:3].sum() == pytest.approx(
        float(ref[3] + ref[4] + ref[5]) / float(ref[0] + ref[1] + ref[2]), rel=1e-12)


def test_iterative_path_agrees_with_gth_within_its_certificate():
    """dense_limit=0 sends a sparse non-reversible chain to the grounded Krylov solve; its certified
    bound and GTH's together cover the difference."""
    P = sp.csr_array(two_wells(1e-3, 1e-4))
    st = chain_structure(P)
    it, gth = compute_stationary(P, st, dense_limit=0), compute_stationary(P, st)
    assert "GMRES" in it.method or "BiCGSTAB" in it.method
    assert it.rel_error is not None and it.rel_error < 1e-8
    assert np.abs(it.value / gth.value - 1).max() <= it.rel_error + gth.rel_error


def test_reversible_law_from_detailed_balance_in_log_space_below_underflow(matrix_chain_of):
    """The tilted double well (Metropolis) with a barrier of 800: pi spans far below 1e-308, its
    logarithms keep their relative accuracy against mpmath (400 digits, no underflow there); the same
    from Chain.stationary on dense and CSR."""
    P, V = birth_death(m=8, depth=800.0, tilt=3.0)
    phi_err = log_potential(P)
    assert phi_err is not None
    if matrix_chain_of.args == ("operator",):  # a Krylov law cannot reach 1e-700: not bounded, and said
        ch = matrix_chain_of(P)
        assert ch.stationary.rel_error is None and "GMRES" in ch.stationary.method
        assert not ch.spectral_gap.resolved and ch.spectral_gap.lower == 0.0
        return
    pi = matrix_chain_of(P).stationary
    np.testing.assert_array_equal(pi.log_value, stationary_law(P).log_value)
    assert "detailed balance" in pi.method and pi.value.min() == 0.0 and np.isfinite(pi.log_value).all()
    with mp.workdps(400):
        ref = [float(mp.log(r)) for r in mp_stationary(mp_chain(P))]
    assert min(ref) < -700
    # relative error of pi <= rel_error means |log pi - log ref| <= about rel_error
    np.testing.assert_allclose(pi.log_value, ref, rtol=0, atol=max(2 * pi.rel_error, 1e-300))
    assert pi.rel_error < 1e-10
    # the closed form of the potential: pi proportional to exp(-V), as exact as the float entries of P
    np.testing.assert_allclose(pi.log_value - pi.log_value.max(), -(V - V.min()), rtol=1e-12, atol=1e-9)


def test_kolmogorov_criterion():
    cyc = np.array([[0.5, 0.4, 0.1], [0.1, 0.5, 0.4], [0.4, 0.1, 0.5]])  # a biased rotation: not reversible
    assert log_potential(cyc) is None
    assert log_potential(np.array([[0.5, 0.5, 0], [0, 0.5, 0.5], [0.5, 0, 0.5]])) is None  # one-way edges
    phi, err = log_potential(two_state(0.2, 0.05))
    assert phi.max() == 0 and np.exp(phi[1] - phi[0]) == pytest.approx(0.2 / 0.05, rel=1e-15)
    assert (err >= 0).all() and err.max() < 1e-14
    # the symmetric 3-cycle is reversible (uniform law): both paths give 1/3 to a few ulps
    sym = np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]])
    np.testing.assert_allclose(stationary_law(sym).value, 1 / 3, rtol=1e-15)
    np.testing.assert_allclose(compute_stationary(cyc, chain_structure(cyc)).value, 1 / 3, rtol=1e-15)


def test_transient_states_get_zero_mass(matrix_chain_of):
    """States 0, 1 lead into the closed class {2, 3} (a two-state chain): its law there, zero before
    (stationary_law and Chain.stationary on dense and CSR)."""
    P = np.array([[0.5, 0.25, 0.25, 0], [0.25, 0.5, 0, 0.25], [0, 0, 0.75, 0.25], [0, 0, 0.5, 0.5]])
    if matrix_chain_of.args == ("operator",):  # the matrix-free route needs one class: refused by name
        with pytest.raises(ValueError, match="2 transient state"):
            matrix_chain_of(P).stationary
        return
    np.testing.assert_array_equal(matrix_chain_of(P).stationary.value, stationary_law(P).value)
    pi = stationary_law(P)
    np.testing.assert_allclose(pi.value, [0, 0, 2 / 3, 1 / 3], rtol=1e-15, atol=0)
    assert np.isneginf(pi.log_value[:2]).all() and "2 transient" in pi.method
    assert pi.residual < 1e-15 and pi.rel_error < 1e-13


@pytest.mark.parametrize("law", ["stationary_law", *MATRIX_REPRESENTATIONS])
def test_several_closed_classes_are_refused_by_name(law):
    P = np.array([[1.0, 0, 0], [0.25, 0.5, 0.25], [0, 0, 1.0]])
    with pytest.raises(ReducibleChainError, match="2 closed classes") as info:
        stationary_law(P) if law == "stationary_law" else chain_in(law, P).stationary
    assert sorted(c.tolist() for c in info.value.closed_classes) == [[0], [2]]


@pytest.mark.parametrize("bad, err", [
    (np.array([[0.5, 0.6], [0.5, 0.5]]), ValueError),
    (np.array([[np.nan, 1.0], [0.5, 0.5]]), ValueError),
    (np.array([[1.5, -0.5], [0.5, 0.5]]), ValueError),
    (np.ones((2, 3)) / 3, ValueError),
    (np.array([[0.5, 0.5], [0.5, 0.5]], dtype=complex), TypeError),
    ("P", TypeError),
])
def test_bad_input_is_a_one_line_error(bad, err):
    with pytest.raises(err) as info:
        stationary_law(bad)
    assert "\n" not in str(info.value)
