"""The representation of a chain is named in one place, :attr:`ChainFacts.representation`, and the quantity
modules converted to it dispatch on that name instead of re-deciding it from how P is held:

* the names per kind of chain: "dense" up to ``dense_limit`` states whether P is stored dense or CSR, "sparse"
  beyond, "operator" for a matrix-free kernel (a bare matrix as a MatrixOperator, a sampler's kernel on a
  source), each one of the held names of ``kernels.representation.REPRESENTATIONS``, and what
  ``Chain.representation`` and ``Chain.holds_matrix`` say;
* :attr:`ChainFacts.matrix_P`, P as a matrix: the chain's own array, or a matrix-free chain's matrix as CSR;
* no module of ``theory/chain/`` but the owners (:data:`OWNERS`) tests ``chain.op``, ``holds_matrix`` or
  ``is_dense`` to choose a route (a source check, no allow-list of quantity modules, shown able to fail on a
  planted branch)."""

import numpy as np
import pytest
import scipy.sparse as sp
from chain_imports import ROOM

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.representation import REPRESENTATIONS
from mlmix.theory.linalg.matrix_operator import MatrixOperator
from mlmix.theory.sources.conditionals import ScoreTable

#: Two-state chain with a = 0.1, b = 0.2: P = [[1 - a, a], [b, 1 - b]].
P2 = np.array([[0.9, 0.1], [0.2, 0.8]])

#: The modules that may read how a chain is held: the Chain, the facts that name its representation, and the
#: OperatorChain constructor (it asks ``self.op`` before its solver options are set, so before the facts
#: may be built).
OWNERS = ("markov_chain.py", "chain_facts.py", "operator_chain.py")

#: The ways of re-deciding the representation the converted modules no longer use.
REDECIDED = (".op is None", ".op is not None", "holds_matrix", ".is_dense")


CHAINS = {
    "dense array": (lambda: Chain(P2), "dense"),
    "CSR array within the dense limit": (lambda: Chain(sp.csr_array(P2)), "dense"),
    "dense array beyond the dense limit": (lambda: Chain(P2, dense_limit=1), "sparse"),
    "CSR array, dense limit 0": (lambda: Chain(sp.csr_array(P2), dense_limit=0), "sparse"),
    "MatrixOperator": (lambda: Chain(MatrixOperator(P2)), "operator"),
    "from_operator": (lambda: Chain.from_operator(MatrixOperator(sp.csr_array(P2))), "operator"),
}


def _from_source(rep: str) -> Chain:
    """The Glauber chain of a 2-symbol, 3-site source (8 states) held as ``rep``."""
    kw = {"device": "cpu"} if rep == "operator" else {}
    return Chain.from_source(ScoreTable.random(2, 3, seed=1), "glauber", representation=rep, **kw)


CHAINS.update({f"from_source, {rep}": (lambda rep=rep: _from_source(rep), rep) for rep in ("dense", "sparse", "operator")})


@pytest.mark.parametrize("kind", sorted(CHAINS))
def test_the_representation_names_per_kind_of_chain(kind):
    build, name = CHAINS[kind]
    chain = build()
    assert chain.facts.representation == name and name in REPRESENTATIONS and name != "auto"
    assert chain.representation == name and chain.holds_matrix == (name != "operator")


def test_the_matrix_routes_get_P_as_a_matrix():
    dense = Chain(P2)
    assert dense.facts.matrix_P is dense.P
    csr = Chain(sp.csr_array(P2), dense_limit=0)
    assert csr.facts.matrix_P is csr.P
    for op in (Chain(MatrixOperator(P2)), Chain.from_operator(MatrixOperator(sp.csr_array(P2)))):
        M = op.facts.matrix_P
        assert sp.issparse(M) and M.format == "csr"
        np.testing.assert_array_equal(M.toarray(), P2)


def _redecided(source: str) -> list[str]:
    """The lines of a module's source that re-decide the representation (:data:`REDECIDED`)."""
    return [f"{i}: {line.strip()}" for i, line in enumerate(source.splitlines(), 1)
            if any(needle in line for needle in REDECIDED)]


def test_no_quantity_module_re_decides_the_representation():
    modules = sorted(p for p in ROOM.glob("*.py") if p.name not in OWNERS)
    assert len(modules) > 20 and all((ROOM / name).exists() for name in OWNERS)
    found = {p.name: r for p in modules if (r := _redecided(p.read_text()))}
    assert not found, f"the representation re-decided outside ChainFacts: {found}"
    readers = [p.name for p in modules if "facts.representation" in (t := p.read_text()) or "facts.matrix_P" in t]
    assert len(readers) >= 17, readers


def test_the_source_check_catches_a_planted_branch():
    assert _redecided("def f(chain):\n    if chain.op is not None:\n        return 1\n") == [
        "2: if chain.op is not None:"]
    assert _redecided("P = chain.P if chain.holds_matrix else chain.to_scipy()\n") != []
    assert _redecided("if core.is_dense:\n    pass\n") == ["1: if core.is_dense:"]
    assert _redecided('if chain.facts.representation == "operator":\n    pass\n') == []
