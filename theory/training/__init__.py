"""Paper P's training objects: Ising and Potts exponential families by enumeration, weighted
k-masked pseudolikelihood and its asymptotic variance, Poincaré and approximate-tensorization constants
of (adaptive) block dynamics, and the eq. (5) Ising model's modes.

Modules: :mod:`~mlmix.theory.training.exponential_family`, :mod:`~mlmix.theory.training.pseudolikelihood`,
:mod:`~mlmix.theory.training.block_poincare` and :mod:`~mlmix.theory.training.modes`. The package re-exports
nothing.
"""

__all__: list[str] = []
