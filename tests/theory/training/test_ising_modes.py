"""eq. (5) Ising model: clique reduction, Prop 4/5 constants against exact probabilities, hitting times."""

from math import comb

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings

from mlmix.theory.chain.hitting import expected_hitting_times, hitting_time_distribution
from mlmix.theory.kernels.assembled import independent_parallel_kernel, k_gibbs_kernel
from mlmix.theory.linalg.matrices import to_dense
from mlmix.theory.training.modes import (
    CliqueIsing,
    assumption5,
    c_R1,
    c_stuck,
    clique_kernel,
    clique_sum,
    k_gibbs_visit_probabilities,
    mode_masks,
    parallel_stuck_probabilities,
    prop4_steps,
    prop5_steps,
    reach_curve,
    visit_probabilities,
)
from mlmix.verify.pitfalls_strategies import modes_instances

SPEC = CliqueIsing(6, (1, 3, 4), 0.7, (0.3, -0.2, 0.1, 0.4, 0.2, -0.1))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6])
def test_clique_reduction_matches_full_k_gibbs(k):
    R1, Rm1 = mode_masks(SPEC)
    start = int(np.flatnonzero(Rm1)[3])
    law = np.zeros(64)
    law[start] = 1.0
    full = hitting_time_distribution(k_gibbs_kernel(SPEC.model(), k), law, R1, 25)
    np.testing.assert_allclose(reach_curve(SPEC, "k-gibbs", start, 25, k), full, atol=1e-13)


@pytest.mark.parametrize("convention", ["ordered", "unordered"])
def test_clique_reduction_matches_full_parallel(convention):
    spec = CliqueIsing(5, (0, 2, 3), 0.5, (0.2, 0.1, -0.3, 0.4, 0.0), convention)
    R1, _ = mode_masks(spec)
    law = np.zeros(32)
    law[0] = 1.0
    full = hitting_time_distribution(independent_parallel_kernel(spec.model()), law, R1, 25)
    np.testing.assert_allclose(reach_curve(spec, "parallel", 0, 25), full, atol=1e-13)


def test_modes_and_assumption5():
    spec = CliqueIsing(5, (0, 1, 2), 3.0, (0.5, 0.3, 0.1, -0.4, 0.2))
    R1, Rm1 = mode_masks(spec)
    assert R1.sum() == Rm1.sum() == 4 and not (R1 & Rm1).any()
    a5 = assumption5(spec)
    assert a5.holds and a5.h_G == pytest.approx(0.9) and a5.J0 == pytest.approx(1.5)
    bad = assumption5(CliqueIsing(10, range(4), 1.0, (5.0,) * 10))  # the L.7 experiment's parameters
    assert not bad.holds and "h_G = 20" in bad.reason and "J0" in bad.reason
    np.testing.assert_array_equal(clique_sum(spec), [-3, -1, -1, 1, -1, 1, 1, 3])


def test_constants_closed_form():
    spec = CliqueIsing(7, (0, 1, 2), 3.0, (0.4, 0.3, 0.2, 0.1, -0.2, 0.1, 0.0))
    hG, J0, k = 0.9, 3.0 - 1.3, 5
    share = np.exp(2 * (J0 + hG)) / (np.exp(2 * (J0 + hG)) + np.exp(2 * J0) + 2**3 - 2)
    assert c_R1(spec, k) == pytest.approx(1 - comb(4, 2) / comb(7, 5) * share, rel=1e-12)
    assert c_stuck(spec) == pytest.approx(2 * (-1 + (1 - np.exp(-2 * J0)) / (1 + np.exp(-2 * J0)) * 1.5) ** 2 / 3)
    assert prop4_steps(0.5, 0.1) == 4 and prop4_steps(0.0, 0.1) == 1
    assert prop5_steps(np.log(40.0), 0.1) == 2
    with pytest.raises(ValueError, match="k <= n"):
        c_R1(spec, 2)
    with pytest.raises(ValueError, match="delta"):
        prop5_steps(1.0, 1.5)


