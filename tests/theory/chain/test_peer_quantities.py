"""The peers' own test cases for the newer chain quantities, run against mlmix: transition path theory
(committors, gross and net flux, total flux, rate, mean first passage time, pathways, the coarse-grained
flux), connected sets, eigenvectors and their normalisation, correlations, relaxation, fingerprints,
propagation and expected counts, from the test suites of deeptime (deeptime-ml/deeptime at dcc3b0ba, v0.4.5)
and msmtools (markovmodel/msmtools at 3f02c64, v1.2.6). Each peer's input and expected numbers are written
here as data (or as the closed form the peer's test evaluates); mlmix's answer, on dense, CSR and matrix-free
chains, is held to its own stated bound against an exact truth (rationals, or mpmath at 40 digits) and to
the peer's tolerance against the peer's numbers. Where mlmix defines or reports a quantity differently, the
test asserts the conversion; where mlmix has no such function, it rebuilds the peer's figure from mlmix's
outputs by the peer's definition. :data:`CASES` is the ledger (docs/exact.md, "The peers' own test cases")."""

import functools
from collections import Counter
from fractions import Fraction
from pathlib import Path

import mpmath as mp
import numpy as np
import pytest
import scipy.sparse as sp
from chain_representations import REPRESENTATIONS, chain_in
from spectral_references import birth_death, mp_correlation, mp_law, mp_matrix, mp_power, mp_stationary
from test_transition_paths import exact_tpt

from mlmix.errors import ConvergenceError
from mlmix.theory.chain.connectivity import connected_sets, is_connected, largest_connected_set
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.transition_paths import pathway_decomposition

DEEPTIME_RF = "deeptime tests/markov/test_reactive_flux.py, tests/markov/tools/flux/test_reactive_flux.py"
MSMTOOLS_TPT = "msmtools tests/flux/test_tpt.py, tests/flux/impl/dense/tpt_test.py (deeptime: the same, bd)"
MSMTOOLS_COMMITTOR = "msmtools tests/analysis/test_committor.py (deeptime: the same)"
MSMTOOLS_PATHS = "msmtools tests/flux/test_pathways.py (deeptime tests/markov/tools/flux/test_pathways.py)"
MSMTOOLS_CC = "msmtools tests/estimation/tests/test_connectivity.py (deeptime: the same)"
MSMTOOLS_EIG = "msmtools tests/analysis/test_decomposition.py"
MSMTOOLS_CORR = "msmtools tests/analysis/impl/dense/correlations_test.py (deeptime: the same)"
MSMTOOLS_FP = "msmtools tests/analysis/impl/dense/fingerprints_test.py (deeptime: the same)"
MSMTOOLS_EC = "msmtools tests/analysis/test_expectations.py, impl/dense/expectations_test.py"

AGREES = "agrees"

#: The ledger: case -> (quantity, peer test files, verdict). A verdict is "agrees", "definition: ..." (mlmix
#: defines or reports it differently; the conversion is asserted) or "not offered: ..." (no mlmix function;
#: the peer's figure is rebuilt from mlmix's outputs by the peer's definition). No case fails.
CASES = {
    "dt5_forward_committor": ("TPT", DEEPTIME_RF, AGREES),
    "dt5_backward_committor": ("TPT", DEEPTIME_RF, AGREES),
    "dt5_gross_flux": ("TPT", DEEPTIME_RF, AGREES),
    "dt5_net_flux": ("TPT", DEEPTIME_RF, AGREES),
    "dt5_total_flux": ("TPT", DEEPTIME_RF, AGREES),
    "dt5_rate": ("TPT", DEEPTIME_RF, AGREES),
    "dt5_mfpt": ("TPT", DEEPTIME_RF, AGREES),
    "dt5_bad_sets": ("TPT", DEEPTIME_RF, AGREES),
    "dt5_flux_production": ("TPT", DEEPTIME_RF, "not offered: net flux out minus net flux in, per state"),
    "dt5_producers_consumers": ("TPT", DEEPTIME_RF, "not offered: the states of positive / negative production"),
    "bdc_stationary": ("TPT", MSMTOOLS_TPT, AGREES),
    "bdc_forward_committor": ("TPT", MSMTOOLS_TPT, AGREES),
    "bdc_backward_committor": ("TPT", MSMTOOLS_TPT, AGREES),
    "bdc_gross_flux": ("TPT", MSMTOOLS_TPT, AGREES),
    "bdc_net_flux": ("TPT", MSMTOOLS_TPT, AGREES),
    "bdc_total_flux": ("TPT", MSMTOOLS_TPT, AGREES),
    "bdc_rate": ("TPT", MSMTOOLS_TPT, AGREES),
    "bdc100_forward_committor": ("TPT", MSMTOOLS_COMMITTOR, AGREES),
    "bdc100_backward_committor": ("TPT", MSMTOOLS_COMMITTOR, AGREES),
    "dt5_pathways": ("pathways", DEEPTIME_RF, "definition: shares of F, the peer's path fluxes are share x F"),
    "msm5_pathways": ("pathways", "msmtools tests/flux/impl/sparse/pathways_test.py",
                      "definition: shares of F, the peer's capacities are share x F"),
    "dt5_pathways_95": ("pathways", DEEPTIME_RF,
                        "definition: mlmix stops at a count (max_paths), the peer at a fraction of F"),
    "dt5_major_flux": ("pathways", DEEPTIME_RF, "not offered: the channels' bottlenecks summed along their edges"),
    "net8_pathways": ("pathways", MSMTOOLS_PATHS, "definition: shares of F, the peer's capacities are share x F"),
    "net8_fraction": ("pathways", MSMTOOLS_PATHS, "definition: a count (max_paths), not a fraction of F"),
    "net8_maxiter": ("pathways", MSMTOOLS_PATHS, "definition: the unassigned share is details['remainder'], "
                     "the peer warns"),
    "almost_converged_pi": ("pathways", MSMTOOLS_PATHS, AGREES),
    "cg16_sets": ("coarse-grained flux", DEEPTIME_RF, "not offered: each set split at A and B"),
    "cg16_stationary": ("coarse-grained flux", DEEPTIME_RF, "not offered: pi summed over each set"),
    "cg16_committors": ("coarse-grained flux", DEEPTIME_RF, "not offered: pi-weighted means over each set"),
    "cg16_gross_flux": ("coarse-grained flux", DEEPTIME_RF, "not offered: f summed between sets"),
    "cg16_net_flux": ("coarse-grained flux", DEEPTIME_RF, "not offered: max(F - F^T, 0) of the summed f"),
    "cc_directed": ("connected sets", MSMTOOLS_CC, AGREES),
    "cc_undirected": ("connected sets", MSMTOOLS_CC, AGREES),
    "cc_largest": ("connected sets", MSMTOOLS_CC, AGREES),
    "cc_is_connected": ("connected sets", MSMTOOLS_CC, AGREES),
    "cc_submatrix": ("connected sets", MSMTOOLS_CC, "not offered: C restricted to the largest set"),
    "eig_values_by_modulus": ("eigenvectors", MSMTOOLS_EIG, AGREES),
    "eig_right": ("eigenvectors", MSMTOOLS_EIG, AGREES),
    "eig_left": ("eigenvectors", MSMTOOLS_EIG, AGREES),
    "eig_biorthogonal": ("eigenvectors", MSMTOOLS_EIG, AGREES),
    "eig_first_left_is_pi": ("eigenvectors", MSMTOOLS_EIG, AGREES),
    "eig_norm_reversible": ("eigenvectors", MSMTOOLS_EIG, AGREES),
    "eig_norm_standard": ("eigenvectors", MSMTOOLS_EIG,
                          "definition: right vectors orthonormal in <., .>_pi, not of unit 2-norm"),
    "corr_t0_disjoint": ("correlations", MSMTOOLS_CORR,
                         "definition: a zero is an interval [-b, b] (no relative accuracy), not exactly 0"),
    "corr_t100_positive": ("correlations", MSMTOOLS_CORR, AGREES),
    "corr_times": ("correlations", MSMTOOLS_CORR, AGREES),
    "relax_stationary_start": ("relaxation", MSMTOOLS_CORR, AGREES),
    "relax_zero_start": ("relaxation", MSMTOOLS_CORR, "definition: a start must be a law; the peer's zero vector "
                         "is refused (0 by linearity)"),
    "relax_zero_start_times": ("relaxation", MSMTOOLS_CORR, "definition: as relax_zero_start, at three times"),
    "fp_autocorrelation": ("fingerprints", MSMTOOLS_FP, AGREES),
    "fp_crosscorrelation": ("fingerprints", MSMTOOLS_FP, AGREES),
    "fp_k4": ("fingerprints", MSMTOOLS_FP, AGREES),
    "fp_lag_tau": ("fingerprints", MSMTOOLS_FP, "definition: timescales in steps, the peer's in units of tau"),
    "fp_relaxation": ("fingerprints", MSMTOOLS_FP, "not offered: (p0 . r_i)(l_i . f) from mlmix's eigenvectors"),
    "fp_general": ("fingerprints", MSMTOOLS_FP, "not offered: ((p0 f) . r_i)(l_i . g) from mlmix's eigenvectors"),
    "fp_expectation": ("correlations", MSMTOOLS_FP, AGREES),
    "corr_decomposition": ("correlations", MSMTOOLS_FP, AGREES),
    "corr_decomposition_k4": ("correlations", MSMTOOLS_FP,
                              "definition: mlmix's correlation is the full sum, the peer's k = 4 a truncation"),
    "relax_decomposition": ("relaxation", MSMTOOLS_FP, AGREES),
    "relax_decomposition_k4": ("relaxation", MSMTOOLS_FP,
                               "definition: mlmix's relaxation is the full sum, the peer's k = 4 a truncation"),
    "propagate_function": ("propagation", MSMTOOLS_FP, "definition: the peer's propagate is P^t x (a function); "
                           "mlmix's is mu P^t, P^t x from relaxations of point masses"),
    "ec_stationary_n20": ("expected counts", MSMTOOLS_EC, AGREES),
    "ec_stationary_n2000": ("expected counts", MSMTOOLS_EC, AGREES),
    "ec_zero_steps": ("expected counts", MSMTOOLS_EC, AGREES),
    "ec_sparse_embedded": ("expected counts", MSMTOOLS_EC, "definition: the peer's 10^4-state matrix has zero rows "
                           "(not stochastic) and is refused; its 20-state core agrees"),
}

