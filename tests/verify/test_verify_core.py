"""The verification framework: parts that can be weakened, tolerances, tightness at the floor, and a
search that finds a false statement and its weakened forms."""

import math

import pytest
from hypothesis import strategies as st

from mlmix.verify.verdicts import (
    Applicability,
    Observation,
    Part,
    Theorem,
    UndefinedSide,
    compare,
    part,
    search,
    tightness_summary,
    verdict,
)


def test_weakening_scales_the_right_side_in_the_failing_direction():
    upper = Part("u", 0.6, 1.0, "<=")
    assert upper.holds() and not upper.holds(0.5) and upper.bound(0.5) == 0.5
    lower = Part("l", 1.5, 1.0, ">=")
    assert lower.holds() and not lower.holds(0.5) and lower.bound(0.5) == 2.0
    ident = Part("i", 3.0, 3.0, "==")
    assert ident.holds() and not ident.holds(0.5)
    zero = Part("z", 0.0, 0.0, "==")  # 0 = 0 cannot be weakened by scaling: the framework must notice
    assert zero.holds(0.5)
    negative = Part("n", -2.0, -1.0, "<=")  # a negative bound tightens by moving away from zero
    assert negative.holds() and negative.bound(0.5) == -2.0 and not Part("n", -1.5, -1.0, "<=").holds(0.5)


def test_errors_decide_holding_and_tightness():
    p = Part("p", 1.0 + 1e-12, 1.0, "<=", 1e-11, 0.0)
    assert p.holds() and p.slack == 0.0  # inside the error: no slack is reported, not -1e-12
    assert not Part("p", 1.0 + 1e-9, 1.0, "<=", 1e-11, 0.0).holds()
    floor = Part("f", 1e-20, 0.0, "<=", 1e-16, 0.0)  # e.g. softmax roundoff against a zero bound
    assert floor.holds() and floor.tightness is None and not floor.resolved
    resolved = part("r", 0.25, 1.0, "<=")
    assert resolved.tightness == pytest.approx(4.0) and resolved.tightness_error < 1e-8
    summary = tightness_summary([Observation({}, verdict(floor)), Observation({}, verdict(resolved))])
    assert summary["resolved"] == 1 and summary["at_floor"] == 1 and summary["best"] == pytest.approx(4.0)


def test_nan_is_never_a_verdict_and_relation_is_checked():
    with pytest.raises(UndefinedSide, match="side lhs of 'x'"):  # an error of the check, not "fails"
        Part("x", math.nan, 1.0, "<=")
    with pytest.raises(ValueError):
        Part("x", 1.0, 1.0, "<")


class _Sqrt(Theorem):
    """sqrt(x) <= x on [1, 100]: true, tight at x = 1, so every weakening is caught."""

    id = "test.sqrt"
    paper = "glauber"
    number = "test"
    statement = "sqrt(x) <= x for x >= 1"

    def strategy(self):
        return st.integers(1, 100)

    def hypotheses(self, instance):
        return Applicability(True)

    def check(self, instance):
        return compare(math.sqrt(instance), float(instance), "<=")


def test_search_reports_holds_weakened_caught_and_tightness():
    report = search(_Sqrt(), examples=50, seed=0)
    assert report.status == "holds" and report.weakened == "caught"
    assert report.tightness["best"] == pytest.approx(1.0)
    weakened = search(_Sqrt(), examples=50, seed=0, weaken=0.5)
    assert weakened.status == "fails" and weakened.counterexample["instance"] == "1"


class _Loose(_Sqrt):
    """log(x) <= x: true and never within a factor 2, so the weakened bound is missed."""

    id = "test.loose"

    def strategy(self):
        return st.integers(1, 100)

    def check(self, instance):
        return compare(math.log(instance) + 0.1, float(instance) * 10, "<=")


def test_a_check_that_cannot_be_caught_is_reported_missed():
    assert search(_Loose(), examples=30, seed=0).weakened == "missed"
