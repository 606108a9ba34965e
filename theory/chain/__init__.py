"""A finite Markov chain and every quantity of it, each returned with its method and accuracy:
``Chain`` (validate once, answer many questions) on a dense matrix, a CSR matrix or a matrix-free
kernel, and one module per quantity, each choosing its algorithm for the representation in one place:
the stationary law, spectral gaps and Poincaré constants, conductance, worst-start mixing, asymptotic
variance and the Kemeny constant, hitting probabilities and times, class structure.

The entry point is :class:`~mlmix.theory.chain.markov_chain.Chain` (also ``mlmix.Chain``);
:mod:`~mlmix.theory.chain.operator_chain` holds the matrix-free report of ``mlmix exact --distributed``.
The high-precision references the accuracy table and the tests check against are in
:mod:`mlmix.theory.reference`. The package re-exports nothing.
"""

__all__: list[str] = []
