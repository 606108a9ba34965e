"""Matrix-free transition kernels: Glauber, k-Gibbs and block dynamics as operators on the state tensor.

A function f or a measure mu on V^n is a tensor of shape (|V|,)*n (axis i = site i; flattened in
C order it is the index order of :mod:`mlmix.theory.sources.space`). Every kernel here is a mixture of
*block moves*: pick block K with probability w_K, resample X_K from c_K( . | X_{-K}):

    P = sum_K w_K P_K,
    (P_K f)(x)   = sum_{v in V^K} c_K(v | x_{-K}) f(x^{K<-v})                 (functions)
    (mu P_K)(y)  = c_K(y_K | y_{-K}) sum_{v in V^K} mu(y^{K<-v})              (measures)

Glauber (paper G, section 3.2): K = {i}, w = 1/n, c = pi_i^T. Block dynamics and k-Gibbs (paper P,
Definitions 6 and 10): c_K(v | x_{-K}) = mu(x^{K<-v}) / mu(x_{-K}). All three directions below are

    out += a * broadcast_K( sum_{v in V^K} b_v * u_v )        ((a, b) = (1, c), (c, 1), (sqrt c, sqrt c)):

one reduction over the fibre and one broadcast update, O(|V|^n) work and no matrix. The third,
(sqrt c, sqrt c), is D^{1/2} P D^{-1/2} for a heat-bath kernel reversible with respect to mu: its
entries sqrt(mu(x) / mu(y)) P(x, y) = sqrt(c(x_K) c(y_K)), computed from the conditionals alone.

Where c_K comes from (computed once, stored in float64 or the requested dtype):

* Ising and Potts models: from their local factors, so c_i depends only on the neighbours of i and
  takes |V|^(deg i + 1) numbers;
* a :class:`~mlmix.theory.sources.conditionals.ScoreTable` (an MLM's tabulated conditionals): its table,
  n |V|^n numbers, |V| times fewer than the CSR non-zeros;
* any other compatible source (joint law): from log mu by a log-sum-exp over the block;
* any other source: tabulated once through :meth:`ScoreTable.from_conditionals`.

Numbers are torch tensors (CPU or CUDA, one code path). The state tensor may be sharded over
processes (:mod:`mlmix.theory.linalg.sharding`): then the first d sites are fixed per process and a
block that touches them sums its fibre with a group all-reduce.

Speed: a broadcast whose innermost contiguous run is short is slow, so blocks whose sites sit near
the end of the index order are applied in a second *rotated* layout (the last m sites first),
reached by one transpose of the vector; every coefficient tensor is stored contiguous in the
layout that uses it. On a CPU the moves of a layout are applied in *passes* of a few moves each
(:data:`_FUSE`), piece by piece (:data:`_PIECE`): a piece of u, of out and of the fibre sums stays in
cache while the pass's moves run over it, so an application moves about 8 N (3 p + 5) bytes through
main memory for p passes (:meth:`KernelOperator.application_traffic`) where one sweep per site
moved 8 N (4 n + 4). Only the order of the loops changes: the sums come out bit for bit the same.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from mlmix.errors import InputTypeError
from mlmix.theory.kernels.assembled import check_block_weights, check_blocks
from mlmix.theory.kernels.registry import DEFAULT_KERNEL, KERNELS, check_kernel_options
from mlmix.theory.kernels.representation import operator_kernel_names, operator_memory
from mlmix.theory.linalg.operator import FlowPairs, TransitionOperator
from mlmix.theory.linalg.sharding import LOCAL, Comm, local_range
from mlmix.theory.sources.conditionals import (
    Conditionals,
    GibbsModel,
    LogWeightTable,
)
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_memory

#: A broadcast runs at memory speed when its innermost contiguous run has at least this many entries.
_RUN = 1024

#: Fibres with more slices than this are summed by one reduction (a temporary of the vector's size)
#: instead of slice by slice.
_SLICES = 16

#: Block moves are applied in *passes*: consecutive moves of one layout whose sites together take at
#: most this many local assignments (6 sites of a binary vocabulary, 1 of 20 symbols) go over the
#: vector together, piece by piece, so u and out cross the memory bus once per pass instead of once
#: per move; on a GPU, and for moves that sum their fibre over processes, a pass is one move in one piece.
_FUSE = 64

#: Entries of u in one piece of a pass on the CPU (4 MB in float64): the piece's u, out and fibre sums
#: stay in cache while the pass's moves run over it.
_PIECE = 1 << 19

#: float32 is an explicit option: its results carry float32 rounding (about 1e-7 relative).
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def default_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# ------------------------------------------------------------------------------------------ log weights

def local_factors(source: Conditionals) -> list[tuple[tuple[int, ...], np.ndarray]] | None:
    """w(x) = sum_f table_f[x_{axes_f}] at T = 1 where the source declares such factors
    (:meth:`~mlmix.theory.sources.conditionals.Conditionals.local_factors`: Ising and Potts models), else None."""
    return source.local_factors()


def _broadcast_shape(n: int, q: int, axes: Sequence[int]) -> list[int]:
    return [q if a in axes else 1 for a in range(n)]


def _slice_shard(t: torch.Tensor, digits: Sequence[int]) -> torch.Tensor:
    """Fix the first d axes of a natural-order tensor at this process's digits (broadcast axes stay)."""
    index = tuple(slice(v, v + 1) if t.shape[a] > 1 else slice(None) for a, v in enumerate(digits))
    return t[index]


