"""The standard Markov-chain facts (THEOREMS.md 2C): searches that hold with weakened bounds caught,
and closed forms on two-state chains where the facts are attained."""

import numpy as np
import pytest

from mlmix.theory.chain.markov_chain import Chain
from mlmix.verify.runner import load_theorems
from mlmix.verify.theorems import facts
from mlmix.verify.verdicts import REGISTRY, search

load_theorems()
FACTS = [i for i, t in REGISTRY.items() if t.paper == "facts"]


def test_every_fact_of_section_2c_is_registered():
    numbers = sorted(REGISTRY[i].number.split(" (")[0] for i in FACTS)
    assert numbers == [f"Fact 2C.{k}" for k in range(1, 8)]


@pytest.mark.parametrize("fact_id", FACTS)
def test_fact_holds_and_its_weakened_bound_is_caught(fact_id):
    report = search(REGISTRY[fact_id], examples=40, seed=3)
    assert report.status == "holds", report.counterexample
    assert report.weakened == "caught", report.weakened_parts
    assert report.regimes["nonreversible"] >= 1  # non-reversible chains are in the sample


@pytest.mark.parametrize("check_id", ["engine.generator-uniformisation", "engine.pcca-coarse"])
def test_engine_check_holds_and_its_weakened_form_is_caught(check_id):
    report = search(REGISTRY[check_id], examples=20, seed=3)
    assert report.status == "holds", report.counterexample
    assert report.weakened == "caught", report.weakened_parts


def two_state(a: float, b: float) -> np.ndarray:
    return np.array([[1 - a, a], [b, 1 - b]])


def test_two_state_closed_forms():
    """P = [[1-a, a], [b, 1-b]]: pi = (b, a)/(a+b), eigenvalue 1 - a - b, d(t) = max(pi) |1-a-b|^t,
    sigma^2(1_{0}) = pi_0 pi_1 (2 - a - b)/(a + b); the symmetric chain attains the eigenvalue bound
    d(t) = |lambda|^t / 2 and Cheeger's upper bound gap = 2 Phi*."""
    a, b = 0.1, 0.3
    chain = Chain(two_state(a, b))
    pi = np.array([b, a]) / (a + b)
    assert np.allclose(chain.stationary.value, pi, rtol=1e-14)
    lam = 1 - a - b
    for t in (1, 3, 7):
        assert float(chain.tv_distance(t)) == pytest.approx(pi.max() * lam**t, rel=1e-9)
    f = np.array([1.0, 0.0])
    assert float(chain.asymptotic_variance(f)) == pytest.approx(pi[0] * pi[1] * (2 - a - b) / (a + b), rel=1e-10)
    sym = Chain(two_state(a, a))
    assert float(sym.tv_distance(5)) == pytest.approx((1 - 2 * a) ** 5 / 2, rel=1e-9)
    assert float(sym.additive_gap) == pytest.approx(2 * float(sym.conductance), rel=1e-12)


def test_fill_is_attained_at_time_zero_with_half_mass():
    """4 (1 - pi(x))^2 = (1 - pi(x)) / pi(x) when pi(x) = 1/2: Fill's bound is an equality at t = 0."""
    main, details = facts._fill_parts(Chain(two_state(0.2, 0.2)), (1,), (0,))
    assert main.lhs == pytest.approx(main.rhs, rel=1e-12) and details["t"] == 0
