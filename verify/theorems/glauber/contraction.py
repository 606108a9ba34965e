"""Paper G, section 5.1-5.2: high-temperature contraction and O(n log n) mixing (Theorem 5 and its
mixing, row, coupling forms), influence against score oscillation over temperature (Lemma 6) and
the temperature threshold for fast mixing (Corollary 7)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st
from scipy.special import softmax

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.local.influence import (
    aggregate_influence,
    contraction_temperature,
    influence_and_oscillation,
    influence_matrix,
    score_oscillation,
    tv_bound_from_oscillation,
)
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.verify import instances as S
from mlmix.verify.regime_instances import (
    contraction_instances,
    high_temperature_instances,
    mostly_incompatible,
    score_pairs,
)
from mlmix.verify.theorems.glauber.glauber_base import (
    LOCAL_RTOL,
    GlauberTheorem,
    _kernel,
    _pi,
    _positive,
    mixing_part,
    two_spin_ising,
)
from mlmix.verify.verdicts import (
    Applicability,
    Attaining,
    Counterexample,
    Part,
    Verdict,
    Violation,
    register,
    verdict,
)
from mlmix.verify.wasserstein import hamming_w1

# ----------------------------------------------------------------------------------------------
# Theorem 5


def _adjacent_pairs(space) -> np.ndarray:
    """Every unordered adjacent pair (x, y), x < y, as an array (M, 2)."""
    idx = np.arange(space.size)
    out = []
    for i in range(space.length):
        nb = space.neighbours(idx, i)
        for v in range(space.vocab_size):
            keep = nb[:, v] > idx
            out.append(np.stack([idx[keep], nb[keep, v]], axis=1))
    return np.concatenate(out)


def coupled_distances(P: np.ndarray, inst: S.Instance) -> np.ndarray:
    """For every adjacent pair (x, y = x^{j<-b}) of :func:`_adjacent_pairs`: E[d_H(X_1, Y_1)] under the
    coupling 'same site k, maximal coupling of the two conditionals at k', conditionals read off the
    kernel rows: E = (1/n) sum_{k != j} (1 + TV_k(x, y))."""
    space = inst.space
    n, N = space.length, space.size
    idx = np.arange(N)
    cond = np.empty((N, n, space.vocab_size))
    for k in range(n):
        nb = space.neighbours(idx, k)
        c = n * P[idx[:, None], nb]
        c[nb == idx[:, None]] = 0.0
        c[nb == idx[:, None]] = 1.0 - c.sum(axis=1)
        cond[:, k] = c
    pairs = _adjacent_pairs(space)
    x, y = pairs[:, 0], pairs[:, 1]
    j = np.argmax(space.decode(x) != space.decode(y), axis=1)
    disagree = 1.0 - np.minimum(cond[x], cond[y]).sum(axis=-1)  # (M, n)
    disagree[np.arange(x.size), j] = -1.0  # site j: both resample from the same conditional, d drops to 0
    return (1.0 + disagree).sum(axis=1) / n


def _max_coupled_distance(P: np.ndarray, inst: S.Instance) -> float:
    return float(coupled_distances(P, inst).max())


def _aggregate_below_one(instance: S.Instance, aggregate: str) -> Applicability:
    """Positive conditionals and the aggregate influence ("rho": column sums, "alpha": row sums) < 1."""
    if not _positive(instance):
        return _positive(instance)
    kappa = getattr(aggregate_influence(influence_matrix(instance.source).rho_ij), aggregate)
    return Applicability(kappa < 1, f"{aggregate} = {kappa:.4g} >= 1")


#: Times and number of sampled pairs of the multi-step Wasserstein check of Theorem 5.
W1_TIMES = (2, 3, 5)
W1_PAIRS = 6


@register
class Thm5(GlauberTheorem):
    id = "glauber.thm5"
    number = "Theorem 5 (App. E: Theorem 10)"
    statement = ("rho = max_j sum_{i!=j} rho_ij < 1 => there is a coupling with E d_H(X_t, Y_t) <= "
                 "(1 - (1-rho)/n)^t d_H(x, y) for all x, y, t; checked through the exact Wasserstein distance "
                 "W1(P^t(x,.), P^t(y,.)) (Hamming cost, linear programme) for every adjacent pair at t = 1 "
                 "and sampled pairs at t = 2, 3, 5")
    conventions = ("rho with column sums (influence exerted by site j): the reading the path coupling needs; with "
                   "row sums (Dobrushin's alpha) the contraction is false (glauber.thm5.row.contraction).")
    budget = 0.4

    def strategy(self) -> st.SearchStrategy:
        return contraction_instances(mostly_incompatible(81), max_states=81, eps=False)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _aggregate_below_one(instance, "rho")

    def check(self, instance: S.Instance) -> Verdict:
        space = instance.space
        n = space.length
        rho = influence_matrix(instance.source).rho
        kappa = 1 - (1 - rho) / n
        P = _kernel(instance)
        pairs = _adjacent_pairs(space)
        lo, hi = hamming_w1([(P[x], P[y]) for x, y in pairs], space)
        k = int(np.argmax(hi))
        one = Part("one step, adjacent pairs: W1 <= 1 - (1-rho)/n", hi[k], kappa, "<=", hi[k] - lo[k],
                   LOCAL_RTOL * 10)
        # several t: the worst adjacent pair, the farthest pair from it, and seeded random pairs
        rng = np.random.default_rng(space.size * 7919 + int(1e6 * instance.source.temperature) % 7919)
        x0, y0 = pairs[k]
        far = int(np.argmax(space.hamming(x0, np.arange(space.size))))
        chosen = [(x0, y0), (x0, far)] + [tuple(rng.choice(space.size, 2, replace=False)) for _ in range(W1_PAIRS - 2)]
        worst = None
        for t in W1_TIMES:
            Pt = np.linalg.matrix_power(P, t)
            l_t, h_t = hamming_w1([(Pt[a], Pt[b]) for a, b in chosen], space)
            for (a, b), lo_ab, hi_ab in zip(chosen, l_t, h_t):
                d = int(space.hamming(a, b))
                ratio = hi_ab / (kappa**t * d)
                if worst is None or ratio > worst[0]:
                    worst = (ratio, hi_ab / d, kappa**t, (hi_ab - lo_ab) / d, t, [int(a), int(b)])
        _, lhs, rhs, err, t, pair = worst
        multi = Part("t steps: W1 / d_H(x,y) <= (1 - (1-rho)/n)^t", lhs, rhs, "<=", err, LOCAL_RTOL * 10 * t)
        return verdict(one, multi, rho=rho, worst_pair_t1=[int(x0), int(y0)], worst_multi={"t": t, "pair": pair})

    attaining = (Attaining("two spins, J = 0.4, T = 1.3, zero fields: W1 = 1 - (1 - rho)/2 (the same-site maximal "
                           "coupling is optimal)", two_spin_ising, looseness=(1.0001, 1.0001)),)
    violations = (Violation(
        "rho < 1", lambda: high_temperature_instances(S.any_sources(81), max_states=81, low=0.05, high=0.5),
        lambda inst: _max_coupled_distance(_kernel(inst), inst) >= 1.0,
        "rho >= 1: some adjacent pair is not brought closer by the coupling (E d_H(X_1, Y_1) >= 1)"),)


def cold_product() -> S.Instance:
    """Four independent binary sites at T = 0.1 (rho = 0), eps = 0.01."""
    inst = S.Instance(S.product_table(2, 4, 0, 4.0).at_temperature(0.1), "product", {"seed": 0, "scale": 4.0})
    inst.eps = 0.01
    return inst


def _contraction_mixing(instance: S.Instance, kappa: float, name: str) -> Verdict:
    """Thm 5's consequences for an aggregate influence kappa < 1: exact t_mix(eps) against
    ceil(n log(n/eps)/(1-kappa)), and d(t) <= n (1-(1-kappa)/n)^t for every t up to 2 t_mix."""
    n, eps = instance.space.length, instance.eps
    P = _kernel(instance)
    chain = Chain(P)
    bound = math.ceil(n * math.log(n / eps) / (1 - kappa))
    mix = mixing_part(f"t_mix(eps) <= ceil(n log(n/eps)/(1-{name}))", P, eps, chain.stationary.value, bound, "<=")
    curve = chain.distance_curve(min(2 * int(mix.lhs + mix.lhs_error) + 1, 4 * bound))
    d, err = np.asarray(curve), float(curve.abs_error)
    envelope = n * (1 - (1 - kappa) / n) ** np.arange(d.size)
    ratios = np.where(d > 1e3 * err, d / envelope, 0.0)
    s = int(np.argmax(ratios))
    env = Part(f"d(t) <= n (1-(1-{name})/n)^t", d[s], envelope[s], "<=", err, LOCAL_RTOL * envelope[s])
    return verdict(mix, env, t_mix=mix.lhs, bound=bound, worst_t=int(s), kappa=kappa)


class _ContractionMixing(GlauberTheorem):
    """Theorem 5's mixing consequences with the aggregate influence named by ``aggregate``."""

    aggregate: str
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return contraction_instances(mostly_incompatible(243), max_states=243)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _aggregate_below_one(instance, self.aggregate)

    def check(self, instance: S.Instance) -> Verdict:
        agg = aggregate_influence(influence_matrix(instance.source).rho_ij)
        return _contraction_mixing(instance, getattr(agg, self.aggregate), self.aggregate)

    attaining = (Attaining("independent near-deterministic sites (product table, |V| = 2, n = 4, T = 0.1, eps = 0.01): "
                           "t_mix = 0.875 x the bound, and d(t) / (n (1 - 1/n)^t) -> 1", lambda: cold_product(), looseness=(1.1429, 1.0001)),)


