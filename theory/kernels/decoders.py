"""Exact laws of masked-diffusion and parallel decoders on V^n.

A decoder starts from the all-masked frame and unmasks positions, drawing each new symbol from its
*partial conditional* p_i^T(. | x_S) = softmax(s_i(. | x_S) / T), S the positions already unmasked
(the others hold the mask symbol, :data:`MASK` = |V| in a partial sequence). The decoders (MDLM,
Sahoo et al. 2024; LLaDA, Nie et al. 2025; Fast-dLLM, Wu et al. 2025):

* ``any-order``: one position at a time, chosen uniformly among the masked ones;
* ``left-to-right``: one position at a time in a fixed order (default 0, 1, ..., n-1);
* ``parallel`` (k): k positions chosen uniformly among the masked ones (fewer at the last step),
  each drawn independently from its own conditional given the unmasked ones;
* ``confidence`` (k): every masked position draws a symbol y_i ~ p_i(. | x_S); the k draws of highest
  probability p_i(y_i | x_S) are kept (ties broken by position, lower first), the others masked again;
* ``threshold`` (tau): every masked position draws; every draw with p_i(y_i | x_S) >= tau is kept, and
  the most probable draw when none is (Fast-dLLM's threshold rule, with sampled rather than greedy
  draws); the number of steps is random, its expectation is exact;
* ``schedule``: fixed blocks G_1, ..., G_m, block G_t drawn in parallel given x_{G_<t};
* ``entropy-bounded`` (gamma): the EB-sampler (Ben-Hamu et al. 2025, arXiv:2505.24857): the masked positions
  are sorted by the entropy H_i of their conditional given x_S (lowest first, ties by position), the longest
  prefix U with sum_{i in U} H_i - max_{i in U} H_i <= gamma (one position at least) is drawn in parallel;
  the rule is applied to the float64 entropies of the conditionals (a sum within rounding of gamma, or two
  entropies within rounding of each other, is decided as evaluated: the law's label gives the closest
  decision's distance from a tie or from gamma, and flags one below 1e-9); the number of steps is random
  and its expectation exact.

The law of the decoded sequence is computed exactly by dynamic programming over the (|V|+1)^n partial
assignments (mass pushed from the all-masked one down to the complete ones, level by level), in log
space: every entry is the log-sum-exp over the decoding paths of sums of log-conditionals
log_softmax(s / T), so a probability far below float64's range (1e-308, a peaked table or a cold
Ising model) keeps its relative accuracy (``DecoderLaw.log_law``; ``law`` is its exp). The entrywise
relative error bound (:func:`_law_error`, stated with the law) is

    EPS [2 n(n+1)(1 + max(max|log p|, max|s|/T)) + n((n + 2) w + l + 4) + n K] (1.01) + 2 EPS,

EPS the unit roundoff, w the largest |log weight| of one step, l the largest |log mass| of an entry
and K the most terms summed into one entry.

For a joint p read through its exact marginal conditionals (:meth:`PartialScoreTable.from_joint`),
the chain rule gives, for the schedule law mu_G(x) = prod_t prod_{i in G_t} p(x_i | x_{G_<t}),

    KL(p || mu_G) = sum_t E_{x ~ p} TC(p(x_{G_t} | x_{G_<t})),   TC = sum_{i in G_t} H(X_i | .) - H(X_{G_t} | .),

so one fully parallel step gives KL = TC(p), one-at-a-time decoding in any order gives p exactly, and
a random schedule (the ``parallel`` decoder is the mixture of schedule laws over its uniformly drawn
blocks) is bounded by the average by convexity of KL (Li & Cai 2025, arXiv:2505.21400, eq. (3.3):
the parallel-decoding error is a sum of conditional mutual informations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations, product
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy.special import logsumexp

from mlmix.limits import DECODER_LIMIT
from mlmix.theory.kernels.scan_and_mh import check_order, truncate_log_probs
from mlmix.theory.results import EPS, Result
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.partial import PartialScoreTable, partial_space_size
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import (
    check_array_shape,
    check_int,
    check_log_conditionals,
    check_memory,
    check_real,
    check_sites,
)


def partial_log_probs(source: PartialScoreTable, top_k: int | None = None, top_p: float | None = None,
                      max_partial: int = DECODER_LIMIT) -> np.ndarray:
    """log p_i^T(. | x_S) for every partial assignment (index in base |V|+1, first site most significant)
    and every site, truncated by top-k / top-p after the temperature: ((|V|+1)^n, n, |V|)."""
    space = source.space
    n, q = space.length, space.vocab_size
    M = partial_space_size(space)
    if M > max_partial:
        raise ValueError(f"(|V|+1)^n = {q + 1}^{n} = {M:,} partial assignments exceed the decoder limit "
                         f"{max_partial:,}")
    check_memory(8.0 * 3 * M * n * q, f"the conditionals of {M:,} partial assignments")
    digits = _digits(M, n, q + 1)
    out = np.empty((M, n, q))
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow of s / T is refused below, by row
        for i in range(n):
            out[:, i] = truncate_log_probs(source.partial_log_conditionals(digits, i), top_k, top_p)
    return check_log_conditionals(out, "the partial conditionals log_softmax(s / T)", row_name=_row_name(n))


def _row_name(n: int) -> Callable[[int], str]:
    """The row r of a ((|V|+1)^n, n, |V|) table of partial conditionals in words."""
    return lambda r: f"the conditional of site {r % n} at partial assignment {r // n}"


def _digits(M: int, n: int, base: int) -> np.ndarray:
    return (np.arange(M, dtype=np.int64)[:, None] // (base ** np.arange(n - 1, -1, -1, dtype=np.int64))) % base


@dataclass(frozen=True)
class DecoderLaw:
    """The exact law of a decoder's output on V^n (state index order, as `mlmix exact --stationary`):
    ``log_law`` its natural logarithm (-inf on states it never outputs), computed in log space, so that
    entries far below float64's range (1e-308) keep their relative accuracy ``rel_error``; :attr:`law`
    is exp(log_law) (entries below ~1e-308 are 0 or subnormal there)."""

    sampler: str
    log_law: np.ndarray
    rel_error: float
    steps: int
    method: str
    details: dict = field(default_factory=dict)

    @property
    def law(self) -> np.ndarray:
        """exp(log_law): the law as probabilities."""
        return np.exp(self.log_law)

    def as_result(self) -> dict:
        return {"sampler": self.sampler, "steps": self.steps, "rel_error": self.rel_error, "method": self.method,
                **self.details}


def check_schedule(space: StateSpace, schedule: Sequence[Sequence[int]] | str) -> list[tuple[int, ...]]:
    """Blocks G_1, ..., G_m: disjoint, non-empty, covering every site ("0 1 | 2" as a string)."""
    if isinstance(schedule, str):
        try:
            schedule = [[int(t) for t in part.replace(",", " ").split()] for part in schedule.split("|")]
        except ValueError:
            raise ValueError(f"schedule must be blocks of integers separated by '|', got {schedule!r}") from None
    if isinstance(schedule, (bytes, dict)) or not hasattr(schedule, "__iter__"):
        raise TypeError(f"schedule must be a sequence of blocks of sites, got {type(schedule).__name__}")
    blocks = [tuple(check_sites(block, space.length, "schedule block")) for block in schedule]
    flat = [s for b in blocks for s in b]
    if any(not b for b in blocks) or sorted(flat) != list(range(space.length)):
        raise ValueError(f"a schedule is non-empty disjoint blocks covering 0..{space.length - 1}, got {blocks}")
    return blocks


def _unmask(codes: np.ndarray, block: Sequence[int], lp: np.ndarray, place: np.ndarray, q: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Children and log weights of drawing every site of ``block`` independently: (B, q^|G|) each."""
    A = np.array(list(product(range(q), repeat=len(block))), dtype=np.int64).reshape(-1, len(block))
    child = codes[:, None] + ((A - q) * place[list(block)]).sum(axis=1)[None, :]
    logw = np.zeros((codes.shape[0], A.shape[0]))
    for j, s in enumerate(block):
        logw += lp[:, s, :][:, A[:, j]]
    return child, logw


