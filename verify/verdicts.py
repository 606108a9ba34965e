"""Theorem objects, verdicts that can fail, the registry, and the Hypothesis search for violations.

A theorem states one or more inequalities ``lhs REL rhs`` about an *instance* (a source of
conditionals, a chain, a model with parameters). ``hypotheses(instance)`` says whether the
theorem applies; ``check(instance)`` computes both sides of every inequality (a :class:`Part`)
with an absolute error bound on each side and returns a :class:`Verdict`.

Checks that can fail
    Every part can be *weakened*: its right-hand side is scaled by ``strength`` (0.5 by default)
    in the failing direction (``lhs <= s rhs``, ``lhs >= rhs / s``, ``lhs == rhs / s``).
    A weakened bound that is still never violated on the instances tried means the check could not
    tell the theorem from a false one: ``mlmix verify`` reports ``weakened: "missed"``. A theorem
    whose conclusion is an identity with a side that is zero by construction, or whose content is
    a hypothesis, is shown to fail by *dropping a hypothesis* instead: ``violations`` (a strategy
    of instances breaking one hypothesis, searched by :func:`mlmix.verify.runner.find_violation`)
    and ``counterexamples`` (stored minimal instances, re-checked on every run).

Tightness that means something
    A part's tightness (bound / exact for an upper bound, exact / bound for a lower bound: the
    looseness factor, >= 1 whenever the bound holds) is reported only when both sides are resolved
    above their accuracy (absolute error <= :data:`RESOLVED_RTOL` x |value|); otherwise the
    instance is counted "at the floating-point floor".

Tightness floors and blind spots
    An :class:`Attaining` instance records ``looseness``, the looseness factor its check reaches (the
    smallest over the resolved parts). Every search re-checks it: a factor above the recorded one (beyond
    its accuracy) means a constant of the check became looser, and a part whose weakened form is violated
    on no instance means the check could not tell the bound from a false one. Either is a *blind spot*
    (:attr:`TheoremReport.blind_spots`): ``mlmix verify`` exits 4 on one, even when every result holds.

Crashes
    A check that raises is an *error*, never a verdict: the instance, the exception and its traceback
    are kept (:attr:`TheoremReport.errors`, one record per distinct error with the first instance that
    raised it), the theorem's status is "error" (whatever the other instances showed, a known-false
    entry included), and ``mlmix verify`` exits 3. Every exception counts, ``BaseException`` included
    (``sys.exit``, ``pytest.skip``, ``GeneratorExit``), except :class:`KeyboardInterrupt`, which stops
    the run (a ``KeyboardInterrupt`` raised by the check itself cannot be told from Ctrl-C).
    A side that evaluates to NaN is such an error (:class:`UndefinedSide`, raised when the
    :class:`Part` is built): NaN is never a verdict, neither holds nor a counterexample.

Regimes
    ``regime(instance)`` describes an instance (n, vocabulary size, temperature, states,
    reversible or not) for ``mlmix verify --stats``; a verdict whose two sides are equal by
    construction carries ``trivial`` (the reason) and is not counted as non-trivial.
"""

from __future__ import annotations

import math
import traceback
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import StopTest

#: The catalogues, keyed by the prefix of their results' ids (``glauber.thm5``, ``pitfalls.prop5``): one
#: name per paper in the code, the command line and the JSON; the docs call them paper G and paper P.
PAPERS = {"glauber": "Mixing Times of Glauber Dynamics on Masked Language Models",
          "pitfalls": "Promises and Pitfalls of Generative Masked Language Modeling",
          "facts": "Standard Markov-chain facts the proofs and the exact engine use (THEOREMS.md 2C)",
          "samplers": "Samplers run on masked LMs: scan orders, MH targets, masked-diffusion decoders",
          "engine": "mlmix's exact engine (interval ends)",
          "constants": "Paper G's constants of a model without its chain: certified, streamed, searched, relaxed",
          "diagnostics": "Convergence diagnostics and dense, CSR and matrix-free chains against closed forms",
          "user": "Theorems of the user's own package (mlmix.theorem, mlmix verify --module)"}

#: Default relative error assumed for each side of a comparison when a check gives none.
RTOL = 1e-9

