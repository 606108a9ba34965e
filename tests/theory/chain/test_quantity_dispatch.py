"""Each quantity chooses its algorithm in its own module: the public ``chain_*`` function of a quantity
module gives the same answer as the :class:`Chain` member that delegates to it, on dense, CSR and
matrix-free chains of a small reversible and a small non-reversible source, on a metastable chain whose
law is charged, and on random matrices (Hypothesis); and no quantity module imports ``markov_chain``
when it is imported (the Chain sits above the quantities)."""

import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from chain_imports import below_chain, room_graph
from chain_representations import REPRESENTATIONS, chain_in
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mlmix.theory.chain import absorbing, conductance, nonreversible_gap, spectral, spectrum, stationary
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.results import Result, VectorResult, renamed
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable

torch.set_num_threads(1)

#: (name, the module function, the Chain member as a function of the chain): every quantity whose
#: choice of algorithm moved out of Chain.
QUANTITIES = [
    ("reversible", stationary.chain_is_reversible, lambda c: c.is_reversible),
    ("stationary", stationary.chain_stationary, lambda c: c.stationary),
    ("stationary law used", stationary.chain_stationary_law, lambda c: c.facts.stationary_law),
    ("pi error", stationary.chain_pi_error, lambda c: c.facts.pi_error),
    ("unrounded gap", spectral.chain_unrounded_gap, lambda c: c.facts.unrounded_gap_and_mode),
    ("gap", spectral.chain_gap, lambda c: c.facts.gap_and_mode),
    ("spectral gap", spectral.chain_spectral_gap, lambda c: c.spectral_gap),
    ("multiplicative gap", spectral.chain_multiplicative_gap, lambda c: c.multiplicative_gap),
    ("absolute gap", nonreversible_gap.chain_absolute_gap, lambda c: c.absolute_spectral_gap),
    ("conductance", conductance.chain_conductance, lambda c: c.conductance),
    ("eigenvalues", lambda c: spectrum.chain_eigenvalues(c, 2), lambda c: c.eigenvalues(2)),
    ("stationary laws", absorbing.chain_stationary_distributions, lambda c: c.stationary_distributions()),
    ("absorption", absorbing.chain_absorption, lambda c: c.facts.absorption),
]

SOURCES = {
    "reversible": lambda: IsingModel(nx.cycle_graph(4), beta=0.7),
    "non-reversible": lambda: ScoreTable.random(3, 3, seed=2, scale=1.5),
}


def _same(a, b) -> None:
    """Equal to the last bit: value, enclosure, accuracy, method and reason (vectors entrywise)."""
    if isinstance(a, tuple):
        assert type(b) is tuple and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, Result):
        assert a.name == b.name
        _same(a.as_dict(), b.as_dict())
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), (a, b)
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, VectorResult):
        assert (a.name, a.method, a.rel_error, a.abs_error, a.residual) == (b.name, b.method, b.rel_error,
                                                                             b.abs_error, b.residual)
        np.testing.assert_array_equal(np.asarray(a.value), np.asarray(b.value))
    elif isinstance(a, absorbing.Absorption):
        np.testing.assert_array_equal(a.transient, b.transient)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b or (a != a and b != b), (a, b)  # NaN equals NaN here


def _answer(compute, chain):
    """The answer, or the one-line error's type and message."""
    try:
        return compute(chain)
    except (ValueError, TypeError, ArithmeticError) as err:
        return type(err).__name__, str(err)


@pytest.mark.parametrize("kind", sorted(SOURCES))
@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_each_function_answers_as_the_member(rep, kind):
    """Two chains of the same source held the same way: one asked through the member, the other through
    the module function, in the same order (so both see the same cached figures)."""
    member_chain = chain_in(rep, source=SOURCES[kind]())
    function_chain = chain_in(rep, source=SOURCES[kind]())
    assert member_chain.is_reversible == (kind == "reversible")
    for name, function, member in QUANTITIES:
        _same(_answer(member, member_chain), _answer(function, function_chain))
    S = np.arange(member_chain.n_states) < 4
    _same(member_chain.set_conductance(S), conductance.chain_set_conductance(function_chain, S))
    f = np.cos(np.arange(member_chain.n_states))
    assert member_chain.dirichlet_form(f) == spectral.chain_dirichlet_form(function_chain, f)
    assert member_chain.dirichlet_form(f, f**2) == spectral.chain_dirichlet_form(function_chain, f, f**2)


