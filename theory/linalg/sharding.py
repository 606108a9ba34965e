"""Sharding the state tensor over processes with ``torch.distributed`` (NCCL on GPUs, gloo on CPU).

With W = |V|^d processes, process r holds the states whose first d symbols are the base-|V|
digits of r: the contiguous slice [r N / W, (r + 1) N / W) of the state vector in the index order
of :mod:`mlmix.theory.sources.space`. A block move K of a matrix-free kernel
(:mod:`mlmix.theory.kernels.operators`) that touches none of the first d sites is local; one that touches
a set A of them sums over its fibre across the |V|^|A| processes that differ only in the digits of
A (an all-reduce within that group). Inner products are local dot products plus one all-reduce.
So the operator and the Krylov solvers (:mod:`mlmix.theory.linalg.krylov`) run unchanged on one process
(:data:`LOCAL`) or on many (:class:`DistributedComm`); see ``docs/distributed.md`` for
launching with ``torchrun``.
"""

from __future__ import annotations

import os
from typing import Sequence

import torch
import torch.distributed as dist

from mlmix.validation import check_int


class Comm:
    """A single process: every collective is the identity (the base of :class:`DistributedComm`)."""

    world_size: int = 1
    rank: int = 0

    def shard_sites(self, vocab_size: int) -> int:
        """d with world_size = vocab_size^d: the number of leading sites split over the processes."""
        d, size = 0, 1
        while size < self.world_size:
            size *= vocab_size
            d += 1
        if size != self.world_size:
            raise ValueError(f"{self.world_size} processes cannot shard V^n with |V| = {vocab_size}: "
                             f"the number of processes must be a power of |V|")
        return d

    def digits(self, vocab_size: int) -> tuple[int, ...]:
        """This process's symbols at the d sharded sites (site 0 first)."""
        d = self.shard_sites(vocab_size)
        return tuple((self.rank // vocab_size ** (d - 1 - a)) % vocab_size for a in range(d))

    def allreduce_(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` in place over all processes (op: 'sum', 'max' or 'min')."""
        return tensor

    def group_allreduce_(self, tensor: torch.Tensor, axes: Sequence[int], vocab_size: int,
                         op: str = "sum") -> torch.Tensor:
        """Reduce in place over the processes that differ from this one only at the sharded sites ``axes``."""
        return tensor

    def group_all_gather(self, tensor: torch.Tensor, axes: Sequence[int], vocab_size: int) -> list[torch.Tensor]:
        """The tensors of the processes that differ from this one only at the sharded sites ``axes``,
        ordered lexicographically by their digits there (this process's own tensor included)."""
        return [tensor]

    def all_gather_cat(self, tensor: torch.Tensor) -> torch.Tensor:
        """Concatenation of every process's ``tensor`` (equal shapes), in rank order."""
        return tensor

    def broadcast_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Overwrite ``tensor`` with rank 0's copy."""
        return tensor


#: The single-process communicator.
LOCAL = Comm()

_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN"}


class DistributedComm(Comm):
    """The default ``torch.distributed`` process group (initialise it first, e.g. with
    :func:`init_from_environment` under ``torchrun``). Sub-groups for fibre sums are created on
    first use; every process runs the same code, so they are created in the same order everywhere."""

    def __init__(self) -> None:

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised: launch with torchrun and call "
                               "mlmix.theory.linalg.sharding.init_from_environment() first")
        self._dist = dist
        self.world_size = dist.get_world_size()
        self.rank = dist.get_rank()
        self._groups: dict[tuple[int, tuple[int, ...]], object] = {}

    def _op(self, op: str):
        return getattr(self._dist.ReduceOp, _OPS[op])

    def _group(self, axes: Sequence[int], vocab_size: int):
        key = (vocab_size, tuple(sorted(axes)))
        if key not in self._groups:
            d = self.shard_sites(vocab_size)
            members: dict[tuple[int, ...], list[int]] = {}
            for r in range(self.world_size):
                digits = [(r // vocab_size ** (d - 1 - a)) % vocab_size for a in range(d)]
                members.setdefault(tuple(v for a, v in enumerate(digits) if a not in key[1]), []).append(r)
            groups = sorted(members.values())
            mine, _ = self._dist.new_subgroups_by_enumeration(groups)
            self._groups[key] = mine
        return self._groups[key]

    def allreduce_(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        self._dist.all_reduce(tensor, op=self._op(op))
        return tensor

    def group_allreduce_(self, tensor: torch.Tensor, axes: Sequence[int], vocab_size: int,
                         op: str = "sum") -> torch.Tensor:
        if axes:
            self._dist.all_reduce(tensor, op=self._op(op), group=self._group(axes, vocab_size))
        return tensor

    def group_all_gather(self, tensor: torch.Tensor, axes: Sequence[int], vocab_size: int) -> list[torch.Tensor]:
        if not axes:
            return [tensor]
        group = self._group(axes, vocab_size)
        out = [torch.empty_like(tensor) for _ in range(vocab_size ** len(axes))]
        self._dist.all_gather(out, tensor.contiguous(), group=group)
        return out

    def all_gather_cat(self, tensor: torch.Tensor) -> torch.Tensor:
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        self._dist.all_gather(out, tensor.contiguous())
        return torch.cat(out)

    def broadcast_(self, tensor: torch.Tensor) -> torch.Tensor:
        self._dist.broadcast(tensor, src=0)
        return tensor


def init_from_environment(backend: str | None = None) -> DistributedComm:
    """Initialise the default process group from torchrun's environment (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT; LOCAL_RANK picks the GPU) and return its communicator. ``backend``
    defaults to 'nccl' when CUDA is available, else 'gloo'."""

    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            raise RuntimeError(f"environment variable {var} is not set: launch with torchrun")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(check_int(int(os.environ.get("LOCAL_RANK", "0")), "LOCAL_RANK", minimum=0))
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return DistributedComm()


def local_range(comm: Comm, vocab_size: int, length: int) -> tuple[int, int]:
    """[start, stop) of the global state indices this process holds."""
    d = comm.shard_sites(vocab_size)
    if d > length:
        raise ValueError(f"{comm.world_size} processes exceed the |V|^n = {vocab_size}^{length} states")
    per = vocab_size ** (length - d)
    return comm.rank * per, (comm.rank + 1) * per


