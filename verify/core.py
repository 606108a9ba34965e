"""Theorem objects, verdicts, the registry, and the Hypothesis runner that searches for violations.

A theorem states an inequality lhs REL rhs about an *instance* (a source of conditionals, a
chain, a model with parameters). ``hypotheses(instance)`` says whether the theorem applies;
``check(instance)`` computes both sides exactly and returns a :class:`Verdict`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

PAPERS = {"glauber-mlm": "Mixing Times of Glauber Dynamics on Masked Language Models",
          "gmlm-pitfalls": "Promises and Pitfalls of Generative Masked Language Modeling"}

#: Default relative tolerance of numerical comparisons: lhs <= rhs + RTOL * max(1, |lhs|, |rhs|).
RTOL = 1e-9


@dataclass(frozen=True)
class Verdict:
    """Outcome of one check: ``lhs relation rhs`` with slack and tightness.

    slack: how far the inequality is from failing, in the units of the two sides
        (rhs - lhs for '<=', lhs - rhs for '>=', -|lhs - rhs| for '==').
    tightness: looseness factor, bound / exact for an upper bound and exact / bound for a lower
        bound (>= 1 whenever the bound holds, 1 = tight), None when not meaningful.
    """

    holds: bool
    lhs: float
    rhs: float
    relation: str
    slack: float
    tightness: float | None = None
    details: dict = field(default_factory=dict)


def compare(lhs: float, rhs: float, relation: str, rtol: float = RTOL, tightness: float | None = None,
            **details: Any) -> Verdict:
    """Build a Verdict for ``lhs relation rhs`` with tolerance rtol * max(1, |lhs|, |rhs|)."""
    lhs, rhs = float(lhs), float(rhs)
    tol = rtol * max(1.0, abs(lhs), abs(rhs))
    if relation == "<=":
        slack = rhs - lhs
        holds = slack >= -tol
    elif relation == ">=":
        slack = lhs - rhs
        holds = slack >= -tol
    elif relation == "==":
        slack = -abs(lhs - rhs)
        holds = -slack <= tol
    else:
        raise ValueError(f"relation must be '<=', '>=' or '==', got {relation!r}")
    if math.isnan(lhs) or math.isnan(rhs):
        holds = False
    return Verdict(holds, lhs, rhs, relation, slack, tightness, dict(details))


@dataclass(frozen=True)
class Applicability:
    """Whether a theorem's hypotheses hold on an instance, with the reason when they do not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


class Theorem(ABC):
    """One result of a paper. Subclasses set the class attributes and implement the methods."""

    id: str  # e.g. "glauber.thm5"
    paper: str  # a key of PAPERS
    number: str  # e.g. "Theorem 5"
    statement: str  # words and formula
    #: Where a documented counterexample to the statement as published lives (docs section), or
    #: None. A refuted theorem is still searched and its counterexample printed, but its failure
    #: is expected: it does not make ``mlmix verify`` exit 1.
    refuted_in: str | None = None

    @abstractmethod
    def strategy(self) -> st.SearchStrategy:
        """Instances satisfying the hypotheses (mostly; ``hypotheses`` filters the rest)."""

    @abstractmethod
    def hypotheses(self, instance: Any) -> Applicability:
        """Whether the theorem applies to ``instance``."""

    @abstractmethod
    def check(self, instance: Any) -> Verdict:
        """Both sides of the conclusion, computed exactly."""

    def describe(self, instance: Any) -> Any:
        """A JSON-serialisable description of an instance (for counterexamples)."""
        return repr(instance)


REGISTRY: dict[str, Theorem] = {}


def register(cls: type[Theorem]) -> type[Theorem]:
    """Class decorator: instantiate and add to the registry under ``cls.id``."""
    if cls.id in REGISTRY:
        raise ValueError(f"theorem id {cls.id!r} registered twice")
    if cls.paper not in PAPERS:
        raise ValueError(f"unknown paper {cls.paper!r}")
    REGISTRY[cls.id] = cls()
    return cls


class _Violation(Exception):
    pass


@dataclass
class TheoremReport:
    """What a search found: counts, slack and tightness statistics, the minimal counterexample."""

    id: str
    paper: str
    number: str
    statement: str
    examples: int
    holds: bool
    min_slack: float | None
    tightness_median: float | None
    tightness_max: float | None
    counterexample: Any = None
    refuted_in: str | None = None

    @property
    def unexpected(self) -> bool:
        """A failure of a theorem not documented as refuted."""
        return not self.holds and self.refuted_in is None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def search(theorem: Theorem, examples: int = 100, seed: int = 0,
           strategy: st.SearchStrategy | None = None,
           on_verdict: Callable[[Any, Verdict], None] | None = None) -> TheoremReport:
    """Run Hypothesis over ``theorem.strategy()`` (or ``strategy``) for up to ``examples`` instances
    satisfying the hypotheses; on a violation Hypothesis shrinks it and the minimal one is reported.
    """
    verdicts: list[Verdict] = []
    failure: list = []

    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(strategy if strategy is not None else theorem.strategy())
    def probe(instance: Any) -> None:
        assume(bool(theorem.hypotheses(instance)))
        try:
            verdict = theorem.check(instance)
        except Exception as err:  # a crashing check is a failure on this instance, shrunk and reported
            verdict = Verdict(False, math.nan, math.nan, "==", -math.inf, None,
                              {"error": f"{type(err).__name__}: {err}"})
        if on_verdict is not None:
            on_verdict(instance, verdict)
        if not verdict.holds:
            failure[:] = [instance, verdict]
            raise _Violation
        verdicts.append(verdict)

    try:
        probe()
        holds = True
    except _Violation:
        holds = False
    counterexample = None
    if not holds:
        instance, verdict = failure
        counterexample = {"instance": theorem.describe(instance), "lhs": verdict.lhs, "rhs": verdict.rhs,
                          "relation": verdict.relation, "slack": verdict.slack, "details": verdict.details}
    slacks = [v.slack for v in verdicts] + ([failure[1].slack] if failure else [])
    tight = sorted(v.tightness for v in verdicts if v.tightness is not None and math.isfinite(v.tightness))
    return TheoremReport(
        id=theorem.id, paper=theorem.paper, number=theorem.number, statement=theorem.statement,
        examples=len(verdicts) + (1 if failure else 0), holds=holds,
        min_slack=min(slacks) if slacks else None,
        tightness_median=tight[len(tight) // 2] if tight else None,
        tightness_max=tight[-1] if tight else None,
        counterexample=counterexample, refuted_in=theorem.refuted_in)
