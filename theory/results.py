"""Results that carry how they were computed and how accurate they are.

Every quantity mlmix computes comes back as a :class:`Result` (a number) or a
:class:`VectorResult` (a vector over the states). A result is either

* **resolved**: ``value`` is a number and ``rel_error`` bounds its relative error,
  ``|value - true| <= rel_error * |value|`` (0 for exact values), so ``lower`` and ``upper``
  enclose the true value; or
* **unresolved**: ``value`` is None, ``reason`` says why (the accuracy target could not be met,
  the size limit was exceeded, the quantity is infinite, ...), and ``lower`` / ``upper`` give
  whatever enclosure is known (None for an unknown side).

Every result satisfies ``lower <= value <= upper`` (the sides that are known) and has no NaN in
its value or ends: the constructor raises ValueError otherwise, so an enclosure that excludes its own
value, or is empty, is a bug caught where it is made.

``float(result)`` returns the value or raises :class:`~mlmix.errors.UnresolvedError` with the
reason; ``numpy.asarray(vector_result)`` gives the vector.

Results behave like numbers where their enclosure decides (:class:`Result`): a comparison
``r < x`` (x a number or a result) is True when ``upper < x.lower``, False when ``lower >= x.upper``
and raises :class:`~mlmix.errors.UnresolvedError` when the intervals overlap - an undecided
comparison is never hidden; ``+ - * /`` propagate the enclosures by interval arithmetic, every end
rounded outward by one ulp (``math.nextafter``), so the true value of the combination lies in the
result's ``[lower, upper]``. A NaN operand, or a combination without a value (``0 * inf``,
``inf - inf``), gives an *unresolved* result with both sides unknown and the reason - never a
resolved NaN. ``==`` is True only when both enclosures are the same single point (an approximate
value is never certified equal to a number, its enclosure being wider than a point: the
constructors round its ends outward); ``bool(r)`` is ``r != 0``: False for a certified 0, True
when the enclosure excludes 0, UnresolvedError otherwise. ``round(r, k)`` is the rounding both ends
agree on. ``to_json`` /
``from_json`` (and :func:`dumps_results` / :func:`loads_results` for nested reports such as
``Chain.summary()``) round-trip results exactly, infinities included. ``as_dict()`` is the JSON form used by
the CLI: ``{"value", "lower", "upper", "rel_error", "method", "reason", ...details}``.

The default accuracy target is :data:`DEFAULT_RTOL` (relative): an algorithm whose error bound
exceeds it reports an interval instead of a number - roundoff is never a result.
"""

from __future__ import annotations

import decimal
import json
import math
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from html import escape
from typing import Any, Mapping

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from mlmix.errors import InvalidResultError, UnresolvedError

#: Relative accuracy a number must reach to be reported as a value (otherwise: an interval).
DEFAULT_RTOL = 1e-6

#: Unit roundoff of float64.
EPS = float(np.finfo(np.float64).eps) / 2


@dataclass(frozen=True)
class ReportQuantity:
    """One figure of a chain's report, declared once in :data:`REPORT`: ``key`` (its key in
    ``Chain.summary()`` and the JSON of ``mlmix exact``, and in :data:`NAMES`), ``name`` (its ``Result.name``),
    ``label`` (its row in ``mlmix exact``'s table, ``{eps}`` standing for the accuracy asked; None: no row),
    ``member`` (the :class:`~mlmix.theory.chain.markov_chain.Chain` member that computes it), ``phase`` (the
    phase of the summary's progress in which it is computed; None: not in the summary), ``saved`` (kept by
    ``Chain.save`` once computed), ``explained`` (its method listed under the table) and ``schema`` (the
    definition of ``docs/schema/exact.schema.json`` its summary value follows: ``"result"``, a
    :class:`Result`, or ``"vector_result"``, a :class:`VectorResult`; :mod:`mlmix.commands.exact_schema`)."""

    key: str
    name: str
    label: str | None
    member: str
    phase: str | None
    saved: bool
    explained: bool
    schema: str = "result"

    def __post_init__(self) -> None:
        if self.schema not in ("result", "vector_result"):
            raise ValueError(f"schema must be 'result' or 'vector_result', got {self.schema!r}")