@register
class Thm5Mixing(_ContractionMixing):
    id = "glauber.thm5.mixing"
    number = "Theorem 5 (mixing consequence)"
    statement = ("rho < 1 => d(t) <= n (1-(1-rho)/n)^t and t_mix(eps) <= ceil(n log(n/eps) / (1-rho)) "
                 "(exact worst-start t_mix, eps in {1/4, 1/10, 1/100})")
    conventions = "rho with column sums; TV is half L1; d(t) is the worst start."
    aggregate = "rho"


@register
class Thm5Row(_ContractionMixing):
    id = "glauber.thm5.row"
    number = "Theorem 5 (Dobrushin reading, mixing)"
    statement = ("alpha = max_i sum_{j!=i} rho_ij < 1 => d(t) <= n (1-(1-alpha)/n)^t and "
                 "t_mix(eps) <= ceil(n log(n/eps) / (1-alpha)) (the paper's sum is lost; with row sums the "
                 "mixing bound survives, the Hamming contraction does not)")
    conventions = "alpha with row sums (influence received by site i)."
    aggregate = "alpha"


#: A Gaussian score table (|V| = 2, n = 3) at the temperature where rho = 0.9: alpha = 0.893 < 1, yet
#: an adjacent pair has W1 = 0.9667 > 1 - (1 - alpha)/n = 0.9642 (found by a seeded search).
ROW_COUNTEREXAMPLE = {"q": 2, "n": 3, "seed": 5, "scale": 1.0, "temperature": 1.3369}


