"""Metastable non-reversible chains held as CSR below the dense limit (``dense_limit=0`` forces the Krylov
route): the stationary law is GTH's, to its certified entrywise accuracy against 400-digit mpmath, once
the Krylov law's certificate fails; a law with unresolved (zero) entries gives honest answers
downstream (no NaN, no numpy LinAlgError); the Lanczos engine turns non-finite products into
ConvergenceError."""

import mpmath as mp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from chain_representations import chain_in
from hypothesis import given, settings
from hypothesis import strategies as st
from test_stationary import two_wells

import mlmix.theory.chain.stationary as stationary_module
from mlmix.errors import ConvergenceError, UnresolvedError
from mlmix.theory.chain.spectral import lanczos_gap, time_reversal
from mlmix.theory.chain.stationary import compute_stationary
from mlmix.theory.chain.structure import chain_structure
from mlmix.theory.linalg.krylov import lanczos
from mlmix.theory.reference import mp_chain, mp_stationary


def max_rel_error(value: np.ndarray, log_value: np.ndarray, P: np.ndarray) -> float:
    """max_x |pi_hat(x) / pi(x) - 1| against mpmath with 400 digits (escapes down to 1e-300 need more
    than 300 in the bordered solve), from log pi_hat (exact below 1e-308 too)."""
    with mp.workdps(400):
        ref = mp_stationary(mp_chain(P))
        return max(abs(float(mp.exp(mp.mpf(float(lv))) / r - 1)) for lv, r in zip(log_value, ref))


def assert_honest_csr_law(P: np.ndarray) -> None:
    law = chain_in("csr", P).stationary
    assert np.isfinite(law.value).all() and np.isfinite(law.log_value).all()
    assert law.rel_error is not None and law.rel_error < 1e-12
    assert max_rel_error(law.value, law.log_value, P) <= law.rel_error


@pytest.mark.parametrize("escape_a, escape_b", [(1e-13, 1e-30), (1e-9, 1e-200), (1e-200, 1e-9)])
def test_csr_metastable_law_to_its_certified_relative_accuracy(escape_a, escape_b):
    """The Krylov law of these chains has exact zeros (its residual ~1e-13 bounds nothing); the law
    given is GTH's, every entry (down to 1e-191) to its stated accuracy, and says why it is GTH's."""
    P = two_wells(escape_a, escape_b)
    law = compute_stationary(sp.csr_array(P), chain_structure(P), dense_limit=0)
    assert "GTH" in law.method and "Krylov" in law.method
    assert_honest_csr_law(P)


@settings(max_examples=15, deadline=None)
@given(st.integers(-300, -1), st.integers(-300, -1))
def test_csr_law_of_two_wells_is_honest_for_any_escapes(log_a, log_b):
    """Any pair of escape probabilities 10^a, 10^b: Chain.stationary on CSR is finite, states a bound
    below 1e-12, and meets it against mpmath."""
    assert_honest_csr_law(two_wells(10.0**log_a, 10.0**log_b))


def test_an_unresolved_krylov_law_gives_honest_answers_downstream(monkeypatch):
    """With the GTH fallback out of reach (limit 0), the Krylov law of a metastable chain keeps its
    zero entries: .stationary states no entrywise bound (no exception), and the additive gap built
    from it is missing with the reason instead of NaN entries and a LinAlgError from Lanczos."""
    monkeypatch.setattr(stationary_module, "DENSE_STATIONARY_LIMIT", 0)
    chain = chain_in("csr", two_wells(1e-13, 1e-30))
    law = chain.stationary
    assert "GTH" not in law.method and law.rel_error is None and (law.value == 0).any()
    gap = chain.additive_gap
    assert gap.value is None and "zero entries" in gap.reason


def test_time_reversal_refuses_a_law_with_a_zero_entry():
    P = sp.csr_array(two_wells())
    with pytest.raises(UnresolvedError, match="undefined"):
        time_reversal(P, np.array([0.0, 0.0, 0.0, -1.0, -np.inf, -np.inf]))


def nan_operator(n: int) -> spla.LinearOperator:
    return spla.LinearOperator((n, n), matvec=lambda v: np.full(n, np.nan), dtype=np.float64)


def test_lanczos_turns_non_finite_products_into_a_convergence_error():
    with pytest.raises(ConvergenceError, match="non-finite"):
        lanczos(nan_operator(30), np.ones(30), tol=lambda theta: 1e-10)


def test_lanczos_gap_of_a_non_finite_operator_is_missing_with_the_reason():
    gap, mode = lanczos_gap(nan_operator(30), np.full(30, -np.log(30)), "g", "Lanczos")
    assert gap.value is None and "non-finite" in gap.reason and np.isfinite(mode).all()
