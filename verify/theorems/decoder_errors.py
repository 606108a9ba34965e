"""Exact error decompositions of parallel and adaptive decoders (a joint p, a decoder fed conditionals q),
each a theorem object whose check can fail.

* ParallelBench (Kang et al. 2025, arXiv:2510.04767), Theorem 1, as quoted in public reviews of the paper
  (themoonlight.io; the alphaxiv overview states the same bound without the formula): for a partition of
  the positions into ordered sets S_1, ..., S_T, each drawn in parallel from a factorised model given the
  earlier ones, min_theta KL(P_data || P_theta) >= L_T(S) = sum_t E_{S_<t ~ P_data} C(S_t | S_<t),
  C the conditional total correlation; and the optimum over partitions into T sets, L*_T, is non-increasing
  in T (a condition of the check: exhaustive over the ordered partitions). Here the bound is checked for every factorised model q (not only the minimiser), with the exact
  decomposition behind it,

      KL(p || q_S) = L_T(S) + sum_t E_p sum_{i in S_t} KL(p_i(. | x_{S<t}) || q_i(. | x_{S<t}))   (chain rule),

  equality holding at q = p's own conditionals (the minimiser, attaining the bound);
* the EB-sampler (Ben-Hamu et al. 2025, arXiv:2505.24857; its rule is pinned down from public
  implementations of the paper: :func:`mlmix.theory.kernels.decoders.entropy_bounded_block`). Its steps
  U_t are a function of the values already revealed, so along the paths of x ~ p, exactly (derived here by
  the chain rule; the paper's split of the error into a model error and a joint-dependence error)

      KL(p || q_EB) = E_p sum_t [ TC_p(X_{U_t} | z_t) + sum_{l in U_t} KL(p_l(. | z_t) || q_l(. | z_t)) ],

  and TC_p(X_U | z) = sum_l H(X_l | z) - H(X_U | z) <= sum_l H(X_l | z) - max_l H(X_l | z), which the rule
  keeps <= gamma when q = p: KL(p || q_EB) <= gamma E_p[number of steps that unmask two or more]. The copy
  law (all tokens equal) with gamma its first step's budget attains both inequalities.

The right sides are computed from the joint's marginal entropies along the reached partial assignments
(:func:`mlmix.theory.kernels.decoder_split.entropy_bounded_terms`, also behind ``mlmix decode --split``), the
left side from the decoder's law (the dynamic programme of ``decoder_law``) and KL(p || law).
"""

from __future__ import annotations

from itertools import product

import numpy as np
from hypothesis import strategies as st
from scipy.special import logsumexp

from mlmix.theory.kernels import schedule_kl as skl
from mlmix.theory.kernels.decoder_split import entropy_bounded_terms
from mlmix.theory.kernels.decoders import decoder_law, partial_log_probs, tv_kl
from mlmix.theory.results import EPS
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.verify import instances as S
from mlmix.verify.theorems.decoding_theory import copy_law
from mlmix.verify.verdicts import Attaining, OnFirst, Part, Theorem, Verdict, register, verdict

PAPER = "samplers"

#: Largest state count (one decoder DP over (|V|+1)^n partial assignments per instance).
MAX_STATES = 81

#: Temperatures of a mis-specified model q: p's own conditionals sharpened or flattened.
MODEL_TEMPERATURES = (0.6, 0.8, 1.25, 1.6)


# ---------------------------------------------------------------------------------------- instances
def normalised_log_joint(inst: S.Instance) -> np.ndarray:
    """log p of the instance's (tempered) joint, normalised, as an array of shape (|V|,) * n."""
    space = inst.space
    lw = np.asarray(inst.source.log_joint(), dtype=np.float64)
    return (lw - logsumexp(lw)).reshape((space.vocab_size,) * space.length)


