"""Theorem objects for paper P, *Promises and Pitfalls of Generative Masked Language Modeling*.

Every check enumerates V^n exactly (mlmix.theory.exponential_family, mlmix.theory.pseudolikelihood,
mlmix.theory.block_poincare, mlmix.theory.ising_modes).

Loewner-order checks (A <= B) use the smallest eigenvalue of the symmetrised difference,
normalised by the scale s = max(||A||_2, ||B||_2): the verdict compares lambda_min((B - A + (B - A)^T)/2) / s
with 0 at the absolute tolerance :data:`LOEWNER_RTOL` (1e-8), i.e. a relative tolerance of 1e-8 on the
matrices' norm. Instances whose Fisher information or pseudolikelihood Hessian has condition number
above :data:`MAX_INSTANCE_CONDITION` are reported as not applicable (near-singular), never inverted.

Finding (Prop 5). The statement is false for |C| = 2 with small J0: the proof's Hoeffding step needs
r = -1 + tanh(J0) |C| / 2 > 0, which fails for |C| = 2 (and |C| = 3 with tanh J0 <= 2/3). Minimal
counterexample (either pair convention): n = |C| = 2, h = (0.001, 0), J = 0.002 (J0 = 0.001),
delta = 2 e^{-c_stuck} (1 + 1e-6) = 0.7372, so T = 1; from x = (-1, -1) the exact probability of
staying is 0.2518 (ordered pairs; 0.2508 unordered) < 1 - delta = 0.2628.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from mlmix.theory.block_poincare import (
    block_poincare_constant,
    fibre_dirichlet_form,
    kernel_dirichlet_form,
    log_sobolev_upper_bound,
)
from mlmix.theory.exponential_family import (
    NearSingularError,
    condition_number,
    symmetric_eigenvalues,
)
from mlmix.theory.ising_modes import (
    assumption5,
    c_R1,
    c_stuck,
    clique_kernel,
    k_gibbs_visit_probabilities,
    mode_masks,
    parallel_stuck_probabilities,
    prop4_steps,
    prop5_steps,
)
from mlmix.theory.kernels import k_gibbs_kernel
from mlmix.theory.pseudolikelihood import (
    MaskDistribution,
    PseudoLikelihood,
    asymptotic_covariance,
)
from mlmix.theory.spectral import spectral_gap
from mlmix.verify.core import Applicability, Theorem, Verdict, compare, register
from mlmix.verify.pitfalls_strategies import (
    JointInstance,
    KInstance,
    ModesInstance,
    PLInstance,
    joint_instances,
    k_instances,
    modes_instances,
    pl_instances,
    stuck_instances,
)

PAPER = "gmlm-pitfalls"

#: Absolute tolerance on lambda_min(B - A) / max(||A||, ||B||) in Loewner checks.
LOEWNER_RTOL = 1e-8

#: Instances with a worse-conditioned Fisher information or PL Hessian are not applicable.
MAX_INSTANCE_CONDITION = 1e6


def loewner_margin(smaller: np.ndarray, larger: np.ndarray) -> tuple[float, float]:
    """(lambda_min of the symmetrised larger - smaller, divided by the scale; the scale
    max(||smaller||_2, ||larger||_2)). A <= B in Loewner order iff the margin is >= 0."""
    diff = symmetric_eigenvalues(np.asarray(larger) - np.asarray(smaller))[0]
    scale = max(np.linalg.norm(smaller, 2), np.linalg.norm(larger, 2), np.finfo(float).tiny)
    return float(diff / scale), float(scale)


def _well_conditioned(matrices: dict[str, np.ndarray]) -> Applicability:
    for name, M in matrices.items():
        cond = condition_number(M)
        if not cond <= MAX_INSTANCE_CONDITION:
            return Applicability(False, f"near-singular {name} (condition number {cond:.3g} > "
                                        f"{MAX_INSTANCE_CONDITION:.0e}); not inverted")
    return Applicability(True)


def _realizable_pl(inst: PLInstance) -> PseudoLikelihood:
    return PseudoLikelihood(inst.family, inst.masks, inst.family.probabilities(inst.theta))


class _PLTheorem(Theorem):
    paper = PAPER

    def describe(self, instance: Any) -> Any:
        return instance.describe()


class _InformationEquality(_PLTheorem):
    adaptive = False

    def strategy(self) -> st.SearchStrategy:
        return pl_instances(adaptive=self.adaptive)

    def hypotheses(self, instance: PLInstance) -> Applicability:
        return Applicability(True)  # realizable by construction; finite space: Assumption 1 holds

    def check(self, instance: PLInstance) -> Verdict:
        pl = _realizable_pl(instance)
        H = pl.hessian(instance.theta)
        V = pl.gradient_covariance(instance.theta)
        scale = max(np.linalg.norm(H, 2), np.finfo(float).tiny)
        rel = float(np.linalg.norm(H - V, 2) / scale)
        return compare(rel, 0.0, "==", rtol=1e-9, hessian_norm=scale)


@register
class Lemma2(_InformationEquality):
    id = "pitfalls.lemma2"
    number = "Lemma 2"
    statement = ("Generalized information matrix equality: at a realizable theta*, the Hessian of the weighted "
                 "PL loss equals Cov_{X~p, K~p_K}(grad log p_theta(X_K | X_{-K})). "
                 "Checked: ||H - Cov||_2 / ||H||_2 == 0.")


@register
class Lemma5(_InformationEquality):
    id = "pitfalls.lemma5"
    number = "Lemma 5"
    adaptive = True
    statement = ("Adaptive information matrix equality: with masks p_K(K|X), H(theta*) = "
                 "Cov_{(X,K)~p p_K}(grad log p_theta(X_K | X_{-K}, K)). Checked: ||H - Cov||_2 / ||H||_2 == 0.")


@register
class Theorem1(_PLTheorem):
    id = "pitfalls.thm1"
    number = "Theorem 1"
    statement = ("Masking more is statistically better: Gamma^{k+1}_PL <= Gamma^k_PL in Loewner order for "
                 "k-pseudolikelihood. Checked: lambda_min(Gamma^k - Gamma^{k+1}) / scale >= -1e-8.")

    def strategy(self) -> st.SearchStrategy:
        return k_instances()

    def _hessians(self, inst: KInstance) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for k in (inst.k, inst.k + 1):
            masks = MaskDistribution.k_subsets(inst.family.space, k)
            out.append(_realizable_pl(PLInstance(inst.family, inst.theta, masks)).hessian(inst.theta))
        return out[0], out[1]

    def hypotheses(self, instance: KInstance) -> Applicability:
        Hk, Hk1 = self._hessians(instance)
        return _well_conditioned({f"{instance.k}-PL Hessian": Hk, f"{instance.k + 1}-PL Hessian": Hk1})

    def check(self, instance: KInstance) -> Verdict:
        space = instance.family.space
        gk = asymptotic_covariance(instance.family, instance.theta, MaskDistribution.k_subsets(space, instance.k))
        gk1 = asymptotic_covariance(instance.family, instance.theta,
                                    MaskDistribution.k_subsets(space, instance.k + 1))
        margin, scale = loewner_margin(gk1.gamma, gk.gamma)
        return compare(margin, 0.0, ">=", rtol=LOEWNER_RTOL, scale=scale, trace_k=gk.trace, trace_k1=gk1.trace)


@register
class Theorem1MLE(_PLTheorem):
    id = "pitfalls.thm1.mle"
    number = "Theorem 1 (k = N)"
    statement = ("N-pseudolikelihood is maximum likelihood: Gamma^N_PL = I^{-1}. "
                 "Checked: ||Gamma^N - I^{-1}||_2 / ||I^{-1}||_2 == 0 (tolerance 1e-8).")

    def strategy(self) -> st.SearchStrategy:
        return k_instances()

    def hypotheses(self, instance: KInstance) -> Applicability:
        return _well_conditioned({"Fisher information": instance.family.fisher_information(instance.theta)})

    def check(self, instance: KInstance) -> Verdict:
        fam = instance.family
        full = MaskDistribution.k_subsets(fam.space, fam.space.length)
        gamma = asymptotic_covariance(fam, instance.theta, full).gamma
        inv_fisher = fam.inverse_fisher(instance.theta)
        scale = np.linalg.norm(inv_fisher, 2)
        return compare(float(np.linalg.norm(gamma - inv_fisher, 2) / scale), 0.0, "==", rtol=1e-8, scale=scale)


class _PoincareBound(_PLTheorem):
    adaptive = False

    def strategy(self) -> st.SearchStrategy:
        return pl_instances(adaptive=self.adaptive)

    def hypotheses(self, instance: PLInstance) -> Applicability:
        pl = _realizable_pl(instance)
        return _well_conditioned({"Fisher information": instance.family.fisher_information(instance.theta),
                                  "PL Hessian": pl.hessian(instance.theta)})

    def check(self, instance: PLInstance) -> Verdict:
        fam, theta = instance.family, instance.theta
        try:
            gamma = asymptotic_covariance(fam, theta, instance.masks).gamma
            inv_fisher = fam.inverse_fisher(theta)
        except NearSingularError as err:  # hypotheses() screens these; keep the report explicit
            return Verdict(False, float("nan"), 0.0, ">=", float("nan"), None, {"error": str(err)})
        C = block_poincare_constant(fam.model(theta), instance.masks)
        margin, scale = loewner_margin(gamma, C * inv_fisher)
        # smallest constant that works: lambda_max(I^{1/2} Gamma I^{1/2}) = lambda_max(Gamma I)
        needed = float(np.max(np.linalg.eigvals(gamma @ fam.fisher_information(theta)).real))
        return compare(margin, 0.0, ">=", rtol=LOEWNER_RTOL, tightness=C / needed if needed > 0 else None,
                       poincare_constant=C, needed_constant=needed, scale=scale)


@register
class Theorem2(_PoincareBound):
    id = "pitfalls.thm2"
    number = "Theorem 2"
    statement = ("If p_theta* satisfies a Poincaré inequality with constant C for the weighted block dynamics "
                 "with the same p_K, then Gamma_PL <= C I^{-1}. C is computed exactly from the block kernel; "
                 "checked: lambda_min(C I^{-1} - Gamma_PL) / scale >= -1e-8; tightness = C / smallest valid C.")


@register
class Theorem3(_PoincareBound):
    id = "pitfalls.thm3"
    number = "Theorem 3"
    adaptive = True
    statement = ("Adaptive masks: Gamma_PL <= C I^{-1} with C the Poincaré constant of the adaptively weighted "
                 "block dynamics (X-chain, reversible w.r.t. p_theta*). Same check as Theorem 2.")


@register
class Proposition1(_PLTheorem):
    id = "pitfalls.prop1"
    number = "Proposition 1"
    statement = ("Dirichlet form of adaptive weighted block dynamics: <f, (I - P) g>_{p p_K} for the pair chain "
                 "(C.23) equals E_{(X_{-K},K)}[Cov_{X_K | X_{-K},K}(f, g)], for f, g functions of (X, K).")

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(pl_instances(adaptive=True), st.integers(0, 2**16))

    def hypotheses(self, instance) -> Applicability:
        return Applicability(True)

    def describe(self, instance) -> Any:
        return {**instance[0].describe(), "fg_seed": instance[1]}

    def check(self, instance) -> Verdict:
        inst, seed = instance
        rng = np.random.default_rng(seed)
        shape = (inst.family.space.size, inst.masks.m)
        f, g = rng.normal(size=shape), rng.normal(size=shape)
        source = inst.family.model(inst.theta)
        lhs = kernel_dirichlet_form(source, inst.masks, f, g)
        rhs = fibre_dirichlet_form(source, inst.masks, f, g)
        return compare(lhs, rhs, "==", rtol=1e-9)


@register
class Proposition6(_PLTheorem):
    id = "pitfalls.prop6"
    number = "Proposition 6 (Theorem 4, step 1)"
    statement = ("KL(p_X || p_theta) <= C_AT(p_theta) E_{X,K} KL(p_X(.|X_{-K},K) || p_theta(.|X_{-K},K)). "
                 "C_AT is replaced by our upper bound (log-Sobolev via Diaconis & Saloff-Coste, or 1/w for a "
                 "full block), so a violation would mean that bound is wrong; tightness = rhs / lhs.")

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(pl_instances(with_data=True), pl_instances(adaptive=True, with_data=True))

    def hypotheses(self, instance: PLInstance) -> Applicability:
        if instance.data is None:
            return Applicability(False, "needs a data law p_X")
        return Applicability(True)

    def check(self, instance: PLInstance) -> Verdict:
        fam, theta = instance.family, instance.theta
        kl = fam.kl(instance.data, theta)
        excess = PseudoLikelihood(fam, instance.masks, instance.data).excess_loss(theta)
        upper, method = log_sobolev_upper_bound(fam.model(theta), instance.masks)
        rhs = upper * excess
        return compare(kl, rhs, "<=", tightness=rhs / kl if kl > 0 else None, c_at_upper=upper,
                       upper_method=method, excess=excess, ratio=kl / excess if excess > 0 else None)


class _ModesTheorem(Theorem):
    paper = PAPER

    def strategy(self) -> st.SearchStrategy:
        return modes_instances()

    def hypotheses(self, instance: ModesInstance) -> Applicability:
        a5 = assumption5(instance.spec)
        return Applicability(a5.holds, a5.reason)

    def describe(self, instance: Any) -> Any:
        return instance.describe()


@register
class Proposition4(_ModesTheorem):
    id = "pitfalls.prop4"
    number = "Proposition 4"
    statement = ("eq. (5) model under Assumption 5, k-Gibbs with k >= |C|: from any start, X_t visits R_1 for "
                 "some t in 1..T, T = ceil(log_{c_R1} delta), with probability >= 1 - delta. Checked exactly "
                 "(clique chain) at the worst start; tightness = delta / exact failure probability.")

    def check(self, instance: ModesInstance) -> Verdict:
        spec, k, delta = instance.spec, instance.k, instance.delta
        c = c_R1(spec, k)
        T = prop4_steps(c, delta)
        worst = float(k_gibbs_visit_probabilities(spec, k, T).min())
        one_step = float(np.asarray(clique_kernel(spec, "k-gibbs", k).todense())[:, -1].min())
        fail = 1.0 - worst
        return compare(worst, 1.0 - delta, ">=", tightness=delta / fail if fail > 0 else None, T=T, c_R1=c,
                       min_one_step=one_step, one_step_bound=1.0 - c)


@register
class Proposition5(_ModesTheorem):
    id = "pitfalls.prop5"
    number = "Proposition 5"
    statement = ("eq. (5) model under Assumption 5: the independent parallel sampler from x with sum_C x <= -2 "
                 "keeps sum_C X_t <= -2 for all t in 1..T, T = floor((delta/2) e^{c_stuck}), with probability "
                 ">= 1 - delta. Checked exactly (clique chain) at the worst start. FALSE for |C| = 2 and small J0 "
                 "(the proof's Hoeffding radius r = -1 + tanh(J0)|C|/2 must be positive).")

    refuted_in = "docs/theorems.md, Paper P, Proposition 5"

    def strategy(self) -> st.SearchStrategy:
        return stuck_instances()

    def check(self, instance: ModesInstance) -> Verdict:
        spec, delta = instance.spec, instance.delta
        c = c_stuck(spec)
        T = prop5_steps(c, delta)
        stay = parallel_stuck_probabilities(spec, T)
        worst = float(np.nanmin(stay))
        fail = 1.0 - worst
        return compare(worst, 1.0 - delta, ">=", tightness=delta / fail if fail > 0 else None, T=T, c_stuck=c,
                       hoeffding_radius=hoeffding_radius(spec))


def hoeffding_radius(spec) -> float:
    """r = -1 + tanh(J0) |C| / 2, the deviation the proof of Prop 5 feeds to Hoeffding's inequality."""
    return float(-1.0 + np.tanh(spec.J0) * spec.size / 2.0)


