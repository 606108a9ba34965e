"""The quantity modules of ``theory/chain/`` see a chain through its public members and its
:class:`~mlmix.theory.chain.chain_facts.ChainFacts` only, and sit below it:

* no module of the room but ``markov_chain.py`` reads another object's private attribute (``chain._x``,
  ``core._x``, ``module._f``: any receiver but ``self`` and ``cls``) or an object's ``__dict__`` / ``vars()``;
* the room's import graph has no cycle: every import counts (module level, inside functions, under
  ``if TYPE_CHECKING:``) except the type-checking import of ``markov_chain`` that annotates ``chain: Chain``;
  so no quantity module the Chain rests on imports ``markov_chain`` at run time (only modules above it, such
  as ``shortcuts`` and ``operator_chain``, which build chains, do).

Checked on the source tree (no allow-list), each check shown able to fail on a planted case."""

import ast
import dataclasses

import numpy as np
import pytest
from chain_imports import ROOM, below_chain, cycle, graph, room_graph

from mlmix.theory.chain.chain_facts import ChainFacts
from mlmix.theory.chain.markov_chain import Chain


def _private_reads(source: str) -> list[str]:
    """The private-state reads of a module's source: ``x._name`` with x not self/cls, ``x.__dict__`` and
    ``vars(...)``, each as "line: expression"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            dunder = node.attr.startswith("__") and node.attr.endswith("__")
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if node.attr == "__dict__" or (node.attr.startswith("_") and not dunder and not own):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars":
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_quantity_module_reads_private_state():
    modules = sorted(p for p in ROOM.glob("*.py") if p.name != "markov_chain.py")
    assert len(modules) > 20
    reads = {p.name: r for p in modules if (r := _private_reads(p.read_text()))}
    assert not reads, f"private state read outside markov_chain.py: {reads}"


def test_the_check_catches_a_planted_read():
    assert _private_reads("def f(chain):\n    return chain._logpi\n") == ["2: chain._logpi"]
    assert _private_reads("def f(core):\n    return core.__dict__\n") == ["2: core.__dict__"]
    assert _private_reads("def f(chain):\n    return vars(chain)\n") == ["2: vars(chain)"]
    assert _private_reads("def f(chain):\n    return chain.facts.logpi, chain.stationary\n") == []


def test_the_facts_are_frozen_and_computed_once():
    chain = Chain(np.array([[0.9, 0.1], [0.2, 0.8]]))
    facts = chain.facts
    assert chain.facts is facts and isinstance(facts, ChainFacts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.given = np.array([0.5, 0.5])
    assert not chain.computed(("logpi",))
    np.testing.assert_allclose(np.exp(facts.logpi), [2 / 3, 1 / 3], rtol=1e-15)  # pi = (b, a) / (a + b)
    assert chain.computed(("logpi",)).keys() == {"logpi"} and facts.logpi is chain.facts.logpi


def test_the_room_has_no_import_cycle():
    g = room_graph()
    assert len(g) > 20 and "markov_chain" in g["shortcuts"]
    assert not cycle(g), f"import cycle in theory/chain: {' -> '.join(cycle(g))}"
    below = below_chain(g)
    assert {"stationary", "spectral", "chain_facts", "chain_summary"} <= below and "shortcuts" not in below
    back = sorted(m for m in below if "markov_chain" in g[m])
    assert not back, f"quantity modules importing markov_chain at run time: {back}"


def test_the_cycle_check_catches_a_planted_cycle():
    head = "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
    sources = {"markov_chain": "from mlmix.theory.chain import spectral\n",
               "spectral": head + "if TYPE_CHECKING:\n    from mlmix.theory.chain.markov_chain import Chain\n"}
    assert not cycle(graph(sources))  # the annotation of chain: Chain is the one edge allowed back
    sources["spectral"] += "def f():\n    from mlmix.theory.chain.markov_chain import Chain\n"
    assert cycle(graph(sources)) == ["markov_chain", "spectral", "markov_chain"]
    sources["spectral"] = head + "if TYPE_CHECKING:\n    from mlmix.theory.chain.mixing import X\n"
    sources["mixing"] = "from mlmix.theory.chain import spectral\n"
    assert cycle(graph(sources)) == ["spectral", "mixing", "spectral"]
