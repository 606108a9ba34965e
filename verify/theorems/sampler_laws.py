"""Samplers run on masked LMs: scan orders, Metropolis-Hastings targets and masked-diffusion
decoders, each statement as a theorem object whose check can fail.

Exact objects: the kernels of :mod:`mlmix.theory.kernels.scan_and_mh` and the decoder laws of
:mod:`mlmix.theory.kernels.decoders` (dynamic programming over partial assignments); the other side of every
identity is computed independently (marginal entropies for total correlations, the closed-form target
exp(-E)/Z for MH, the source's joint for systematic scan). Published bounds on parallel decoding:

* Fast-dLLM (Wu et al. 2025, arXiv:2505.22618), Theorem 1, greedy part: if every marginal has a symbol
  x*_i with p(X_i = x*_i) > 1 - eps and (n + 1) eps <= 1, the joint's mode is x* (so greedy parallel
  decoding equals greedy sequential decoding). Checked exactly on joints; the weakened hypothesis
  (n + 1) eps <= 2 is refuted by a stored counterexample.
* Li & Cai 2025 (arXiv:2505.21400), the KL error of masked-diffusion sampling bounded by a universal
  constant times the mutual information between tokens over the number of iterations: listed as not
  checkable (the constant is not explicit); the exact chain-rule identity it rests on is checked.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
from hypothesis import strategies as st
from scipy.special import logsumexp

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels import scan_and_mh as smp
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.kernels.decoders import PartialScoreTable, decoder_law, expected_conditional_tc, schedule_tc
from mlmix.theory.kernels.scan_and_mh import mh_acceptance, mh_kernel, systematic_kernel, target_law
from mlmix.theory.results import EPS
from mlmix.theory.sources.conditionals import LogWeightTable
from mlmix.theory.sources.space import StateSpace
from mlmix.verify import instances as S
from mlmix.verify.verdicts import (
    Applicability,
    Attaining,
    Counterexample,
    OnFirst,
    Part,
    Theorem,
    Verdict,
    Violation,
    not_checkable,
    part,
    register,
    verdict,
)

PAPER = "samplers"

#: Largest state count of the instances (the decoders enumerate (|V|+1)^n partial assignments).
MAX_STATES = 64

#: Relative error of sums of products of conditionals (decoder laws, kernels) on these sizes.
LAW_RTOL = 1e-11


class SamplerTheorem(Theorem):
    paper = PAPER


def _joint_sources() -> st.SearchStrategy:
    small = min(MAX_STATES, S.SHRINKABLE_STATES)
    return st.one_of(S.ising_sources(small), S.potts_sources(small), S.log_weight_sources(small),
                     S.gaussian_joint_sources(MAX_STATES), S.gaussian_potts_sources(MAX_STATES))


def joint_instances() -> st.SearchStrategy:
    """Joint laws (Ising, Potts, log-weight tables) at a temperature, spread/T <= 30."""
    return S.instances(_joint_sources(), MAX_STATES)


def _joint(inst: S.Instance) -> np.ndarray:
    lw = inst.source.log_joint()
    return np.exp(lw - logsumexp(lw))


def _kl(p: np.ndarray, law) -> tuple[float, float]:
    """KL(p || law) for a :class:`DecoderLaw` and its absolute error bound (first order in the entrywise
    relative errors: LAW_RTOL for p, the law's own bound for the decoder)."""
    q = law.law
    s = p > 0
    logs = np.log(p[s]) - np.log(q[s])
    kl = float((p[s] * logs).sum())
    rel = LAW_RTOL + law.rel_error
    return kl, rel * (1 + float((p[s] * np.abs(logs)).sum())) + p.size * EPS * (1 + float(np.abs(logs).max()))


def _total_correlation(inst: S.Instance) -> float:
    """TC(p) = sum_i H(X_i) - H(X), from the marginals."""
    return expected_conditional_tc(inst.source, list(range(inst.space.length)), [])


@st.composite
def _schedules(draw, n: int) -> list[list[int]]:
    perm = draw(st.permutations(list(range(n))))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    return [sorted(perm[a:b]) for a, b in zip(bounds, bounds[1:])]


@st.composite
def _with_schedule(draw) -> tuple:
    inst = draw(joint_instances())
    return inst, draw(_schedules(inst.space.length))


@register
class ChainRule(OnFirst, SamplerTheorem):
    id = "samplers.chain-rule"
    number = "Chain rule for a fixed unmasking schedule"
    statement = ("KL(p || mu_G) = sum_t E_{x~p} TC(p(x_{G_t} | x_{G_<t})) for the decoder that draws the blocks "
                 "G_1, ..., G_m in parallel from the exact marginal conditionals of a joint p")
    extras = ("schedule",)

    def strategy(self) -> st.SearchStrategy:
        return _with_schedule()

    def check(self, instance: tuple) -> Verdict:
        inst, schedule = instance
        table = PartialScoreTable.from_joint(inst.source)
        p = _joint(inst)
        kl, err = _kl(p, decoder_law(table, "schedule", schedule=schedule))
        tc = schedule_tc(inst.source, schedule)
        tc_err = 64 * EPS * inst.space.size * (1 + float(np.abs(np.log(p[p > 0])).max()))
        trivial = "every block is a singleton or independent of the rest: both sides 0" if tc <= tc_err else None
        return verdict(Part("KL(p || mu_G) = sum_t E TC", kl, tc, "==", err, tc_err, ratio=False),
                       trivial=trivial, schedule=schedule)


@register
class OneStep(SamplerTheorem):
    id = "samplers.one-step-tc"
    number = "Fully parallel step"
    statement = ("one step that draws every position independently from its marginal: KL(p || prod_i p_i) = TC(p) "
                 "= sum_i H(X_i) - H(X)")

    def strategy(self) -> st.SearchStrategy:
        return joint_instances()

    def check(self, instance: S.Instance) -> Verdict:
        table = PartialScoreTable.from_joint(instance.source)
        n = instance.space.length
        p = _joint(instance)
        kl, err = _kl(p, decoder_law(table, "parallel", k=n))
        tc = _total_correlation(instance)
        tc_err = 64 * EPS * instance.space.size * (1 + float(np.abs(np.log(p[p > 0])).max()))
        trivial = "independent sites: both sides 0" if tc <= tc_err else None
        return verdict(Part("KL(p || prod marginals) = TC(p)", kl, tc, "==", err, tc_err, ratio=False),
                       trivial=trivial)


def parallel_schedules(n: int, k: int) -> list[list[list[int]]]:
    """The ordered block sequences of the parallel decoder with k per step, each equally likely."""
    def rest(left: tuple[int, ...]) -> list[list[list[int]]]:
        if not left:
            return [[]]
        size = min(k, len(left))
        return [[list(G)] + tail for G in combinations(left, size)
                for tail in rest(tuple(s for s in left if s not in G))]
    return rest(tuple(range(n)))


@st.composite
def _with_k(draw) -> tuple:
    inst = draw(joint_instances().filter(lambda i: i.space.length >= 2))
    return inst, draw(st.integers(2, inst.space.length))


@register
class ParallelConvexity(OnFirst, SamplerTheorem):
    id = "samplers.parallel-convexity"
    number = "Random schedule (convexity of KL)"
    statement = ("the parallel decoder with k positions drawn uniformly per step is the mixture of its schedule laws, "
                 "so KL(p || mu_parallel) <= E_G sum_t E_p TC(p(x_{G_t} | x_{G_<t}))")
    extras = ("k",)

    def strategy(self) -> st.SearchStrategy:
        return _with_k()

    def check(self, instance: tuple) -> Verdict:
        inst, k = instance
        table = PartialScoreTable.from_joint(inst.source)
        p = _joint(inst)
        kl, err = _kl(p, decoder_law(table, "parallel", k=k))
        schedules = parallel_schedules(inst.space.length, k)
        avg = float(np.mean([schedule_tc(inst.source, s) for s in schedules]))
        tc_err = 64 * EPS * inst.space.size * (1 + float(np.abs(np.log(p[p > 0])).max()))
        trivial = "independent sites: both sides 0" if avg <= tc_err else None
        if len(schedules) == 1:
            trivial = "a single schedule (k = n): the mixture is that schedule's law, equality by the chain rule"
        return verdict(Part("KL(p || mu_parallel) <= average schedule TC", kl, avg, "<=", err, tc_err),
                       trivial=trivial, schedules=len(schedules))


@st.composite
def _with_energy(draw, rule: str = "mh") -> tuple:
    inst = draw(S.instances(S.any_sources(MAX_STATES), MAX_STATES))
    return inst, draw(st.sampled_from(("logit", "pll"))), rule


def _uncorrected_mh(source, energy: str) -> np.ndarray:
    """MH without the proposal ratio: accept min(1, exp(E(x) - E(x'))) (the hypothesis dropped)."""
    space = source.space
    E = smp.energy(source, energy)
    n, q = space.length, space.vocab_size
    P = np.zeros((space.size, space.size))
    for i in range(n):
        base, members = smp.site_fibres(space, i)
        prop = np.exp(source.log_conditionals(space.decode(base), i))
        for a in range(q):
            for b in range(q):
                if a != b:
                    x, y = members[:, a], members[:, b]
                    P[x, y] += prop[:, b] * np.minimum(1.0, np.exp(E[x] - E[y])) / n
    P[np.arange(space.size), np.arange(space.size)] = 1 - P.sum(axis=1)
    return P


def _compatible(inst: S.Instance) -> Applicability:
    if inst.source.log_joint() is None:
        return Applicability(False, "the conditionals come from no joint law given with the source")
    return Applicability(True)


@register
class MHReversible(OnFirst, SamplerTheorem):
    id = "samplers.mh-reversible"
    number = "MH with the MLM proposal (Goyal, Dyer & Berg-Kirkpatrick 2022, section 3)"
    statement = ("the single-site MH kernel with proposal p_i^T(. | x_{-i}) and target exp(-E)/Z, E = E_logit or "
                 "E_pll, satisfies detailed balance: pi(x) P(x, y) = pi(y) P(y, x), hence pi P = pi")
    extras = ("energy", "rule")

    def strategy(self) -> st.SearchStrategy:
        return _with_energy()

    def hypotheses(self, instance: tuple) -> Applicability:
        if instance[2] != "mh":
            return Applicability(False, "the acceptance ratio lacks the proposal ratio")
        return super().hypotheses(instance)

    def check(self, instance: tuple) -> Verdict:
        inst, energy, rule = instance
        pi = target_law(inst.source, energy)
        P = mh_kernel(inst.source, energy).toarray() if rule == "mh" else _uncorrected_mh(inst.source, energy)
        F = pi[:, None] * P
        off = (F > 0) & ~np.eye(len(pi), dtype=bool)
        ratios = F[off] / F.T[off] if off.any() else np.ones(1)
        residual = float(np.abs(pi @ P - pi).sum())
        return verdict(part("max pi(x)P(x,y) / pi(y)P(y,x) = 1", float(ratios.max()), 1.0, "==", LAW_RTOL, ratio=False),
                       part("min pi(x)P(x,y) / pi(y)P(y,x) = 1", float(ratios.min()), 1.0, "==", LAW_RTOL, ratio=False),
                       conditions={"||pi P - pi||_1 <= 1e-12": residual <= 1e-12}, residual=residual)

    violations = (Violation(
        "the acceptance ratio includes the proposal ratio p_i(x_i | x_-i) / p_i(a | x_-i)",
        lambda: _with_energy("no proposal ratio"), lambda inst: not MHReversible().check(inst).holds,
        "accepting with min(1, exp(E(x) - E(x'))) alone breaks detailed balance"),)


def _glauber_stationary_energy(source) -> np.ndarray:

    return -np.log(Chain(glauber_kernel(source)).stationary.value)


def _incompatible_accepts_less(instance: S.Instance) -> bool:
    return mh_acceptance(instance.source, _glauber_stationary_energy(instance.source))["acceptance_rate"].value \
        < 1 - 1e-9


@register
class GlauberIsMH(SamplerTheorem):
    id = "samplers.glauber-is-mh"
    number = "Random-scan Glauber as MH"
    statement = ("on compatible conditionals of a joint p, MH with the MLM proposal and E = -log p accepts every "
                 "proposal (acceptance rate 1) and its kernel is random-scan Glauber")

    def strategy(self) -> st.SearchStrategy:
        return joint_instances()

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _compatible(instance)

    def check(self, instance: S.Instance) -> Verdict:
        E = -instance.source.log_joint()
        acc = mh_acceptance(instance.source, E)["acceptance_rate"]
        diff = float(np.abs(mh_kernel(instance.source, E).toarray() - glauber_kernel(instance.source).toarray()).max())
        return verdict(part("acceptance rate at stationarity = 1", acc.value, 1.0, "==", acc.rel_error, ratio=False),
                       conditions={"max |P_MH - P_Glauber| <= 1e-12": diff <= 1e-12}, kernel_difference=diff)

    violations = (Violation(
        "compatible conditionals", lambda: S.instances(S.incompatible_sources(MAX_STATES), MAX_STATES),
        _incompatible_accepts_less,
        "incompatible conditionals: MH targeting the Glauber stationary law rejects some proposals"),)


def _systematic_moves_glauber_law(instance: S.Instance) -> bool:

    pi = Chain(glauber_kernel(instance.source)).stationary.value
    return bool(np.abs(pi @ systematic_kernel(instance.source) - pi).sum() > 1e-9)


@register
class SystematicJoint(SamplerTheorem):
    id = "samplers.systematic-joint"
    number = "Systematic scan on compatible conditionals"
    statement = ("on the conditionals of a joint p, one sweep P_{i0} ... P_{i(n-1)} leaves p invariant: "
                 "(p P_sys)(x) / p(x) = 1 for every x, in every scan order")

    def strategy(self) -> st.SearchStrategy:
        return joint_instances()

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _compatible(instance)

    def check(self, instance: S.Instance) -> Verdict:
        p = _joint(instance)
        n = instance.space.length
        worst_hi, worst_lo = 1.0, 1.0
        for order in (list(range(n)), list(range(n))[::-1]):
            r = (p @ systematic_kernel(instance.source, order))[p > 0] / p[p > 0]
            worst_hi, worst_lo = max(worst_hi, float(r.max())), min(worst_lo, float(r.min()))
        return verdict(part("max (p P_sys)(x) / p(x) = 1", worst_hi, 1.0, "==", LAW_RTOL * n, ratio=False),
                       part("min (p P_sys)(x) / p(x) = 1", worst_lo, 1.0, "==", LAW_RTOL * n, ratio=False))

    violations = (Violation(
        "compatible conditionals", lambda: S.instances(S.incompatible_sources(MAX_STATES), MAX_STATES),
        _systematic_moves_glauber_law,
        "incompatible conditionals: the random-scan stationary law is not invariant under a sweep"),)


# ---------------------------------------------------------------------------------------- Fast-dLLM

@st.composite
def confident_joints(draw) -> S.Instance:
    """A joint with a boosted state x*: log-weights k/2 plus a boost at x* (often (n+1) eps <= 1)."""
    q, n = draw(S.shapes(MAX_STATES))
    space = StateSpace(q, n)
    w = draw(S.half_integers(space.size, 2))
    star = draw(st.integers(0, space.size - 1))
    boost = draw(st.sampled_from((4.0, 6.0, 8.0, 12.0)))
    w = w.astype(np.float64)
    w[star] += boost
    return S.Instance(LogWeightTable(space, w), "confident-joint", {"log_weights": w.tolist()})


def _marginal_modes(inst: S.Instance) -> tuple[np.ndarray, float, np.ndarray]:
    """(x*, eps, p): the marginal modes, eps = max_i (1 - p(X_i = x*_i)), the joint."""
    p = _joint(inst)
    q, n = inst.space.vocab_size, inst.space.length
    cube = p.reshape((q,) * n)
    marg = [cube.sum(axis=tuple(j for j in range(n) if j != i)) for i in range(n)]
    star = np.array([int(np.argmax(m)) for m in marg])
    eps = max(1.0 - float(m[s]) for m, s in zip(marg, star))
    return star, eps, p


def _fast_dllm_hypothesis(inst: S.Instance, factor: float = 1.0) -> Applicability:
    _, eps, _ = _marginal_modes(inst)
    n = inst.space.length
    if (n + 1) * eps <= factor:
        return Applicability(True)
    return Applicability(False, f"(n + 1) eps = {(n + 1) * eps:.3g} > {factor:g}")


@register
class FastDLLMGreedy(SamplerTheorem):
    id = "samplers.fast-dllm.thm1"
    number = "Fast-dLLM (Wu et al. 2025, arXiv:2505.22618) Theorem 1, greedy part"
    statement = ("if every marginal has x*_i with p(X_i = x*_i) > 1 - eps and (n + 1) eps <= 1, then argmax_x p(x) = "
                 "x* (greedy parallel decoding from the marginals equals greedy joint decoding): "
                 "p(x*) >= 1 - n eps >= eps >= max_{z != x*} p(z)")
    conventions = "marginals given the same unmasked context (here the empty one); eps = max_i (1 - p(X_i = x*_i))."

    def strategy(self) -> st.SearchStrategy:
        return confident_joints()

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _fast_dllm_hypothesis(instance)

    def check(self, instance: S.Instance) -> Verdict:
        star, eps, p = _marginal_modes(instance)
        k = int(star @ instance.space.place_values)
        others = np.delete(p, k)
        n = instance.space.length
        return verdict(part("p(x*) >= max_{z != x*} p(z)", p[k], float(others.max()), ">=", LAW_RTOL),
                       part("p(x*) >= 1 - n eps", p[k], 1 - n * eps, ">=", LAW_RTOL, atol=n * 1e-15),
                       part("max_{z != x*} p(z) <= eps", float(others.max()), eps, "<=", LAW_RTOL, atol=1e-15),
                       eps=eps, x_star=star.tolist())

    attaining = (Attaining(
        "|V| = 2, n = 2, p = (0.34, 0.33, 0.33, 0): eps = 0.33, (n + 1) eps = 0.99 and p(x*) = 0.34 against 0.33",
        lambda: S.Instance(LogWeightTable.from_probabilities(StateSpace(2, 2), np.array([0.34, 0.33, 0.33, 0.0])),
                           "confident-joint", {"p": [0.34, 0.33, 0.33, 0.0]}),
        looseness=(1.031, 1.0001, 1.0001)),)
    counterexamples = (Counterexample(
        "|V| = 2, n = 2, p = (0.01, 0.35, 0.35, 0.29) on (00, 01, 10, 11): both marginal modes are 1 (p = 0.64), "
        "eps = 0.36 and (n + 1) eps = 1.08 > 1, and the joint mode is 01 (0.35), not x* = 11 (0.29)",
        lambda: S.Instance(LogWeightTable.from_probabilities(StateSpace(2, 2), np.array([0.01, 0.35, 0.35, 0.29])),
                           "confident-joint", {"p": [0.01, 0.35, 0.35, 0.29]}),
        dropped="(n + 1) eps <= 1"),)


not_checkable(
    "samplers.li-cai", PAPER, "Li & Cai 2025 (arXiv:2505.21400), main upper bound",
    "the KL error of masked-diffusion sampling with T iterations is at most a universal constant times "
    "(mask-size factor / T) sum_i I(X_i; X_-i) (plus the mask predictor's training error)",
    "the constant is not explicit in any copy reachable here: arXiv:2505.21400 (v1, 27 May 2025, 'A convergence theory "
    "for diffusion language models: an information-theoretic perspective'; v2 revised December 2025) states matching "
    "upper and lower bounds 'up to some constant factor'; its stored HTML copies are returned only from their abstract, and no review or citing paper reachable "
    "here states the constant of its Theorem 1, so no finite instance can "
    "contradict the bound; the exact identity its proof starts from (KL of a schedule = sum of expected conditional "
    "total correlations), the convexity step for random schedules and the decoder laws themselves are checked "
    "exactly (docs/samplers.md, Published bounds); the same bound with its tight constant, E KL <= ((s_max - 1)/L) "
    "sum_i I(X_i; X_-i), attained by the copy law, is checked (samplers.schedule-sharp-bound; docs/decoding-theory.md "
    "compares it with the constant (2^ceil(log2 s_max) - 1)/L in a reported reading of the paper, not confirmed from it)",
    ("samplers.chain-rule", "samplers.parallel-convexity", "samplers.decoder-parallel",
     "samplers.schedule-sharp-bound"))