#: A side is resolved (its tightness ratio meaningful) when its error is at most this fraction of it.
RESOLVED_RTOL = 1e-6

#: Default weakening: the right-hand side scaled by 0.5 (upper bounds) or 2 (lower bounds, identities).
WEAKEN = 0.5

RELATIONS = ("<=", ">=", "==")

#: What a check may raise without being an error of the check: Ctrl-C stops the run (Hypothesis's
#: internal StopTest is its own control flow, never raised by a check).
STOPS: tuple[type[BaseException], ...] = (KeyboardInterrupt, StopTest)


class UndefinedSide(ArithmeticError):
    """A side of a comparison (or its error bound) evaluated to NaN: the check is broken on this
    instance. Raised when the :class:`Part` is built, so the search reports the check's *error* with
    the instance, never a verdict."""


@dataclass(frozen=True)
class Part:
    """One inequality ``lhs relation rhs`` of a check, with absolute error bounds on both sides.

    ``ratio``: whether lhs/rhs is a meaningful looseness factor (positive quantities); identities
    have none.

    A NaN side or error bound raises :class:`UndefinedSide`. An infinite side is a value: a vacuous
    bound (``lhs <= inf``) holds, an infinite quantity refutes a finite bound, and two equal
    infinities are equal; it is never *resolved* (no looseness factor, no slack against another
    infinity).
    """

    name: str
    lhs: float
    rhs: float
    relation: str
    lhs_error: float = 0.0
    rhs_error: float = 0.0
    ratio: bool = True

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        for side in ("lhs", "rhs", "lhs_error", "rhs_error"):
            value = float(getattr(self, side))
            if math.isnan(value):
                what = f"side {side}" if side in ("lhs", "rhs") else f"the error bound of side {side[:3]}"
                raise UndefinedSide(f"{what} of {self.name!r} ({self.relation}) evaluated to NaN")
            object.__setattr__(self, side, value)

    def bound(self, strength: float = 1.0) -> float:
        """The right-hand side scaled by ``strength`` in the failing direction (1 = as stated)."""
        r = self.rhs
        if strength == 1.0:
            return r
        if self.relation == "<=":
            return r * strength if r > 0 else r / strength
        return r / strength if r > 0 else r * strength

    def tolerance(self, strength: float = 1.0) -> float:
        return self.lhs_error + self.rhs_error / min(strength, 1.0)

    def holds(self, strength: float = 1.0) -> bool:
        """Whether ``lhs relation bound(strength)`` holds within the error bounds (equal infinities
        are equal)."""
        b, tol = self.bound(strength), self.tolerance(strength)
        if self.relation == "<=":
            return self.lhs <= b + tol
        if self.relation == ">=":
            return self.lhs >= b - tol
        return self.lhs == b or abs(self.lhs - b) <= tol

    @property
    def slack(self) -> float:
        """rhs - lhs for '<=', lhs - rhs for '>=', -|lhs - rhs| for '=='; 0 when within the error
        (or when the sides are equal, infinities included)."""
        if self.lhs == self.rhs:
            return 0.0
        d = {"<=": self.rhs - self.lhs, ">=": self.lhs - self.rhs}.get(self.relation, -abs(self.lhs - self.rhs))
        return 0.0 if abs(d) <= self.tolerance() else d

    @property
    def resolved(self) -> bool:
        """Both sides finite, nonzero and resolved above their accuracy."""
        return (math.isfinite(self.lhs) and math.isfinite(self.rhs) and self.lhs != 0 and self.rhs != 0
                and self.lhs_error <= RESOLVED_RTOL * abs(self.lhs) and self.rhs_error <= RESOLVED_RTOL * abs(self.rhs))

    @property
    def tightness(self) -> float | None:
        """bound / exact (upper bounds) or exact / bound (lower bounds) when resolved, else None."""
        if not self.ratio or self.relation == "==" or not self.resolved or self.lhs * self.rhs <= 0:
            return None
        return self.rhs / self.lhs if self.relation == "<=" else self.lhs / self.rhs

    @property
    def tightness_error(self) -> float:
        """Relative error bound of :attr:`tightness`."""
        return self.lhs_error / abs(self.lhs) + self.rhs_error / abs(self.rhs) if self.resolved else math.inf

    def as_dict(self) -> dict:
        return {"name": self.name, "lhs": self.lhs, "rhs": self.rhs, "relation": self.relation,
                "lhs_error": self.lhs_error, "rhs_error": self.rhs_error, "holds": self.holds()}


