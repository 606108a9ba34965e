"""Paper P: the probability inequalities of the proof of Theorem 4 (Hoeffding, Lemma 6; the mask
concentration of Lemma 7 and Corollary 1; Lemma 8), each checked on the exact law of its random
quantity (:mod:`mlmix.verify.exact_laws`)."""

from __future__ import annotations

import math
from math import lgamma, log

import networkx as nx
import numpy as np
from hypothesis import strategies as st

from mlmix.theory.sources.space import StateSpace
from mlmix.theory.training.exponential_family import IsingFamily
from mlmix.theory.training.pseudolikelihood import (
    MaskDistribution,
)
from mlmix.verify.exact_laws import bernoulli_sum_law, compositions, empirical_tv_law, upper_quantile
from mlmix.verify.pitfalls_strategies import (
    BernoulliSum,
    EmpiricalLaw,
    MaskSample,
    bernoulli_sums,
    empirical_laws,
    mask_samples,
)
from mlmix.verify.theorems.pitfalls.pitfalls_base import _PTheorem
from mlmix.verify.verdicts import (
    Applicability,
    Attaining,
    Counterexample,
    Part,
    Verdict,
    register,
    verdict,
)

# ----------------------------------------------------------------------------------------------
# Probability inequalities of the proof of Theorem 4


@register
class Lemma6Hoeffding(_PTheorem):
    id = "pitfalls.lemma6"
    number = "Lemma 6 (Hoeffding's inequality)"
    statement = ("independent Y_i in [a, b]: for t > 0, |S_n - E S_n| < t with probability >= 1 - 2 e^{-2t^2/(n(b-a)^2)}; "
                 "checked on Bernoulli sums with the exact law of S_n")

    def strategy(self) -> st.SearchStrategy:
        return bernoulli_sums()

    def check(self, instance: BernoulliSum) -> Verdict:
        p = np.array(instance.p)
        law = bernoulli_sum_law(p)
        dev = np.abs(np.arange(law.size) - p.sum())
        tail = float(law[dev >= instance.t - 1e-12].sum())
        bound = min(1.0, 2 * np.exp(-2 * instance.t**2 / p.size))
        trivial = "bound >= 1" if bound >= 1 else None
        return verdict(Part("P(|S - ES| >= t) <= 2 e^{-2t^2/n}", tail, bound, "<=", 1e-13, 1e-15), trivial=trivial)

    attaining = (Attaining("two fair coins, t = 1: P(|S - 1| >= 1) = 1/2 against 2/e = 0.74",
                           lambda: BernoulliSum((0.5, 0.5), 1.0), looseness=1.4716),)


def mask_deviation(instance: MaskSample) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The exact law of |L_hat_PL - L_tilde_PL| over the m masks of one training point x (n = 1, so the
    empirical conditionals are point masses and KL_K = -log p_theta(x_K | x_{-K}, K)): (values,
    probabilities, ln(1/beta), N). beta is Assumption 3's margin, the smallest conditional at x (or the
    instance's override)."""
    fam, masks, x = instance.family, instance.masks, instance.x
    log_p = fam.log_probabilities(instance.theta)
    kl = np.empty(masks.m)
    for b in range(masks.m):
        members, logq = masks.conditionals(log_p, b)
        row, col = np.argwhere(members == x)[0]
        kl[b] = -logq[row, col]
    beta = float(np.exp(-kl.max())) if instance.beta is None else instance.beta
    p = masks.probs[x]
    counts = compositions(instance.m, masks.m)
    log_coef = lgamma(instance.m + 1) - np.array([sum(lgamma(int(c) + 1) for c in row) for row in counts])
    probs = np.exp(log_coef + (counts * np.log(p)[None, :]).sum(axis=1))
    return np.abs(counts / instance.m @ kl - p @ kl), probs, log(1 / beta), fam.space.length


