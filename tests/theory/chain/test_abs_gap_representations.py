"""The absolute spectral gap 1 - |lambda_2| of a non-reversible chain is the same answer on a dense array,
a CSR matrix and the matrix-free operator (the algorithm is chosen by the number of states,
:mod:`mlmix.theory.chain.nonreversible_gap`): against 60-digit eigenvalues (mpmath), an exact metastable
eigenvalue 1 - 2 eps, the certified enclosure [1 - sigma_2, 1] beyond the dense size, and Krylov-Schur
against LAPACK."""

import functools

import mpmath as mp
import networkx as nx
import numpy as np
import pytest
import scipy.linalg as la
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mlmix.theory.chain.nonreversible_gap as nrg
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.linalg.arnoldi import largest_modulus
from mlmix.theory.results import NAMES
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable
from mlmix.theory.sources.space import StateSpace

torch.set_num_threads(1)

REPRESENTATIONS = ("dense", "sparse", "operator")


def _of_source(src, rep):
    chain = Chain.from_source(src, representation=rep, **({"device": "cpu"} if rep == "operator" else {}))
    chain.progress = False
    return chain


def _mp_abs_gap(P: np.ndarray, dps: int = 60) -> mp.mpf:
    """1 - |lambda_2| of the float matrix P, its eigenvalues in ``dps``-digit arithmetic."""
    with mp.workdps(dps):
        vals = mp.eig(mp.matrix(P.tolist()), left=False, right=False)
        mods = sorted((abs(v) for v in vals), reverse=True)
        one = min(range(len(vals)), key=lambda i: abs(vals[i] - 1))
        rest = sorted((abs(v) for i, v in enumerate(vals) if i != one), reverse=True)
        assert abs(mods[0] - 1) < 1e-12  # rows of the float P sum to 1 within rounding
        return 1 - rest[0]


def _encloses(r, exact, slack=0.0):
    if r.resolved:
        return abs(r.value - exact) <= r.rel_error * abs(r.value) + slack
    return r.lower - slack <= exact <= r.upper + slack


def _agree(a, b):
    """Two results of the same quantity: both resolved and within their errors, or overlapping."""
    if a.resolved and b.resolved:
        return abs(a.value - b.value) <= a.rel_error * a.value + b.rel_error * b.value + 1e-15
    return a.lower <= b.upper and b.lower <= a.upper


# ------------------------------------------------------------------------------------------ every representation

@pytest.mark.parametrize("seed", [0, 1])
def test_same_answer_on_dense_csr_and_operator(seed):
    """243 non-reversible states: the three representations give the same resolved value (the operator's
    entries are its own roundings, so within the error bound), and LAPACK's eigenvalues (no vectors)
    of the CSR matrix agree."""
    src = ScoreTable.random(3, 5, seed=seed, scale=1.5)
    results = {rep: _of_source(src, rep) for rep in REPRESENTATIONS}
    assert not any(c.is_reversible for c in results.values())
    gaps = {rep: c.absolute_spectral_gap for rep, c in results.items()}
    vals = la.eigvals(glauber_kernel(src).toarray())
    mods = np.sort(np.abs(vals))[::-1]
    ref = 1 - mods[1]
    for rep, g in gaps.items():
        assert g.resolved, (rep, g)
        assert g.name == NAMES["absolute_spectral_gap"]
        assert abs(g.value - ref) <= 1e-12, rep
        assert _agree(g, gaps["dense"])
        t = results[rep].relaxation_time
        assert t.resolved and abs(t.value * g.value - 1) < 1e-12
    assert gaps["dense"].value == gaps["sparse"].value  # the same matrix, the same algorithm


@pytest.mark.slow
def test_2187_states_agree_across_representations():
    """3^7 = 2,187 states of a non-reversible Glauber chain: resolved on all three, the same value."""
    src = ScoreTable.random(3, 7, seed=0, scale=1.5)
    gaps = {rep: _of_source(src, rep).absolute_spectral_gap for rep in REPRESENTATIONS}
    for rep, g in gaps.items():
        assert g.resolved and g.rel_error < 1e-8, (rep, g)
        assert _agree(g, gaps["dense"]), rep
    assert gaps["dense"].value == pytest.approx(0.128929237, rel=1e-8)