@register
class Thm5RowContraction(GlauberTheorem):
    id = "glauber.thm5.row.contraction"
    number = "Theorem 5 (Dobrushin reading, contraction)"
    statement = ("alpha = max_i sum_{j!=i} rho_ij < 1 => W1(P(x,.), P(y,.)) <= 1 - (1-alpha)/n for adjacent x, y. "
                 "FALSE: the path coupling needs the column sum rho (glauber.thm5)")
    conventions = "alpha with row sums; the statement holds with column sums."
    refuted_in = "docs/theorems.md, Paper G, Which sum in Theorem 5?"
    budget = 0.4

    def strategy(self) -> st.SearchStrategy:
        return contraction_instances(max_states=27, eps=False)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _aggregate_below_one(instance, "alpha")

    def check(self, instance: S.Instance) -> Verdict:
        space = instance.space
        agg = aggregate_influence(influence_matrix(instance.source).rho_ij)
        kappa = 1 - (1 - agg.alpha) / space.length
        P = _kernel(instance)
        pairs = _adjacent_pairs(space)
        lo, hi = hamming_w1([(P[x], P[y]) for x, y in pairs], space)
        k = int(np.argmax(lo))
        return verdict(Part("W1 <= 1 - (1-alpha)/n", lo[k], kappa, "<=", hi[k] - lo[k], LOCAL_RTOL * 10),
                       alpha=agg.alpha, rho=agg.rho, pair=pairs[k].tolist())

    counterexamples = (Counterexample(
        "Gaussian score table |V| = 2, n = 3, seed 5, T = 1.3369: alpha = 0.893, rho = 0.900, and an adjacent pair "
        "has W1 = 0.9667 > 1 - (1-alpha)/n = 0.9642",
        lambda: row_counterexample()),)


