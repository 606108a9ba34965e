"""Samplers as transition kernels of a source of conditionals: assembled CSR matrices when small
(random-scan Glauber, k-Gibbs and block dynamics, the independent parallel sampler), matrix-free
operators on the state tensor when large, and the one place that chooses between them by memory.
"""