def log_joint_tensor(source: Conditionals, *, comm: Comm = LOCAL, device: torch.device | str = "cpu",
                     chunk: int = 1 << 18) -> tuple[torch.Tensor, float] | None:
    """log mu_T(x) (unnormalised, float64) over this process's states as a tensor of the local
    shape, and a bound on its absolute rounding error; None for a source without a joint law.

    Ising/Potts: sum of broadcast factors (no state enumeration); a log-weight table: its entries;
    another Gibbs model: ``log_weight`` on decoded chunks of ``chunk`` states.
    """
    space = source.space
    n, q = space.length, space.vocab_size
    T = source.temperature
    start, stop = local_range(comm, q, n)
    digits = comm.digits(q)
    d = len(digits)
    shape = (1,) * d + (q,) * (n - d)
    eps = float(np.finfo(np.float64).eps)
    factors = local_factors(source)
    if factors is not None:
        check_memory(8 * (stop - start), "the log-joint tensor")
        out = torch.zeros(shape, dtype=torch.float64, device=device)
        for axes, table in factors:
            t = torch.as_tensor(table, dtype=torch.float64, device=device).reshape(_broadcast_shape(n, q, axes))
            out += _slice_shard(t, digits)
        scale = sum(float(np.abs(tab).max()) for _, tab in factors) / T
        return out.div_(T), 4 * eps * (len(factors) + 1) * max(scale, 1.0)
    if isinstance(source, LogWeightTable):
        lw = torch.as_tensor(source.log_weights[start:stop] / T, device=device).reshape(shape)
        return lw, 4 * eps * max(float(np.abs(source.log_weights[np.isfinite(source.log_weights)]).max()) / T, 1.0)
    if not source.has_joint:
        return None
    if not isinstance(source, GibbsModel):  # a joint law without log_weight: read it whole
        lw = source.log_joint()
        if lw is None:
            return None
        out = torch.as_tensor(np.asarray(lw)[start:stop], device=device).reshape(shape)
        return out, 4 * eps * max(float(np.abs(lw[np.isfinite(lw)]).max()), 1.0)
    check_memory(8 * (stop - start), "the log-joint tensor")
    out = np.empty(stop - start)
    for s in range(start, stop, chunk):
        idx = np.arange(s, min(s + chunk, stop), dtype=np.int64)
        out[s - start:s - start + idx.size] = source.log_weight(space.decode(idx)) / T
    finite = out[np.isfinite(out)]
    err = 64 * eps * max(float(np.abs(finite).max()) if finite.size else 1.0, 1.0)
    return torch.as_tensor(out, device=device).reshape(shape), err


