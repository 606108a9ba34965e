"""Results behave like numbers where their enclosure decides (theory/results.py): comparisons decided
true, decided false, or UnresolvedError; interval arithmetic checked against exact rationals; round,
float, numpy interop; JSON round trips; Chain from torch tensors and its repr."""

import math
import random
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
import torch

from mlmix import Chain
from mlmix.errors import UnresolvedError
from mlmix.theory.results import Result, VectorResult, dumps_results, loads_results
from mlmix.theory.sources.conditionals import IsingModel

torch.set_num_threads(1)

A = Result.interval("a", 1.0, 2.0, "test", "an interval")      # unresolved, [1, 2]
B = Result.approximate("b", 3.0, 0.1, "test")                     # resolved, [2.7, 3.3]


@pytest.mark.parametrize("expr, expected", [
    (lambda: A < B, True), (lambda: A <= B, True), (lambda: B > A, True), (lambda: B >= A, True),
    (lambda: A > B, False), (lambda: A >= B, False), (lambda: B < A, False), (lambda: B <= A, False),
    (lambda: A == B, False), (lambda: A != B, True),
    (lambda: A < 2.5, True), (lambda: A > 0.5, True), (lambda: 0.5 < A, True), (lambda: A > 2.0, False),
    (lambda: A <= 2.0, True), (lambda: A < 1.0, False), (lambda: A >= 1.0, True),
    (lambda: Result.exact("k", 3, "x") == 3, True), (lambda: Result.exact("k", 3, "x") == 4, False),
    (lambda: np.float64(0.5) < A, True),
])
def test_decided_comparisons(expr, expected):
    assert expr() is expected


@pytest.mark.parametrize("expr", [
    lambda: A < 1.5, lambda: A <= 1.5, lambda: A > 1.5, lambda: A >= 1.5, lambda: A == 1.5, lambda: A != 1.5,
    lambda: A < 2.0, lambda: A > 1.0,                      # touching ends do not decide the strict order
    lambda: B > Result.interval("c", 3.0, None, "test", "one side"),
    lambda: Result.missing("m", "-", "not computed") > 0,  # nothing known
    lambda: B == 3.0,                                      # 3 is inside [2.7, 3.3] but so are its neighbours
])
def test_undecided_comparisons_raise(expr):
    with pytest.raises(UnresolvedError, match="not decided"):
        expr()


def test_comparison_with_other_types_is_not_a_number():
    assert (A == "a") is False
    with pytest.raises(TypeError):
        A < "a"  # noqa: B015


def test_metastable_t_mix_compares_by_its_certified_interval():
    t = Chain.from_source(IsingModel(nx.cycle_graph(6), beta=10.0)).mixing_time()
    assert not t.resolved and 1e17 < t.lower < t.upper < 1e20
    assert t > 1e17 and not t < 1e17 and t < 1e20
    with pytest.raises(UnresolvedError):
        t > 1e19  # noqa: B015
    with pytest.raises(UnresolvedError):
        float(t)


def _exact_interval(r: Result) -> tuple[Fraction, Fraction]:
    return Fraction(r.lower), Fraction(r.upper)


@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_arithmetic_encloses_the_exact_interval_result(op):
    """Every combination of true values x in [a], y in [b] lies in [a op b] (checked with exact
    rationals at the ends, where +, -, * and / of intervals take their extremes), and the computed
    ends are at most 1 ulp outside the correctly rounded the exact ones."""
    rng = random.Random(7)
    f = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": lambda x, y: x / y}[op]
    for _ in range(300):
        a_lo = rng.uniform(-5, 5)
        a = Result.interval("a", a_lo, a_lo + rng.choice([0.0, 1e-12, 0.1, 3.0]), "t", "r")
        b_lo = rng.uniform(0.1, 5) * rng.choice([-1, 1])
        b = Result.interval("b", b_lo, b_lo + abs(b_lo) * rng.choice([0.0, 1e-15, 0.5]), "t", "r")
        c = f(a, b)
        ends = [f(x, y) for x in _exact_interval(a) for y in _exact_interval(b)]
        lo, hi = min(ends), max(ends)
        assert Fraction(c.lower) <= lo and hi <= Fraction(c.upper)
        assert c.lower >= math.nextafter(float(lo), -math.inf) and c.upper <= math.nextafter(float(hi), math.inf)