_RUN: set[str] = set()


def covers(*names: str):
    """Mark a test as running these ledger cases (checked against :data:`CASES`)."""
    missing = set(names) - set(CASES)
    if missing:
        raise KeyError(f"not in the ledger: {sorted(missing)}")
    _RUN.update(names)
    return lambda test: test


def _close(value, exact, bound: float, slack: float = 0.0) -> None:
    """Every entry of ``value`` within ``bound`` (absolute) plus a float's rounding of ``exact``."""
    value, exact = np.asarray(value, dtype=float), np.asarray(exact, dtype=float)
    assert np.all(np.abs(value - exact) <= bound + 4e-16 * np.abs(exact) + slack), (value, exact, bound)


def _entry_bound(res) -> float:
    """An absolute bound on each entry of a vector result: rel_error x |value|, its max_abs_error, or abs_error."""
    v = np.abs(res.value.toarray() if sp.issparse(res.value) else np.asarray(res.value))
    if res.rel_error is not None:
        return float(res.rel_error * v.max())
    if res.details.get("max_abs_error") is not None:
        return float(res.details["max_abs_error"])
    assert res.abs_error is not None, res
    return float(res.abs_error)


def _dense(x) -> np.ndarray:
    return x.toarray() if sp.issparse(x) else np.asarray(x)


# ---------------------------------------------------------------- TPT: deeptime's 5-state non-reversible chain
P5 = np.array([[0.8, 0.15, 0.05, 0.0, 0.0],
               [0.1, 0.75, 0.05, 0.05, 0.05],
               [0.05, 0.1, 0.8, 0.0, 0.05],
               [0.0, 0.2, 0.0, 0.8, 0.0],
               [0.0, 0.02, 0.02, 0.0, 0.96]])
REF5 = {
    "forward": [0., 0.35714286, 0.42857143, 0.35714286, 1.],
    "backward": [1., 0.65384615, 0.53125, 0.65384615, 0.],
    "gross": [[0., 0.00771792, 0.00308717, 0., 0.],
              [0., 0., 0.00308717, 0.00257264, 0.00720339],
              [0., 0.00257264, 0., 0., 0.00360169],
              [0., 0.00257264, 0., 0., 0.],
              [0., 0., 0., 0., 0.]],
    "net": [[0., 7.71791768e-03, 3.08716707e-03, 0., 0.],
            [0., 0., 5.14527845e-04, 0., 7.20338983e-03],
            [0., 0., 0., 0., 3.60169492e-03],
            [0., 4.33680869e-19, 0., 0., 0.],
            [0., 0., 0., 0., 0.]],
    "total_flux": 0.0108050847458, "rate": 0.0272727272727, "mfpt": 36.6666666667,
    "paths": [[0, 1, 4], [0, 2, 4], [0, 1, 2, 4]],
    "path_fluxes": [0.00720338983051, 0.00308716707022, 0.000514527845036],
    "paths_95": [[0, 1, 4], [0, 2, 4]],
    "major_flux_95": [[0., 0.00720339, 0.00308717, 0., 0.],
                      [0., 0., 0., 0., 0.00720339],
                      [0., 0., 0., 0., 0.00308717],
                      [0., 0., 0., 0., 0.],
                      [0., 0., 0., 0., 0.]],
    "production": [1.080508e-2, 0, 0, 0, -1.080508e-2],
}
#: msmtools' capacities of the same three channels, to 17 digits (tests/flux/impl/sparse/pathways_test.py).
MSM5_CAPACITIES = [0.0072033898305084252, 0.0030871670702178975, 0.00051452784503631509]
#: The peers' tolerances: msmtools' assert_allclose (rtol 1e-5, atol 1e-8, the tightest of the three suites).
PEER = {"rtol": 1e-5, "atol": 1e-8}


