"""Chain.from_source(representation=...) and `mlmix exact --representation`: the matrix-free chain
answers Chain's questions with the same numbers as the CSR chain, and says which representation
was used and why."""

import json
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

from mlmix.cli import main
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.operator_chain import OperatorChain
from mlmix.theory.kernels.representation import csr_memory
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable
from mlmix.validation import memory_limit


@pytest.mark.parametrize("make", [lambda: IsingModel(nx.cycle_graph(13), beta=0.6, fields=0.1),
                                  lambda: ScoreTable.random(3, 8, seed=2)])
def test_operator_chain_agrees_with_the_sparse_chain(make):
    src = make()
    sparse = Chain.from_source(src, representation="sparse")
    op = Chain.from_source(src, representation="operator", device="cpu")
    assert type(op) is Chain and op.representation == "operator"
    assert sparse.representation == "sparse"
    a, b = sparse.summary(), op.summary()
    assert set(a) <= set(b)
    assert b["representation"].startswith("matrix-free") and a["representation"].startswith("sparse")
    for key in ("additive_gap", "spectral_gap", "poincare_constant"):
        x, y = a[key], b[key]
        if x.value is None:
            assert y.value is None and y.reason
            continue
        assert y.lower <= x.value * (1 + 1e-9) and x.value <= y.upper * (1 + 1e-9)
    np.testing.assert_allclose(op.stationary.value, sparse.stationary.value, rtol=1e-9)
    assert b["conductance"].lower <= a["conductance"].upper and a["conductance"].lower <= b["conductance"].upper
    kem, kem_sparse = b["kemeny_constant"], a["kemeny_constant"]  # certified bounds, reversible or not
    assert kem.value is None and kem.reason and kem.lower is not None and kem.upper is not None
    assert kem.lower <= kem_sparse.upper and kem_sparse.lower <= kem.upper  # both contain K
    S = np.arange(src.space.size) % 3 == 0
    assert float(op.set_conductance(S)) == pytest.approx(float(sparse.set_conductance(S)), rel=1e-10)


def test_auto_goes_matrix_free_beyond_the_memory_limit():
    src = IsingModel(nx.cycle_graph(13), beta=0.5)
    assert Chain.from_source(src).representation == "sparse"
    with memory_limit(csr_memory(src.space) - 1):
        chain = Chain.from_source(src)
    assert chain.representation == "operator" and "memory limit" in chain.representation_reason
    with pytest.raises(TypeError, match="representation='operator' only"):
        Chain.from_source(src, representation="sparse", device="cpu")


def test_cli_representation_operator(capsys):
    assert main(["exact", "--graph", "cycle:12", "--representation", "operator", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["representation"].startswith("matrix-free operator")
    exact = (1 - np.tanh(1.0)) / 12
    assert report["spectral_gap"]["lower"] <= exact <= report["spectral_gap"]["upper"]
    assert main(["exact", "--graph", "cycle:12", "--representation", "operator", "--save-matrix", "x.npz"]) == 2
    assert "needs a matrix" in capsys.readouterr().err


def test_only_the_krylov_engine_imports_torch():
    """The dense path (2^11 states) never loads torch; the sparse one (2^13) runs the one Krylov engine,
    on torch tensors, like the operator."""
    for graph, loaded in (("cycle:11", "False"), ("cycle:13", "True")):
        code = ("import sys, io, contextlib; from mlmix.cli import main\n"
                f"with contextlib.redirect_stdout(io.StringIO()): main(['exact', '--graph', '{graph}', '--json'])\n"
                "print('torch' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == loaded, out.stderr[-300:]


def test_reversible_stationary_law_does_not_wait_for_the_gap():
    chain = OperatorChain.from_source(IsingModel(nx.cycle_graph(14), beta=0.5), device="cpu")
    pi = chain.stationary
    assert pi.rel_error < 1e-12 and not chain.computed(("operator_gap",))  # the gap was not computed
    assert abs(pi.value.sum() - 1) < 1e-12