def part(name: str, lhs: float, rhs: float, relation: str, rtol: float = RTOL, atol: float = 0.0,
         ratio: bool = True) -> Part:
    """A :class:`Part` whose sides carry error rtol |side| + atol (an infinite side is exact: error 0,
    not an infinite error that would let it pass every comparison)."""
    lhs, rhs = float(lhs), float(rhs)
    return Part(name, lhs, rhs, relation, side_error(lhs, rtol, atol), side_error(rhs, rtol, atol), ratio)


def side_error(value: float, rtol: float, atol: float = 0.0) -> float:
    """rtol |value| + atol for a finite value; 0 for an infinity (an exact value: ``inf <= 1`` is
    refuted, ``1 <= inf`` holds); NaN for NaN (so that :class:`Part` reports it)."""
    return rtol * abs(value) + atol if not math.isinf(value) else 0.0


@dataclass(frozen=True)
class Verdict:
    """Outcome of one check: the parts (inequalities), boolean certificates that cannot be weakened
    (``conditions``, e.g. exact sympy identities), details, and ``trivial`` (why the two sides are
    equal by construction on this instance, or None)."""

    parts: tuple[Part, ...]
    conditions: Mapping[str, bool] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    trivial: str | None = None

    @property
    def holds(self) -> bool:
        return all(p.holds() for p in self.parts) and all(self.conditions.values())

    def weakened_holds(self, strength: float = WEAKEN, name: str | None = None) -> bool:
        """Whether the verdict still holds with the part ``name`` (every part when None) weakened."""
        return all(p.holds(strength if name is None or p.name == name else 1.0) for p in self.parts) \
            and all(self.conditions.values())

    @property
    def main(self) -> Part:
        return self.parts[0]

    @property
    def lhs(self) -> float:
        return self.main.lhs

    @property
    def rhs(self) -> float:
        return self.main.rhs

    @property
    def relation(self) -> str:
        return self.main.relation

    @property
    def slack(self) -> float:
        return self.main.slack

    @property
    def tightness(self) -> float | None:
        return self.main.tightness

    def failing(self) -> list[str]:
        return [p.name for p in self.parts if not p.holds()] + [k for k, v in self.conditions.items() if not v]

    def as_dict(self) -> dict:
        out = {"lhs": self.lhs, "rhs": self.rhs, "relation": self.relation, "slack": self.slack,
               "parts": [p.as_dict() for p in self.parts], "details": dict(self.details)}
        if self.conditions:
            out["conditions"] = dict(self.conditions)
        if self.failing():
            out["failing"] = self.failing()
        return out


def verdict(*parts: Part, trivial: str | None = None, conditions: Mapping[str, bool] | None = None,
            **details: Any) -> Verdict:
    """A Verdict from parts (the first is the main one: the paper's headline inequality)."""
    return Verdict(tuple(parts), {k: bool(v) for k, v in (conditions or {}).items()}, dict(details), trivial)


def compare(lhs: float, rhs: float, relation: str, rtol: float = RTOL, atol: float = 0.0, *, name: str = "main",
            trivial: str | None = None, **details: Any) -> Verdict:
    """A one-part Verdict for ``lhs relation rhs``, each side with error rtol |side| + atol."""
    return verdict(part(name, lhs, rhs, relation, rtol, atol), trivial=trivial, **details)


def error_record(err: BaseException, where: str, instance: Any = None) -> dict:
    """What a crash leaves in a report: where it happened, the instance, the exception and its traceback."""
    return {"where": where, "instance": instance, "error": error_line(err),
            "traceback": "".join(traceback.format_exception(type(err), err, err.__traceback__))}


