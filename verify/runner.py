"""Loading, selecting and running the registered theorems; searching for hypothesis violations.

Every module of the :mod:`mlmix.verify.theorems` package is imported (so a new paper's module registers
itself by existing). :func:`run` searches each selected theorem with :func:`mlmix.verify.core.search`.
:class:`Violation` documents that a hypothesis matters: instances that break it, and the
conclusion that then fails; :func:`find_violation` asks Hypothesis for the smallest such instance.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st

from mlmix.verify.core import REGISTRY, Theorem, TheoremReport, search


def load_theorems() -> dict[str, Theorem]:
    """Import every module of :mod:`mlmix.verify.theorems` (each registers its theorems); the registry."""
    import mlmix.verify.theorems as package

    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
    return REGISTRY


def select(patterns: Iterable[str] | None = None) -> list[Theorem]:
    """Registered theorems whose id equals a pattern or starts with it (all when none given), in
    registration order.

    A pattern ending in '.' or naming a prefix such as ``glauber.thm8`` selects every id under it.
    ValueError names a pattern that matches nothing.
    """
    registry = load_theorems()
    ids = list(registry)  # registration order: module by module, each in its paper's order
    if not patterns:
        return [registry[i] for i in ids]
    chosen: list[str] = []
    for pattern in patterns:
        prefix = pattern if pattern.endswith(".") else pattern + "."
        hits = [i for i in ids if i == pattern or i.startswith(prefix)]
        if not hits:
            raise ValueError(f"no theorem matches {pattern!r}; known ids: {', '.join(ids)}")
        chosen += [i for i in hits if i not in chosen]
    return [registry[i] for i in chosen]


def run_one(theorem: Theorem, examples: int, seed: int) -> TheoremReport:
    """:func:`search` with errors reported as a failed theorem (the traceback's last line kept)."""
    try:
        return search(theorem, examples=examples, seed=seed)
    except Exception as err:  # a crash in a check is reported, not hidden, and the run goes on
        last = f"{type(err).__name__}: {err}"
        return TheoremReport(id=theorem.id, paper=theorem.paper, number=theorem.number,
                             statement=theorem.statement, examples=0, holds=False, min_slack=None,
                             tightness_median=None, tightness_max=None,
                             counterexample={"error": last}, refuted_in=theorem.refuted_in)


@dataclass(frozen=True)
class Violation:
    """A hypothesis of a theorem that matters: ``strategy`` builds instances breaking it and
    ``conclusion_fails(instance)`` says whether the conclusion then fails on the instance."""

    hypothesis: str
    strategy: Callable[[], st.SearchStrategy]
    conclusion_fails: Callable[[Any], bool]
    description: str


def find_violation(theorem: Theorem, violation: Violation, examples: int = 200) -> Any:
    """The smallest instance (Hypothesis-shrunk) that breaks the theorem's hypotheses AND on which
    the conclusion fails. Raises hypothesis.errors.NoSuchExample if none is found."""
    def breaks(instance: Any) -> bool:
        return not theorem.hypotheses(instance) and violation.conclusion_fails(instance)

    return find(violation.strategy(), breaks,
                settings=settings(max_examples=examples, database=None, derandomize=True, deadline=None,
                                  suppress_health_check=list(HealthCheck)))
