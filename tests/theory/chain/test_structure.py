"""``theory/chain/structure.py``: communicating and closed classes, transient states, the period and the
cyclic classes built on it, product classes and tree depths, each against a networkx computation
written here (strongly connected and attracting components, gcd of cycle lengths, BFS distances);
a path of 10^5 states in well under a second of work."""

import time
from math import gcd

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from mlmix.errors import ReducibleChainError
from mlmix.theory.chain.absorbing import cyclic_classes
from mlmix.theory.chain.structure import chain_structure, communicating_classes, product_classes, tree_depths
from mlmix.theory.sources.conditionals import IsingModel


def random_chain(n: int, seed: int, density: float = 0.15) -> np.ndarray:
    """A row-stochastic matrix on a random directed graph (every state has an out-edge)."""
    rng = np.random.default_rng(seed)
    A = (rng.random((n, n)) < density) * rng.random((n, n))
    A[np.arange(n), rng.integers(0, n, n)] += 0.5
    return A / A.sum(axis=1, keepdims=True)


def digraph(P) -> nx.DiGraph:
    coo = sp.coo_array(P)
    G = nx.DiGraph()
    G.add_nodes_from(range(P.shape[0]))
    G.add_edges_from((int(i), int(j)) for i, j, v in zip(coo.row, coo.col, coo.data) if v > 0)
    return G


def as_sets(classes) -> set[frozenset]:
    return {frozenset(int(x) for x in c) for c in classes}


def cycle_gcd(G: nx.DiGraph) -> int:
    """The period as the definition has it: gcd of the lengths of the cycles (simple ones suffice)."""
    d = 0
    for cycle in nx.simple_cycles(G):
        d = gcd(d, len(cycle))
    return d


def cycle_chain(lengths: list[int], hold: bool = False) -> np.ndarray:
    """Cycles of the given lengths through a common state 0 (uniform choice at 0): period = gcd of the
    lengths; ``hold`` adds a self-loop at 0 (period 1)."""
    n = 1 + sum(L - 1 for L in lengths)
    P = np.zeros((n, n))
    nxt = 1
    for L in lengths:
        path = [0] + list(range(nxt, nxt + L - 1)) + [0]
        P[0, path[1]] += 1.0
        for a, b in zip(path[1:-1], path[2:]):
            P[a, b] = 1.0
        nxt += L - 1
    if hold:
        P[0, 0] = 1.0
    return P / P.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("seed", range(8))
def test_classes_closed_classes_and_transient_states_against_networkx(seed, matrix_chain_of):
    """chain_structure and Chain.structure (dense and CSR) against networkx."""
    P = random_chain(30, seed, density=0.04)
    st = matrix_chain_of(P).structure
    G = digraph(P)
    assert as_sets(st.classes) == as_sets(nx.strongly_connected_components(G))
    assert as_sets(st.closed_classes) == as_sets(nx.attracting_components(G))
    recurrent = set().union(*nx.attracting_components(G))
    np.testing.assert_array_equal(st.transient, [x not in recurrent for x in range(30)])
    assert st.is_irreducible == nx.is_strongly_connected(G)
    for c, closed in zip(st.classes, st.closed):  # labels and the closed flags agree with the lists
        assert (st.labels[c] == st.labels[c[0]]).all()
        assert bool(closed) == (frozenset(c.tolist()) in as_sets(nx.attracting_components(G)))
    classes, closed = communicating_classes(P)  # the validating entry point gives the same
    assert as_sets(classes) == as_sets(st.classes) and sum(closed) == len(st.closed_classes)
    if len(st.closed_classes) == 1:
        assert set(st.recurrent_class().tolist()) == recurrent
    else:
        with pytest.raises(ReducibleChainError, match=f"{len(st.closed_classes)} closed classes") as info:
            st.recurrent_class()
        assert as_sets(info.value.closed_classes) == as_sets(st.closed_classes)


