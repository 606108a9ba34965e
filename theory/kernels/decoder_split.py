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
has no such split: refused. The entropy-bounded rule (EB-sampler) chooses its block U_t from the values
already revealed, a function of the path, so the chain rule along the paths of x ~ pi splits it exactly
(:func:`entropy_bounded_terms`; J = 0):

    KL(pi || mu_EB^q) = E_pi sum_t TC_pi(X_(U_t) | z_t) + E_pi sum_t sum_(l in U_t) KL(pi_l(. | z_t) || q_l(. | z_t)).
"""

from __future__ import annotations

import math
from itertools import combinations, permutations, product
from typing import Sequence

import numpy as np
from scipy.special import logsumexp

from mlmix.theory.kernels.decoders import (
    DECODERS,
    check_schedule,
    conditional_entropies,
    decoder_law,
    entropy_bounded_block,
    partial_log_probs,
    schedule_tc,
)
from mlmix.theory.results import EPS, Result
from mlmix.theory.sources.conditionals import LogWeightTable
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.space import StateSpace

#: The decoders whose law is a uniform mixture of schedule laws, and the entropy-bounded rule (module doc).
SPLIT_DECODERS = ("any-order", "left-to-right", "parallel", "schedule", "entropy-bounded")

#: Most schedules averaged by :func:`decoder_split` (any-order has n!: n <= 7).
SPLIT_SCHEDULE_LIMIT = 5040


def check_split_decoder(sampler: str) -> None:
    """The split exists for the decoders of :data:`SPLIT_DECODERS` only (module doc): ValueError otherwise."""
    if sampler not in SPLIT_DECODERS:
        raise ValueError(f"the sampler/incompatibility split needs a decoder that is a mixture of fixed schedules "
                         f"or the entropy-bounded rule ({', '.join(SPLIT_DECODERS)}); {sampler!r} keeps draws by "
                         "their probability")


def decoder_schedules(space: StateSpace, sampler: str, k: int = 1, order: Sequence[int] | str | None = None,
                      schedule: Sequence[Sequence[int]] | str | None = None) -> list[list[tuple[int, ...]]]:
    """The schedules whose uniform mixture is the decoder's law (module doc; the entropy-bounded rule has none)."""
    check_split_decoder(sampler)
    if sampler == "entropy-bounded":
        raise ValueError("the entropy-bounded rule chooses its blocks from the revealed values: no fixed schedules")
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
                  top_k: int | None = None, top_p: float | None = None, gamma: float | None = None,
                  reference: str = "the Glauber stationary law") -> dict[str, Result | int]:
    """KL(pi || mu_D) of decoder D on the table's partial conditionals (its exact law, by the dynamic
    programme), and its split (module doc) into the sampler part mean_G S_G, the incompatibility part
    mean_G I_G and the mixture gain J, against the reference joint ``pi`` (a law on V^n with entrywise
    relative error ``pi_rel``), with ``identity``: the largest |KL(pi || mu_G^q) - S_G - I_G| over the
    schedules G (KL by direct products, S_G from pi's marginal entropies, I_G from the conditionals:
    three independent computations, zero to rounding). Errors: first order in the relative errors of pi
    (each log-marginal within n pi_rel) and of the law, plus N eps per sum, as in
    :func:`~mlmix.theory.kernels.decoders.tv_kl`. Each result's ``details["computed"]`` is the computed
    value, also where the result is only an interval (a part at the floating-point floor). The
    entropy-bounded rule (``gamma``) is split along pi's paths instead (:func:`entropy_bounded_terms`): one
    adaptive rule (``adaptive`` True), mixture gain 0, ``identity`` |KL(pi || mu_EB) - S - I|."""
    space = table.space
    n = space.length
    k = min(k, n)
    check_split_decoder(sampler)
    schedules = [] if sampler == "entropy-bounded" else decoder_schedules(space, sampler, k, order, schedule)
    p = np.asarray(pi, dtype=np.float64)
    if p.shape != (space.size,) or (p < 0).any() or abs(p.sum() - 1) > 1e-9:
        raise ValueError(f"the reference must be a law on the {space.size} states of V^n")
    ref = LogWeightTable.from_probabilities(space, p)
    logpi = ref.log_weights
    lp = partial_log_probs(table, top_k, top_p)
    if sampler == "entropy-bounded":
        return _entropy_bounded_split(table, lp, p, logpi, pi_rel, gamma, reference)
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


