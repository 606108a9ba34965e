"""Connected sets: closed forms (a one-way edge, blocks, an isolated count), networkx's components as a second
algorithm (Hypothesis), the chain's exact sign pattern on dense, CSR and matrix-free chains, bad matrices refused."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from chain_representations import REPRESENTATIONS, chain_in
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.chain.connectivity import connected_sets, is_connected, largest_connected_set
from mlmix.theory.chain.markov_chain import Chain


def _as_sets(sets):
    return [sorted(int(x) for x in s) for s in sets]


def test_closed_forms():
    """0 -> 1 only: strongly {0}, {1}, weakly {0, 1}; a count matrix with an unvisited state 3; largest first."""
    C = np.array([[5, 2, 0, 0], [0, 3, 1, 0], [0, 4, 0, 0], [0, 0, 0, 0]])
    assert _as_sets(connected_sets(C)) == [[1, 2], [0], [3]]
    assert _as_sets(connected_sets(C, directed=False)) == [[0, 1, 2], [3]]
    assert list(largest_connected_set(sp.csr_array(C))) == [1, 2]
    assert not is_connected(C) and not is_connected(C, directed=False)
    assert is_connected(np.ones((3, 3)))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 12), st.floats(0.05, 0.5), st.booleans())
def test_against_networkx(seed, n, density, directed):
    C = (np.random.default_rng(seed).random((n, n)) < density) * 3.0
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(zip(*np.nonzero(C)))
    comps = nx.strongly_connected_components(G) if directed else nx.weakly_connected_components(G)
    expected = sorted((sorted(c) for c in comps), key=lambda s: (-len(s), s[0]))
    assert _as_sets(connected_sets(C, directed)) == expected


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_a_chain_with_transient_states_and_two_closed_classes(rep):
    """States 0, 1 lead into the closed classes {2, 3} and {4}: strongly five sets by size, weakly one."""
    P = np.array([[0.5, 0.3, 0.2, 0, 0], [0.2, 0.5, 0, 0, 0.3], [0, 0, 0.4, 0.6, 0], [0, 0, 0.7, 0.3, 0],
                  [0, 0, 0, 0, 1.0]])
    chain = chain_in(rep, P)
    assert _as_sets(chain.connected_sets()) == [[0, 1], [2, 3], [4]]
    assert _as_sets(chain.connected_sets(directed=False)) == [[0, 1, 2, 3, 4]]


def test_an_underflowed_move_still_connects():
    """A move of probability below float64's range (given in the exact support) keeps one class."""
    P = np.array([[1.0, 0.0], [0.5, 0.5]])
    chain = Chain(P, support=np.ones((2, 2), dtype=bool))
    assert _as_sets(chain.connected_sets()) == [[0, 1]]


@pytest.mark.parametrize("C, message", [(np.ones((2, 3)), "square"), (np.array([[1.0, -1.0], [0, 1]]), "non-negative"),
                                        (np.array([[np.nan, 1.0], [0, 1]]), "finite"), (np.array([["a"]]), "real")])
def test_bad_matrices_are_refused(C, message):
    with pytest.raises((ValueError, TypeError), match=message) as err:
        connected_sets(C)
    assert "\n" not in str(err.value)
