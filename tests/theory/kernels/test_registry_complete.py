"""A sampler is one module and one registry line: a kernel registered in a test (built from an existing
one) is what Chain.from_source (every representation), the memory estimates, the log off-diagonal
entries, the diagnostics' simulator, `mlmix exact --kernel NAME` (with paper G's constants where they
apply) and the docs table see; and the modules that once tested kernels by name carry no kernel name."""

import ast
import dataclasses
import json
import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.cli import main
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels import KERNELS
from mlmix.theory.kernels.registry import (
    _operator,
    check_kernel_options,
    kernel_names,
    kernels_table,
    simulated_from_conditionals,
)
from mlmix.theory.kernels.representation import choose_representation, csr_memory, operator_memory
from mlmix.theory.kernels.support import kernel_log_offdiagonal
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, ScoreTable
from mlmix.theory.sources.space import StateSpace

ROOT = Path(__file__).resolve().parents[3]

#: The modules whose per-kernel decisions moved into the registry entries: none may name a kernel.
MODULES = ["theory/kernels/support.py", "theory/kernels/representation.py", "theory/kernels/operators.py",
           "theory/chain/markov_chain.py", "theory/chain/chain_facts.py", "theory/chain/underflow.py",
           "mlmix/commands/exact.py", "mlmix/commands/distributed.py", "mlmix/commands/source_options.py", "mlmix/commands/diagnose.py",
           "empirical/sampling/convergence.py"]


def _ising() -> IsingModel:
    return IsingModel(nx.path_graph(4), couplings={(0, 1): 0.7, (1, 2): -0.4, (2, 3): 0.2},
                      fields=[0.3, -0.2, 0.5, 0.0], beta=1.0)


@pytest.fixture
def copy(monkeypatch):
    """'heat-bath': Glauber dynamics under another name, with its own operator builder."""
    spec = dataclasses.replace(KERNELS["glauber"], name="heat-bath", build_operator=_operator("heat-bath"),
                               doc="Glauber again, under another name", title=lambda s, o: "heat-bath copy")
    monkeypatch.setitem(KERNELS, "heat-bath", spec)
    return spec


@pytest.fixture
def blocks3(monkeypatch):
    """'triples': 3-Gibbs as a kernel of its own (k fixed by its builders), with k-Gibbs' range check."""
    kg = KERNELS["k-gibbs"]
    spec = dataclasses.replace(
        kg, name="triples", options={}, doc="3-Gibbs", title=lambda s, o: "3-Gibbs",
        build_dense=lambda s: kg.build_dense(s, k=3), build_csr=lambda s: kg.build_csr(s, k=3),
        build_operator=lambda s, k=3, **o: _operator("k-gibbs")(s, 3, **o),
        support=lambda s: kg.support(s, k=3), blocks=lambda n, k: kg.blocks(n, 3),
        nnz=lambda space: kg.nnz(space, k=3), check=None)
    monkeypatch.setitem(KERNELS, "triples", spec)
    return spec


def test_a_registered_kernel_is_a_chain_in_every_representation(copy):
    src = _ising()
    G = Chain.from_source(src, "glauber")
    dense = Chain.from_source(src, "heat-bath")
    assert dense.kernel == "heat-bath" and dense.kernel_spec is copy
    assert np.array_equal(dense.to_dense(), G.to_dense())
    op = Chain.from_source(src, "heat-bath", representation="operator")
    assert op.representation == "operator" and not op.holds_matrix and dense.holds_matrix
    assert op.spectral_gap.value == pytest.approx(G.spectral_gap.value, rel=1e-9)
    # the operator of the copy is the single-site one, from the conditionals (no joint law read)
    assert "model's factors" in op.op.description
    # back to a matrix: the CSR chain of the same kernel
    assert np.allclose(op.facts.matrix.to_dense(), G.to_dense(), rtol=0, atol=1e-15)


def test_a_registered_kernel_has_the_memory_estimates_of_its_entry(copy, blocks3):
    space = StateSpace(2, 12)
    assert operator_memory(space, "heat-bath") == operator_memory(space, "glauber")
    assert csr_memory(space, "heat-bath") == csr_memory(space, "glauber")
    # 3-Gibbs: C(12, 3) = 220 blocks of N stored conditionals; C(12, 3) N 2^3 non-zeros before merging
    N = space.size
    assert operator_memory(space, "triples") == 8 * (20 * N + 220 * N)
    assert operator_memory(space, "triples") == operator_memory(space, "k-gibbs", 3)
    nnz = 220 * N * 8
    assert csr_memory(space, "triples") == max(24 * nnz, 12 * nnz + 8 * (3 * nnz + 30 * N))
    assert choose_representation(space, "triples", requested="auto", dense_limit=10)[0] in ("sparse", "operator")


def test_a_registered_block_kernel_runs_matrix_free(blocks3):
    src = _ising()
    dense = Chain.from_source(src, "triples")
    ref = Chain.from_source(src, "k-gibbs", k=3)
    assert np.array_equal(dense.to_dense(), ref.to_dense())
    op = Chain.from_source(src, "triples", representation="operator")
    assert op.spectral_gap.value == pytest.approx(ref.spectral_gap.value, rel=1e-9)


