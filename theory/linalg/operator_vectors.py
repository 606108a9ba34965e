"""Vectors over the states of a matrix-free transition operator
(:class:`~mlmix.theory.linalg.operator.TransitionOperator`: a sampler's kernel or an assembled matrix),
on one process or sharded, and the rounding of one application of the kernel.

Sharded vectors: process r holds the states r L .. (r + 1) L - 1 (L = ``op.local_size``, the leading sites
sharded); arguments over all states are cut to this process's part (:func:`local_part`), results
gathered in rank order (:func:`gathered`), sums and extrema reduced over the processes
(:func:`global_total`).

Rounding: one application of P (or of P^T) to a non-negative vector v sums at most
k = ``op.terms`` + 8 non-negative products per entry (for a kernel sum_K |V|^|K|, the blocks K and their
fibres; the 8 cover the rounding of the stored coefficients w_K c_K), so |fl(P v) - P v| <= gamma_k P v, gamma_k = 2 k u / (1 - k u)
(:func:`rounding`); for a signed v, P |v| takes the place of P v.
"""

from __future__ import annotations

import numpy as np
import torch

from mlmix.theory.linalg.operator import TransitionOperator

#: Relative residual the matrix-free solves (hitting times, committors, the Poisson equation) are driven to.
SOLVE_RTOL = 1e-13

#: Operator applications a solve may use.
MAX_MATVECS = 20_000

#: splitmix64 constants of :func:`hash_uniform`.
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64
_MIX1 = -4658895280553007687    # 0xBF58476D1CE4E5B9
_MIX2 = -7723592293110705685    # 0x94D049BB133111EB


def rounding(op: TransitionOperator) -> float:
    """gamma_k of one application of ``op`` (module docstring)."""
    k = op.terms + 8
    unit = float(torch.finfo(op.dtype).eps) / 2
    return 2 * k * unit / (1 - k * unit)


def as_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).cpu().numpy()


def as_tensor(op: TransitionOperator, v: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(v, device=op.device).to(op.dtype)


def local_part(op: TransitionOperator, v: np.ndarray) -> torch.Tensor:
    """This process's part of a vector over all states (all of it on one process)."""
    start = op.comm.rank * op.local_size
    return torch.as_tensor(np.asarray(v)[start:start + op.local_size], device=op.device)


def gathered(op: TransitionOperator, t: torch.Tensor) -> np.ndarray:
    """A sharded vector over all states, on every process."""
    return as_numpy(op.comm.all_gather_cat(t.contiguous()))


def global_total(op: TransitionOperator, t: torch.Tensor, how: str = "sum") -> float:
    """sum (or max, min) over all states of a sharded vector (this process's part ``t``)."""
    part = t.sum(dtype=torch.float64) if how == "sum" else (t.max() if how == "max" else t.min()).double()
    return float(op.comm.allreduce_(part, how))


def _shr(z: torch.Tensor, s: int, out: torch.Tensor) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic), written into ``out``."""
    return torch.bitwise_right_shift(z, s, out=out).bitwise_and_((1 << (64 - s)) - 1)


def hash_uniform(start: int, stop: int, seed: int, device: torch.device) -> torch.Tensor:
    """Uniform numbers in [0, 1) from the global state index (splitmix64): the same vector however
    the states are sharded over processes."""
    offset = torch.tensor(seed, dtype=torch.int64, device=device) * _MIX1  # int64 products wrap around
    z = torch.arange(start, stop, dtype=torch.int64, device=device).mul_(_GOLDEN).add_(offset)
    t = torch.empty_like(z)  # in place: fresh vectors of this size cost their page faults
    for shift, mix in ((30, _MIX1), (27, _MIX2), (31, None)):
        z.bitwise_xor_(_shr(z, shift, t))
        if mix is not None:
            z.mul_(mix)
    return _shr(z, 11, t).to(torch.float64).mul_(2.0**-53)
