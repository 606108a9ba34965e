"""The quantity modules of ``theory/chain/`` see a chain through its public members and its
:class:`~mlmix.theory.chain.chain_facts.ChainFacts` only: no module of the room but ``markov_chain.py``
reads another object's private attribute (``chain._x``, ``core._x``, ``module._f``: any receiver but
``self`` and ``cls``) or an object's ``__dict__`` / ``vars()``. Checked on the source tree (no allow-list),
and shown able to fail on a planted read."""

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mlmix.theory.chain.chain_facts import ChainFacts
from mlmix.theory.chain.markov_chain import Chain

ROOM = Path(__file__).resolve().parents[3] / "theory" / "chain"


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