def row_counterexample() -> S.Instance:
    """The stored counterexample of :class:`Thm5RowContraction` (see ``ROW_COUNTEREXAMPLE``)."""
    c = ROW_COUNTEREXAMPLE
    src = ScoreTable.random(c["q"], c["n"], seed=c["seed"], scale=c["scale"]).at_temperature(c["temperature"])
    return S.Instance(src, "gaussian-table", dict(c))


@register
class Thm5Coupling(GlauberTheorem):
    id = "glauber.thm5.coupling"
    number = "Theorem 5 (proof: one-step path coupling)"
    statement = ("same site in both copies, maximal coupling of the two conditionals: for every adjacent pair, "
                 "E[d_H(X_1,Y_1)] = 1 - 1/n + (1/n) sum_{i!=j} TV_i(x,y) <= 1 - (1-rho)/n")
    conventions = "rho with column sums; TV_i(x, y) = TV(pi_i(.|x_-i), pi_i(.|y_-i)) <= rho_ij."
    budget = 0.5

    def strategy(self) -> st.SearchStrategy:
        return contraction_instances(max_states=729, eps=False)

    def check(self, instance: S.Instance) -> Verdict:
        n = instance.space.length
        rho = influence_matrix(instance.source).rho
        worst = _max_coupled_distance(_kernel(instance), instance)
        return verdict(Part("E d_H(X_1,Y_1) <= 1 - (1-rho)/n", worst, 1 - (1 - rho) / n, "<=", LOCAL_RTOL * 10 * n,
                            LOCAL_RTOL * 10), rho=rho)

    attaining = (Attaining("two spins with zero fields: TV_1(x, y) = rho_10", two_spin_ising, looseness=1.0001),)


@register
class Lemma6(GlauberTheorem):
    id = "glauber.lemma6"
    number = "Lemma 6 (App. E: Lemma 11)"
    statement = ("rho_ij(T) <= tanh(Delta_ij/(4T)) <= Delta_ij/(4T), Delta_ij = sup osc_v(s_i(v|x_-i) - s_i(v|y_-i)) "
                 "over x, y differing at j")
    conventions = ("Delta with the oscillation (max - min) and the factor 1/(4T); the sup-norm convention takes "
                   "1/(2T). Never mix them.")

    def strategy(self) -> st.SearchStrategy:
        return S.half_large(st.one_of(S.instances(max_states=729, max_ratio=200.0),
                                      S.instances(st.one_of(S.ising_sources(), S.potts_sources()), max_ratio=200.0)),
                            max_ratio=200.0)

    def check(self, instance: S.Instance) -> Verdict:
        influence, oscillation = influence_and_oscillation(instance.source)
        rho, delta = influence.rho_ij, oscillation.delta_ij
        T = instance.source.temperature
        tanh = tv_bound_from_oscillation(delta, T)
        linear = tv_bound_from_oscillation(delta, T, linear=True)
        off = ~np.eye(rho.shape[0], dtype=bool)
        q = instance.space.vocab_size
        atol = 10 * q * np.finfo(float).eps
        i, j = np.unravel_index(np.argmax(np.where(off, rho / np.maximum(tanh, 1e-300), -np.inf)), rho.shape)
        a, b = np.unravel_index(np.argmax(np.where(off & (linear > 0), tanh / np.maximum(linear, 1e-300), -np.inf)),
                                rho.shape)
        trivial = "Delta = 0: rho = 0 = bound" if delta[off].max() == 0 else None
        return verdict(Part("rho_ij <= tanh(Delta_ij/(4T))", rho[i, j], tanh[i, j], "<=", atol, LOCAL_RTOL * tanh[i, j]),
                       Part("tanh(Delta/(4T)) <= Delta/(4T)", tanh[a, b], linear[a, b], "<=", LOCAL_RTOL * tanh[a, b],
                            LOCAL_RTOL * linear[a, b]),
                       trivial=trivial, pair=[int(i), int(j)])

    attaining = (Attaining("two spins with zero fields: rho_01 = tanh(J/T) = tanh(Delta_01/(4T))", two_spin_ising, looseness=(1.0001, 1.0314)),)