def test_a_registered_kernel_reaches_the_log_entries_and_the_simulator(copy, blocks3):
    src = _ising()
    assert np.array_equal(kernel_log_offdiagonal(src, "heat-bath"), kernel_log_offdiagonal(src, "glauber"))
    assert kernel_log_offdiagonal(src, "triples") is None
    assert simulated_from_conditionals("heat-bath") and not simulated_from_conditionals("triples")
    assert simulated_from_conditionals("mh-logit") is False and simulated_from_conditionals("matrix") is False


def test_option_ranges_are_the_entries():
    space = StateSpace(2, 4)
    with pytest.raises(ValueError, match=r"^--k must lie in 1\.\.n = 4, got 5$"):
        check_kernel_options(space, "k-gibbs", "--", k=5)
    check_kernel_options(space, "glauber", "--", k=5)  # glauber takes no k: nothing to check
    for representation in ("dense", "operator"):  # each builder checks, the operator through the entry
        with pytest.raises(ValueError, match=r"^k must lie in 1\.\."):
            Chain.from_source(_ising(), "k-gibbs", k=0, representation=representation)


def _exact(capsys, *argv):
    status = main(["exact", "--model", "ising", "--graph", "path:4", "--beta", "1", "--json", "--no-progress",
                   *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_mlmix_exact_offers_a_registered_kernel(copy, capsys):
    status, out, err = _exact(capsys, "--kernel", "heat-bath")
    assert status == 0, err
    report = json.loads(out)
    status, ref_out, _ = _exact(capsys, "--kernel", "glauber")
    ref = json.loads(ref_out)
    assert "heat-bath copy" in report["chain"]
    assert report["spectral_gap"]["value"] == ref["spectral_gap"]["value"]
    # paper G's constants: the entry says it is the single-site heat-bath chain
    assert report["paper_g"]["rho"] == ref["paper_g"]["rho"]
    assert "heat-bath" in kernel_names()
    assert "| heat-bath | `mlmix exact --kernel heat-bath` |" in kernels_table()


def test_mlmix_exact_gives_paper_g_only_where_the_entry_says(blocks3, capsys):
    status, out, err = _exact(capsys, "--kernel", "triples")
    assert status == 0, err
    report = json.loads(out)
    assert "paper_g" not in report and "acceptance_rate" not in report
    status, out, err = _exact(capsys, "--kernel", "mh", "--energy", "pll")
    assert status == 0, err
    assert "acceptance_rate" in json.loads(out)  # the mh entry's figures


def test_an_unknown_kernel_is_refused_in_one_line(capsys):
    status, _, err = _exact(capsys, "--kernel", "heat-bath")
    assert status == 2 and len(err.strip().splitlines()) == 1 and "heat-bath" in err


def _kernel_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the string constants (docstrings aside) that name a registered kernel."""
    names = set(kernel_names()) | set(KERNELS)
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and node.value in names]


@pytest.mark.parametrize("module", MODULES)
def test_no_kernel_is_tested_by_name(module):
    """The per-kernel facts live in the registry entries: these modules read an entry, never a name."""
    assert _kernel_literals(ROOT / module) == []


def test_the_literal_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""doc naming glauber"""\ndef f(kernel):\n    """glauber"""\n    return kernel == "mh-pll"\n')
    assert _kernel_literals(bad) == [(4, "mh-pll")]


@pytest.mark.parametrize("module", sorted((ROOT / "mlmix" / "commands").glob("*.py")), ids=lambda p: p.name)
def test_commands_have_no_representation_branches(module):
    """How a chain is held, and what kind of source it is, are the library's to decide (Chain.holds_matrix,
    the sources' capabilities, the registry entries): the commands test neither."""
    text = module.read_text()
    for needle in ("is_operator", "isinstance(source", ".representation ==", ".representation !=",
                   "representation in", ".op.", ".op is"):
        assert needle not in text, f"{module.name}: {needle}"


@settings(max_examples=25, deadline=None)
@given(q=st.integers(2, 4), n=st.integers(1, 4), k=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_entry_sizes_are_the_built_matrices(q, n, k, seed):
    """The entries' CSR sizes against the matrices built: Glauber's N (n (|V| - 1) + 1) is its exact
    non-zero count on positive conditionals, k-Gibbs' C(n, k) N |V|^k bounds its count (blocks share
    moves); the operator's stored conditionals are one |V|^n vector per block."""
    k = min(k, n)
    src = ScoreTable.random(q, n, seed=seed)
    space = src.space
    N = space.size
    G = KERNELS["glauber"]
    assert G.nnz(space) == G.build_csr(src).nnz
    lw = LogWeightTable.random(space, seed=seed)
    kg = KERNELS["k-gibbs"]
    assert kg.build_csr(lw, k=k).nnz <= kg.nnz(space, k=k)
    blocks = {"glauber": n, "k-gibbs": math.comb(n, k)}
    for name, count in blocks.items():
        assert operator_memory(space, name, k, vectors=0) == 8 * count * N
        assert len(KERNELS[name].blocks(n, k)) == count
