"""Matrix-free chain quantities: closed forms at 2^16 states and above, non-reversible score tables
against dense algorithms (GTH, LAPACK, exhaustive conductance, exact t_mix), metastable gaps
against the dense Laplacian, and the Krylov solvers on operators with known spectra."""

import json

import mpmath as mp
import networkx as nx
import numpy as np
import pytest
import torch
from chain_representations import assert_encloses
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.files import dumps_json
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.operator_chain import analyse_operator, summary_dict
from mlmix.theory.chain.shortcuts import mixing_time, set_conductance
from mlmix.theory.chain.spectral import operator_gap
from mlmix.theory.chain.stationary import operator_stationary
from mlmix.theory.kernels.assembled import glauber_kernel, k_gibbs_kernel
from mlmix.theory.kernels.operators import kernel_operator
from mlmix.theory.linalg.krylov import gmres, lanczos
from mlmix.theory.linalg.operator_vectors import hash_uniform
from mlmix.theory.reference import ising_cycle_gap
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, PottsModel, ScoreTable
from mlmix.theory.sources.space import StateSpace


def _contains(result, value, slack=0.0):
    return result.lower - slack <= value <= result.upper + slack


@pytest.mark.parametrize("beta", [0.5, 1.1])
def test_ising_cycle_gap_closed_form_at_2_16_states(beta):
    n = 16
    res = analyse_operator(kernel_operator(IsingModel(nx.cycle_graph(n), beta=beta), device="cpu"))
    exact = ising_cycle_gap(n, beta)
    gap = res["spectral_gap"]
    assert gap.resolved and gap.rel_error < 1e-8
    assert abs(gap.value - exact) <= 1e-12 * exact
    assert _contains(gap, exact)
    assert res["absolute_spectral_gap"].value == gap.value  # positive semi-definite heat-bath kernel
    assert abs(float(res["relaxation_time"]) * exact - 1) < 1e-12
    assert abs(float(res["poincare_constant"]) * exact - 1) < 1e-12
    lo, hi = res["conductance"].lower, res["conductance"].upper
    assert lo == pytest.approx(gap.lower / 2) and lo < hi <= np.sqrt(2 * gap.upper)
    t = res["t_mix"]
    assert 0 < t.lower < t.upper
    assert t.upper == np.ceil(np.log(1 / (0.25 * np.exp(float(np.min(res["stationary"].log_value))))) / gap.lower)
    json.loads(dumps_json(summary_dict(res)))


@pytest.mark.parametrize("make, n", [
    (lambda: IsingModel(nx.cycle_graph(16), couplings=0.0, fields=np.linspace(-1, 1, 16), beta=0.8), 16),
    (lambda: PottsModel(nx.empty_graph(10), 3, fields=np.random.default_rng(0).normal(size=(10, 3))), 10),
])
def test_product_measure_gap_is_one_over_n(make, n):
    """Glauber on a product measure: P = (1/n) sum_i E_i with commuting projections, gap exactly 1/n."""
    src = make()
    op = kernel_operator(src, device="cpu")
    gap = operator_gap(op, operator_stationary(op)).gap
    assert gap.resolved and abs(gap.value - 1 / n) <= 1e-12 / n and _contains(gap, 1 / n)


def _dense_reference(src, P):
    """GTH stationary law and the dense additive gap (both to relative accuracy) of mlmix.Chain."""
    chain = Chain(P)
    return chain.stationary.value, float(chain.additive_gap)


@settings(max_examples=10)
@given(st.integers(2, 3), st.integers(2, 5), st.integers(0, 10**6), st.floats(0.3, 2.0))
def test_non_reversible_score_tables_against_dense(q, n, seed, T):
    src = ScoreTable.random(q, n, seed=seed, temperature=T, scale=1.5)
    P = glauber_kernel(src)
    pi_ref, gap_ref = _dense_reference(src, P)
    res = analyse_operator(kernel_operator(src, device="cpu"))
    pi = res["stationary"]
    assert np.abs(pi.value / pi_ref - 1).max() <= max(pi.rel_error, 1e-13)
    assert np.abs(pi.value - pi_ref).sum() <= max(pi.abs_error, 1e-14)
    assert pi.residual < 1e-12
    gap = res["additive_gap"]
    assert _contains(gap, gap_ref, slack=1e-13) and abs(gap.value - gap_ref) < 1e-10 * gap_ref + 1e-14
    assert not res["spectral_gap"].resolved and res["spectral_gap"].reason
    phi = res["conductance"]
    assert phi.lower <= phi.upper
    t = res["t_mix"]
    assert t.lower <= mixing_time(P, 0.25) <= t.upper  # upper: Fill's bound from the multiplicative gap


