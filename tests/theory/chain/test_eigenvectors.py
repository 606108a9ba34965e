"""Eigenvectors: the certified residuals hold in 40-digit arithmetic (mpmath), the decomposition
P = R diag(lambda) L^T with L^T R = I, r_1 = 1 and l_1 = pi, the Davis-Kahan angle against the closed-form
eigenvectors of two-state chains and birth-death chains, every representation, metastable chains; the top few
of a large sparse reversible chain by Lanczos; a non-reversible chain beyond the dense limit refused by name."""

import mpmath as mp
import numpy as np
import pytest
import scipy.sparse as sp
from chain_representations import REPRESENTATIONS, chain_in
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.linalg import eigsh
from spectral_references import birth_death, mp_matrix, random_chain, rotating_cycle


def mp_residuals(P, lam, V, left):
    """||P v - lam v|| / ||v|| (or ||v P - lam v|| / ||v||) of each column in 40 digits."""
    M = mp_matrix(P)
    out = []
    for i in range(V.shape[1]):
        v = mp.matrix([mp.mpc(complex(x)) for x in V[:, i]])
        Mv = (M.T if left else M) * v
        r = Mv - mp.mpc(complex(lam[i])) * v
        out.append(float(mp.norm(r) / mp.norm(v)))
    return np.array(out)


def check_certificates(P, pairs):
    lam = np.asarray(pairs.values.value)
    R, L = pairs.right.value, pairs.left.value
    assert np.all(mp_residuals(P, lam, R, False) <= pairs.right.details["residual_bounds"])
    assert np.all(mp_residuals(P, lam, L, True) <= pairs.left.details["residual_bounds"])


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@pytest.mark.parametrize("P", [two_state(0.3, 0.1), two_state(1e-12, 3e-12), birth_death([0.3, 0.2, 0.4], [0.1, 0.25, 0.3]),
                               rotating_cycle(5, 0.3), random_chain(2, 6, True), random_chain(3, 5, False)],
                         ids=["two-state", "two-state-1e-12", "birth-death", "cycle", "reversible", "non-reversible"])
def test_residuals_certified_and_decomposition(rep, P):
    chain = chain_in(rep, P)
    pairs = chain.eigenvectors()
    check_certificates(P, pairs)
    R, L, lam = pairs.right.value, pairs.left.value, np.asarray(pairs.values.value)
    np.testing.assert_allclose(L.T @ R, np.eye(P.shape[0]), atol=1e-9)
    np.testing.assert_allclose((R * lam) @ L.T, P, atol=1e-9)
    np.testing.assert_allclose(R[:, 0], 1.0, rtol=1e-9)
    np.testing.assert_allclose(L[:, 0], chain.stationary.value, rtol=1e-9)


@pytest.mark.parametrize("a, b", [(0.3, 0.1), (1e-8, 2e-8), (1e-200, 3e-200)])
def test_two_state_closed_form(a, b):
    """lambda_2 = 1 - a - b with right eigenvector (sqrt(pi_1 / pi_0), -sqrt(pi_0 / pi_1)) (unit in <., .>_pi), left
    pi * r_2: the computed vector within its angle bound (the angle of v = sqrt(pi) r in the Euclidean norm)."""
    pairs = chain_in("dense", two_state(a, b)).eigenvectors()
    p0, p1 = b / (a + b), a / (a + b)
    assert abs(pairs.values.value[1] - (1 - a - b)) <= pairs.values.details["error_bounds"][1]
    v = pairs.right.value[:, 1] * np.sqrt([p0, p1])
    exact = np.array([np.sqrt(p1), -np.sqrt(p0)])
    v = v / np.linalg.norm(v)
    sin = np.linalg.norm(v - (v @ exact) * exact)
    assert sin <= pairs.right.details["angle_bounds"][1] + 1e-15


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 6), st.booleans(), st.sampled_from([1.0, 1e-30, 1e-200]))
def test_certificates_hold(seed, n, reversible, tiny):
    """Random chains, metastable ones included: every residual bound holds in 40 digits."""
    P = random_chain(seed, n, reversible, tiny)
    check_certificates(P, chain_in("dense", P).eigenvectors())


def test_top_few_of_a_large_sparse_chain():
    """Two random sparse graphs of 2200 states joined by one weak edge (a reversible walk, lambda_2 close to 1,
    the rest of the spectrum far below): the k = 2 of largest modulus by Lanczos, against ARPACK's, the residuals certified by the CSR products."""
    n, half = 4400, 2200
    rng = np.random.default_rng(0)
    rows = np.r_[np.arange(n), rng.integers(0, half, 3 * half), rng.integers(half, n, 3 * half)]
    cols = np.r_[np.r_[np.arange(1, half), 0, np.arange(half + 1, n), half], rng.integers(0, half, 3 * half),
                 rng.integers(half, n, 3 * half)]
    W = sp.coo_array((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr()
    W = sp.csr_array(W + W.T)
    W.setdiag(0)
    W = W + sp.csr_array(([1e-3, 1e-3], ([0, half], [half, 0])), shape=(n, n))
    P = sp.csr_array(W / (2 * W.sum(axis=1).max()))
    P = sp.csr_array(P + sp.diags_array(1 - P.sum(axis=1)))
    pairs = chain_in("csr", P).eigenvectors(2)
    S = sp.csr_array(P.multiply(P.T)).sqrt()
    exact = np.sort(eigsh(S, k=2, which="LA", tol=1e-15)[0])[::-1]  # ARPACK: a second algorithm
    assert np.all(np.abs(pairs.values.value - exact) <= pairs.values.details["error_bounds"] + 1e-15)
    assert np.all(pairs.right.details["residual_bounds"] < 1e-6)


def test_refusals_one_line():
    P = sp.random_array((5000, 5000), density=1e-3, random_state=0, format="csr") + sp.eye_array(5000)
    P = sp.csr_array(P / P.sum(axis=1)[:, None])
    with pytest.raises(ValueError, match="computed densely up to") as err:
        chain_in("csr", P).eigenvectors(2)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="k must lie"):
        chain_in("dense", two_state(0.3, 0.1)).eigenvectors(3)