def decoder_law(source: PartialScoreTable, sampler: str, k: int = 1, order: Sequence[int] | str | None = None,
                schedule: Sequence[Sequence[int]] | str | None = None, top_k: int | None = None,
                top_p: float | None = None, log_probs: np.ndarray | None = None,
                threshold: float | None = None, gamma: float | None = None) -> DecoderLaw:
    """The exact law on V^n of a decoder (module doc; one of :data:`DECODERS`) by dynamic programming over
    the partial assignments. ``k``: positions per step of ``parallel`` / ``confidence``; ``order``: the
    order of ``left-to-right``; ``schedule``: the blocks of ``schedule``; ``threshold``: tau of
    ``threshold`` (in (0, 1]); ``gamma``: the entropy budget of ``entropy-bounded`` (>= 0). The law's ``steps`` is the expected number of steps (exact). ``log_probs``:
    the table of :func:`partial_log_probs` when already computed (then ``top_k`` / ``top_p`` are ignored),
    of shape ((|V|+1)^n, n, |V|), every row a conditional law summing to 1 within
    :data:`~mlmix.validation.ROW_SUM_TOL` (ValueError naming the first bad row otherwise; the rows are
    renormalised in log space, :func:`~mlmix.validation.check_log_conditionals`)."""
    if not source.partial_conditionals:
        raise TypeError(f"a decoder needs partial conditionals (a PartialScoreTable), got {type(source).__name__}")
    if sampler not in DECODERS:
        raise ValueError(f"sampler must be one of {', '.join(DECODERS)}, got {sampler!r}")
    spec = DECODERS[sampler]
    space = source.space
    n, q = space.length, space.vocab_size
    k = check_int(k, "k", minimum=1, maximum=n)
    Q = q + 1
    M = partial_space_size(space)
    lp_all = partial_log_probs(source, top_k, top_p) if log_probs is None else check_log_conditionals(
        check_array_shape(log_probs, (M, n, q), "log_probs", "(|V|+1)^n partial assignments, n sites, |V| symbols"),
        "log_probs", row_name=_row_name(n))
    params = spec.prepare(space, {"k": k, "order": order, "schedule": schedule, "threshold": threshold,
                                  "gamma": gamma})
    place = Q ** np.arange(n - 1, -1, -1, dtype=np.int64)
    digits = _digits(M, n, Q)
    pattern = (digits == q) @ (1 << np.arange(n, dtype=np.int64))
    logmass = np.full(M, -np.inf)
    logmass[M - 1] = 0.0  # all masked, probability 1
    terms = np.zeros(M, dtype=np.int64)  # contributions summed into each entry
    by_pattern = np.argsort(pattern, kind="stable")
    starts = np.searchsorted(pattern[by_pattern], np.arange((1 << n) + 1))
    by_level = sorted(range(1, 1 << n), key=lambda b: -bin(b).count("1"))
    visits = 0.0  # sum of the visiting probabilities of the partial assignments with a mask: E[steps]
    step_log = path_log = 0.0  # the largest |log weight| of one step and |log mass| of an entry
    for pat in by_level:
        codes = by_pattern[starts[pat]:starts[pat + 1]]
        codes = codes[logmass[codes] > -np.inf]
        if codes.size == 0:
            continue
        sites = [s for s in range(n) if pat >> s & 1]
        moves = spec.moves(codes, sites, lp_all[codes], place, q, params)
        visits += float(np.exp(logmass[codes]).sum())
        path_log = max(path_log, float(np.abs(logmass[codes]).max()))
        for child, logw in moves:
            finite = logw[np.isfinite(logw)]
            step_log = max(step_log, float(np.abs(finite).max(initial=0.0)))
            _log_add_at(logmass, terms, child.ravel(), (logmass[codes][:, None] + logw).ravel())
        logmass[codes] = -np.inf
    full = np.flatnonzero(pattern == 0)
    log_law = np.full(space.size, -np.inf)
    log_law[digits[full] @ space.place_values] = logmass[full]
    steps = spec.steps(n, params, visits)
    label = spec.label(params)
    method = (f"dynamic programming in log space over the {M:,} partial assignments ({label}); each entry is a "
              "log-sum-exp over the decoding paths of sums of log-conditionals, relative error <= "
              "EPS [2 n(n+1)(1 + max(max|log p|, max|s|/T)) + n((n + 2) w + l + 4) + n K] (w: largest |log weight| "
              "of a step, l: of a log mass, K: most terms summed into an entry)")
    path_log = max(path_log, float(np.abs(logmass[full][np.isfinite(logmass[full])]).max(initial=0.0)))
    rel = _law_error(source, lp_all, n, step_log, path_log, int(terms.max()))
    law = np.exp(log_law)
    return DecoderLaw(sampler, log_law, rel, steps, method, {"label": label, "mass_defect": float(abs(law.sum() - 1))})