@st.composite
def _with_model(draw) -> tuple[S.Instance, PartialScoreTable, str]:
    """A joint p (Ising, Potts, log-weight, Gaussian; <= 81 states) and a model q fed to the decoder: p's exact
    conditionals (half the draws), p's conditionals at another temperature, or i.i.d. Gaussian partial scores
    (incompatible, like a masked LM)."""
    small = min(MAX_STATES, S.SHRINKABLE_STATES)
    inst = draw(S.instances(st.one_of(S.ising_sources(small), S.potts_sources(small), S.log_weight_sources(small),
                                      S.gaussian_joint_sources(MAX_STATES)), MAX_STATES))
    exact = PartialScoreTable.from_joint(inst.source)
    kind = draw(st.sampled_from(("exact", "exact", "tempered", "random")))
    if kind == "exact":
        return inst, exact, "p's exact conditionals"
    if kind == "tempered":
        T = draw(st.sampled_from(MODEL_TEMPERATURES))
        return inst, PartialScoreTable(exact.space, exact.table, temperature=T), f"p's conditionals at T = {T}"
    seed = draw(S.seeds())
    q, n = inst.space.vocab_size, inst.space.length
    return inst, PartialScoreTable.random(q, n, seed=seed), f"random partial scores, seed {seed}"


def kl_to_law(logp: np.ndarray, law) -> tuple[float, float]:
    """KL(p || law) and its error (:func:`tv_kl`, the law's own relative error)."""
    flat = logp.ravel()
    finite = flat[np.isfinite(flat)]
    p_rel = 4 * EPS * (2 + float(np.abs(finite).max())) + flat.size * EPS
    r = tv_kl(law.law, law.rel_error, np.exp(flat), p_rel, "p", law.log_law)["kl"]
    return 0.5 * (r.lower + r.upper), 0.5 * (r.upper - r.lower)


def _entropy_error(logp: np.ndarray, extra: float = 0.0) -> float:
    """Absolute error of one entropy or KL term of the joint: a sum of <= |V|^n terms p log p, each log within
    (n (|V| + 2) + 4) EPS (1 + max|log p|) (log-sum-exp marginals), ``extra``: a further max|log q|."""
    finite = logp[np.isfinite(logp)]
    big = float(np.abs(finite).max()) + extra
    return 8 * EPS * (logp.ndim * (logp.shape[0] + 2) + 4 + logp.size) * (1.0 + big)


# ---------------------------------------------------------------------------------------- ParallelBench
def partition_tc(H: np.ndarray, blocks) -> float:
    """L_T = sum_t E C(S_t | S_<t) from the subset entropies H[bit set] (H(A | C) = H(A + C) - H(C))."""
    total, seen = 0.0, 0
    for b in blocks:
        mask = sum(1 << i for i in b)
        total += sum(H[seen | 1 << i] - H[seen] for i in b) - (H[seen | mask] - H[seen])
        seen |= mask
    return total


def _ordered_partitions(n: int, parts: int):
    """Every ordered partition of 0..n-1 into ``parts`` non-empty sets (surjective labelings)."""
    for labels in product(range(parts), repeat=n):
        if len(set(labels)) == parts:
            yield [tuple(i for i in range(n) if labels[i] == t) for t in range(parts)]


def optimal_partition_bound(H: np.ndarray, n: int, parts: int) -> float:
    """L*_T = min over ordered partitions into T non-empty sets of L_T (exhaustive)."""
    return min(partition_tc(H, b) for b in _ordered_partitions(n, parts))


def model_error(logp: np.ndarray, lp_q: np.ndarray, blocks) -> float:
    """sum_t E_p sum_{i in S_t} KL(p_i(. | x_{S<t}) || q_i(. | x_{S<t})), q_i read from the partial table at the
    context x_{S<t} (every other position masked)."""
    n, q = logp.ndim, logp.shape[0]
    place = (q + 1) ** np.arange(n - 1, -1, -1, dtype=np.int64)
    total, seen = 0.0, []
    for b in blocks:
        C = sorted(seen)
        for i in b:
            keep = sorted(C + [i])
            drop = tuple(j for j in range(n) if j not in keep)
            joint = logsumexp(logp, axis=drop) if drop else logp  # axes: keep, in order
            ctx = logsumexp(joint, axis=keep.index(i), keepdims=True)
            with np.errstate(invalid="ignore"):
                cond = joint - ctx
            for vals in product(range(q), repeat=len(C)):
                code = int(q * place.sum() + sum((v - q) * place[c] for c, v in zip(C, vals)))
                at = tuple(vals[C.index(j)] if j != i else slice(None) for j in keep)
                pj, lc = np.exp(joint[at]), cond[at]
                with np.errstate(invalid="ignore"):  # 0 * inf where p = 0, dropped by the where
                    terms = np.where(pj > 0, pj * (np.where(pj > 0, lc, 0.0) - lp_q[code, i]), 0.0)
                total += float(terms.sum())
        seen += list(b)
    return total