@register
class Proposition5Repaired(Proposition5):
    id = "pitfalls.prop5.repaired"
    number = "Proposition 5 (with r > 0)"
    statement = ("Proposition 5 with the hypothesis its proof uses made explicit: Assumption 5 and a positive "
                 "Hoeffding radius r = -1 + tanh(J0)|C|/2 (so |C| >= 3). Same exact check at the worst start.")
    refuted_in = None

    def hypotheses(self, instance: ModesInstance) -> Applicability:
        base = super().hypotheses(instance)
        if not base:
            return base
        r = hoeffding_radius(instance.spec)
        return Applicability(r > 0, "" if r > 0 else f"Hoeffding radius r = {r:.3g} <= 0")


@register
class Proposition8Modes(_ModesTheorem):
    id = "pitfalls.prop8.modes"
    number = "Proposition 8 (1)"
    statement = ("eq. (5) under Assumption 5: p(x) > p(y) > e^{2 J0} p(z) for x in R_1, y in R_-1, z elsewhere. "
                 "Checked by enumeration: min(log p(R_1) - max log p(R_-1), "
                 "min log p(R_-1) - max log p(rest) - 2 J0) >= 0.")

    def check(self, instance: ModesInstance) -> Verdict:
        spec = instance.spec
        log_p = spec.model().log_joint()
        R1, Rm1 = mode_masks(spec)
        rest = ~(R1 | Rm1)
        first = float(log_p[R1].min() - log_p[Rm1].max())
        second = float(log_p[Rm1].min() - log_p[rest].max() - 2 * spec.J0)
        return compare(min(first, second), 0.0, ">=", R1_over_Rm1=first, Rm1_over_rest_minus_2J0=second)