def _fractions(P: np.ndarray) -> list[list[Fraction]]:
    return [[Fraction(float(x)) for x in row] for row in P]


def _exact_fluxes(P: np.ndarray, A: list[int], B: list[int]):
    """(pi, q+, q-, gross flux, net flux, F, rate) of the float matrix's chain in rationals."""
    pi, qp, qm, F, rate, _, _ = exact_tpt(P, A, B)
    Pf, n = _fractions(P), len(pi)
    f = [[pi[i] * qm[i] * Pf[i][j] * qp[j] if i != j else Fraction(0) for j in range(n)] for i in range(n)]
    net = [[max(f[i][j] - f[j][i], Fraction(0)) for j in range(n)] for i in range(n)]
    return pi, qp, qm, f, net, F, rate


@functools.cache
def exact5():
    return _exact_fluxes(P5, [0], [4])


@pytest.fixture(scope="module", params=REPRESENTATIONS)
def tpt5(request):
    return chain_in(request.param, P5).transition_paths([0], [4])


@covers("dt5_forward_committor", "dt5_backward_committor")
def test_tpt5_committors(tpt5):
    _, qp, qm, *_ = exact5()
    for res, exact, ref in ((tpt5.forward_committor, qp, REF5["forward"]),
                            (tpt5.backward_committor, qm, REF5["backward"])):
        _close(res.value, [float(x) for x in exact], _entry_bound(res))
        np.testing.assert_allclose(res.value, ref, **PEER)


@covers("dt5_gross_flux", "dt5_net_flux")
def test_tpt5_fluxes(tpt5):
    _, _, _, f, net, _, _ = exact5()
    gross, netf = _dense(tpt5.flux.value), _dense(tpt5.net_flux.value)
    _close(gross, np.array(f, dtype=float), _entry_bound(tpt5.flux))
    _close(netf, np.array(net, dtype=float), tpt5.net_flux.details["max_abs_error"])
    np.testing.assert_allclose(gross, REF5["gross"], **PEER)
    np.testing.assert_allclose(netf, REF5["net"], **PEER)


@covers("dt5_total_flux", "dt5_rate", "dt5_mfpt")
def test_tpt5_total_flux_rate_and_mfpt(tpt5):
    *_, F, rate = exact5()
    for res, exact, ref in ((tpt5.total_flux, F, REF5["total_flux"]), (tpt5.rate, rate, REF5["rate"]),
                            (tpt5.mfpt, 1 / rate, REF5["mfpt"])):
        assert res.resolved and abs(res.value - float(exact)) <= res.rel_error * res.value, (res, exact)
        assert res.value == pytest.approx(ref, rel=PEER["rtol"], abs=PEER["atol"])
    assert abs(float(rate) * 110 / 3 - 1) < 1e-15  # the peer's 0.02727... and 36.66...: 3/110 to 15 digits
    # deeptime's total_flux(net_flux) and total_flux(net_flux, A): the net flux out of A is F
    out_of_A = float(_dense(tpt5.net_flux.value)[0].sum())
    assert abs(out_of_A - tpt5.total_flux.value) <= tpt5.net_flux.abs_error + tpt5.total_flux.rel_error * out_of_A


@covers("dt5_bad_sets")
@pytest.mark.parametrize("A, B", [([], [1]), ([1], []), (list(range(6)), [0]), ([0], list(range(6)))])
def test_tpt5_bad_sets_are_refused(A, B):
    with pytest.raises(ValueError, match="set [AB]"):
        Chain(P5).transition_paths(A, B)
    with pytest.raises(ValueError, match="rows must sum to 1"):  # deeptime's "not a transition matrix"
        Chain(np.array([[.5, .6], [.3, .7]]))


@covers("dt5_flux_production", "dt5_producers_consumers")
def test_tpt5_flux_production_from_the_net_flux(tpt5):
    net = _dense(tpt5.net_flux.value)
    production = net.sum(axis=1) - net.sum(axis=0)
    _close(production, REF5["production"], 2 * tpt5.net_flux.abs_error, slack=5e-9)  # the peer's 7 digits
    assert np.flatnonzero(production > 1e-12).tolist() == [0]
    assert np.flatnonzero(production < -1e-12).tolist() == [4]


def _exact_bottlenecks(net: list[list[Fraction]], paths: list[list[int]]) -> list[Fraction]:
    """The bottleneck of each given path in turn, subtracted from the net flux before the next (exact)."""
    left = [row[:] for row in net]
    out = []
    for path in paths:
        b = min(left[u][v] for u, v in zip(path[:-1], path[1:]))
        for u, v in zip(path[:-1], path[1:]):
            left[u][v] -= b
        out.append(b)
    return out


@covers("dt5_pathways", "msm5_pathways", "dt5_pathways_95", "dt5_major_flux")
def test_tpt5_pathways(tpt5):
    _, _, _, _, net, F, _ = exact5()
    shares = tpt5.pathways()
    assert shares.details["paths"] == REF5["paths"]
    exact = [b / F for b in _exact_bottlenecks(net, REF5["paths"])]
    np.testing.assert_allclose([float(x) for x in exact], [2 / 3, 2 / 7, 1 / 21], rtol=1e-14)
    # the shares are those of the computed net flux: within its entrywise bound over F (module doc)
    _close(shares.value, [float(x) for x in exact], 4 * tpt5.net_flux.details["max_abs_error"] / tpt5.total_flux.value)
    assert sum(shares.value) + shares.details["remainder"] == pytest.approx(1, abs=1e-12)
    fluxes = shares.value * tpt5.total_flux.value  # the peer's path fluxes (definition: share x F)
    np.testing.assert_allclose(fluxes, REF5["path_fluxes"], **PEER)
    np.testing.assert_allclose(fluxes, MSM5_CAPACITIES, **PEER)
    # fraction 0.95: the peer keeps the shortest prefix whose shares reach 0.95; mlmix: max_paths = that count
    k = int(np.searchsorted(np.cumsum(shares.value), 0.95) + 1)
    first = tpt5.pathways(max_paths=k)
    assert first.details["paths"] == REF5["paths_95"]
    assert first.details["remainder"] == pytest.approx(1 - sum(first.value), abs=1e-12)
    # major flux: each kept channel's flux along its edges
    major = np.zeros((5, 5))
    for path, flux in zip(first.details["paths"], first.value * tpt5.total_flux.value):
        for u, v in zip(path[:-1], path[1:]):
            major[u, v] += flux
    np.testing.assert_allclose(major, REF5["major_flux_95"], **PEER)


