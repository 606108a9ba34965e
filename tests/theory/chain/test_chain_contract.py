"""The quantity modules of ``theory/chain/`` see a chain through its public members and its
:class:`~mlmix.theory.chain.chain_facts.ChainFacts` only, and sit below it:

* no module of the room but ``markov_chain.py`` reads another object's private attribute (``chain._x``,
  ``core._x``, ``module._f``: any receiver but ``self`` and ``cls``) or an object's ``__dict__`` / ``vars()``;
* the room's import graph has no cycle: every import counts (module level, inside functions, under
  ``if TYPE_CHECKING:``) except the type-checking import of ``markov_chain`` that annotates ``chain: Chain``,
  and only the facades above the Chain (``shortcuts``, ``operator_chain``) import ``markov_chain`` at all
  otherwise.

Checked on the source tree (no allow-list beyond those two facades), each check shown able to fail on a
planted case."""

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mlmix.theory.chain.chain_facts import ChainFacts
from mlmix.theory.chain.markov_chain import Chain

ROOM = Path(__file__).resolve().parents[3] / "theory" / "chain"
PACKAGE = "mlmix.theory.chain"
#: The modules above the Chain: they build chains, so they import markov_chain when imported.
FACADES = {"markov_chain", "shortcuts", "operator_chain"}


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


def _imports(source: str) -> list[tuple[str, bool]]:
    """The room's modules a source imports, each with whether the import is under ``if TYPE_CHECKING:``
    (imports inside functions count as run-time imports)."""
    tree = ast.parse(source)
    typing_only = {id(n) for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == PACKAGE:
                names = [a.name for a in node.names]
            elif node.module.startswith(PACKAGE + "."):
                names = [node.module.split(".")[3]]
            else:
                continue
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[3] for a in node.names if a.name.startswith(PACKAGE + ".")]
        else:
            continue
        found += [(name, id(node) in typing_only) for name in names]
    return found


def _graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the room's modules it imports, less the type-checking imports of markov_chain."""
    return {m: {t for t, typing_only in _imports(src) if t in sources and not (typing_only and t == "markov_chain")}
            for m, src in sources.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (depth-first search), or [] when it has none."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        path.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state and (found := visit(t)):
                return found
        state[m] = 2
        path.pop()
        return []

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return []


def test_the_room_has_no_import_cycle():
    sources = {p.stem: p.read_text() for p in ROOM.glob("*.py") if p.stem != "__init__"}
    graph = _graph(sources)
    assert len(graph) > 20 and "markov_chain" in graph["shortcuts"]
    assert not _cycle(graph), f"import cycle in theory/chain: {' -> '.join(_cycle(graph))}"
    above = {m for m, targets in graph.items() if "markov_chain" in targets}
    assert above <= FACADES, f"quantity modules importing markov_chain at run time: {sorted(above - FACADES)}"


def test_the_cycle_check_catches_a_planted_cycle():
    head = "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
    sources = {"markov_chain": "from mlmix.theory.chain import spectral\n",
               "spectral": head + "if TYPE_CHECKING:\n    from mlmix.theory.chain.markov_chain import Chain\n"}
    assert not _cycle(_graph(sources))  # the annotation of chain: Chain is the one edge allowed back
    sources["spectral"] += "def f():\n    from mlmix.theory.chain.markov_chain import Chain\n"
    assert _cycle(_graph(sources)) == ["markov_chain", "spectral", "markov_chain"]
    sources["spectral"] = head + "if TYPE_CHECKING:\n    from mlmix.theory.chain.mixing import X\n"
    sources["mixing"] = "from mlmix.theory.chain import spectral\n"
    assert _cycle(_graph(sources)) == ["spectral", "mixing", "spectral"]