# ------------------------------------------------------------------------------------------ layouts

@dataclass(frozen=True)
class _Layout:
    """Storage order of the local state tensor: ``perm`` lists the sites from most to least significant."""

    perm: tuple[int, ...]
    sizes: tuple[int, ...]  # local size of each site (1 at a sharded site), natural order

    def run_after(self, sites: Sequence[int]) -> int:
        """Entries stored after the innermost of ``sites``: the contiguous run a block move on them sees."""
        last = max(self.perm.index(s) for s in sites)
        return math.prod(self.sizes[a] for a in self.perm[last + 1:])


@dataclass
class _Plan:
    """How block K is applied in its layout: merged view shapes and the slices of its fibre."""

    layout: int
    shape: tuple[int, ...]        # u / out (local entries, merged dims)
    coef_shape: tuple[int, ...]   # the coefficient (1 on broadcast dims)
    fibre: list[tuple[slice, ...]]  # one index per local assignment of the block
    coef_perm: tuple[int, ...]    # natural axes -> storage order
    coef_expand: tuple[int, ...]  # natural-order sizes after materialising trailing axes
    full: frozenset[int]          # the local sites along which the stored coefficient varies


def _merged(layout: _Layout, kind) -> tuple[list[int], list]:
    """The layout's local sites (sharded ones dropped), consecutive sites of equal ``kind(site)``
    merged into one dim: (sizes, kinds) of the dims."""
    dims: list[list] = []
    for a in layout.perm:
        if layout.sizes[a] == 1:
            continue
        k = kind(a)
        if dims and dims[-1][1] == k:
            dims[-1][0] *= layout.sizes[a]
        else:
            dims.append([layout.sizes[a], k])
    return [d[0] for d in dims], [d[1] for d in dims]


def _fibre(shape: Sequence[int], in_block: Sequence[bool]) -> list[tuple[slice, ...]]:
    """One index per assignment of the block's dims (whole slices elsewhere)."""
    ranges = [range(s) if b else [None] for s, b in zip(shape, in_block)]
    return [tuple(slice(v, v + 1) if v is not None else slice(None) for v in combo)
            for combo in itertools.product(*ranges)]


def _plan(layout_id: int, layout: _Layout, block: Sequence[int], coef_sites: set[int]) -> _Plan:
    sizes = layout.sizes
    perm = [a for a in layout.perm if sizes[a] > 1]  # sharded sites are fixed: drop them
    full = {a for a in coef_sites if sizes[a] > 1} | {a for a in block if sizes[a] > 1}
    # materialise the coefficient along trailing sites until its innermost run is long enough
    run, pos = 1, len(perm) - 1
    while pos >= 0 and perm[pos] not in full:
        run *= sizes[perm[pos]]
        pos -= 1
    if run < _RUN:
        run, pos = 1, len(perm) - 1
        while pos >= 0 and run < _RUN and perm[pos] not in block:
            full.add(perm[pos])
            run *= sizes[perm[pos]]
            pos -= 1
    shape, kinds = _merged(layout, lambda a: (a in block, a in full))
    coef_shape = tuple(s if kind[1] else 1 for s, kind in zip(shape, kinds))
    natural_full = tuple(sizes[a] if a in full else 1 for a in range(len(sizes)))
    return _Plan(layout_id, tuple(shape), coef_shape, _fibre(shape, [kind[0] for kind in kinds]), layout.perm,
                 natural_full, frozenset(full))


def _cuts(shape: Sequence[int], whole: set[int], target: int) -> list[tuple[slice, ...]]:
    """``shape`` cut into pieces of about ``target`` entries that keep the dims ``whole`` whole: the
    innermost dims whole, the next one in ranges, the outer ones index by index."""
    nd = len(shape)
    per: list[list[slice]] = [[slice(None)] for _ in range(nd)]
    size, d = math.prod(shape[e] for e in whole), nd - 1
    while d >= 0 and (d in whole or size * shape[d] <= target):
        size *= 1 if d in whole else shape[d]
        d -= 1
    for e in range(d, -1, -1):
        if e not in whole:
            step = max(1, target // size) if e == d else 1
            per[e] = [slice(s, min(s + step, shape[e])) for s in range(0, shape[e], step)]
    return list(itertools.product(*per))


@dataclass
class _Block:
    sites: tuple[int, ...]
    weight: float
    sharded: tuple[int, ...]            # sites of the block that are split over processes
    plan: _Plan
    wcond: torch.Tensor                 # w_K c_K in the plan's coefficient shape
    sqrt_pair: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)  # (w sqrt c, sqrt c)