# ---------------------------------------------------------------- TPT: msmtools' birth-death chain (closed forms)
def _bdc_pq(n: int = 10) -> tuple[list[Fraction], list[Fraction]]:
    """msmtools' BirthDeathChain(q, p): p(i) = P(i, i + 1) = 1/2, q(i) = P(i, i - 1) = 1/2 but at the barrier
    (10 states: p(4) = 0.01, q(6) = 0.1; 100 states: p(49) = 0.01, q(51) = 0.1)."""
    p, q = [0.5] * (n - 1) + [0.0], [0.0] + [0.5] * (n - 1)
    p[n // 2 - 1], q[n // 2 + 1] = 0.01, 0.1
    return [Fraction(x) for x in p], [Fraction(x) for x in q]


def bdc_matrix(n: int = 10) -> np.ndarray:
    p, q = _bdc_pq(n)
    return birth_death([float(x) for x in p[:-1]], [float(x) for x in q[1:]])


@functools.cache
def bdc_closed_forms(a: int = 1, b: int = 8, n: int = 10):
    """The closed forms msmtools' test evaluates (A = {0..a}, B = {b..}): pi(k) proportional to
    prod_(j < k) p(j) / q(j + 1); q+ = 0 on A, 1 on B, and between them the partial sums of
    g(k) = prod_(1 <= j <= k) q(j) / p(j) over their total; q- = 1 - q+; f = pi q- P q+ off the diagonal,
    f+ = max(f - f^T, 0), F = the flux out of A, k_AB = F / sum pi q-. All in rationals."""
    p, q = _bdc_pq(n)
    w = [Fraction(1)]
    for k in range(1, n):
        w.append(w[-1] * p[k - 1] / q[k])
    pi = [x / sum(w) for x in w]
    g = [Fraction(1)]
    for k in range(1, n - 1):
        g.append(g[-1] * q[k] / p[k])
    total = sum(g[a:b])
    qp = [Fraction(0)] * (a + 1) + [sum(g[a:k + 1]) / total for k in range(a, b - 1)] + [Fraction(1)] * (n - b)
    qm = [1 - x for x in qp]
    P = _fractions(bdc_matrix(n))
    f = [[pi[i] * qm[i] * P[i][j] * qp[j] if i != j else Fraction(0) for j in range(n)] for i in range(n)]
    net = [[max(f[i][j] - f[j][i], Fraction(0)) for j in range(n)] for i in range(n)]
    F = sum(f[i][j] for i in range(a + 1) for j in range(a + 1, n))
    return pi, qp, qm, f, net, F, F / sum(x * y for x, y in zip(pi, qm))


@covers("bdc_stationary", "bdc_forward_committor", "bdc_backward_committor", "bdc_gross_flux", "bdc_net_flux",
        "bdc_total_flux", "bdc_rate")
@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_birth_death_tpt_against_the_closed_forms(rep):
    P, A, B = bdc_matrix(), [0, 1], [8, 9]
    pi, qp, qm, f, net, F, rate = bdc_closed_forms()
    solved = _exact_fluxes(P, A, B)  # a second truth: the linear systems solved in rationals
    np.testing.assert_allclose(np.array(solved[:3], dtype=float), np.array([pi, qp, qm], dtype=float), rtol=1e-15,
                               atol=0)
    chain = chain_in(rep, P)
    tp = chain.transition_paths(A, B)
    st = chain.stationary
    pairs = ((st, pi), (tp.forward_committor, qp), (tp.backward_committor, qm), (tp.flux, f))
    for res, exact in pairs:
        value = _dense(res.value)
        _close(value, np.array(exact, dtype=float), _entry_bound(res))
        np.testing.assert_allclose(value, np.array(exact, dtype=float), **PEER)
    _close(_dense(tp.net_flux.value), np.array(net, dtype=float), tp.net_flux.details["max_abs_error"])
    for res, exact in ((tp.total_flux, F), (tp.rate, rate)):
        assert abs(res.value - float(exact)) <= res.rel_error * res.value
        assert res.value == pytest.approx(float(exact), rel=PEER["rtol"])


def mp_committor(P: np.ndarray, A: list[int], B: list[int]) -> list:
    """P_x(tau_B < tau_A) to 40 digits: (I - P_CC) q_C = P_CB 1 by mpmath's LU (C the other states)."""
    M = mp_matrix(P)
    C = [i for i in range(P.shape[0]) if i not in A and i not in B]
    K = mp.matrix(len(C), len(C))
    rhs = mp.matrix(len(C), 1)
    for a, i in enumerate(C):
        for b, j in enumerate(C):
            K[a, b] = (1 if i == j else 0) - M[i, j]
        rhs[a] = mp.fsum(M[i, j] for j in B)
    x = mp.lu_solve(K, rhs)
    q = [mp.mpf(1) if i in B else mp.mpf(0) for i in range(P.shape[0])]
    for a, i in enumerate(C):
        q[i] = x[a]
    return q


@covers("bdc100_forward_committor", "bdc100_backward_committor")
@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_committors_of_the_100_state_birth_death_chain(rep):
    """msmtools' sparse committor case: A = 0..9, B = 90..99, the closed forms against mlmix's committors."""
    A, B = list(range(10)), list(range(90, 100))
    _, qp, qm, *_ = bdc_closed_forms(9, 90, 100)
    P = bdc_matrix(100)
    solved = mp_committor(P, A, B)  # a second truth: the linear system at 40 digits
    assert max(abs(x - y) for x, y in zip(solved, qp)) < mp.mpf(10) ** -30
    chain = chain_in(rep, P)
    if rep == "operator":  # the matrix-free pi stalls here (GMRES at 1.8e-9); the committor does not need it
        with pytest.raises(ConvergenceError, match="stationary law: GMRES"):
            chain.stationary
    forward = chain.committor(A, B)
    backward = chain.committor(B, A)  # reversible: q- of A -> B is the forward committor of B -> A
    for res, exact in ((forward, qp), (backward, qm)):
        _close(res.value, np.array(exact, dtype=float), _entry_bound(res))
        np.testing.assert_allclose(res.value, np.array(exact, dtype=float), **PEER)


# ---------------------------------------------------------------- pathways of msmtools' 8-state flux network
NET8 = {(0, 2): 10.0, (2, 6): 10.0, (1, 3): 100.0, (3, 4): 30.0, (3, 5): 70.0, (4, 6): 5.0, (4, 7): 25.0,
        (5, 6): 30.0, (5, 7): 40.0}
NET8_PATHS = [[1, 3, 5, 7], [1, 3, 5, 6], [1, 3, 4, 7], [0, 2, 6], [1, 3, 4, 6]]
NET8_CAPACITIES = [40.0, 30.0, 25.0, 10.0, 5.0]


def _net8(sparse: bool):
    F = np.zeros((8, 8))
    for (i, j), v in NET8.items():
        F[i, j] = v
    return sp.csr_array(F) if sparse else F


def _mask(states, n=8):
    m = np.zeros(n, dtype=bool)
    m[states] = True
    return m


@covers("net8_pathways", "net8_fraction", "net8_maxiter")
@pytest.mark.parametrize("sparse", [False, True])
def test_pathways_of_the_flux_network(sparse):
    A, B = _mask([0, 1]), _mask([6, 7])
    total = 110.0  # the flux leaving A: 10 + 100
    assert _exact_bottlenecks([[Fraction(NET8.get((i, j), 0)) for j in range(8)] for i in range(8)],
                              NET8_PATHS) == [Fraction(int(c)) for c in NET8_CAPACITIES]
    shares = pathway_decomposition(_net8(sparse), A, B)
    assert shares.details["paths"] == NET8_PATHS and shares.details["remainder"] <= 1e-15
    np.testing.assert_allclose(shares.value * total, NET8_CAPACITIES, rtol=1e-15)  # definition: share x F
    k = int(np.searchsorted(np.cumsum(shares.value), 0.5) + 1)  # the peer's fraction = 0.5
    half = pathway_decomposition(_net8(sparse), A, B, max_paths=k)
    assert half.details["paths"] == NET8_PATHS[:2]
    one = pathway_decomposition(_net8(sparse), A, B, max_paths=1)  # the peer's maxiter = 1 (with a warning)
    assert one.details["paths"] == NET8_PATHS[:1]
    assert one.details["remainder"] == pytest.approx(1 - 40 / 110, rel=1e-15)


@covers("almost_converged_pi")
@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_pathways_with_an_almost_converged_pi(rep):
    """A 4-state reversible matrix whose pi the peer had only almost converged: the pathways run to the end."""
    T = np.array([[0.2576419223095193, 0.2254214623509954, 0.248270708174756, 0.2686659071647294],
                  [0.2233847186210225, 0.2130434781715344, 0.2793477268264001, 0.284224076381043],
                  [0.2118717275169231, 0.2405661227681972, 0.2943396213976011, 0.2532225283172787],
                  [0.2328617711043517, 0.2485926610067547, 0.2571819311236834, 0.2613636367652102]])
    tp = chain_in(rep, T).transition_paths([0], [1])
    shares = tp.pathways()
    assert sum(shares.value) + shares.details["remainder"] == pytest.approx(1, abs=1e-12)
    assert shares.details["remainder"] <= 1e-12
    _, qp, qm, F, *_ = exact_tpt(T, [0], [1])
    assert abs(tp.total_flux.value - float(F)) <= tp.total_flux.rel_error * tp.total_flux.value


# ---------------------------------------------------------------- deeptime's coarse-grained flux (16 states)
P16_NONREV = np.array([
    [0.5, 0.2, 0.0, 0.0, 0.3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.2, 0.5, 0.1, 0.0, 0.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.1, 0.5, 0.2, 0.0, 0.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.1, 0.5, 0.0, 0.0, 0.0, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.3, 0.0, 0.0, 0.0, 0.5, 0.1, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.1, 0.0, 0.0, 0.2, 0.5, 0.1, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.1, 0.0, 0.0, 0.1, 0.5, 0.2, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.3, 0.5, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.5, 0.1, 0.0, 0.0, 0.3, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.2, 0.5, 0.1, 0.0, 0.0, 0.1, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.1, 0.5, 0.1, 0.0, 0.0, 0.2, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.2, 0.5, 0.0, 0.0, 0.0, 0.2],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3, 0.0, 0.0, 0.0, 0.5, 0.2, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.3, 0.5, 0.1, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.2, 0.0, 0.0, 0.1, 0.5, 0.2],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3, 0.0, 0.0, 0.2, 0.5]])