def _metastable_rotation(n: int, eps: float) -> np.ndarray:
    """A non-reversible chain on n states: rotate forward with probability 1/2, back with eps."""
    P = np.zeros((n, n))
    for x in range(n):
        P[x, (x + 1) % n] = 0.5
        P[x, (x - 1) % n] = eps
        P[x, x] = 0.5 - eps
    return P


@pytest.mark.parametrize("rep", ["dense", "csr"])
def test_charged_routes_on_a_non_reversible_matrix(rep):
    """A CSR chain above the dense limit takes the Krylov law, so pi's error is charged into the gap
    and the conductance: the charged routes give the member's answer too."""
    P = _metastable_rotation(12, 1e-3)
    member_chain, function_chain = chain_in(rep, P), chain_in(rep, P)
    for name, function, member in QUANTITIES:
        _same(_answer(member, member_chain), _answer(function, function_chain))


def test_several_closed_classes_with_a_given_law():
    """Two closed classes and a positive given law: the gaps and the conductance are exactly 0 by the
    same route through the function as through the member."""
    P = sp.block_diag([np.array([[0.5, 0.5], [0.5, 0.5]])] * 2).toarray()
    pi = np.full(4, 0.25)
    for name, function, member in QUANTITIES[:10]:
        _same(_answer(member, Chain(P, stationary=pi)), _answer(function, Chain(P, stationary=pi)))
    assert conductance.chain_conductance(Chain(P, stationary=pi)).value == 0.0


@settings(max_examples=15, deadline=None)
@given(arrays(np.float64, (5, 5), elements=st.floats(0.01, 1.0)), st.booleans())
def test_random_matrices(weights, symmetric):
    """Random positive chains on 5 states (reversible when the weights are symmetric): every function
    equals its member, and the stationary law solves pi P = pi to its stated accuracy."""
    W = (weights + weights.T) / 2 if symmetric else weights
    P = W / W.sum(axis=1, keepdims=True) / 2
    np.fill_diagonal(P, 0.0)
    np.fill_diagonal(P, 1.0 - P.sum(axis=1))
    a, b = Chain(P), Chain(P)
    a.progress = b.progress = False
    for name, function, member in QUANTITIES:
        _same(_answer(member, a), _answer(function, b))
    pi = stationary.chain_stationary(Chain(P))
    assert np.abs(pi.value @ P - pi.value).max() <= 1e-12


#: Every module of the room that does not itself import markov_chain at run time (all the quantity modules,
#: :func:`chain_imports.below_chain`; not the modules above the Chain that build chains, such as shortcuts).
MODULES = sorted(m for m, targets in room_graph().items() if m != "markov_chain" and "markov_chain" not in targets)


def test_quantity_modules_do_not_import_the_chain():
    """Importing a quantity module alone leaves markov_chain unimported (type hints only)."""
    code = ("import sys, importlib\n"
            f"for m in {MODULES!r}:\n"
            "    importlib.import_module('mlmix.theory.chain.' + m)\n"
            "print('mlmix.theory.chain.markov_chain' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert below_chain(room_graph()) <= set(MODULES)


@settings(max_examples=30, deadline=None)
@given(st.floats(1e-300, 1.0), st.floats(0.0, 0.5), st.text(max_size=8))
def test_renamed_keeps_the_numbers(value, rel, note):
    """results.renamed: another name and the note appended; value, enclosure, reason and details kept."""
    r = Result("gap", value, "method", rel, value * (1 - rel), value * (1 + rel), None, {"k": 1})
    out = renamed(r, "absolute spectral gap", note)
    assert (out.name, out.method) == ("absolute spectral gap", "method" + note)
    assert (out.value, out.rel_error, out.lower, out.upper, out.reason, out.details) == (
        r.value, r.rel_error, r.lower, r.upper, r.reason, r.details)
    assert out.details is not r.details
