"""A finite Markov chain and every quantity of it, each returned with its method and accuracy:
``Chain`` (validate once, answer many questions), the stationary law, spectral gaps and Poincaré
constants, conductance, worst-start mixing, asymptotic variance and the Kemeny constant, hitting
probabilities and times, class structure, the matrix-free analysis, and the high-precision references
the accuracy table and the tests check against.
"""