CG_A, CG_B = [0, 4], [11, 15]
CG_USER_SETS = [[2, 3, 6, 7], [10, 11, 14, 15], [0, 1, 4, 5], [8, 9, 12, 13]]
REF_CG = {
    "sets": [{0, 4}, {2, 3, 6, 7}, {10, 14}, {1, 5}, {8, 9, 12, 13}, {11, 15}],
    "pi": [0.15995388, 0.18360442, 0.12990937, 0.11002342, 0.31928127, 0.09722765],
    "forward": [0., 0.56060272, 0.73052426, 0.19770537, 0.36514272, 1.],
    "backward": [1., 0.43939728, 0.26947574, 0.80229463, 0.63485728, 0.],
    "gross": [[0., 0., 0., 0.00427986, 0.00282259, 0.],
              [0., 0, 0.00234578, 0.00104307, 0., 0.00201899],
              [0., 0.00113892, 0, 0., 0.00142583, 0.00508346],
              [0., 0.00426892, 0., 0, 0.00190226, 0.],
              [0., 0., 0.00530243, 0.00084825, 0, 0.],
              [0., 0., 0., 0., 0., 0.]],
    "net": [[0., 0., 0., 0.00427986, 0.00282259, 0.],
            [0., 0., 0.00120686, 0., 0., 0.00201899],
            [0., 0., 0., 0., 0., 0.00508346],
            [0., 0.00322585, 0., 0., 0.00105401, 0.],
            [0., 0., 0.0038766, 0., 0., 0.],
            [0., 0., 0., 0., 0., 0.]],
}
#: deeptime's tolerances for the coarse-grained figures (assert_allclose's default rtol 1e-7 for pi and the
#: committors, rtol 1e-5 / atol 1e-8 for the fluxes); its references carry 8 digits, hence rtol 5e-8 + 8 digits.
CG_DIGITS = {"rtol": 1e-7, "atol": 5e-9}


def p16() -> np.ndarray:
    """deeptime's reversible 16-state chain: C = diag(pi) P_nonrev symmetrised, rows normalised."""
    C = Chain(P16_NONREV).stationary.value[:, None] * P16_NONREV
    C = C + C.T
    return C / C.sum(axis=1)[:, None]


def coarse_sets(user_sets: list[list[int]], A: list[int], B: list[int]) -> list[set[int]]:
    """deeptime's split of the user's sets at A and B: the A parts, then the intermediate parts, then the B
    parts, each group in the user's order (empty parts dropped)."""
    groups = [[set(s) & set(A) for s in user_sets], [set(s) - set(A) - set(B) for s in user_sets],
              [set(s) & set(B) for s in user_sets]]
    return [s for group in groups for s in group if s]


@covers("cg16_sets", "cg16_stationary", "cg16_committors", "cg16_gross_flux", "cg16_net_flux")
@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_coarse_grained_flux_from_mlmix_fine_flux(rep):
    P = p16()
    sets = coarse_sets(CG_USER_SETS, CG_A, CG_B)
    assert sets == REF_CG["sets"]
    chain = chain_in(rep, P)
    assert chain.is_reversible
    tp = chain.transition_paths(CG_A, CG_B)
    pi = chain.stationary.value
    M = np.zeros((16, len(sets)))
    for k, s in enumerate(sets):
        M[sorted(s), k] = 1.0
    cg_pi = pi @ M
    cg_qp = (pi * tp.forward_committor.value) @ M / cg_pi
    cg_qm = (pi * tp.backward_committor.value) @ M / cg_pi
    gross = M.T @ _dense(tp.flux.value) @ M
    np.fill_diagonal(gross, 0.0)
    net = np.maximum(gross - gross.T, 0.0)
    for value, key in ((cg_pi, "pi"), (cg_qp, "forward"), (cg_qm, "backward"), (gross, "gross"), (net, "net")):
        np.testing.assert_allclose(value, REF_CG[key], **CG_DIGITS)
    # the truth: the same aggregation of the exact rational quantities
    epi, eqp, eqm, ef, *_ = _exact_fluxes(P, CG_A, CG_B)
    egross = M.T @ np.array(ef, dtype=float) @ M
    np.fill_diagonal(egross, 0.0)
    _close(gross, egross, 16 * _entry_bound(tp.flux))
    _close(cg_qp, (np.array(epi, dtype=float) * np.array(eqp, dtype=float)) @ M / (np.array(epi, dtype=float) @ M),
           _entry_bound(tp.forward_committor) + 1e-15)
    # reversible up to the rounding of P's entries: q- = 1 - q+ to 1e-14 in rationals, and within mlmix's bounds
    assert max(abs(float(a + b - 1)) for a, b in zip(eqp, eqm)) <= 1e-14
    _close(cg_qm, 1 - cg_qp, _entry_bound(tp.forward_committor) + _entry_bound(tp.backward_committor) + 1e-15)