def error_line(err: BaseException) -> str:
    """``Type: message`` on one line (``SystemExit: 0``, ``Skipped: why``; the type alone when the
    message is empty)."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def add_error(errors: list[dict], err: BaseException, where: str, instance: Any = None, distinct: int = 3) -> None:
    """Keep a crash in ``errors``: a repeat of an error already kept (same type and message) only
    counts (``more``), so each error is reported once, with the first instance that raised it; at
    most ``distinct`` different errors are kept (the later ones count on the last)."""
    line = error_line(err)
    for record in errors:
        if record["error"] == line and record["where"] == where:
            record["more"] = record.get("more", 0) + 1
            return
    if len(errors) < distinct:
        errors.append(error_record(err, where, instance))
    else:
        errors[-1]["more"] = errors[-1].get("more", 0) + 1


@dataclass(frozen=True)
class Applicability:
    """Whether a theorem's hypotheses hold on an instance, with the reason when they do not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Counterexample:
    """A stored minimal instance on which a conclusion fails: the published statement when
    ``dropped`` is None (a known-false result), else the named hypothesis is broken (it shows the
    hypothesis is necessary). ``build`` returns the instance."""

    description: str
    build: Callable[[], Any]
    dropped: str | None = None


@dataclass(frozen=True)
class Attaining:
    """A stored instance on which the bound is attained or nearly so (the family that shows a bound is
    tight); it is checked first by every search. ``looseness``: the recorded looseness factor
    (tightness, >= 1) of each part of its verdict, in order (None: not recorded, e.g. an identity); a
    re-check above a recorded factor (beyond the accuracy of the ratio) is a blind spot: a constant of
    the check became looser. A single number records the main part."""

    description: str
    build: Callable[[], Any]
    looseness: float | tuple[float | None, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.looseness, tuple):
            object.__setattr__(self, "looseness", (float(self.looseness),))
        if not any(x is not None for x in self.looseness) or any(x is not None and not x >= 1.0
                                                               for x in self.looseness):
            raise ValueError(f"looseness factors are >= 1 (bound / exact), got {self.looseness!r}")

    def looser(self, v: Verdict) -> list[str]:
        """The parts of ``v`` looser than recorded (or no longer resolved), each with its factor."""
        out = []
        for recorded, p in zip(self.looseness, v.parts):
            if recorded is None:
                continue
            t = p.tightness
            if t is None or t > recorded * (1 + p.tightness_error) + 1e-9:
                out.append(f"{p.name}: {'unresolved' if t is None else f'{t:.6g}'} > recorded {recorded:.6g}")
        if len(self.looseness) > len(v.parts):
            out.append(f"{len(self.looseness)} factors recorded for {len(v.parts)} parts")
        return out


@dataclass(frozen=True)
class Violation:
    """A hypothesis of a theorem that matters: ``strategy`` builds instances breaking it and
    ``conclusion_fails(instance)`` says whether the conclusion then fails on the instance."""

    hypothesis: str
    strategy: Callable[[], st.SearchStrategy]
    conclusion_fails: Callable[[Any], bool]
    description: str


class Entry(ABC):
    """A numbered result of a paper: a theorem object or a result that is not checkable numerically."""

    id: str  # e.g. "glauber.thm5"
    paper: str  # a key of PAPERS
    number: str  # e.g. "Theorem 5"
    statement: str  # words and formula
    #: Which reading of a convention the object uses and which one fails (empty when none matters).
    conventions: str = ""
    checkable: bool = True


class NotCheckable(Entry):
    """A result listed with the reason it is not checked numerically (and what covers it instead)."""

    checkable = False
    reason: str
    covered_by: tuple[str, ...] = ()


class Theorem(Entry):
    """One checked result. Subclasses set the class attributes and implement the methods."""

    #: Where the counterexample to the statement as published is documented (docs section), or None.
    #: A refuted theorem is still searched and its stored counterexamples re-checked, but its failure
    #: is expected: it does not make ``mlmix verify`` exit 1.
    refuted_in: str | None = None
    #: Stored minimal counterexamples (see :class:`Counterexample`).
    counterexamples: tuple[Counterexample, ...] = ()
    #: Hypotheses that matter, with strategies of instances breaking them.
    violations: tuple[Violation, ...] = ()
    #: Instances on which the main bound is attained (checked before the random search).
    attaining: tuple[Attaining, ...] = ()
    #: Multiplier of the number of instances (expensive checks search fewer).
    budget: float = 1.0

    @abstractmethod
    def strategy(self) -> st.SearchStrategy:
        """Instances satisfying the hypotheses (mostly; ``hypotheses`` filters the rest)."""

    def hypotheses(self, instance: Any) -> Applicability:
        """Whether the theorem applies to ``instance`` (default: always; the strategy builds only valid ones)."""
        return Applicability(True)

    @abstractmethod
    def check(self, instance: Any) -> Verdict:
        """Both sides of every inequality of the conclusion, computed exactly (with error bounds)."""

    def describe(self, instance: Any) -> Any:
        """A JSON-serialisable description of an instance (for counterexamples)."""
        return describe_value(instance)

    def regime(self, instance: Any) -> dict:
        """n, vocab, temperature, states and reversible (None when not applicable) of an instance."""
        regime = getattr(instance, "regime", None)
        return regime() if callable(regime) else {}

    #: Set when no part can be scaled meaningfully (identities with a side zero by construction):
    #: the check is then shown to fail through ``violations`` / ``counterexamples`` only.
    weaken_by_hypothesis: bool = False


