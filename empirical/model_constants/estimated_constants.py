"""Paper G's constants for a source of conditionals, estimated from sampled contexts and, when
|V|^n is small, computed exactly over all contexts -- side by side.

Every number comes from the local-quantity modules (:mod:`mlmix.theory.local.influence`, :mod:`mlmix.theory.local.rectangles`, :mod:`mlmix.theory.local.margins`; one implementation; this module only chooses the
context set and summarises):

* influence rho_ij, aggregate rho = max_j sum_{i != j} rho_ij (Thm 5) and the contraction verdict;
* score oscillation Delta_ij, its aggregate max_j sum_{i != j} Delta_ij and Cor. 7's temperature
  T* = (1/4) max_j sum_{i != j} Delta_ij;
* the rectangle statistic R (section 4) over sampled rectangles (replacements from the source's own
  top-k, Table 1 protocol) or over every rectangle of V^n;
* the one-step drift of N(x) = #{i : x_i in A} (section 5.4) over states with exactly k symbols in A;
* local margins (Assumption 1) and Thm 8's escape bound, for a given state and for the
  best-margin state ("trap") of the context set.

On a sample, suprema (rho, Delta, R max, the best margin) are maxima over a subset: LOWER bounds of
the exact values. A sampled rho >= 1 therefore certifies that the contraction condition fails,
while a sampled rho < 1 is only consistent with contraction.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
from scipy.stats import t as student_t
from tqdm.auto import tqdm

from mlmix.limits import CONSTANTS_LIMIT
from mlmix.progress import Counter, say, threshold
from mlmix.theory.local.constants import local_constants, sampled_supremum
from mlmix.theory.local.influence import (
    contraction_temperature,
    influence_and_oscillation,
)
from mlmix.theory.local.margins import (
    count_drift,
    escape_bound,
    mixing_lower_bound,
    state_margins,
)
from mlmix.theory.local.rectangles import rectangle_summary, sample_rectangles
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.theory.sources.contexts import Replacements, TopK, rows_per_call
from mlmix.validation import check_int

DEFAULT_CONTEXTS = 256
DEFAULT_RECTANGLES = 300
DEFAULT_TOP_K = 50
DEFAULT_DRIFT_STATES = 200
#: Replacement symbols b at site j for rho/Delta: all of V below this |V|, else the source's top-k.
ALL_REPLACEMENTS_UP_TO = 64
DEFAULT_REPLACEMENT_TOP_K = 8


# ------------------------------------------------------------------------------------ context sets


def uniform_contexts(space, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` states drawn uniformly from V^n: int64 (count, n)."""
    _check_count(count, "contexts")
    return rng.integers(0, space.vocab_size, size=(count, space.length))


