"""Paper G (Mixing Times of Glauber Dynamics on Masked Language Models): every result as a
checkable theorem object whose check can fail.

Each check computes both sides of every inequality exactly on an instance of at most 729 states
(81 for the Wasserstein linear programmes of Theorem 5): transition matrices from
:mod:`mlmix.theory.kernels.assembled`, stationary laws by GTH elimination or detailed balance (entrywise
relative accuracy), exact worst-start TV mixing times, local quantities from
:mod:`mlmix.theory.local.influence`, :mod:`mlmix.theory.local.rectangles` and :mod:`mlmix.theory.local.margins`.
Identities compare two independent computations (the kernel against the conditionals, the
stationary law of the chain against a closed-form joint, Kolmogorov cycle ratios against the
rectangle statistic), so that scaling one side by 2 makes the check fail. Rational instances
(positive integer weights at T = 1) are also certified in exact sympy arithmetic.

The paper's appendix restates four results under other numbers (Prop. 9 = Prop. 1,
Thm 10 = Thm 5, Lemma 11 = Lemma 6, Thm 12 = Thm 8); the ``number`` of each object names both.

Modules, in the paper's order (importing this package registers their results in that order):
:mod:`~mlmix.verify.theorems.glauber.stationarity` (sections 3-4: Propositions 1 and 4, Corollary 2,
Theorem 3), :mod:`~mlmix.verify.theorems.glauber.contraction` (Theorem 5, Lemma 6, Corollary 7),
:mod:`~mlmix.verify.theorems.glauber.metastability` (Theorem 8) and
:mod:`~mlmix.verify.theorems.glauber.count_statistic` (section 5.4); :mod:`~mlmix.verify.theorems.glauber.glauber_base`
holds what they share.
"""

# The paper's order is the registration order, which `mlmix verify` keeps.
# isort: off
from mlmix.verify.theorems.glauber import stationarity
from mlmix.verify.theorems.glauber import contraction
from mlmix.verify.theorems.glauber import metastability
from mlmix.verify.theorems.glauber import count_statistic
from mlmix.verify.theorems.glauber import glauber_base
# isort: on

__all__ = ["contraction", "count_statistic", "glauber_base", "metastability", "stationarity"]