class _MaskConcentration(_PTheorem):
    conventions = ("One training point (n = 1), so L~ uses the point-mass empirical law and the deviation comes from "
                   "the masks alone; step 2 of the proof (the average over training points) is then exact, as it is "
                   "for any n, since L~ is itself the average over the empirical law. The bound rests on Chebyshev and a "
                   "union bound over 2^N |Omega|^N events and stays >= 60 times the exact quantile, so the check is "
                   "shown to fail by breaking Assumption 3 (stored counterexample), not by halving the radius.")
    weaken_by_hypothesis = True
    budget = 0.5

    def hypotheses(self, instance: MaskSample) -> Applicability:
        log_p = instance.family.log_probabilities(instance.theta)
        smallest = min(float(np.exp(instance.masks.conditionals(log_p, b)[1].min())) for b in range(instance.masks.m))
        if instance.beta is not None and instance.beta > smallest:
            return Applicability(False, f"Assumption 3 fails: beta = {instance.beta} > the smallest conditional "
                                        f"{smallest:.3g}")
        return Applicability(True)

    def radius_and_failure(self, instance: MaskSample, log_beta: float, N: int) -> tuple[float, float]:
        """(radius, failure probability) of the bound (|Omega| = 2)."""
        raise NotImplementedError

    def check(self, instance: MaskSample) -> Verdict:
        values, probs, log_beta, N = mask_deviation(instance)
        radius, failure = self.radius_and_failure(instance, log_beta, N)
        if failure >= 1:
            return verdict(Part("upper quantile of |L_hat - L_tilde| < radius", 0.0, radius, "<=", 0.0, 0.0),
                           trivial="failure probability >= 1")
        q = upper_quantile(values, probs, failure)
        return verdict(Part("upper quantile of |L_hat - L_tilde| < radius", q, radius, "<=", 1e-12 * (1 + q),
                            1e-12 * radius), failure_probability=failure, largest_deviation=float(values.max()))

    counterexamples = (Counterexample(
        "Assumption 3 broken (beta = 0.99 above every conditional): the radius shrinks to ~0 while the masks move "
        "L_hat away from L_tilde",
        lambda: MaskSample(IsingFamily(nx.path_graph(2)), np.array([0.5, -0.3, 1.0]), 0,
                           MaskDistribution.weighted(StateSpace(2, 2), [(0,), (1,), (0, 1)], [0.3, 0.3, 0.4]), 100,
                           eps=0.4, t=2.0, delta=0.5, beta=0.99),
        dropped="Assumption 3 (support margin beta)"),)


@register
class Lemma7(_MaskConcentration):
    id = "pitfalls.lemma7"
    number = "Lemma 7"
    statement = ("for fixed theta under Assumption 3, |L_hat_PL(theta) - L_tilde_PL(theta)| < 2^N eps ln(1/beta) + t/n with "
                 "probability >= 1 - 2^{N-2}|Omega|^N/(eps^2 m) - 2 e^{-2t^2/(n ln^2(1/beta))}; checked exactly over the m "
                 "masks of one training point (N = 2, m = 64..200) as q_F < radius, F the failure probability")

    def strategy(self) -> st.SearchStrategy:
        return mask_samples()

    def radius_and_failure(self, instance: MaskSample, log_beta: float, N: int) -> tuple[float, float]:
        t = instance.t * log_beta  # the strategy gives t in units of ln(1/beta)
        failure = 2 ** (N - 2) * 2**N / (instance.eps**2 * instance.m) + \
            (2 * np.exp(-2 * t**2 / log_beta**2) if log_beta > 0 else 0.0)
        return 2**N * instance.eps * log_beta + t, float(failure)


@register
class Corollary1(_MaskConcentration):
    id = "pitfalls.cor1"
    number = "Corollary 1"
    statement = ("Lemma 7 with eps = sqrt(2^{N-1}|Omega|^N/(m delta)), t = sqrt(ln(4/delta) n/2) ln(1/beta): with probability "
                 ">= 1 - delta, |L_hat - L_tilde| < (sqrt(2^{3N-1}|Omega|^N/(m delta)) + sqrt(ln(4/delta)/(2n))) ln(1/beta); "
                 "checked exactly over the masks of one training point")

    def strategy(self) -> st.SearchStrategy:
        return mask_samples(corollary=True)

    def radius_and_failure(self, instance: MaskSample, log_beta: float, N: int) -> tuple[float, float]:
        d, m = instance.delta, instance.m
        return (math.sqrt(2 ** (3 * N - 1) * 2**N / (m * d)) + math.sqrt(math.log(4 / d) / 2)) * log_beta, d


@register
class Lemma8(_PTheorem):
    id = "pitfalls.lemma8"
    number = "Lemma 8"
    statement = ("empirical law p~ of n i.i.d. draws from p_X on |Omega|^N = M points: TV(p~, p_X) < "
                 "sqrt(M^3 / (16 delta n)) with probability >= 1 - delta; checked as q_delta < radius, q_delta the "
                 "exact upper delta-quantile of TV(p~, p_X) over all count vectors")
    conventions = "TV is half L1 (the proof's (1/2) sum |p~ - p|)."

    def strategy(self) -> st.SearchStrategy:
        return empirical_laws()

    def check(self, instance: EmpiricalLaw) -> Verdict:
        values, probs = empirical_tv_law(np.array(instance.p), instance.n)
        q = upper_quantile(values, probs, instance.delta)
        M = len(instance.p)
        radius = (M**3 / (16 * instance.delta * instance.n)) ** 0.5
        trivial = "radius >= 1 >= TV" if radius >= 1 else None
        return verdict(Part("upper delta-quantile of TV < sqrt(M^3/(16 delta n))", q, radius, "<=", 1e-12, 1e-15),
                       trivial=trivial, failure_probability=float(probs[values >= radius].sum()))

    attaining = (Attaining("one draw of a fair coin, delta = 0.95: TV = 1/2 always, radius sqrt(8/(16 delta)) = 0.725",
                           lambda: EmpiricalLaw((0.5, 0.5), 1, 0.95), looseness=1.451),)
