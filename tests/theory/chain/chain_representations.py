"""Building one chain in each representation (:func:`chain_in`) and checking an answer against an exact
value whatever the representation (:func:`assert_encloses`); the fixtures are in conftest.py."""

import contextlib
import signal

import numpy as np
import scipy.sparse as sp

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.linalg.matrix_operator import MatrixOperator

#: dense: the dense algorithms (GTH, LAPACK); csr: the sparse ones (Krylov, CSR products); operator:
#: the matrix-free route (a sampler's kernel on a source, or a bare matrix as a MatrixOperator).
REPRESENTATIONS = ("dense", "csr", "operator")

#: A bare matrix in each representation: "operator" is Chain(MatrixOperator(P)), every product a
#: matvec with P or P^T.
MATRIX_REPRESENTATIONS = ("dense", "csr", "operator")


def chain_in(representation: str, P=None, *, source=None, kernel: str = "glauber", **options) -> Chain:
    """The chain of the matrix ``P`` or of the ``kernel`` on ``source`` held as ``representation``:
    "dense" (every dense algorithm), "csr" (a CSR matrix and the sparse algorithms: dense_limit 0) or
    "operator" (the matrix-free kernel of ``source``, or ``Chain(MatrixOperator(P))``: the options of a
    matrix, ``stationary``, ``dense_limit``, ``support``, are a TypeError there). A ``dense_limit`` in
    ``options`` overrides the representation's own (a caller asking for a path)."""
    if (P is None) == (source is None):
        raise ValueError("give a matrix or a source")
    if source is not None:
        rep = {"dense": "dense", "csr": "sparse", "operator": "operator"}[representation]
        kw = {"device": "cpu"} if rep == "operator" else {}
        chain = Chain.from_source(source, kernel, representation=rep, **kw, **options)
    elif representation == "operator":
        chain = Chain(MatrixOperator(P), **options)
    elif representation == "dense":
        M = P.toarray() if sp.issparse(P) else np.asarray(P)
        chain = Chain(M, **{"dense_limit": max(M.shape[0], 1), **options})
    else:
        chain = Chain(sp.csr_array(P), **{"dense_limit": 0, **options})
    chain.progress = False
    return chain


def assert_encloses(result, exact: float, *, slack: float = 0.0) -> None:
    """A resolved ``result`` is within its stated relative error of ``exact`` (plus ``slack``); an
    unresolved one says why and its interval (an end None: not known) holds ``exact``."""
    if result.resolved:
        assert abs(result.value - exact) <= result.rel_error * abs(result.value) + slack, (result, exact)
    else:
        assert result.reason, result
        assert result.lower is None or result.lower - slack <= exact, (result, exact)
        assert result.upper is None or exact <= result.upper + slack, (result, exact)


@contextlib.contextmanager
def within_seconds(seconds: int):
    """Raise TimeoutError when the block runs past ``seconds`` (SIGALRM: main thread, POSIX): a test of a
    path known to hang fails in bounded time instead of stalling the suite."""
    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
