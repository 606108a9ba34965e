"""Paper G's constants of a model as mlmix computes them without the chain (``empirical/model_constants``),
held against the exact pass of :mod:`mlmix.theory.local` (paper key ``constants``).

rho_ij(T) and Delta_ij are suprema over every pair of contexts that differ at one site j (THEOREMS.md 1.18,
1.19); rho = max_j sum_{i != j} rho_ij, alpha = max_i sum_{j != i} rho_ij, Delta = max_j sum_{i != j} Delta_ij,
T* = Delta / 4 (Thm 5, Cor 7). The reference is :func:`mlmix.theory.local.influence.influence_and_oscillation`
on the whole score table (every context enumerated; float64 rounding 8 |V| u per TV and oscillation), a
code path the code under test does not share: the streamed sweep, the certified brackets, the hill climb
over contexts and the affine relaxation of the network.

* ``constants.certified-brackets``: :func:`~mlmix.empirical.model_constants.certify.certify` on score
  tables (read, or seen only through queries with a pass budget) and on tiny random BERT / RoBERTa /
  ModernBERT models, by enumeration or from its hooks (uniform contexts or the worst-context search for the
  lower ends; a relaxation returning the exact Delta_ij rounded up, or the affine relaxation of a BERT, for
  the upper ends): each end of the rho, alpha, Delta and T* brackets, and of the per-pair brackets, against
  the enumerated supremum; Theorem 5's verdict against the enumerated rho and against its own bracket.
* ``constants.streamed``: the streamed rho_ij and Delta_ij (any block size) equal the exact pass bit for bit
  on a score table, and within the stated accuracy of a model's scores when queried from a model (each
  side within the stated accuracy e of its dtype, mlmix.theory.sources.score_accuracy: TV within e/T,
  oscillation within 4e);
  each witness pair differs at j only and re-evaluates to its entry.
* ``constants.searched-lower-bounds``: every entry of the worst-context search, and its rho, alpha and T*,
  is at most the enumerated supremum; each witness pair differs at j only and re-evaluates, from the
  enumerated table, to the entry it attains; the search asks at most its pass budget.
* ``constants.relaxation``: the affine relaxation's [lower, upper] on p_i(a | x) contains the conditional of
  every input x of the set (enumerated with a float64 forward pass of the same weights), on sets with one
  to |V| tokens at each free position; its bound on rho_ij contains the enumerated rho_ij over the set.
* ``constants.float64-containment``: the brackets certify builds from a tiny masked LM's float32 scores, read
  from its tabulated table (the cached route) or queried (streamed), contain rho, alpha, Delta, T* and max R
  of the same model evaluated in float64 (they charge the stated accuracy of the arithmetic).

Each bound is a part of the verdict, so weakening it by x1/2 or x2 is caught on the instances where the
bracket is tight (enumeration, a converged search, a singleton set).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from mlmix.empirical.model_constants.certify import APPLIES, NOT_APPLY, UNDECIDED, certify, random_context_lower_bounds
from mlmix.empirical.model_constants.context_search import search_lower_bounds, search_worst_contexts
from mlmix.empirical.model_constants.streamed_constants import passes_needed, streamed_constants
from mlmix.errors import InvalidResultError
from mlmix.theory.local.influence import (
    aggregate_influence,
    contraction_temperature,
    influence_and_oscillation,
    pair_distances,
)
from mlmix.theory.local.rectangles import rectangle_summary
from mlmix.theory.results import EPS
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.theory.sources.contexts import query_scores
from mlmix.verify import instances as S
from mlmix.verify.mlm_instances import (
    ModelSpec,
    float64_model,
    masked_lm_instances,
    masked_lm_source,
    model_specs,
)
from mlmix.verify.verdicts import Part, Theorem, Verdict, part, register, verdict

PAPER = "constants"

#: Largest score table of the checks (|V|^n).
MAX_STATES = 81


class Queried(Conditionals):
    """A score table seen only through queries: enumeration costs n |V|^(n-1) passes, so a pass budget
    sends :func:`certify` to its hooks."""

    def __init__(self, table: ScoreTable) -> None:
        super().__init__(table.space, table.temperature)
        self.inner = table

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        return self.inner.site_scores(contexts, site)


@dataclass(eq=False)
class Case:
    """A source (an :class:`~mlmix.verify.instances.Instance`) and how the code under test is run on it."""

    inst: S.Instance
    options: dict = field(default_factory=dict)

    @property
    def source(self) -> Conditionals:
        return self.inst.source

    def regime(self) -> dict:
        space = self.inst.space
        return {"n": space.length, "vocab": space.vocab_size, "temperature": self.source.temperature,
                "states": space.size, "reversible": None, "model": self.inst.kind == "tiny-mlm"}

    def describe(self) -> dict:
        return {**self.inst.describe(), **self.options}


@dataclass(frozen=True)
class Truth:
    """The enumerated rho_ij and Delta_ij (theory/local's exact pass on the whole table), the table, and the
    accuracy of the comparison: ``rel`` relative (float64 rounding) and ``score_error`` (the stated accuracy
    of a model's scores, 0 for a table: two batches of a model differ by up to this in each score)."""

    table: ScoreTable
    rho_ij: np.ndarray
    delta_ij: np.ndarray
    rel: float
    score_error: float

    @property
    def rho(self) -> float:
        return aggregate_influence(self.rho_ij).rho

    @property
    def alpha(self) -> float:
        return aggregate_influence(self.rho_ij).alpha

    @property
    def t_star(self) -> float:
        return contraction_temperature(self.delta_ij)

    def tv_atol(self) -> float:
        """Absolute accuracy of an enumerated TV: the rounding of |V| terms and the scores' e / T."""
        return 4 * self.table.space.vocab_size * EPS + self.score_error / self.table.temperature

    def osc_atol(self) -> float:
        """Absolute accuracy of an enumerated oscillation: the rounding of the scores and 4 e."""
        return 8 * EPS * float(np.abs(self.table.table).max()) + 4 * self.score_error


def enumerated(source: Conditionals) -> Truth:
    """The suprema over every context (:func:`influence_and_oscillation` on the score table)."""
    inner = source.inner if isinstance(source, Queried) else source
    table = inner if isinstance(inner, ScoreTable) else ScoreTable.from_conditionals(inner)
    infl, osc = influence_and_oscillation(table)
    q, n = table.space.vocab_size, table.space.length
    error = table.score_accuracy.error  # a model's table: its dtype's stated accuracy; a table given as numbers: 0
    return Truth(table, infl.rho_ij, osc.delta_ij, 8 * (q + n) * EPS, error)


def _off_diagonal(n: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(n) for j in range(n) if i != j]


def _worst(values: np.ndarray, truth: np.ndarray, sign: int) -> tuple[int, int]:
    """The pair (i != j) where ``values`` is furthest on the wrong side of ``truth`` (sign +1: above is
    wrong, a lower bound; -1: below is wrong, an upper bound)."""
    pairs = _off_diagonal(truth.shape[0])
    return max(pairs, key=lambda p: sign * (values[p] - truth[p]))


def _pair_parts(name: str, lower: np.ndarray | None, upper: np.ndarray | None, truth: np.ndarray,
                rtol: float, atol: float, what: str = "{} lower ends") -> list[Part]:
    """Per-pair bracket parts at the worst pair: lower_ij <= truth_ij and upper_ij >= truth_ij (``what``
    names the lower ends)."""
    out = []
    if lower is not None:
        p = _worst(np.asarray(lower, dtype=np.float64), truth, +1)
        out.append(part(f"{what.format(name)} <= enumerated {name} (worst pair)", lower[p], truth[p], "<=", rtol, atol))
    if upper is not None:
        p = _worst(np.asarray(upper, dtype=np.float64), truth, -1)
        out.append(part(f"{name} upper ends >= enumerated {name} (worst pair)", upper[p], truth[p], ">=", rtol, atol))
    return out


def _table_sources(draw, max_states: int = MAX_STATES) -> S.Instance:
    """A Gaussian score table (|V|, n) with |V|^n <= max_states, scale and temperature drawn."""
    q, n = draw(S.shapes(max_states))
    seed, scale = draw(S.seeds()), draw(st.sampled_from(S.SCALES))
    T = draw(S.temperatures(0.05, 20.0))
    return S.Instance(ScoreTable.random(q, n, seed=seed, scale=scale, temperature=T), "gaussian-table",
                      {"seed": seed, "scale": scale})


@st.composite
def _sources(draw) -> S.Instance:
    """A tiny masked LM one time in three, else a score table."""
    if draw(st.sampled_from((False, False, True))):
        return draw(masked_lm_instances())
    return _table_sources(draw)


# ---------------------------------------------------------------------------------------------- certify
def exact_delta_relaxation(table: ScoreTable) -> Any:
    """A sound relaxation hook for a score table: the enumerated Delta_ij rounded up by their accuracy
    (Lemma 6 then bounds rho_ij by tanh(Delta_ij / (4T)) in :func:`certify`)."""
    def hook(source: Conditionals) -> dict:
        truth = enumerated(table)
        return {"delta_upper": truth.delta_ij * (1 + truth.rel) + truth.osc_atol(), "method": "exact Delta_ij"}
    return hook


@st.composite
def certify_cases(draw) -> Case:
    """A source and a way through :func:`certify`: enumeration (no budget), or a pass budget below n |V|^(n-1)
    with the uniform-context or the search hook, and an upper-bound hook (the exact Delta_ij of a table, the
    affine relaxation of a BERT at its initialisation) or none."""
    inst = draw(_sources())
    needed = passes_needed(inst.space)
    mode = draw(st.sampled_from(("enumeration", "bounds", "bounds")))
    options: dict = {"mode": mode}
    if mode == "bounds":
        options["max_passes"] = draw(st.sampled_from((1, max(1, needed // 3), needed - 1)))
        options["lower"] = draw(st.sampled_from(("uniform contexts", "search")))
        spec = inst.params if inst.kind == "tiny-mlm" else None
        relax = ["none", "exact Delta"] if spec is None else ["none"]
        if spec is not None and spec["arch"] == "bert" and not spec["spread"]:
            relax.append("affine")
        options["relaxation"] = draw(st.sampled_from(relax))
        options["seed"] = draw(st.integers(0, 100))
        if inst.kind != "tiny-mlm":
            inst = S.Instance(Queried(inst.source), inst.kind, inst.params)
    return Case(inst, options)


def run_certify(case: Case) -> Any:
    """:func:`certify` as ``case.options`` say."""
    o = case.options
    if o["mode"] == "enumeration":
        return certify(case.source, use_cache=False, block_rows=5, log=lambda _: None)
    lower = search_lower_bounds if o["lower"] == "search" else random_context_lower_bounds
    relaxation = None
    if o["relaxation"] == "exact Delta":
        relaxation = exact_delta_relaxation(case.source.inner)
    elif o["relaxation"] == "affine":
        # deferred: the relaxation loads torch
        from mlmix.empirical.model_constants.relaxation import certify_relaxation

        relaxation = certify_relaxation
    return certify(case.source, max_passes=o["max_passes"], lower_bounds=lower, relaxation=relaxation,
                   seed=o["seed"], use_cache=False, log=lambda _: None)


def certify_parts(out: Any, truth: Truth) -> tuple[list[Part], dict[str, bool]]:
    """The brackets of ``out`` (a CertifiedConstants) against the enumerated suprema, and the verdict."""
    rel, tv, osc = truth.rel, truth.tv_atol(), truth.osc_atol()
    n = truth.table.space.length
    parts: list[Part] = []
    for name, result, value, atol in (("rho", out.rho, truth.rho, n * tv), ("alpha", out.alpha, truth.alpha, n * tv),
                                      ("Delta", out.delta, 4 * truth.t_star, n * osc),
                                      ("T*", out.contraction_temperature, truth.t_star, n * osc / 4)):
        parts.append(part(f"lower end of {name} <= enumerated {name}", result.lower, value, "<=", rel, atol))
        if result.upper is not None:
            parts.append(part(f"upper end of {name} >= enumerated {name}", result.upper, value, ">=", rel, atol))
    parts += _pair_parts("rho_ij", out.rho_lower, out.rho_upper, truth.rho_ij, rel, tv)
    parts += _pair_parts("Delta_ij", out.delta_lower, out.delta_upper, truth.delta_ij, rel, osc)
    v = out.theorem5["verdict"]
    margin = truth.rel * truth.rho + n * tv
    lo, hi = out.rho.lower, out.rho.upper
    t_hi = out.contraction_temperature.upper
    own = (APPLIES if (hi is not None and hi < 1) or (t_hi is not None and out.temperature > t_hi)
           else NOT_APPLY if lo is not None and lo >= 1 else UNDECIDED)
    conditions = {"Theorem 5 'applies' only when the enumerated rho < 1": v != APPLIES or truth.rho < 1 + margin,
                  "Theorem 5 'does not apply' only when the enumerated rho >= 1": v != NOT_APPLY or truth.rho >= 1 - margin,
                  "the verdict follows the bracket (applies: upper end < 1 or T above T*'s upper end; does not "
                  "apply: lower end >= 1)": v == own,
                  "every bracket is ordered (lower <= upper)": all(r.upper is None or r.lower <= r.upper for r in
                                                                  (out.rho, out.alpha, out.delta,
                                                                   out.contraction_temperature))}
    return parts, conditions


@register
class CertifiedBrackets(Theorem):
    id = "constants.certified-brackets"
    paper = PAPER
    number = "Certified brackets of rho, alpha, Delta and T* (certify; mlmix estimate --certify)"
    statement = ("every bracket [lower, upper] of certify (enumeration, or the lower-bound hook with the relaxation hook and "
                 "TV <= 1, Lemma 6) contains the supremum over every context enumerated by theory/local: rho, alpha, "
                 "Delta, T* and every rho_ij, Delta_ij; Theorem 5 'applies' only when rho < 1 and 'does not apply' only "
                 "when rho >= 1, as the bracket says")
    budget = 0.25

    def strategy(self) -> st.SearchStrategy:
        return certify_cases()

    def check(self, case: Case) -> Verdict:
        try:
            out = run_certify(case)
        except InvalidResultError as err:  # a bracket with lower > upper: a wrong end, not a crash of the check
            return verdict(Part("certify builds its brackets", math.inf, 0.0, "<="), refused=str(err))
        truth = enumerated(case.source)
        parts, conditions = certify_parts(out, truth)
        if case.options.get("max_passes") is not None:
            conditions["passes within the budget"] = out.passes <= case.options["max_passes"]
        return verdict(*parts, conditions=conditions, method=out.method, verdict=out.theorem5["verdict"],
                       rho=truth.rho)


# ---------------------------------------------------------------------------------------------- streamed
@st.composite
def streamed_cases(draw) -> Case:
    """A source and a block size (1 context to the default)."""
    inst = draw(_sources())
    return Case(inst, {"block_rows": draw(st.sampled_from((1, 2, 5, 64, 1 << 15)))})


def _witness_values(table: ScoreTable, witnesses: list, T: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """(TV, osc) re-evaluated from ``table`` at each witness pair {"x", "y"} of site i (NaN where none), and
    whether every pair differs at j only (site i ignored)."""
    n = table.space.length
    tv, osc = np.full((n, n), np.nan), np.full((n, n), np.nan)
    at_j = True
    for i, j in _off_diagonal(n):
        w = witnesses[i][j]
        if w is None:
            continue
        x, y = np.asarray(w["x"]), np.asarray(w["y"])
        diff = np.flatnonzero((x != y) & (np.arange(n) != i))
        at_j = at_j and diff.tolist() == [j]
        tv[i, j], osc[i, j] = pair_distances(query_scores(table, x[None], i)[0], query_scores(table, y[None], i)[0], T)
    return tv, osc, at_j


def _equal_part(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> Part:
    """got == want at the pair where they differ most (the largest entry when they agree everywhere)."""
    pairs = [p for p in _off_diagonal(want.shape[0]) if np.isfinite(got[p])]
    p = max(pairs, key=lambda p: (abs(got[p] - want[p]), want[p]))
    return part(name, got[p], want[p], "==", rtol, atol)


@register
class StreamedConstants(Theorem):
    id = "constants.streamed"
    paper = PAPER
    number = "Streamed rho_ij, Delta_ij and max R over every context (streamed_constants, streamed_rectangle)"
    statement = ("the streamed rho_ij(T) = max TV(pi_i(.|x_{-i}), pi_i(.|x_{-i}^{j<-w})) and Delta_ij = max osc of the "
                 "score difference equal theory/local's exact pass bit for bit on a score table, and within the stated "
                 "accuracy of the scores (TV: e/T, oscillation: 4e) queried from a masked LM; each witness pair differs "
                 "at j only and attains its entry; the streamed max R over every rectangle equals rectangle_summary's "
                 "(bit for bit on a table, within 8e/T and its rounding on a model)")
    budget = 0.15

    def strategy(self) -> st.SearchStrategy:
        return streamed_cases()

    def check(self, case: Case) -> Verdict:
        s = streamed_constants(case.source, block_rows=case.options["block_rows"], log=lambda _: None)
        truth = enumerated(case.source)
        exact = isinstance(case.source, ScoreTable)
        e = s.score_error + truth.score_error
        T = case.source.temperature
        tv_tol, osc_tol = (0.0, 0.0) if exact else (e / T, 4 * e)
        parts = [_equal_part("streamed rho_ij = enumerated rho_ij", s.rho_ij, truth.rho_ij, 0.0, tv_tol),
                 _equal_part("streamed Delta_ij = enumerated Delta_ij", s.delta_ij, truth.delta_ij, 0.0, osc_tol)]
        n = case.inst.space.length
        parts += [part("streamed rho = enumerated rho", s.rho, truth.rho, "==", 0.0, n * tv_tol),
                  part("streamed T* = enumerated T*", s.contraction_temperature, truth.t_star, "==", 0.0, n * osc_tol)]
        tv, _, rho_at_j = _witness_values(truth.table, s.rho_witness, T)
        _, osc, delta_at_j = _witness_values(truth.table, s.delta_witness, T)
        parts += [_equal_part("rho_ij witness re-evaluated = streamed rho_ij", tv, s.rho_ij, truth.rel,
                              truth.tv_atol() + tv_tol),
                  _equal_part("Delta_ij witness re-evaluated = streamed Delta_ij", osc, s.delta_ij, truth.rel,
                              truth.osc_atol() + osc_tol)]
        R, R_want = s.rectangle, rectangle_summary(truth.table, max_states=truth.table.space.size).max
        if R is not None and R.max is not None:  # R's exact value: the theory's rectangle pass on the table
            parts.append(part("streamed R max = enumerated R max", R.max, R_want, "==", 0.0,
                              0.0 if exact else R.accuracy + 8 * truth.score_error / T))
        conditions = {"every witness pair differs at j only": rho_at_j and delta_at_j,
                      "a witness for every pair i != j": bool(np.isfinite(tv[~np.eye(n, dtype=bool)]).all()),
                      "the rectangle statistic was computed": R is not None and R.max is not None}
        return verdict(*parts, conditions=conditions, bit_for_bit=exact)


# ---------------------------------------------------------------------------------------------- float64
@st.composite
def float64_cases(draw) -> Case:
    """A tiny masked LM (float32) and a route to its brackets: its tabulated table (what the cache returns,
    0 passes) or the model queried (streamed)."""
    inst = draw(masked_lm_instances())
    return Case(inst, {"route": draw(st.sampled_from(("table", "streamed")))})


def float64_truth(case: Case) -> tuple[Truth, float]:
    """The suprema of the same model evaluated in float64 (:func:`enumerated` on its float64 table), and its
    max R."""
    space, T = case.inst.space, case.source.temperature
    source = masked_lm_source(ModelSpec(**case.inst.params), space.length, space.vocab_size, T, dtype="float64")
    truth = enumerated(source)
    return truth, rectangle_summary(truth.table, max_states=space.size).max


@register
class Float64Containment(Theorem):
    id = "constants.float64-containment"
    paper = PAPER
    number = "Certified brackets charge the score accuracy (certify on float32 scores vs a float64 evaluation)"
    statement = ("every bracket certify builds from a masked LM's float32 scores, read from its tabulated table (the "
                 "cached route, 0 passes) or queried from the model (streamed), contains rho, alpha, Delta, T* and max R "
                 "of the same model evaluated in float64: the brackets charge the stated accuracy of the arithmetic "
                 "(mlmix.theory.sources.score_accuracy), not only float64 rounding")
    budget = 0.1

    def strategy(self) -> st.SearchStrategy:
        return float64_cases()

    def check(self, case: Case) -> Verdict:
        # deferred: torch loads only when a model check runs
        from mlmix.empirical.models.tabulate import tabulate

        mlm = case.source
        route = tabulate(mlm, use_cache=False, progress=False, log=lambda _: None) if case.options["route"] == "table" \
            else mlm
        out = certify(route, use_cache=False, block_rows=5, log=lambda _: None)
        truth, R = float64_truth(case)
        n, T = case.inst.space.length, mlm.temperature
        rel, tv, osc = truth.rel, truth.tv_atol(), truth.osc_atol()  # the float64 side's own accuracy
        parts = []
        for name, result, value, atol in (("rho", out.rho, truth.rho, n * tv), ("alpha", out.alpha, truth.alpha, n * tv),
                                          ("Delta", out.delta, 4 * truth.t_star, n * osc),
                                          ("T*", out.contraction_temperature, truth.t_star, n * osc / 4),
                                          ("R max", out.rectangle, R, 8 * truth.score_error / T + 32 * EPS * R)):
            parts += [part(f"lower end of {name} <= float64 {name}", result.lower, value, "<=", rel, atol),
                      part(f"upper end of {name} >= float64 {name}", result.upper, value, ">=", rel, atol)]
        return verdict(*parts, conditions={"enumeration (0 passes from the table)": out.method == "enumeration" and
                                           (out.passes == 0) == (case.options["route"] == "table")},
                       charged=out.score_accuracy.error)


# ---------------------------------------------------------------------------------------------- search
@st.composite
def search_cases(draw) -> Case:
    """A source, a pass budget (none, or a fraction of n |V|^(n-1)), 1..4 starts and a seed."""
    inst = draw(_sources())
    needed = passes_needed(inst.space)
    budget = draw(st.sampled_from((None, None, max(1, needed // 2), needed)))
    return Case(inst, {"max_passes": budget, "starts": draw(st.integers(1, 4)), "seed": draw(st.integers(0, 100))})


@register
class SearchedLowerBounds(Theorem):
    id = "constants.searched-lower-bounds"
    paper = PAPER
    number = "Searched lower bounds of rho_ij, Delta_ij, rho, alpha, T* (search_worst_contexts)"
    statement = ("each entry of the worst-context search is attained by its witness pair x, x' (differing at j only): "
                 "re-evaluated from the enumerated table it gives the entry, hence entry <= the supremum rho_ij "
                 "(Delta_ij); so are the searched rho, alpha and T*; at most max_passes score rows are asked")
    budget = 0.2

    def strategy(self) -> st.SearchStrategy:
        return search_cases()

    def check(self, case: Case) -> Verdict:
        o = case.options
        found = search_worst_contexts(case.source, max_passes=o["max_passes"], starts=o["starts"], seed=o["seed"])
        truth = enumerated(case.source)
        rel, tv, osc = truth.rel, truth.tv_atol(), truth.osc_atol()
        n, T = case.inst.space.length, case.source.temperature
        parts = _pair_parts("rho_ij", found.rho_lower, None, truth.rho_ij, rel, tv, "searched {}")
        parts += _pair_parts("Delta_ij", found.delta_lower, None, truth.delta_ij, rel, osc, "searched {}")
        parts += [part("searched rho <= enumerated rho", found.rho, truth.rho, "<=", rel, n * tv),
                  part("searched alpha <= enumerated alpha", found.alpha, truth.alpha, "<=", rel, n * tv),
                  part("searched T* <= enumerated T*", found.contraction_temperature, truth.t_star, "<=", rel,
                       n * osc / 4)]
        again_tv, again_osc = np.full((n, n), np.nan), np.full((n, n), np.nan)
        at_j = True
        for witnesses, again, k in ((found.witnesses, again_tv, 0), (found.delta_witnesses, again_osc, 1)):
            for (i, j), (x, y) in witnesses.items():
                diff = np.flatnonzero((x != y) & (np.arange(n) != i))
                at_j = at_j and diff.tolist() == [j]
                sx, sy = query_scores(truth.table, np.stack([x, y]), i)
                again[i, j] = pair_distances(sx, sy, T)[k]
        # the search's rows and the table are two batches of a model's scores: each within e
        parts += [_equal_part("witness TV re-evaluated = searched rho_ij", again_tv, found.rho_lower, rel,
                              tv + truth.score_error / T),
                  _equal_part("witness osc re-evaluated = searched Delta_ij", again_osc, found.delta_lower, rel,
                              osc + 4 * truth.score_error)] if found.witnesses else []
        positive = [(i, j) for i, j in _off_diagonal(n) if found.rho_lower[i, j] > 0]
        conditions = {"every witness pair differs at j only": at_j,
                      "a witness for every positive entry": all(p in found.witnesses for p in positive),
                      "passes within the budget": o["max_passes"] is None or found.passes <= o["max_passes"]}
        return verdict(*parts, conditions=conditions, passes=found.passes, converged=found.converged)


# ---------------------------------------------------------------------------------------------- relaxation
@st.composite
def relaxation_cases(draw) -> Case:
    """A BERT (its initialisation two times in three: there the bounds are tight), n in 2..3, |V| in 2..4, a
    masked site i and, at each other site, a set of allowed symbols: one symbol everywhere (the bounds are
    then the conditional's own rounding), one site with a subset or all of V and one symbol elsewhere, or a
    subset at every site."""
    spec = draw(model_specs(("bert",), spread=(False, False, True), layers=(1, 1, 2)))
    n, q = draw(st.integers(2, 3)), draw(st.integers(2, 4))
    T = draw(S.temperatures(0.2, 5.0))
    site = draw(st.integers(0, n - 1))
    others = [k for k in range(n) if k != site]
    pattern = draw(st.sampled_from(("one site varies", "one site varies", "singletons", "every site varies")))
    varying = draw(st.sampled_from(others))
    allowed = {}
    for k in others:
        if pattern == "singletons" or (pattern == "one site varies" and k != varying):
            allowed[k] = [draw(st.integers(0, q - 1))]
        else:
            allowed[k] = sorted(draw(st.sets(st.integers(0, q - 1), min_size=2, max_size=q)))
    inst = S.Instance(masked_lm_source(spec, n, q, T), "tiny-mlm", asdict(spec))
    return Case(inst, {"site": site, "allowed": allowed, "pattern": pattern})


def _reference_conditionals(case: Case, states: np.ndarray) -> np.ndarray:
    """p_i(. | x) over the alphabet for each input x (rows of ``states``), by a float64 forward pass."""
    # deferred: the check loads torch only when it runs
    import torch

    source, site = case.source, case.options["site"]
    model = float64_model(ModelSpec(**case.inst.params))
    with torch.no_grad():
        ids = source.token_ids(torch.as_tensor(states, dtype=torch.long))
        pos = int(source.slots[site])
        ids[:, pos] = source.mask_id
        logits = model(input_ids=ids).logits[:, pos][:, torch.as_tensor(source.support_ids)]
        return torch.softmax(logits / source.temperature, dim=-1).numpy()


@register
class RelaxationBounds(Theorem):
    id = "constants.relaxation"
    paper = PAPER
    number = "Affine relaxation of a BERT: bounds on its conditionals and on rho_ij over a set of inputs"
    statement = ("for every input x with x_k in allowed[k] at each free position k != i: lower_a <= p_i(a | x) <= upper_a "
                 "(source_conditional_bounds, float64 real arithmetic through every layer, rounding included), and "
                 "the bound on rho_ij over the set (source_influence_upper, Lemma 6 and the boxes) is at least the "
                 "enumerated max TV over pairs of the set that differ at j")
    budget = 0.2

    def strategy(self) -> st.SearchStrategy:
        return relaxation_cases()

    def check(self, case: Case) -> Verdict:
        # deferred: the relaxation loads torch
        from mlmix.empirical.model_constants.relaxation import source_conditional_bounds, source_influence_upper

        site, allowed = case.options["site"], case.options["allowed"]
        n = case.inst.space.length
        lower, upper = source_conditional_bounds(case.source, site, allowed)
        others = [k for k in range(n) if k != site]
        states = np.array([np.insert(np.array(c, dtype=np.int64), site, 0)
                           for c in itertools.product(*(allowed[k] for k in others))])
        p = _reference_conditionals(case, states)
        atol = 1e-10  # the float64 forward pass against the real arithmetic the bounds enclose
        lo_row, lo_col = np.unravel_index(int(np.argmax(lower[None] - p)), p.shape)
        hi_row, hi_col = np.unravel_index(int(np.argmax(p - upper[None])), p.shape)
        parts = [part("lower bound <= p_i(a | x) (worst input and symbol)", lower[lo_col], p[lo_row, lo_col], "<=",
                      1e-12, atol),
                 part("upper bound >= p_i(a | x) (worst input and symbol)", upper[hi_col], p[hi_row, hi_col], ">=",
                      1e-12, atol)]
        conditions = {"0 <= lower <= upper <= 1": bool((0 <= lower).all() and (lower <= upper).all()
                                                       and (upper <= 1).all())}
        for j in others:
            if len(allowed[j]) < 2:
                continue
            bound = source_influence_upper(case.source, site, j, allowed)
            rows: dict[bytes, list[int]] = {}
            for r, x in enumerate(states):
                key = np.delete(x, [site, j]).tobytes()
                rows.setdefault(key, []).append(r)
            worst = max((0.5 * float(np.abs(p[a] - p[b]).sum())
                         for group in rows.values() for a, b in itertools.combinations(group, 2)), default=0.0)
            conditions[f"rho_{site}{j} bound over the set >= enumerated rho_{site}{j}"] = bound >= worst - 1e-12
        return verdict(*parts, conditions=conditions, states=int(states.shape[0]))