def _log_add_at(logmass: np.ndarray, terms: np.ndarray, index: np.ndarray, logv: np.ndarray) -> None:
    """logmass[j] <- log(exp(logmass[j]) + sum_{index = j} exp(logv)) in place, by one log-sum-exp per
    target entry (shift by the largest term, so every exponential is <= 1 and none overflows); ``terms``
    counts the contributions summed into each entry."""
    keep = logv > -np.inf
    index, logv = index[keep], logv[keep]
    if index.size == 0:
        return
    counts = np.bincount(index, minlength=logmass.size)
    targets = np.flatnonzero(counts)
    top = np.full(logmass.size, -np.inf)
    top[targets] = logmass[targets]
    np.maximum.at(top, index, logv)
    total = np.bincount(index, weights=np.exp(logv - top[index]), minlength=logmass.size)[targets]
    logmass[targets] = top[targets] + np.log(np.exp(logmass[targets] - top[targets]) + total)
    terms += counts


def _law_error(source: PartialScoreTable, lp_all: np.ndarray, n: int, step_log: float, path_log: float,
               terms: int) -> float:
    """Entrywise relative error bound of the log-space dynamic programme (first order, EPS the unit
    roundoff): each log-conditional is within 4 EPS (1 + max(max|log p|, max|s|/T)) of exact, and a path
    sums at most n(n+1)/2 of them (the confidence rules weigh the dropped draws too); each of the <= n
    steps adds its log weight (a sum of <= n + 1 terms of size <= w, the largest |log weight| of a step)
    to the parent's value (size <= l, the largest |log law|) and folds it into the child's log-sum-exp
    (exp and log: 4 EPS; the sum of K positive terms, K the most contributions of an entry: K EPS); the
    final exp adds 2 EPS. Log errors d turn into relative errors e^d - 1 <= 1.01 d (d <= 0.01)."""
    finite = lp_all[np.isfinite(lp_all)]
    scale = float(np.abs(source.table[np.isfinite(source.table)]).max(initial=0.0)) / source.temperature
    entries = 2.0 * n * (n + 1) * (1.0 + max(float(np.abs(finite).max(initial=0.0)), scale))
    steps = n * ((n + 2) * step_log + path_log + 4.0) + n * terms
    return 1.01 * EPS * (entries + steps) + 2.0 * EPS