@settings(max_examples=20)
@given(modes_instances())
def test_prop4_one_step_bound_and_visits(inst):
    """The proof's key step: P(x, R_1) >= 1 - c_R1 from every clique state; and visit probabilities
    equal 1 - (no visit), computed independently by the killed chain."""
    spec, k = inst.spec, inst.k
    P = np.asarray(clique_kernel(spec, "k-gibbs", k).todense())
    assert P[:, -1].min() >= 1 - c_R1(spec, k) - 1e-12
    T = 3
    B = np.arange(P.shape[0] - 1)
    no_visit = P[:, B] @ np.linalg.matrix_power(P[np.ix_(B, B)], T - 1) @ np.ones(B.size)
    np.testing.assert_allclose(k_gibbs_visit_probabilities(spec, k, T), 1 - no_visit, atol=1e-12)


@settings(max_examples=15)
@given(modes_instances())
def test_stuck_probability_by_killed_chain(inst):
    spec = inst.spec
    P = clique_kernel(spec, "parallel")
    inside = clique_sum(spec) <= -2
    S = np.flatnonzero(inside)
    T = 4
    stay = np.linalg.matrix_power(P[np.ix_(S, S)], T) @ np.ones(S.size)
    got = parallel_stuck_probabilities(spec, T)
    np.testing.assert_allclose(got[S], stay, atol=1e-12)
    assert np.isnan(got[~inside]).all()


def test_prop5_holds_for_a_big_clique_and_fails_for_a_pair():
    big = CliqueIsing(8, range(8), 0.0, (0.1,) * 8)
    big = CliqueIsing(8, range(8), float(np.abs(big.h).sum()) + 2.0, big.h)
    c = c_stuck(big)
    T = prop5_steps(c, 0.5)
    assert T >= 1
    assert np.nanmin(parallel_stuck_probabilities(big, T)) >= 1 - 0.5
    pair = CliqueIsing(2, (0, 1), 0.002, (0.001, 0.0))  # J0 = 0.001: the Hoeffding radius is negative
    c = c_stuck(pair)
    delta = 2 * np.exp(-c) * (1 + 1e-6)
    assert prop5_steps(c, delta) == 1
    stay = np.nanmin(parallel_stuck_probabilities(pair, 1))
    assert stay == pytest.approx(0.2518, abs=1e-4) and stay < 1 - delta


def test_visit_probabilities_exclude_time_zero():
    P = np.array([[0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(visit_probabilities(P, np.array([True, False]), 1), [0.0, 1.0])
    np.testing.assert_allclose(visit_probabilities(P, np.array([True, False]), 2), [1.0, 1.0])
    np.testing.assert_allclose(visit_probabilities(P, np.array([True, False]), 0), [0.0, 0.0])


def test_clique_hitting_times_agree_with_a_plain_solve_when_well_conditioned():
    for sampler, k in (("k-gibbs", 1), ("k-gibbs", 3), ("parallel", None)):
        P = to_dense(clique_kernel(SPEC, sampler, k))
        target = np.zeros(8, dtype=bool)
        target[-1] = True
        plain = np.linalg.solve(np.eye(7) - P[:7, :7], np.ones(7))
        np.testing.assert_allclose(expected_hitting_times(P, target)[:7], plain, rtol=1e-10)


def test_stable_hitting_times_when_a_plain_solve_fails():
    """Strong coupling: escape probabilities ~1e-17; compare with a 50-digit solve of the same kernel."""
    spec = CliqueIsing(10, range(4), 4.0, (5.0,) * 10)
    P = np.asarray(clique_kernel(spec, "parallel"))
    target = np.zeros(16, dtype=bool)
    target[-1] = True
    got = expected_hitting_times(P, target)[0]
    with mpmath.workdps(50):
        A = mpmath.matrix(15, 15)
        for i in range(15):
            for j in range(15):
                A[i, j] = -mpmath.mpf(P[i, j]) if i != j else mpmath.mpf(0)
            A[i, i] = mpmath.fsum(mpmath.mpf(P[i, j]) for j in range(16) if j != i)  # 1 - P(i,i), exactly
        ref = mpmath.lu_solve(A, mpmath.matrix([1] * 15))[0]
    assert got == pytest.approx(float(ref), rel=1e-9)
    assert got > 1e19