def entropy_bounded_terms(logp: np.ndarray, lp_q: np.ndarray, gamma: float) -> dict:
    """The right sides of the EB decomposition along the partial assignments z that x ~ p reaches (module
    doc): E_p sum_t TC_p(U_t | z_t), the model error, sum_l H_p(X_l | z) - max_l H_p(X_l | z), the expected
    number of steps and of steps unmasking >= 2, with the rule's choice U_t from q's entropies
    (:func:`entropy_bounded_block` on ``lp_q``, the decoder's table) and, as conditions, that U_t is the
    lowest-entropy set and that one more position would exceed gamma (recomputed here, within 1e-12)."""
    n, q = logp.ndim, logp.shape[0]
    place = (q + 1) ** np.arange(n - 1, -1, -1, dtype=np.int64)
    acc = {"tc": 0.0, "model": 0.0, "budget": 0.0, "steps": 0.0, "parallel": 0.0}
    lowest = maximal = True
    stack = [(int(q * place.sum()), (-1,) * n, 0.0)]
    while stack:
        code, z, lz = stack.pop()
        masked = [i for i in range(n) if z[i] < 0]
        if not masked:
            continue
        rows = lp_q[code]
        Hq = conditional_entropies(rows[masked])
        U = sorted(masked[j] for j in entropy_bounded_block(Hq, gamma))
        inU = np.array([i in U for i in masked])
        slack = 1e-12 * (1.0 + float(Hq.sum()))
        if (~inU).any():
            lowest &= bool(Hq[inU].max() <= Hq[~inU].min())
            nxt = Hq[~inU].min()
            maximal &= bool(Hq[inU].sum() + nxt - max(Hq[inU].max(), nxt) > gamma - slack)
        cond = logp[tuple(z[i] if z[i] >= 0 else slice(None) for i in range(n))] - lz  # log p(x_M | z)
        drop = tuple(a for a, i in enumerate(masked) if i not in U)
        lu = logsumexp(cond, axis=drop) if drop else cond  # log p(x_U | z), axes U in order
        pu = np.exp(lu)
        H_U = float(-np.where(pu > 0, pu * np.where(pu > 0, lu, 0.0), 0.0).sum())
        Hl, kl = [], 0.0
        for a, i in enumerate(U):
            others = tuple(b for b in range(len(U)) if b != a)
            ll = logsumexp(lu, axis=others) if others else lu
            pl = np.exp(ll)
            Hl.append(float(-np.where(pl > 0, pl * np.where(pl > 0, ll, 0.0), 0.0).sum()))
            with np.errstate(invalid="ignore"):  # 0 * inf where p = 0, dropped by the where
                kl += float(np.where(pl > 0, pl * (np.where(pl > 0, ll, 0.0) - rows[i]), 0.0).sum())
        w = math.exp(lz)
        acc["tc"] += w * (sum(Hl) - H_U)
        acc["model"] += w * kl
        acc["budget"] += w * (sum(Hl) - max(Hl))
        acc["steps"] += w
        acc["parallel"] += w * (len(U) >= 2)
        for vals in product(range(q), repeat=len(U)):
            if lu[vals] > -np.inf:
                child = list(z)
                for i, v in zip(U, vals):
                    child[i] = v
                stack.append((code + int(sum((v - q) * place[i] for i, v in zip(U, vals))), tuple(child),
                              lz + float(lu[vals])))
    return {**acc, "lowest": lowest, "maximal": maximal}


def _entropy_bounded_split(table: PartialScoreTable, lp: np.ndarray, p: np.ndarray, logpi: np.ndarray,
                           pi_rel: float, gamma: float | None, reference: str) -> dict[str, Result | int]:
    """:func:`decoder_split` of the entropy-bounded rule: KL(pi || mu_EB) by the dynamic programme, its
    sampler and incompatibility parts by :func:`entropy_bounded_terms` along pi's paths (module doc)."""
    space = table.space
    n, N = space.length, space.size
    law = decoder_law(table, "entropy-bounded", gamma=gamma, log_probs=lp)
    support = p > 0
    ratio = np.where(support, logpi - law.log_law, 0.0)
    kl = float((p * ratio).sum()) if np.isfinite(ratio).all() else math.inf
    size, worst = float((p * np.abs(ratio)).sum()), float(np.abs(ratio[np.isfinite(ratio)]).max(initial=0.0))
    t = entropy_bounded_terms(logpi.reshape((space.vocab_size,) * n), lp, float(gamma))  # checked by decoder_law
    rel_pi = (2 * n + 1) * pi_rel
    finite = logpi[np.isfinite(logpi)]
    big = float(np.abs(finite).max()) + float(np.abs(lp[np.isfinite(lp)]).max())
    part_err = rel_pi * (1 + size) + 8 * n * (N + 4 * n) * EPS * (1 + big)
    how = f"against {reference}, the rule's own blocks along the paths of x ~ pi"
    return {"kl": Result.checked("KL(pi || entropy-bounded)", kl, law.rel_error * (1 + size) + rel_pi * (1 + size)
                                 + N * n * EPS * (1 + worst), f"sum pi log(pi / law), the law by dynamic programming, "
                                 f"{how}", lower=0.0, computed=kl),
            "sampler": Result.checked("sampler part", t["tc"], part_err, "E_pi sum_t TC_pi(X_U_t | z_t) from pi's "
                                      f"marginals {how}", lower=0.0, computed=t["tc"]),
            "incompatibility": Result.checked("incompatibility part", t["model"], part_err,
                                              "E_pi sum_t sum_{l in U_t} KL(pi_l(. | z_t) || q_l(. | z_t)) " + how,
                                              lower=0.0, computed=t["model"]),
            "mixture_gain": Result.exact("mixture gain", 0.0, "one adaptive rule, no mixture of schedules"),
            "schedules": 1, "adaptive": True, "identity_residual": abs(kl - t["tc"] - t["model"])}