def test_dense_and_sparse_input_give_the_same_structure(matrix_chain_of):
    P = random_chain(25, 3, density=0.05)
    a, b = chain_structure(P), chain_structure(sp.csr_array(P))
    assert as_sets(a.classes) == as_sets(b.classes) and as_sets(a.closed_classes) == as_sets(b.closed_classes)
    G = digraph(P)  # the chain's closed classes are networkx's attracting components, dense or CSR
    ch = matrix_chain_of(P)
    assert as_sets(ch.closed_classes) == as_sets(a.closed_classes) == as_sets(nx.attracting_components(G))
    assert ch.is_irreducible == (len(a.classes) == 1)


@pytest.mark.parametrize("lengths, hold, period", [
    ([6], False, 6), ([4, 6], False, 2), ([3, 5], False, 1), ([6, 9, 12], False, 3), ([4], True, 1),
    ([1], False, 1),
])
def test_period_against_the_gcd_of_cycle_lengths(lengths, hold, period, matrix_chain_of):
    P = cycle_chain(lengths, hold)
    st = chain_structure(P)
    assert st.is_irreducible
    assert st.period() == cycle_gcd(digraph(P)) == period == matrix_chain_of(P).period
    assert (st.period() == 1) == nx.is_aperiodic(digraph(P))


@pytest.mark.parametrize("seed", range(6))
def test_period_of_random_chains_against_networkx(seed, matrix_chain_of):
    """Random strongly connected graphs (a Hamiltonian cycle in random order plus random edges), the odd
    seeds bipartite (edges only between the two sides, so every cycle is even), against cycle gcds."""
    rng = np.random.default_rng(seed)
    n = 8
    order = rng.permutation(n)
    side = np.empty(n, dtype=int)
    side[order] = np.arange(n) % 2
    P = random_chain(n, seed, density=0.3)
    if seed % 2:
        P *= side[:, None] != side[None, :]
    P[order, np.roll(order, -1)] += 1.0
    P /= P.sum(axis=1, keepdims=True)
    st = chain_structure(P)
    G = digraph(P)
    assert st.is_irreducible and nx.is_strongly_connected(G)
    assert st.period() == cycle_gcd(G) == matrix_chain_of(P).period
    if seed % 2:
        assert st.period() % 2 == 0


def test_period_of_the_closed_class_ignores_transient_states(matrix_chain_of):
    """A transient state with a self-loop leads into a 3-cycle: the closed class has period 3."""
    P = np.zeros((4, 4))
    P[0, 0], P[0, 1] = 0.5, 0.5
    P[1, 2], P[2, 3], P[3, 1] = 1.0, 1.0, 1.0
    assert matrix_chain_of(P).period == 3
    st = chain_structure(P)
    assert not st.is_irreducible and st.transient.tolist() == [True, False, False, False]
    assert st.period() == 3 and st.period(np.array([0])) == 1


@pytest.mark.parametrize("lengths", [[6], [4, 6], [6, 9, 12], [3, 5]])
def test_cyclic_classes_step_forward_one_class_at_a_time(lengths, matrix_chain_of):
    """The d cyclic classes partition the class, every edge goes from class c to c + 1 (mod d), and they
    are the classes of the BFS distance mod d computed by networkx (Chain.cyclic_classes, dense and CSR,
    gives the same classes)."""
    P = cycle_chain(lengths)
    st = chain_structure(P)
    states = st.recurrent_class()
    cyc = cyclic_classes(st, states)
    assert as_sets(matrix_chain_of(P).cyclic_classes()) == as_sets(cyc)
    d = st.period()
    assert len(cyc) == d and sorted(np.concatenate(cyc).tolist()) == sorted(states.tolist())
    where = {int(x): c for c, cls in enumerate(cyc) for x in cls}
    for u, v in digraph(P).edges:
        assert where[v] == (where[u] + 1) % d
    dist = nx.single_source_shortest_path_length(digraph(P), int(states[0]))
    assert as_sets(cyc) == as_sets([[x for x in dist if dist[x] % d == c] for c in range(d)])