def describe_value(value: Any) -> Any:
    """JSON-able and compact: ``value.describe()`` when it has one, an array as nested lists (one list
    per row), a list or tuple element by element, else ``repr`` on one line."""
    describe = getattr(value, "describe", None)
    if callable(describe):
        return describe()
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and hasattr(value, "shape") and getattr(value, "ndim", 0) > 0:
        return tolist()
    if isinstance(value, (list, tuple)) and any(hasattr(v, "shape") or hasattr(v, "describe") for v in value):
        return [describe_value(v) for v in value]
    return " ".join(repr(value).split())


class OnFirst:
    """Mixin for theorems whose instances are tuples (instance, extra, ...): hypotheses, regime and
    description come from the first element; ``extras`` names the others in the description."""

    extras: tuple[str, ...] = ()

    def hypotheses(self, instance: tuple) -> Applicability:
        return super().hypotheses(instance[0])

    def regime(self, instance: tuple) -> dict:
        return super().regime(instance[0])

    def describe(self, instance: tuple) -> Any:
        return {**super().describe(instance[0]), **dict(zip(self.extras, instance[1:]))}


REGISTRY: dict[str, Theorem] = {}
UNCHECKED: dict[str, NotCheckable] = {}
#: Every entry (theorems and not-checkable results) in registration order: the paper order.
CATALOGUE: dict[str, Entry] = {}


def _add(entry: Entry) -> None:
    if entry.id in CATALOGUE:
        raise ValueError(f"result id {entry.id!r} registered twice")
    if entry.paper not in PAPERS:
        raise ValueError(f"unknown paper {entry.paper!r}")
    CATALOGUE[entry.id] = entry


def register(cls: type[Entry]) -> type[Entry]:
    """Class decorator: instantiate and add to the catalogue (and to REGISTRY or UNCHECKED)."""
    entry = cls()
    _add(entry)
    (REGISTRY if isinstance(entry, Theorem) else UNCHECKED)[entry.id] = entry
    return cls


def unregister(entry_id: str) -> None:
    """Remove an entry (tests register throwaway theorems)."""
    CATALOGUE.pop(entry_id, None)
    REGISTRY.pop(entry_id, None)
    UNCHECKED.pop(entry_id, None)


def not_checkable(id: str, paper: str, number: str, statement: str, reason: str,
                  covered_by: tuple[str, ...] = ()) -> NotCheckable:
    """Register a result that is not checked numerically, with the reason."""
    cls = type(f"NotCheckable_{id}", (NotCheckable,), {"id": id, "paper": paper, "number": number,
                                                       "statement": statement, "reason": reason,
                                                       "covered_by": tuple(covered_by)})
    register(cls)
    return UNCHECKED[id]


# ----------------------------------------------------------------------------------------------
# Search


class _Violation(Exception):
    pass


@dataclass
class Observation:
    """What one checked instance contributed to a report."""

    regime: dict
    verdict: Verdict


def _range(values: list) -> list | None:
    vals = [v for v in values if v is not None]
    return [min(vals), max(vals)] if vals else None


