"""The Result contract (theory/results.py): lower <= value <= upper and no NaN at construction; NaN
operands and indeterminate forms give unresolved results; equality is certified only for the same exact
point; bool(r) is r != 0; interval arithmetic keeps every true real inside its enclosure (exact rationals
as the reference), and an inward rounding by one ulp makes that property fail."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix import Chain
from mlmix.errors import UnresolvedError
from mlmix.theory import results
from mlmix.theory.results import Result

OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": lambda x, y: x / y}


# ------------------------------------------------------------------------------------ the reported bugs


@pytest.mark.parametrize("make", [lambda: Result.exact("a", 1.5, "t") + math.nan,
                                  lambda: math.nan * Result.approximate("a", 2.0, 1e-9, "t"),
                                  lambda: Result.exact("a", 0, "t") * math.inf,
                                  lambda: Result.exact("a", math.inf, "t") - math.inf,
                                  lambda: Result.exact("a", math.inf, "t") / math.inf])
def test_nan_operands_and_indeterminate_forms_are_unresolved(make):
    r = make()
    assert r.value is None and r.lower is None and r.upper is None and r.reason
    with pytest.raises(UnresolvedError):
        float(r)


def test_an_approximate_value_is_never_certified_equal_to_a_number():
    a = Result.approximate("a", 1.0, 1e-17, "t")  # 1 -+ 1e-17 rounds to 1 in floating point
    assert a.lower < 1.0 < a.upper
    with pytest.raises(UnresolvedError, match="not decided"):
        a == 1.0  # noqa: B015
    assert (Result.exact("k", 1.0, "t") == 1.0) is True


def test_bool_follows_the_number():
    assert not Result.exact("z", 0.0, "t") and not Result.exact("z", 0, "t")
    assert Result.exact("x", -2.0, "t") and Result.interval("x", 1e-300, 1.0, "t", "r")
    for undecided in (Result.interval("x", -1.0, 1.0, "t", "r"), Result.missing("m", "-", "why"),
                      Result.interval("y", 0.0, 1.0, "t", "r")):
        with pytest.raises(UnresolvedError):
            bool(undecided)


@pytest.mark.parametrize("fields", [
    dict(value=None, lower=2.0, upper=1.0),          # empty enclosure
    dict(value=3.0, lower=1.0, upper=2.0),           # value outside its enclosure
    dict(value=0.5, lower=1.0, upper=None),
    dict(value=math.nan, lower=None, upper=None),    # a resolved NaN
    dict(value=None, lower=math.nan, upper=1.0),     # NaN ends
    dict(value=None, lower=0.0, upper=math.nan),
])
def test_construction_rejects_broken_enclosures(fields):
    with pytest.raises(ValueError, match="result 'x'"):
        Result("x", fields["value"], "t", None, fields["lower"], fields["upper"], "r" if fields["value"] is None else None)


def test_constructors_and_json_keep_the_invariant():
    r = Result.interval("t", math.inf, None, "period", "periodic")
    assert Result.from_json(r.to_json()).lower == math.inf
    with pytest.raises(ValueError):
        Result.from_json({"value": 3.0, "lower": 4.0, "upper": 5.0, "method": "m"})
    with pytest.raises(ValueError, match="empty"):
        Result.checked("x", 1.5, 0.1, "m", upper=1.0)  # the value lies outside the range it is clipped to


# ------------------------------------------------------------------------------------ properties

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False, allow_subnormal=False)
scales = st.sampled_from([0.0, 1e-17, 1e-12, 1e-6, 0.1, 1.0])


@st.composite
def operands(draw) -> Result:
    kind = draw(st.sampled_from(["exact", "approximate", "interval", "half"]))
    x = draw(finite)
    if kind == "exact":
        return Result.exact("a", x, "t")
    if kind == "approximate":
        return Result.approximate("a", x, draw(scales), "t")
    width = abs(x) * draw(scales) + draw(st.sampled_from([0.0, 1e-300, 1.0]))
    if kind == "interval":
        return Result.interval("a", x, x + width, "t", "r")
    return Result.interval("a", x, None, "t", "r") if draw(st.booleans()) else Result.interval("a", None, x, "t", "r")


def _points(r: Result) -> list[Fraction]:
    """True values the enclosure allows that the arithmetic's extremes are taken at: the finite ends."""
    return [Fraction(x) for x in (r.lower, r.upper, r.value) if x is not None and math.isfinite(x)]


