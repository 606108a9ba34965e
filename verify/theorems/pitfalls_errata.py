"""Paper P's side claims that earlier versions listed as not checkable, checked exactly.

* Section 2.3, "approximate tensorization implies KL(p_t, q) <= e^{-2t/C_AT} KL(p_0, q)". For a
  product law q = q_0 x ... x q_{n-1} and singleton blocks {i} drawn with weights w_i, C_AT is known
  exactly: C_AT = 1 / min_i w_i. The upper bound is the tensorization of relative entropy for product
  laws, KL(r || q) <= sum_i E_r KL(r(.|X_{-i}) || q_i) <= D(r) / min w; the lower bound is attained by
  every r = r_i x q_{-i} with i = argmin w (the conditional KL vanishes off block i, so the ratio is
  exactly 1/w_i; the check recomputes it with :func:`mlmix.theory.training.block_poincare.tensorization_ratio`).
  The laws p_t = r P^t (discrete time) and r e^{t(P - I)} (continuous time) are computed twice: with the
  library's block kernel and by the refresh-set formula (each step refreshes site i with probability
  w_i; p_t = sum_S P(S = refreshed set) r_{-S} x q_S, P(refreshed set within A) = (sum_{i in A} w_i)^t,
  or independent refreshes with probability 1 - e^{-w_i t} in continuous time).
  The factor-2 rate fails (``pitfalls.at_rate``, known false); the factor-1 rates (1 - 1/C_AT)^t and
  e^{-t/C_AT} hold (``pitfalls.at_rate.factor1``). :func:`light_symbol_ratio` evaluates the stored
  counterexample in closed form at 50 digits (mpmath).
* Lemma 1's erratum, "with probability >= 0.99, ||theta_hat - theta*||^2 <= Tr(Gamma_PL)/m". In the
  limit m -> infinity, m ||theta_hat - theta*||^2 has the law of sum_i lambda_i Z_i^2 (lambda_i the
  eigenvalues of Gamma_PL), whose probability of being <= Tr Gamma_PL = its mean is computed with
  certified bounds (:func:`mlmix.verify.exact_laws.weighted_chi2_cdf`): it is P(chi^2_1 <= 1) = 0.683
  with one parameter and below 0.69 on every instance (``pitfalls.lemma1.erratum``, known false).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import mpmath
import networkx as nx
import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st
from scipy.sparse.linalg import expm_multiply

from mlmix.theory.sources.conditionals import LogWeightTable
from mlmix.theory.sources.space import StateSpace
from mlmix.theory.training.block_poincare import block_dynamics_kernel, tensorization_ratio
from mlmix.theory.training.exponential_family import IsingFamily
from mlmix.theory.training.pseudolikelihood import MaskDistribution, asymptotic_covariance
from mlmix.verify.exact_laws import weighted_chi2_cdf
from mlmix.verify.pitfalls_strategies import PLInstance, pl_instances, thetas
from mlmix.verify.theorems.pitfalls.pitfalls_base import PAPER, _well_conditioned
from mlmix.verify.verdicts import Applicability, Attaining, Counterexample, Part, Theorem, Verdict, register, verdict

#: Relative accuracy of a KL computed in double precision from laws with entries >= 1e-300 (a few
#: hundred roundings of terms of size <= KL(r || q) + log(1/q_min)).
KL_RTOL = 1e-10


@dataclass(frozen=True, eq=False)
class ProductAT:
    """A product law q (marginals ``marginals[i]`` on V), singleton blocks drawn with ``weights``, an
    initial law ``r`` on V^n and a time ``t`` (steps, or continuous time)."""

    marginals: tuple[np.ndarray, ...]
    weights: np.ndarray
    r: np.ndarray
    t: float
    label: str = ""

    @property
    def space(self) -> StateSpace:
        return StateSpace(len(self.marginals[0]), len(self.marginals))

    def joint(self) -> np.ndarray:
        states = self.space.all_states()
        return np.prod([m[states[:, i]] for i, m in enumerate(self.marginals)], axis=0)

    @property
    def c_at(self) -> float:
        """C_AT(q) = 1 / min w exactly (tensorization of relative entropy; see the module docstring)."""
        return 1.0 / float(self.weights.min())

    def regime(self) -> dict[str, Any]:
        s = self.space
        return {"n": s.length, "vocab": s.vocab_size, "temperature": None, "states": s.size, "reversible": True}

    def describe(self) -> dict[str, Any]:
        return {"marginals": [np.round(m, 12).tolist() for m in self.marginals],
                "weights": np.round(self.weights, 12).tolist(), "t": self.t, "r": self.label or "random law"}


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    live = p > 0
    return float(np.sum(p[live] * (np.log(p[live]) - np.log(q[live]))))


def refresh_law(inst: ProductAT, continuous: bool) -> np.ndarray:
    """p_t by the refresh-set formula (independent of the kernel): sum over the set S of sites
    refreshed by time t of P(S) times (the marginal of r off S) x q_S."""
    space, n = inst.space, len(inst.marginals)
    states = space.all_states()
    w = inst.weights
    out = np.zeros(space.size)
    for size in range(n + 1):
        for S in combinations(range(n), size):
            if continuous:
                prob = float(np.prod([1 - math.exp(-w[i] * inst.t) if i in S else math.exp(-w[i] * inst.t)
                                      for i in range(n)]))
            else:  # inclusion-exclusion over the subsets A of S: P(refreshed set within A) = w(A)^t
                prob = sum((-1) ** (size - len(A)) * float(w[list(A)].sum()) ** inst.t
                           for k in range(size + 1) for A in combinations(S, k))
            if prob <= 0:
                continue
            keep = [i for i in range(n) if i not in S]
            r_keep = inst.r.reshape((space.vocab_size,) * n).sum(axis=tuple(S)) if S else \
                inst.r.reshape((space.vocab_size,) * n)
            term = r_keep[tuple(states[:, i] for i in keep)] if keep else np.full(space.size, float(r_keep))
            for i in S:
                term = term * inst.marginals[i][states[:, i]]
            out += prob * term
    return out


def kernel_law(inst: ProductAT, continuous: bool) -> np.ndarray:
    """p_t from the library's block kernel: r P^t, or r e^{t(P - I)} (scipy's expm_multiply)."""
    q = inst.joint()
    source = LogWeightTable(inst.space, np.log(q))
    n = len(inst.marginals)
    P = block_dynamics_kernel(source, MaskDistribution.weighted(inst.space, [(i,) for i in range(n)], inst.weights))
    PT = sp.csr_array(P).T.tocsr()
    if continuous:
        return expm_multiply(inst.t * (PT - sp.identity(inst.space.size, format="csr")), inst.r)
    p = inst.r.copy()
    for _ in range(int(inst.t)):
        p = PT @ p
    return p


class _ATRate(Theorem):
    paper = PAPER
    budget = 0.5
    #: (discrete-time rate, continuous-time rate) as functions of (t, C_AT)
    rates: tuple[str, str]

    def strategy(self) -> st.SearchStrategy:
        return product_at_instances()

    def rate(self, t: float, c: float, continuous: bool) -> float:
        raise NotImplementedError

    def check(self, inst: ProductAT) -> Verdict:
        q = inst.joint()
        kl0 = _kl(inst.r, q)
        parts, conditions, details = [], {}, {"c_at": inst.c_at}
        for continuous, name in ((False, self.rates[0]), (True, self.rates[1])):
            p_kernel, p_refresh = kernel_law(inst, continuous), refresh_law(inst, continuous)
            conditions[f"{'continuous' if continuous else 'discrete'} p_t: kernel = refresh sets"] = \
                bool(np.abs(p_kernel - p_refresh).max() <= 1e-10)
            klt = _kl(np.clip(p_refresh, 0, None), q)
            bound = self.rate(inst.t, inst.c_at, continuous) * kl0
            scale = kl0 + math.log(1 / q.min())
            parts.append(Part(name, klt, bound, "<=", KL_RTOL * scale, KL_RTOL * scale))
            details["kl_ratio_continuous" if continuous else "kl_ratio"] = klt / kl0 if kl0 > 0 else None
        i = int(np.argmin(inst.weights))
        light = np.zeros(len(inst.marginals[i]))
        light[int(np.argmin(inst.marginals[i]))] = 1.0
        ratio = tensorization_ratio(LogWeightTable(inst.space, np.log(q)),
                                    MaskDistribution.weighted(inst.space, [(k,) for k in range(len(inst.weights))],
                                                              inst.weights),
                                    _replace_marginal(inst, i, light))
        conditions["C_AT attained: KL/D at r_i x q_-i = 1/min w"] = abs(ratio - inst.c_at) <= 1e-8 * inst.c_at
        trivial = "r = q: both sides 0" if kl0 < 1e-14 else None
        return verdict(*parts, conditions=conditions, trivial=trivial, **details)


def _replace_marginal(inst: ProductAT, i: int, r_i: np.ndarray) -> np.ndarray:
    """The product law r_i x q_{-i} on V^n."""
    states = inst.space.all_states()
    factors = [r_i if k == i else m for k, m in enumerate(inst.marginals)]
    return np.prod([f[states[:, k]] for k, f in enumerate(factors)], axis=0)


def light_symbol_instance(eps: float = 1e-6, w: float = 0.5, t: float = 1, label: str = "") -> ProductAT:
    """q_0 = (1 - eps, eps), q_1 uniform on {0, 1}, blocks {0}, {1} with weights (w, 1 - w), r = delta_1 x q_1
    (concentrated on the light symbol at block 0)."""
    inst = ProductAT((np.array([1 - eps, eps]), np.array([0.5, 0.5])), np.array([w, 1 - w]), np.zeros(4), t)
    r = _replace_marginal(inst, 0, np.array([0.0, 1.0]))
    return ProductAT(inst.marginals, inst.weights, r, t, label or "delta(light symbol) x q_1")


def light_symbol_ratio(eps: Any, w: Any, t: Any, continuous: bool, digits: int = 50) -> mpmath.mpf:
    """KL(p_t || q) / KL(p_0 || q) for :func:`light_symbol_instance`, in closed form at ``digits``
    digits: block 0 of p_t is a q_0 + (1 - a) delta_1 with a = 1 - (1 - w)^t (discrete) or
    1 - e^{-w t} (continuous); block 1 stays q_1; KL(p_0 || q) = log(1/eps)."""
    with mpmath.workdps(digits):
        eps, w, t = mpmath.mpf(eps), mpmath.mpf(w), mpmath.mpf(t)
        a = 1 - mpmath.exp(-w * t) if continuous else 1 - (1 - w) ** t
        p0, p1 = a * (1 - eps), a * eps + (1 - a)
        kl = p0 * mpmath.log(p0 / (1 - eps)) + p1 * mpmath.log(p1 / eps)
        return +(kl / mpmath.log(1 / eps))


@st.composite
def product_at_instances(draw) -> ProductAT:
    """n in 2..4 sites, |V| in 2..3 (|V|^n <= 81), marginals Dirichlet with half of them peaked (a symbol of
    mass 10^-u, u up to 8), singleton weights Dirichlet, t in 1..5 (also the continuous time); r: in 3/5 of
    the cases delta(lightest symbol) x q at the lightest block, or at a random block (the attaining family),
    else a random law on V^n or a mixture with q."""
    q = draw(st.integers(2, 3))
    n = draw(st.integers(2, 4 if q == 2 else 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    marginals = []
    for _ in range(n):
        m = rng.dirichlet(np.ones(q))
        if draw(st.booleans()):
            m[int(rng.integers(q))] = 10.0 ** -draw(st.floats(1, 8))
        marginals.append(m / m.sum())
    w = rng.dirichlet(np.ones(n) * draw(st.sampled_from([0.5, 1.0, 5.0])))
    w = np.maximum(w, 0.02)
    w = w / w.sum()
    t = draw(st.integers(1, 5))
    inst = ProductAT(tuple(marginals), w, np.zeros(q ** n), t)
    kind = draw(st.sampled_from(("light-min", "light-min", "light-any", "random", "mixture")))
    if kind.startswith("light"):
        i = int(np.argmin(w)) if kind == "light-min" else draw(st.integers(0, n - 1))
        light = np.zeros(q)
        light[int(np.argmin(marginals[i]))] = 1.0
        return ProductAT(inst.marginals, w, _replace_marginal(inst, i, light), t, f"delta(lightest) x q at block {i}")
    r = rng.dirichlet(np.ones(q ** n) * 0.3)
    if kind == "mixture":
        r = 0.5 * r + 0.5 * inst.joint()
    return ProductAT(inst.marginals, w, r / r.sum(), t, kind)


@register
class ATRate(_ATRate):
    id = "pitfalls.at_rate"
    number = "Section 2.3 (approximate tensorization rate, as stated)"
    statement = ("approximate tensorization implies KL(p_t, q) <= e^{-2t/C_AT} KL(p_0, q) for the block dynamics "
                 "(checked in discrete time t steps and continuous time t), on product laws with singleton blocks "
                 "where C_AT = 1/min w exactly")
    refuted_in = "docs/theorems.md, Paper P, Section 2.3 rate"
    rates = ("KL(p_t) <= e^{-2t/C_AT} KL(p_0) (discrete)", "KL(p_t) <= e^{-2t/C_AT} KL(p_0) (continuous)")

    def rate(self, t: float, c: float, continuous: bool) -> float:
        return math.exp(-2 * t / c)

    counterexamples = (Counterexample(
        "q_0 = (1 - 1e-6, 1e-6), q_1 uniform, w = (1/2, 1/2) (C_AT = 2), r = delta_1 x q_1, t = 1: "
        "KL(p_1, q)/KL(p_0, q) = 0.4498 > e^{-1} = 0.3679 (0.5580 > e^{-1} in continuous time)",
        lambda: light_symbol_instance()),)


@register
class ATRateFactor1(_ATRate):
    id = "pitfalls.at_rate.factor1"
    number = "Section 2.3 (approximate tensorization rate, corrected)"
    statement = ("what follows from the definition of C_AT: KL(p_t, q) <= (1 - 1/C_AT)^t KL(p_0, q) (t steps) and "
                 "<= e^{-t/C_AT} KL(p_0, q) (continuous time), on product laws with singleton blocks (C_AT = 1/min w)")
    rates = ("KL(p_t) <= (1 - 1/C_AT)^t KL(p_0) (discrete)", "KL(p_t) <= e^{-t/C_AT} KL(p_0) (continuous)")

    def rate(self, t: float, c: float, continuous: bool) -> float:
        return math.exp(-t / c) if continuous else (1 - 1 / c) ** t

    attaining = (Attaining("q_0 = (1 - 1e-12, 1e-12), q_1 uniform, w = (1/2, 1/2), r = delta_1 x q_1, t = 1: "
                           "KL ratio 0.4749 against 1/2 (discrete), 0.5823 against e^{-1/2} = 0.6065 (continuous)",
                           lambda: light_symbol_instance(1e-12), looseness=(1.0529, 1.0417)),)


# ----------------------------------------------------------------------------------------------
# Lemma 1's erratum


def one_parameter_instances() -> st.SearchStrategy[PLInstance]:
    """One binary site with a field h in [-3, 3] (the MPLE is the MLE; Gamma_PL = 1/Var(x))."""
    family = IsingFamily(nx.empty_graph(1))
    return thetas(family, 3.0).map(lambda th: PLInstance(family, th, MaskDistribution.k_subsets(family.space, 1)))


@register
class Lemma1Erratum(Theorem):
    id = "pitfalls.lemma1.erratum"
    paper = PAPER
    number = "Lemma 1 (prose consequence)"
    statement = ("'with probability >= 0.99, ||theta_hat - theta*||^2 <= Tr(Gamma_PL)/m' for large m: checked on the "
                 "limit law sum_i lambda_i Z_i^2 of m ||theta_hat - theta*||^2 (lambda_i the eigenvalues of the exact "
                 "Gamma_PL): P(sum_i lambda_i Z_i^2 <= Tr Gamma_PL) >= 0.99")
    conventions = ("Markov's inequality gives probability >= 0.99 only for the radius 100 Tr(Gamma_PL)/m; at Tr(Gamma_PL)/m "
                   "(the mean of the limit law) the probability is at most P(chi^2_1 <= 1) = 0.683 here.")
    refuted_in = "docs/theorems.md, Paper P, Lemma 1"
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(one_parameter_instances(), pl_instances(max_n=3, scale=2.0))

    def hypotheses(self, instance: PLInstance) -> Applicability:
        if instance.data is not None:
            return Applicability(False, "not realizable (Assumption 2)")
        pl_hessian = asymptotic_covariance(instance.family, instance.theta, instance.masks, max_condition=np.inf).hessian
        return _well_conditioned({"PL Hessian": pl_hessian})

    def check(self, instance: PLInstance) -> Verdict:
        gamma = asymptotic_covariance(instance.family, instance.theta, instance.masks).gamma
        lam = np.linalg.eigvalsh(gamma)
        lam = lam[lam > 1e-12 * lam.max()]
        lo, hi = weighted_chi2_cdf(lam, float(lam.sum()))
        err = (hi - lo) / 2 + 1e-9 * len(lam)  # the series' interval and the eigenvalues' rounding
        return verdict(Part("P(m ||theta_hat - theta*||^2 <= Tr Gamma_PL) >= 0.99 (limit law)", (lo + hi) / 2, 0.99,
                            ">=", err, 0.0),
                       parameters=int(lam.size), trace=float(lam.sum()))

    def regime(self, instance: PLInstance) -> dict:
        return instance.regime()

    counterexamples = (Counterexample(
        "one binary site, h = 0.3 (one parameter): the limit probability is P(chi^2_1 <= 1) = erf(1/sqrt 2) = 0.6827",
        lambda: PLInstance(IsingFamily(nx.empty_graph(1)), np.array([0.3]),
                           MaskDistribution.k_subsets(StateSpace(2, 1), 1))),)


__all__ = ["ProductAT", "light_symbol_instance", "light_symbol_ratio", "refresh_law", "kernel_law",
           "product_at_instances", "one_parameter_instances"]
