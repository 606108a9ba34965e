"""A chain whose GTH elimination underflows (a birth-death well of depth 800: escape probabilities of
its Schur complements below float64's range) says so by name, and the summary says why it stops (after the
stationary law, exact in log space) instead of crashing."""

import pytest

from mlmix.errors import UnderflowError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.reference import birth_death


def test_an_underflowing_elimination_is_an_underflow_error_not_a_crash():
    P, _ = birth_death(m=8, depth=800, tilt=3)
    with pytest.raises(UnderflowError, match="GTH elimination underflows"):
        Chain(P).spectral_gap


def test_the_summary_says_why_it_stops_after_the_stationary_law():
    P, _ = birth_death(m=8, depth=800, tilt=3)
    out = Chain(P).summary()
    assert "GTH elimination underflows" in out["reason"] and "spectral_gap" not in out
    assert out["stationary"]["rel_error"] < 1e-10  # the law itself is exact in log space
