"""Samplers as transition kernels of a source of conditionals: assembled CSR matrices when small
(random-scan Glauber, k-Gibbs and block dynamics, the independent parallel sampler), matrix-free
operators on the state tensor when large, and the one place that chooses between them by memory.

Modules: :mod:`~mlmix.theory.kernels.assembled` (CSR kernels), :mod:`~mlmix.theory.kernels.operators`
(matrix-free kernels), :mod:`~mlmix.theory.kernels.representation` (the choice by memory),
:mod:`~mlmix.theory.kernels.registry` (:data:`KERNELS`, every Markov kernel declared once),
:mod:`~mlmix.theory.kernels.scan_and_mh` (scan orders, Metropolis-Hastings, truncation),
:mod:`~mlmix.theory.kernels.decoders` (laws of masked-diffusion and parallel decoders, :data:`DECODERS`) and
:mod:`~mlmix.theory.kernels.support` (exact sign patterns). The package exports the two
registries; the kernels users call are exported by :mod:`mlmix`.
"""

from mlmix.theory.kernels.decoders import DECODERS, DecoderSpec
from mlmix.theory.kernels.registry import KERNELS, KernelSpec

__all__ = ["DECODERS", "KERNELS", "DecoderSpec", "KernelSpec"]