def test_product_classes():
    """P* P is reducible exactly when the bipartite graph z -> x has several components: a permutation
    has N classes (P* P = I), a positive matrix one; random sparse chains against networkx."""
    perm = np.eye(5)[[2, 0, 4, 1, 3]]
    assert product_classes(perm) == 5
    assert product_classes(np.full((4, 4), 0.25)) == 1
    for seed in range(5):
        P = random_chain(12, seed, density=0.05)
        # x ~ y when some z reaches both in one step: the graph of (P^T P > 0)
        H = nx.from_numpy_array(((P.T @ P) > 0).astype(int))
        assert product_classes(sp.csr_array(P)) == nx.number_connected_components(H)


@pytest.mark.parametrize("seed", range(4))
def test_tree_depths_against_networkx_distances(seed):
    rng = np.random.default_rng(seed)
    n = 200
    T = nx.random_labeled_tree(n, seed=seed) if hasattr(nx, "random_labeled_tree") else nx.random_tree(n, seed=seed)
    root = int(rng.integers(n))
    pred = np.full(n, -9999)
    for parent, child in nx.bfs_edges(T, root):
        pred[child] = parent
    w = rng.random(n)
    depth = nx.single_source_shortest_path_length(T, root)
    got = tree_depths(pred, root)
    assert got.dtype.kind == "i" and got.tolist() == [depth[x] for x in range(n)]
    weighted = tree_depths(pred, root, w)
    lengths = {x: sum(w[v] for v in path[1:]) for x, path in nx.single_source_shortest_path(T, root).items()}
    np.testing.assert_allclose(weighted, [lengths[x] for x in range(n)], rtol=1e-12, atol=0)


def test_a_path_of_100000_states_is_quick():
    """Reflecting walk on a path of 10^5 states (period 2, BFS depth 10^5), and the one-way path into an
    absorbing end (10^5 classes, one closed): both in O(N log N)."""
    N = 100_000
    i = np.arange(N - 1)
    walk = sp.csr_array((np.r_[np.full(N - 1, 0.5), np.full(N - 1, 0.5)], (np.r_[i, i + 1], np.r_[i + 1, i])),
                        shape=(N, N))
    walk = sp.csr_array(walk + sp.csr_array(([0.5, 0.5], ([0, N - 1], [1, N - 2])), shape=(N, N)))
    oneway = sp.csr_array((np.ones(N), (np.arange(N), np.minimum(np.arange(N) + 1, N - 1))), shape=(N, N))
    start = time.perf_counter()
    st = chain_structure(walk)
    assert st.is_irreducible and st.period() == 2
    assert len(cyclic_classes(st, st.recurrent_class())[0]) == N // 2
    one = chain_structure(oneway)
    assert one.n_classes == N and [c.tolist() for c in one.closed_classes] == [[N - 1]]
    assert int(one.transient.sum()) == N - 1 and len(one.classes) == N
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize("bad, err", [
    (np.array([[0.5, 0.6], [0.5, 0.5]]), ValueError),
    (np.array([[np.inf, 0], [0.5, 0.5]]), ValueError),
    (np.zeros((0, 0)), ValueError),
    (None, TypeError),
])
def test_bad_input_is_a_one_line_error(bad, err):
    with pytest.raises(err) as info:
        communicating_classes(bad)
    assert "\n" not in str(info.value)


def test_structure_of_a_source_chain_in_every_representation(chain_of):
    """Glauber dynamics of an Ising path of 3 sites: one class of 8 states with self-loops (period 1),
    whatever the representation; the kernel's support is the single-site-update graph (hypercube)."""
    ch = chain_of(source=IsingModel(nx.path_graph(3), beta=1.0))
    assert ch.n_states == 8 and ch.is_irreducible and ch.period == 1
    assert len(ch.closed_classes) == 1 and sorted(ch.closed_classes[0].tolist()) == list(range(8))
