"""One Chain class: ``Chain`` holds a matrix or a matrix-free kernel, and each quantity module picks the
algorithm; the chain module does not import the matrix-free package (no import cycle)."""

import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
import torch
from chain_representations import REPRESENTATIONS, chain_in
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.operator_chain import OperatorChain
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.kernels.operators import kernel_operator
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable

torch.set_num_threads(1)


def test_from_source_needs_no_matrix_free_package():
    code = ("import sys, networkx as nx\n"
            "from mlmix.theory.chain.markov_chain import Chain\n"
            "from mlmix.theory.sources.conditionals import IsingModel\n"
            "c = Chain.from_source(IsingModel(nx.cycle_graph(5), beta=0.3), representation='operator', device='cpu')\n"
            "print(c.spectral_gap.resolved, 'mlmix.theory.chain.operator_chain' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "False"], out.stderr[-300:]


def test_chain_of_an_operator_is_the_operator_chain():
    op = kernel_operator(ScoreTable.random(2, 6, seed=3, scale=1.5), device="cpu")
    a, b = Chain(op), OperatorChain(op)
    assert type(a) is Chain and a.representation == b.representation == "operator"
    for key in ("additive_gap", "conductance", "kemeny_constant"):
        ra, rb = getattr(a, key), getattr(b, key)
        assert (ra.value, ra.lower, ra.upper, ra.method) == (rb.value, rb.lower, rb.upper, rb.method)
    np.testing.assert_array_equal(a.stationary.value, b.stationary.value)


def test_matrix_options_on_an_operator_are_a_one_line_type_error():
    op = kernel_operator(IsingModel(nx.cycle_graph(4), beta=0.3), device="cpu")
    with pytest.raises(TypeError, match="options of a matrix"):
        Chain(op, dense_limit=10)
    with pytest.raises(TypeError, match="needs a TransitionOperator"):
        Chain.from_operator(np.eye(2))


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), target=st.integers(0, 31))
def test_hitting_times_agree_on_the_operator_and_the_matrix(rep, seed, target):
    """E_x tau_A from the chain of the source in each representation (the operator's certified Krylov
    solve included) lies within its stated entrywise bound of the dense chain's subtraction-free
    elimination of the assembled matrix (both through Chain.hitting_time)."""
    src = ScoreTable.random(2, 5, seed=seed, scale=1.0)
    dense = Chain(glauber_kernel(src).toarray()).hitting_time([target])
    op = chain_in(rep, source=src).hitting_time([target])
    assert op.rel_error is not None and op.rel_error < 1e-8
    np.testing.assert_allclose(op.value, dense.value, rtol=op.rel_error + (dense.rel_error or 0) + 1e-15, atol=0)
