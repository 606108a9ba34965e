"""Exact finite-state mathematics of the Markov chains induced by local conditionals on V^n.

Its rooms, each a sub-package, from the ground floor up (each imports only the ones below it):
:mod:`~mlmix.theory.linalg` (elimination, Krylov solvers, the operator type, sharding),
:mod:`~mlmix.theory.sources` (the conditionals interface and its sources), :mod:`~mlmix.theory.kernels` (each
sampler as a matrix or an operator), :mod:`~mlmix.theory.chain` (a chain and its quantities), then
:mod:`~mlmix.theory.local` (paper G's local constants) and :mod:`~mlmix.theory.training` (paper P's objects).
Beside them, :mod:`~mlmix.theory.results` (every number with its method and accuracy) and
:mod:`~mlmix.theory.reference` (high-precision references). The package re-exports nothing; the public
names are gathered in :mod:`mlmix`.
"""

__all__: list[str] = []