def regimes(observations: list[Observation]) -> dict:
    """[min, max] of n, vocab, temperature and states over the instances, how many were non-reversible
    (None where the notion does not apply), and the range of the spectral gaps when the check computed
    them (a verdict's ``details["gap"]``: metastable chains reach 1e-8 .. 1e-30)."""
    out = {key: _range([o.regime.get(key) for o in observations]) for key in ("n", "vocab", "temperature", "states")}
    flags = [o.regime.get("reversible") for o in observations]
    out["nonreversible"] = sum(1 for f in flags if f is False) if any(f is not None for f in flags) else None
    gaps = _range([o.verdict.details.get("gap") for o in observations])
    if gaps is not None:
        out["gap"] = gaps
    out["shares"] = regime_shares([o.regime for o in observations])
    return out


#: Bins of the state count shown by ``mlmix verify --stats`` (upper edges).
STATE_BINS = ((16, "<=16"), (81, "17..81"), (729, "82..729"), (math.inf, ">729"))


def regime_shares(regimes: list[dict]) -> dict:
    """Percentages of the instances per regime: n >= 4 and |V| >= 3, the state-count bins of
    :data:`STATE_BINS`, and every boolean flag a strategy puts in its regimes (such as ``edgeless`` or
    ``k = n``), except ``reversible`` (counted by :func:`regimes`). Empty without instances."""
    if not regimes:
        return {}
    pct = lambda k: round(100.0 * k / len(regimes), 1)
    out = {}
    sized = [r for r in regimes if r.get("n") is not None and r.get("vocab") is not None]
    if sized:
        out["n>=4 and |V|>=3"] = pct(sum(r["n"] >= 4 and r["vocab"] >= 3 for r in sized))
    states = [r["states"] for r in regimes if r.get("states") is not None]
    if states:
        lower = 0
        for upper, name in STATE_BINS:
            out[f"states {name}"] = pct(sum(lower < s <= upper for s in states))
            lower = upper
    flags = sorted({k for r in regimes for k, v in r.items() if isinstance(v, bool) and k != "reversible"})
    for flag in flags:
        out[flag] = pct(sum(bool(r.get(flag)) for r in regimes))
    return out


