"""The user's pytest file (named so that mlmix's own test run does not collect it: one test here
fails on purpose). tests/test_user_theorems.py runs it in a subprocess."""

from mybounds.bounds import gap_from_contraction, gap_without_n

from mlmix.testing import assert_at_least, assert_close
from mlmix.theorem import assert_holds


def test_gap_from_contraction_holds():
    assert_holds(gap_from_contraction, examples=20)


def test_gap_without_n_is_refuted():
    assert_holds(gap_without_n, examples=20)  # fails with a shrunk counterexample


def test_fixtures_and_certified_assertions(metastable_chain, exact_chain, ising_source):
    assert_close(metastable_chain.spectral_gap, 3e-12, rtol=1e-9)
    assert_at_least(exact_chain(ising_source).spectral_gap, 0.01)
