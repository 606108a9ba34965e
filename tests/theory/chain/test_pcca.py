"""PCCA+ (:mod:`mlmix.theory.chain.pcca`): exact recovery of the blocks of a block-uniform chain plus eps coupling
(memberships crisp, the coarse matrix (1 - eps) I + eps 1 n^T / N, on dense, CSR and matrix-free chains);
memberships tending to the blocks as eps -> 0 on random reversible block chains, with the coarse matrix's
eigenvalues equal to P's slow ones (a second algorithm); the two magnetisation modes of a cold Ising chain
(gaps to 1e-104) on every representation; Hypothesis properties (partition of unity, non-negativity, rows of
P_c summing to 1, crispness <= 1); bad input refused with one line."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from chain_representations import MATRIX_REPRESENTATIONS, REPRESENTATIONS, chain_in
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.errors import NumericalError
from mlmix.theory.chain import metastable
from mlmix.theory.chain import pcca as pcca_module
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.metastable import metastable_sets
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable

SIZES = (3, 4, 5)


def _blocks(sizes):
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return labels[:, None] == labels[None, :], labels


def block_uniform(sizes, eps):
    """(1 - eps) (uniform within each block) + eps (uniform over all states): span of the block indicators is
    exactly invariant (eigenvalues 1 and 1 - eps on it, 0 elsewhere)."""
    same, labels = _blocks(sizes)
    n = np.asarray(sizes, dtype=float)
    return (1 - eps) * same / n[labels][:, None] + eps / sum(sizes), labels


@pytest.mark.parametrize("representation", MATRIX_REPRESENTATIONS)
@pytest.mark.parametrize("eps", [1e-2, 1e-6, 1e-12])
def test_block_uniform_chain_gives_its_blocks_and_the_closed_form(representation, eps):
    P, labels = block_uniform(SIZES, eps)
    out = chain_in(representation, P).pcca(3)
    N, n = sum(SIZES), np.asarray(SIZES, dtype=float)
    order = np.argsort(-n, kind="stable")  # sets come largest coarse mass first
    crisp = (labels[:, None] == order[None, :]).astype(float)
    np.testing.assert_allclose(out.memberships.value, crisp, atol=1e-12)
    assert out.min_membership >= -1e-14 and out.crispness == pytest.approx(1.0, abs=1e-12)
    closed = (1 - eps) * np.eye(3) + eps * np.tile(n[order] / N, (3, 1))
    np.testing.assert_allclose(out.coarse_matrix.value, closed, rtol=0, atol=1e-13)
    off = ~np.eye(3, dtype=bool)  # the coarse rates keep their relative accuracy down to eps = 1e-12
    np.testing.assert_allclose(out.coarse_matrix.value[off], closed[off], rtol=1e-9)
    np.testing.assert_allclose(out.coarse_stationary.value, n[order] / N, rtol=1e-13)
    assert [np.flatnonzero(s).tolist() for s in out.sets] == [np.flatnonzero(labels == k).tolist() for k in order]
    assert out.coarse_matrix.residual <= 1e-14 and out.memberships.residual <= 1e-14


def random_block_chain(sizes, eps, seed):
    """A reversible chain W / rowsum(W), W symmetric: random blocks plus eps times a random full coupling."""
    rng = np.random.default_rng(seed)
    same, labels = _blocks(sizes)
    R = rng.random((sum(sizes), sum(sizes)))
    W = np.where(same, R + R.T, 0.0) + eps * (lambda C: C + C.T)(rng.random(R.shape))
    return W / W.sum(axis=1, keepdims=True), labels


def test_memberships_tend_to_the_blocks_as_the_coupling_vanishes():
    deviations = []
    for eps in (1e-2, 1e-4, 1e-6, 1e-8):
        P, labels = random_block_chain(SIZES, eps, seed=3)
        chain = Chain(P)
        out = chain.pcca(3)
        chi = out.memberships.value
        to_block = np.array([labels[np.argmax(chi[:, j])] for j in range(3)])
        deviations.append(np.abs(chi - (labels[:, None] == to_block[None, :])).max())
        assert deviations[-1] <= 100 * eps
        # span chi is P-invariant: P_c = A^-1 L A has P's three slow eigenvalues (eigh of the symmetrised P)
        pi = chain.stationary.value
        r = np.sqrt(pi)
        slow = np.sort(np.linalg.eigvalsh(r[:, None] * P / r[None, :]))[::-1][:3]
        np.testing.assert_allclose(np.sort(np.linalg.eigvals(out.coarse_matrix.value).real)[::-1], slow, atol=1e-12)
        # the crisp aggregation sum_{i in I, j in J} pi_i P_ij / pi(I) is P_c to first order in eps
        crisp = np.array([[pi[labels == a] @ P[np.ix_(labels == a, labels == b)].sum(axis=1) / pi[labels == a].sum()
                           for b in to_block] for a in to_block])
        np.testing.assert_allclose(out.coarse_matrix.value, crisp, atol=100 * eps)
    assert deviations == sorted(deviations, reverse=True)


@pytest.mark.parametrize("representation", REPRESENTATIONS)
def test_cold_ising_chain_has_the_two_magnetisation_modes(representation):
    src = IsingModel(nx.complete_graph(5), couplings=1.0, beta=5.0)  # coarse rate ~ 1e-26
    chain = chain_in(representation, source=src)
    out = chain.pcca(2)
    plus = src.space.all_states().sum(axis=1) >= 3
    assert {tuple(s) for s in out.sets} == {tuple(plus), tuple(~plus)}
    np.testing.assert_allclose(out.coarse_stationary.value, [0.5, 0.5], rtol=1e-9)
    assert out.min_membership >= -1e-12 and out.crispness > 1 - 1e-6
    np.testing.assert_allclose(out.coarse_matrix.value.sum(axis=1), 1.0, atol=1e-13)
    # span chi is P-invariant: P_c's eigenvalues are 1 and 1 - gap, so its two rates sum to the chain's
    # GTH-accurate gap (~2e-26), which 1 - P_c(a, a) would lose to rounding
    if representation == "dense":
        Pc = out.coarse_matrix.value
        assert Pc[0, 1] + Pc[1, 0] == pytest.approx(float(chain.spectral_gap), rel=1e-6)
    if representation == "dense":  # the same sets as diagnose's metastable sets
        assert {tuple(s.states) for s in metastable_sets(chain)} == {tuple(s) for s in out.sets}


@pytest.mark.parametrize("beta", [1.0, 5.0, 20.0])
def test_metastable_sets_of_large_chains_come_from_pcca(beta, monkeypatch):
    """Above DENSE_HITTING_LIMIT states metastable_sets labels states by PCCA+'s memberships (no committors):
    forced here on the cold complete-graph Ising chain, it finds the same two modes as the committor route."""
    src = IsingModel(nx.complete_graph(5), couplings=1.0, beta=beta)
    chain = Chain.from_source(src)
    by_committors = {tuple(s.states) for s in metastable_sets(chain)}
    monkeypatch.setattr(metastable, "DENSE_HITTING_LIMIT", 0)
    by_pcca = {tuple(s.states) for s in metastable_sets(chain)}
    plus = src.space.all_states().sum(axis=1) >= 3
    assert by_pcca == by_committors == {tuple(plus), tuple(~plus)}
    P, _ = block_uniform(SIZES, 1e-4)
    assert {tuple(s.states) for s in metastable_sets(Chain(P))} == {tuple(s) for s in Chain(P).pcca(3).sets}
    # a non-reversible chain: PCCA+ of its additive reversibilization S = (P + P*)/2, whose modes the route uses
    cold = Chain.from_source(ScoreTable.random(3, 3, seed=1, temperature=0.2))
    sets = metastable_sets(cold)
    assert not cold.is_reversible and len(sets) == 2
    assert {tuple(s.states) for s in sets} == {tuple(s) for s in cold.additive_reversibilization().pcca(2).sets}


@st.composite
def reversible_chains(draw):
    n = draw(st.integers(3, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    W = rng.random((n, n)) ** 3
    W = W + W.T
    return W / W.sum(axis=1, keepdims=True), draw(st.integers(2, min(4, n)))


@settings(max_examples=40, deadline=None)
@given(reversible_chains())
def test_memberships_are_a_non_negative_partition_of_unity(case):
    P, m = case
    out = Chain(P).pcca(m)
    chi = out.memberships.value
    assert chi.shape == (P.shape[0], m)
    np.testing.assert_allclose(chi.sum(axis=1), 1.0, atol=1e-10)
    assert out.min_membership >= -1e-10
    np.testing.assert_allclose(out.coarse_matrix.value.sum(axis=1), 1.0, atol=1e-9)
    pc = out.coarse_stationary.value
    assert pc.sum() == pytest.approx(1.0, abs=1e-10) and np.all(np.diff(pc) <= 1e-15)
    assert 0 < out.crispness <= 1 + 1e-10


def test_bad_input_is_one_line():
    P, _ = block_uniform(SIZES, 1e-3)
    chain = Chain(P)
    for m in (0, 13, 2.5):
        with pytest.raises((ValueError, TypeError)) as err:
            chain.pcca(m)
        assert "\n" not in str(err.value) and "m (the number of PCCA+ sets)" in str(err.value)
    cycle = np.roll(np.eye(4), 1, axis=1) * 0.5 + np.eye(4) * 0.5
    with pytest.raises(ValueError, match="G-PCCA"):
        Chain(cycle).pcca(2)
    with pytest.raises(ValueError, match="irreducible"):
        Chain(sp.csr_array(np.eye(3))).pcca(2)


@pytest.mark.parametrize("block", [1, 7 * 50, 1 << 20])
def test_dirichlet_matrix_in_row_blocks_is_chi_t_d_i_minus_p_chi(block, monkeypatch):
    """E summed over off-diagonal entries, in row blocks of any size, dense or CSR, equals chi^T D (I - P) chi for
    a reversible P (chi^T D P chi is then symmetric)."""
    monkeypatch.setattr(pcca_module, "DIRICHLET_BLOCK", block)
    rng = np.random.default_rng(0)
    W = rng.random((50, 50))
    W = W + W.T
    P, pi, chi = W / W.sum(axis=1, keepdims=True), W.sum(axis=1) / W.sum(), rng.random((50, 3))
    expected = (chi.T * pi) @ (np.eye(50) - P) @ chi
    for M in (P, sp.csr_array(P)):
        np.testing.assert_allclose(pcca_module.dirichlet_matrix(M, pi, chi), expected, rtol=0, atol=1e-15)


def test_a_degenerate_simplex_is_refused_by_name():
    """Slow eigenvectors whose rows do not span an m-vertex simplex (fewer distinct slow states than sets):
    a NumericalError naming the cause, never an inverse of a singular matrix."""
    with pytest.raises(NumericalError, match="ask for fewer sets") as err:
        pcca_module.optimise(np.array([[1.0, 0.5]] * 3), np.array([True, False, False]))
    assert "\n" not in str(err.value)
