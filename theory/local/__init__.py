"""Local quantities of a source of conditionals (paper G): influence coefficients rho_ij and score
oscillations Delta_ij, rectangle incompatibility R, margins and Theorem 8's escape bounds, and the one
report of paper G's constants, exact over all contexts or sampled over some.
"""
