"""The diagnostics and the matrix-free chain under ``mlmix verify``: the checks of
verify/theorems/diagnostics_checks.py and verify/theorems/representations.py hold on a handful of
instances, their closed forms agree with hand computations, and a buggy library function (monkeypatched)
makes them fail."""

import math

import numpy as np
import pytest

import mlmix.empirical.sampling.convergence as diag
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.operators import KernelOperator
from mlmix.theory.results import Result
from mlmix.theory.sources.conditionals import LogWeightTable, ScoreTable
from mlmix.theory.sources.space import StateSpace
from mlmix.verify import instances as S
from mlmix.verify.runner import load_theorems
from mlmix.verify.theorems import diagnostics_checks as D
from mlmix.verify.verdicts import REGISTRY

load_theorems()


def table_instance(q: int = 3, n: int = 3, seed: int = 1, T: float = 1.0) -> S.Instance:
    return S.Instance(ScoreTable.random(q, n, seed=seed, scale=1.0).at_temperature(T), "gaussian-table",
                      {"seed": seed, "scale": 1.0})


def joint_instance(q: int = 2, n: int = 3, seed: int = 2) -> S.Instance:
    return S.Instance(LogWeightTable.random(StateSpace(q, n), seed=seed), "gaussian-joint", {"seed": seed})


# ------------------------------------------------------------------------------- closed forms

def test_rank_rhat_agrees_with_arviz_and_grows_with_a_shifted_chain():
    """The numpy implementation agrees with arviz-stats on random-walk draws with ties."""
    rng = np.random.default_rng(0)
    draws = np.round(rng.standard_normal((4, 101)).cumsum(axis=1) * 0.1, 1)
    assert D.rank_rhat(draws) == pytest.approx(diag.library_diagnostics(draws)["rhat"], rel=1e-12)
    # a constant shift of one chain leaves the draws' ranks within chain, so R-hat grows
    shifted = draws.copy()
    shifted[0] += 100.0
    assert D.rank_rhat(shifted) > D.rank_rhat(draws)


def test_bulk_ess_agrees_with_arviz_and_of_independent_draws_is_near_the_draw_count():
    rng = np.random.default_rng(2)
    draws = rng.standard_normal((4, 500))
    ess = D.bulk_ess(draws)
    assert ess == pytest.approx(diag.library_diagnostics(draws)["ess_bulk"], rel=1e-9)
    assert 0.8 * draws.size < ess < 1.2 * draws.size


def test_bulk_ess_with_the_mean_method_is_caught(monkeypatch):
    from arviz_stats.base import array_stats

    real = array_stats.ess
    monkeypatch.setattr(array_stats, "ess", lambda x, method="bulk", **kw: real(x, method="mean" if method == "bulk"
                                                                                 else method, **kw))
    x = np.random.default_rng(3).standard_normal((3, 80)).cumsum(axis=1)
    assert not REGISTRY["diagnostics.rhat"].check((x, {})).holds


def test_glauber_dense_and_stationary_match_the_joint():
    inst = joint_instance()
    P = D.glauber_dense(inst.source)
    assert np.allclose(P.sum(axis=1), 1.0, atol=1e-14)
    lw = inst.source.log_joint()
    pi = np.exp(lw - lw.max())
    assert np.allclose(D.stationary_dense(P), pi / pi.sum(), rtol=1e-12)


def test_meeting_law_of_an_exact_sampler():
    """One site: Glauber resamples it from a law that ignores the rest (every conditional is the same), so the
    coupled pair meets at the first step: M' = 1, tau = L + 1, B(t) = [t = 0]."""
    src = ScoreTable(StateSpace(3, 1), np.array([[[0.0, 1.0, -1.0]]]))
    P = D.glauber_dense(src)
    s, tail = D.meeting_survival(src, P, np.full(3, 1 / 3), 2)
    assert np.allclose(s[1:], 0.0) and tail == 0.0
    B, _ = D.lag_bound(s, tail, 2, 4)
    assert B.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert D.counting_bound(np.array([3, 3]), 2, 2).tolist() == [1.0, 0.0, 0.0]
    assert D.counting_bound(np.array([7]), 2, 3).tolist() == [3.0, 2.0, 2.0, 1.0]  # ceil((7 - 2 - t)/2)


# ------------------------------------------------------------------------------- the checks hold

@pytest.mark.parametrize("instance", [
    (table_instance(), "count:0", "uniform", 0),
    (table_instance(2, 4, 5, 0.7), "magnetization", "0 1 1 0", 3),
    (joint_instance(3, 3, 4), "site:1=2", "uniform", 1),
])
def test_exact_ess_holds(instance):
    v = REGISTRY["diagnostics.ess"].check(instance)
    assert v.holds, v.as_dict()
    assert not v.weakened_holds()


def test_rhat_holds_on_constructed_draws():
    rng = np.random.default_rng(4)
    for shift in (0.0, 0.3, 3.0):
        x = rng.standard_normal((3, 57)) + shift * np.arange(3)[:, None]
        v = REGISTRY["diagnostics.rhat"].check((x, {}))
        assert v.holds, v.as_dict()


def coupling_instance(lag: int = 1, start: str = "uniform") -> tuple:
    return table_instance(2, 3, 7, 1.5), lag, start, 0


