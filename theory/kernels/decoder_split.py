"""A decoder's error on incompatible conditionals, split exactly into a sampler part and an
incompatibility part against a named reference joint.

A masked LM's conditionals q_i(. | x_S) are in general incompatible (no joint has them: paper G's
rectangle test), so "the decoder's error" needs a stated reference joint pi; ``mlmix decode --split``
uses the random-scan Glauber stationary law of the frame's full conditionals (exact, from the chain).
For a fixed schedule G = (G_1, ..., G_m) (blocks drawn in turn, each in parallel given the ones before,
C_t = G_1 u ... u G_(t-1)), the decoder's law is mu_G^q(x) = prod_t prod_{i in G_t} q_i(x_i | x_{C_t}),
and pi's own conditionals give mu_G^pi(x) = prod_t prod_{i in G_t} pi(x_i | x_{C_t}). Writing
log pi / mu_G^q = log pi / mu_G^pi + sum_t sum_{i in G_t} log pi(x_i | x_{C_t}) / q_i(x_i | x_{C_t}) and
taking the expectation under pi (the chain rule over the decoding order):

    KL(pi || mu_G^q) = KL(pi || mu_G^pi) + sum_t sum_{i in G_t} E_{x ~ pi} KL(pi(. | x_{C_t}) || q_i(. | x_{C_t}))
                     =     S_G (sampler)     +                  I_G (incompatibility),

S_G = sum_t E_pi TC(pi(x_{G_t} | x_{C_t})) (what the factorisation within the blocks loses against pi's own
conditionals, zero for one-at-a-time decoding; :func:`~mlmix.theory.kernels.decoders.schedule_tc`), I_G
what the MLM's conditionals differ from pi's given the same shown sites. With one block of singletons
{1..n} this is KL(P || prod q_i) = KL(P || prod p_i) + sum_i KL(p_i || q_i).

An order-oblivious decoder D is the uniform mixture of the laws of its schedules (left-to-right and
schedule: one; any-order: the n! orders; parallel-k: the ordered sequences of k-subsets), so

    KL(pi || mu_D) = mean_G S_G + mean_G I_G - J,   J = mean_G KL(pi || mu_G^q) - KL(pi || mu_D) >= 0,

J the mixture gain (convexity of KL; J = 0 for a single schedule). The confidence and threshold rules
choose which draws to keep from the draws themselves, so their law is no mixture of schedule laws and
has no such split: refused.
"""

from __future__ import annotations

import math
from itertools import combinations, permutations
from typing import Sequence

import numpy as np

from mlmix.theory.kernels.decoders import DECODERS, check_schedule, decoder_law, partial_log_probs, schedule_tc
from mlmix.theory.results import EPS, Result
from mlmix.theory.sources.conditionals import LogWeightTable
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.space import StateSpace

#: The decoders whose law is a uniform mixture of schedule laws (module doc).
SPLIT_DECODERS = ("any-order", "left-to-right", "parallel", "schedule")

#: Most schedules averaged by :func:`decoder_split` (any-order has n!: n <= 7).
SPLIT_SCHEDULE_LIMIT = 5040


def check_split_decoder(sampler: str) -> None:
    """The split exists for the decoders of :data:`SPLIT_DECODERS` only (module doc): ValueError otherwise."""
    if sampler not in SPLIT_DECODERS:
        raise ValueError(f"the sampler/incompatibility split needs a decoder that is a mixture of fixed schedules "
                         f"({', '.join(SPLIT_DECODERS)}); {sampler!r} keeps draws by their probability")


