"""Exact transition matrices of the samplers studied in papers G and P, as scipy CSR arrays.

All kernels act on V^n indexed as in :mod:`mlmix.theory.sources.space`. Dense conversion, where faster, is the
job of the chain algorithms (:data:`mlmix.limits.DENSE_LIMIT`), not of the constructors.
"""

from __future__ import annotations

from itertools import combinations
from math import comb
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp
from scipy.special import log_softmax, softmax

from mlmix.errors import InputTypeError
from mlmix.limits import DEFAULT_MAX_STATES
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_memory


def _zero_digit_states(space: StateSpace, sites: Sequence[int]) -> np.ndarray:
    """Indices of the states whose symbols at ``sites`` are all 0 (the block's base states)."""
    idx = np.arange(space.size, dtype=np.int64)
    keep = np.ones(space.size, dtype=bool)
    for s in sites:
        keep &= (idx // int(space.place_values[s])) % space.vocab_size == 0
    return idx[keep]


def block_fibres(space: StateSpace, block: Sequence[int]) -> np.ndarray:
    """The fibres of block K: row r lists the |V|^|K| states that agree off K with the r-th state
    whose symbols on K are all 0, i.e. {x : x_{-K} fixed}; shape (|V|^(n-|K|), |V|^|K|)."""
    return _zero_digit_states(space, block)[:, None] + _block_offsets(space, block)


def _block_offsets(space: StateSpace, sites: Sequence[int]) -> np.ndarray:
    """Index offsets of every assignment of V^K to the block K = ``sites`` (first site most significant)."""
    offsets = np.zeros(1, dtype=np.int64)
    for s in sites:
        offsets = (offsets[:, None] + int(space.place_values[s]) * np.arange(space.vocab_size)).ravel()
    return offsets


def glauber_kernel(source: Conditionals, max_states: int = DEFAULT_MAX_STATES) -> sp.csr_array:
    """Random-scan Glauber kernel (paper G, section 3.2):

        P_T(x, y) = (1/n) sum_i 1[y_{-i} = x_{-i}] pi_i^T(y_i | x_{-i}).

    Each site's conditionals are queried once per context x_{-i} (|V|^(n-1) queries per site).
    The CSR arrays are written in place: row x holds its n(|V|-1) single-site moves, then the
    diagonal P_T(x, x) = (1/n) sum_i pi_i^T(x_i | x_{-i}); indices are int32 when they fit, so
    4^10 states take about 12 bytes per stored entry (~0.4 GB) with small temporaries.
    """
    space = source.space
    space.check_size(max_states)
    n, q, N = space.length, space.vocab_size, space.size
    width = n * (q - 1) + 1
    check_memory(24.0 * N * width, f"the Glauber kernel on {q}^{n} states ({N * width} non-zeros)")
    index_dtype = np.int32 if N * width < 2**31 else np.int64
    indices = np.empty((N, width), dtype=index_dtype)
    data = np.empty((N, width))
    diagonal = np.zeros(N)
    for i in range(n):
        base = _zero_digit_states(space, [i])
        probs = np.exp(source.log_conditionals(space.decode(base), i)) / n  # (N/q, q)
        members = base[:, None] + int(space.place_values[i]) * np.arange(q)  # (N/q, q): the fibre of each base
        cols = slice(i * (q - 1), (i + 1) * (q - 1))
        for a in range(q):  # rows x with x_i = a move to the other q - 1 members of their fibre
            others = np.delete(np.arange(q), a)
            indices[members[:, a], cols] = members[:, others]
            data[members[:, a], cols] = probs[:, others]
            diagonal[members[:, a]] += probs[:, a]
    indices[:, -1] = np.arange(N)
    data[:, -1] = diagonal
    indptr = np.arange(0, N * width + 1, width, dtype=index_dtype)
    P = sp.csr_array((data.ravel(), indices.ravel(), indptr), shape=(N, N))
    P.sort_indices()
    return P


def boolean_pattern(size: int, rows: list, cols: list) -> sp.csr_array:
    """The Boolean (size, size) CSR pattern with True at every (rows[j], cols[j]) (index arrays, concatenated;
    duplicates merged): the form of a kernel's exact support (:mod:`mlmix.theory.kernels.support`)."""
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    G = sp.csr_array((np.ones(r.size, dtype=bool), (r, c)), shape=(size, size))
    G.sum_duplicates()
    return G


def fibre_pairs(members: np.ndarray, live: np.ndarray, q: int) -> tuple[list, list]:
    """([rows], [cols]): every x of a fibre (a row of ``members``, (m, q)) to every member y of it with
    ``live`` (m, q) True, i.e. the pairs {(x, y): y_{-K} = x_{-K}, live(y)} of a heat-bath update of K."""
    m = members.shape[0]
    to = np.broadcast_to(members[:, None, :], (m, q, q))
    frm = np.broadcast_to(members[:, :, None], (m, q, q))
    ok = np.broadcast_to(live[:, None, :], (m, q, q))
    return [frm[ok]], [to[ok]]


def glauber_support(source: Conditionals) -> sp.csr_array:
    """The exact support of :func:`glauber_kernel`: x -> x^{i<-a} iff log p_i(a | x_{-i}) > -inf for some
    site i (x -> x iff log p_i(x_i | x_{-i}) > -inf for some i), however small the float entry."""
    space = source.space
    rows, cols = [], []
    for i in range(space.length):
        members = block_fibres(space, [i])
        live = np.isfinite(source.log_conditionals(space.decode(members[:, 0]), i))
        r, c = fibre_pairs(members, live, space.vocab_size)
        rows += r
        cols += c
    return boolean_pattern(space.size, rows, cols)


def _assemble(size: int, rows: list, cols: list, vals: list) -> sp.csr_array:
    P = sp.coo_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size)).tocsr()
    P.sum_duplicates()
    return P


