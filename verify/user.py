"""Theorems defined in a user's own package, searched by the same machinery as the papers' results.

A user theorem is a :class:`mlmix.verify.verdicts.Theorem` (statement, hypotheses, a check computing
both sides of each inequality with error bounds, attaining instances, stored counterexamples) whose
``paper`` is ``"user"``; it lives in :data:`USER`, not in the papers' catalogue, so ``mlmix verify``
runs it only when asked (``--module mypkg.bounds``). Two ways to write one:

* the :func:`theorem` decorator on a check function (the short form)::

      @theorem(statement="rho < 1 => W1 contraction", strategy=lambda: ms.contraction_sources(81),
               hypotheses=lambda inst: rho(inst) < 1)
      def my_bound(inst):
          return compare(lhs(inst), rhs(inst), "<=")

* a subclass of :class:`UserTheorem` decorated with :func:`register` (the full form, with
  ``attaining``, ``counterexamples``, ``violations``, ``regime``, ``describe``).

:func:`check` searches one theorem (the weakened-bound check included: every part's right-hand side
scaled by 1/2 (upper bounds) or 2 (lower bounds) must be violated on some instance, otherwise the
search could not tell the theorem from a false one) and :func:`assert_holds` turns the report into a
test failure with the shrunk counterexample.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from typing import Any, Callable, Iterable

from hypothesis import strategies as st

from mlmix.theory.results import Result
from mlmix.verify.report import format_table
from mlmix.verify.runner import PROFILES, run_one
from mlmix.verify.verdicts import (
    STOPS,
    Applicability,
    Attaining,
    Counterexample,
    Entry,
    NotCheckable,
    Part,
    Theorem,
    TheoremReport,
    Verdict,
    error_line,
    side_error,
    verdict,
)

#: The user theorems (and not-checkable user results) registered so far, by id, in registration order.
USER: dict[str, Entry] = {}

#: Relative error assumed for a plain float side of :func:`inequality` (a few hundred ulps).
FLOAT_RTOL = 1e-12


class UserTheorem(Theorem):
    """Base class of a user theorem: set ``id``, ``statement`` and implement ``strategy`` and
    ``check`` (and optionally ``hypotheses``, ``attaining``, ``counterexamples``); ``number`` defaults
    to "user theorem" (the column "result" of the report)."""

    paper = "user"
    number = ""


def register(cls: type[UserTheorem]) -> type[UserTheorem]:
    """Class decorator: instantiate a :class:`UserTheorem` subclass and add it to :data:`USER`; its
    ``check`` may return a Verdict, a Part or a list of Parts, its ``hypotheses`` an Applicability, a
    bool or (bool, reason). Re-registering the same class (a module imported twice) replaces it; another class with the
    same id is a ValueError."""
    if not (isinstance(cls, type) and issubclass(cls, Theorem)):
        raise TypeError(f"register expects a Theorem subclass, got {cls!r}")
    for name in ("id", "statement"):
        if not isinstance(getattr(cls, name, None), str) or not getattr(cls, name):
            raise ValueError(f"a user theorem needs a non-empty string {name!r} ({cls.__qualname__})")
    entry = cls()
    entry.paper = "user"
    check_fn, hypotheses_fn = entry.check, entry.hypotheses  # accept Part(s) and bool / (bool, reason) too
    entry.check = lambda instance: _as_verdict(check_fn(instance))
    entry.hypotheses = lambda instance: _applicability(hypotheses_fn(instance))
    entry.number = entry.number or "user theorem"
    old = USER.get(entry.id)
    if old is not None and (type(old).__module__, type(old).__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"user theorem id {entry.id!r} registered twice ({type(old).__module__} and {cls.__module__})")
    USER[entry.id] = entry
    return cls


def not_checkable(id: str, statement: str, reason: str, module: str | None = None) -> NotCheckable:
    """Register a user result that is not checked numerically, with the reason (reported as "not
    checkable" by ``mlmix verify --module`` and :func:`check`). ``module`` defaults to the caller's."""
    owner = module or sys._getframe(1).f_globals.get("__name__", "__main__")
    cls = type(f"NotCheckable_{id}", (NotCheckable,), {"id": id, "paper": "user", "number": "user theorem",
                                                       "statement": statement, "reason": reason,
                                                       "__module__": owner})
    old = USER.get(id)
    if old is not None and type(old).__module__ != owner:
        raise ValueError(f"user theorem id {id!r} registered twice ({type(old).__module__} and {owner})")
    USER[id] = cls()
    return USER[id]


def _applicability(value: Any) -> Applicability:
    if isinstance(value, Applicability):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return Applicability(bool(value[0]), str(value[1]))
    return Applicability(bool(value), "" if value else "hypotheses fail")


def _as_verdict(value: Any) -> Verdict:
    if isinstance(value, Verdict):
        return value
    if isinstance(value, Part):
        return verdict(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(p, Part) for p in value):
        return verdict(*value)
    raise TypeError(f"a user theorem's check must return a Verdict or Part(s) (see mlmix.theorem.inequality), "
                    f"got {type(value).__name__}")


def theorem(*, statement: str, strategy: Callable[[], st.SearchStrategy] | st.SearchStrategy,
            id: str | None = None, hypotheses: Callable[[Any], Any] | None = None,
            attaining: Iterable[Attaining] = (), counterexamples: Iterable[Counterexample] = (),
            number: str | None = None, conventions: str = "", budget: float = 1.0,
            module: str | None = None) -> Callable[[Callable[[Any], Any]], Theorem]:
    """Decorator: the check function ``f(instance) -> Verdict | Part`` becomes a registered user theorem
    (returned in its place; ``.check`` is ``f``).

    ``strategy``: a Hypothesis strategy (or a function returning one) of instances; ``hypotheses``:
    ``f(instance) -> bool | (bool, reason) | Applicability`` (instances failing it are skipped and not
    counted); ``id`` defaults to ``module.function``; ``attaining``: instances checked first (where the
    bound is attained); ``budget``: multiplier of the number of instances.
    """
    def wrap(fn: Callable[[Any], Any]) -> Theorem:
        owner = module or fn.__module__
        body = {
            "id": id or f"{owner}.{fn.__name__}", "statement": statement, "number": number or "",
            "conventions": conventions, "budget": float(budget), "attaining": tuple(attaining),
            "counterexamples": tuple(counterexamples), "__module__": owner, "__doc__": fn.__doc__ or statement,
            "strategy": lambda self: strategy() if callable(strategy) and not isinstance(strategy, st.SearchStrategy)
            else strategy,
            "check": lambda self, instance: fn(instance),
        }
        if hypotheses is not None:
            body["hypotheses"] = lambda self, instance: hypotheses(instance)
        cls = type(fn.__name__, (UserTheorem,), body)
        register(cls)
        return USER[body["id"]]
    return wrap


def _side(value: Result | float, rtol: float) -> tuple[float, float]:
    """(value, absolute error) of a side: a Result's certified interval (inf error when a bound is
    unknown: the side is then undecided and cannot refute anything), or a float with rtol |x|."""
    if isinstance(value, Result):
        if value.resolved:
            v = float(value.value)
            lo = v if value.lower is None else float(value.lower)
            hi = v if value.upper is None else float(value.upper)
            return v, max(v - lo, hi - v, abs(v) * (value.rel_error or 0.0))
        if value.lower is not None and value.upper is not None:
            lo, hi = float(value.lower), float(value.upper)
            return (lo + hi) / 2, (hi - lo) / 2
        known = value.lower if value.lower is not None else value.upper
        return (float(known) if known is not None else 0.0), math.inf
    v = float(value)
    return v, side_error(v, rtol)


def inequality(lhs: Result | float, relation: str, rhs: Result | float, name: str = "main",
               rtol: float = FLOAT_RTOL) -> Part:
    """One inequality ``lhs relation rhs`` ("<=", ">=", "==") of a theorem's conclusion. A
    :class:`~mlmix.theory.results.Result` side carries its certified interval as its error (an
    unresolved side with an unknown bound can never produce a counterexample); a float side carries
    ``rtol`` |x| (an infinite float side is exact). A violation is reported only when the sides are
    separated beyond both errors. A NaN side raises :class:`~mlmix.verify.verdicts.UndefinedSide`: the
    check's error on that instance, never a verdict."""
    (a, ea), (b, eb) = _side(lhs, rtol), _side(rhs, rtol)
    return Part(name, a, b, relation, ea, eb)


def _budget() -> tuple[int, bool]:
    """(instances per theorem, whether hypothesis violations are searched): the thorough profile under
    ``pytest --mlmix-thorough`` or ``MLMIX_THOROUGH=1``, else the default profile."""
    plugin = sys.modules.get("mlmix.pytest_plugin")
    thorough = bool(getattr(plugin, "THOROUGH", False)) or os.environ.get("MLMIX_THOROUGH", "") not in ("", "0")
    profile = PROFILES["thorough" if thorough else "default"]
    return profile["examples"], profile["violations"]


def check(target: Entry, examples: int | None = None, seed: int = 0) -> TheoremReport:
    """Search one theorem (a user theorem or one of the papers') as ``mlmix verify`` does: its
    attaining instances, then Hypothesis instances satisfying the hypotheses, a violation shrunk to the
    smallest instance found, the stored counterexamples re-checked, and the weakened bound searched.
    ``examples`` defaults to the profile's (100; 500 under ``--mlmix-thorough``)."""
    if not isinstance(target, Entry):
        raise TypeError(f"check expects a theorem object, got {type(target).__name__}")
    default, violations = _budget()
    report = run_one(target, default if examples is None else examples, seed, violations=violations)
    plugin = sys.modules.get("mlmix.pytest_plugin")
    if plugin is not None:
        plugin.record(report)
    return report


def failure_message(report: TheoremReport) -> str | None:
    """Why a report is not a pass (None when it holds and its weakened bound was caught): the
    ``mlmix verify`` table of the report, with the shrunk counterexample or each error's instance
    and traceback."""
    if report.status == "holds" and report.weakened == "caught":
        return None
    why = {"fails": "a counterexample was found", "known false": "the theorem is documented as false",
           "error": "the check raised an error (a crash is never a verdict)",
           "not checkable": "it is not checkable", "holds": "the weakened bound was never violated: the search "
           "cannot tell this theorem from a false one (add instances near equality: `attaining`)"}
    # a crash carries its traceback: there is no --debug under pytest
    return f"{report.id}: {why.get(report.status, report.status)}\n{format_table([report], debug=report.crashed)}"


def assert_holds(target: Entry, examples: int | None = None, seed: int = 0) -> TheoremReport:
    """:func:`check`, then AssertionError with the report (and the shrunk counterexample) unless the
    theorem holds on every instance tried AND its weakened bound was violated on some instance."""
    __tracebackhide__ = True  # pytest: the failure points at the user's test, not here
    report = check(target, examples, seed)
    message = failure_message(report)
    if message is not None:
        raise AssertionError(message)
    return report


def load(modules: Iterable[str]) -> list[Entry]:
    """Import each module (the current directory first on ``sys.path``, as ``python -m`` does) and
    return the user theorems it registered (its sub-modules' included), in registration order.
    ValueError (one line: the module, the error and where it was raised) when a module cannot be
    imported, whatever it raises (a syntax error, ``sys.exit``; Ctrl-C still stops), or registers no
    theorem; the theorems a failed import registered before failing are dropped."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    chosen: list[Entry] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except STOPS:
            raise
        except BaseException as err:
            for key in [k for k, t in USER.items() if _owned(t, name)]:
                del USER[key]
            raise ValueError(f"cannot import module {name!r}: {error_line(err)}{_raised_at(err)}") from err
        found = [t for t in USER.values() if _owned(t, name) and t not in chosen]
        if not found:
            raise ValueError(f"module {name!r} registers no user theorem (use @mlmix.theorem.theorem or @register)")
        chosen += found
    return chosen


def module_file(name: str) -> str | None:
    """The file an imported module was loaded from (a package's ``__init__.py``), or None."""
    return getattr(sys.modules.get(name), "__file__", None)


def _owned(entry: Entry, module: str) -> bool:
    owner = type(entry).__module__
    return owner == module or owner.startswith(module + ".")


def _raised_at(err: BaseException) -> str:
    """`` (at FILE:LINE)``: the innermost frame of the traceback outside the import machinery (none for
    a syntax error, which names its line itself, or a module that is not found)."""
    if isinstance(err, SyntaxError):
        return ""
    where = ""
    tb = err.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if not path.startswith("<") and path not in (__file__, importlib.__file__):
            where = f" (at {path}:{tb.tb_lineno})"
        tb = tb.tb_next
    return where