@dataclass
class _Member:
    """One block move of a pass, in the pass's merged dims."""

    block: _Block
    coef_shape: tuple[int, ...]
    block_dims: tuple[int, ...]
    fibre: list[tuple[slice, ...]]


@dataclass
class _Pass:
    """Block moves applied together piece by piece (see :data:`_FUSE`): the merged ``shape`` of u and
    out, the members, and for each piece its slices and, per member, the coefficient's slices, the
    shape and size of its fibre sum (slices None: a single piece, the whole view)."""

    shape: tuple[int, ...]
    members: list[_Member]
    pieces: list[tuple[tuple[slice, ...] | None, list[tuple[tuple[slice, ...] | None, tuple[int, ...], int]]]]
    g_numel: int
    coefficients: dict[str, list] = field(default_factory=dict, repr=False)  # per mode: (a, b) per member


def _pass(layout: _Layout, blocks: list[_Block], target: int) -> _Pass:
    shape, kinds = _merged(layout, lambda a: tuple((a in b.sites, a in b.plan.full) for b in blocks))
    members = []
    for m, blk in enumerate(blocks):
        in_block = [k[m][0] for k in kinds]
        members.append(_Member(blk, tuple(s if k[m][1] else 1 for s, k in zip(shape, kinds)),
                               tuple(d for d, b in enumerate(in_block) if b), _fibre(shape, in_block)))
    pieces = []
    cuts = _cuts(shape, {d for m in members for d in m.block_dims}, target)
    for cut in cuts:
        extent = [len(range(*c.indices(s))) for c, s in zip(cut, shape)]
        per = []
        for m in members:
            g_shape = tuple(1 if e in m.block_dims else x for e, x in enumerate(extent))
            coef = tuple(c if m.coef_shape[e] > 1 else slice(None) for e, c in enumerate(cut))
            per.append((None if len(cuts) == 1 else coef, g_shape, math.prod(g_shape)))
        pieces.append((None if len(cuts) == 1 else cut, per))  # None: the whole view, no slicing
    g_numel = max(numel for _, per in pieces for _, _, numel in per)
    return _Pass(tuple(shape), members, pieces, g_numel)


# ------------------------------------------------------------------------------------------ the operator