def check_blocks(space: StateSpace, blocks: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    out = []
    for K in blocks:
        K = tuple(sorted(int(s) for s in K))
        if not K or len(set(K)) != len(K):
            raise ValueError(f"block {K} must be a non-empty set of distinct sites")
        for s in K:
            space.check_site(s)
        out.append(K)
    if not out:
        raise ValueError("at least one block is required")
    covered = set().union(*out)
    if covered != set(range(space.length)):
        raise ValueError(f"blocks must cover every site; missing {sorted(set(range(space.length)) - covered)}")
    return out


def check_block_weights(weights: Sequence[float] | None, m: int) -> np.ndarray:
    w = np.full(m, 1.0 / m) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (m,) or not np.isfinite(w).all() or (w < 0).any() or abs(w.sum() - 1.0) > 1e-9:
        raise ValueError(f"block weights must be {m} non-negative numbers summing to 1")
    return w


def joint_log_weights(source: Conditionals) -> np.ndarray:
    """log mu(x) up to a constant, over the states in index order (-inf off mu's support): the source's
    joint law, which block dynamics resamples from. InputTypeError for a source without one."""
    lw = source.log_joint()
    if lw is None:
        raise InputTypeError(f"{type(source).__name__} has no joint law; block dynamics needs a compatible source "
                             "(GibbsModel, IsingModel, PottsModel, LogWeightTable)")
    return lw


def block_kernel(source: Conditionals, blocks: Sequence[Sequence[int]], weights: Sequence[float] | None = None,
                 max_states: int = DEFAULT_MAX_STATES) -> sp.csr_array:
    """Weighted block dynamics for a joint mu (paper P, Definition 6):

        P(x, y) = sum_K p_K 1[y_{-K} = x_{-K}] mu(y) / mu(x_{-K}),

    i.e. draw block K with probability p_K and resample X_K from mu(X_K | X_{-K}).
    Reversible with respect to mu. ``weights`` default to uniform.
    """
    space = source.space
    space.check_size(max_states)
    blocks = check_blocks(space, blocks)
    w = check_block_weights(weights, len(blocks))
    nnz = sum(float(space.size) * float(space.vocab_size) ** len(K) for K, wK in zip(blocks, w) if wK > 0)
    check_memory(48.0 * nnz, f"block dynamics on {space.size} states ({nnz:.3g} non-zeros before merging)")
    log_mu = joint_log_weights(source)
    rows, cols, vals = [], [], []
    for K, wK in zip(blocks, w):
        if wK == 0:
            continue
        members = block_fibres(space, K)  # (N/q^k, q^k)
        cond = softmax(log_mu[members], axis=1)
        m = members.shape[1]
        rows.append(np.repeat(members, m, axis=1).ravel())
        cols.append(np.tile(members, (1, m)).ravel())
        vals.append(wK * np.tile(cond, (1, m)).ravel())
    return _assemble(space.size, rows, cols, vals)


def k_subsets(n: int, k: int) -> list[tuple[int, ...]]:
    """All k-subsets of [n] (the blocks of k-Gibbs)."""
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in 1..{n}, got {k}")
    return list(combinations(range(n), k))


def k_gibbs_kernel(source: Conditionals, k: int, max_states: int = DEFAULT_MAX_STATES) -> sp.csr_array:
    """k-Gibbs: block dynamics with K uniform over the k-subsets of [n] (paper P, Definition 10)."""
    n, q = source.space.length, source.space.vocab_size
    if 1 <= k <= n:  # estimate before enumerating the C(n, k) blocks
        nnz = comb(n, k) * float(source.space.size) * float(q) ** k
        check_memory(48.0 * nnz, f"{k}-Gibbs on {source.space.size} states ({nnz:.3g} non-zeros before merging)")
    return block_kernel(source, k_subsets(n, k), None, max_states)


BlockProbabilities = np.ndarray | Callable[[np.ndarray], np.ndarray]


def k_gibbs_support(source: Conditionals, k: int = 2) -> sp.csr_array:
    """The exact support of :func:`k_gibbs_kernel`: x -> y iff y_{-K} = x_{-K} for a k-subset K of the
    sites and log mu(y) > -inf."""
    space = source.space
    live = np.isfinite(joint_log_weights(source))
    rows, cols = [], []
    for K in k_subsets(space.length, k):
        members = block_fibres(space, K)
        r, c = fibre_pairs(members, live[members], members.shape[1])
        rows += r
        cols += c
    return boolean_pattern(space.size, rows, cols)


def check_adaptive_probabilities(space: StateSpace, m: int, block_probs: BlockProbabilities) -> np.ndarray:
    probs = block_probs(space.all_states()) if callable(block_probs) else block_probs
    probs = np.asarray(probs, dtype=np.float64)
    if probs.shape != (space.size, m):
        raise ValueError(f"adaptive block probabilities must have shape ({space.size}, {m}), got {probs.shape}")
    if not np.isfinite(probs).all() or (probs < 0).any() or np.abs(probs.sum(axis=1) - 1).max() > 1e-9:
        raise ValueError("adaptive block probabilities must be non-negative rows summing to 1")
    return probs


def adaptive_block_kernel(source: Conditionals, blocks: Sequence[Sequence[int]], block_probs: BlockProbabilities,
                          extended: bool = False, max_states: int = DEFAULT_MAX_STATES) -> sp.csr_array:
    """Adaptive weighted block dynamics (paper P, Definition 8).

    A step draws K ~ p_K(. | X), then resamples X_K from q_K(X_K | X_{-K}) ∝ mu(X) p_K(K | X), the
    conditional of the joint mu(X) p_K(K | X) (paper P eq. (1)). ``block_probs`` is an array
    (|V|^n, m) or a function of the sequences giving p_K(K | x) for the m ``blocks``.

    With ``extended=False`` the kernel is the X-chain
        P(x, y) = sum_K p_K(K|x) 1[y_{-K} = x_{-K}] mu(y) p_K(K|y) / Z_K(x_{-K}),
    reversible with respect to mu. With ``extended=True`` it is the chain on pairs (x, K), state
    index x * m + K, that resamples X_K and then draws the next block from the new state:
        P((x, K), (y, K')) = 1[y_{-K} = x_{-K}] q_K(y | x_{-K}) p_K(K' | y),
    stationary for mu(x) p_K(K | x).
    """
    space = source.space
    space.check_size(max_states)
    blocks = check_blocks(space, blocks)
    m = len(blocks)
    probs = check_adaptive_probabilities(space, m, block_probs)
    log_mu = joint_log_weights(source)
    with np.errstate(divide="ignore"):
        log_probs = np.log(probs)
    rows, cols, vals = [], [], []
    for b, K in enumerate(blocks):
        members = block_fibres(space, K)
        logw = log_mu[members] + log_probs[members, b]
        live = np.isfinite(logw).any(axis=1)
        members, logw = members[live], logw[live]
        cond = np.exp(log_softmax(logw, axis=1))
        s = members.shape[1]
        x = np.repeat(members, s, axis=1).ravel()
        y = np.tile(members, (1, s)).ravel()
        step = np.tile(cond, (1, s)).ravel()
        if extended:
            rows.append(np.repeat(x * m + b, m))
            cols.append((y[:, None] * m + np.arange(m)).ravel())
            vals.append((step[:, None] * probs[y]).ravel())
        else:
            rows.append(x)
            cols.append(y)
            vals.append(probs[x, b] * step)
    size = space.size * m if extended else space.size
    P = _assemble(size, rows, cols, vals)
    P.eliminate_zeros()
    if extended:  # a pair (x, K) whose whole fibre has p_K(K|.) = 0 would get an empty row: refuse
        dead = np.flatnonzero(np.asarray(P.sum(axis=1)).ravel() == 0)
        if dead.size:
            raise ValueError("extended adaptive kernel needs p_K(K|x) > 0 wherever a block is listed; "
                             f"{dead.size} pairs have no transitions")
    return P


def independent_parallel_kernel(source: Conditionals, max_states: int = 4096) -> np.ndarray:
    """Independent parallel sampler (paper P, Definition 11): every site at once,

        P(x, y) = prod_i pi_i(y_i | x_{-i}).

    Rows are product measures, so P is dense: returned as an ndarray, limited to ``max_states``.
    """
    space = source.space
    space.check_size(max_states)
    check_memory(16.0 * float(space.size) ** 2, f"the dense independent parallel kernel on {space.size} states")
    states = space.all_states()
    L = source.all_log_conditionals(states)  # (N, n, q)
    logP = np.zeros((space.size, space.size))
    for i in range(space.length):
        logP += L[:, i, :][:, states[:, i]]
    return np.exp(logP)


def parallel_support(source: Conditionals) -> sp.csr_array:
    """The exact support of :func:`independent_parallel_kernel`: x -> y iff log p_i(y_i | x_{-i}) > -inf
    at every site i."""
    space = source.space
    states = space.all_states()
    L = np.isfinite(source.all_log_conditionals(states))  # (N, n, q)
    F = np.ones((space.size, space.size), dtype=bool)
    for i in range(space.length):
        F &= L[:, i, :][:, states[:, i]]
    return sp.csr_array(F)