# ---------------------------------------------------------------- connected sets (msmtools' count matrix)
def count_matrix() -> np.ndarray:
    """Blocks [[1, 4, 3], [3, 2, 4], [4, 5, 1]], [[0, 1], [1, 0]], [[7]] with the moves 2 -> 3 and 4 -> 5."""
    C = sp.block_diag((np.array([[1, 4, 3], [3, 2, 4], [4, 5, 1]]), np.array([[0, 1], [1, 0]]), np.array([[7]])))
    C = C.toarray()
    C[2, 3] = C[4, 5] = 1
    return C


CC_DIRECTED = [[0, 1, 2], [3, 4], [5]]
CC_UNDIRECTED = [[0, 1, 2, 3, 4, 5]]


@covers("cc_directed", "cc_undirected", "cc_largest", "cc_is_connected", "cc_submatrix")
@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_connected_sets_of_the_count_matrix(rep):
    C = count_matrix()
    for M in (C, sp.coo_array(C)):
        assert [s.tolist() for s in connected_sets(M)] == CC_DIRECTED
        assert [s.tolist() for s in connected_sets(M, directed=False)] == CC_UNDIRECTED
        assert largest_connected_set(M).tolist() == CC_DIRECTED[0]
        assert largest_connected_set(M, directed=False).tolist() == CC_UNDIRECTED[0]
        assert not is_connected(M) and is_connected(M, directed=False)
    C1 = C[:3, :3]
    assert is_connected(C1)
    lcc = largest_connected_set(C)
    np.testing.assert_array_equal(C[np.ix_(lcc, lcc)], C1)  # the peer's largest_connected_submatrix
    full = largest_connected_set(C, directed=False)
    np.testing.assert_array_equal(C[np.ix_(full, full)], C)
    chain = chain_in(rep, C / C.sum(axis=1)[:, None])  # the same sets on the chain of the counts
    assert [s.tolist() for s in chain.connected_sets()] == CC_DIRECTED
    assert [s.tolist() for s in chain.connected_sets(directed=False)] == CC_UNDIRECTED


