"""Samplers as transition kernels of a source of conditionals: assembled CSR matrices when small
(random-scan Glauber, k-Gibbs and block dynamics, the independent parallel sampler), matrix-free
operators on the state tensor when large, and the one place that chooses between them by memory.

Every sampler is declared once: :data:`KERNELS` (Markov kernels) and :data:`DECODERS` (decoder laws),
:mod:`mlmix.theory.kernels.registry`.
"""

from mlmix.theory.kernels.decoders import DECODERS, DecoderSpec
from mlmix.theory.kernels.registry import KERNELS, KernelSpec

__all__ = ["DECODERS", "KERNELS", "DecoderSpec", "KernelSpec"]