def encloses(a: Result, b: Result, op: str) -> bool:
    """Every x op y with x, y at the finite ends (and values) of a and b lies in [c.lower, c.upper] in
    exact rationals; a resolved c's relative error covers them; unknown input sides stay unknown."""
    c = OPS[op](a, b)
    lo = -math.inf if c.lower is None else Fraction(c.lower) if math.isfinite(c.lower) else c.lower
    hi = math.inf if c.upper is None else Fraction(c.upper) if math.isfinite(c.upper) else c.upper
    if op == "/" and (b.lower is None or b.lower <= 0) and (b.upper is None or b.upper >= 0):  # b may be 0
        return c.lower is None and c.upper is None
    for x in _points(a):
        for y in _points(b):
            z = OPS[op](x, y)
            if not lo <= z <= hi:
                return False
            if c.value is not None and abs(Fraction(c.value) - z) > Fraction(c.rel_error) * abs(Fraction(c.value)):
                return False
    if op in "+-" and None in (a.lower, a.upper, b.lower, b.upper):  # an unbounded operand: an unbounded sum
        return c.lower is None or c.upper is None
    return True


@settings(max_examples=300, deadline=None, database=None)
@given(operands(), operands(), st.sampled_from(sorted(OPS)))
def test_arithmetic_keeps_the_true_real_inside(a, b, op):
    assert encloses(a, b, op)


@settings(max_examples=300, deadline=None, database=None)
@given(finite, st.floats(min_value=0.0, max_value=2.0, allow_nan=False))
def test_approximate_rounds_its_ends_outward_by_at_most_one_ulp(v, r):
    a = Result.approximate("a", v, r, "t")
    lo, hi = sorted((Fraction(v) * (1 - Fraction(r)), Fraction(v) * (1 + Fraction(r))))
    assert Fraction(a.lower) <= lo and hi <= Fraction(a.upper)
    assert math.nextafter(a.lower, math.inf) > lo or Fraction(a.lower) == lo
    assert math.nextafter(a.upper, -math.inf) < hi or Fraction(a.upper) == hi
    assert a.lower <= a.value <= a.upper and (r == 0 or v == 0 or a.lower < a.upper)


# ------------------------------------------------------------------------------------ the property can fail

FIXED = [(Result.exact("a", 0.1, "t"), Result.exact("b", 0.2, "t")),
         (Result.interval("a", 1.0, 3.0, "t", "r"), Result.approximate("b", 3.0, 0.1, "t")),
         (Result.approximate("a", -0.3, 1e-12, "t"), Result.exact("b", 7.0, "t"))]


@pytest.mark.parametrize("end, inward", [("_up", lambda x: math.nextafter(x, -math.inf) if math.isfinite(x) else x),
                                         ("_down", lambda x: math.nextafter(x, math.inf) if math.isfinite(x) else x)])
def test_one_ulp_inward_rounding_breaks_the_property(monkeypatch, end, inward):
    """Planted inward rounding: an interval result then excludes a true value (and a resolved one
    excludes its own value, which the constructor refuses)."""
    def outcome(a: Result, b: Result, op: str) -> str:
        try:
            return "encloses" if encloses(a, b, op) else "excludes"
        except ValueError:
            return "refused"
    assert {outcome(a, b, op) for a, b in FIXED for op in OPS} == {"encloses"}
    monkeypatch.setattr(results, end, inward)
    seen = {outcome(a, b, op) for a, b in FIXED for op in OPS}
    assert "excludes" in seen and "refused" in seen


# ------------------------------------------------------------------------------------ callers of the contract


@pytest.mark.parametrize("a, b", [(0.875, 0.0546875), (0.3, 0.6), (1e-12, 2e-12)])
def test_the_variance_of_a_constant_encloses_zero(a, b):
    """A constant f has sigma^2 = 0; its computed value -d^2 (d the centring's rounding) once lay below an
    error bound clipped at 0: the enclosure [0, -4e-32] was empty."""
    v = Chain(np.array([[1 - a, a], [b, 1 - b]])).asymptotic_variance(np.array([3.0, 3.0]))
    assert v.lower == 0.0 <= v.upper < 1e-12
