"""Local quantities of a source of conditionals (paper G): influence coefficients rho_ij and score
oscillations Delta_ij, rectangle incompatibility R, margins and Theorem 8's escape bounds, and the one
report of paper G's constants, exact over all contexts or sampled over some.

Modules: :mod:`~mlmix.theory.local.influence`, :mod:`~mlmix.theory.local.rectangles`,
:mod:`~mlmix.theory.local.margins` and :mod:`~mlmix.theory.local.constants` (the report). The package
re-exports nothing.
"""

__all__: list[str] = []
