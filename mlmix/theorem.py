"""Write your own theorems and let mlmix search them for counterexamples: the stable, public face of
mlmix's theorem objects (:mod:`mlmix.verify.verdicts`, :mod:`mlmix.verify.user`).

A theorem states an inequality ``lhs <= rhs`` (or ``>=``, ``==``) about an *instance* drawn by a
Hypothesis strategy (:mod:`mlmix.strategies`), under hypotheses; its check computes both sides with
error bounds (a :class:`~mlmix.theory.results.Result` carries its certified interval), and the search
reports **holds** (no violation on the instances tried), **fails** (with the smallest counterexample
Hypothesis could shrink to), **error** (the check raised, whatever it raised, or a side evaluated to
NaN: never a verdict) or **not checkable**, plus whether the bound **weakened** by a factor 2 was
violated somewhere ("caught": the search can tell the theorem from a false one)::

    from mlmix import strategies as ms
    from mlmix.theorem import inequality, theorem
    from mlmix.theory.chain.markov_chain import Chain
    from mlmix.theory.local.influence import influence_matrix

    @theorem(statement="rho < 1 => absolute spectral gap of Glauber >= (1 - rho) / n",
             strategy=lambda: ms.contraction_sources(81), hypotheses=lambda i: influence_matrix(i.source).rho < 1)
    def dobrushin_gap(inst):
        gap = Chain.from_source(inst.source).absolute_spectral_gap
        return inequality(gap, ">=", (1 - influence_matrix(inst.source).rho) / inst.space.length)

Run them with ``mlmix verify --module mypkg.bounds`` (``--json`` for CI), or from pytest with
:func:`assert_holds` (the ``mlmix`` pytest plugin adds ``--mlmix-thorough`` and a summary line).
See ``docs/testing-your-bounds.md``.
"""

from mlmix.verify.user import (
    UserTheorem,
    assert_holds,
    check,
    failure_message,
    inequality,
    load,
    not_checkable,
    register,
    theorem,
)
from mlmix.verify.verdicts import (
    Applicability,
    Attaining,
    Counterexample,
    Part,
    TheoremReport,
    Verdict,
    Violation,
    compare,
    part,
    verdict,
)

__all__ = [
    "Applicability", "Attaining", "Counterexample", "Part", "TheoremReport", "UserTheorem", "Verdict", "Violation",
    "assert_holds", "check", "compare", "failure_message", "inequality", "load", "not_checkable", "part", "register",
    "theorem", "verdict",
]