@st.composite
def _with_partition(draw) -> tuple:
    inst, table, model = draw(_with_model())
    n = inst.space.length
    T = draw(st.integers(1, n))
    labels = draw(st.lists(st.integers(0, T - 1), min_size=n, max_size=n).filter(lambda ls: len(set(ls)) == T))
    blocks = [tuple(i for i in range(n) if labels[i] == t) for t in range(T)]
    return inst, blocks, table, model


class _DecoderErrorTheorem(OnFirst, Theorem):
    paper = PAPER

    def describe(self, instance: tuple):
        return {**instance[0].describe(), **dict(zip(self.extras, instance[1:2] + instance[3:]))}


@register
class ParallelBenchLowerBound(_DecoderErrorTheorem):
    id = "samplers.parallelbench.thm1"
    number = "ParallelBench (Kang et al. 2025, arXiv:2510.04767), Theorem 1"
    statement = ("for ordered sets S_1..S_T partitioning the positions, each drawn in parallel from a factorised "
                 "model q given the earlier ones: KL(p || q_S) >= L_T = sum_t E_p C(S_t | S_<t) (C the conditional "
                 "total correlation), equality at q = p's conditionals; L*_T = min over partitions into T sets is "
                 "non-increasing in T")
    extras = ("blocks", "model")

    def strategy(self) -> st.SearchStrategy:
        return _with_partition()

    def check(self, instance: tuple) -> Verdict:
        inst, blocks, table, _ = instance
        logp = normalised_log_joint(inst)
        n = inst.space.length
        kl, kl_err = kl_to_law(logp, decoder_law(table, "schedule", schedule=[list(b) for b in blocks]))
        curve = skl.entropy_curve(inst.source)
        H, h_err = curve.subset_entropies, curve.abs_error
        L = partition_tc(H, blocks)
        L_err = 2 * (2 * n + 2 * len(blocks)) * h_err
        lp_q = partial_log_probs(table)
        me = model_error(logp, lp_q, blocks)
        me_err = n * _entropy_error(logp, float(np.abs(lp_q[np.isfinite(lp_q)]).max()))
        parts = [Part("KL(p || q_S) >= sum_t E C(S_t | S_<t)", kl, L, ">=", kl_err, L_err),
                 Part("KL(p || q_S) = L_T + model error (chain rule)", kl, L + me, "==", kl_err, L_err + me_err,
                      ratio=False)]
        T = len(blocks)
        now = optimal_partition_bound(H, n, T)
        more = optimal_partition_bound(H, n, T + 1) if T < n else now
        trivial = "every set a single position or independent sets: L_T = 0 and q = p" \
            if L <= L_err and abs(me) <= me_err else None
        return verdict(*parts, trivial=trivial, conditions={"L*_T >= L*_(T+1) (optimal partitions)":
                                                             now >= more - 2 * L_err},
                       sets=T, model_error=me, optimal_L_T=now, optimal_L_T_plus_1=more)

    attaining = (Attaining("the copy law on {0,1,2}^4 with its own conditionals, sets {0,1,2}, {3}: "
                           "KL = L_T = 2 log 3", lambda: (copy_law(3, 4), [(0, 1, 2), (3,)],
                                                          PartialScoreTable.from_joint(copy_law(3, 4).source),
                                                          "p's exact conditionals"), looseness=(1.0, None)),)