# ------------------------------------------------------------------------------------------ 60-digit references

@settings(max_examples=8, deadline=None)
@given(st.integers(3, 6), st.integers(0, 10**6))
def test_small_non_reversible_chains_against_mpmath(n, seed):
    rng = np.random.default_rng(seed)
    W = rng.random((n, n)) ** 3 + 1e-3
    P = W / W.sum(axis=1, keepdims=True)
    exact = _mp_abs_gap(P, 30)
    for chain in (Chain(P), Chain(sp.csr_array(P), dense_limit=0)):
        g = chain.absolute_spectral_gap
        assert _encloses(g, float(exact), slack=1e-15), (g, exact)
        # the certified lower end of the Krylov route: 1 - |lambda_2| >= 1 - sigma_2 (mean-zero functions)
        m = float(chain.multiplicative_gap.lower)
        assert float(exact) >= m / (1 + np.sqrt(1 - m)) - 1e-13


@functools.cache
def _operator_reference_gap() -> float:
    return float(_mp_abs_gap(glauber_kernel(ScoreTable.random(2, 4, seed=5, scale=2.0)).toarray()))


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_operator_against_mpmath(rep):
    """The chain of a source in each representation (the operator's Krylov-Schur included) against the
    60-digit eigenvalues of the assembled kernel."""
    src = ScoreTable.random(2, 4, seed=5, scale=2.0)
    exact = _operator_reference_gap()
    g = _of_source(src, rep).absolute_spectral_gap
    assert g.resolved and abs(g.value - exact) <= g.rel_error * g.value + 1e-15


def _two_rotating_blocks(eps: float) -> np.ndarray:
    """Two lazy 3-cycles (a non-reversible rotation each), every state crossing to its twin in the other
    block with probability eps: f = +-1 on the blocks has P f = (1 - 2 eps) f exactly, and the rotations'
    eigenvalues have modulus well below 1, so the absolute gap is exactly 2 eps."""
    C = np.array([[0.5, 0.4, 0.1], [0.1, 0.5, 0.4], [0.4, 0.1, 0.5]])
    P = np.zeros((6, 6))
    P[:3, :3] = P[3:, 3:] = (1 - eps) * C
    P[:3, 3:] = P[3:, :3] = eps * np.eye(3)
    return P


@pytest.mark.parametrize("eps", [5e-13, 1e-9])
def test_metastable_non_reversible_gap_is_enclosed(eps):
    P = _two_rotating_blocks(eps)
    exact = float(_mp_abs_gap(P, 80))
    assert abs(exact / (2 * eps) - 1) < 1e-3  # eps rounded in P: the exact gap of the float matrix
    answers = [Chain(P).absolute_spectral_gap, Chain(sp.csr_array(P), dense_limit=0).absolute_spectral_gap]
    for g in answers:
        assert _encloses(g, exact), (g, exact)
        assert g.resolved or g.reason
    assert answers[0].value == answers[1].value and answers[0].lower == answers[1].lower


def test_metastable_score_table_on_the_operator():
    """A perturbed Ising cycle at beta = 7 (gap ~1e-12, non-reversible): the operator's enclosure holds
    the 80-digit gap of the assembled kernel."""
    ising = ScoreTable.from_conditionals(IsingModel(nx.cycle_graph(4), beta=7.0))
    noise = 0.3 * np.random.default_rng(0).standard_normal(ising.table.shape)
    src = ScoreTable(StateSpace(2, 4), ising.table + noise)
    P = glauber_kernel(src).toarray()
    exact = float(_mp_abs_gap(P, 80))
    assert exact < 1e-9
    for rep in REPRESENTATIONS:
        chain = _of_source(src, rep)
        assert not chain.is_reversible
        g = chain.absolute_spectral_gap
        assert _encloses(g, exact, slack=1e-20), (rep, g, exact)


# ------------------------------------------------------------------------------------------ beyond the dense size