#: The figures of a chain's report, in the order the summary and ``mlmix exact`` give them: the result
#: names (:data:`NAMES`), the summary's keys, the figures ``Chain.save`` keeps and ``mlmix exact``'s table
#: derive from it, and so does the part of the exact JSON schema that lists them
#: (:func:`mlmix.commands.exact_schema.report_schema`). Adding a figure is a Chain member and one line here
#: (:func:`register`).
REPORT: list[ReportQuantity] = [
    ReportQuantity("stationary", "stationary law", None, "stationary", "stationary law", True, False, "vector_result"),
    ReportQuantity("spectral_gap", "spectral gap", "spectral gap", "spectral_gap", "gaps", True, True),
    ReportQuantity("absolute_spectral_gap", "absolute spectral gap", "absolute spectral gap", "absolute_spectral_gap",
                   "gaps", True, True),
    ReportQuantity("relaxation_time", "relaxation time", "relaxation time", "relaxation_time", "gaps", True, False),
    ReportQuantity("additive_gap", "additive gap", "additive gap (P+P*)/2", "additive_gap", "gaps", True, True),
    ReportQuantity("poincare_constant", "Poincare constant", "Poincare constant", "poincare_constant", "gaps", True,
                   False),
    ReportQuantity("multiplicative_gap", "multiplicative gap", None, "multiplicative_gap", None, True, False),
    ReportQuantity("conductance", "conductance", "conductance Phi*", "conductance", "conductance", True, True),
    ReportQuantity("kemeny_constant", "Kemeny constant", "Kemeny constant", "kemeny_constant", "Kemeny constant",
                   True, True),
    ReportQuantity("t_mix", "t_mix", "t_mix({eps:g}), worst-start TV", "mixing_time", "t_mix", False, True),
]

#: The one name of each quantity a chain reports (``Result.name`` / ``VectorResult.name``), keyed by
#: the attribute of :class:`~mlmix.theory.chain.markov_chain.Chain` that returns it and by its key in
#: ``Chain.summary()`` (the JSON of ``mlmix exact``): identical on every representation and size. Those
#: of the report come from :data:`REPORT`.
NAMES: dict[str, str] = {
    **{q.key: q.name for q in REPORT},
    "log_stationary": "log stationary law",
    "set_conductance": "Phi(S)",
    "tv_distance": "d(t)",
    "distance_curve": "TV(mu P^t, pi)",
    "asymptotic_variance": "asymptotic variance",
    "hitting_time": "E_x tau_A",
    "hitting_probabilities": "P_x(tau_A <= t)",
    "committor": "committor P_x(tau_B < tau_A)",
}


def register(quantity: ReportQuantity) -> None:
    """Add a figure to the report (:data:`REPORT` and :data:`NAMES`); its key must be new."""
    if quantity.key in NAMES:
        raise ValueError(f"a quantity named {quantity.key!r} is already declared")
    REPORT.append(quantity)
    NAMES[quantity.key] = quantity.name


def unregister(key: str) -> None:
    """Remove the figure ``key`` added by :func:`register` (a test's throw-away quantity)."""
    REPORT[:] = [q for q in REPORT if q.key != key]
    NAMES.pop(key, None)


def report_keys(phase: str | None = None, *, saved: bool | None = None, explained: bool | None = None) -> list[str]:
    """The keys of :data:`REPORT`, in order: of the summary phase ``phase`` (any phase when None), kept by
    ``Chain.save`` (``saved``) or listed with their method under ``mlmix exact``'s table (``explained``)."""
    return [q.key for q in REPORT if (phase is None or q.phase == phase) and (saved is None or q.saved == saved)
            and (explained is None or q.explained == explained)]


def _fmt(x: float | None) -> str:
    if x is None:
        return "?"
    if isinstance(x, (int, np.integer)) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return f"{int(x)}"
    return f"{x:.6g}"


def bracket_text(lower: float | None, upper: float | None, digits: int = 4) -> str:
    """``[lower, upper]`` with enough significant digits (at least ``digits``, at most 17) to show the
    bracket's width to two digits, each end rounded outward (the lower end down, the upper end up: the
    printed bracket contains the computed one; an end whose shortest repr is that short prints as it);
    ``-`` for an unknown end."""
    if lower is not None and upper is not None and upper > lower:
        top = decimal.Decimal(max(abs(lower), abs(upper))).adjusted()
        digits = max(digits, min(17, top - decimal.Decimal(upper - lower).adjusted() + 2))
    return f"[{outward_text(lower, digits, True)}, {outward_text(upper, digits, False)}]"


def outward_text(x: float | None, digits: int, down: bool) -> str:
    """``x`` to ``digits`` significant digits, rounded toward -inf (``down``) or +inf; ``-`` for None."""
    if x is None:
        return "-"
    if x == 0 or not math.isfinite(x):
        return repr(float(x))
    shortest = decimal.Decimal(repr(float(x)))  # names the same float: printed as is when short enough
    if len(shortest.as_tuple().digits) <= digits:
        return repr(float(x))
    d = decimal.Decimal(x)
    step = decimal.Decimal(1).scaleb(d.adjusted() - digits + 1)
    q = d.quantize(step, rounding=decimal.ROUND_FLOOR if down else decimal.ROUND_CEILING)
    return format(q.normalize(), "f") if -5 <= q.adjusted() < 15 else format(q.normalize(), "e")