def decoder_schedules(space: StateSpace, sampler: str, k: int = 1, order: Sequence[int] | str | None = None,
                      schedule: Sequence[Sequence[int]] | str | None = None) -> list[list[tuple[int, ...]]]:
    """The schedules whose uniform mixture is the decoder's law (module doc)."""
    check_split_decoder(sampler)
    n = space.length
    if sampler in ("left-to-right", "schedule"):
        return [DECODERS[sampler].prepare(space, {"order": order, "schedule": schedule})["blocks"]]
    size = 1 if sampler == "any-order" else min(k, n)
    count = math.factorial(n) if size == 1 else _sequences(n, size)
    if count > SPLIT_SCHEDULE_LIMIT:
        raise ValueError(f"the {sampler} decoder mixes {count:,} schedules, more than the split's limit "
                         f"{SPLIT_SCHEDULE_LIMIT:,}")
    if size == 1:
        return [check_schedule(space, [(s,) for s in perm]) for perm in permutations(range(n))]
    out: list[list[tuple[int, ...]]] = []

    def extend(prefix: list[tuple[int, ...]], left: tuple[int, ...]) -> None:
        if not left:
            out.append(prefix)
            return
        for block in combinations(left, min(size, len(left))):
            extend(prefix + [block], tuple(s for s in left if s not in block))

    extend([], tuple(range(n)))
    return out


def _sequences(n: int, k: int) -> int:
    """The ordered sequences of disjoint k-subsets (the last one smaller) covering n sites."""
    return 1 if n == 0 else math.comb(n, min(k, n)) * _sequences(n - min(k, n), k)


def _schedule_log_law(lp: np.ndarray, space: StateSpace, blocks: Sequence[Sequence[int]]) -> np.ndarray:
    """log prod_t prod_{i in G_t} p_i(x_i | x_{C_t}) for every x (index order), read from a table of partial
    log-conditionals ``lp`` ((|V|+1)^n, n, |V|): one product per state, no dynamic programme."""
    n, q = space.length, space.vocab_size
    x = space.all_states()
    place = (q + 1) ** np.arange(n - 1, -1, -1, dtype=np.int64)
    out = np.zeros(space.size)
    shown: list[int] = []
    for block in blocks:
        code = np.where(np.isin(np.arange(n), shown)[None, :], x, q) @ place
        for i in block:
            out += lp[code, i, x[:, i]]
        shown += list(block)
    return out


def _expected_kl(lp_ref: np.ndarray, lp: np.ndarray, logpi: np.ndarray, space: StateSpace,
                 blocks: Sequence[Sequence[int]]) -> tuple[float, float]:
    """sum_t sum_{i in G_t} E_{x ~ pi} KL(ref_i(. | x_{C_t}) || p_i(. | x_{C_t})) and sum pi |terms|."""
    n, q = space.length, space.vocab_size
    x = space.all_states()
    pi = np.exp(logpi)
    place = (q + 1) ** np.arange(n - 1, -1, -1, dtype=np.int64)
    total, size = 0.0, 0.0
    shown: list[int] = []
    for block in blocks:
        code = np.where(np.isin(np.arange(n), shown)[None, :], x, q) @ place
        for i in block:
            a, b = lp_ref[code, i], lp[code, i]
            with np.errstate(invalid="ignore"):
                terms = np.where(a > -np.inf, np.exp(a) * (a - b), 0.0)  # 0 log 0 = 0; a zero of q gives +inf
            kl = terms.sum(axis=1)
            total += float((pi * kl).sum())
            size += float((pi * np.abs(terms).sum(axis=1)).sum())
        shown += list(block)
    return total, size


