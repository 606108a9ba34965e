"""Samplers as transition kernels of a source of conditionals: assembled CSR matrices when small
(random-scan Glauber, k-Gibbs and block dynamics, the independent parallel sampler), matrix-free
operators on the state tensor when large, and the one place that chooses between them by memory.

Modules: :mod:`~mlmix.theory.kernels.assembled` (CSR kernels), :mod:`~mlmix.theory.kernels.operators`
(matrix-free kernels), :mod:`~mlmix.theory.kernels.representation` (the choice by memory),
:mod:`~mlmix.theory.kernels.scan_and_mh` (scan orders, Metropolis-Hastings, truncation),
:mod:`~mlmix.theory.kernels.decoders` (laws of masked-diffusion and parallel decoders) and
:mod:`~mlmix.theory.kernels.support` (exact sign patterns). The package re-exports nothing; the kernels
users call are exported by :mod:`mlmix`.
"""

__all__: list[str] = []