# ---------------------------------------------------------------- eigenvectors: msmtools' metastable birth-death chain
def bdc100() -> np.ndarray:
    """100 states, P(i, i +- 1) = 1/2, the moves 49 -> 50 and 51 -> 50 at 1e-3 (msmtools' decomposition test)."""
    d = 100
    up, down = np.full(d - 1, 0.5), np.full(d - 1, 0.5)
    up[d // 2 - 1] = 0.001
    down[d // 2] = 0.001  # q(51) = P(51, 50)
    return birth_death(up, down)


@functools.cache
def bdc100_eigenvalues_mp(k: int = 10) -> list:
    """The k eigenvalues of largest modulus of the 100-state chain to 40 digits: those of the symmetric
    tridiagonal D^1/2 P D^-1/2 (diagonal P(i, i), off-diagonal sqrt(P(i, i+1) P(i+1, i))) by Sturm bisection."""
    P = bdc100()
    n = P.shape[0]
    a = [mp.mpf(float(P[i, i])) for i in range(n)]
    b2 = [mp.mpf(float(P[i, i + 1])) * mp.mpf(float(P[i + 1, i])) for i in range(n - 1)]

    def below(x):  # the number of eigenvalues < x (Sturm sequence of the LDL^T pivots)
        count, d = 0, mp.mpf(1)
        for i in range(n):
            d = a[i] - x - (b2[i - 1] / d if i else 0)
            if d == 0:
                d = mp.mpf(10) ** -60
            count += d < 0
        return count

    def kth(j):  # the j-th smallest eigenvalue (0-based)
        lo, hi = mp.mpf(-1.01), mp.mpf(1.01)
        for _ in range(140):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if below(mid) > j else (mid, hi)
        return (lo + hi) / 2

    values = [kth(j) for j in list(range(k)) + list(range(n - k, n))]
    return sorted(values, key=lambda v: -abs(v))[:k]


@covers("eig_values_by_modulus", "eig_right", "eig_left", "eig_biorthogonal", "eig_first_left_is_pi",
        "eig_norm_reversible", "eig_norm_standard")
@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_eigenvectors_of_the_metastable_birth_death_chain(rep):
    P, k = bdc100(), 10
    chain = chain_in(rep, P)
    if rep == "operator":  # a named refusal: the matrix-free stationary solve stalls on this gap of 2e-5
        with pytest.raises(ConvergenceError, match="GMRES"):
            chain.eigenvectors(k)
        return
    pairs = chain.eigenvectors(k)
    lam, R, L = np.asarray(pairs.values.value), pairs.right.value, pairs.left.value
    exact = bdc100_eigenvalues_mp(k)
    assert np.all(np.abs(lam - np.array(exact, dtype=float)) <= pairs.values.details["error_bounds"] + 1e-16)
    assert np.all(np.diff(np.abs(lam)) <= 1e-15) and (lam < 0).any()  # by modulus: -0.998 before 0.998
    # the peer's identities: P R = R D, L^T P = D L^T, L^T R = I, l_1 sums to 1, L^T = diag(mu) R ...
    residual_r = np.linalg.norm(P @ R - R * lam, axis=0) / np.linalg.norm(R, axis=0)
    residual_l = np.linalg.norm(L.T @ P - lam[:, None] * L.T, axis=1) / np.linalg.norm(L, axis=0)
    assert np.all(residual_r <= pairs.right.details["residual_bounds"] + 1e-15)
    assert np.all(residual_l <= pairs.left.details["residual_bounds"] + 1e-15)
    np.testing.assert_allclose(P @ R, R * lam, **PEER)
    np.testing.assert_allclose(L.T @ P, lam[:, None] * L.T, **PEER)
    np.testing.assert_allclose(L.T @ R, np.eye(k), atol=1e-12)
    assert L[:, 0].sum() == pytest.approx(1, abs=1e-14)
    np.testing.assert_allclose(L, chain.stationary.value[:, None] * R, rtol=1e-12, atol=1e-300)
    # ... checked to 40 digits: mlmix's vectors, rounded to floats, against the exact eigenvalues
    M = mp_matrix(P)
    for i in (0, 1, 9):
        r = mp.matrix([mp.mpf(float(x)) for x in R[:, i]])
        res = mp.norm(M * r - exact[i] * r) / mp.norm(r)
        assert res <= pairs.right.details["residual_bounds"][i] + abs(lam[i] - float(exact[i])) + 1e-15
    # norm='standard' (definition): unit 2-norm right vectors after the first; the conversion keeps L^T R = I
    s = np.linalg.norm(R, axis=0)
    s[0] = 1.0
    R2, L2 = R / s, L * s
    np.testing.assert_allclose(np.linalg.norm(R2, axis=0)[1:], 1.0, rtol=1e-14)
    np.testing.assert_allclose(L2.T @ R2, np.eye(k), atol=1e-12)
    assert not np.allclose(np.linalg.norm(R, axis=0)[1:], 1.0)  # mlmix's own: orthonormal in <., .>_pi
    np.testing.assert_allclose((R * chain.stationary.value[:, None]).T @ R, np.eye(k), atol=1e-12)


# ---------------------------------------------------------------- correlations, relaxation, fingerprints (BDC 10)
def _indicator(states, n=10):
    v = np.zeros(n)
    v[states] = 1.0
    return v


OBS1, OBS2 = _indicator([0, 1]), _indicator([8, 9])
P0 = _indicator([0, 1, 2, 3]) / 4


@pytest.fixture(scope="module", params=REPRESENTATIONS)
def bdc10(request):
    return chain_in(request.param, bdc_matrix())


def _encloses_each(res, exact) -> None:
    """Each time's value within its stated bound of the 40-digit one."""
    bounds = np.atleast_1d(res.details.get("error_bounds", res.abs_error))
    value = np.atleast_1d(res.value if res.value is not None else np.nan)
    for v, b, e, lo, hi in zip(value, np.broadcast_to(bounds, value.shape), exact,
                               np.atleast_1d(res.details.get("lower", value)),
                               np.atleast_1d(res.details.get("upper", value))):
        assert abs(v - float(e)) <= b + 1e-300 or lo <= float(e) <= hi, (v, b, e)


@covers("corr_t0_disjoint", "corr_t100_positive", "corr_times")
def test_time_correlations(bdc10):
    P = bdc_matrix()
    zero = bdc10.correlation(OBS1, OBS2, 0)
    assert not zero.resolved and zero.lower <= 0 <= zero.upper and zero.upper - zero.lower <= 1e-12
    at100 = bdc10.correlation(OBS1, OBS2, 100)
    assert at100.resolved and at100.lower > 0
    assert abs(at100.value - float(mp_correlation(P, OBS1, OBS2, 100))) <= at100.rel_error * at100.value
    f, g, times = _indicator([3, 4]), _indicator([4, 5, 6, 7]), [1, 2, 20, 40, 100, 200, 1000]
    many = bdc10.correlation(f, g, times)
    each = [bdc10.correlation(f, g, t) for t in times]  # the peer's wrapper against single calls
    np.testing.assert_allclose(many.value, [r.value for r in each], rtol=1e-12)
    _encloses_each(many, [mp_correlation(P, f, g, t) for t in times])


@covers("relax_stationary_start", "relax_zero_start", "relax_zero_start_times")
def test_time_relaxation(bdc10):
    pi = bdc10.stationary.value
    obs = _indicator([9])
    r = bdc10.relaxation(pi, obs, [1, 1000])
    assert r.value[0] == pytest.approx(r.value[1], abs=float(np.max(r.details["error_bounds"])) * 2)
    assert abs(r.value[1] - float(bdc_closed_forms()[0][9])) <= r.details["error_bounds"][1] + 4e-16
    for t in (1000, [1, 100, 1000]):  # the peer's p0 = zeros(10) / 10: not a law, refused with one line
        with pytest.raises(ValueError, match="mu must sum to 1"):
            bdc10.relaxation(np.zeros(10), obs, t)


@functools.cache
def bdc10_rdl():
    """The full decomposition of the 10-state chain to 40 digits: eigenpairs of S = D^1/2 P D^-1/2 (mpmath
    eigsy), r_i = v_i / sqrt(pi), l_i = v_i sqrt(pi), timescales -1 / log |lambda_i|."""
    M = mp_matrix(bdc_matrix())
    pi = mp_stationary(M)
    n = M.rows
    S = mp.matrix(n, n)
    for i in range(n):
        for j in range(n):
            S[i, j] = mp.sqrt(pi[i]) * M[i, j] / mp.sqrt(pi[j])
    S = (S + S.T) / 2
    E, Q = mp.eigsy(S)
    order = sorted(range(n), key=lambda i: -abs(E[i]))
    lam = [E[i] for i in order]
    R = [[Q[x, i] / mp.sqrt(pi[x]) for i in order] for x in range(n)]
    L = [[Q[x, i] * mp.sqrt(pi[x]) for i in order] for x in range(n)]
    return pi, lam, R, L


def _mp_amplitudes(w, g):
    """(w . r_i)(l_i . g) for every i, to 40 digits (w: pi f for a correlation, p0 f or p0 for a relaxation)."""
    _, lam, R, L = bdc10_rdl()
    n = len(lam)
    return [mp.fsum(mp.mpf(float(w[x])) * R[x][i] for x in range(n))
            * mp.fsum(L[x][i] * mp.mpf(float(g[x])) for x in range(n)) for i in range(n)]


@covers("fp_autocorrelation", "fp_crosscorrelation", "fp_k4", "fp_lag_tau", "fp_expectation")
def test_fingerprints(bdc10):
    pi, lam, *_ = bdc10_rdl()
    pi_f = np.array(pi, dtype=float)
    ts_exact = [mp.inf] + [-1 / mp.log(abs(x)) for x in lam[1:]]
    for g in (OBS1, OBS2):
        fp = bdc10.fingerprint(OBS1, g)
        exact = _mp_amplitudes(pi_f * OBS1, g)
        bounds = fp.amplitudes.details["error_bounds"]
        assert np.all(np.abs(fp.amplitudes.value - np.array(exact, dtype=float)) <= bounds + 1e-17)
        ts = fp.timescales
        assert ts.value[0] == np.inf
        assert np.all((ts.details["lower"][1:] <= np.array(ts_exact[1:], dtype=float) * (1 + 1e-15))
                      & (np.array(ts_exact[1:], dtype=float) <= ts.details["upper"][1:] * (1 + 1e-15)))
        np.testing.assert_allclose(fp.amplitudes.value, np.array(exact, dtype=float), rtol=PEER["rtol"], atol=1e-12)
        four = bdc10.fingerprint(OBS1, g, k=4)  # the peer's k = 4: the four slowest
        np.testing.assert_allclose(four.amplitudes.value, fp.amplitudes.value[:4], rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(four.timescales.value[1:], fp.timescales.value[1:4])
    tau = 7.5  # the peer's lag time: its timescales are tau x mlmix's (in steps)
    np.testing.assert_allclose(tau * fp.timescales.value[1:], tau * np.array(ts_exact[1:], dtype=float), rtol=1e-8)
    expectation = bdc10.correlation(OBS1, np.ones(10), 0)  # E_pi f = C_(f, 1)(0)
    assert abs(expectation.value - float(pi[0] + pi[1])) <= expectation.rel_error * expectation.value


@covers("fp_relaxation", "fp_general")
def test_relaxation_fingerprints_from_mlmix_eigenvectors(bdc10):
    pairs = bdc10.eigenvectors()
    R, L = pairs.right.value, pairs.left.value
    for w, g in ((P0, OBS1), (P0 * OBS1, OBS2)):
        amps = (w @ R) * (L.T @ g)
        np.testing.assert_allclose(amps, np.array(_mp_amplitudes(w, g), dtype=float), rtol=1e-6, atol=1e-12)
    # the relaxation amplitudes sum, with lambda^t, to mlmix's own relaxation (t = 0 and 5)
    lam = np.asarray(pairs.values.value)
    amps = (P0 @ R) * (L.T @ OBS1)
    r = bdc10.relaxation(P0, OBS1, [0, 5])
    np.testing.assert_allclose([amps.sum(), (amps * lam**5).sum()], r.value, atol=1e-10)


CORR_TIMES = [1, 5, 10, 20, 100]


@covers("corr_decomposition", "corr_decomposition_k4", "relax_decomposition", "relax_decomposition_k4")
def test_correlation_and_relaxation_against_the_decomposition(bdc10):
    pi, lam, *_ = bdc10_rdl()
    pi_f = np.array(pi, dtype=float)
    for kind, w, g in (("corr", pi_f * OBS1, OBS1), ("corr", pi_f * OBS1, OBS2), ("relax", P0, OBS1)):
        amps = _mp_amplitudes(w, g)
        full = [mp.fsum(a * x**t for a, x in zip(amps, lam)) for t in CORR_TIMES]
        four = [mp.fsum(a * x**t for a, x in zip(amps[:4], lam[:4])) for t in CORR_TIMES]
        res = bdc10.correlation(OBS1, g, CORR_TIMES) if kind == "corr" else bdc10.relaxation(P0, g, CORR_TIMES)
        _encloses_each(res, full)
        np.testing.assert_allclose(res.value, np.array(full, dtype=float), rtol=PEER["rtol"], atol=1e-12)
        # the peer's k = 4 truncation differs by the six fastest processes' terms, no more
        gap = np.array([float(a - b) for a, b in zip(full, four)])
        np.testing.assert_allclose(res.value - np.array(four, dtype=float), gap,
                                   atol=float(np.max(res.details["error_bounds"])) + 1e-15)


@covers("propagate_function")
@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_propagation_of_a_function(rep):
    """msmtools' propagate(A, x, t) = A^t x for x = (0.2, 0.2, 0.2) (not a law): P^t x is the relaxation
    from each point mass; mlmix's propagate is the law mu P^t, checked at the same times."""
    A = np.array([[0.2, 0.5, 0.3], [0.4, 0.2, 0.4], [0.0, 0.1, 0.9]])
    x = np.array([0.2, 0.2, 0.2])
    chain = chain_in(rep, A)
    M = mp_matrix(A)
    for t in (1, 2, 100):
        exact = mp_power(M, t) * mp.matrix([mp.mpf(0.2)] * 3)
        y = [chain.relaxation(i, x, t) for i in range(3)]
        for i in range(3):
            assert abs(y[i].value - float(exact[i])) <= y[i].rel_error * abs(y[i].value) + 1e-17
        np.testing.assert_allclose([r.value for r in y], np.linalg.matrix_power(A, t) @ x, **PEER)
        law = chain.propagate(1, t)
        assert np.abs(law.value - np.array(mp_law(A, [0, 1, 0], t), dtype=float)).sum() <= law.abs_error + 1e-15


# ---------------------------------------------------------------- expected counts
def random_symmetric_counts(seed: int, n: int, high: int, halve: bool) -> np.ndarray:
    """The peers' recipe: C uniform on {0..high-1}, C + C^T (halved in the dense test), rows normalised."""
    C = np.random.default_rng(seed).integers(0, high, size=(n, n)).astype(float)
    C = C + C.T
    C = C / 2 if halve else C
    return C / C.sum(axis=1)[:, None]


@functools.cache
def t100_stationary_mp() -> list:
    return mp_stationary(mp_matrix(random_symmetric_counts(0, 100, 50, True)))


@covers("ec_stationary_n20", "ec_stationary_n2000", "ec_zero_steps")
@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_expected_counts_from_the_stationary_law(rep):
    T = random_symmetric_counts(0, 100, 50, True)
    chain = chain_in(rep, T)
    mu = chain.stationary.value
    pi = np.array(t100_stationary_mp(), dtype=float)
    for n in (20, 2000):
        counts = chain.transition_counts(mu, n)
        C = _dense(counts.value)
        truth = n * pi[:, None] * T  # stationary start: E[C] = n diag(pi) T
        assert np.abs(C - truth).sum() <= counts.abs_error + n * np.abs(mu - pi).sum() + 1e-12 * n
        np.testing.assert_allclose(C, n * mu[:, None] * T, **PEER)
    zero = chain.transition_counts(mu, 0)
    assert _dense(zero.value).sum() == 0


@covers("ec_sparse_embedded")
def test_expected_counts_of_the_embedded_sparse_case():
    """msmtools' sparse case pushes a 20-state matrix into 10^4 states through sparse orthonormal vectors; the
    result has zero rows (not a transition matrix) and is refused; the 20-state matrix itself agrees."""
    T = random_symmetric_counts(1, 20, 100, False)
    embedded = sp.block_diag((sp.csr_array(T), sp.csr_array((9980, 9980))), format="csr")
    with pytest.raises(ValueError, match="rows must sum to 1"):
        Chain(embedded)
    for rep in REPRESENTATIONS:
        chain = chain_in(rep, T)
        mu = chain.stationary.value
        counts = chain.transition_counts(mu, 50)
        np.testing.assert_allclose(_dense(counts.value), 50 * mu[:, None] * T, **PEER)
        pi = np.array(mp_stationary(mp_matrix(T)), dtype=float)
        assert np.abs(_dense(counts.value) - 50 * pi[:, None] * T).sum() <= counts.abs_error + 50 * (
            np.abs(mu - pi).sum() + 1e-14)


# ---------------------------------------------------------------- the ledger
def ledger_rows() -> list[str]:
    """The docs' table rows: per quantity, the cases, agreeing, differing by definition, not offered, failing."""
    rows = []
    for quantity in dict.fromkeys(q for q, _, _ in CASES.values()):
        verdicts = Counter(v.split(":")[0] for q, _, v in CASES.values() if q == quantity)
        total = sum(verdicts.values())
        rows.append(f"| {quantity} | {total} | {verdicts['agrees']} | {verdicts['definition']} | "
                    f"{verdicts['not offered']} | 0 |")
    return rows


def test_every_ledger_case_runs_and_docs_show_the_counts():
    assert _RUN == set(CASES)
    docs = (Path(__file__).resolve().parents[3] / "docs" / "exact.md").read_text()
    for row in ledger_rows():
        assert row in docs, row
    total = Counter(v.split(":")[0] for _, _, v in CASES.values())
    assert (f"{len(CASES)} cases: {total['agrees']} agree, {total['definition']} differ by a stated definition, "
            f"{total['not offered']} ask for a figure mlmix does not offer") in docs
