"""Loading, selecting and running the catalogued results; searching for hypothesis violations.

Every module of the :mod:`mlmix.verify.theorems` package is imported (so a new paper's module registers
itself by existing). :func:`run_one` searches a theorem with :func:`mlmix.verify.verdicts.search` (or
reports a not-checkable result); :func:`find_violation` asks Hypothesis for the smallest instance
that breaks one hypothesis of a theorem and on which its conclusion fails.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Iterable

from hypothesis import HealthCheck, find, settings

import mlmix.verify.theorems as package
from mlmix.progress import if_late
from mlmix.verify.verdicts import (
    CATALOGUE,
    STOPS,
    Entry,
    NotCheckable,
    Theorem,
    TheoremReport,
    Violation,
    error_record,
    search,
    unchecked_report,
)

__all__ = ["Violation", "find_violation", "load_theorems", "run_one", "select", "PROFILES"]

#: Instances per theorem (before its ``budget`` multiplier) and whether hypothesis-violation
#: searches run, per profile of ``mlmix verify``.
PROFILES = {"default": {"examples": 100, "violations": False},
            "thorough": {"examples": 500, "violations": True}}


def load_theorems() -> dict[str, Entry]:
    """Import every module of :mod:`mlmix.verify.theorems` (each registers its results); the catalogue."""

    with if_late("verify: loading the theorems of both papers"):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
    return CATALOGUE


def select(patterns: Iterable[str] | None = None, catalogue: dict[str, Entry] | None = None) -> list[Entry]:
    """Catalogued results whose id equals a pattern or starts with it (all when none given), in
    registration order (module by module, each in its paper's order); ``catalogue``: choose among
    these entries instead of the papers' (user theorems: ``--module``).

    A pattern ending in '.' or naming a prefix such as ``glauber.thm8`` selects every id under it.
    ValueError names a pattern that matches nothing.
    """
    catalogue = load_theorems() if catalogue is None else catalogue
    ids = list(catalogue)
    if not patterns:
        return [catalogue[i] for i in ids]
    chosen: list[str] = []
    for pattern in patterns:
        prefix = pattern if pattern.endswith(".") else pattern + "."
        hits = [i for i in ids if i == pattern or i.startswith(prefix)]
        if not hits:
            raise ValueError(f"no theorem matches {pattern!r}; `mlmix verify --list` shows the ids")
        chosen += [i for i in hits if i not in chosen]
    return [catalogue[i] for i in chosen]


def examples_for(theorem: Theorem, examples: int) -> int:
    """The number of instances a theorem gets: ``examples`` x its budget, at least 5."""
    return max(5, int(round(examples * theorem.budget)))


def run_one(entry: Entry, examples: int, seed: int, violations: bool = False) -> TheoremReport:
    """:func:`search`, a crash reported as status "error" (with its traceback); with
    ``violations`` also search every declared hypothesis violation (the weakening is then 'caught'
    only if each is found)."""
    if isinstance(entry, NotCheckable):
        return unchecked_report(entry)
    try:
        n = examples_for(entry, examples)
        with if_late(f"verify: checking {entry.id} on {n} instances"):  # quiet inside mlmix verify's steps
            report = search(entry, examples=n, seed=seed)
    except STOPS:
        raise
    except BaseException as err:  # a crash outside a check (a strategy, the search): an error, and the run goes on
        return TheoremReport(id=entry.id, paper=entry.paper, number=entry.number, statement=entry.statement,
                             status="error", examples=0, errors=[error_record(err, "search")],
                             refuted_in=entry.refuted_in, conventions=entry.conventions)
    if violations and entry.violations:
        found = {}
        for v in entry.violations:
            try:
                find_violation(entry, v, examples=examples)
                found[v.hypothesis] = "caught"
            except STOPS:
                raise
            except BaseException:  # NoSuchExample (or a crash): not shown to matter on this budget
                found[v.hypothesis] = "missed"
        report.weakened_parts = {**report.weakened_parts, **{f"drop: {k}": o for k, o in found.items()}}
        if entry.weaken_by_hypothesis:
            report.weakened = "caught" if all(o == "caught" for o in found.values()) else "missed"
            report.blind_spots = [b for b in report.blind_spots if not b.startswith("weakened bound")]
            if report.weakened == "missed":
                report.blind_spots.append("weakened bound not caught: no hypothesis violation found for "
                                          + ", ".join(k for k, o in found.items() if o == "missed"))
    return report


def find_violation(theorem: Theorem, violation: Violation, examples: int = 200) -> Any:
    """The smallest instance (Hypothesis-shrunk) that breaks the theorem's hypotheses AND on which
    the conclusion fails. Raises hypothesis.errors.NoSuchExample if none is found."""
    def breaks(instance: Any) -> bool:
        return not theorem.hypotheses(instance) and violation.conclusion_fails(instance)

    return find(violation.strategy(), breaks,
                settings=settings(max_examples=examples, database=None, derandomize=True, deadline=None,
                                  suppress_health_check=list(HealthCheck)))
