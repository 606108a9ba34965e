"""How a chain is held, by the memory each way needs: a dense matrix, a CSR matrix, or the
matrix-free operator of :mod:`mlmix.theory.kernels.operators`.

Estimates are made before anything is allocated and compared with the memory limit in force
(:func:`mlmix.validation.current_memory_limit`, ``--max-memory`` on the CLI). This module does not
import torch, so choosing the dense or sparse route never loads it.
"""

from __future__ import annotations

import sys
from typing import Any

from mlmix.limits import SPARSE_AUTO_LIMIT
from mlmix.theory.kernels.registry import DEFAULT_KERNEL, KERNELS, operator_kernels, resolve_kernel
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import current_memory_limit, format_bytes

#: Weighted block dynamics (paper P Def. 6, blocks and weights given): a matrix-free operator only.
BLOCK_KERNEL = "block"


def operator_kernel_names() -> tuple[str, ...]:
    """Kernels available as matrix-free operators: those of the registry with an operator builder
    (:data:`~mlmix.theory.kernels.registry.KERNELS`, read at each call) and weighted block dynamics
    (:data:`BLOCK_KERNEL`)."""
    return (*operator_kernels(), BLOCK_KERNEL)

#: How a chain can be held ('auto' chooses).
REPRESENTATIONS = ("auto", "dense", "sparse", "operator")


def _itemsize(dtype: Any) -> int:
    return 4 if "32" in str(dtype) else 8


def operator_memory(space: StateSpace, kernel: str = DEFAULT_KERNEL, k: int = 2, *, local_source: bool = False,
                    table_source: bool = False, vectors: int = 20, dtype: Any = "float64",
                    world_size: int = 1) -> int:
    """Estimated bytes per process of a matrix-free analysis: ``vectors`` state vectors (the Lanczos
    basis of 16, the stationary law, work space) plus the stored conditionals, |V|^n numbers for each
    block the kernel redraws (its registry entry's ``blocks``: n for Glauber, C(n, k) for k-Gibbs; n for
    :data:`BLOCK_KERNEL`), none for a ``local_source`` (|V|^(deg+1) per site for Ising/Potts,
    negligible), plus the float64 table of a ``table_source`` while it is converted."""
    N = space.size // world_size
    spec = KERNELS.get(kernel)
    blocks = space.length if spec is None or spec.blocks is None else len(spec.blocks(space.length, k))
    coef = 0 if local_source else blocks * N
    table = 8 * space.length * N if table_source else 0
    return int(_itemsize(dtype) * (vectors * N + coef) + table)


def csr_memory(space: StateSpace, kernel: str = DEFAULT_KERNEL, k: int = 2) -> int:
    """Estimated peak bytes of the CSR route: building the kernel (24 bytes per non-zero, as
    :func:`mlmix.theory.kernels.assembled.glauber_kernel` checks) or analysing it (the matrix, 12 bytes per
    non-zero, plus a Lanczos workspace of 3 nnz + 30 N numbers), whichever is larger. The non-zeros are
    the registry entry's ``nnz`` (N (n (|V| - 1) + 1) for the single-site kernels, C(n, k) N |V|^k for
    k-Gibbs), N^2 for an entry without one."""
    N = space.size
    spec, _, options = resolve_kernel(kernel, k=k)
    nnz = N * N if spec.nnz is None else spec.nnz(space, **options)
    return int(max(24 * nnz, 12 * nnz + 8 * (3 * nnz + 30 * N)))


def choose_representation(space: StateSpace, kernel: str = DEFAULT_KERNEL, k: int = 2, requested: str = "auto",
                          dense_limit: int = 4096) -> tuple[str, str]:
    """('dense' | 'sparse' | 'operator', why). 'auto': dense up to ``dense_limit`` states; the CSR
    matrix up to :data:`SPARSE_AUTO_LIMIT` states while :func:`csr_memory` fits the memory limit in
    force; the matrix-free operator beyond. The independent parallel sampler is dense only."""
    if requested not in REPRESENTATIONS:
        raise ValueError(f"representation must be one of {REPRESENTATIONS}, got {requested!r}")
    N = space.size
    if kernel not in operator_kernel_names():
        if requested == "operator":
            raise ValueError(f"no matrix-free operator for kernel {kernel!r} (only {', '.join(operator_kernel_names())})")
        return ("dense" if requested == "auto" else requested), f"the {kernel} kernel is held as a matrix"
    if requested != "auto":
        return requested, "requested"
    if N <= dense_limit:
        return "dense", f"{N} states <= the dense limit {dense_limit}"
    if N > SPARSE_AUTO_LIMIT:
        return "operator", f"{N} states > {SPARSE_AUTO_LIMIT}: matrix-free (representation='sparse' keeps the CSR matrix)"
    need, limit = csr_memory(space, kernel, k), current_memory_limit()
    if need <= limit:
        return "sparse", f"the CSR kernel and its analysis need about {format_bytes(need)} <= {format_bytes(limit)}"
    return "operator", (f"the CSR kernel would need about {format_bytes(need)} > the memory limit "
                        f"{format_bytes(limit)}: matrix-free")


def is_operator(P: Any) -> bool:
    """Whether ``P`` is a matrix-free transition operator
    (:class:`~mlmix.theory.linalg.operator.TransitionOperator`: a
    :class:`~mlmix.theory.kernels.operators.KernelOperator` or a
    :class:`~mlmix.theory.linalg.matrix_operator.MatrixOperator`) rather than a matrix, without importing
    torch: one exists only once its module is loaded."""
    operators = sys.modules.get("mlmix.theory.linalg.operator")
    return operators is not None and isinstance(P, operators.TransitionOperator)