@register
class Proposition8Bijection(_ModesTheorem):
    id = "pitfalls.prop8.bijection"
    number = "Proposition 8 (2)"
    statement = ("eq. (5) under Assumption 5: f(x) = x with the clique set to -1 maps R_1 onto R_-1 and "
                 "p(x) = e^{2 h_G} p(f(x)). Checked: max |log p(x) - log p(f(x)) - 2 h_G| == 0.")

    def check(self, instance: ModesInstance) -> Verdict:
        spec = instance.spec
        model = spec.model()
        log_p = model.log_joint()
        R1, _ = mode_masks(spec)
        states = model.space.all_states()[R1]
        image = states.copy()
        image[:, list(spec.clique)] = 0
        gap = log_p[R1] - log_p[model.space.encode(image)] - 2 * spec.h_G
        return compare(float(np.abs(gap).max()), 0.0, "==", rtol=1e-9)


@register
class Proposition9(_PLTheorem):
    id = "pitfalls.prop9"
    number = "Proposition 9"
    statement = ("The weighted pseudolikelihood of an Ising (or Potts) model is convex in theta: Hessian PSD at "
                 "any theta and any data. Checked: lambda_min(H)/||H|| >= -1e-8 at a random theta, and "
                 "L((a+b)/2) <= (L(a) + L(b))/2 on a random segment (the verdict's sides).")

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(st.one_of(pl_instances(with_data=True, scale=2.0),
                                   pl_instances(adaptive=True, with_data=True, scale=2.0)),
                         st.integers(0, 2**16))

    def hypotheses(self, instance) -> Applicability:
        return Applicability(True)

    def describe(self, instance) -> Any:
        return {**instance[0].describe(), "segment_seed": instance[1]}

    def check(self, instance) -> Verdict:
        inst, seed = instance
        pl = PseudoLikelihood(inst.family, inst.masks, inst.data)
        rng = np.random.default_rng(seed)
        a = inst.theta
        b = a + rng.normal(scale=2.0, size=a.shape)
        H = pl.hessian(a)
        scale = max(np.linalg.norm(H, 2), np.finfo(float).tiny)
        margin = float(symmetric_eigenvalues(H)[0] / scale)
        mid = pl.loss((a + b) / 2)
        avg = (pl.loss(a) + pl.loss(b)) / 2
        verdict = compare(mid, avg, "<=", rtol=1e-12, hessian_margin=margin)
        if margin < -LOEWNER_RTOL:
            return replace(verdict, holds=False)
        return verdict


@register
class KGibbsSpeedup(Theorem):
    id = "pitfalls.kgibbs_speedup"
    paper = PAPER
    number = "Section 2.4 (Lee 2023)"
    statement = ("k-Gibbs mixes at least k times faster than 1-Gibbs: gap(k-Gibbs) >= k gap(1-Gibbs) for the "
                 "same joint (blocks uniform over k-subsets). tightness = gap_k / (k gap_1), the observed ratio.")

    def strategy(self) -> st.SearchStrategy:
        return joint_instances()

    def hypotheses(self, instance: JointInstance) -> Applicability:
        return Applicability(True)

    def describe(self, instance: JointInstance) -> Any:
        return instance.describe()

    def check(self, instance: JointInstance) -> Verdict:
        source, k = instance.source, instance.k
        pi = source.joint()
        gap1 = spectral_gap(k_gibbs_kernel(source, 1), pi)
        gapk = spectral_gap(k_gibbs_kernel(source, k), pi)
        return compare(gapk, k * gap1, ">=", tightness=gapk / (k * gap1), gap_1=gap1, gap_k=gapk)