def windows(symbols: np.ndarray, length: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` windows of ``length`` consecutive symbols at uniform offsets of a 1-D sequence."""
    _check_count(count, "contexts")
    seq = np.asarray(symbols, dtype=np.int64)
    if seq.ndim != 1 or seq.size < length:
        raise ValueError(f"the text gives {seq.size} tokens in the support, fewer than the length {length}")
    starts = rng.integers(0, seq.size - length + 1, size=count)
    return seq[starts[:, None] + np.arange(length)]


def states_with_count(space, symbols_A: Sequence[int], k: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` states drawn uniformly from {x : #{i : x_i in A} = k}: k uniform sites get uniform
    symbols of A, the others uniform symbols of V minus A (every site set has the same number of
    completions, so this is uniform on the level set)."""
    _check_count(count, "states")
    A, rest = _split_symbols(space, symbols_A, k)
    fill = rest if rest.size else A  # A = V: only k = n is allowed, and every site is then overwritten
    out = fill[rng.integers(0, fill.size, size=(count, space.length))]
    sites = np.argsort(rng.random((count, space.length)), axis=1)[:, :k]
    out[np.arange(count)[:, None], sites] = A[rng.integers(0, A.size, size=(count, k))]
    return out


def level_set(space, symbols_A: Sequence[int], k: int) -> np.ndarray:
    """Every state with exactly k symbols in A (for the exact drift)."""
    A, _ = _split_symbols(space, symbols_A, k)
    states = space.all_states()
    return states[np.isin(states, A).sum(axis=1) == k]


def _split_symbols(space, symbols_A: Sequence[int], k: int) -> tuple[np.ndarray, np.ndarray]:
    A = np.unique(np.asarray(symbols_A, dtype=np.int64))
    if A.size == 0 or A.min() < 0 or A.max() >= space.vocab_size:
        raise ValueError(f"target symbols must be a non-empty set in [0, {space.vocab_size})")
    rest = np.setdiff1d(np.arange(space.vocab_size), A)
    k = check_int(k, "k", minimum=0, maximum=space.length)
    if rest.size == 0 and k < space.length:
        raise ValueError("the target set is all of V: only k = n is possible")
    return A, rest


def _check_count(count: int, what: str) -> None:
    check_int(count, f"the number of {what}", minimum=1)


# ------------------------------------------------------------------------------------ summaries


def summarise(values: np.ndarray, sample: bool = False, clusters: np.ndarray | None = None) -> dict:
    """mean, median, q90, max and count of values; for a ``sample`` also the 95% confidence interval
    of the mean (:func:`mean_interval`, ``clusters`` labelling draws that share a context) and the
    maximum as a :class:`Result` interval [max, ?]: a sampled maximum is only a lower bound of the
    supremum."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "median": None, "q90": None, "max": None, "count": 0}
    out = {"mean": float(v.mean()), "median": float(np.median(v)), "q90": float(np.quantile(v, 0.9)),
           "max": float(v.max()), "count": int(v.size)}
    if sample:
        out["mean_ci"] = mean_interval(v, clusters=clusters)
        out["supremum"] = sampled_supremum("supremum", float(v.max()), int(v.size), "sampled values")
    return out


def mean_interval(values: np.ndarray, level: float = 0.95, clusters: np.ndarray | None = None) -> dict:
    """Student's t confidence interval of the mean of N draws, mean +- t_{(1+level)/2, G-1} se, with
    se^2 = s^2 / N for independent draws (G = N), or, when draws come in ``clusters`` (labels: draws
    sharing a context, which are dependent) the cluster-robust

        se^2 = G / (G - 1) sum_g (sum_{r in g} (v_r - mean))^2 / N^2       (G clusters).

    A statement about the sampling distribution (it covers the mean of the sampling protocol with
    probability about ``level``), not a certified enclosure. None with a reason below two clusters."""

    v = np.asarray(values, dtype=np.float64)
    labels = np.arange(v.size) if clusters is None else np.unique(np.asarray(clusters), return_inverse=True)[1]
    G = int(labels.max()) + 1 if v.size else 0
    if G < 2:
        return {"lower": None, "upper": None, "level": level, "reason": "fewer than two independent draws"}
    m = float(v.mean())
    sums = np.bincount(labels, weights=v - m, minlength=G)
    se = float(np.sqrt(G / (G - 1) * (sums ** 2).sum()) / v.size)
    half = float(student_t.ppf((1 + level) / 2, G - 1)) * se
    how = "independent draws" if clusters is None else f"draws in {G} context clusters (cluster-robust)"
    return {"lower": m - half, "upper": m + half, "level": level,
            "method": f"Student t interval over {v.size} {how}; not a certified enclosure"}


def margin_report(source: Conditionals, states: np.ndarray, decode=None) -> list[dict]:
    """Margins of each state (Assumption 1 for the singleton basin {x}) and Thm 8's bounds.

    gap_i = s_i(x_i|x_{-i}) - max_{v != x_i} s_i(v|x_{-i}); gamma = min_i gap_i. When x is a strict
    local mode (gamma > 0, every x_i an argmax) every site is exit-causing (m_x = n) and
    P_T(x, leave) <= (|V|-1) e^{-gamma/T}; a chain started at x stays for about e^{gamma/T}/(|V|-1)
    steps, and t_mix >= e^{gamma/T} / (4(|V|-1)) when mu_T({x}) <= 1/2.
    """
    margins = state_margins(source, states)
    T, q = source.temperature, source.space.vocab_size
    out = []
    for b, st in enumerate(np.asarray(states)):
        gamma = float(margins.gamma[b])
        holds = gamma > 0 and bool(margins.all_argmax[b])
        rec = {"state": st.tolist(), "gap": margins.gap[b].tolist(), "gamma": gamma,
               "all_argmax": bool(margins.all_argmax[b]), "assumption_1": holds,
               "escape_bound": escape_bound(gamma, T, q) if holds else None,
               "mixing_lower_bound": mixing_lower_bound(gamma, T, q) if holds else None}
        if decode is not None:
            rec["tokens"] = decode(st)
        out.append(rec)
    return out


def best_margin_state(source: Conditionals, contexts: np.ndarray | None, decode=None) -> dict:
    """The best-margin state ("trap") of a context set (None: all of V^n, in chunks), with its
    :func:`margin_report`, and ``local_modes``: how many states of the set are strict local modes
    (Assumption 1 holds for the singleton basin {x})."""
    space = source.space
    chunk = rows_per_call(space.vocab_size, space.length)
    total = space.size if contexts is None else int(np.asarray(contexts).shape[0])
    best_state, best_gamma, modes = None, -np.inf, 0
    for start in range(0, total, chunk):
        states = (space.decode(np.arange(start, min(total, start + chunk), dtype=np.int64)) if contexts is None
                  else np.asarray(contexts)[start:start + chunk])
        margins = state_margins(source, states)
        modes += int(((margins.gamma > 0) & margins.all_argmax).sum())
        b = int(np.argmax(margins.gamma))
        if margins.gamma[b] > best_gamma:
            best_state, best_gamma = states[b], float(margins.gamma[b])
    trap = margin_report(source, best_state[None], decode)[0]
    trap["local_modes"] = modes
    return trap


# ------------------------------------------------------------------------------------ the constants


def constants(source: Conditionals, contexts: np.ndarray | None, rng: np.random.Generator, *,
              rectangles: int = DEFAULT_RECTANGLES, top_k: int | None = DEFAULT_TOP_K,
              replacements: Replacements = None, drift_symbols: Sequence[int] | None = None,
              drift_k: int | None = None, drift_states: int = DEFAULT_DRIFT_STATES,
              records: bool = True, decode=None, progress: tqdm | None = None) -> dict:
    """rho, Delta, T*, R, drift and the best-margin state over a context set (None: all of V^n, exactly).

    The exact path tabulates the source once (``ScoreTable.from_conditionals``) and evaluates
    every local quantity with all contexts, all replacements and all rectangles.
    ``replacements`` (sampled path) chooses the y = x^{j<-b} of rho_ij and Delta_ij.
    """
    exact = contexts is None
    src = source if isinstance(source, ScoreTable) or not exact else ScoreTable.from_conditionals(source)
    ctx = None if exact else np.asarray(contexts)
    step = progress.update if progress is not None else (lambda _=1: None)

    local = local_constants(src, ctx, replacements=replacements, rng=rng)
    step(2)
    if exact:
        rect = rectangle_summary(src, max_states=src.space.size).as_dict()
    else:
        rects = sample_rectangles(src, ctx, rectangles, rng, top_k=top_k)
        rect = summarise(rects.values, sample=True,
                         clusters=np.unique(rects.states, axis=0, return_inverse=True)[1].ravel())
        if rects.count:
            rect["worst"] = rects.record(int(np.argmax(rects.values)))
            if records:
                rect["records"] = [rects.record(k) for k in range(rects.count)]
    rect["protocol"] = ("all rectangles of V^n (i < j, a' != x_i, b' != x_j)" if exact else
                        f"{rectangles} rectangles: uniform context and sites, replacements from the "
                        f"model's top-{top_k}" if top_k else f"{rectangles} rectangles, uniform replacements")
    step()
    drift = None
    if drift_symbols is not None:
        k = src.space.length // 2 if drift_k is None else drift_k
        states = (level_set(src.space, drift_symbols, k) if exact
                  else states_with_count(src.space, drift_symbols, k, drift_states, rng))
        values = count_drift(src, states, drift_symbols)
        drift = {"symbols": sorted(int(a) for a in np.unique(drift_symbols)), "k": int(k),
                 **summarise(values, sample=not exact), "min": float(values.min()),
                 "positive_fraction": float((values > 0).mean())}
    step()
    trap = best_margin_state(src, ctx, decode)
    step()
    return {
        "kind": "exact" if exact else "estimate",
        "n_contexts": src.space.size if exact else int(ctx.shape[0]),
        **{key: local[key] for key in ("rho", "alpha", "contraction", "delta", "contraction_temperature")},
        "rho_ij": local["rho_ij"].tolist(), "delta_ij": local["delta_ij"].tolist(),
        "rectangle": rect, "drift": drift, "trap": trap,
        "pairs": local["pairs"],
    }


def convergence(source: Conditionals, contexts: np.ndarray, seed: int, *, rectangles: int = DEFAULT_RECTANGLES,
                top_k: int | None = DEFAULT_TOP_K, replacements: Replacements = None) -> list[dict]:
    """The sampled rho, T* and mean R against the number of contexts, on nested prefixes
    (16, 64, 256, ... and all) of one context sample: the suprema are non-decreasing in N."""
    sizes = sorted({*[m for m in 4 ** np.arange(2, 12) if m < contexts.shape[0]], contexts.shape[0]})
    out = []
    for m in sizes:
        rng = np.random.default_rng(seed)
        sub = contexts[:m]
        infl, osc = influence_and_oscillation(source, sub, replacements, rng)
        rects = sample_rectangles(source, sub, rectangles, rng, top_k=top_k)
        out.append({"n_contexts": int(m), "rho": infl.rho,
                    "contraction_temperature": contraction_temperature(osc.delta_ij),
                    "rectangle_mean": rects.mean, "rectangle_max": rects.max})
    return out


def default_replacements(source: Conditionals) -> Replacements:
    """All symbols for small vocabularies, else the source's own top-k (k = 8)."""
    if source.space.vocab_size <= ALL_REPLACEMENTS_UP_TO:
        return None
    return TopK(DEFAULT_REPLACEMENT_TOP_K)


def replacements_per_site(rule: Replacements, vocab_size: int) -> int:
    """Replacement symbols b per (context, site) that a rule yields (at most; x_j itself is skipped)."""
    if rule is None:
        return vocab_size - 1
    if isinstance(rule, TopK):
        return min(rule.k, vocab_size - 1)
    if isinstance(rule, (int, np.integer)):
        return int(rule)
    return int(np.asarray(rule).shape[-1])


def query_rows(space, contexts: int, *, rectangles: int = DEFAULT_RECTANGLES, top_k: int | None = DEFAULT_TOP_K,
               replacements: Replacements = None, drift_states: int | None = DEFAULT_DRIFT_STATES,
               state: bool = False, with_convergence: bool = False) -> int:
    """Score queries (rows of ``source.scores``; masked forward passes for an MLM) that the sampled
    part of :func:`estimate` makes on a model with these settings (``drift_states=None``: no drift
    statistic): per context, n for its own scores, n R (n-1) for the pairs x, x^{j<-b} of rho/Delta
    (R replacements per site) and n for its margins; 4 per rectangle (+2 for top-k replacements);
    n per drift state; n for the trap and for ``state``; the convergence runs repeat rho/Delta and
    the rectangles on nested prefixes of the contexts."""
    n = space.length
    R = replacements_per_site(replacements, space.vocab_size)
    pairs = n + n * R * (n - 1)
    per_rectangles = rectangles * (6 if top_k else 4)
    rows = contexts * (pairs + n) + per_rectangles + n * (1 + bool(state))
    rows += 0 if drift_states is None else drift_states * n
    if with_convergence:
        sizes = {*[int(m) for m in 4 ** np.arange(2, 12) if m < contexts], contexts}
        rows += sum(m * pairs + per_rectangles for m in sizes)
    return int(rows)


def estimate(source: Conditionals, *, contexts: int | np.ndarray = DEFAULT_CONTEXTS, seed: int = 0,
             rectangles: int = DEFAULT_RECTANGLES, top_k: int | None = DEFAULT_TOP_K,
             replacements: Replacements | str = "auto", drift_symbols: Sequence[int] | None = None,
             drift_k: int | None = None, drift_states: int = DEFAULT_DRIFT_STATES, state: np.ndarray | None = None,
             exact: bool | None = None, exact_limit: int = CONSTANTS_LIMIT, with_convergence: bool = False,
             records: bool = True, progress: bool = True, rate: float | None = None) -> dict:
    """The full report: estimates from ``contexts`` (a count of uniform contexts or an array), the
    exact values next to them when |V|^n <= ``exact_limit`` (``exact=None``) or when asked, the
    margins of ``state``, and optionally the convergence of the estimates with the context count.

    At the source's temperature; ``seed`` fixes contexts, rectangles and drift states. With
    ``progress`` (the default; quiet below :func:`mlmix.progress.threshold` seconds), a language-model
    source counts its forward passes (:func:`query_rows`) with an ETA (:class:`mlmix.progress.Counter`),
    after their cost line when their ``rate`` (passes/s) is given; any other source shows a bar over
    the stages once it has run for the threshold. Give an MLM's exact values by passing its
    tabulated table (:func:`mlmix.empirical.models.tabulate.tabulate`) as ``source``: every number then
    comes from the table, without a forward pass.
    """
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    space = source.space
    ctx = uniform_contexts(space, contexts, rng) if np.ndim(contexts) == 0 else np.asarray(contexts)
    rule = default_replacements(source) if isinstance(replacements, str) and replacements == "auto" else replacements
    do_exact = space.size <= exact_limit if exact is None else bool(exact)
    if do_exact and space.size > exact_limit:
        raise ValueError(f"|V|^n = {space.vocab_size}^{space.length} = {space.size} states exceeds the exact "
                         f"limit of {exact_limit}; raise the limit (--exact-limit) or skip the exact values")
    decode = getattr(source, "decode", None)
    options = dict(rectangles=rectangles, top_k=top_k, drift_symbols=drift_symbols, drift_k=drift_k,
                   drift_states=drift_states, decode=decode)
    counts_rows = hasattr(source, "on_rows")
    if counts_rows:
        total = query_rows(space, ctx.shape[0], rectangles=rectangles, top_k=top_k, replacements=rule,
                           drift_states=None if drift_symbols is None else drift_states, state=state is not None,
                           with_convergence=with_convergence)
        total += space.length * space.vocab_size ** (space.length - 1) if do_exact else 0
        bar = _passes_counter(source, total, ctx.shape[0], do_exact, progress, rate)
        source.on_rows, step_bar = bar.update, None
    else:
        bar = step_bar = tqdm(total=5 * (1 + do_exact) + bool(with_convergence), desc="mlmix estimate",
                              disable=not progress, leave=False, delay=threshold())  # five step() calls per constants()
    try:
        report = constants(source, ctx, rng, replacements=rule, records=records, progress=step_bar, **options)
        report["replacements"] = _describe_replacements(rule)
        report["lower_bounds"] = ("rho, alpha, delta, contraction_temperature (intervals [sample max, ?]), the "
                                  "rectangle max and the trap's gamma are maxima over the sampled contexts: lower "
                                  "bounds of the exact suprema")
        report["exact"] = (constants(source, None, np.random.default_rng(seed), records=False, progress=step_bar,
                                     **options) if do_exact else None)
        if state is not None:
            report["margins"] = margin_report(source, np.atleast_2d(state), decode)[0]
        if with_convergence:
            report["convergence"] = convergence(source, ctx, seed, rectangles=rectangles, top_k=top_k,
                                                replacements=rule)
            if step_bar is not None:
                step_bar.update()
    finally:
        bar.close()
        if counts_rows:
            source.on_rows = None
    report.update({"temperature": source.temperature, "vocab_size": space.vocab_size, "length": space.length})
    report["seconds"] = time.perf_counter() - start
    return report


def _passes_counter(source, total: int, contexts: int, exact: bool, progress: bool, rate: float | None) -> Counter:
    """The :class:`~mlmix.progress.Counter` of :func:`estimate`'s ``total`` forward passes. With the
    ``rate`` known (``mlmix estimate`` measured it to plan its budget), their cost line first when they
    are expected to take :func:`mlmix.progress.threshold` seconds or more; without it (no pass is spent
    on measuring), the count speaks once the rate of its first passes says that it will take that long."""
    # deferred: torch loads only for a language-model source
    from mlmix.empirical.models.tabulate import cost_line

    if not progress or rate is None:
        return Counter("mlmix estimate", total, unit="passes", enabled=progress, quiet_below=threshold())
    shown = total / rate >= threshold()
    if shown:
        say(f"estimate: {cost_line(total, rate, source.device, 'forward passes')} for {contexts:,} contexts"
            f"{' and the exact values' if exact else ''}")
    return Counter("mlmix estimate", total, unit="passes", enabled=shown)


def _describe_replacements(rule: Replacements) -> str:
    if rule is None:
        return "all symbols"
    if isinstance(rule, TopK):
        return f"the source's top-{rule.k}"
    if isinstance(rule, (int, np.integer)):
        return f"{rule} uniform symbols"
    return "given candidates"