def tightness_summary(observations: list[Observation]) -> dict | None:
    """Tightness of the main part over the non-trivial instances where both sides are resolved: median,
    best (closest to 1) and worst, with the worst relative accuracy, and how many were at the floor."""
    parts = [o.verdict.main for o in observations if o.verdict.parts and o.verdict.trivial is None]
    if not parts or all(not p.ratio or p.relation == "==" for p in parts):
        return None
    resolved = sorted((p.tightness, p.tightness_error) for p in parts if p.tightness is not None)
    out = {"part": parts[0].name, "resolved": len(resolved),
           "at_floor": sum(1 for p in parts if p.tightness is None and p.ratio and p.relation != "==")}
    if resolved:
        values = [t for t, _ in resolved]
        out.update(median=values[len(values) // 2], best=values[0], worst=values[-1],
                   rel_accuracy=max(e for _, e in resolved))
    return out


def weakening_outcome(theorem: Theorem, observations: list[Observation], strength: float = WEAKEN) -> dict:
    """For every part of the non-trivial instances: 'caught' when some instance violates the part
    weakened by ``strength`` (instances whose sides are equal by construction do not count)."""
    observations = [o for o in observations if o.verdict.trivial is None]
    names: list[str] = []
    for o in observations:
        names += [p.name for p in o.verdict.parts if p.name not in names]
    return {name: "caught" if any(not o.verdict.weakened_holds(strength, name) for o in observations) else "missed"
            for name in names}


@dataclass
class TheoremReport:
    """What a search found (see ``mlmix verify --json`` for the meaning of each field)."""

    id: str
    paper: str
    number: str
    statement: str
    status: str  # "holds", "fails", "known false", "error", "not checkable"
    examples: int
    nontrivial: int = 0
    regimes: dict = field(default_factory=dict)
    tightness: dict | None = None
    weakened: str | None = None  # "caught" / "missed" / None (not checkable)
    weakened_by: str | None = None  # how: "rhs scaled by 0.5 / 2" or "dropped hypothesis: ..."
    weakened_parts: dict = field(default_factory=dict)
    min_slack: float | None = None
    counterexample: Any = None
    stored: list = field(default_factory=list)
    attained: list = field(default_factory=list)
    refuted_in: str | None = None
    reason: str | None = None
    conventions: str = ""
    errors: list = field(default_factory=list)  # crashes (see error_record)
    blind_spots: list = field(default_factory=list)  # weakened bounds missed, attaining instances too loose

    @property
    def holds(self) -> bool:
        """No violation found among the instances tried (always False for a known-false result)."""
        return self.status == "holds"

    @property
    def unexpected(self) -> bool:
        """A failure not documented as a refutation (or a stored counterexample that stopped failing)."""
        return self.status == "fails"

    @property
    def crashed(self) -> bool:
        return self.status == "error"

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _recheck(theorem: Theorem, ce: Counterexample) -> dict:
    """Re-check a stored counterexample: it must break exactly the named hypothesis (or none) and the
    conclusion must fail on it."""
    out = {"description": ce.description, "dropped": ce.dropped}
    try:
        inst = ce.build()
        out["instance"] = theorem.describe(inst)
        applies = bool(theorem.hypotheses(inst))
        v = theorem.check(inst)
    except STOPS:
        raise
    except BaseException as err:  # a crash is neither a failure of the conclusion nor a confirmation
        return {**out, "hypotheses_hold": None, "conclusion_fails": None, "as_expected": False,
                "error": error_record(err, f"stored counterexample: {ce.description}", out.get("instance"))}
    ok = (not v.holds) and (applies == (ce.dropped is None))
    return {**out, "hypotheses_hold": applies, "conclusion_fails": not v.holds, "as_expected": ok,
            "verdict": v.as_dict()}


def _probe(theorem: Theorem, strategy: st.SearchStrategy, examples: int, seed: int, shrink: bool,
           violated: Callable[[Verdict], bool], on_verdict: Callable[[Any, Verdict], None] | None,
           observations: list[Observation], errors: list[dict]) -> list:
    """The Hypothesis search over ``strategy``: [instance, verdict] of the (shrunk) violation, or [] when
    none is found among ``examples`` instances satisfying the hypotheses."""
    failure: list = []
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])

    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, print_blob=False, phases=phases,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def probe(instance: Any) -> None:
        try:
            applies = bool(theorem.hypotheses(instance))
            v = theorem.check(instance) if applies else None
        except STOPS:
            raise
        except BaseException as err:  # a crash is an error, never a counterexample: kept, and the search goes on
            add_error(errors, err, "search", _safe_describe(theorem, instance))
            return
        assume(applies)
        if on_verdict is not None:
            on_verdict(instance, v)
        if violated(v):
            failure[:] = [instance, v]
            raise _Violation
        observations.append(Observation(theorem.regime(instance), v))

    try:
        probe()
    except _Violation:
        return failure
    return []


def _attaining(theorem: Theorem, violated: Callable[[Verdict], bool], weaken: float | None,
               observations: list[Observation], errors: list[dict], blind: list[str]) -> tuple[list[dict], list]:
    """Check the families that attain the bound: their records, and [instance, verdict] of the first that
    violates it ([] when none does)."""
    attained = []
    for a in theorem.attaining:
        try:
            inst = a.build()
            applies = theorem.hypotheses(inst)
            if not applies:
                raise ValueError(f"the hypotheses fail on the attaining instance: {applies.reason}")
            v = theorem.check(inst)
        except STOPS:
            raise
        except BaseException as err:
            errors.append(error_record(err, f"attaining instance: {a.description}"))
            continue
        looser = a.looser(v)
        attained.append({"description": a.description, "tightness": [p.tightness for p in v.parts],
                         "recorded": list(a.looseness), "holds": v.holds, "within_record": not looser})
        if weaken is None and looser:
            blind.append(f"attaining instance looser than recorded ({'; '.join(looser)}): {a.description}")
        if violated(v):
            return attained, [inst, v]
        observations.append(Observation(theorem.regime(inst), v))
    return attained, []


def _status(theorem: Theorem, found: bool, stored: list[dict], errors: list[dict], weaken: float | None) -> str:
    """'error', 'fails', 'holds' or 'known false' (see :class:`TheoremReport`)."""
    if errors:
        return "error"
    if weaken is not None:
        return "fails" if found else "holds"
    if theorem.refuted_in is not None:
        return "known false" if all(s["as_expected"] for s in stored if s["dropped"] is None) else "fails"
    return "fails" if found or not all(s["as_expected"] for s in stored) else "holds"