Moves = list[tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class DecoderSpec:
    """One decoder of :data:`DECODERS`. ``options``: its own options (the CLI's names without ``--``)
    and their defaults; ``doc``: one line for the docs table. ``prepare(space, params)`` checks the
    parameters (k, order, schedule, threshold) and returns those the decoder reads;
    ``moves(codes, sites, lp, place, q, params)`` gives, for the partial assignments ``codes`` (all with
    the masked ``sites``) and their log-conditionals ``lp``, one step's children and log weights;
    ``steps(n, params, visits)`` the (expected) number of steps, ``visits`` being the summed mass of
    the partial assignments visited; ``label(params)`` the decoder's name in a report."""

    name: str
    options: Mapping[str, object]
    doc: str
    moves: Callable[[np.ndarray, list[int], np.ndarray, np.ndarray, int, dict], Moves]
    steps: Callable[[int, dict, float], float]
    label: Callable[[dict], str]
    prepare: Callable[[StateSpace, dict], dict] = lambda space, params: params


def _any_order_moves(codes: np.ndarray, sites: list[int], lp: np.ndarray, place: np.ndarray, q: int,
                     params: dict) -> Moves:
    return [(c, w - math.log(len(sites))) for c, w in (_unmask(codes, (s,), lp, place, q) for s in sites)]


def _block_moves(codes: np.ndarray, sites: list[int], lp: np.ndarray, place: np.ndarray, q: int,
                 params: dict) -> Moves:
    blocks = params["blocks"]
    block = next(b for b in blocks if set(b) <= set(sites))
    if not set(block) <= set(sites) or any(s in sites for b in blocks[:blocks.index(block)] for s in b):
        raise AssertionError("unreachable partial assignment")
    return [_unmask(codes, block, lp, place, q)]


def _parallel_moves(codes: np.ndarray, sites: list[int], lp: np.ndarray, place: np.ndarray, q: int,
                    params: dict) -> Moves:
    subsets = list(combinations(sites, min(params["k"], len(sites))))
    return [(c, w - math.log(len(subsets))) for c, w in (_unmask(codes, G, lp, place, q) for G in subsets)]


def _left_to_right(space: StateSpace, params: dict) -> dict:
    schedule = [(s,) for s in check_order(space, params["order"])]
    if len(schedule) != space.length:
        raise ValueError("a left-to-right order lists every site once")
    return {**params, "blocks": check_schedule(space, schedule)}


def _schedule(space: StateSpace, params: dict) -> dict:
    if params["schedule"] is None:
        raise ValueError("the schedule sampler needs a schedule (blocks of sites)")
    return {**params, "blocks": check_schedule(space, params["schedule"])}


def _threshold(space: StateSpace, params: dict) -> dict:
    if params["threshold"] is None:
        raise ValueError("the threshold sampler needs a threshold tau in (0, 1]")
    return {**params, "threshold": check_real(params["threshold"], "threshold", minimum=0.0, maximum=1.0,
                                              open_min=True)}


def _entropy_budget(space: StateSpace, params: dict) -> dict:
    if params["gamma"] is None:
        raise ValueError("the entropy-bounded sampler needs an entropy budget gamma >= 0 (nats)")
    return {**params, "gamma": check_real(params["gamma"], "gamma", minimum=0.0)}


def conditional_entropies(log_probs: np.ndarray) -> np.ndarray:
    """H = -sum_a p(a) log p(a) (nats, 0 log 0 = 0) of each conditional law log p along the last axis."""
    p = np.exp(log_probs)
    return -np.where(p > 0, p * np.where(np.isfinite(log_probs), log_probs, 0.0), 0.0).sum(axis=-1)


def entropy_bounded_block(entropies: np.ndarray, gamma: float) -> np.ndarray:
    """The EB-sampler's choice among m masked positions with conditional entropies ``entropies`` (m,):
    their indices sorted by entropy (ties: lower index first), cut to the longest prefix U whose every
    initial segment has sum H - max H <= gamma (sum - max is non-decreasing along the prefix), |U| >= 1."""
    order = np.argsort(entropies, kind="stable")
    e = entropies[order]
    over = np.flatnonzero(np.cumsum(e) - np.maximum.accumulate(e) > gamma)
    return order[:max(1, int(over[0]) if over.size else e.size)]


def _entropy_bounded_moves(codes: np.ndarray, sites: list[int], lp: np.ndarray, place: np.ndarray, q: int,
                           params: dict) -> Moves:
    """One EB step from each partial assignment: its block (:func:`entropy_bounded_block`) drawn in parallel;
    one move per distinct block, weight -inf on the assignments that choose another."""
    H = conditional_entropies(lp[:, sites, :])
    chosen = [tuple(sorted(sites[j] for j in entropy_bounded_block(h, params["gamma"]))) for h in H]
    params["margin"] = min(params.get("margin", math.inf), _decision_margin(H, [len(c) for c in chosen],
                                                                          params["gamma"]))
    moves = []
    for block in sorted(set(chosen)):
        child, logw = _unmask(codes, block, lp, place, q)
        logw[np.array([c != block for c in chosen])] = -np.inf
        moves.append((child, logw))
    return moves


def _decision_margin(H: np.ndarray, sizes: list[int], gamma: float) -> float:
    """How far the EB rule's decisions at these partial assignments are from flipping (nats): the least
    positive one of gamma - budget(U), budget(U + next) - gamma and H(next) - max_U H over the rows (an exact
    0, a float tie or a budget equal to gamma, is decided by the stated rule: ties by position, a budget equal
    to gamma kept; inf when nothing is positive). A positive margin at rounding level means that the float64
    evaluation, not the exact entropies, decided a tie or a budget at gamma."""
    e = np.sort(H, axis=1)
    budget = np.cumsum(e, axis=1) - np.maximum.accumulate(e, axis=1)
    k = np.array(sizes) - 1
    rows = np.arange(H.shape[0])
    gaps = [gamma - budget[rows, k]]
    cut = k + 1 < H.shape[1]
    if cut.any():
        gaps += [budget[rows[cut], k[cut] + 1] - gamma, e[rows[cut], k[cut] + 1] - e[rows[cut], k[cut]]]
    positive = np.concatenate(gaps)
    positive = positive[positive > 0]
    return float(positive.min()) if positive.size else math.inf


def _entropy_bounded_label(params: dict) -> str:
    m = params.get("margin", math.inf)
    note = "" if m > 1e-9 else "; a decision within 1e-9 of a tie or of gamma, decided as evaluated in float64"
    return (f"entropy-bounded, gamma = {params['gamma']:g} (steps: the expected number; the closest decision is "
            f"{m:.2g} nats from a tie or from gamma{note})")


def _in_blocks_of_k(n: int, params: dict, visits: float) -> int:
    return -(-n // params["k"])


#: Every decoder, by name (module doc). ``mlmix decode --sampler`` offers these.
DECODERS: dict[str, DecoderSpec] = {spec.name: spec for spec in (
    DecoderSpec("any-order", {}, "one position at a time, uniform among the masked ones (MDLM)",
                _any_order_moves, lambda n, p, v: n, lambda p: "any-order"),
    DecoderSpec("left-to-right", {"order": None}, "one position at a time in a fixed order",
                _block_moves, lambda n, p, v: n,
                lambda p: f"left-to-right, order {[b[0] for b in p['blocks']]}", prepare=_left_to_right),
    DecoderSpec("parallel", {"k": 2}, "k uniform masked positions at once, each from its own conditional",
                _parallel_moves, _in_blocks_of_k, lambda p: f"parallel, k = {p['k']}"),
    DecoderSpec("confidence", {"k": 2}, "every masked position draws; the k most probable draws are kept (LLaDA)",
                lambda codes, sites, lp, place, q, p: [
                    _confidence_moves(codes, sites, min(p["k"], len(sites)), lp, place, q)],
                _in_blocks_of_k, lambda p: f"confidence, k = {p['k']}"),
    DecoderSpec("threshold", {"threshold": 0.9},
                "every masked position draws; draws of probability >= tau are kept (Fast-dLLM)",
                lambda codes, sites, lp, place, q, p: [
                    _confidence_moves(codes, sites, None, lp, place, q, math.log(p["threshold"]))],
                lambda n, p, v: v,
                lambda p: f"threshold, tau = {p['threshold']:g} (steps: the expected number)", prepare=_threshold),
    DecoderSpec("schedule", {"schedule": None}, "fixed blocks of sites, each block drawn in parallel",
                _block_moves, lambda n, p, v: len(p["blocks"]), lambda p: f"schedule {p['blocks']}",
                prepare=_schedule),
    DecoderSpec("entropy-bounded", {"gamma": 0.1},
                "lowest-entropy masked positions at once while sum H - max H <= gamma (EB-sampler)",
                _entropy_bounded_moves, lambda n, p, v: v, _entropy_bounded_label, prepare=_entropy_budget),
)}

#: The decoders' names (module doc).
SAMPLERS = tuple(DECODERS)


def decoders_table() -> str:
    """The table of decoders in ``docs/samplers.md`` (tests check the two agree)."""
    rows = ["| decoder | command | what it is |", "|---|---|---|"]
    for spec in DECODERS.values():
        opts = "".join(f" [--{o} {o.upper()}]" for o in spec.options)
        rows.append(f"| {spec.name} | `mlmix decode --sampler {spec.name}{opts}` | {spec.doc} |")
    return "\n".join(rows)


def _confidence_moves(codes: np.ndarray, sites: list[int], keep: int | None, lp: np.ndarray, place: np.ndarray,
                      q: int, log_tau: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every masked site draws; the ``keep`` draws of highest probability (ties: lower position) stay, or
    (``keep`` None) every draw of log-probability >= ``log_tau``, and the most probable one when none is."""
    m = len(sites)
    check_memory(8.0 * 4 * codes.shape[0] * q ** m * m, f"the {q}^{m} joint draws of the confidence decoder")
    A = np.array(list(product(range(q), repeat=m)), dtype=np.int64)  # (q^m, m)
    logs = np.stack([lp[:, s, :][:, A[:, j]] for j, s in enumerate(sites)], axis=-1)  # (B, q^m, m)
    rank = np.argsort(-logs, axis=-1, kind="stable")  # stable: equal probabilities keep position order
    kept = np.zeros(logs.shape, dtype=bool)
    np.put_along_axis(kept, rank[..., :1 if keep is None else keep], True, axis=-1)
    if keep is None:
        kept |= logs >= log_tau
    shift = ((A - q)[None, :, :] * place[sites][None, None, :] * kept).sum(axis=-1)
    return codes[:, None] + shift, logs.sum(axis=-1)


# ---------------------------------------------------------------------------------------- distances
def tv_kl(law: np.ndarray, law_rel: float, ref: np.ndarray, ref_rel: float, what: str,
          log_law: np.ndarray | None = None) -> dict[str, Result]:
    """TV(law, ref) = (1/2) sum |law - ref| and KL(ref || law) = sum ref log(ref / law), with absolute
    error bounds from the entrywise relative errors of both laws (first order):
    TV +- (d_law + d_ref)/2 + N eps, KL +- (d_law + d_ref)(1 + sum ref |log(ref/law)|) + N eps |log|.
    ``log_law`` (:attr:`DecoderLaw.log_law`), when given, supplies log(law): a state whose law underflows
    float64 (below 1e-308) then keeps its finite log instead of an infinite KL."""
    law = np.asarray(law, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_law = np.log(law) if log_law is None else np.asarray(log_law, dtype=np.float64)
    N = law.size
    tv = 0.5 * float(np.abs(law - ref).sum())
    tv_r = Result.checked(f"TV to {what}", tv, 0.5 * (law_rel + ref_rel) + N * EPS, "half the L1 distance",
                          lower=0.0, upper=1.0)
    support = ref > 0
    if (log_law[support] == -np.inf).any():
        kl_r = Result.interval(f"KL({what} || law)", math.inf, math.inf, "sum ref log(ref / law)",
                               f"the law gives zero mass to a state that {what} charges: KL is infinite")
    else:
        logs = np.log(ref[support]) - log_law[support]
        kl = float((ref[support] * logs).sum())
        err = (law_rel + ref_rel) * (1 + float((ref[support] * np.abs(logs)).sum())) + \
            N * EPS * (1 + float(np.abs(logs).max()))
        kl_r = Result.checked(f"KL({what} || law)", max(kl, 0.0), err, "sum ref log(ref / law)", lower=0.0)
    return {"tv": tv_r, "kl": kl_r}


# ---------------------------------------------------------------------------------------- chain rule
def _entropy_of(logp: np.ndarray, keep: Sequence[int]) -> float:
    """H(X_keep) of the joint exp(logp) (normalised), in nats."""
    n = logp.ndim
    drop = tuple(j for j in range(n) if j not in keep)
    marg = logsumexp(logp, axis=drop) if drop else logp
    p = np.exp(marg)
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(-np.where(p > 0, p * marg, 0.0).sum())


def expected_conditional_tc(source: Conditionals, block: Sequence[int], context: Sequence[int]) -> float:
    """E_{x ~ p} TC(p(x_G | x_C)) = sum_{i in G} H(X_i | X_C) - H(X_G | X_C), H(A | C) = H(A, C) - H(C),
    for a joint source p (tempered), from its marginal entropies (independent of the decoder DP)."""
    lw = source.log_joint()
    if lw is None:
        raise TypeError("the conditional total correlation needs a joint law")
    q, n = source.space.vocab_size, source.space.length
    logp = np.asarray(lw, dtype=np.float64).reshape((q,) * n)
    logp = logp - logsumexp(logp)
    C = sorted(context)
    HC = _entropy_of(logp, C) if C else 0.0
    singles = sum(_entropy_of(logp, sorted(C + [i])) - HC for i in block)
    return singles - (_entropy_of(logp, sorted(C + list(block))) - HC)


def schedule_tc(source: Conditionals, schedule: Sequence[Sequence[int]]) -> float:
    """sum_t E_{x ~ p} TC(p(x_{G_t} | x_{G_<t})): KL(p || mu_schedule) by the chain rule (module doc)."""
    blocks = check_schedule(source.space, schedule)
    total, seen = 0.0, []
    for b in blocks:
        total += expected_conditional_tc(source, b, seen)
        seen += list(b)
    return total
