"""Assertions for tests on mlmix's numbers that never pass or fail on roundoff.

Every quantity mlmix computes is a :class:`~mlmix.theory.results.Result` with a certified enclosure
``[lower, upper]`` of the true value. :func:`assert_at_least`, :func:`assert_at_most` and
:func:`assert_close` compare that enclosure (not the floating-point value) with the bound:

* **pass** when the whole enclosure satisfies the comparison (the true value does, whatever the
  rounding);
* **fail** (AssertionError) when the whole enclosure violates it (the true value does);
* **undecided** (:class:`UndecidedError`, an AssertionError) when the enclosure straddles the bound:
  the computation is not accurate enough to tell, and the message says so instead of guessing.

A plain float is taken as exact (a closed form, a bound you state); a Result whose value could not be
computed and whose bounds are unknown is always undecided.
"""

from __future__ import annotations

import math
from typing import Any

from mlmix.theory.results import Result

__all__ = ["UndecidedError", "assert_at_least", "assert_at_most", "assert_close", "enclosure"]


class UndecidedError(AssertionError):
    """The certified enclosure straddles the bound: neither pass nor fail can be certified."""


def enclosure(x: Any) -> tuple[float, float]:
    """[lower, upper] enclosing the true value of ``x``: a Result's certified bounds (an unknown side
    is -inf / +inf), or (x, x) for a number. TypeError for anything else."""

    if isinstance(x, Result):
        lo = -math.inf if x.lower is None else float(x.lower)
        hi = math.inf if x.upper is None else float(x.upper)
        if x.value is not None and x.rel_error is not None:  # the resolved value's own error bound
            v, e = float(x.value), float(x.rel_error) * abs(float(x.value))
            lo, hi = (v - e if x.lower is None else lo), (v + e if x.upper is None else hi)
        return lo, hi
    if isinstance(x, bool) or not isinstance(x, (int, float)) and not hasattr(x, "__float__"):
        raise TypeError(f"expected a Result or a number, got {type(x).__name__}")
    v = float(x)
    if math.isnan(v):
        raise ValueError("cannot compare NaN")
    return v, v


def _show(x: Any) -> str:
    lo, hi = enclosure(x)
    name = getattr(x, "name", None)
    where = f"{lo:.6g}" if lo == hi else f"[{lo:.6g}, {hi:.6g}]"
    reason = getattr(x, "reason", None)
    return (f"{name} " if name else "") + where + (f" ({reason})" if reason else "")


def assert_at_least(result: Any, bound: Any, msg: str = "") -> None:
    """Pass when ``result >= bound`` is certain (lower(result) >= upper(bound)), fail when
    ``result < bound`` is certain (upper(result) < lower(bound)), else :class:`UndecidedError`."""
    lo, hi = enclosure(result)
    blo, bhi = enclosure(bound)
    if lo >= bhi:
        return
    prefix = f"{msg}: " if msg else ""
    if hi < blo:
        raise AssertionError(f"{prefix}{_show(result)} is below the bound {_show(bound)} (certified: the whole "
                             "enclosure lies under it)")
    raise UndecidedError(f"{prefix}UNDECIDED whether {_show(result)} >= {_show(bound)}: the certified enclosure "
                         "straddles the bound, so the accuracy is not enough to tell (not a pass, not a fail)")


def assert_at_most(result: Any, bound: Any, msg: str = "") -> None:
    """Pass when ``result <= bound`` is certain, fail when ``result > bound`` is certain, else
    :class:`UndecidedError`."""
    lo, hi = enclosure(result)
    blo, bhi = enclosure(bound)
    if hi <= blo:
        return
    prefix = f"{msg}: " if msg else ""
    if lo > bhi:
        raise AssertionError(f"{prefix}{_show(result)} is above the bound {_show(bound)} (certified: the whole "
                             "enclosure lies over it)")
    raise UndecidedError(f"{prefix}UNDECIDED whether {_show(result)} <= {_show(bound)}: the certified enclosure "
                         "straddles the bound, so the accuracy is not enough to tell (not a pass, not a fail)")


def assert_close(result: Any, expected: Any, rtol: float = 1e-6, atol: float = 0.0, msg: str = "") -> None:
    """Pass when the enclosure of ``result`` lies within rtol |expected| + atol of every value of
    ``expected``'s enclosure, fail when it lies entirely farther away, else :class:`UndecidedError`."""
    if not (rtol >= 0 and atol >= 0):
        raise ValueError(f"rtol and atol must be >= 0, got {rtol}, {atol}")
    lo, hi = enclosure(result)
    elo, ehi = enclosure(expected)
    tol = rtol * max(abs(elo), abs(ehi)) + atol
    prefix = f"{msg}: " if msg else ""
    if ehi - tol <= lo and hi <= elo + tol:
        return
    if hi < elo - tol or lo > ehi + tol:
        raise AssertionError(f"{prefix}{_show(result)} differs from {_show(expected)} by more than the tolerance "
                             f"{tol:.3g} (certified)")
    raise UndecidedError(f"{prefix}UNDECIDED whether {_show(result)} is within {tol:.3g} of {_show(expected)}: the "
                         "certified enclosure is wider than the comparison can resolve (not a pass, not a fail)")