@dataclass(frozen=True, eq=False)
class Result:
    """A number with its method and accuracy (see the module docstring)."""

    name: str
    value: float | int | None
    method: str
    rel_error: float | None = None
    lower: float | None = None
    upper: float | None = None
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """The invariant ``lower <= value <= upper`` (known sides), no NaN, a non-negative rel_error."""
        for label, x in (("value", self.value), ("lower", self.lower), ("upper", self.upper),
                         ("rel_error", self.rel_error)):
            if x is not None and isinstance(x, (float, np.floating)) and math.isnan(x):
                raise InvalidResultError(f"result {self.name!r}: {label} is NaN (an unknown side is None; an uncomputable "
                                 "value is an unresolved result with its reason)")
        if self.rel_error is not None and self.rel_error < 0:
            raise InvalidResultError(f"result {self.name!r}: negative rel_error {self.rel_error!r}")
        lo = -math.inf if self.lower is None else self.lower
        hi = math.inf if self.upper is None else self.upper
        v = self.value
        if not (lo <= hi) or (v is not None and not (lo <= v <= hi)):
            raise InvalidResultError(f"result {self.name!r}: enclosure [{_fmt(self.lower)}, {_fmt(self.upper)}] "
                             + ("is empty" if not lo <= hi else f"does not contain its value {v!r}")
                             + " (lower <= value <= upper is required)")

    # ---------------------------------------------------------------- constructors
    @classmethod
    def exact(cls, name: str, value: float | int, method: str, **details: Any) -> "Result":
        """A value known exactly (integers, closed forms) or to the last bit."""
        return cls(name, value, method, 0.0, value, value, None, details)

    @classmethod
    def approximate(cls, name: str, value: float, rel_error: float, method: str, **details: Any) -> "Result":
        """A value with a bound on its relative error: the enclosure v (1 -+ r), each end rounded
        outward where its floating-point product is not exact (so it never excludes a true value
        the bound allows, and r > 0 never gives a single point)."""
        v, r = float(value), float(rel_error)
        if not math.isfinite(v) or not math.isfinite(r) or r == 0:
            ends = (v, v) if r == 0 else (v * (1 - r), v * (1 + r))
            lo, hi = sorted(ends) if not any(map(math.isnan, ends)) else (None, None)
            return cls(name, v, method, r, lo, hi, None, details)
        ends = sorted((Fraction(v) * (1 - Fraction(r)), Fraction(v) * (1 + Fraction(r))))
        return cls(name, v, method, r, _float_below(ends[0]), _float_above(ends[1]), None, details)

    @classmethod
    def checked(cls, name: str, value: float, abs_error: float, method: str, *, rtol: float = DEFAULT_RTOL,
                lower: float | None = None, upper: float | None = None, **details: Any) -> "Result":
        """A value with an absolute error bound: resolved when abs_error <= rtol |value|, otherwise an
        interval [value - abs_error, value + abs_error] (clipped to ``lower`` / ``upper`` when given:
        the range the quantity is known to lie in) with the reason."""
        v, e = float(value), float(abs_error)
        if math.isfinite(v) and math.isfinite(e) and e <= rtol * abs(v):
            return cls.approximate(name, v, e / abs(v) if v else 0.0, method, **details)
        lo, hi = v - e, v + e
        if lower is not None:
            lo = max(lo, lower)
        if upper is not None:
            hi = min(hi, upper)
        reason = (f"error bound {e:.2g} exceeds the accuracy target {rtol:g} x |{v:.3g}|: the value is not "
                  "resolved above the floating-point floor of this method")
        return cls(name, None, method, None, lo, hi, reason, details)

    @classmethod
    def interval(cls, name: str, lower: float | None, upper: float | None, method: str, reason: str,
                 **details: Any) -> "Result":
        """Only an enclosure is known (either side may be None: unknown)."""
        return cls(name, None, method, None, lower, upper, reason, details)

    @classmethod
    def missing(cls, name: str, method: str, reason: str, **details: Any) -> "Result":
        """Not computed; ``reason`` says why."""
        return cls(name, None, method, None, None, None, reason, details)

    # ---------------------------------------------------------------- access
    @property
    def resolved(self) -> bool:
        return self.value is not None

    def __float__(self) -> float:
        if self.value is None:
            raise UnresolvedError(f"{self.name} is not resolved: {self.reason} (known interval "
                                  f"[{_fmt(self.lower)}, {_fmt(self.upper)}])")
        return float(self.value)

    def __int__(self) -> int:
        value = float(self)
        if not float(value).is_integer():
            raise TypeError(f"{self.name} = {value!r} is not an integer")
        return int(value)

    def __round__(self, ndigits: int | None = None) -> float | int:
        """The rounding of the true value, when both ends of the enclosure round alike (else
        UnresolvedError): ``round(gap, 3)`` never reports a digit the interval does not decide."""
        lo, hi = self._ends()
        if math.isfinite(lo) and math.isfinite(hi):
            a, b = round(lo, ndigits), round(hi, ndigits)
            if a == b:
                return a
        raise UnresolvedError(f"round({self.name}, {ndigits}) is not decided: the enclosure {self._enclosure()} "
                              "straddles a rounding boundary")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """A 0-d array of the value (UnresolvedError when not resolved): ``np.isclose(r, x)`` works."""
        return np.array(float(self), dtype=dtype)

    # numpy defers binary operators to the methods below (np.float64(2) * r -> r.__rmul__)
    __array_ufunc__ = None

    # ---------------------------------------------------------------- interval semantics
    def _ends(self) -> tuple[float, float]:
        """The enclosure with unknown sides as -inf / +inf."""
        return (-math.inf if self.lower is None else float(self.lower),
                math.inf if self.upper is None else float(self.upper))

    @staticmethod
    def _operand(other: Any) -> "Result | None":
        if isinstance(other, Result):
            return other
        if isinstance(other, (bool, np.bool_)) or not isinstance(other, (int, float, np.integer, np.floating)):
            return None
        x = float(other)
        if math.isnan(x):
            return Result.missing("nan", "a given number", "the operand is NaN")
        return Result.exact(repr(x) if not x.is_integer() else str(int(x)) if abs(x) < 1e15 else repr(x), x,
                            "a given number")

    def _compare(self, other: Any, op: str) -> bool:
        o = Result._operand(other)
        if o is None:
            return NotImplemented
        a_lo, a_hi = self._ends()
        b_lo, b_hi = o._ends()
        decided = {  # (certainly true, certainly false) for true values a in [a_lo, a_hi], b in [b_lo, b_hi]
            "<": (a_hi < b_lo, a_lo >= b_hi),
            "<=": (a_hi <= b_lo, a_lo > b_hi),
            ">": (a_lo > b_hi, a_hi <= b_lo),
            ">=": (a_lo >= b_hi, a_hi < b_lo),
            "==": (a_lo == a_hi == b_lo == b_hi, a_hi < b_lo or b_hi < a_lo),
        }[op]
        if decided[0]:
            return True
        if decided[1]:
            return False
        raise UnresolvedError(f"{self.name} {op} {o.name} is not decided: {self._enclosure()} and {o._enclosure()} "
                              "overlap"
                              + (f" ({self.reason})" if self.reason else ""))

    def __lt__(self, other: Any) -> bool:
        return self._compare(other, "<")

    def __le__(self, other: Any) -> bool:
        return self._compare(other, "<=")

    def __gt__(self, other: Any) -> bool:
        return self._compare(other, ">")

    def __ge__(self, other: Any) -> bool:
        return self._compare(other, ">=")

    def __eq__(self, other: Any) -> bool:
        """True only when both are the same exact point; False when the enclosures are disjoint."""
        if other is self:
            return True
        return self._compare(other, "==")

    def __ne__(self, other: Any) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __bool__(self) -> bool:
        """``r != 0``: False for a certified 0, True when the enclosure excludes 0, UnresolvedError
        otherwise (``if gap:`` never treats an undecided or zero result as true)."""
        return self != 0

    __hash__ = object.__hash__

    def _combine(self, other: Any, op: str, reflected: bool = False) -> "Result":
        o = Result._operand(other)
        if o is None:
            return NotImplemented
        a, b = (o, self) if reflected else (self, o)
        (a_lo, a_hi), (b_lo, b_hi) = a._ends(), b._ends()
        name = f"({a.name} {op} {b.name})"
        method = f"interval arithmetic, outward rounded: ({a.method}) {op} ({b.method})"
        if op == "/" and b_lo <= 0 <= b_hi:
            return Result.interval(name, None, None, method, f"{b.name} may be 0 (its enclosure "
                                   f"[{_fmt(b.lower)}, {_fmt(b.upper)}] contains 0): the quotient is not bounded")
        if op == "+":
            lo, hi = a_lo + b_lo, a_hi + b_hi
        elif op == "-":
            lo, hi = a_lo - b_hi, a_hi - b_lo
        else:  # the extremes of x * y and x / y lie at the ends (0 is outside [b_lo, b_hi] for /)
            ends = [_times(x, y) if op == "*" else _quotient(x, y) for x in (a_lo, a_hi) for y in (b_lo, b_hi)]
            lo, hi = min(ends), max(ends)
        lo, hi = _down(lo), _up(hi)
        if math.isnan(lo) or math.isnan(hi):  # inf - inf at an end: that side is not known
            lo, hi = (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(hi) else hi)
        lower = None if lo == -math.inf else lo
        upper = None if hi == math.inf else hi
        if a.value is None or b.value is None:
            reasons = "; ".join(f"{r.name}: {r.reason}" for r in (a, b) if r.value is None)
            return Result(name, None, method, None, lower, upper, f"an operand is not resolved ({reasons})")
        v = {"+": lambda: a.value + b.value, "-": lambda: a.value - b.value, "*": lambda: a.value * b.value,
             "/": lambda: a.value / b.value}[op]()
        if math.isnan(v):
            return Result(name, None, method, None, None, None,
                          f"{_fmt(a.value)} {op} {_fmt(b.value)} has no value (an indeterminate form)")
        if lower is None or upper is None or (v == 0 and lo != hi):
            return Result(name, None, method, None, lower, upper,
                          "the enclosure is not bounded relative to the value")
        if lo == hi == v:
            return Result(name, v, method, 0.0, lo, hi)
        rel = _up(max(v - lo, hi - v) / abs(v)) if v else 0.0
        return Result(name, v, method, _up(rel), lo, hi)

    def __add__(self, other: Any) -> "Result":
        return self._combine(other, "+")

    def __radd__(self, other: Any) -> "Result":
        return self._combine(other, "+", reflected=True)

    def __sub__(self, other: Any) -> "Result":
        return self._combine(other, "-")

    def __rsub__(self, other: Any) -> "Result":
        return self._combine(other, "-", reflected=True)

    def __mul__(self, other: Any) -> "Result":
        return self._combine(other, "*")

    def __rmul__(self, other: Any) -> "Result":
        return self._combine(other, "*", reflected=True)

    def __truediv__(self, other: Any) -> "Result":
        return self._combine(other, "/")

    def __rtruediv__(self, other: Any) -> "Result":
        return self._combine(other, "/", reflected=True)

    def __neg__(self) -> "Result":
        return Result(f"-{self.name}", None if self.value is None else -self.value, self.method, self.rel_error,
                      None if self.upper is None else -self.upper, None if self.lower is None else -self.lower,
                      self.reason, dict(self.details))

    def __format__(self, spec: str) -> str:
        """The one terminal rendering of a result (every command's tables use it).

        ``format(r, "")`` is ``str(r)``, the sentence with method and accuracy. Otherwise ``spec`` is
        ``NUMBER[/ENDS][|FLAGS]``: a resolved value is formatted with the format spec ``NUMBER``, an
        unresolved one as its interval ``[lower, upper]`` with ``ENDS`` (default ``NUMBER``), ``?`` for
        an unknown side. ``FLAGS``, any of:

        * ``a``: append the accuracy, ``   (exact)`` or ``   (rel. err <= 1e-08)`` to a value (nothing
          when it is unknown), ``   (not resolved)`` to an interval;
        * ``-``: a result with neither a value nor a bound is ``-``;
        * ``=``: an interval of one point (lower == upper, e.g. an infinite KL) is that number;
        * ``>``: an interval is its lower end, ``>= lower`` (a sampled supremum's certified side).

        E.g. ``f"{r:.6g/.4g|a-}"`` gives ``0.25   (exact)``, ``[0.1, 0.3]   (not resolved)`` or ``-``."""
        if not spec:
            return str(self)
        numbers, _, flags = spec.partition("|")
        number, _, ends = numbers.partition("/")
        unknown = set(flags) - set("a-=>")
        if unknown:
            raise ValueError(f"unknown flag {''.join(sorted(unknown))!r} in the Result format {spec!r} (flags: a - = >)")
        if self.value is not None:
            text = format(self.value, number)
            if "a" in flags and self.rel_error is not None:
                text += "   (exact)" if self.rel_error == 0 else f"   (rel. err <= {self.rel_error:.0e})"
            return text
        if "-" in flags and self.lower is None and self.upper is None:
            return "-"
        end = lambda x: "?" if x is None else format(x, ends or number)
        if ">" in flags:
            text = f">= {end(self.lower)}"
        elif "=" in flags and self.lower is not None and self.lower == self.upper:
            text = end(self.lower)
        else:
            text = f"[{end(self.lower)}, {end(self.upper)}]"
        return text + ("   (not resolved)" if "a" in flags else "")

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.name}: not resolved ({self.reason}); in [{_fmt(self.lower)}, {_fmt(self.upper)}]"
        acc = "exact" if self.rel_error == 0 else (f"relative error <= {self.rel_error:.1e}"
                                                   if self.rel_error is not None else "accuracy unknown")
        return f"{self.name} = {_fmt(self.value)} ({acc}; {self.method})"

    def __repr__(self) -> str:
        return f"<Result {self}; enclosure {self._enclosure()}>"

    def _enclosure(self) -> str:
        end = lambda x: "?" if x is None else f"{x:.15g}"
        return f"[{end(self.lower)}, {end(self.upper)}]"

    def _repr_html_(self) -> str:
        return _html_table(self.name, [("value", _fmt(self.value) if self.value is not None else "not resolved"),
                                       ("enclosure", self._enclosure()),
                                       ("relative error", "-" if self.rel_error is None else f"{self.rel_error:.1e}"),
                                       ("method", self.method), ("reason", self.reason or "-")])

    def to_json(self) -> str:
        """Strict JSON text that :meth:`from_json` reads back to an equal result (infinities kept)."""
        return json.dumps(_encode(self), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any], name: str | None = None) -> "Result":
        """A result from :meth:`to_json` text, or from the flat :meth:`as_dict` form of a CLI ``--json``
        output (``name`` then names it; keys other than the fields become details)."""
        d = json.loads(text) if isinstance(text, str) else dict(text)
        if d.get("type") == "Result":
            return _decode(d)
        fields = ("value", "lower", "upper", "rel_error", "method", "reason")
        if "method" not in d:
            raise ValueError("not a result: no 'method' key")
        v = {k: _number(d.get(k)) if k not in ("method", "reason") else d.get(k) for k in fields}
        return cls(name or str(d.get("name", "result")), v["value"], v["method"], v["rel_error"], v["lower"],
                   v["upper"], v["reason"], {k: x for k, x in d.items() if k not in fields and k != "name"})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (non-finite numbers are written as null by :func:`mlmix.files.dumps_json`)."""
        out = {"value": self.value, "lower": self.lower, "upper": self.upper, "rel_error": self.rel_error,
               "method": self.method, "reason": self.reason}
        out.update({k: v for k, v in self.details.items() if not (isinstance(v, np.ndarray) and v.size > 64)})
        return out

    # ---------------------------------------------------------------- derived results
    def reciprocal(self, name: str, method: str | None = None) -> "Result":
        """1/x with the enclosure mapped (and the relative error r/(1-r)); an unresolved x gives an
        unresolved 1/x with the mapped interval. A zero value or lower bound maps to an infinite side
        (reported as an interval with an unknown upper side)."""
        method = method or f"1 / {self.name} ({self.method})"
        lo = None if not self.upper else 1.0 / self.upper
        hi = None if not self.lower or self.lower <= 0 else 1.0 / self.lower
        if self.value is None:
            return Result(name, None, method, None, lo, hi, self.reason, dict(self.details))
        if self.value == 0:
            return Result.interval(name, None, None, method, f"{self.name} is 0: {name} is infinite", **self.details)
        r = self.rel_error
        rel = None if r is None or r >= 1 else (0.0 if r == 0 else r / (1 - r))
        return Result(name, 1.0 / self.value, method, rel, lo, hi, None, dict(self.details))

    def widened(self, eps: float, note: str, rtol: float = DEFAULT_RTOL,
                within: tuple[float, float] | None = None) -> "Result":
        """The result for q when this one is for q', a positive quantity computed from a perturbed
        input with |q' / q - 1| <= eps: the enclosure [lo, hi] of q' gives q in [lo / (1 + eps),
        hi / (1 - eps)], so the relative error becomes (r + eps) / (1 - eps). It stays a value when
        that is within ``rtol`` or at most twice r; otherwise it is reported as the interval, clipped
        to ``within`` (the range the quantity always lies in) when given."""
        if eps == 0 or (self.lower is None and self.upper is None and within is None):
            return self
        lo = None if self.lower is None else self.lower / (1 + eps)
        hi = None if self.upper is None or eps >= 1 else self.upper / (1 - eps)
        method = self.method + note
        if self.value is not None and self.rel_error is not None and eps < 1:
            total = (self.rel_error + eps) / (1 - eps)
            if total <= max(rtol, 2 * self.rel_error):
                return Result(self.name, self.value, method, total, lo, hi, None, dict(self.details))
        if within is not None:
            lo = within[0] if lo is None else min(max(lo, within[0]), within[1])
            hi = within[1] if hi is None else max(min(hi, within[1]), lo)
        reason = self.reason or (f"the input's relative error ({eps:.2g}) exceeds the accuracy target {rtol:g}: "
                                 "only an enclosure is certified" if eps < 1 else
                                 "the input's error is not bounded: only the range the quantity always lies in "
                                 "is certain")
        return Result(self.name, None, method, None, lo, hi, reason, dict(self.details))



def renamed(r: Result, name: str, note: str = "") -> Result:
    """``r`` under the name ``name``, ``note`` appended to its method (value, enclosure, reason and
    details unchanged)."""
    return Result(name, r.value, r.method + note, r.rel_error, r.lower, r.upper, r.reason, dict(r.details))

@dataclass(frozen=True, eq=False)
class VectorResult(NDArrayOperatorsMixin):
    """A vector over the states with its method and accuracy.

    ``rel_error``: bound on the entrywise relative error max_x |v_x - true_x| / |v_x| (None when only
    normwise accuracy is known); ``abs_error``: bound on ||v - true||_1; ``residual``: the defining
    equation's residual (for a stationary law ||pi P - pi||_1); ``log_value``: log v, exact where v
    underflows (None when not available).

    It behaves like its array in numpy code: arithmetic, ufuncs, indexing and array methods
    (``.sum()``, ``.max()``, ``.shape``) act on ``value`` and return plain arrays.
    """

    name: str
    value: np.ndarray
    method: str
    rel_error: float | None = None
    abs_error: float | None = None
    residual: float | None = None
    log_value: np.ndarray | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for label, x in (("rel_error", self.rel_error), ("abs_error", self.abs_error), ("residual", self.residual)):
            if x is not None and not x >= 0:
                raise InvalidResultError(f"vector result {self.name!r}: {label} must be a number >= 0, got {x!r}")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self.value if dtype is None else self.value.astype(dtype)
        return arr.copy() if copy else arr

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        inputs = tuple(x.value if isinstance(x, VectorResult) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getattr__(self, name: str) -> Any:  # array methods and attributes of the value
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.value, name)

    def __len__(self) -> int:
        return int(self.value.shape[0])

    def __iter__(self) -> Any:
        return iter(self.value)

    def __getitem__(self, index: Any) -> Any:
        return self.value[index]

    def __repr__(self) -> str:
        acc = (f"entrywise relative error <= {self.rel_error:.1e}" if self.rel_error is not None
               else f"||error||_1 <= {self.abs_error:.1e}" if self.abs_error is not None
               else f"residual {self.residual:.1e}" if self.residual is not None else "accuracy unknown")
        return f"{self.name} = {self._values()} ({acc}; {self.method})"

    def _values(self) -> str:
        """The value as text: a scipy.sparse matrix (a flux between states) by its shape and non-zeros."""
        if not isinstance(self.value, np.ndarray) and hasattr(self.value, "nnz"):
            return f"<sparse {self.value.shape[0]} x {self.value.shape[1]}, {self.value.nnz} non-zeros>"
        return np.array2string(self.value, precision=6, threshold=8, edgeitems=3)

    def _repr_html_(self) -> str:
        return _html_table(self.name, [("value", self._values()), ("shape", str(self.value.shape)),
                                       ("entrywise relative error", _fmt(self.rel_error)),
                                       ("||error||_1", _fmt(self.abs_error)), ("residual", _fmt(self.residual)),
                                       ("method", self.method)])

    def to_json(self) -> str:
        """Strict JSON text that :meth:`from_json` reads back (values, log values and accuracy)."""
        return json.dumps(_encode(self), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any]) -> "VectorResult":
        d = json.loads(text) if isinstance(text, str) else dict(text)
        if d.get("type") != "VectorResult":
            raise ValueError("not a VectorResult written by to_json")
        return _decode(d)

    def as_dict(self, values: bool = True) -> dict[str, Any]:
        out = {"method": self.method, "rel_error": self.rel_error, "abs_error": self.abs_error,
               "residual": self.residual, **self.details}
        if values:
            out["value"] = self.value
            if self.log_value is not None:
                out["log_value"] = self.log_value
        return out


# ---------------------------------------------------------------------------------------- helpers


def _up(x: float) -> float:
    """The next float above x (outward rounding of an upper end)."""
    return math.nextafter(x, math.inf) if math.isfinite(x) else x


def _down(x: float) -> float:
    return math.nextafter(x, -math.inf) if math.isfinite(x) else x


def _float_below(q: Fraction) -> float:
    """The largest float <= the rational q (-inf below the float range)."""
    try:
        x = float(q)
    except OverflowError:
        return -math.inf if q < 0 else sys.float_info.max
    return math.nextafter(x, -math.inf) if Fraction(x) > q else x


def _float_above(q: Fraction) -> float:
    """The smallest float >= the rational q (inf above the float range)."""
    return -_float_below(-q)


def _times(x: float, y: float) -> float:
    """x * y for interval ends, with 0 * inf = 0 (an unbounded side times an exact zero)."""
    return 0.0 if x == 0 or y == 0 else x * y


def _quotient(x: float, y: float) -> float:
    """x / y for interval ends, y != 0, with x / inf = 0 (also for infinite x: the limit from the
    finite side, which the other ends bound)."""
    return 0.0 if math.isinf(y) else x / y


def _html_table(title: str, rows: list[tuple[str, str]]) -> str:

    body = "".join(f"<tr><th style='text-align:left'>{escape(k)}</th><td style='text-align:left'>{escape(v)}</td>"
                   "</tr>" for k, v in rows)
    return f"<table><caption style='text-align:left'><b>{escape(title)}</b></caption>{body}</table>"


_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _number(x: Any) -> Any:
    """A JSON number back from :func:`_encode` (the strings 'inf', '-inf', 'nan')."""
    return _NONFINITE[x] if isinstance(x, str) and x in _NONFINITE else x


def _encode(obj: Any) -> Any:
    """Plain JSON values of a result, report or array, non-finite floats as the strings 'inf', '-inf',
    'nan' and results tagged with their type, so that :func:`_decode` rebuilds them exactly."""
    if isinstance(obj, Result):
        return {"type": "Result", "name": obj.name, "value": _encode(obj.value), "lower": _encode(obj.lower),
                "upper": _encode(obj.upper), "rel_error": _encode(obj.rel_error), "method": obj.method,
                "reason": obj.reason, "details": _encode(dict(obj.details))}
    if isinstance(obj, VectorResult):
        return {"type": "VectorResult", "name": obj.name, "value": _encode(obj.value), "method": obj.method,
                "rel_error": _encode(obj.rel_error), "abs_error": _encode(obj.abs_error),
                "residual": _encode(obj.residual), "log_value": _encode(obj.log_value),
                "details": _encode(dict(obj.details))}
    if isinstance(obj, np.ndarray):
        return {"type": "ndarray", "dtype": str(obj.dtype), "shape": list(obj.shape),
                "data": [_encode(x) for x in obj.ravel().tolist()]}
    if isinstance(obj, Mapping):
        return {str(k): _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else ("nan" if math.isnan(x) else "inf" if x > 0 else "-inf")
    if obj is None or isinstance(obj, str):
        return obj
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def _decode(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    if not isinstance(obj, dict):
        return _number(obj)
    kind = obj.get("type")
    if kind == "ndarray":
        return np.array([_number(x) for x in obj["data"]], dtype=obj["dtype"]).reshape(obj["shape"])
    if kind == "Result":
        return Result(obj["name"], _decode(obj["value"]), obj["method"], _decode(obj["rel_error"]),
                      _decode(obj["lower"]), _decode(obj["upper"]), obj["reason"], _decode(obj["details"]))
    if kind == "VectorResult":
        return VectorResult(obj["name"], _decode(obj["value"]), obj["method"], _decode(obj["rel_error"]),
                            _decode(obj["abs_error"]), _decode(obj["residual"]), _decode(obj["log_value"]),
                            _decode(obj["details"]))
    return {k: _decode(v) for k, v in obj.items()}


def dumps_results(obj: Any) -> str:
    """Strict JSON of a report holding results (``Chain.summary()``, dicts and lists of results) that
    :func:`loads_results` reads back with every result, array and infinity restored."""
    return json.dumps(_encode(obj), allow_nan=False, indent=1)


def loads_results(text: str) -> Any:
    """The report written by :func:`dumps_results` (or ``Result.to_json``), results rebuilt."""
    return _decode(json.loads(text))


def results_frame(report: Mapping[str, Any]) -> Any:
    """A report holding results (``Chain.summary()``) as a ``pandas.DataFrame``: one row per
    :class:`Result`, indexed by its key, with columns name, value, lower, upper, rel_error, method,
    reason (a missing number is NaN and its reason says why); the other entries (states, period,
    the stationary law's dict, eps, ...) in ``frame.attrs``. pandas is optional (the ``frames`` extra)."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("a DataFrame needs pandas: pip install 'mlmix[frames]' (or pip install pandas)") from None
    rows = {k: v for k, v in report.items() if isinstance(v, Result)}
    columns = ["name", "value", "lower", "upper", "rel_error", "method", "reason"]
    frame = pd.DataFrame([[getattr(r, c) for c in columns] for r in rows.values()], index=list(rows), columns=columns)
    for c in ("value", "lower", "upper", "rel_error"):
        frame[c] = frame[c].astype(float)
    frame.attrs.update({k: v for k, v in report.items() if k not in rows})
    return frame
