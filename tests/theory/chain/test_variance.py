"""Asymptotic variance and the Kemeny constant: closed forms, the autocovariance series, eigenvalue
sums, metastable chains against high-precision references, dense vs Krylov, honest error bounds."""

import mpmath as mp
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from chain_representations import MATRIX_REPRESENTATIONS, REPRESENTATIONS, assert_encloses, chain_in, within_seconds
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.errors import ConvergenceError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.variance import asymptotic_variance_sparse, kemeny_interval
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.linalg.matrices import krylov_solve
from mlmix.theory.reference import birth_death
from mlmix.theory.sources.conditionals import IsingModel, PottsModel, ScoreTable


def two_state_variance(a, b):
    """sigma^2(1_{state 1}) = pi_0 pi_1 (2 - a - b) / (a + b) for [[1-a, a], [b, 1-b]]."""
    return (b / (a + b)) * (a / (a + b)) * (2 - a - b) / (a + b)


@pytest.mark.parametrize("rep", MATRIX_REPRESENTATIONS)
@settings(max_examples=20)
@given(st.floats(0.01, 0.99), st.floats(0.01, 0.99))
def test_two_state_indicator_closed_form(rep, a, b):
    ch = chain_in(rep, two_state(a, b))
    v = ch.asymptotic_variance(np.array([0.0, 1.0]))
    assert v.value == pytest.approx(two_state_variance(a, b), rel=1e-12)
    const = ch.asymptotic_variance(np.array([3.0, 3.0]))
    assert const.upper < 1e-12 and const.lower == 0.0


@pytest.mark.parametrize("a, b, rep", [(a, b, rep) for a, b in [(1e-12, 2e-12), (1e-100, 0.3), (1e-300, 0.3),
                                                                 (0.3, 1e-200)] for rep in MATRIX_REPRESENTATIONS])
def test_metastable_two_state_variance_within_its_stated_bound(a, b, rep):
    """Variances from 1e-299 to 1e11: relative error <= 1e-12 and within the stated bound, in bounded
    time (dense and CSR: the sparse route solves a small chain's Poisson equation by GTH elimination)."""
    chain = chain_in(rep, two_state(a, b))
    if rep == "operator" and min(a, b) / (a + b) < 1e-299:  # a law below 1e-300: refused by name
        with pytest.raises(ValueError, match="underflows"):
            chain.asymptotic_variance(np.array([0.0, 1.0]))
        return
    with within_seconds(5):
        v = chain.asymptotic_variance(np.array([0.0, 1.0]))
    with mp.workdps(400):
        A, B = mp.mpf(a), mp.mpf(b)
        ref = float((B / (A + B)) * (A / (A + B)) * (2 - A - B) / (A + B))
    assert_encloses(v, ref, slack=1e-13 * ref)
    if rep == "operator":  # the Krylov law and gap of a metastable chain: an enclosure (or resolved)
        return
    err = abs(v.value / ref - 1)
    assert v.resolved and err <= v.rel_error and err < 1e-12


@pytest.mark.parametrize("rep", REPRESENTATIONS)
@settings(max_examples=6)
@given(st.integers(0, 10**6))
def test_matches_the_autocovariance_series(rep, seed):
    """Var(f) + 2 sum_k Cov(f(X_0), f(X_k)), summed until the terms vanish."""
    src = ScoreTable.random(2, 3, seed=seed)
    P = glauber_kernel(src).toarray()
    ch = chain_in(rep, source=src)
    pi = ch.stationary.value
    f = np.random.default_rng(seed).standard_normal(P.shape[0])
    fb = f - pi @ f
    total, v = pi @ fb**2, fb.copy()
    for _ in range(5000):
        v = P @ v
        term = pi @ (fb * v)
        total += 2 * term
        if abs(term) < 1e-17:
            break
    assert ch.asymptotic_variance(f).value == pytest.approx(total, rel=1e-9)


def test_reversible_bound_is_attained_by_the_second_eigenvector(chain_of):
    """sigma^2(f) <= (2/gap - 1) Var(f), with equality for the slowest eigenfunction."""
    src = IsingModel(nx.cycle_graph(5), couplings=0.8, fields=0.3)
    P = glauber_kernel(src)
    ch = chain_of(source=src)
    pi = ch.stationary.value
    gap = float(ch.spectral_gap)
    s = np.sqrt(pi)
    B = P.toarray() * s[:, None] / s[None, :]
    vals, vecs = np.linalg.eigh((B + B.T) / 2)
    f2 = vecs[:, -2] / s  # Var_pi(f2) = 1
    assert ch.asymptotic_variance(f2).value == pytest.approx(2 / gap - 1, rel=1e-9)
    for f in np.random.default_rng(0).standard_normal((5, P.shape[0])):
        var = pi @ (f - pi @ f) ** 2
        assert ch.asymptotic_variance(f).value <= (2 / gap - 1) * var * (1 + 1e-10)