@pytest.mark.parametrize("rep", ["sparse", "operator"])
def test_beyond_the_dense_size_a_certified_interval(monkeypatch, rep):
    """With the dense size lowered below 243 states the Krylov route runs: its interval [1 - sigma_2, 1]
    holds the LAPACK value, the Krylov-Schur estimate matches it, and the reason says why only an
    interval is given."""
    src = ScoreTable.random(3, 5, seed=2, scale=1.5)
    ref = 1 - np.sort(np.abs(la.eigvals(glauber_kernel(src).toarray())))[::-1][1]
    monkeypatch.setattr(nrg, "DENSE_SPECTRAL_LIMIT", 100)
    chain = _of_source(src, rep)
    g = chain.absolute_spectral_gap
    assert not g.resolved and "not bound" in g.reason
    assert 0 < g.lower <= ref <= g.upper == 1.0
    assert g.details["arnoldi_converged"] and abs(g.details["estimate"] - ref) < 1e-9
    t = chain.relaxation_time
    assert not t.resolved and t.lower == 1.0 and t.upper == pytest.approx(1 / g.lower)


def test_krylov_schur_against_lapack():
    """A dominant complex pair, a real dominant eigenvalue and a non-normal (Jordan-like) matrix."""
    rng = np.random.default_rng(3)
    n = 300
    X = rng.standard_normal((n, n))
    D = np.diag(np.concatenate([[0.9], rng.uniform(-0.8, 0.8, n - 1)]))
    D[1, 2], D[2, 1], D[1, 1], D[2, 2] = 0.5, -0.5, 0.6, 0.6  # the pair 0.6 +- 0.5 i (modulus 0.78)
    for A in (X @ D @ np.linalg.inv(X), np.triu(rng.standard_normal((n, n)), 1) * 0.05 + np.diag(np.linspace(-0.5, 0.95, n))):
        ref = la.eigvals(A)
        top = ref[np.argmax(np.abs(ref))]
        ritz = largest_modulus(A, rng.standard_normal(n), tol=1e-11, basis_size=30)
        assert ritz.converged and abs(abs(ritz.value) - abs(top)) < 1e-8
    # a dominant complex pair
    B = np.diag(np.concatenate([[0.0, 0.0], rng.uniform(-0.7, 0.7, n - 2)]))
    B[0, 0] = B[1, 1] = 0.6
    B[0, 1], B[1, 0] = 0.5, -0.5
    A = X @ B @ np.linalg.inv(X)
    ritz = largest_modulus(A, rng.standard_normal(n), tol=1e-11, basis_size=30)
    assert ritz.converged and abs(ritz.value.imag) == pytest.approx(0.5, rel=1e-8)
    assert ritz.value.real == pytest.approx(0.6, rel=1e-8)


def test_invariant_subspace_and_bad_input():
    A = np.diag([0.5, 0.25, 0.125, 0.0, 0.0, 0.0])
    ritz = largest_modulus(A, np.array([1.0, 1.0, 0, 0, 0, 0]), tol=1e-14, basis_size=5)
    assert ritz.converged and ritz.value == pytest.approx(0.5) and ritz.matvecs == 2
    with pytest.raises(ValueError, match="basis_size"):
        largest_modulus(A, np.ones(6), tol=1e-10, basis_size=2)
    with pytest.raises(ValueError, match="non-zero"):
        largest_modulus(A, np.zeros(6), tol=1e-10)


def test_a_memory_limit_below_the_dense_eigensolver_gives_the_certified_interval():
    """243 states under a 2 MB limit (the dense eigensolver needs about 2.8 MB): the interval of the
    large chains, which holds the LAPACK value, not a MemoryLimitError from t_mix's bounds."""
    from mlmix.validation import memory_limit

    src = ScoreTable.random(3, 5, seed=2, scale=1.5)
    ref = 1 - np.sort(np.abs(la.eigvals(glauber_kernel(src).toarray())))[::-1][1]
    chain = _of_source(src, "sparse")
    with memory_limit("2MB"):
        g = chain.absolute_spectral_gap
    assert not g.resolved and "memory limit" in g.reason and g.lower <= ref <= g.upper
