"""The sampler registries (KERNELS, DECODERS) and the sources' declared capabilities: every kernel's
dense, CSR and matrix-free builds are one matrix; its reversibility flag is true (detailed balance) or
false (a source that breaks it); a kernel or decoder registered in a test is what Chain.from_source and
decoder_law run; the docs tables are the registries'; the capabilities agree with the classes."""

from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels import DECODERS, KERNELS, DecoderSpec, KernelSpec
from mlmix.theory.kernels.decoders import _block_moves, check_schedule, decoder_law, decoders_table
from mlmix.theory.kernels.registry import kernel_names, kernels_table, resolve_kernel
from mlmix.theory.kernels.representation import operator_kernel_names
from mlmix.theory.kernels.scan_and_mh import Truncated
from mlmix.theory.sources.conditionals import (
    GibbsModel,
    IsingModel,
    LogWeightTable,
    PottsModel,
    ScoreTable,
    clique_ising,
)
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.space import StateSpace

DOCS = Path(__file__).resolve().parents[3] / "docs"

#: Non-default options, so that a builder that ignored its options would build another matrix.
OPTIONS = {"k-gibbs": {"k": 2}, "systematic": {"order": "2 0 1"}, "mh": {"energy": "pll"}}


def _ising() -> IsingModel:
    """A compatible source with a field and unequal couplings (no symmetry hides a wrong entry)."""
    return IsingModel(nx.path_graph(3), couplings={(0, 1): 0.7, (1, 2): -0.4}, fields=[0.3, -0.2, 0.5], beta=1.0)


@pytest.mark.parametrize("name", list(KERNELS))
def test_every_kernel_builds_one_matrix_dense_csr_and_matrix_free(name):
    spec, src = KERNELS[name], _ising()
    options = OPTIONS.get(name, {})
    dense = spec.build_dense(src, **options)
    csr = spec.build_csr(src, **options)
    assert isinstance(dense, np.ndarray) and sp.issparse(csr)
    assert np.allclose(dense.sum(axis=1), 1.0, atol=1e-14)
    assert np.array_equal(dense, csr.toarray())
    assert np.array_equal(np.asarray(spec.build(src, **options).todense() if spec.assembled == "csr"
                                     else spec.build(src, **options)), dense)
    if spec.build_operator is not None:
        op = spec.build_operator(src, **options, device="cpu")
        columns = np.stack([np.asarray(op.matvec(e)) for e in np.eye(src.space.size)], axis=1)
        assert np.allclose(columns, dense, rtol=0, atol=1e-14)
    assert (spec.build_operator is not None) == (name in operator_kernel_names())


def _detailed_balance_defect(P: np.ndarray) -> float:
    pi = np.asarray(Chain(P).stationary.value)
    flow = pi[:, None] * P
    return float(np.abs(flow - flow.T).max())


@pytest.mark.parametrize("name", list(KERNELS))
def test_the_reversibility_flag_is_true(name):
    """reversible=True: detailed balance on compatible sources; False: a compatible source breaks it (the
    parallel sampler of a pairwise model is reversible, Little's dynamics: a joint with a three-site
    interaction, the random log-weight table, is needed)."""
    spec = KERNELS[name]
    sources = [_ising(), clique_ising(3, range(3), 0.8, 0.3),
               PottsModel.random(nx.path_graph(3), 2, seed=1, coupling_scale=1.5),
               LogWeightTable.random(StateSpace(2, 3), seed=0)]
    defects = [_detailed_balance_defect(spec.build_dense(src, **OPTIONS.get(name, {}))) for src in sources]
    if spec.reversible:
        assert max(defects) < 1e-12
    else:
        assert max(defects) > 1e-6


def test_resolve_kernel_names_and_options():
    assert kernel_names() == ("glauber", "k-gibbs", "parallel", "systematic", "mh-logit", "mh-pll")
    assert resolve_kernel("mh-pll")[1:] == ("mh-pll", {"energy": "pll"})
    assert resolve_kernel("mh", energy="pll")[1:] == ("mh-pll", {"energy": "pll"})
    assert resolve_kernel("k-gibbs", k=None, order="0 1")[1:] == ("k-gibbs", {"k": 2})
    assert resolve_kernel("k-gibbs", k=3)[2] == {"k": 3}
    for bad in ("gibbs", "mh-energy", "mh-", "k"):
        with pytest.raises(ValueError, match="kernel must be one of"):
            resolve_kernel(bad)
        with pytest.raises(ValueError, match="kernel must be one of"):
            Chain.from_source(_ising(), bad)