@pytest.mark.parametrize("depth", [20.0, 28.0, 60.0, 69.0])  # additive gaps 8.8e-10, 3.9e-13, 8.8e-27, 3.7e-30
def test_metastable_birth_death_variance_against_high_precision(depth, matrix_chain_of):
    """The metastable double well's asymptotic variance on dense and CSR, within its stated bound of
    a 60+-digit solve of the Poisson equation, resolved to 1e-8 and in bounded time (CSR's Krylov
    solvers stall at a relative residual of 1e-5 on these chains; the sparse route factors them)."""
    P, V = birth_death(depth=depth)
    ch = matrix_chain_of(P)
    N = P.shape[0]
    f = (np.arange(N) > N // 2).astype(float)  # the right well
    with within_seconds(5):
        v = ch.asymptotic_variance(f)
    with mp.workdps(60 + int(depth)):
        # the chain mlmix analyses: the float off-diagonal entries, diagonal = 1 - their sum (exactly);
        # a float row summing to 1 +- 1e-16 would otherwise leak 1e-16 per step, over ~1/gap steps
        Pm = [[mp.mpf(P[x, y]) if x != y else mp.mpf(0) for y in range(N)] for x in range(N)]
        for x in range(N):
            Pm[x][x] = 1 - mp.fsum(Pm[x])
        w = [mp.mpf(1)]  # birth-death: detailed balance gives the law
        for k in range(N - 1):
            w.append(w[-1] * Pm[k][k + 1] / Pm[k + 1][k])
        Z = mp.fsum(w)
        pi = [x / Z for x in w]
        mean = mp.fsum(p * y for p, y in zip(pi, f))
        fb = [mp.mpf(y) - mean for y in f]
        A = mp.matrix(N, N)
        for x in range(N):
            for y in range(N):
                A[x, y] = (1 if x == y else 0) - Pm[x][y] + pi[y]
        g = mp.lu_solve(A, mp.matrix(fb))
        ref = float(2 * mp.fsum(pi[x] * fb[x] * g[x] for x in range(N)) - mp.fsum(pi[x] * fb[x] ** 2 for x in range(N)))
    assert_encloses(v, ref, slack=1e-12 * ref)
    assert ref > 1e3
    if matrix_chain_of.args == ("operator",):  # Lanczos does not resolve the gap (1e-5 and below) matrix-free,
        assert not v.resolved and v.reason and not ch.spectral_gap.resolved  # so the Poisson error is unbounded
        return
    assert v.resolved and v.rel_error < 1e-8


def test_stalled_krylov_poisson_solve_is_an_enclosure_in_bounded_time():
    """Above the direct limit (forced to 0 here) the metastable double well's Poisson equation stalls in
    GMRES and BiCGSTAB at a relative residual of 1e-7: the answer is the enclosure 0 <= sigma^2 <=
    (2 / gap - 1) Var_pi(f) with the solvers' reason, in seconds (it ran GMRES for minutes before)."""
    P, _ = birth_death(depth=20.0)
    N = P.shape[0]
    f = (np.arange(N) > N // 2).astype(float)
    exact = Chain(P.toarray() if sp.issparse(P) else P).asymptotic_variance(f)
    chain = Chain(sp.csr_array(P), dense_limit=0)
    pi, gap = chain.stationary.value, chain.additive_gap
    with within_seconds(5):
        v = asymptotic_variance_sparse(sp.csr_array(P), f, pi, gap, direct_limit=0)
    assert not v.resolved and "did not converge" in v.reason and v.lower == 0.0
    assert exact.value * (1 + exact.rel_error) <= v.upper


@pytest.mark.parametrize("kind", ["reversible", "non-reversible"])
def test_dense_and_krylov_paths_agree(kind):
    src = PottsModel.random(nx.cycle_graph(5), 3, seed=1) if kind == "reversible" else ScoreTable.random(3, 5, seed=1)
    P = glauber_kernel(src)
    f = src.space.all_states()[:, 0].astype(float) + 0.5 * src.space.all_states()[:, 2]
    dense = Chain(P).asymptotic_variance(f)
    assert "GTH" in Chain(P, dense_limit=16).asymptotic_variance(f).method  # below DENSE_POISSON_LIMIT
    chain = Chain(P, dense_limit=16)
    sparse = asymptotic_variance_sparse(P, f, chain.stationary.value, chain.additive_gap, direct_limit=16)
    assert "GTH" in dense.method and ("GMRES" in sparse.method or "BiCGSTAB" in sparse.method)
    assert sparse.value == pytest.approx(dense.value, rel=1e-8)
    assert abs(sparse.value - dense.value) <= sparse.rel_error * sparse.value + dense.rel_error * dense.value


def test_kemeny_constant_is_the_sum_over_eigenvalues(chain_of):
    """K = sum_{lambda != 1} 1 / (1 - lambda), reversible and non-reversible; and K = sum_j pi_j E_i tau_j
    (CSR and the operator: an enclosure from the trace and the gap, which holds it)."""
    for src in (IsingModel(nx.cycle_graph(5), couplings=0.8), ScoreTable.random(3, 3, seed=2, temperature=0.7)):
        P = glauber_kernel(src).toarray()
        ch = chain_of(source=src)
        ev = np.linalg.eigvals(P)
        ev = np.delete(ev, np.argmin(np.abs(ev - 1)))
        exact = float(np.sum(1 / (1 - ev)).real)
        assert_encloses(ch.kemeny_constant, exact, slack=1e-9 * exact)
        M = np.asarray(ch.mean_first_passage_times())
        pi = ch.stationary.value
        np.testing.assert_allclose(M @ pi, exact, rtol=1e-9)  # the same from every start


def test_kemeny_constant_of_a_metastable_two_state_chain(matrix_chain_of):
    for a, b in [(1e-12, 3e-12), (1e-250, 1e-200)]:
        K = matrix_chain_of(two_state(a, b)).kemeny_constant
        assert_encloses(K, 1 / (a + b), slack=1e-14 / (a + b))


def test_krylov_failure_raises_convergence_error():
    A = sp.diags_array(np.linspace(1e-6, 1, 400))
    op = spla.aslinearoperator(A)
    with pytest.raises(ConvergenceError, match="did not converge"):
        krylov_solve(op, np.ones(400), spd=True, maxiter=2)
    x, method = krylov_solve(op, np.ones(400), spd=True, maxiter=5000)
    np.testing.assert_allclose(A @ x, 1.0, rtol=1e-7)
    assert "CG" in method


def test_bad_functions(matrix_chain_of):
    ch = matrix_chain_of(two_state(0.2, 0.3))
    with pytest.raises(ValueError, match="vector"):
        ch.asymptotic_variance(np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        ch.asymptotic_variance(np.array([1.0, np.nan]))
    with pytest.raises(TypeError):
        ch.asymptotic_variance("f")


def test_kemeny_bounds_of_a_non_reversible_chain_hold_where_the_reversible_ones_fail(matrix_chain_of):
    """P = (1 - s) I + s C (C the cyclic shift on m states): eigenvalues 1 - s + s w^j, so
    K = (1/s) sum_j 1/(1 - w^j) = (m - 1) / (2 s) exactly. The reversible lower end N - 2 + tr P is above
    it (complex eigenvalues break the tangent bound); the non-reversible interval contains it (dense:
    resolved; CSR: that interval or better)."""
    m, s = 5, 0.9
    P = (1 - s) * np.eye(m) + s * np.roll(np.eye(m), 1, axis=1)
    exact = (m - 1) / (2 * s)
    chain = matrix_chain_of(P)
    assert_encloses(chain.kemeny_constant, exact, slack=1e-12 * exact)
    if matrix_chain_of.args == ("dense",):
        assert chain.kemeny_constant.value == pytest.approx(exact, rel=1e-12)
    trace = float(np.trace(P))
    assert m - 2 + trace > exact  # the reversible lower end would be wrong here
    box = kemeny_interval(m, trace, chain.additive_gap, reversible=False)
    assert box.lower <= exact <= box.upper and not box.resolved
    assert box.lower == pytest.approx((m - 1) / 2, rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_non_reversible_kemeny_interval_on_csr_and_operator_contains_the_dense_value(seed, chain_of):
    """K = sum_j pi_j E_i tau_j (first-step equations, independent of the chain's own Kemeny path) is the
    dense chain's value and inside the CSR and operator chains' certified intervals."""
    src = ScoreTable.random(3, 4, seed=seed, scale=2.0)  # 81 states, incompatible: not reversible
    ref = Chain.from_source(src, representation="dense")
    P, pi = ref.to_dense(), ref.stationary.value
    N = P.shape[0]
    M = np.zeros(N)  # M[i] = E_0 tau_i
    for j in range(1, N):
        rest = np.arange(N) != j
        M[j] = np.linalg.solve(np.eye(N - 1) - P[np.ix_(rest, rest)], np.ones(N - 1))[0]
    exact = float(pi @ M)
    k = chain_of(source=src).kemeny_constant
    assert_encloses(k, exact, slack=1e-9 * exact)
    if k.resolved:
        assert k.rel_error < 1e-9
    else:
        assert "non-reversible" in k.method


def test_non_reversible_kemeny_interval_on_a_metastable_chain():
    """The noisy ferromagnet at T = 0.05 (non-reversible, additive gap 1.2e-13, pi down to 5e-33): the
    sparse chain's certified interval contains the dense (GTH, certified) Kemeny constant."""
    from mlmix.theory.reference import noisy_ferromagnet

    P = glauber_kernel(noisy_ferromagnet().at_temperature(0.05))
    dense = Chain(P.toarray())
    exact = dense.kemeny_constant
    assert exact.rel_error is not None and exact.rel_error < 1e-6 and dense.additive_gap.value < 1e-12
    k = Chain(P, dense_limit=4).kemeny_constant
    assert "non-reversible" in k.method and k.upper is not None
    assert k.lower <= exact.value * (1 + exact.rel_error) and exact.value * (1 - exact.rel_error) <= k.upper
    k = chain_in("operator", P).kemeny_constant  # matrix-free: the trace and an unresolved gap, an enclosure
    assert "Re 1/(1 - lambda_j)" in k.method and not k.resolved
    assert k.lower <= exact.value * (1 + exact.rel_error) and (k.upper is None or exact.value <= k.upper)