def test_arithmetic_by_hand():
    # [1, 2] + [2.7, 3.3] = [3.7, 5.3]; [1, 2] - [2.7, 3.3] = [-2.3, -0.7]; [1, 2] * [2.7, 3.3] = [2.7, 6.6];
    # [1, 2] / [2.7, 3.3] = [1/3.3, 2/2.7]; each end one rounding, then one ulp outward
    b_lo, b_hi = B.lower, B.upper
    down = lambda x: math.nextafter(x, -math.inf)
    up = lambda x: math.nextafter(x, math.inf)
    s = A + B
    assert (s.lower, s.upper) == (down(1.0 + b_lo), up(2.0 + b_hi)) and not s.resolved
    d = A - B
    assert (d.lower, d.upper) == (down(1.0 - b_hi), up(2.0 - b_lo))
    p = A * B
    assert (p.lower, p.upper) == (down(1.0 * b_lo), up(2.0 * b_hi))
    q = A / B
    assert (q.lower, q.upper) == (down(1.0 / b_hi), up(2.0 / b_lo))
    # resolved operands give a resolved value whose relative error covers its enclosure
    g = Result.approximate("gap", 0.1, 1e-12, "t")
    two = g * 2
    assert two.resolved and two.value == 0.2 and 1e-12 <= two.rel_error <= 1.001e-12  # + the outward ulps
    assert two.lower <= 0.2 * (1 - 1e-12) and two.upper >= 0.2 * (1 + 1e-12)
    assert (2 * g).upper == two.upper and (np.float64(2) * g).upper == two.upper
    inv = 1 / g
    assert inv.value == 10.0 and inv.lower < 10 / (1 + 1e-12) * (1 + 1e-15) and inv.upper >= 10 / (1 - 1e-12)
    assert (-g).lower == -g.upper and not (g - g).resolved
    diff = g - 0.1  # value 0 with a width: no relative error, an interval around 0
    assert diff.value is None and diff.lower < 0 < diff.upper
    # a divisor whose enclosure contains 0: unbounded, said so
    z = g / Result.interval("z", -1.0, 1.0, "t", "r")
    assert z.lower is None and z.upper is None and "may be 0" in z.reason
    # an unknown side stays unknown; exact zero times an unbounded side is 0
    half = Result.interval("h", 1.0, None, "t", "r")
    assert (half + 1).lower == down(2.0) and (half + 1).upper is None
    assert (half * Result.exact("zero", 0.0, "t")).upper == up(0.0)


def test_round_float_and_numpy():
    g = Result.approximate("gap", 0.123456, 1e-9, "t")
    assert round(g, 3) == 0.123 and float(g) == 0.123456 and np.isclose(g, 0.123456)
    assert np.asarray(g).shape == () and math.isclose(np.sqrt(np.asarray(g)), math.sqrt(0.123456))
    with pytest.raises(UnresolvedError, match="rounding boundary"):
        round(Result.interval("x", 0.12345, 0.12355, "t", "r"), 3)
    assert round(Result.interval("x", 0.12341, 0.12349, "t", "r"), 3) == 0.123  # decided though unresolved
    with pytest.raises(UnresolvedError):
        np.isclose(A, 1.5)


def test_result_json_round_trip():
    t = Result.interval("t_mix", math.inf, None, "period", "periodic")
    for r in (t, A, B, Result.exact("k", 7, "m", witness=np.array([1, 2]), note="n"),
              Result.missing("m", "-", "why")):
        back = Result.from_json(r.to_json())
        for f in ("name", "value", "method", "rel_error", "lower", "upper", "reason"):
            assert getattr(back, f) == getattr(r, f), f
    assert Result.from_json(t.to_json()).lower == math.inf
    flat = Result.from_json(B.as_dict() | {"set_size": 3}, name="b")  # the flat --json form
    assert (flat.value, flat.lower, flat.details["set_size"]) == (3.0, B.lower, 3)
    with pytest.raises(ValueError):
        Result.from_json('{"value": 1}')


def test_vector_result_and_summary_round_trip():
    chain = Chain.from_source(IsingModel(nx.cycle_graph(4), beta=0.3))
    st = chain.stationary
    back = VectorResult.from_json(st.to_json())
    assert np.array_equal(back.value, st.value) and np.array_equal(back.log_value, st.log_value)
    assert back.rel_error == st.rel_error and back.method == st.method
    summary = chain.summary()
    again = loads_results(dumps_results(summary))
    assert again.keys() == summary.keys()
    for key in ("spectral_gap", "conductance", "t_mix", "kemeny_constant"):
        assert again[key].value == summary[key].value and again[key].upper == summary[key].upper
        assert again[key].details.keys() == summary[key].details.keys()


def test_chain_from_torch_tensors():
    P = np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.0, 0.5, 0.5]])
    ref = Chain(P).spectral_gap.value
    for T in (torch.tensor(P), torch.tensor(P).to_sparse()):
        assert Chain(T).spectral_gap.value == pytest.approx(ref, rel=1e-13)
    with pytest.raises(TypeError, match="float64"):
        Chain(torch.tensor(P, dtype=torch.float32))
    with pytest.raises(ValueError, match="sum to 1"):
        Chain(torch.tensor(P * 1.01))


def test_chain_repr_names_what_it_is():
    chain = Chain.from_source(IsingModel(nx.cycle_graph(6), beta=0.5))
    text = repr(chain)
    assert "states 64" in text and "448 non-zero" in text and "IsingModel" in text and "chain on" not in text
    assert "<table>" in chain._repr_html_() and "<table>" in A._repr_html_() and "<table>" in chain.stationary._repr_html_()
    assert "[1, 2]" in repr(A)


def test_outward_rounding_is_needed():
    """The check above can fail: rounding to nearest alone gives 0.1 + 0.2 a lower end above the
    exact sum of the two floats, which the outward-rounded result does not."""
    exact = Fraction(0.1) + Fraction(0.2)
    assert Fraction(0.1 + 0.2) > exact  # the naive lower end misses the true value
    s = Result.exact("x", 0.1, "t") + Result.exact("y", 0.2, "t")
    assert Fraction(s.lower) <= exact <= Fraction(s.upper) and s.resolved and s.value == 0.1 + 0.2
