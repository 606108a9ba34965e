"""Results that carry how they were computed and how accurate they are.

Every quantity mlmix computes comes back as a :class:`Result` (a number) or a
:class:`VectorResult` (a vector over the states). A result is either

* **resolved**: ``value`` is a number and ``rel_error`` bounds its relative error,
  ``|value - true| <= rel_error * |value|`` (0 for exact values), so ``lower`` and ``upper``
  enclose the true value; or
* **unresolved**: ``value`` is None, ``reason`` says why (the accuracy target could not be met,
  the size limit was exceeded, the quantity is infinite, ...), and ``lower`` / ``upper`` give
  whatever enclosure is known (None for an unknown side).

``float(result)`` returns the value or raises :class:`~mlmix.errors.UnresolvedError` with the
reason; ``numpy.asarray(vector_result)`` gives the vector. ``as_dict()`` is the JSON form used by
the CLI: ``{"value", "lower", "upper", "rel_error", "method", "reason", ...details}``.

The default accuracy target is :data:`DEFAULT_RTOL` (relative): an algorithm whose error bound
exceeds it reports an interval instead of a number - roundoff is never a result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from mlmix.errors import UnresolvedError

#: Relative accuracy a number must reach to be reported as a value (otherwise: an interval).
DEFAULT_RTOL = 1e-6

#: Unit roundoff of float64.
EPS = float(np.finfo(np.float64).eps) / 2


#: The one name of each quantity a chain reports (``Result.name`` / ``VectorResult.name``), keyed by
#: the attribute of :class:`~mlmix.theory.chain.core.Chain` that returns it and by its key in
#: ``Chain.summary()`` (the JSON of ``mlmix exact``): identical on every representation and size.
NAMES: dict[str, str] = {
    "stationary": "stationary law",
    "log_stationary": "log stationary law",
    "spectral_gap": "spectral gap",
    "absolute_spectral_gap": "absolute spectral gap",
    "relaxation_time": "relaxation time",
    "additive_gap": "additive gap",
    "poincare_constant": "Poincare constant",
    "multiplicative_gap": "multiplicative gap",
    "conductance": "conductance",
    "set_conductance": "Phi(S)",
    "kemeny_constant": "Kemeny constant",
    "t_mix": "t_mix",
    "tv_distance": "d(t)",
    "distance_curve": "TV(mu P^t, pi)",
    "asymptotic_variance": "asymptotic variance",
    "hitting_time": "E_x tau_A",
    "hitting_probabilities": "P_x(tau_A <= t)",
    "committor": "committor P_x(tau_B < tau_A)",
}


def _fmt(x: float | None) -> str:
    if x is None:
        return "?"
    if isinstance(x, (int, np.integer)) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return f"{int(x)}"
    return f"{x:.6g}"


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

    # ---------------------------------------------------------------- constructors
    @classmethod
    def exact(cls, name: str, value: float | int, method: str, **details: Any) -> "Result":
        """A value known exactly (integers, closed forms) or to the last bit."""
        return cls(name, value, method, 0.0, value, value, None, details)

    @classmethod
    def approximate(cls, name: str, value: float, rel_error: float, method: str, **details: Any) -> "Result":
        """A value with a bound on its relative error (the enclosure follows from it)."""
        v, r = float(value), float(rel_error)
        lo, hi = sorted((v * (1 - r), v * (1 + r)))
        return cls(name, v, method, r, lo, hi, None, details)

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

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(self)
        if self.value is None:
            return f"[{format(self.lower, spec) if self.lower is not None else '?'}, " \
                   f"{format(self.upper, spec) if self.upper is not None else '?'}]"
        return format(self.value, spec)

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.name}: not resolved ({self.reason}); in [{_fmt(self.lower)}, {_fmt(self.upper)}]"
        acc = "exact" if self.rel_error == 0 else (f"relative error <= {self.rel_error:.1e}"
                                                   if self.rel_error is not None else "accuracy unknown")
        return f"{self.name} = {_fmt(self.value)} ({acc}; {self.method})"

    def __repr__(self) -> str:
        return f"<Result {self}>"

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
        values = np.array2string(self.value, precision=6, threshold=8, edgeitems=3)
        return f"{self.name} = {values} ({acc}; {self.method})"

    def as_dict(self, values: bool = True) -> dict[str, Any]:
        out = {"method": self.method, "rel_error": self.rel_error, "abs_error": self.abs_error,
               "residual": self.residual, **self.details}
        if values:
            out["value"] = self.value
            if self.log_value is not None:
                out["log_value"] = self.log_value
        return out
