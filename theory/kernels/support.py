"""The exact sign pattern of a sampler's kernel: which transitions are positive in exact arithmetic.

A transition probability built from conditionals (a product or sum of them) is positive exactly when
the conditionals it is made of are, i.e. when their logarithms are > -inf; its float value may still
underflow to 0 (a conditional of exp(-800)). The communicating classes of a chain are a property of
this pattern, so :class:`~mlmix.theory.chain.markov_chain.Chain` takes its structure from it
(:mod:`mlmix.theory.chain.structure`), never from the float entries.

Each kernel's pattern is built next to the kernel, in its own module, and declared in its registry entry
(:data:`~mlmix.theory.kernels.registry.KERNELS`, field ``support``); the built-in ones
(:mod:`mlmix.theory.kernels.assembled` and :mod:`mlmix.theory.kernels.scan_and_mh`):

* glauber: x -> x^{i<-a} iff log p_i(a | x_{-i}) > -inf; x -> x iff log p_i(x_i | x_{-i}) > -inf for some i;
* k-gibbs: x -> y (y_{-K} = x_{-K}, K a block) iff log mu(y) > -inf;
* parallel: x -> y iff log p_i(y_i | x_{-i}) > -inf at every site i;
* systematic: the Boolean product of the heat-bath patterns in the sweep order;
* mh: x -> x^{i<-a} iff min(log p_i(a | x_{-i}), E(x) - E(x^{i<-a}) + log p_i(x_i | x_{-i})) > -inf;
  the diagonal is that of the float kernel (1 - the row's moves).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from mlmix.theory.kernels.registry import resolve_kernel
from mlmix.theory.sources.conditionals import Conditionals


def kernel_support(source: Conditionals, kernel: str, **options: Any) -> sp.csr_array:
    """The Boolean pattern (N, N) of the transitions of ``kernel`` on ``source`` that are positive in
    exact arithmetic (module doc), from the log-conditionals (or the log joint) being > -inf: the
    registry entry's own builder (:attr:`~mlmix.theory.kernels.registry.KernelSpec.support`), with
    ``options`` resolved as ``Chain.from_source`` resolves them (None: the default; options the kernel
    does not take are dropped). A registered kernel without a support builder: the non-zero pattern of
    its float matrix, since nothing finer is known of it (an entry that underflowed to 0 is then missing).
    ValueError (one line) for an unknown kernel."""
    spec, _, resolved = resolve_kernel(kernel, **options)
    if spec.support is not None:
        return sp.csr_array(spec.support(source, **resolved), dtype=bool)
    return sp.csr_array(sp.csr_array(spec.build_csr(source, **resolved)) != 0)


def kernel_log_offdiagonal(source: Conditionals, kernel: str, **options: Any) -> np.ndarray | None:
    """log P(x, y) for x != y, dense (N, N) with -inf off the support, for the kernels whose off-diagonal
    entries are one conditional each (their registry entry's ``log_offdiagonal``, e.g. Glauber and
    Metropolis-Hastings, :func:`~mlmix.theory.kernels.scan_and_mh.single_site_log_offdiagonal`), with
    ``options`` resolved as ``Chain.from_source`` resolves them; None for the other kernels (their entries
    are sums of products of conditionals). ValueError (one line) for an unknown kernel."""
    spec, _, resolved = resolve_kernel(kernel, **options)
    return None if spec.log_offdiagonal is None else spec.log_offdiagonal(source, **resolved)