def decoder_split(table: PartialScoreTable, sampler: str, pi: np.ndarray, pi_rel: float, *, k: int = 1,
                  order: Sequence[int] | str | None = None, schedule: Sequence[Sequence[int]] | str | None = None,
                  top_k: int | None = None, top_p: float | None = None,
                  reference: str = "the Glauber stationary law") -> dict[str, Result | int]:
    """KL(pi || mu_D) of decoder D on the table's partial conditionals (its exact law, by the dynamic
    programme), and its split (module doc) into the sampler part mean_G S_G, the incompatibility part
    mean_G I_G and the mixture gain J, against the reference joint ``pi`` (a law on V^n with entrywise
    relative error ``pi_rel``), with ``identity``: the largest |KL(pi || mu_G^q) - S_G - I_G| over the
    schedules G (KL by direct products, S_G from pi's marginal entropies, I_G from the conditionals:
    three independent computations, zero to rounding). Errors: first order in the relative errors of pi
    (each log-marginal within n pi_rel) and of the law, plus N eps per sum, as in
    :func:`~mlmix.theory.kernels.decoders.tv_kl`. Each result's ``details["computed"]`` is the computed
    value, also where the result is only an interval (a part at the floating-point floor)."""
    space = table.space
    n = space.length
    k = min(k, n)
    schedules = decoder_schedules(space, sampler, k, order, schedule)
    p = np.asarray(pi, dtype=np.float64)
    if p.shape != (space.size,) or (p < 0).any() or abs(p.sum() - 1) > 1e-9:
        raise ValueError(f"the reference must be a law on the {space.size} states of V^n")
    ref = LogWeightTable.from_probabilities(space, p)
    logpi = ref.log_weights
    lp = partial_log_probs(table, top_k, top_p)
    lp_ref = partial_log_probs(PartialScoreTable.from_joint(ref))
    law = decoder_law(table, sampler, k=k, order=order, schedule=schedule, log_probs=lp)
    support = p > 0
    N = space.size

    def error(size: float, worst: float, rel: float) -> float:
        return rel * (1 + size) + N * n * EPS * (1 + worst)

    per_schedule = []
    for blocks in schedules:
        log_mu = _schedule_log_law(lp, space, blocks)
        ratio = np.where(support, logpi - log_mu, 0.0)
        kl_g = float((p * ratio).sum()) if np.isfinite(ratio).all() else math.inf
        s_g = schedule_tc(ref, blocks)
        i_g, i_size = _expected_kl(lp_ref, lp, logpi, space, blocks)
        per_schedule.append((kl_g, s_g, i_g, float((p * np.abs(ratio)).sum()), i_size))
    kl_sched, s_mean, i_mean = (float(np.mean([row[c] for row in per_schedule])) for c in range(3))
    ratio_d = np.where(support, logpi - law.log_law, 0.0)
    kl_d = float((p * ratio_d).sum()) if np.isfinite(ratio_d).all() else math.inf
    size_d = float((p * np.abs(ratio_d)).sum())
    rel_pi = (2 * n + 1) * pi_rel
    how = f"against {reference}, mean over the decoder's {len(schedules):,} schedule(s)"
    kl_r = Result.checked(f"KL(pi || {sampler})", kl_d, error(size_d, float(np.abs(ratio_d).max()), rel_pi + law.rel_error),
                          f"sum pi log(pi / law), the law by dynamic programming, {how}", lower=0.0, computed=kl_d)
    s_r = Result.checked("sampler part", s_mean, error(max(r[0] for r in per_schedule), 0.0, rel_pi),
                         "mean_G sum_t E_pi TC(pi(x_G_t | x_C_t)) from pi's marginal entropies " + how, lower=0.0,
                         computed=s_mean)
    i_r = Result.checked("incompatibility part", i_mean, error(max(r[4] for r in per_schedule), 0.0,
                                                               rel_pi + 4 * n * EPS),
                         "mean_G sum_t sum_{i in G_t} E_pi KL(pi(. | x_C_t) || q_i(. | x_C_t)) " + how, lower=0.0,
                         computed=i_mean)
    j_err = error(max(r[3] for r in per_schedule) + size_d, 0.0, rel_pi + law.rel_error)
    j_r = Result.checked("mixture gain", kl_sched - kl_d, j_err,
                         "mean_G KL(pi || mu_G) - KL(pi || mu_D) (convexity; 0 for one schedule)", lower=0.0,
                         computed=kl_sched - kl_d)
    identity = max(abs(r[0] - r[1] - r[2]) for r in per_schedule if math.isfinite(r[0]))
    return {"kl": kl_r, "sampler": s_r, "incompatibility": i_r, "mixture_gain": j_r,
            "schedules": len(schedules), "identity_residual": identity}
