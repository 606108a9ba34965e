"""A finite Markov chain and every quantity of it, each returned with its method and accuracy:
``Chain`` (validate once, answer many questions), the stationary law, spectral gaps and Poincaré
constants, conductance, worst-start mixing, asymptotic variance and the Kemeny constant, hitting
probabilities and times, class structure, the matrix-free analysis, and the high-precision references
the accuracy table and the tests check against.

The entry point is :class:`~mlmix.theory.chain.markov_chain.Chain` (also ``mlmix.Chain``); one module per
quantity beside it, and the matrix-free chain in :mod:`~mlmix.theory.chain.matrixfree`. The package
re-exports nothing.
"""

__all__: list[str] = []