@pytest.mark.parametrize("seed", range(3))
def test_multiplicative_gap_against_dense(seed, chain_of):
    """1 - sigma_2^2 of the chain of a source in each representation against the dense singular values."""
    src = ScoreTable.random(3, 5, seed=seed, scale=1.5)
    ref = Chain(glauber_kernel(src)).multiplicative_gap  # dense singular values, relative accuracy
    mult = chain_of(source=src).multiplicative_gap
    assert mult.resolved and _contains(mult, ref.value, slack=1e-13) and abs(mult.value - ref.value) < 1e-9


@pytest.mark.parametrize("seed", range(4))
def test_conductance_interval_holds_the_exhaustive_minimum(seed):
    src = ScoreTable.random(2, 4, seed=seed, scale=2.0)  # 16 states: exhaustive search over 2^16 sets
    P = glauber_kernel(src)
    res = analyse_operator(kernel_operator(src, device="cpu"))
    phi_star = float(Chain(P).conductance)  # exhaustive over the 2^16 subsets
    phi = res["conductance"]
    assert phi.lower <= phi_star * (1 + 1e-12) and phi_star <= phi.upper * (1 + 1e-12)
    S = phi.details["set"]
    assert phi.details["set_mass"] <= 0.5
    assert phi.details["set_conductance"] == pytest.approx(set_conductance(P, S), rel=1e-12)
    assert S.sum() == phi.details["set_size"]


def test_reversible_block_dynamics_against_dense_mixing(chain_of):
    """Block (k-Gibbs, k = 2) dynamics: the operator's analysis, and the chain of the source in each
    representation (t_mix exact where dense powers fit, else a certified interval), hold the dense values."""
    src = LogWeightTable.random(StateSpace(3, 5), seed=3, scale=1.5)
    P = k_gibbs_kernel(src, 2)
    exact_gap = float(Chain(P).spectral_gap)
    t_exact = mixing_time(P, 0.1)
    if chain_of.args == ("operator",):
        res = analyse_operator(kernel_operator(src, "k-gibbs", 2, device="cpu"), eps=0.1)
        assert _contains(res["spectral_gap"], exact_gap, slack=1e-13)
        assert res["t_mix"].lower <= t_exact <= res["t_mix"].upper
    ch = chain_of(source=src, kernel="k-gibbs", k=2)
    assert _contains(ch.spectral_gap, exact_gap, slack=1e-13)
    assert_encloses(ch.mixing_time(0.1), t_exact)


def _laplacian_gap(src):
    """Second eigenvalue of the symmetric Laplacian D^1/2 (I - P) D^-1/2 with its diagonal summed from the
    off-diagonal rates (absolute error ~1e-16, so a relative reference for gaps far above that)."""
    P = glauber_kernel(src).toarray()
    lw = src.log_joint()
    s = np.exp((lw - lw.max()) / 2)
    off = P - np.diag(np.diag(P))
    L = -off * s[:, None] / s[None, :]
    L[np.diag_indices_from(L)] = off.sum(axis=1)
    return np.linalg.eigvalsh((L + L.T) / 2)[1]


def _mean_field_gap(src, n: int) -> float:
    """1 - lambda_2 of Glauber on an exchangeable model, from its lumped birth-death chain on the number of
    ones (60 digits): the slowest mode is the magnetisation's, and the float Laplacian's absolute error
    (~1e-16) is no reference for a gap of 4e-9."""
    with mp.workdps(60):
        def w(k: int) -> mp.mpf:
            x = np.zeros((1, n), dtype=np.int64)
            x[0, :k] = 1
            return mp.mpf(float(src.log_weight(x)[0]))

        W = [w(k) for k in range(n + 1)]
        up = [mp.mpf(n - k) / n / (1 + mp.exp(W[k] - W[k + 1])) if k < n else mp.mpf(0) for k in range(n + 1)]
        down = [mp.mpf(k) / n / (1 + mp.exp(W[k] - W[k - 1])) if k > 0 else mp.mpf(0) for k in range(n + 1)]
        A = mp.matrix(n + 1, n + 1)  # D^1/2 P D^-1/2: symmetric tridiagonal
        for k in range(n + 1):
            A[k, k] = 1 - up[k] - down[k]
            if k < n:
                A[k, k + 1] = A[k + 1, k] = mp.sqrt(up[k] * down[k + 1])
        return float(1 - sorted(mp.eigsy(A, eigvals_only=True), reverse=True)[1])