@pytest.mark.parametrize("lag,start", [(1, "uniform"), (3, "0 1 0")])
def test_coupling_holds(lag, start):
    v = REGISTRY["diagnostics.coupling"].check(coupling_instance(lag, start))
    assert v.holds, v.as_dict()
    assert v.main.lhs <= v.main.rhs


def test_representations_hold():
    for inst, kernel in ((table_instance(3, 3, 2), "glauber"), (joint_instance(2, 4, 3), "k-gibbs")):
        v = REGISTRY["diagnostics.representations"].check((inst, kernel, 5))
        assert v.holds, v.as_dict()


# ------------------------------------------------------------------------------- buggy functions are caught

def test_rhat_over_the_wrong_axis_is_caught(monkeypatch):
    from arviz_stats.base import array_stats

    real = array_stats.rhat
    monkeypatch.setattr(array_stats, "rhat", lambda x, **kw: real(x, **{**kw, "chain_axis": 1, "draw_axis": 0}))
    x = np.random.default_rng(1).standard_normal((4, 40)) + np.arange(4)[:, None] * 0.5
    assert not REGISTRY["diagnostics.rhat"].check((x, {})).holds
    # two chains read as 40 chains of 2 draws: arviz-stats says undefined (None), a wrong answer, not a crash
    assert not REGISTRY["diagnostics.rhat"].check((x[:2], {})).holds


def test_exact_ess_with_a_wrong_sigma2_is_caught(monkeypatch):
    real = Chain.asymptotic_variance

    def off(self, f):
        r = real(self, f)
        return Result.approximate(r.name, 1.01 * r.value, r.rel_error or 1e-12, r.method)

    monkeypatch.setattr(Chain, "asymptotic_variance", off)
    assert not REGISTRY["diagnostics.ess"].check((table_instance(), "count:0", "uniform", 0)).holds


def test_ess_with_the_variance_in_place_of_sigma2_is_caught(monkeypatch):
    real = Chain.asymptotic_variance

    def variance(self, f):
        pi = np.asarray(self.stationary)
        var = float(pi @ (f - pi @ f) ** 2)
        return Result.approximate(real(self, f).name, var, 1e-12, "the variance (wrong)")

    monkeypatch.setattr(Chain, "asymptotic_variance", variance)
    assert not REGISTRY["diagnostics.ess"].check((table_instance(), "count:0", "uniform", 0)).holds


def test_coupling_lag_off_by_one_is_caught(monkeypatch):
    real = diag.coupling_bound
    monkeypatch.setattr(diag, "coupling_bound", lambda tau, lag, t_max: real(tau, max(lag - 1, 1), t_max)
                        if lag > 1 else real(np.asarray(tau) + 1, lag, t_max))
    assert not REGISTRY["diagnostics.coupling"].check(coupling_instance(3)).holds


def test_meeting_time_off_by_one_is_caught(monkeypatch):
    real = diag.meeting_times
    monkeypatch.setattr(diag, "meeting_times", lambda *a, **kw: real(*a, **kw) + 1)
    assert not REGISTRY["diagnostics.coupling"].check(coupling_instance(2)).holds


def test_pairs_that_start_together_meeting_at_lag_is_caught(monkeypatch):
    """tau = L + max(1, M): a pair with X_L = Y_0 meets at L + 1, never at L."""
    real = diag.meeting_times

    def at_lag(source, P, kernel, x0, y0, lag, *rest):
        tau = real(source, P, kernel, x0, y0, lag, *rest)
        return np.where(tau == lag + 1, lag, tau)

    monkeypatch.setattr(diag, "meeting_times", at_lag)
    assert not REGISTRY["diagnostics.coupling"].check(coupling_instance(1, "0 1 0")).holds


def test_a_loose_exact_bound_is_seen_by_the_attaining_instance():
    theorem = REGISTRY["diagnostics.coupling"]
    a = theorem.attaining[0]
    v = theorem.check(a.build())
    assert v.holds and not a.looser(v)
    assert math.isclose(v.main.rhs / v.main.lhs, a.looseness[0], rel_tol=1e-3)


def test_operator_with_a_wrong_normalisation_is_caught(monkeypatch):
    real = KernelOperator.apply

    def scaled(self, u, mode, out=None):
        return real(self, u, mode, out).mul_(1 + 1e-6)

    monkeypatch.setattr(KernelOperator, "apply", scaled)
    v = REGISTRY["diagnostics.representations"].check((table_instance(3, 3, 2), "glauber", 5))
    assert not v.holds


def test_operator_asymptotic_variance_encloses_the_dense_value_on_a_near_compatible_chain():
    """Found by diagnostics.representations: on a non-reversible chain the matrix-free sigma^2(f) left the error of
    its GMRES stationary law out of its bound, and its enclosure [.. 38436, .. 38597] missed the value
    233.6014403866 (dense GTH; 40-digit mpmath: 233.60144038660108)."""
    src = LogWeightTable.random(StateSpace(3, 4), seed=45, scale=1.0)
    table = ScoreTable.from_conditionals(src).table
    noisy = table + 0.001 * np.random.default_rng(46).standard_normal(table.shape)
    source = ScoreTable(src.space, noisy).at_temperature(0.272532)
    f = np.random.default_rng(0).standard_normal(81)
    op = Chain.from_source(source, representation="operator").asymptotic_variance(f)
    assert op.lower <= 233.60144038660108 <= op.upper