@register
class Lemma6Softmax(GlauberTheorem):
    id = "glauber.lemma6.softmax"
    number = "Lemma 6 (proof: softmax Lipschitz estimate)"
    statement = ("for score vectors a, b and T > 0: TV(softmax(a/T), softmax(b/T)) <= tanh(osc(a-b)/(4T)) "
                 "<= osc(a-b)/(4T); attained for two symbols with a - b = (c, -c)")
    conventions = "TV is half L1; osc(w) = max w - min w."

    def strategy(self) -> st.SearchStrategy:
        return score_pairs()

    def regime(self, instance: Any) -> dict:
        return {"vocab": len(instance[0]), "temperature": instance[2]}

    def describe(self, instance: Any) -> Any:
        a, b, T = instance
        return {"a": a.tolist(), "b": b.tolist(), "temperature": T}

    def check(self, instance: Any) -> Verdict:
        a, b, T = instance
        tv = 0.5 * float(np.abs(softmax(a / T) - softmax(b / T)).sum())
        d = a - b
        osc = float(d.max() - d.min())
        tanh = float(tv_bound_from_oscillation(osc, T))
        atol = 10 * a.size * np.finfo(float).eps
        trivial = "a - b constant: both laws equal" if osc == 0 else None
        return verdict(Part("TV <= tanh(osc/(4T))", tv, tanh, "<=", atol, LOCAL_RTOL * tanh),
                       Part("tanh(osc/(4T)) <= osc/(4T)", tanh, osc / (4 * T), "<=", LOCAL_RTOL * tanh,
                            LOCAL_RTOL * osc / T), trivial=trivial)

    attaining = (Attaining("a = (0.6, 0), b = (0, 0.6), T = 1: TV = tanh(1.2/4) exactly",
                           lambda: (np.array([0.6, 0.0]), np.array([0.0, 0.6]), 1.0), looseness=(1.0001, 1.0299)),)


@register
class Cor7(GlauberTheorem):
    id = "glauber.cor7"
    number = "Corollary 7"
    statement = ("T > T* = (1/4) max_j sum_{i!=j} Delta_ij => rho(T) <= T*/T < 1 and t_mix(eps) <= "
                 "ceil(n log(n/eps) / (1 - T*/T)) (Theorem 5 with the oscillation bound)")
    conventions = "Delta with the oscillation and 1/(4T) (the sup-norm reading has threshold Delta^inf/2)."
    budget = 0.25

    def strategy(self) -> st.SearchStrategy:
        return contraction_instances(max_states=243, low=1.0, high=20.0, modes=("cor7",))

    def hypotheses(self, instance: S.Instance) -> Applicability:
        if not _positive(instance):
            return _positive(instance)
        t_star = contraction_temperature(score_oscillation(instance.source).delta_ij)
        return Applicability(instance.source.temperature > t_star, f"T <= T* = {t_star:.4g}")

    def check(self, instance: S.Instance) -> Verdict:
        influence, oscillation = influence_and_oscillation(instance.source)
        ratio = contraction_temperature(oscillation.delta_ij) / instance.source.temperature
        rho = influence.rho
        if ratio == 0:
            return verdict(Part("rho <= T*/T", rho, 0.0, "<=", 10 * instance.space.length * np.finfo(float).eps, 0.0),
                           trivial="Delta = 0: rho = 0 = T*/T (product conditionals)")
        n, eps = instance.space.length, instance.eps
        P = _kernel(instance)
        bound = math.ceil(n * math.log(n / eps) / (1 - ratio))
        mix = mixing_part("t_mix(eps) <= ceil(n log(n/eps)/(1 - T*/T))", P, eps, _pi(P), bound, "<=")
        return verdict(Part("rho <= T*/T", rho, ratio, "<=", 10 * n * np.finfo(float).eps, LOCAL_RTOL * ratio),
                       mix, bound=bound)

    attaining = (Attaining("two spins, J = 1, zero fields, T = 20 (T* = 1): rho = tanh(1/20) against T*/T = 1/20 "
                           "(a threshold (1/2) max_j sum_i Delta_ij would be 2x looser)",
                           lambda: two_spin_ising(1.0, 20.0), looseness=(1.0009, 2.5)),)