@pytest.mark.parametrize("beta, resolved", [(0.5, True), (0.7, False)])
def test_metastable_gaps_are_values_or_honest_intervals(beta, resolved, chain_of):
    """Ising on K_8: gaps 1.9e-6 (resolved) and 3.9e-9 (below the operator's 1e-6 accuracy target: an
    interval); the dense and CSR chains of the source resolve both (relative-accuracy LDL^T, Lanczos)."""
    src = IsingModel(nx.complete_graph(8), beta=beta)
    ref = _mean_field_gap(src, 8)
    assert ref == pytest.approx(_laplacian_gap(src), rel=1e-7)
    if chain_of.args == ("operator",):
        gap = analyse_operator(kernel_operator(src, device="cpu"))["spectral_gap"]
        assert gap.resolved is resolved
    else:
        gap = chain_of(source=src).spectral_gap
        assert gap.resolved
    assert _contains(gap, ref, slack=1e-9 * ref)
    assert gap.upper - gap.lower < 1e-5 * ref
    if not gap.resolved:
        assert "accuracy target" in gap.reason


def test_float32_is_labelled_and_its_error_bound_holds():
    src = IsingModel(nx.cycle_graph(12), beta=0.5)
    op = kernel_operator(src, dtype="float32", device="cpu")
    gap = operator_gap(op, operator_stationary(op)).gap
    exact = ising_cycle_gap(12, 0.5)
    assert gap.details["dtype"] == "float32"
    assert _contains(gap, exact) and gap.upper - gap.lower > 1e-7 * exact


def test_lanczos_finds_the_top_of_a_known_spectrum():
    rng = np.random.default_rng(0)
    lam = np.sort(rng.random(4000))[::-1].copy()
    lam[0] = 1.0 + 1e-3  # relative separation 1e-3 from the rest
    d = torch.as_tensor(lam)
    ritz = lanczos(lambda v, out: torch.mul(d, v, out=out), torch.as_tensor(rng.standard_normal(4000)),
                           tol=lambda th: 1e-12)
    assert ritz.converged and abs(ritz.value - lam[0]) < 1e-12
    r = d * ritz.vector - ritz.value * ritz.vector
    assert float(r.norm()) < 1e-11 and abs(abs(float(ritz.vector[0])) - 1) < 1e-12


def test_gmres_solves_a_nonsymmetric_system():
    rng = np.random.default_rng(1)
    A = np.eye(300) * 4 + rng.normal(size=(300, 300)) / 10
    b = rng.normal(size=300)
    At = torch.as_tensor(A)
    sol = gmres(lambda x, out: torch.mv(At, x, out=out), torch.as_tensor(b), rtol=1e-13)
    assert sol.converged and sol.relative_residual <= 1e-13
    np.testing.assert_allclose(sol.x.numpy(), np.linalg.solve(A, b), rtol=1e-11, atol=1e-12)


def test_hash_start_vector_does_not_depend_on_sharding():
    whole = hash_uniform(0, 1000, 3, torch.device("cpu"))
    parts = torch.cat([hash_uniform(0, 500, 3, torch.device("cpu")), hash_uniform(500, 1000, 3, torch.device("cpu"))])
    assert torch.equal(whole, parts)
    assert 0 <= float(whole.min()) and float(whole.max()) < 1 and abs(float(whole.mean()) - 0.5) < 0.05


@pytest.mark.slow
def test_ising_cycle_gap_closed_form_at_2_20_states():
    n, beta = 20, 0.5
    res = analyse_operator(kernel_operator(IsingModel(nx.cycle_graph(n), beta=beta), device="cpu"))
    exact = ising_cycle_gap(n, beta)
    assert abs(res["spectral_gap"].value - exact) <= 1e-12 * exact and _contains(res["spectral_gap"], exact)


def test_underflowing_conditionals_are_refused_not_guessed():
    """At beta = 400 some heat-bath probabilities underflow to 0: irreducibility is no longer visible
    from the conditionals, so the matrix-free chain refuses instead of returning a law."""
    from mlmix.theory.chain.operator_chain import OperatorChain

    chain = OperatorChain(kernel_operator(IsingModel(nx.cycle_graph(6), beta=400.0), device="cpu"))
    assert not chain.is_irreducible
    with pytest.raises(ValueError, match="underflow"):
        chain.stationary


def test_hash_uniform_is_splitmix64():
    """The start vectors' numbers against splitmix64 (Steele, Lea and Flood 2014) in Python integers."""
    def splitmix(i: int, seed: int) -> float:
        m = (1 << 64) - 1
        z = (i * 0x9E3779B97F4A7C15 + seed * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return ((z ^ (z >> 31)) >> 11) * 2.0**-53

    for seed in (0, 7):
        got = hash_uniform(1000, 1040, seed, torch.device("cpu")).tolist()
        assert got == [splitmix(i, seed) for i in range(1000, 1040)]
