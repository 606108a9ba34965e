"""One chain, every representation: the ``representation`` fixture (dense, CSR, matrix-free operator) and
``matrix_representation`` (dense, CSR, and a bare matrix as a MatrixOperator), with ``chain_of`` /
``matrix_chain_of`` building the chain of a matrix or a source in it
(:func:`chain_representations.chain_in`), so that a chain test asserts the same answer, or an honest
enclosure of it, on each."""

import functools

import pytest
from chain_representations import MATRIX_REPRESENTATIONS, REPRESENTATIONS, chain_in


@pytest.fixture(params=REPRESENTATIONS)
def representation(request) -> str:
    return request.param


@pytest.fixture(params=MATRIX_REPRESENTATIONS)
def matrix_representation(request) -> str:
    return request.param


@pytest.fixture
def chain_of(representation):
    """chain_of(P=None, source=None, ...): the chain in the parametrized representation."""
    return functools.partial(chain_in, representation)


@pytest.fixture
def matrix_chain_of(matrix_representation):
    """matrix_chain_of(P, ...): the chain of a bare matrix, dense, CSR or matrix-free."""
    return functools.partial(chain_in, matrix_representation)
