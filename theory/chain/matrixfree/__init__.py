"""The chain of a matrix-free kernel operator (:mod:`mlmix.theory.kernels.operators`): every question of
:class:`~mlmix.theory.chain.markov_chain.Chain` answered by operator applications alone (Krylov solves and
Lanczos on torch tensors, on one process or sharded), with the same names and certificates.
"""