class KernelOperator(TransitionOperator):
    """A transition kernel P on V^n as a matrix-free operator (see the module docstring), the
    :class:`~mlmix.theory.linalg.operator.TransitionOperator` of a sampler on a source.

    Vectors are flat tensors (or numpy arrays) over this process's states in index order.
    ``reversible``: P is reversible with respect to the source's joint law (a compatible source);
    then :attr:`log_joint` holds log mu_T (unnormalised) and its rounding-error bound.
    """

    def __init__(self, space: StateSpace, blocks: list[tuple[int, ...]], weights: np.ndarray,
                 log_conds: list[torch.Tensor], *, description: str, reversible: bool,
                 log_joint: tuple[torch.Tensor, float] | None, device: torch.device, dtype: torch.dtype,
                 comm: Comm, source_kind: str) -> None:
        self.space = space
        self.description = description
        self.reversible = reversible
        self.log_joint = log_joint
        self.device = device
        self.dtype = dtype
        self.comm = comm
        self.source_kind = source_kind
        q, n = space.vocab_size, space.length
        self.digits = comm.digits(q)
        self.n_sharded = len(self.digits)
        self.local_size = q ** (n - self.n_sharded)
        self.n_states = space.size
        sizes = tuple(1 if a < self.n_sharded else q for a in range(n))
        m, run = 0, 1
        while m < n - self.n_sharded and run < _RUN:
            run *= q
            m += 1
        self._rot = m
        self._layouts = [_Layout(tuple(range(n)), sizes),
                         _Layout(tuple(range(n - m, n)) + tuple(range(n - m)), sizes)]
        self.blocks: list[_Block] = []
        for K, w, logc in zip(blocks, weights, log_conds):
            if w == 0:
                continue
            runs = [lay.run_after(K) for lay in self._layouts]
            lid = 0 if runs[0] >= min(_RUN, self.local_size) or runs[0] >= runs[1] else 1
            coef_sites = {a for a in range(n) if logc.shape[a] > 1}
            plan = _plan(lid, self._layouts[lid], K, coef_sites)
            cond = (logc.exp().mul_(float(w)).permute(plan.coef_perm)
                    .expand([plan.coef_expand[a] for a in plan.coef_perm]).contiguous().reshape(plan.coef_shape))
            self.blocks.append(_Block(tuple(K), float(w), tuple(a for a in K if a < self.n_sharded), plan,
                                      cond.to(dtype)))
        self._uses_rotation = any(b.plan.layout == 1 for b in self.blocks)
        self._passes: list[list[_Pass]] = [self._group(lid) for lid in (0, 1)]
        self._buffers: dict[str, torch.Tensor] = {}

    # ---------------------------------------------------------------- layouts
    def _rotate(self, u: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Natural order -> rotated layout (the last m sites first), into ``out`` (a new tensor if
        None). On a CPU a vector larger than the cache is copied 32 rows at a time (25% faster)."""
        inner = self.space.vocab_size ** self._rot
        out = torch.empty_like(u) if out is None else out
        src, dst = u.view(-1, inner), out.view(inner, -1)
        step = 32 if u.device.type == "cpu" and u.numel() > 8 * _PIECE else src.shape[0]
        for r in range(0, src.shape[0], step):
            dst[:, r:r + step].copy_(src[r:r + step].T)
        return out

    # ---------------------------------------------------------------- application
    @staticmethod
    def _coefficient(blk: _Block, mode: str) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(a, b) of 'out += a * broadcast(sum_v b_v u_v)', the block weight folded into one of them."""
        if mode == "functions":
            return None, blk.wcond
        if mode == "measures":
            return blk.wcond, None
        if blk.sqrt_pair is None:
            root = blk.wcond.sqrt()
            blk.sqrt_pair = (root * math.sqrt(blk.weight), root / math.sqrt(blk.weight))
        return blk.sqrt_pair

    def _buffer(self, name: str, numel: int) -> torch.Tensor:
        """A work buffer kept between applications (fresh allocations of this size page-fault)."""
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < numel or buf.dtype != self.dtype:
            buf = self._buffers[name] = torch.empty(numel, dtype=self.dtype, device=self.device)
        return buf[:numel]

    def _group(self, layout: int) -> list[_Pass]:
        """The layout's block moves in passes (:data:`_FUSE`), in order, with pieces of :data:`_PIECE` on
        a CPU when the vector is larger than one piece (else one move per pass, one piece)."""
        lay, q = self._layouts[layout], self.space.vocab_size
        cpu = self.device.type == "cpu" and self.local_size > _PIECE  # a smaller vector is one piece: no gain
        groups: list[list[_Block]] = []
        for blk in (b for b in self.blocks if b.plan.layout == layout):
            # a group never holds a sharded move, so all its sites are local
            if (cpu and groups and not blk.sharded and not groups[-1][0].sharded
                    and q ** len(set(blk.sites).union(*(b.sites for b in groups[-1]))) <= _FUSE):
                groups[-1].append(blk)
            else:
                groups.append([blk])
        return [_pass(lay, g, _PIECE if cpu and not g[0].sharded else self.local_size) for g in groups]

    def _accumulate(self, u: torch.Tensor, out: torch.Tensor, layout: int, mode: str) -> None:
        q = self.space.vocab_size
        for ps in self._passes[layout]:
            uv, ov = u.view(ps.shape), out.view(ps.shape)
            coefs = ps.coefficients.get(mode)
            if coefs is None:
                coefs = ps.coefficients[mode] = [
                    tuple(None if c is None else c.view(m.coef_shape) for c in self._coefficient(m.block, mode))
                    for m in ps.members]
            buf = self._buffer("fibre", ps.g_numel)
            for cut, per in ps.pieces:
                uc, oc = (uv, ov) if cut is None else (uv[cut], ov[cut])
                for m, (a, b), (coef, g_shape, g_numel) in zip(ps.members, coefs, per):
                    bc = b if b is None or coef is None else b[coef]
                    g = buf[:g_numel].view(g_shape)
                    if len(m.fibre) > _SLICES:  # a large fibre: one reduction over the block's dims
                        torch.sum(uc if bc is None else uc * bc, dim=m.block_dims, keepdim=True, out=g)
                    else:
                        for j, idx in enumerate(m.fibre):
                            if bc is None:
                                g.copy_(uc[idx]) if j == 0 else g.add_(uc[idx])
                            elif j == 0:
                                torch.mul(uc[idx], bc[idx], out=g)
                            else:
                                g.addcmul_(uc[idx], bc[idx])
                    self.comm.group_allreduce_(g, m.block.sharded, q)
                    if a is None:
                        oc.add_(g)
                    else:
                        oc.addcmul_(a if coef is None else a[coef], g)

    def apply(self, u: torch.Tensor, mode: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """The operator on a local float tensor (no checks): ``mode`` 'functions' (P u), 'measures'
        (u P) or 'symmetric' (D^{1/2} P D^{-1/2} u), written into ``out`` when given."""
        out = torch.empty_like(u) if out is None else out
        if self._uses_rotation:  # rotated blocks first: their sum is copied back (a plain transposed copy)
            u1 = self._rotate(u, self._buffer("rotated_in", u.numel()))
            out1 = self._buffer("rotated_out", u.numel()).zero_()
            self._accumulate(u1, out1, 1, mode)
            inner = self.space.vocab_size ** self._rot
            out.view(-1, inner).copy_(out1.view(inner, -1).T)
        else:
            out.zero_()
        self._accumulate(u, out, 0, mode)
        return out

    # ---------------------------------------------------------------- pairs of states one move apart
    def fibre_pairs(self, pi: torch.Tensor, data: Sequence[torch.Tensor]) -> FlowPairs:
        """The flows of every block move, slice by slice of the fibres: for each block K, each
        assignment v of its local sites (x = the states of that slice) and each other assignment v'
        (y = x^{K<-v'}), the flow w_K pi(x) c_K(y_K | x_{-K}) as its two factors (pi(x), w_K c_K,
        to be multiplied: broadcast views, no temporary) and the values of ``data`` (local
        natural-order vectors) at x and at y. A fibre of more than :data:`_SLICES` slices yields all
        its y at once (y = x included, broadcast along the fibre: its terms vanish in every use here,
        differences, cut crossings, S x S^c). The flows of a pair x != y add up to pi(x) P(x, y);
        a pair is yielded on the process holding x."""
        q = self.space.vocab_size
        views = {0: (pi, list(data))}
        if self._uses_rotation:
            views[1] = (self._rotate(pi), [self._rotate(t) for t in data])
        for blk in self.blocks:
            plan = blk.plan
            p_l, data_l = views[plan.layout]
            pv = p_l.view(plan.shape)
            dv = [t.view(plan.shape) for t in data_l]
            theirs = [self.comm.group_all_gather(t, blk.sharded, q) for t in [blk.wcond, *dv]]
            mine = tuple(self.digits[a] for a in blk.sharded)
            partners = itertools.product(range(q), repeat=len(blk.sharded))
            whole = len(plan.fibre) > _SLICES
            for r, partner in enumerate(partners):  # the fibre's processes (just this one when K is local)
                cond_t, data_t = theirs[0][r], [t[r] for t in theirs[1:]]
                for src in plan.fibre:
                    if whole:
                        yield pv[src], cond_t, [t[src] for t in dv], data_t
                        continue
                    for dst in plan.fibre:
                        if dst is not src or partner != mine:
                            yield pv[src], cond_t[dst], [t[src] for t in dv], [t[dst] for t in data_t]

    def trace(self) -> float:
        """tr P = N sum_K w_K |V|^-|K| (exact for a heat-bath kernel: a block's conditionals sum to 1
        over its values, so each block move's diagonal sums to the number of contexts N / |V|^|K|)."""
        q = self.space.vocab_size
        return self.n_states * sum(b.weight * q ** -len(b.sites) for b in self.blocks)

    @property
    def terms(self) -> int:
        """sum_K |V|^|K|: the products one entry of P v sums (the blocks and their fibres)."""
        return sum(self.space.vocab_size ** len(b.sites) for b in self.blocks)

    @property
    def lambda_min(self) -> float:
        """0 for a reversible heat-bath kernel (an average of conditional expectations, positive
        semi-definite in L^2(pi)), else -1."""
        return 0.0 if self.reversible else -1.0

    def conditionals_positive(self) -> bool:
        """Every stored conditional is > 0 (none underflowed), on every process."""
        low = torch.tensor(min(float(b.wcond.min()) for b in self.blocks), dtype=torch.float64, device=self.device)
        return float(self.comm.allreduce_(low, "min")) > 0

    # ---------------------------------------------------------------- memory
    def coefficient_bytes(self) -> int:
        """Bytes held by the conditional tensors (their square roots double it once used)."""
        return sum(b.wcond.numel() * b.wcond.element_size() for b in self.blocks)

    def application_traffic(self) -> int:
        """Bytes one application moves through main memory when every piece stays in cache: u read
        and out read and written once per pass (p passes), plus, with the rotated layout, u copied in,
        its sum zeroed and copied back: vector_bytes x (3 p + 5) (x (3 p + 1) without rotation, the
        one zeroing of out). The coefficients (small next to a vector) are not counted."""
        passes = sum(len(lay) for lay in self._passes)
        return self.vector_bytes() * (3 * passes + (5 if self._uses_rotation else 1))

    def vector_bytes(self) -> int:
        """Bytes of one local vector."""
        return self.local_size * torch.finfo(self.dtype).bits // 8

    def __repr__(self) -> str:
        procs = "" if self.comm.world_size == 1 else f", {self.comm.world_size} processes"
        return (f"<KernelOperator {self.description}: {self.n_states} states, {len(self.blocks)} block moves, "
                f"{self.dtype}, {self.device}{procs}>")


# ------------------------------------------------------------------------------------------ constructors

def _site_log_conditional_from_factors(factors, i: int, n: int, q: int, T: float) -> torch.Tensor:
    deps = {i}
    for axes, _ in factors:
        if i in axes:
            deps.update(axes)
    score = torch.zeros(_broadcast_shape(n, q, deps), dtype=torch.float64)
    for axes, table in factors:
        if i in axes:
            score = score + torch.as_tensor(table, dtype=torch.float64).reshape(_broadcast_shape(n, q, axes))
    score = score.expand(_broadcast_shape(n, q, deps | {i}))
    return torch.log_softmax(score / T, dim=i)


def _table_log_conditionals(table: np.ndarray, i: int, n: int, q: int, T: float) -> torch.Tensor:
    t = torch.as_tensor(table[i], dtype=torch.float64).reshape((q,) * (n - 1) + (q,))
    return torch.log_softmax(torch.movedim(t, -1, i) / T, dim=i)


def _block_log_conditional(log_mu: torch.Tensor, K: Sequence[int], n_sharded: int, q: int, comm: Comm) -> torch.Tensor:
    """log c_K = log mu - log sum_{v in V^K} mu(x^{K<-v}) (a group reduction over sharded sites of K)."""
    local = [a for a in K if a >= n_sharded]
    sharded = [a for a in K if a < n_sharded]
    m = log_mu.amax(dim=local, keepdim=True) if local else log_mu.clone()
    comm.group_allreduce_(m, sharded, q, op="max")
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    s = (log_mu - m).exp()
    s = s.sum(dim=local, keepdim=True) if local else s
    comm.group_allreduce_(s, sharded, q)
    return log_mu - (m + s.log())


def kernel_operator(source: Conditionals, kernel: str = DEFAULT_KERNEL, k: int = 2, *,
                    blocks: Sequence[Sequence[int]] | None = None, weights: Sequence[float] | None = None,
                    device: torch.device | str | None = None, dtype: torch.dtype | str = torch.float64,
                    comm: Comm = LOCAL, vectors: int = 20) -> KernelOperator:
    """The kernel of ``source`` as a :class:`KernelOperator`.

    ``kernel``: a registry kernel with an operator (its entry's ``blocks``, each redrawn with the same
    probability: 'glauber', paper G sec. 3.2, the n sites; 'k-gibbs', paper P Def. 10, all k-subsets),
    or 'block' (:data:`~mlmix.theory.kernels.representation.BLOCK_KERNEL`, paper P Def. 6, with ``blocks``
    and ``weights``). A single-site heat-bath kernel (its entry's ``single_site_heat_bath``) takes the
    source's conditionals; block kernels need a compatible source (a joint law). ``dtype`` float64 for exact work; 'float32' is an explicit option whose
    results carry float32 rounding. The memory for ``vectors`` state vectors plus the conditionals
    is checked before anything is allocated (:func:`mlmix.validation.check_memory`).
    """
    space = source.space
    n, q = space.length, space.vocab_size
    if kernel not in operator_kernel_names():
        raise ValueError(f"kernel must be one of {operator_kernel_names()}, got {kernel!r}")
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
        dtype = DTYPES[dtype]
    if dtype not in DTYPES.values():
        raise TypeError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    device = torch.device(device) if device is not None else default_device()
    spec = KERNELS.get(kernel)
    single_site = spec is not None and spec.single_site_heat_bath
    if spec is not None:
        check_kernel_options(space, kernel, k=k)
        block_list = spec.blocks(n, k)
        w = np.full(len(block_list), 1.0 / len(block_list))
    else:
        if blocks is None:
            raise ValueError("kernel 'block' needs blocks")
        block_list = check_blocks(space, blocks)
        w = check_block_weights(weights, len(block_list))
    factors = local_factors(source)
    needed = operator_memory(space, kernel, k, local_source=factors is not None and single_site,
                             table_source=source.has_table or factors is None, vectors=vectors,
                             dtype=dtype, world_size=comm.world_size)
    check_memory(needed, f"the matrix-free {kernel} analysis of {q}^{n} states")
    digits = comm.digits(q)
    joint = log_joint_tensor(source, comm=comm, device=device)
    T = source.temperature
    if single_site and factors is not None:
        log_conds = [_slice_shard(_site_log_conditional_from_factors(factors, i, n, q, T), digits).to(device)
                     for i in range(n)]
        kind = "local conditionals from the model's factors"
    elif single_site and joint is None:
        table = source.score_table().table
        log_conds = [_slice_shard(_table_log_conditionals(table, i, n, q, T), digits).to(device) for i in range(n)]
        kind = "conditionals table (n |V|^(n-1) contexts, tabulated once)"
    else:
        if joint is None:
            raise InputTypeError(f"{type(source).__name__} has no joint law; block dynamics needs a compatible source "
                                 "(GibbsModel, IsingModel, PottsModel, LogWeightTable)")
        log_conds = [_block_log_conditional(joint[0], K, len(digits), q, comm) for K in block_list]
        kind = "conditionals from the joint law (log-sum-exp over each block)"
    # the entry's title without "(block) dynamics": "Glauber", "2-Gibbs"
    description = ("block dynamics" if spec is None else
                   spec.title(source, {"k": k}).removesuffix(" dynamics").removesuffix(" block"))
    return KernelOperator(space, block_list, w, log_conds, description=f"{description} ({kind})",
                          reversible=joint is not None, log_joint=joint, device=device, dtype=dtype, comm=comm,
                          source_kind=kind)