def _weakening(theorem: Theorem, observations: list[Observation], stored: list[dict]) -> tuple[str, str, dict]:
    """Whether the weakened theorem is caught ('caught' / 'missed'), how it was weakened, and the outcome
    per part."""
    parts = weakening_outcome(theorem, observations)
    if theorem.refuted_in is not None:
        return "caught", "known false: the stored counterexample fails", parts
    if theorem.weaken_by_hypothesis or not parts:
        dropped = [s["dropped"] for s in stored if s["as_expected"] and s["dropped"] is not None]
        how = f"dropped hypothesis: {', '.join(dropped)}" if dropped else "no stored counterexample"
        return "caught" if dropped else "missed", how, parts
    weakened = "caught" if all(o == "caught" for o in parts.values()) else "missed"
    return weakened, f"every bound scaled by {WEAKEN:g} (upper) or {1 / WEAKEN:g} (lower, identities)", parts


def search(theorem: Theorem, examples: int = 100, seed: int = 0, strategy: st.SearchStrategy | None = None,
           on_verdict: Callable[[Any, Verdict], None] | None = None, weaken: float | None = None,
           weaken_part: str | None = None, shrink: bool = True) -> TheoremReport:
    """Run Hypothesis over ``theorem.strategy()`` (or ``strategy``) for up to ``examples`` instances
    satisfying the hypotheses; on a violation Hypothesis shrinks it and the minimal one is reported.

    ``weaken``: search for violations of the bound weakened by this strength (part ``weaken_part``,
    every part when None) instead of the theorem itself.
    """
    strategy = strategy if strategy is not None else theorem.strategy()
    observations: list[Observation] = []
    errors: list[dict] = []
    blind: list[str] = []

    def violated(v: Verdict) -> bool:
        return not v.holds if weaken is None else not v.weakened_holds(weaken, weaken_part)

    # the families that attain the bound come first
    attained, failure = _attaining(theorem, violated, weaken, observations, errors, blind)
    if not failure:
        failure = _probe(theorem, strategy, examples, seed, shrink, violated, on_verdict, observations, errors)
    counterexample = None
    if failure:
        instance, v = failure
        counterexample = {"instance": theorem.describe(instance), **v.as_dict()}
        observations.append(Observation(theorem.regime(instance), v))
    stored = [_recheck(theorem, ce) for ce in theorem.counterexamples] if weaken is None else []
    errors += [s["error"] for s in stored if "error" in s]
    status = _status(theorem, bool(failure), stored, errors, weaken)
    weakened, how, parts = _weakening(theorem, observations, stored)
    if weakened == "missed" and weaken is None:
        missed = [k for k, o in parts.items() if o == "missed"] or [how]
        blind.append(f"weakened bound not caught on any instance: {', '.join(missed)}")
    slacks = [o.verdict.slack for o in observations if o.verdict.parts and not math.isnan(o.verdict.slack)]
    return TheoremReport(
        id=theorem.id, paper=theorem.paper, number=theorem.number, statement=theorem.statement, status=status,
        examples=len(observations), nontrivial=sum(o.verdict.trivial is None for o in observations),
        regimes=regimes(observations), tightness=tightness_summary(observations), weakened=weakened,
        weakened_by=how, weakened_parts=parts, min_slack=min(slacks) if slacks else None, counterexample=counterexample,
        stored=stored, attained=attained, refuted_in=theorem.refuted_in, conventions=theorem.conventions,
        errors=errors, blind_spots=blind)


def _safe_describe(theorem: Theorem, instance: Any) -> Any:
    try:
        return theorem.describe(instance)
    except STOPS:
        raise
    except BaseException as err:  # the description of a broken instance must not hide the first error
        return f"(no description: {error_line(err)})"


def unchecked_report(entry: NotCheckable) -> TheoremReport:
    """The report of a result that is not checked numerically."""
    reason = entry.reason + (f" (covered by: {', '.join(entry.covered_by)})" if entry.covered_by else "")
    return TheoremReport(id=entry.id, paper=entry.paper, number=entry.number, statement=entry.statement,
                         status="not checkable", examples=0, reason=reason, conventions=entry.conventions)
