"""The constants of a model: one entry point, one report, one recipe.

:func:`model_constants` answers "what are paper G's constants of this model's frame, and does Theorem 5 hold"
for any source of conditionals (a masked LM over a frame, its exact table, a score table): brackets
[lower, upper] of rho, alpha, Delta, T* = Delta / 4 (Cor. 7) and max R (section 4) over every context, the
verdicts of Theorem 5 (rho < 1) and Corollary 7 (T > T*) at the temperature, and the smallest temperature
above which Theorem 5 provably applies (:func:`~mlmix.empirical.model_constants.certify.theorem5_threshold`).
``mlmix estimate --certify`` and ``mlmix verify --mlm`` are views of its :class:`ModelConstants`.

The recipe (``how``):

* ``"auto"``: enumeration of every context when its n |V|^(n-1) forward passes fit ``max_passes`` and
  ``budget`` (a cached exact table: 0 passes), else bounds;
* ``"enumerate"``: enumeration, refused (ValueError) when its passes exceed ``max_passes``;
* ``"bounds"``: no enumeration: lower ends from the worst-context search
  (:func:`~mlmix.empirical.model_constants.context_search.search_lower_bounds`), upper ends from the model
  family's certified bounds (:func:`~mlmix.empirical.model_constants.certify.model_relaxation`) and TV <= 1.

``max_passes`` is a hard cap on every forward pass (the source's ledger counts them, the rate measurement's
included); the report states the passes used against it. The brackets are those of
:func:`~mlmix.empirical.model_constants.certify.certify` (module docstring there: widths, accuracy charged).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from mlmix.empirical.model_constants.certify import (
    APPLIES,
    NOT_APPLY,
    UNDECIDED,
    CertifiedConstants,
    Relaxation,
    certify,
)
from mlmix.empirical.model_constants.head_bound import head_bound_upper
from mlmix.empirical.model_constants.streamed_constants import default_folder, passes_needed
from mlmix.theory.results import Result
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.validation import check_int, parse_duration

#: The recipes of :func:`model_constants` (module docstring).
HOWS = ("auto", "enumerate", "bounds")

#: The default time budget of the forward passes (``mlmix estimate --budget``).
DEFAULT_BUDGET = "10m"


@dataclass(frozen=True)
class ModelConstants:
    """Brackets of rho, alpha, Delta, T* and max R over every context, the verdicts of Theorem 5 and
    Corollary 7 at ``temperature``, Theorem 5's threshold temperature, how they were found (``how``,
    ``method``) and the forward passes used (``passes``) against the cap (``max_passes``); ``certified``: the
    per-pair brackets and witnesses (:class:`~mlmix.empirical.model_constants.certify.CertifiedConstants`)."""

    rho: Result
    alpha: Result
    delta: Result
    contraction_temperature: Result
    rectangle: Result | None
    theorem5: dict
    corollary7: dict
    threshold: dict
    temperature: float
    how: str
    method: str
    passes: int
    max_passes: int | None
    budget_s: float | None
    certified: CertifiedConstants

    def as_dict(self) -> dict:
        """The JSON form: ``mlmix estimate --certify``'s ``certified`` object, with the recipe, Corollary 7's
        verdict and the cap."""
        return {**self.certified.as_dict(), "corollary7": self.corollary7, "how": self.how,
                "max_passes": self.max_passes, "budget_s": self.budget_s}


def corollary7_verdict(t_star: Result, temperature: float) -> dict:
    """Corollary 7 at T from T*'s bracket: "applies" (rho <= T*/T < 1) when T exceeds T*'s upper end, "does not
    apply" when T <= T*'s lower end (attained by evaluated contexts: the hypothesis T > T* fails), else
    "undecided"."""
    lo, hi = t_star.lower, t_star.upper
    if hi is not None and temperature > hi:
        return {"verdict": APPLIES, "why": f"T = {temperature:g} > T* <= {hi:.6g}: rho <= T*/T <= {hi / temperature:.6g}"}
    if lo is not None and temperature <= lo:
        return {"verdict": NOT_APPLY, "why": f"T = {temperature:g} <= T* >= {lo:.6g}"}
    hi_text = "?" if hi is None else f"{hi:.6g}"
    return {"verdict": UNDECIDED, "why": f"T* in [{lo:.6g}, {hi_text}] and T = {temperature:g}"}


def model_constants(source: Conditionals, *, how: str = "auto", budget: str | float | None = DEFAULT_BUDGET,
                    max_passes: int | None = None, temperature: float | None = None, seed: int = 0,
                    folder: str | os.PathLike | None | bool = True, progress: bool = False,
                    log: Callable[[str], None] | None = None, known_lower: dict | None = None,
                    use_cache: bool = True, head_bound: Relaxation | None = head_bound_upper) -> ModelConstants:
    """Paper G's constants of ``source`` with their certified brackets and Theorem 5 / Corollary 7's verdicts
    (module docstring). ``budget``: seconds or a duration such as ``"10m"`` (None: no time limit);
    ``max_passes``: a hard cap on the forward passes; ``folder``: where an enumeration of a masked LM is
    checkpointed (True: mlmix's cache, :func:`~mlmix.empirical.model_constants.streamed_constants.default_folder`;
    None or False: a scratch folder); ``known_lower``: lower bounds found elsewhere (merged by the maximum);
    ``head_bound``: :func:`~mlmix.empirical.model_constants.certify.certify`'s hook (for a table, the head bound of
    the model it was tabulated from: ``mlmix exact --mlm``)."""
    if how not in HOWS:
        raise ValueError(f"how must be one of {', '.join(HOWS)}, got {how!r}")
    budget_s = None if budget is None else parse_duration(budget)
    if max_passes is not None:
        max_passes = check_int(max_passes, "--max-passes", minimum=0)
    if temperature is not None:
        source = source.at_temperature(temperature)
    if how == "enumerate":
        needed = 0 if isinstance(source, ScoreTable) else passes_needed(source.space)
        if max_passes is not None and needed > max_passes:
            raise ValueError(f"enumeration needs {needed:,} forward passes, over --max-passes {max_passes:,}")
        budget_s = None
    where = default_folder(source) if folder is True else (folder or None)
    cert = certify(source, max_passes=max_passes, budget_s=budget_s, seed=seed, folder=where, progress=progress,
                   log=log, known_lower=known_lower, enumeration=how != "bounds", use_cache=use_cache,
                   head_bound=head_bound)
    return report_of(cert, how, max_passes, budget_s)


def report_of(cert: CertifiedConstants, how: str = "auto", max_passes: int | None = None,
              budget_s: float | None = None) -> ModelConstants:
    """The :class:`ModelConstants` view of a :func:`~mlmix.empirical.model_constants.certify.certify` result."""
    return ModelConstants(cert.rho, cert.alpha, cert.delta, cert.contraction_temperature, cert.rectangle,
                          cert.theorem5, corollary7_verdict(cert.contraction_temperature, cert.temperature),
                          cert.threshold, cert.temperature, how, cert.method, cert.passes, max_passes,
                          None if budget_s is None or not math.isfinite(budget_s) else budget_s, cert)

