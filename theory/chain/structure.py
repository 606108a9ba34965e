"""Graph structure of a finite Markov chain: communicating classes, closed classes, period.

States x and y *communicate* when each can reach the other; the communicating classes are the
strongly connected components of the transition graph (x -> y when P(x, y) > 0). A class is
*closed* (recurrent) when no edge leaves it; the other states are *transient*. A chain has a
unique stationary law iff it has exactly one closed class; that law vanishes on the transient
states. It is *irreducible* when there is a single class.

The *period* of an irreducible chain is d = gcd{t >= 1 : P^t(x, x) > 0} (the same for every x);
it is computed from one breadth-first search as the gcd over all edges (u, v) of
level(u) + 1 - level(v) (levels = BFS distances from any root). d = 1: aperiodic.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import gcd

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components

from mlmix.errors import ReducibleChainError
from mlmix.validation import Matrix, check_transition_matrix


@dataclass(frozen=True, eq=False)
class Structure:
    """Communicating classes of a chain: ``labels[x]`` is the class of state x, ``closed[c]`` whether
    class c is closed."""

    labels: np.ndarray
    closed: np.ndarray
    graph: sp.csr_array

    @property
    def n_classes(self) -> int:
        return int(self.closed.size)

    @property
    def is_irreducible(self) -> bool:
        return self.n_classes == 1

    @cached_property
    def classes(self) -> list[np.ndarray]:
        """State indices of each communicating class (one stable sort: O(N log N), not O(N x classes))."""
        order = np.argsort(self.labels, kind="stable")
        cuts = np.searchsorted(self.labels[order], np.arange(1, self.n_classes))
        return np.split(order, cuts)

    @cached_property
    def closed_classes(self) -> list[np.ndarray]:
        """State indices of each closed (recurrent) class."""
        if self.closed.sum() == 1:  # the common case: no list of every (transient) class
            return [np.flatnonzero(self.labels == int(np.flatnonzero(self.closed)[0]))]
        return [cls for cls, c in zip(self.classes, self.closed) if c]

    @cached_property
    def transient(self) -> np.ndarray:
        """Boolean mask of the transient states (in no closed class)."""
        return ~self.closed[self.labels]

    def recurrent_class(self) -> np.ndarray:
        """The states of the unique closed class; ReducibleChainError naming the closed classes when
        there are several (no unique stationary law)."""
        closed = self.closed_classes
        if len(closed) == 1:
            return closed[0]
        shown = "; ".join(f"{{{', '.join(map(str, c[:6]))}{', ...' if c.size > 6 else ''}}} ({c.size} states)"
                          for c in closed[:4])
        raise ReducibleChainError(f"the chain has {len(closed)} closed classes, so no unique stationary law: "
                                  f"{shown}{' ...' if len(closed) > 4 else ''}", closed)

    def period(self, states: np.ndarray | None = None) -> int:
        """Period of the class holding ``states`` (default: the unique closed class, or the whole
        chain when irreducible)."""
        if states is None:
            states = np.arange(self.labels.size) if self.is_irreducible else self.recurrent_class()
        sub = self.graph[states][:, states]
        return _period(sp.csr_array(sub))


def communicating_classes(P: Matrix) -> tuple[list[np.ndarray], list[bool]]:
    """The communicating classes of P and whether each is closed."""
    st = chain_structure(check_transition_matrix(P))
    return st.classes, [bool(c) for c in st.closed]


def chain_structure(P: Matrix) -> Structure:
    """Communicating classes of a (validated) transition matrix. O(nnz)."""
    G = sp.csr_array(P, copy=True)
    G.eliminate_zeros()
    count, labels = connected_components(G, directed=True, connection="strong")
    coo = G.tocoo()
    leaves = labels[coo.row] != labels[coo.col]
    leaving = np.zeros(count, dtype=bool)
    leaving[labels[coo.row][leaves]] = True
    G.data[:] = 1.0
    return Structure(labels.astype(np.int64), ~leaving, G)


def product_classes(P: Matrix) -> int:
    """Number of communicating classes of P* P (P irreducible with its stationary law pi > 0): x and
    y are linked when some z has P(z, x) P(z, y) > 0, a symmetric relation, so the classes are the
    connected components of the bipartite graph z -> x over the positive entries (O(nnz)). More than
    one class: P* P is reducible and its gap (Fill's sigma_2 = 1) is 0, e.g. every permutation."""
    coo = sp.coo_array(P)
    keep = coo.data > 0
    N = P.shape[0]
    B = sp.coo_array((np.ones(int(keep.sum())), (coo.row[keep], N + coo.col[keep])), shape=(2 * N, 2 * N))
    _, labels = connected_components(sp.csr_array(B), directed=False)
    return int(np.unique(labels[N:]).size)


def tree_depths(pred: np.ndarray, root: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Sum of ``weights`` (default 1 per edge) along the tree path from ``root`` to every node, for a
    predecessor array (pred[root] < 0 or = root), by pointer jumping: O(N log depth)."""
    anc = np.where(pred < 0, root, pred).astype(np.int64)
    anc[root] = root
    dist = (np.ones(pred.size) if weights is None else np.asarray(weights, dtype=np.float64).copy())
    dist[root] = 0
    if weights is None:
        dist = dist.astype(np.int64)
    while (anc != root).any():
        dist = dist + dist[anc]
        anc = anc[anc]
    return dist


def _period(G: sp.csr_array) -> int:
    """gcd over edges of level(u) + 1 - level(v) for BFS levels of a strongly connected graph."""
    _, pred = breadth_first_order(G, 0, directed=True, return_predecessors=True)
    level = tree_depths(pred, root=0)
    coo = G.tocoo()
    diffs = np.abs(level[coo.row] + 1 - level[coo.col])
    d = 0
    for value in np.unique(diffs):
        d = gcd(d, int(value))
        if d == 1:
            break
    return max(d, 1)


class PositiveStructure(Structure):
    """The structure of a matrix-free kernel whose conditionals are all positive: every state reaches
    every other by single-site moves (one class), and each move keeps the state with positive
    probability (period 1). No transition graph is stored (``graph`` is None)."""

    def __init__(self, n_local: int) -> None:
        super().__init__(np.zeros(n_local, dtype=np.int64), np.array([True]), None)

    def period(self, states: np.ndarray | None = None) -> int:
        return 1


def reaches(P: Matrix, sources: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """States x in ``allowed`` (or in ``sources``) with a path x -> ... -> sources inside ``allowed``."""
    N = P.shape[0]
    edges = sp.coo_array(P)
    keep = (edges.data > 0) & allowed[edges.row] & (allowed[edges.col] | sources[edges.col])
    src = np.flatnonzero(sources)
    rows = np.concatenate([edges.col[keep], np.full(src.size, N)])  # reversed graph + a super-source N
    cols = np.concatenate([edges.row[keep], src])
    G = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(N + 1, N + 1))
    reached = breadth_first_order(G, N, directed=True, return_predecessors=False)
    out = np.zeros(N + 1, dtype=bool)
    out[reached] = True
    return out[:N]