# ---------------------------------------------------------------------------------------- EB-sampler
def root_budget(inst: S.Instance) -> float:
    """sum_i H(X_i) - max_i H(X_i) of the joint (from its single-site marginals, not the decoder's entropies),
    raised by 1e-13 relatively: with p's own conditionals the EB-sampler unmasks every position at once at
    this gamma (the attaining instance: the rule's float budget is within rounding of it)."""
    logp = normalised_log_joint(inst)
    n = logp.ndim
    H = []
    for i in range(n):
        m = logsumexp(logp, axis=tuple(j for j in range(n) if j != i))
        H.append(float(-np.where(m > -np.inf, np.exp(m) * np.where(m > -np.inf, m, 0.0), 0.0).sum()))
    return (sum(H) - max(H)) * (1 + 1e-13)


@st.composite
def _with_gamma(draw) -> tuple:
    inst, table, model = draw(_with_model())
    gamma = draw(st.sampled_from((0.0, 0.05, 0.2, 0.5, 1.0, 2.0, 10.0, "root")))
    return inst, root_budget(inst) if gamma == "root" else gamma, table, model


def copy_law_eb() -> tuple:
    """The attaining instance of samplers.eb-decomposition: the copy law on {0,1,2}^4, gamma its first budget."""
    inst = copy_law(3, 4)
    return inst, root_budget(inst), PartialScoreTable.from_joint(inst.source), "p's exact conditionals"


@register
class EntropyBoundedDecomposition(_DecoderErrorTheorem):
    id = "samplers.eb-decomposition"
    number = "EB-sampler (Ben-Hamu et al. 2025, arXiv:2505.24857): error decomposition and entropy bound"
    statement = ("for the entropy-bounded sampler fed conditionals q: KL(p || q_EB) = E_p sum_t [TC_p(X_U_t | z_t) "
                 "+ sum_{l in U_t} KL(p_l || q_l)]; E_p sum_t TC_p <= E_p sum_t [sum_l H(X_l | z_t) - max_l H(X_l | "
                 "z_t)]; with q = p's conditionals that is <= gamma E_p[steps unmasking >= 2]")
    extras = ("gamma", "model")

    def strategy(self) -> st.SearchStrategy:
        return _with_gamma()

    def check(self, instance: tuple) -> Verdict:
        inst, gamma, table, model = instance
        logp = normalised_log_joint(inst)
        n = inst.space.length
        law = decoder_law(table, "entropy-bounded", gamma=gamma)
        kl, kl_err = kl_to_law(logp, law)
        lp_q = partial_log_probs(table)
        t = entropy_bounded_terms(logp, lp_q, gamma)
        err = n * _entropy_error(logp, float(np.abs(lp_q[np.isfinite(lp_q)]).max()))
        parts = [Part("KL(p || q_EB) = E sum_t [TC_p(U_t | z_t) + model error]", kl, t["tc"] + t["model"], "==",
                      kl_err, 2 * err, ratio=False),
                 Part("E sum_t TC_p(U_t | z_t) <= E sum_t [sum H - max H]", t["tc"], t["budget"], "<=", err, err)]
        if model == "p's exact conditionals":
            parts.append(Part("E sum_t [sum H - max H] <= gamma E[steps unmasking >= 2]", t["budget"],
                              gamma * t["parallel"], "<=", err, n * EPS * gamma))
        trivial = "one position per step or independent blocks, and q = p: both sides 0" \
            if kl <= kl_err + 2 * err and t["tc"] <= err else None
        return verdict(*parts, trivial=trivial,
                       conditions={"U_t the lowest-entropy positions": t["lowest"],
                                   "one more position would exceed gamma": t["maximal"]},
                       steps=t["steps"], parallel_steps=t["parallel"], model_error=t["model"])

    attaining = (Attaining("the copy law on {0,1,2}^4, its own conditionals, gamma its first budget (4 log 3 - "
                           "log 3, raised by 1e-13 relatively): one step, KL = TC = sum H - max H = gamma = 3 log 3",
                           copy_law_eb, looseness=(None, 1.0, 1.0)),)
