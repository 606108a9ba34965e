"""The exact sign pattern of a sampler's kernel: which transitions are positive in exact arithmetic.

A transition probability built from conditionals (a product or sum of them) is positive exactly when
the conditionals it is made of are, i.e. when their logarithms are > -inf; its float value may still
underflow to 0 (a conditional of exp(-800)). The communicating classes of a chain are a property of
this pattern, so :class:`~mlmix.theory.chain.markov_chain.Chain` takes its structure from it
(:mod:`mlmix.theory.chain.structure`), never from the float entries.

Per kernel (definitions in :mod:`mlmix.theory.kernels.assembled` and
:mod:`mlmix.theory.kernels.scan_and_mh`):

* glauber: x -> x^{i<-a} iff log p_i(a | x_{-i}) > -inf; x -> x iff log p_i(x_i | x_{-i}) > -inf for some i;
* k-gibbs: x -> y (y_{-K} = x_{-K}, K a block) iff log mu(y) > -inf;
* parallel: x -> y iff log p_i(y_i | x_{-i}) > -inf at every site i;
* systematic: the Boolean product of the heat-bath patterns in the sweep order;
* mh: x -> x^{i<-a} iff min(log p_i(a | x_{-i}), E(x) - E(x^{i<-a}) + log p_i(x_i | x_{-i})) > -inf;
  the diagonal is that of the float kernel (1 - the row's moves).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from mlmix.theory.kernels.assembled import block_fibres, joint_log_weights, k_subsets
from mlmix.theory.kernels.scan_and_mh import check_order, energy_vector, mh_logs, site_fibres
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.validation import check_memory

#: The kernels whose pattern :func:`kernel_support` knows.
SUPPORTED = ("glauber", "k-gibbs", "parallel", "systematic", "mh-logit", "mh-pll")


def _pattern(size: int, rows: list, cols: list) -> sp.csr_array:
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    G = sp.csr_array((np.ones(r.size, dtype=bool), (r, c)), shape=(size, size))
    G.sum_duplicates()
    return G


def _fibre_pairs(members: np.ndarray, live: np.ndarray, q: int) -> tuple[list, list]:
    """Every x of a fibre to every live member y of it: (rows, cols)."""
    m = members.shape[0]
    to = np.broadcast_to(members[:, None, :], (m, q, q))
    frm = np.broadcast_to(members[:, :, None], (m, q, q))
    ok = np.broadcast_to(live[:, None, :], (m, q, q))
    return [frm[ok]], [to[ok]]


def kernel_support(source: Conditionals, kernel: str, *, k: int | None = None,
                   order: Sequence[int] | str | None = None) -> sp.csr_array:
    """The Boolean pattern (N, N) of the transitions of ``kernel`` on ``source`` that are positive in
    exact arithmetic (module doc), from the log-conditionals (or the log joint) being > -inf."""
    if kernel not in SUPPORTED:
        raise ValueError(f"kernel must be one of {', '.join(SUPPORTED)}, got {kernel!r}")
    space = source.space
    N, n, q = space.size, space.length, space.vocab_size
    if kernel in ("glauber", "systematic"):
        sites = range(n) if kernel == "glauber" else check_order(space, order)
        if kernel == "glauber":
            rows, cols = [], []
            for i in sites:
                base, members = site_fibres(space, i)
                r, c = _fibre_pairs(members, np.isfinite(source.log_conditionals(space.decode(base), i)), q)
                rows += r
                cols += c
            return _pattern(N, rows, cols)
        S = sp.eye_array(N, dtype=np.int64, format="csr")
        for i in sites:
            base, members = site_fibres(space, i)
            r, c = _fibre_pairs(members, np.isfinite(source.log_conditionals(space.decode(base), i)), q)
            H = _pattern(N, r, c).astype(np.int64)
            S = sp.csr_array(S @ H)
            S.data[:] = 1  # counts of paths can only grow: keep 0/1
        return sp.csr_array(S.astype(bool))
    if kernel == "k-gibbs":
        live = np.isfinite(joint_log_weights(source))
        rows, cols = [], []
        for K in k_subsets(n, 2 if k is None else k):
            members = block_fibres(space, K)
            r, c = _fibre_pairs(members, live[members], members.shape[1])
            rows += r
            cols += c
        return _pattern(N, rows, cols)
    if kernel == "parallel":
        states = space.all_states()
        L = np.isfinite(source.all_log_conditionals(states))  # (N, n, q)
        F = np.ones((N, N), dtype=bool)
        for i in range(n):
            F &= L[:, i, :][:, states[:, i]]
        return sp.csr_array(F)
    E = energy_vector(source, kernel[3:])
    rows, cols = [], []
    off = ~np.eye(q, dtype=bool)
    for i in range(n):
        members, _, acc = mh_logs(source, E, i)
        m = members.shape[0]
        ok = np.isfinite(acc) & off
        rows.append(np.broadcast_to(members[:, :, None], (m, q, q))[ok])
        cols.append(np.broadcast_to(members[:, None, :], (m, q, q))[ok])
    return _pattern(N, rows, cols)


def kernel_log_offdiagonal(source: Conditionals, kernel: str) -> np.ndarray | None:
    """log P(x, y) for x != y, dense (N, N) with -inf off the support, for the single-site kernels whose
    entries are one conditional each: "glauber", log p_i(a | x_{-i}) - log n, and "mh-logit" /
    "mh-pll", min(log p_i(a | x_{-i}), E(x) - E(x^{i<-a}) + log p_i(x_i | x_{-i})) - log n; None for the
    other kernels (their entries are sums of products of conditionals)."""
    if kernel not in ("glauber", "mh-logit", "mh-pll"):
        return None
    space = source.space
    N, n, q = space.size, space.length, space.vocab_size
    check_memory(8.0 * N * N, f"the log transition probabilities on {N} states")
    L = np.full((N, N), -np.inf)
    off = ~np.eye(q, dtype=bool)
    E = None if kernel == "glauber" else energy_vector(source, kernel[3:])
    for i in range(n):
        if E is None:
            base, members = site_fibres(space, i)
            lc = source.log_conditionals(space.decode(base), i)  # (N/q, q)
            logs = np.broadcast_to(lc[:, None, :], (members.shape[0], q, q))
        else:
            members, _, logs = mh_logs(source, E, i)
        m = members.shape[0]
        rows = np.broadcast_to(members[:, :, None], (m, q, q))[:, off]
        cols = np.broadcast_to(members[:, None, :], (m, q, q))[:, off]
        L[rows, cols] = logs[:, off] - np.log(n)
    return L