def test_a_registered_kernel_is_what_chain_from_source_runs(monkeypatch):
    """One registry line makes a sampler: the lazy chain (stay with probability 1/2, else Glauber)."""
    glauber = KERNELS["glauber"]

    def lazy(source, stay=0.5):
        P = glauber.build_csr(source)
        return (stay * sp.eye_array(P.shape[0]) + (1 - stay) * P).tocsr()

    spec = KernelSpec("lazy", lambda s, **o: lazy(s, **o).toarray(), lazy, None, {"stay": 0.5}, True,
                      "lazy Glauber", lambda s, o: "lazy Glauber")
    monkeypatch.setitem(KERNELS, "lazy", spec)
    src = _ising()
    chain = Chain.from_source(src, "lazy")
    assert chain.kernel == "lazy"
    G = Chain.from_source(src, "glauber")
    # a lazy chain's gap is half the chain's: 1 - (1/2 + 1/2 lambda_2) = (1 - lambda_2) / 2
    assert chain.spectral_gap.value == pytest.approx(G.spectral_gap.value / 2, rel=1e-12)
    assert "lazy" in kernel_names() and "lazy" in kernels_table()


def test_a_registered_decoder_is_what_decoder_law_runs(monkeypatch):
    """right-to-left, declared by one registry line, is left-to-right in the reversed order."""

    def prepare(space, params):
        return {**params, "blocks": check_schedule(space, [(s,) for s in reversed(range(space.length))])}

    spec = DecoderSpec("right-to-left", {}, "one position at a time, last first", _block_moves,
                       lambda n, p, v: n, lambda p: "right-to-left", prepare=prepare)
    monkeypatch.setitem(DECODERS, "right-to-left", spec)
    table = PartialScoreTable.random(2, 3, seed=4)
    law = decoder_law(table, "right-to-left")
    reference = decoder_law(table, "left-to-right", order="2 1 0")
    assert np.array_equal(law.law, reference.law) and law.steps == 3
    assert not np.allclose(law.law, decoder_law(table, "left-to-right").law)  # the order matters here
    assert "right-to-left" in decoders_table()


def test_docs_tables_are_the_registries():
    text = (DOCS / "samplers.md").read_text()
    assert kernels_table() in text
    assert decoders_table() in text


def _sources():
    ising = _ising()
    return [ising, PottsModel.random(nx.path_graph(3), 3, seed=0), clique_ising(4, range(3), 0.5, 0.1),
            LogWeightTable.random(StateSpace(2, 3), seed=0), ScoreTable.random(2, 3, seed=0),
            PartialScoreTable.random(2, 3, seed=0), Truncated(ising, top_k=1), Truncated(ScoreTable.random(3, 2), 2)]


@pytest.mark.parametrize("src", _sources(), ids=lambda s: type(s).__name__)
def test_capabilities_agree_with_the_classes(src):
    """What the isinstance tests used to say, now declared by the source."""
    assert src.has_joint == isinstance(src, GibbsModel) == (src.log_joint() is not None)
    assert src.has_table == isinstance(src, ScoreTable)
    assert src.partial_conditionals == isinstance(src, PartialScoreTable)
    factors = src.local_factors()
    assert (factors is not None) == isinstance(src, (IsingModel, PottsModel))
    if factors is not None:  # w(x) = sum_f table_f[x_axes], against log_weight
        states = src.space.all_states()
        w = sum(table[tuple(states[:, list(axes)].T)] for axes, table in factors)
        assert np.allclose(w, src.log_weight(states), rtol=0, atol=1e-13)
    table = src.score_table()
    assert (table is src) == src.has_table
    ctx = src.space.all_states()
    for i in range(src.space.length):
        assert np.array_equal(table.scores(ctx, i), src.scores(ctx, i))


def test_a_subclass_with_its_own_log_weight_declares_no_factors():
    class Shifted(IsingModel):
        def log_weight(self, sequences):
            return super().log_weight(sequences) + sequences[:, 0]

    assert Shifted(nx.path_graph(3), beta=1.0).local_factors() is None
