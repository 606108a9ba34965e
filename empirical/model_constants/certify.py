"""Certified brackets [lower, upper] of paper G's constants of a masked LM's frame, at any n.

rho, alpha, Delta and T* are suprema over every context of V^n (THEOREMS.md 1.18, 1.19): a maximum over
some contexts is a lower bound, and only every context (or a sound relaxation) gives an upper bound.
:func:`certify` returns each as a :class:`~mlmix.theory.results.Result` whose [lower, upper] contains the
supremum:

* **enumeration** when its n |V|^(n-1) score queries fit ``max_passes`` and ``budget_s`` (or a score
  table / cached exact table is at hand, 0 passes): the streamed exact values
  (:func:`mlmix.empirical.model_constants.streamed_constants.streamed_constants`), lower and upper within the float64
  rounding 8 |V| u (+ n u for the sums) of the value;
* otherwise **bounds**: the lower ends from ``lower_bounds`` (a hook; default: the worst-context search,
  :func:`~mlmix.empirical.model_constants.context_search.search_lower_bounds`; or the maxima over uniformly
  sampled contexts with every replacement, :func:`random_context_lower_bounds`), the upper ends from
  ``relaxation`` (a hook returning sound per-pair upper bounds; default :func:`model_relaxation`, the model
  family's certified bounds) and the trivial bounds:
  rho_ij <= 1 (a TV distance), so rho <= n - 1 and alpha <= n - 1; Lemma 6, rho_ij(T) <= tanh(Delta_ij /
  (4T)), turns an upper bound of Delta_ij into one of rho_ij. Delta and T* have no trivial upper bound
  (scores are unbounded logits): their upper end is unknown (None) unless a relaxation or ``head_bound``
  bounds Delta_ij. ``head_bound`` (a hook like ``relaxation``; default the LayerNorm head bound of
  :mod:`~mlmix.empirical.model_constants.head_bound`: Delta_ij <= 2 sqrt(d) max_{a,b} ||P0(gamma o (W_a -
  W_b))|| from the weights alone, for a model whose logits are an affine map of a LayerNorm output) gives
  every BERT-family model a finite Delta and T* at every n; the elementwise minimum of the hooks' Delta_ij
  upper ends is taken.

Score accuracy: every bracket, whatever the route, charges the stated accuracy e of the scores it was
computed from (:func:`mlmix.theory.sources.score_accuracy.source_accuracy`: that of the model's compute
dtype for a masked LM queried, for its cached exact table and for any table tabulated from it; 0 only for
a table given as numbers): each rho_ij end moves by e / T, each Delta_ij end by 4 e, R by 8 e / T. The
brackets therefore contain the constants of the network evaluated exactly, not only those of its float32
scores; ``score_accuracy`` reports the charge.

Aggregates of brackets: for every j, sum_i lower_ij <= sum_i rho_ij <= sum_i upper_ij, so
max_j sum_i lower_ij <= rho <= max_j sum_i upper_ij (alpha: rows; Delta: the same with Delta_ij; T* =
Delta / 4). Theorem 5's verdict (:func:`theorem5_verdict`): "applies" only when certified (rho's upper
end < 1 at the temperature, or T above T*'s upper end: Cor. 7, rho(T) <= T*/T < 1), "does not apply"
only when an evaluated context proves rho >= 1 (rho's lower end >= 1), else "undecided" with the bracket.

The rectangle statistic max R (paper G section 4, Theorem 3 / Prop. 4; THEOREMS.md 1.22) comes with them:
exact within its stated accuracy by enumeration (the streamed run sweeps every rectangle from the same
scores, :mod:`mlmix.empirical.model_constants.streamed_rectangle`), else a lower bound, R's maximum over the
rectangles the lower-bound hook evaluated (its ``rectangle`` entry), with no upper end.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mlmix.empirical.model_constants.context_search import search_lower_bounds
from mlmix.empirical.model_constants.head_bound import head_bound_upper
from mlmix.empirical.model_constants.streamed_constants import (
    DEFAULT_BLOCK_ROWS,
    RATE_QUERIES,
    passes_needed,
    streamed_constants,
)
from mlmix.empirical.model_constants.streamed_rectangle import RecordedRows, evaluated_rectangles
from mlmix.theory.local.influence import influence_and_oscillation
from mlmix.theory.results import EPS, Result
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.theory.sources.contexts import query_scores
from mlmix.theory.sources.score_accuracy import EXACT, ScoreAccuracy, source_accuracy
from mlmix.validation import check_int, check_temperature

#: A lower-bound hook: (source, max_passes=..., seed=...) -> {"rho_lower": (n, n), "delta_lower": (n, n)
#: (optional), "witnesses": anything JSON-able, "passes": int, "method": str (optional), "max_abs_score":
#: the largest |score| it saw (optional; sizes a model's stated score accuracy, else taken as exact),
#: "rectangle": {"max", "witness", "rectangles", "max_abs_score"} (optional: R over the rectangles it evaluated,
#: :func:`mlmix.empirical.model_constants.streamed_rectangle.evaluated_rectangles`)}.
LowerBounds = Callable[..., dict]
#: A relaxation hook: (source) -> {"rho_upper": (n, n) and/or "delta_upper": (n, n), "method": str}, each
#: entry a sound upper bound of the supremum, or None when it gives nothing; optionally "rho_upper_at": a
#: callable T -> (n, n) of upper ends of rho_ij(T) valid at every T and non-increasing in T (with
#: "rho_upper_at_method"), which Theorem 5's threshold bisects on beside Lemma 6 (:func:`theorem5_threshold`).
Relaxation = Callable[[Conditionals], "dict | None"]

APPLIES, NOT_APPLY, UNDECIDED = "applies", "does not apply", "undecided"



@dataclass(frozen=True)
class CertifiedConstants:
    """Brackets of rho, alpha, Delta and T* (module docstring), the per-pair bracket matrices, the score
    queries used and Theorem 5's verdict at ``temperature``; ``rectangle``: max R (module docstring);
    ``score_accuracy``: the stated accuracy of the scores every bracket charges (module docstring)."""

    rho: Result
    alpha: Result
    delta: Result
    contraction_temperature: Result
    rho_lower: np.ndarray
    rho_upper: np.ndarray
    delta_lower: np.ndarray
    delta_upper: np.ndarray | None
    passes: int
    temperature: float
    method: str
    witnesses: Any = None
    theorem5: dict = field(default_factory=dict)
    rectangle: Result | None = None
    threshold: dict = field(default_factory=dict)
    score_accuracy: ScoreAccuracy = EXACT

    def as_dict(self) -> dict:
        """The JSON form of ``mlmix estimate --certify`` (``certified``)."""
        return {"rho": self.rho, "alpha": self.alpha, "delta": self.delta,
                "contraction_temperature": self.contraction_temperature, "passes": self.passes,
                "temperature": self.temperature, "method": self.method, "theorem5": self.theorem5,
                "rho_ij_lower": self.rho_lower.tolist(), "rho_ij_upper": self.rho_upper.tolist(),
                "delta_ij_lower": self.delta_lower.tolist(),
                "delta_ij_upper": None if self.delta_upper is None else self.delta_upper.tolist(),
                "witnesses": self.witnesses, "rectangle": self.rectangle, "theorem5_threshold": self.threshold,
                "score_accuracy": self.score_accuracy.as_dict()}


def random_context_lower_bounds(source: Conditionals, *, max_passes: int, seed: int = 0) -> dict:
    """Lower bounds of every rho_ij and Delta_ij: maxima over as many uniform contexts as ``max_passes``
    allows, each compared with every replacement (n + n (n-1)(|V|-1) score queries per context; see
    :func:`mlmix.theory.local.influence.influence_and_oscillation`), and ``max_abs_score`` of their own
    scores (n more; it sizes the stated accuracy of a model's scores). No context fits: zeros, 0 passes.
    Hook keys: ``rho_lower`` and ``delta_lower`` (n x n), ``witnesses``, ``passes``, ``method``, for a
    model ``max_abs_score``, and ``rectangle``: max R over the rectangles of the planes through the contexts
    (their rows are among those asked: :func:`~mlmix.empirical.model_constants.streamed_rectangle.evaluated_rectangles`)."""
    space = source.space
    n, q = space.length, space.vocab_size
    per_context = 2 * n + n * (n - 1) * (q - 1)  # + n for the largest |score|
    count = int(max_passes) // per_context
    if count == 0:
        return {"rho_lower": np.zeros((n, n)), "delta_lower": np.zeros((n, n)), "witnesses": None, "passes": 0,
                "method": f"no context (one needs {per_context} queries, over the {max_passes} left)"}
    rng = np.random.default_rng(seed)
    contexts = rng.integers(0, q, size=(count, n))
    recorded = RecordedRows(source)
    infl, osc = influence_and_oscillation(recorded, contexts, None, rng)
    largest = max(float(np.abs(query_scores(source, contexts, i)).max()) for i in range(n))
    return {"rho_lower": infl.rho_ij, "delta_lower": osc.delta_ij, "witnesses": {"contexts": count, "seed": seed},
            "passes": count * per_context, "max_abs_score": largest,
            "method": f"maxima over {count} uniform contexts (seed {seed})",
            "rectangle": evaluated_rectangles(recorded.rows(), source.temperature)}


def model_relaxation(source: Conditionals) -> dict | None:
    """The default ``relaxation`` hook: the certified-bound adapter of the source's model family
    (:data:`~mlmix.empirical.models.families.MODELS`), else the affine-arithmetic relaxation of
    :func:`mlmix.empirical.model_constants.relaxation.certify_relaxation` (which steps aside for unsupported
    models); None for a source that is not a model."""
    # deferred: the registry's loaders and the relaxation load torch (already loaded for a model source)
    from mlmix.empirical.models.families import family_of_source, resolve

    family = family_of_source(source)
    if family is None:
        return None
    if family.bound_adapter is not None:
        return resolve(family.bound_adapter)(source)
    from mlmix.empirical.model_constants.relaxation import certify_relaxation

    return certify_relaxation(source)


def certify(source: Conditionals, *, max_passes: int | None = None, budget_s: float | None = None,
            temperature: float | None = None, lower_bounds: LowerBounds = search_lower_bounds,
            relaxation: Relaxation | None = model_relaxation, head_bound: Relaxation | None = head_bound_upper,
            seed: int = 0, folder: str | os.PathLike | None = None,
            block_rows: int = DEFAULT_BLOCK_ROWS, use_cache: bool = True, progress: bool = False,
            log: Callable[[str], None] | None = None, known_lower: dict | None = None,
            enumeration: bool = True) -> CertifiedConstants:
    """Certified brackets of rho, alpha, Delta and T* of ``source`` (at ``temperature``, default its own),
    by enumeration when it fits ``max_passes`` score queries and ``budget_s`` seconds (at the measured
    rate of a masked LM), else from the hooks (module docstring). A masked LM's cached exact table is
    used when present (``use_cache``; 0 passes). ``folder``: checkpoint an enumeration that queries the
    source there (resumable; unused when a table is at hand). ``head_bound``: a hook like ``relaxation``
    (default: the LayerNorm head bound, :func:`~mlmix.empirical.model_constants.head_bound.head_bound_upper`,
    every Delta_ij <= H for any frame and n; None: not used); the smaller Delta_ij upper end of the two wins.
    ``max_passes`` is a hard cap: a model source
    counts every forward pass in its ledger (:class:`~mlmix.empirical.models.mlm.PassLedger`), the rate
    measurement's included, and refuses one past the cap; ``passes`` is that count. ``known_lower``: lower
    bounds found elsewhere (the hook's keys ``rho_lower``, ``delta_lower``, ``max_abs_score``, ``method``,
    ``rectangle``; e.g. the sampled contexts of ``mlmix estimate``), merged by the entrywise maximum (both
    are lower bounds). ``threshold``: :func:`theorem5_threshold` of the certified Delta_ij upper ends.
    The defaults are the recipe of ``mlmix estimate --certify`` (:func:`~mlmix.empirical.model_constants.constants_report.model_constants`):
    the worst-context search for the lower ends, the model family's relaxation and the head bound for the
    upper ones; ``enumeration=False`` goes to the bounds even where enumeration fits."""
    if temperature is not None:
        source = source.at_temperature(check_temperature(temperature))
    if max_passes is not None:
        max_passes = check_int(max_passes, "--max-passes", minimum=0)
    if budget_s is not None and not (budget_s > 0 and math.isfinite(budget_s)):
        raise ValueError(f"the budget must be a positive number of seconds, got {budget_s!r}")
    if source.space.length < 2:
        raise ValueError("the influence constants need n >= 2 free positions")
    ledger = getattr(source, "ledger", None)
    # the head bound reads the weights (0 passes): evaluated on the model, before its cached table replaces it
    head = head_bound(source) if head_bound is not None else None
    with _capped(ledger, max_passes):
        start = 0 if ledger is None else ledger.used
        out = _certify(_cached(source) if use_cache else source, max_passes, budget_s, lower_bounds, relaxation,
                       head, seed, folder, block_rows, progress, log, known_lower, enumeration)
        return out if ledger is None else replace(out, passes=ledger.used - start)


@contextlib.contextmanager
def _capped(ledger, max_passes: int | None):
    """The ledger's cap lowered to ``max_passes`` more passes for the block (restored after)."""
    if ledger is None or max_passes is None:
        yield
        return
    before = ledger.cap
    ledger.cap = ledger.used + max_passes if before is None else min(before, ledger.used + max_passes)
    try:
        yield
    finally:
        ledger.cap = before


def _certify(source: Conditionals, max_passes: int | None, budget_s: float | None, lower_bounds: LowerBounds,
             relaxation: Relaxation | None, head: dict | None, seed: int, folder, block_rows: int,
             progress: bool, log, known_lower: dict | None, enumeration: bool) -> CertifiedConstants:
    """:func:`certify` on a source already at its temperature (and cached table), under its cap; ``head``: the
    head-bound hook's answer on the model (None: not asked)."""
    space = source.space
    n, q, T = space.length, space.vocab_size, float(source.temperature)
    needed = 0 if isinstance(source, ScoreTable) else passes_needed(space)
    left = _left(source, max_passes)
    # the rate costs RATE_QUERIES passes: not measured when the cap leaves too few for it to matter
    rate = _rate(source) if needed and budget_s is not None and left >= 4 * RATE_QUERIES else math.inf
    left = _left(source, max_passes) if math.isfinite(rate) else left
    allowed = min(left, rate * budget_s if budget_s is not None else math.inf)
    rounding = 8 * q * EPS
    if enumeration and needed <= allowed:
        s = streamed_constants(source, folder=folder if needed else None, block_rows=block_rows, progress=progress,
                               log=log, rate=rate if math.isfinite(rate) else None)
        e = s.score_error
        lo_r, hi_r = _widen(s.rho_ij, rounding, e / T, 1.0)
        lo_d, hi_d = _widen(s.delta_ij, rounding, 4 * e, None)
        out = _assemble(lo_r, hi_r, lo_d, hi_d, T, s.passes, "enumeration",
                        {"rho": s.rho_witness, "delta": s.delta_witness},
                        values=(s.rho, s.alpha, s.delta), rounding=n * EPS, monotone=_monotone([head]), error=e)
        return replace(out, rectangle=s.rectangle.result("R max"), score_accuracy=s.score_accuracy)
    budget = int(allowed) if math.isfinite(allowed) else 0
    low = lower_bounds(source, max_passes=budget, seed=seed)
    max_abs = max(float(low.get("max_abs_score", 0.0)), float((known_lower or {}).get("max_abs_score", 0.0)))
    accuracy = source_accuracy(source, max_abs)
    e = accuracy.error
    lo_r, lo_d = _lower(low, n, T, rounding, e)
    methods = [low.get("method", "lower-bound hook")]
    rectangle = _rectangle_lower(low.get("rectangle"), e, T, methods[0])
    if known_lower:
        known_r, known_d = _lower(known_lower, n, T, rounding, e)
        lo_r, lo_d = np.maximum(lo_r, known_r), np.maximum(lo_d, known_d)
        methods.append(known_lower.get("method", "known lower bounds"))
        known = _rectangle_lower(known_lower.get("rectangle"), e, T, methods[1])
        if (known.lower or 0.0) > (rectangle.lower or 0.0):
            rectangle = known
    hi_r, hi_d = np.ones((n, n)), None
    relaxed = relaxation(source) if relaxation is not None else None
    # the LayerNorm head bound (0 passes), beside the relaxation; the smaller upper end wins
    uppers = [u for u in (relaxed, head) if u]
    deltas = [np.asarray(u["delta_upper"], dtype=np.float64) for u in uppers if u.get("delta_upper") is not None]
    if deltas:
        hi_d = np.minimum.reduce(deltas)
        hi_r = np.minimum(hi_r, _lemma6(hi_d, T))
    for u in uppers:  # rho_ij upper ends of the exact network: widened by the scores' stated accuracy
        if u.get("rho_upper") is not None:
            hi_r = np.minimum(hi_r, np.asarray(u["rho_upper"], dtype=np.float64) + e / T)
    upper_method = "; ".join([*(u.get("method", "relaxation") for u in uppers), "TV <= 1"])
    method = f"lower: {' and '.join(methods)} (the larger); upper: {upper_method}"
    why = ((f"enumeration needs {needed:,} passes, over the {budget:,} that --max-passes and --budget allow"
            if enumeration else "enumeration was not asked for")
           + ", and neither a relaxation nor the head bound bounds Delta_ij (the scores are unbounded logits "
           "without one)")
    out = _assemble(lo_r, hi_r, lo_d, hi_d, T, int(low.get("passes", 0)), method, low.get("witnesses"),
                    values=None, rounding=n * EPS, why=why, monotone=_monotone(uppers), error=e)
    return replace(out, rectangle=rectangle, score_accuracy=accuracy)


def _left(source: Conditionals, max_passes: int | None) -> float:
    """Passes still allowed: ``max_passes``, or what the source's ledger (capped to it) leaves."""
    ledger = getattr(source, "ledger", None)
    if ledger is not None:
        return ledger.left()
    return math.inf if max_passes is None else max_passes


def _lower(low: dict, n: int, T: float, rounding: float, e: float) -> tuple[np.ndarray, np.ndarray]:
    """A lower-bound dict's rho_ij and Delta_ij less their rounding and the scores' stated accuracy e
    (:func:`~mlmix.theory.sources.score_accuracy.source_accuracy`)."""
    lo_r = _widen(np.asarray(low["rho_lower"], dtype=np.float64), rounding, e / T, 1.0)[0]
    lo_d = _widen(np.asarray(low.get("delta_lower", np.zeros((n, n))), dtype=np.float64), rounding, 4 * e, None)[0]
    return lo_r, lo_d


def _lemma6(delta_upper: np.ndarray, T: float) -> np.ndarray:
    """Lemma 6, rho_ij(T) <= tanh(Delta_ij / (4T)), from upper ends of Delta_ij, rounded up."""
    return np.tanh(delta_upper / (4 * T)) * (1 + 4 * EPS) + 4 * EPS


def _monotone(answers: list) -> tuple:
    """The (callable, method) pairs of the hooks' ``rho_upper_at`` entries (:data:`Relaxation`)."""
    return tuple((u["rho_upper_at"], u.get("rho_upper_at_method", "a hook's rho_ij(T) bound"))
                 for u in answers if u and u.get("rho_upper_at") is not None)


def theorem5_threshold(delta_upper: np.ndarray | None, why: str = "", *, rho_upper_at: tuple = (),
                       error: float = 0.0) -> dict:
    """The smallest temperature above which Theorem 5 provably applies, from every certified bound of rho_ij(T)
    that holds at every T and does not increase in T:

        B(T) = max_j sum_{i != j} min(tanh(Delta_ij^up / (4T)), f_1(T)_ij + e / T, f_2(T)_ij + e / T, ...)

    with Lemma 6 from the certified upper ends of Delta_ij (rounded up) and each f_k of ``rho_upper_at``
    (pairs (callable T -> (n, n), method); e.g. the head's ellipsoid bound, in its monotone envelope:
    :func:`~mlmix.empirical.model_constants.head_bound.influence_upper`), charged the scores' stated accuracy
    ``error`` as the brackets are. Each term bounds rho_ij(T) at every T and is (the computed value of) a
    function non-increasing in T (tanh increases and its argument decreases; f_k by its hook's contract; e / T
    decreases), and so are their minimum, the sums and the maximum: B bounds rho(T) and {T : B(T) < 1} is a ray
    (T_5, inf). Bisection finds it: ``temperature`` is the smallest tested T with B(T) < 1 (Theorem 5 applies
    at every T >= it), ``below`` the largest tested T with B(T) >= 1 (0 when none), within a relative 1e-9.
    With Delta_ij upper ends, B(T*) < T*/T* = 1 at Cor. 7's T* (tanh x < x), so T_5 <= T*'s upper end.
    Without any bound: ``temperature`` None, "cannot be certified within the budget" and ``why``. (The exact
    rho(T) of an enumeration need not be monotone in T: the threshold bisects on B, not on it.)"""
    terms = ["Lemma 6's tanh(Delta_ij^up / 4T)"] if delta_upper is not None else []
    terms += [name for _, name in rho_upper_at]
    method = (f"bisection on max_j sum_i of the smallest of {' and '.join(terms)}, each bounding rho_ij(T) and "
              "non-increasing in T" if terms else "bisection on a bound of rho(T) non-increasing in T")
    if not terms:
        return {"temperature": None, "below": None, "method": method,
                "why": f"cannot be certified within the budget: {why}" if why else "cannot be certified: no upper "
                       "bound of Delta_ij"}
    d = None if delta_upper is None else np.asarray(delta_upper, dtype=np.float64).copy()
    n = (d if d is not None else np.asarray(rho_upper_at[0][0](1.0))).shape[0]
    off = ~np.eye(n, dtype=bool)
    if d is not None:
        d[~off] = 0.0
        if not (d > 0).any():
            return {"temperature": 0.0, "below": 0.0, "method": method,
                    "why": "every Delta_ij is 0: rho = 0 and Theorem 5 applies at every T > 0"}

    def bound(T: float) -> float:
        pairs = np.ones((n, n)) if d is None else _lemma6(d, T) * (d > 0)
        for f, _ in rho_upper_at:
            pairs = np.minimum(pairs, np.asarray(f(T), dtype=np.float64) + error / T)
        return _aggregate(pairs * off, 0) * (1 + n * EPS)

    hi = 1.0 if d is None else max(_aggregate(d, 0) / 4, float(d.max())) * (1 + 1e-6)
    while bound(hi) >= 1:  # without Delta_ij upper ends; with them only the rounding (B(T*) < 1)
        if hi > 1e300:
            return {"temperature": None, "below": None, "method": method,
                    "why": "cannot be certified: the bounds of rho(T) stay at or above 1 at every T tested"}
        hi *= 2
    lo = 0.0
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if bound(mid) < 1 else (mid, hi)
    return {"temperature": hi, "below": lo, "method": method,
            "why": f"rho(T) <= {bound(hi)!r} < 1 at T = {hi!r}, and the bound does not increase in T"}


def _rectangle_lower(found: dict | None, error: float, T: float, method: str) -> Result:
    """The hook's max R over its evaluated rectangles as a lower bound, less its rounding (32 u M / T + 2 u R)
    and the scores' stated accuracy ``error`` (8 error / T: R holds 8 scores); no upper end."""
    if not found or not found.get("rectangles"):
        return Result.interval("R max", 0.0, None, method, "the lower-bound hook evaluated no rectangle: R >= 0 "
                               "only (no upper bound: scores are unbounded logits)")
    R, M = float(found["max"]), float(found.get("max_abs_score", 0.0))
    lower = max(0.0, R - 32 * EPS * M / T - 2 * EPS * R - 8 * error / T)
    return Result.interval("R max", lower, None, method,
                           f"the maximum over the {found['rectangles']:,} evaluated rectangles, a lower bound of R "
                           "over every rectangle (no upper bound: scores are unbounded logits)",
                           witness=found.get("witness"), rectangles=found["rectangles"])


def _widen(matrix: np.ndarray, rounding: float, error: float, cap: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair bracket of computed maxima: relative ``rounding`` and absolute ``error`` (a queried model's
    score accuracy) outward, clipped to [0, cap]."""
    lo = np.maximum(matrix * (1 - rounding) - error, 0.0)
    hi = matrix * (1 + rounding) + error
    return lo, (hi if cap is None else np.minimum(hi, cap))


def _cached(source: Conditionals) -> Conditionals:
    """A masked LM's cached exact table (at its temperature) when there is one, else the source."""
    # deferred: torch loads only for a masked LM
    from mlmix.empirical.models.mlm import MaskedLMConditionals
    from mlmix.empirical.models.tabulate import cached_table

    if isinstance(source, MaskedLMConditionals):
        table = cached_table(source)
        if table is not None:
            return table
    return source


def _rate(source: Conditionals) -> float:
    """Score queries per second: measured for a masked LM, unlimited for any other source."""
    if not hasattr(source, "scores_torch"):
        return math.inf
    # deferred: torch loads only for a masked LM
    from mlmix.empirical.models.tabulate import measure_rate

    return measure_rate(source)


def _aggregate(matrix: np.ndarray, axis: int) -> float:
    m = np.asarray(matrix, dtype=np.float64)
    m = m - np.diag(np.diag(m))
    return float(m.sum(axis=axis).max())


def _assemble(lo_r: np.ndarray, hi_r: np.ndarray, lo_d: np.ndarray, hi_d: np.ndarray | None, T: float,
              passes: int, method: str, witnesses: Any, *, values: tuple | None, rounding: float,
              why: str = "", monotone: tuple = (), error: float = 0.0) -> CertifiedConstants:
    """Aggregate the per-pair brackets (sums rounded outward by ``rounding``) into Results; ``monotone`` and
    ``error``: the rho_ij(T) bounds and score accuracy of Theorem 5's threshold (:func:`theorem5_threshold`)."""
    n = lo_r.shape[0]
    down = lambda x: max(0.0, math.nextafter(x * (1 - rounding), -math.inf)) if x > 0 else 0.0
    up = lambda x: math.nextafter(x * (1 + rounding), math.inf)

    def bracket(name: str, lo: float, hi: float | None, value: float | None, cap: float | None = None) -> Result:
        hi = None if hi is None else (min(up(hi), cap) if cap is not None else up(hi))
        lo = down(lo)
        if value is not None and hi is not None:
            lo, hi = min(lo, value), max(hi, value)
            rel = max(value - lo, hi - value) / value if value > 0 else 0.0
            return Result(name, value, "enumeration", rel, lo, hi, None)
        reason = ("the supremum over every context lies in [lower, upper]" if hi is not None else
                  "no upper bound: scores are unbounded logits (a sound relaxation would give one)")
        return Result.interval(name, lo, hi, method, reason)

    rho_v, alpha_v, delta_v = values if values is not None else (None, None, None)
    rho = bracket("rho", _aggregate(lo_r, 0), _aggregate(hi_r, 0), rho_v, n - 1.0)
    alpha = bracket("alpha", _aggregate(lo_r, 1), _aggregate(hi_r, 1), alpha_v, n - 1.0)
    delta = bracket("Delta", _aggregate(lo_d, 0), None if hi_d is None else _aggregate(hi_d, 0), delta_v)
    t_star = bracket("T* = Delta/4 (Cor 7)", _aggregate(lo_d, 0) / 4,
                     None if hi_d is None else _aggregate(hi_d, 0) / 4, None if delta_v is None else delta_v / 4)
    return CertifiedConstants(rho, alpha, delta, t_star, lo_r, hi_r, lo_d, hi_d, passes, T, method, witnesses,
                              theorem5_verdict(rho, t_star, T),
                              threshold=theorem5_threshold(hi_d, why, rho_upper_at=monotone, error=error))


def theorem5_verdict(rho: Result, t_star: Result, temperature: float) -> dict:
    """Theorem 5 at T from the brackets: "applies" when rho's upper end < 1 or T > T*'s upper end
    (Cor. 7: rho(T) <= T*/T < 1), "does not apply" when rho's lower end >= 1 (an evaluated context
    attains it), else "undecided"."""
    lo, hi = rho.lower, rho.upper
    bracket = [lo, hi]
    if hi is not None and hi < 1:
        return {"verdict": APPLIES, "why": f"rho <= {hi:.6g} < 1 at T = {temperature:g}", "rho": bracket}
    if t_star.upper is not None and temperature > t_star.upper:
        return {"verdict": APPLIES, "why": f"T = {temperature:g} > T* <= {t_star.upper:.6g} (Cor. 7: rho <= T*/T < 1)",
                "rho": bracket}
    if lo is not None and lo >= 1:
        return {"verdict": NOT_APPLY, "why": f"rho >= {lo:.6g} >= 1 at T = {temperature:g}, attained by evaluated "
                                             "contexts", "rho": bracket}
    hi_text = "?" if hi is None else f"{hi:.6g}"
    return {"verdict": UNDECIDED, "why": f"rho in [{lo:.6g}, {hi_text}] at T = {temperature:g} contains 1",
            "rho": bracket}
