"""Theorem objects for paper P, *Promises and Pitfalls of Generative Masked Language Modeling*
(numbering of the PDF, ``seeds/004_...txt``).

Every check enumerates V^n exactly (mlmix.theory.training.exponential_family, mlmix.theory.training.pseudolikelihood,
mlmix.theory.training.block_poincare, mlmix.theory.training.modes), or the exact law of the random quantity of a
probability bound (:mod:`mlmix.verify.exact_laws`).

Loewner-order statements A <= B (B positive definite) are checked in their scalar form
lambda_max(B^{-1/2} A B^{-1/2}) <= 1 (generalised symmetric eigenproblem), so that scaling the
bound matrix by 1/2 is scaling the right-hand side: Theorem 2's Gamma_PL <= C I^{-1} reads
lambda_max(Gamma_PL I) <= C, the smallest valid constant against the Poincaré constant. Instances
whose Fisher information or pseudolikelihood Hessian has condition number above
:data:`MAX_INSTANCE_CONDITION` are reported as not applicable (near-singular), never inverted.
Identities compare two independent computations entry by entry.

Probability bounds "X < r with probability >= 1 - delta" are checked as q_delta < r with q_delta the
exact upper delta-quantile of X (:func:`mlmix.verify.exact_laws.upper_quantile`).

Modules, in the paper's order (importing this package registers their results in that order):
:mod:`~mlmix.verify.theorems.pitfalls.estimation` (pseudolikelihood statistics and the steps of Theorem 4),
:mod:`~mlmix.verify.theorems.pitfalls.concentration` (the probability inequalities of Theorem 4's proof),
:mod:`~mlmix.verify.theorems.pitfalls.parallel_decoding` (section 2.4) and
:mod:`~mlmix.verify.theorems.pitfalls.unchecked_results` (the results not checked numerically);
:mod:`~mlmix.verify.theorems.pitfalls.pitfalls_base` holds what they share.
"""

# The paper's order is the registration order, which `mlmix verify` keeps.
# isort: off
from mlmix.verify.theorems.pitfalls import estimation
from mlmix.verify.theorems.pitfalls import concentration
from mlmix.verify.theorems.pitfalls import parallel_decoding
from mlmix.verify.theorems.pitfalls import unchecked_results
from mlmix.verify.theorems.pitfalls import pitfalls_base
# isort: on

__all__ = ["concentration", "estimation", "parallel_decoding", "pitfalls_base", "unchecked_results"]
