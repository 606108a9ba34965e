"""Connected sets of a count or transition matrix C (x -> y when C(x, y) > 0).

Strongly connected sets are the communicating classes (each state reaches every other inside the set,
:mod:`mlmix.theory.chain.structure`); weakly connected sets are the components of the graph with the
directions dropped (C + C^T). Both are exact (graph searches on the sign pattern, no rounding), listed
largest first (ties: the set with the smallest state first), each as sorted state indices. The largest
connected set is where a transition matrix estimated from counts is usually restricted (deeptime's
and msmtools' ``largest_connected_set``); ``is_connected`` is one set covering every state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from mlmix.validation import Matrix, check_count_matrix

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain


def _ordered(labels: np.ndarray) -> list[np.ndarray]:
    """The states of each label, largest set first, ties by smallest state."""
    order = np.argsort(labels, kind="stable")
    cuts = np.flatnonzero(np.diff(labels[order])) + 1
    sets = np.split(order, cuts)
    return sorted(sets, key=lambda s: (-s.size, int(s[0])))


def connected_sets(C: Matrix, directed: bool = True) -> list[np.ndarray]:
    """The strongly (``directed``) or weakly connected sets of C's sign pattern, largest first."""
    G = sp.csr_array(check_count_matrix(C) > 0)
    _, labels = connected_components(G, directed=directed, connection="strong" if directed else "weak")
    return _ordered(labels)


def largest_connected_set(C: Matrix, directed: bool = True) -> np.ndarray:
    """The largest strongly (or weakly) connected set of C (the first of :func:`connected_sets`)."""
    return connected_sets(C, directed)[0]


def is_connected(C: Matrix, directed: bool = True) -> bool:
    """Whether C has one strongly (or weakly) connected set."""
    return len(connected_sets(C, directed)) == 1


def chain_connected_sets(chain: Chain, directed: bool = True) -> list[np.ndarray]:
    """The body of :meth:`Chain.connected_sets`: strongly connected sets are the communicating classes of the
    chain's exact sign pattern (``chain.structure``: a probability that underflowed to 0 still connects);
    weakly connected sets join those classes along P's non-zero entries (``chain.to_scipy()``; one set when
    the chain is irreducible)."""
    classes = chain.structure.classes
    labels = np.empty(chain.n_states, dtype=np.int64)
    for k, c in enumerate(classes):
        labels[c] = k
    if directed or len(classes) == 1:
        return _ordered(labels)
    P = sp.coo_array(chain.to_scipy())
    keep = P.data > 0
    between = sp.csr_array((np.ones(int(keep.sum())), (labels[P.row[keep]], labels[P.col[keep]])),
                           shape=(len(classes), len(classes)))
    _, joined = connected_components(between, directed=True, connection="weak")
    return _ordered(joined[labels])
