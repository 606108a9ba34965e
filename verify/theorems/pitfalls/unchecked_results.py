"""Paper P's results that are not checked numerically, each with the reason and the results that
cover it."""

from __future__ import annotations

from mlmix.verify.theorems.pitfalls.pitfalls_base import PAPER
from mlmix.verify.verdicts import (
    not_checkable,
)

# ----------------------------------------------------------------------------------------------
# Results that are not checked numerically (with the reason and what covers them)

not_checkable(
    "pitfalls.lemma1", PAPER, "Lemma 1",
    "asymptotic normality of the weighted MPLE: sqrt(m)(theta_hat - theta*) -> N(0, Gamma_PL), Gamma_PL = "
    "H^{-1} Cov(grad l) H^{-1}",
    "a limit in distribution as m -> infinity; its finite-sample consequence m E||theta_hat - theta*||^2 ~ Tr Gamma_PL is "
    "compared in the L.6 reproduction (docs/pseudolikelihood.md) and Gamma_PL itself is exact in Theorems 1-3. "
    "Its prose consequence 'with probability >= 0.99, ||theta_hat - theta*||^2 <= Tr(Gamma)/m' is checked on the limit "
    "law and is false (pitfalls.lemma1.erratum)",
    ("pitfalls.lemma1.erratum", "pitfalls.thm1", "pitfalls.thm2", "pitfalls.lemma2"))
not_checkable(
    "pitfalls.lemma11", PAPER, "Lemma 11 (van der Vaart Thm 5.23)",
    "M-estimator asymptotic normality under Lipschitz losses, a positive definite Hessian and a uniform law of large "
    "numbers",
    "a cited asymptotic theorem (the regularity conditions, not a finite quantity); see Lemma 1", ("pitfalls.lemma2",))
not_checkable(
    "pitfalls.thm4", PAPER, "Theorem 4 (final bound)",
    "with probability >= 1 - delta, TV(p_theta_hat, p_X) < sqrt((1/2) C_AT(p_theta_hat)(L_hat(theta_hat) + B ln(1/beta) + "
    "eps)) + C, B = sqrt(2^{3N}|Omega|^N C_eps/(m delta)) + sqrt(ln(8 C_eps/delta)/(2n)), C = sqrt(|Omega|^{3N}/(8 delta n))",
    "not vacuous in general: n is the sample size, and C < 1 once n > |Omega|^{3N}/(8 delta) (N = 2, |Omega| = 2, "
    "delta = 0.1: n > 80). It is below 1 (the largest TV) only when also sqrt(C_AT B ln(1/beta)/2) < 1 - C, which needs "
    "m > 2^{3N} |Omega|^N C_eps (C_AT ln(1/beta))^2 / (4 delta (1 - C)^4) masks per sequence (N = 2, |Theta| = 27, "
    "C_AT = 2 as for a product law under 1-PL, beta = 1/2, C = 1/4: m > 1.0e5). A Monte Carlo check over data sets with a finite Theta and "
    "our certified upper bound on C_AT is possible but not implemented; on realizable data such m and n make the "
    "argmin over a finite Theta equal theta* in most data sets (TV = 0: a check that cannot fail), and a failing "
    "instance would need misspecified data. Each step is checked: Prop 6, Pinsker, Prop 7, Hoeffding (Lemma 6), "
    "Lemma 8",
    ("pitfalls.prop6", "pitfalls.thm4.pinsker", "pitfalls.prop7", "pitfalls.lemma6", "pitfalls.lemma8"))
not_checkable(
    "pitfalls.cor2", PAPER, "Corollary 2",
    "uniform over theta: Corollary 1 with delta / C_eps(Theta) and a union bound over an eps-cover (Assumption 4), plus eps",
    "needs the covering number C_eps(Theta) of a continuous parameter set (Assumption 4); for a finite Theta it is "
    "Corollary 1 at delta / |Theta| with a union bound", ("pitfalls.cor1", "pitfalls.lemma7"))
not_checkable(
    "pitfalls.prop2", PAPER, "Proposition 2",
    "(informal) Transformers of sufficient depth and width implement any number of transitions of any deterministic "
    "Markov chain on Omega^N",
    "a statement about Transformer expressivity (via Lemma 10), not about a finite quantity")
not_checkable(
    "pitfalls.lemma9", PAPER, "Lemma 9 (Yun et al. 2020)",
    "Transformers are universal approximators of continuous sequence-to-sequence functions in L^p",
    "a cited approximation theorem about network classes")
not_checkable(
    "pitfalls.lemma10", PAPER, "Lemma 10 (Liu et al. 2023)",
    "Transformers simulate automata (parallel solution) with depth O(log T)",
    "a cited expressivity theorem about network classes")
