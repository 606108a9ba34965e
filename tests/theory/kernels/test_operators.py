"""Matrix-free kernels against the assembled CSR kernels (every kernel, both directions, every way of
getting the conditionals, both storage layouts), memory checks and bad input."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.errors import MemoryLimitError
from mlmix.theory.kernels.assembled import block_kernel, glauber_kernel, k_gibbs_kernel
from mlmix.theory.kernels.operators import kernel_operator, local_factors, log_joint_tensor
from mlmix.theory.kernels.representation import operator_memory
from mlmix.theory.sources.conditionals import (
    Conditionals,
    GibbsModel,
    IsingModel,
    LogWeightTable,
    PottsModel,
    ScoreTable,
    clique_ising,
)
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import memory_limit


class _OpaqueScores(Conditionals):
    """A source with neither a joint law nor a table (like an MLM): only batched scores."""

    def __init__(self, table: ScoreTable) -> None:
        super().__init__(table.space, table.temperature)
        self._inner = table

    def site_scores(self, contexts, site):
        return self._inner.site_scores(contexts, site)


class _QuadraticGibbs(GibbsModel):
    """A Gibbs model known only through log_weight (the chunked log-joint path)."""

    def __init__(self, space, W, temperature=1.0):
        super().__init__(space, temperature)
        self.W = W

    def log_weight(self, sequences):
        x = np.asarray(sequences, dtype=np.float64)
        return np.einsum("bi,ij,bj->b", x, self.W, x)


def _check_both_directions(op, P, seed=0):
    rng = np.random.default_rng(seed)
    f = rng.standard_normal(P.shape[0])
    mu = rng.random(P.shape[0])
    np.testing.assert_allclose(op.matvec(f), P @ f, rtol=0, atol=1e-13 * (1 + np.abs(f).max()))
    np.testing.assert_allclose(op.rmatvec(mu), P.T @ mu, rtol=0, atol=1e-13 * (1 + mu.max()))


SOURCES = [
    pytest.param(lambda: IsingModel(nx.cycle_graph(12), couplings=0.9, fields=0.3, beta=0.6), id="ising-cycle12"),
    pytest.param(lambda: IsingModel(nx.gnp_random_graph(9, 0.4, seed=1), couplings=-0.7, fields=0.2), id="ising-gnp"),
    pytest.param(lambda: clique_ising(7, [0, 2, 5], 0.4, 0.1), id="clique-ising"),
    pytest.param(lambda: PottsModel.random(nx.cycle_graph(6), 3, seed=3, temperature=0.8), id="potts-factors"),
    pytest.param(lambda: ScoreTable.random(3, 5, seed=4, temperature=0.6), id="score-table"),
    pytest.param(lambda: ScoreTable.random(2, 11, seed=5), id="score-table-rotated-layout"),
    pytest.param(lambda: _OpaqueScores(ScoreTable.random(3, 4, seed=6)), id="opaque-tabulated"),
    pytest.param(lambda: LogWeightTable.random(StateSpace(2, 11), seed=7, scale=2.0), id="log-weights-rotated"),
    pytest.param(lambda: _QuadraticGibbs(StateSpace(3, 5), np.random.default_rng(8).normal(size=(5, 5)) / 3),
                 id="gibbs-log-weight"),
]


@pytest.mark.parametrize("make", SOURCES)
def test_glauber_operator_equals_csr(make):
    src = make()
    _check_both_directions(kernel_operator(src, device="cpu"), glauber_kernel(src, max_states=10**6))


@pytest.mark.parametrize("make", [SOURCES[0], SOURCES[3], SOURCES[7], SOURCES[8]])
@pytest.mark.parametrize("k", [2, 3])
def test_k_gibbs_operator_equals_csr(make, k):
    src = make()
    _check_both_directions(kernel_operator(src, "k-gibbs", k, device="cpu"), k_gibbs_kernel(src, k, max_states=10**6))


@settings(max_examples=15)
@given(st.integers(2, 3), st.integers(2, 5), st.integers(0, 10**6), st.data())
def test_block_operator_equals_csr_on_random_blocks(q, n, seed, data):
    src = LogWeightTable.random(StateSpace(q, n), seed=seed, scale=1.5)
    sizes = data.draw(st.lists(st.integers(1, n), min_size=1, max_size=4))
    rng = np.random.default_rng(seed)
    blocks = [sorted(rng.choice(n, size=s, replace=False).tolist()) for s in sizes]
    blocks.append(list(range(n))[: max(1, n // 2)])
    blocks.append(list(range(n // 2, n)))
    w = rng.random(len(blocks))
    w /= w.sum()
    op = kernel_operator(src, "block", blocks=blocks, weights=w, device="cpu")
    _check_both_directions(op, block_kernel(src, blocks, w), seed)


@settings(max_examples=15)
@given(st.integers(2, 4), st.integers(1, 5), st.integers(0, 10**6), st.floats(0.3, 3.0))
def test_glauber_operator_equals_csr_on_random_score_tables(q, n, seed, T):
    src = ScoreTable.random(q, n, seed=seed, temperature=T, scale=2.0)
    _check_both_directions(kernel_operator(src, device="cpu"), glauber_kernel(src), seed)


@pytest.mark.parametrize("make", [SOURCES[0], SOURCES[3], SOURCES[7]])
def test_symmetric_operator_is_the_similarity_transform(make):
    """D^{1/2} P D^{-1/2} from square-rooted conditionals equals the matrix built from P and pi."""
    src = make()
    P = glauber_kernel(src)
    lw = src.log_joint()
    s = np.exp((lw - lw.max()) / 2)
    B = sp.diags_array(s) @ P @ sp.diags_array(1 / s)
    u = np.random.default_rng(0).standard_normal(P.shape[0])
    op = kernel_operator(src, device="cpu")
    np.testing.assert_allclose(op.symmetric_matvec(u), B @ u, atol=1e-13)
    assert op.reversible


@pytest.mark.parametrize("fuse, piece", [(2, 1), (8, 5), (64, 64), (1, 200), (64, 10**9)])
@pytest.mark.parametrize("make, kernel, k", [(SOURCES[0].values[0], "glauber", 1), (SOURCES[3].values[0], "k-gibbs", 3),
                                             (SOURCES[5].values[0], "glauber", 1), (SOURCES[7].values[0], "k-gibbs", 2)])
def test_passes_and_pieces_are_a_loop_reordering(monkeypatch, make, kernel, k, fuse, piece):
    """Applying block moves in passes (ops._FUSE) cut into cache-sized pieces (ops._PIECE entries)
    reorders the loops and nothing else: every move in exactly one pass, in order; every entry of a
    pass in exactly one piece; the three directions equal, bit for bit, one move at a time over the
    whole vector. With 3 Potts sites (k-Gibbs: a 27-slice fibre, summed by torch.sum, whose order of
    addition depends on the shape) they agree to a few units of rounding."""
    import mlmix.theory.kernels.operators as ops

    src = make()
    monkeypatch.setattr(ops, "_FUSE", 1)
    monkeypatch.setattr(ops, "_PIECE", 10**12)
    plain = kernel_operator(src, kernel, k, device="cpu")
    monkeypatch.setattr(ops, "_FUSE", fuse)
    monkeypatch.setattr(ops, "_PIECE", piece)
    cut = kernel_operator(src, kernel, k, device="cpu")
    assert all(len(p.members) == 1 and len(p.pieces) == 1 for lay in plain._passes for p in lay)
    assert [m.block for lay in cut._passes for p in lay for m in p.members] == \
        [b for lid in (0, 1) for b in cut.blocks if b.plan.layout == lid]
    if piece < plain.local_size // 2:
        assert any(len(p.pieces) > 1 for lay in cut._passes for p in lay)
    if piece >= plain.local_size:  # a vector of one piece: no gain from passes, one move each
        assert all(len(p.members) == 1 for lay in cut._passes for p in lay)
    elif fuse >= src.space.vocab_size ** (k + 1):  # two consecutive moves share k - 1 sites
        assert any(len(p.members) > 1 for lay in cut._passes for p in lay)
    for p in (p for lay in cut._passes for p in lay):
        seen = torch.zeros(p.shape, dtype=torch.int64)
        for sl, _ in p.pieces:
            seen[(slice(None),) * len(p.shape) if sl is None else sl] += 1
        assert bool((seen == 1).all())
    u = torch.from_numpy(np.random.default_rng(1).random(plain.local_size))
    summed = any(len(b.plan.fibre) > ops._SLICES for b in cut.blocks)
    for mode in ("functions", "measures", "symmetric"):
        a, b = cut.apply(u, mode), plain.apply(u, mode)
        assert torch.allclose(a, b, rtol=1e-14, atol=0) if summed else torch.equal(a, b)


def test_operator_preserves_constants_and_mass_in_float32():
    src = IsingModel(nx.cycle_graph(12), beta=0.5)
    op = kernel_operator(src, dtype="float32", device="cpu")
    one = torch.ones(op.local_size, dtype=torch.float32)
    assert op.matvec(one).dtype == torch.float32
    torch.testing.assert_close(op.matvec(one), one, atol=1e-6, rtol=0)
    mu = torch.rand(op.local_size, dtype=torch.float32)
    assert abs(float(op.rmatvec(mu).sum() / mu.sum()) - 1) < 1e-5


def test_local_factors_reproduce_the_log_weight():
    for src in (IsingModel(nx.cycle_graph(5), couplings=0.7, fields=[0.1, 0.0, -0.3, 0.2, 0.0], beta=1.3),
                PottsModel.random(nx.path_graph(4), 3, seed=2)):
        assert local_factors(src)
        lw, err = log_joint_tensor(src)
        np.testing.assert_allclose(lw.reshape(-1).numpy(), src.log_joint(), atol=1e-12)
        assert 0 < err < 1e-12
    assert local_factors(ScoreTable.random(2, 3, seed=0)) is None
    assert log_joint_tensor(ScoreTable.random(2, 3, seed=0)) is None


def test_table_operator_stores_n_times_states_numbers():
    """A score table costs n |V|^n conditionals against the N (n(|V|-1) + 1) non-zeros of CSR."""
    src = ScoreTable.random(5, 4, seed=0)
    op = kernel_operator(src, device="cpu")
    assert op.coefficient_bytes() == 8 * 4 * 5**4
    assert glauber_kernel(src).nnz == 5**4 * (4 * 4 + 1)
    local = kernel_operator(IsingModel(nx.cycle_graph(14)), device="cpu")
    assert local.coefficient_bytes() < 14 * 8 * 2**12  # |V|^(deg+1) per site, materialised to a short run


def test_memory_is_checked_before_allocating():
    src = IsingModel(nx.cycle_graph(30))  # 2^30 states: 160 GiB of vectors
    with pytest.raises(MemoryLimitError, match="matrix-free glauber"):
        kernel_operator(src, device="cpu")
    with memory_limit("100KiB"), pytest.raises(MemoryLimitError):
        kernel_operator(ScoreTable.random(4, 6, seed=0), device="cpu")
    assert operator_memory(StateSpace(2, 24), local_source=True, vectors=20) == 20 * 8 * 2**24


def test_bad_input():
    src = IsingModel(nx.cycle_graph(4))
    with pytest.raises(ValueError, match="kernel must be one of"):
        kernel_operator(src, "metropolis")
    with pytest.raises(ValueError, match="dtype must be one of"):
        kernel_operator(src, dtype="float16")
    with pytest.raises(TypeError, match="no joint law"):
        kernel_operator(ScoreTable.random(2, 3, seed=0), "k-gibbs", 2)
    with pytest.raises(ValueError, match="needs blocks"):
        kernel_operator(src, "block")
    with pytest.raises(ValueError, match="cover every site"):
        kernel_operator(src, "block", blocks=[[0, 1]])
    op = kernel_operator(src, device="cpu")
    with pytest.raises(ValueError, match="16 local states"):
        op.matvec(np.ones(15))
    with pytest.raises(ValueError, match="reversible"):
        kernel_operator(ScoreTable.random(2, 3, seed=0), device="cpu").symmetric_matvec(np.ones(8))


def test_representation_choice_by_size_and_memory():
    from mlmix.theory.kernels.representation import choose_representation, csr_memory

    assert choose_representation(StateSpace(2, 10))[0] == "dense"
    assert choose_representation(StateSpace(2, 16))[0] == "sparse"
    rep, why = choose_representation(StateSpace(2, 17))  # above SPARSE_AUTO_LIMIT = 2^16
    assert rep == "operator" and "65536: matrix-free" in why
    # by size and memory alone: a source without a joint law has no special case (pi is certified on both)
    with pytest.raises(TypeError):
        choose_representation(StateSpace(2, 17), joint=False)
    with memory_limit(csr_memory(StateSpace(2, 16)) - 1):
        rep, why = choose_representation(StateSpace(2, 16))
    assert rep == "operator" and "memory limit" in why
    assert choose_representation(StateSpace(2, 24), requested="sparse") == ("sparse", "requested")
    assert choose_representation(StateSpace(2, 4), "parallel")[0] == "dense"
    with pytest.raises(ValueError, match="no matrix-free operator"):
        choose_representation(StateSpace(2, 4), "parallel", requested="operator")
    with pytest.raises(ValueError, match="representation must be one of"):
        choose_representation(StateSpace(2, 4), requested="gpu")
