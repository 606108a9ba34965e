"""The chain of a matrix-free kernel operator (:mod:`mlmix.theory.kernels.operators`): every question of
:class:`~mlmix.theory.chain.markov_chain.Chain` answered by operator applications alone (Krylov solves and
Lanczos on torch tensors, on one process or sharded), with the same names and certificates.

The entry point is :class:`~mlmix.theory.chain.matrixfree.analysis.OperatorChain` (also ``mlmix.OperatorChain``);
:mod:`~mlmix.theory.chain.matrixfree.solves` holds the questions that need solves with P. The package
re-exports nothing.
"""

__all__: list[str] = []
