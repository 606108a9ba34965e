"""Paper P's training objects: Ising and Potts exponential families by enumeration, weighted
k-masked pseudolikelihood and its asymptotic variance, Poincaré and approximate-tensorization constants
of (adaptive) block dynamics, and the eq. (5) Ising model's modes.
"""
