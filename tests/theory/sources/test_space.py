"""V^n indexing: mixed radix with site 0 most significant, neighbours, Hamming distance, bad input."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.sources.space import StateSpace

spaces = st.builds(StateSpace, st.integers(2, 4), st.integers(1, 4))


@settings(max_examples=25)
@given(spaces)
def test_index_order_is_lexicographic_and_round_trips(space):
    states = space.all_states()
    expected = np.array(list(itertools.product(range(space.vocab_size), repeat=space.length)))
    np.testing.assert_array_equal(states, expected)
    np.testing.assert_array_equal(space.encode(states), np.arange(space.size))
    assert space.size == space.vocab_size**space.length


@settings(max_examples=25)
@given(spaces, st.data())
def test_neighbours_change_exactly_one_site(space, data):
    site = data.draw(st.integers(0, space.length - 1))
    idx = np.arange(space.size)
    nb = space.neighbours(idx, site)
    assert nb.shape == (space.size, space.vocab_size)
    x = space.decode(idx)
    for v in range(space.vocab_size):
        y = x.copy()
        y[:, site] = v
        np.testing.assert_array_equal(space.decode(nb[:, v]), y)
    # column x_i is x itself
    np.testing.assert_array_equal(nb[idx, x[:, site]], idx)
    assert set(np.unique(space.hamming(idx[:, None], nb).ravel())) <= {0, 1}


def test_hamming_matches_direct_count():
    space = StateSpace(3, 4)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, space.size, 50), rng.integers(0, space.size, 50)
    direct = (space.decode(a) != space.decode(b)).sum(axis=1)
    np.testing.assert_array_equal(space.hamming(a, b), direct)
    assert space.hamming(0, space.size - 1) == 4


@pytest.mark.parametrize("q, n, exc", [(1, 3, ValueError), (0, 3, ValueError), (2, 0, ValueError),
                                       (2.0, 3, TypeError), (True, 3, TypeError), (2, "3", TypeError)])
def test_bad_spaces(q, n, exc):
    with pytest.raises(exc):
        StateSpace(q, n)


def test_bad_sequences_and_indices():
    space = StateSpace(3, 2)
    with pytest.raises(ValueError, match="last dimension"):
        space.encode(np.zeros((4, 3), dtype=int))
    with pytest.raises(ValueError, match="symbols"):
        space.encode(np.array([[0, 3]]))
    with pytest.raises(TypeError, match="integer"):
        space.encode(np.array([[0.5, 1.0]]))
    with pytest.raises(ValueError, match="indices"):
        space.decode(9)
    with pytest.raises(TypeError):
        space.decode(np.array([1.5]))
    with pytest.raises(ValueError, match="site"):
        space.neighbours(0, 2)
    with pytest.raises(TypeError):
        space.check_site(1.0)


def test_size_limit_is_enforced():
    space = StateSpace(4, 11)
    with pytest.raises(ValueError, match="exceeds the exact limit"):
        space.check_size()
    StateSpace(4, 10).check_size()
    with pytest.raises(ValueError, match="int64"):
        StateSpace(2, 63).place_values
