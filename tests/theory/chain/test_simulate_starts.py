"""Chain.simulate's start states: one index for every chain, or a list of one per chain (the count of
chains then follows from the list); any other list is refused with one line, never broadcast."""

import networkx as nx
import numpy as np
import pytest

from mlmix import Chain
from mlmix.errors import InputTypeError, InputValueError
from mlmix.theory.sources.conditionals import IsingModel

P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.25, 0.25, 0.5]])


def test_a_start_list_sets_the_number_of_chains():
    chain = Chain(P)
    x = chain.simulate(5, start=[1, 2])
    assert x.shape == (2, 6) and x[:, 0].tolist() == [1, 2]
    assert np.array_equal(x, chain.simulate(5, start=[1, 2], chains=2))  # the same run as with chains given
    assert chain.simulate(5, start=2).shape == (1, 6)
    assert (chain.simulate(5, start=2, chains=3)[:, 0] == 2).all()
    frozen = Chain(np.eye(3)).simulate(4, start=np.array([2, 0, 1]))
    assert (frozen == np.array([[2] * 5, [0] * 5, [1] * 5])).all()


@pytest.mark.parametrize("start, chains, error, words", [
    ([1, 2], 3, InputValueError, "2 start states for chains=3"),
    ([1, 2, 0], 2, InputValueError, "3 start states for chains=2"),
    ([[0, 1]], None, InputValueError, "1-d"),
    ([], None, InputValueError, "1-d"),
    ([0, 3], None, InputValueError, r"\[0, 3\)"),
    ([-1], None, InputValueError, r"\[0, 3\)"),
    ([0.0, 1.0], None, InputTypeError, "state indices"),
    ([True, False], None, InputTypeError, "state indices"),
])
def test_a_start_that_does_not_fit_is_one_line(start, chains, error, words):
    with pytest.raises(error, match=words) as info:
        Chain(P).simulate(5, start=start, chains=chains)
    assert "\n" not in str(info.value)


def test_the_matrix_free_chain_takes_the_same_starts():
    source = IsingModel(nx.cycle_graph(3), beta=0.3)
    dense = Chain.from_source(source)
    op = Chain.from_source(source, representation="operator")
    assert np.array_equal(op.simulate(7, start=[1, 5], seed=3), dense.simulate(7, start=[1, 5], seed=3))
    with pytest.raises(InputValueError, match="2 start states for chains=4"):
        op.simulate(7, start=[1, 5], chains=4)
