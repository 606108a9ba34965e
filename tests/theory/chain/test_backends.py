"""The backend protocol (theory/chain/backends.py): each representation's backend applies P within its stated
rounding, solves (I - P_UU) x = b within its certificate against a 40-digit GTH reference, and the quantities
written once against it (hitting times, committors) give on dense and CSR chains exactly what the matrix solve
gives and on matrix-free chains exactly what the Krylov solve gives."""

import mpmath as mp
import numpy as np
import pytest
from chain_representations import MATRIX_REPRESENTATIONS, chain_in
from helpers import random_chain

from mlmix.theory.chain.backends import DenseBackend, OperatorBackend, SparseBackend, matrix_backend
from mlmix.theory.chain.hitting import committor_on, hitting_times_on
from mlmix.theory.linalg.absorbed import operator_absorbed, solve_absorbed
from mlmix.theory.linalg.operator_vectors import local_part
from mlmix.theory.reference import mp_absorbed

mp.mp.dps = 40

KINDS = {"dense": DenseBackend, "csr": SparseBackend, "operator": OperatorBackend}


def _chains():
    """A random chain, a reversible one and a metastable one (moves of 1e-9 between its halves)."""
    return [random_chain(1, 9, False), random_chain(2, 8, True), random_chain(3, 8, True, tiny=1e-9)]


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
def test_facts_choose_the_backend_of_the_representation(rep):
    chain = chain_in(rep, random_chain(0, 6, False))
    backend = chain.facts.backend
    assert isinstance(backend, KINDS[rep]) and backend.representation == chain.facts.representation
    assert backend is chain.facts.backend and backend.n_states == 6
    assert type(matrix_backend(chain.facts.matrix_P)) is (DenseBackend if rep == "dense" else SparseBackend)


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@pytest.mark.parametrize("P", _chains(), ids=["random", "reversible", "metastable"])
def test_apply_is_p_within_its_rounding(rep, P):
    """|fl(P v) - P v| <= gamma P |v| entrywise, and the same for v P, against a 40-digit product."""
    backend = chain_in(rep, P).facts.backend
    v = np.random.default_rng(5).standard_normal(P.shape[0])
    gamma = backend.rounding()
    assert 0 < gamma < 1e-12
    for side, M in (("functions", P), ("measures", P.T)):
        exact = np.array([float(mp.fsum(mp.mpf(float(a)) * mp.mpf(float(b)) for a, b in zip(row, v))) for row in M])
        assert np.all(np.abs(backend.apply(v, side) - exact) <= gamma * (M @ np.abs(v)) + 1e-300), side
    with pytest.raises(ValueError, match="side must be one of"):
        backend.apply(v, "rows")


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@pytest.mark.parametrize("P", _chains(), ids=["random", "reversible", "metastable"])
def test_absorbed_solve_within_its_certificate(rep, P):
    """(I - P_UU) k = 1 (hitting times of state 0) against mpmath's subtraction-free GTH at 40 digits: within
    the a-priori rel_error, or within rho k_hat / (1 - rho) (the a-posteriori certificate)."""
    backend = chain_in(rep, P).facts.backend
    N = P.shape[0]
    U = np.arange(N) != 0
    sol = backend.absorbed_solve(U, [~U], np.ones(N - 1), "hitting times")
    W = [[mp.mpf(float(p)) for p in row] for row in P]
    exact = np.array([float(h) for h in mp_absorbed(W, list(np.flatnonzero(U)), [1] * (N - 1))])[U]
    bound = sol.rel_error if sol.rho is None else sol.rho / (1 - sol.rho)
    assert bound is not None and bound < 1e-3, sol
    assert np.all(np.abs(sol.x - exact) <= bound * exact * (1 + 1e-12)), (sol.x, exact, sol.method)
    assert (sol.rho is None) == (rep != "operator") and sol.method


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@pytest.mark.parametrize("P", _chains(), ids=["random", "reversible", "metastable"])
def test_quantities_on_the_backend_are_the_solves(rep, P):
    """Hitting times and committors written once give bit for bit the solve of their representation's room:
    GTH elimination (dense, CSR) or the operator's Krylov solve (without a stationary law: GMRES)."""
    chain = chain_in(rep, P)
    N = P.shape[0]
    A, B = np.arange(N) == 0, np.arange(N) == N - 1
    C = ~(A | B)
    k = chain.hitting_time(A)
    q = chain.committor(A, B)
    if rep == "operator":
        backend = OperatorBackend(chain.op)
        k, q = hitting_times_on(backend, A), committor_on(backend, A, B)
        op = chain.op
        keep = local_part(op, ~A).to(op.dtype)
        want_k = operator_absorbed(op, local_part(op, ~A), keep, None)[0].numpy() * keep.numpy()
        inB = local_part(op, B).to(op.dtype)
        b = op.apply(inB, "functions").mul_(local_part(op, C).to(op.dtype))
        x = operator_absorbed(op, local_part(op, C), b, None)[0].numpy() * C
        want_q = x + B
        assert k.details["representation"] == "operator" and "max_abs_error" in q.details
    else:
        want_k = np.zeros(N)
        want_k[~A] = solve_absorbed(P, ~A, [A], np.ones(N - 1), "")[0]
        want_q = B.astype(float)
        want_q[C] = solve_absorbed(P, C, [B, A], None, "")[0]
    assert np.array_equal(k.value, want_k) and np.array_equal(q.value, want_q)
    assert k.rel_error is not None and k.rel_error < 1e-3
