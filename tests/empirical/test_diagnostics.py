"""Convergence diagnostics against the exact truth (mlmix.empirical.sampling.convergence, mlmix diagnose)."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
import torch
from scipy import stats

from mlmix.cli import main
from mlmix.empirical.sampling.convergence import (
    KernelSampler,
    coupling_bound,
    diagnose,
    interval_verdict,
    library_diagnostics,
    meeting_times,
)
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.metastable import metastable_sets
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable

torch.set_num_threads(1)


# --------------------------------------------------------------------------- a plain implementation

def _ranks_to_normal(x: np.ndarray) -> np.ndarray:
    r = stats.rankdata(x, method="average").reshape(x.shape)
    return stats.norm.ppf((r - 3 / 8) / (x.size + 1 / 4))


def _split(x: np.ndarray) -> np.ndarray:
    h = x.shape[1] // 2
    return np.vstack([x[:, :h], x[:, -h:]])


def _plain_rhat(x: np.ndarray) -> float:
    m, n = x.shape
    w = x.var(axis=1, ddof=1).mean()
    b = n * x.mean(axis=1).var(ddof=1)
    return float(np.sqrt(((n - 1) / n * w + b / n) / w))


def _plain_ess(x: np.ndarray) -> float:
    """Vehtari et al. 2021, eq. (10) with Geyer's initial positive and monotone sequences, autocovariances
    summed directly (no FFT)."""
    m, n = x.shape
    c = x - x.mean(axis=1, keepdims=True)
    acov = np.array([[c[j, :n - t] @ c[j, t:] / n for t in range(n)] for j in range(m)])
    w = acov[:, 0].mean() * n / (n - 1)
    var_plus = w * (n - 1) / n + x.mean(axis=1).var(ddof=1)
    rho = 1 - (w - acov.mean(axis=0)) / var_plus
    rho[0] = 1.0
    pairs = [rho[0] + rho[1]]
    k = 1
    while 2 * k + 2 < n and rho[2 * k] + rho[2 * k + 1] >= 0:
        pairs.append(min(rho[2 * k] + rho[2 * k + 1], pairs[-1]))
        k += 1
    if 2 * k + 2 < n:  # stopped at the first negative pair: its positive even term is added once
        tail = max(rho[2 * k], 0.0)
    else:  # the autocorrelations ran out: the last pair counts by its (unsmoothed) even term only
        pairs.pop()
        tail = rho[2 * k - 2]
    tau = -1 + 2 * sum(pairs) + tail
    tau = max(tau, 1 / np.log10(m * n))
    return m * n / tau


def _ar_draws(seed: int, m: int = 4, n: int = 400, phi: float = 0.7, shift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.empty((m, n))
    x[:, 0] = rng.normal(size=m)
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + rng.normal(size=m)
    return x + shift * np.arange(m)[:, None]


@pytest.mark.parametrize("seed,shift", [(0, 0.0), (1, 0.0), (2, 0.8)])
def test_library_diagnostics_match_a_plain_implementation(seed, shift):
    x = _ar_draws(seed, shift=shift)
    d = library_diagnostics(x)
    z = _ranks_to_normal(_split(x))
    folded = _ranks_to_normal(np.abs(_split(x) - np.median(x)))
    assert d["rhat"] == pytest.approx(max(_plain_rhat(z), _plain_rhat(folded)), rel=1e-12)
    assert d["ess_bulk"] == pytest.approx(_plain_ess(z), rel=1e-9)
    assert d["mcse"] == pytest.approx(x.std(ddof=1) / np.sqrt(_plain_ess(_split(x))), rel=1e-9)
    tails = [_plain_ess(_split((x <= np.quantile(x, p)).astype(float))) for p in (0.05, 0.95)]
    assert d["ess_tail"] == pytest.approx(min(tails), rel=1e-9)
    if shift:  # chains with different means: R-hat sees it
        assert d["rhat"] > 1.1


def test_constant_draws_have_no_rhat():
    d = library_diagnostics(np.ones((3, 50)))
    assert d["rhat"] is None and d["ess_bulk"] is None and "same value" in d["reason"]


# --------------------------------------------------------------------------- the L-lag coupling bound

def test_coupling_bound_formula():
    # tau = L + 3 with L = 2: max(0, ceil((3 - t) / 2)) = 2, 1, 1, 0 at t = 0..3
    b = coupling_bound(np.array([5, 5]), lag=2, t_max=3)
    assert b["upper_bound"] == [2.0, 1.0, 1.0, 0.0]
    censored = coupling_bound(np.array([5, -1]), lag=2, t_max=3)
    assert censored["upper_bound"] is None and censored["censored"] == 1


def _small_scores():
    return ScoreTable.random(2, 3, seed=4, scale=2.0)


@pytest.mark.parametrize("kernel", ["glauber", "k-gibbs"])
def test_coupling_bound_is_above_the_exact_distance_on_average(kernel):
    """E[max(0, ceil((tau - L - t)/L))] >= d_mu(t) (Biswas, Jacob & Vanetti 2019, Thm 2.5): at every t the
    average over 600 pairs is not significantly below d_mu(t); weakened to the probability P(tau > L + t)
    (the bound capped at 1, as if a lagged pair were a coupling of X_t and Y_t) it is."""
    src = _small_scores() if kernel == "glauber" else IsingModel(nx.path_graph(3), couplings=1.0, beta=1.0)
    chain = Chain.from_source(src, kernel, k=2)
    space = src.space
    start = np.zeros(space.length, dtype=np.int64)
    pairs, lag = 600, 1
    x0 = np.tile(start, (pairs, 1))
    tau = meeting_times(src, chain.P, kernel, x0, x0.copy(), lag, 400, seed=11, space=space)
    assert (tau >= 0).all()
    t_max = 12
    mu = np.zeros(chain.n_states)
    mu[int(space.encode(start))] = 1.0
    d = np.asarray(chain.distance_curve(t_max, start=mu))
    terms = np.maximum(0, -((-(tau[:, None] - lag - np.arange(t_max + 1))) // lag))
    est, se = terms.mean(axis=0), terms.std(axis=0, ddof=1) / np.sqrt(pairs)
    assert np.allclose(coupling_bound(tau, lag, t_max)["upper_bound"], est)
    assert (est + 3 * se >= d).all()
    assert d[0] > 0.25
    weak = (tau[:, None] - lag - np.arange(t_max + 1) > 0).astype(float)
    assert (weak.mean(axis=0) + 3 * weak.std(axis=0, ddof=1) / np.sqrt(pairs) < d).any()


def test_kernel_sampler_draws_rows_of_the_kernel():
    P = np.array([[0.5, 0.5, 0.0], [0.1, 0.0, 0.9], [0.2, 0.3, 0.5]])
    s = KernelSampler(P)
    rng = np.random.default_rng(0)
    x = np.repeat(np.arange(3), 20000)
    y = s.step(x, rng.random(x.size))
    freq = np.array([[np.mean(y[x == i] == j) for j in range(3)] for i in range(3)])
    assert np.abs(freq - P).max() < 0.015
    a, b = s.coupled_step(np.zeros(20000, dtype=np.int64), np.full(20000, 2), rng.random((20000, 3)))
    assert abs(np.mean(a == b) - (1 - 0.5 * np.abs(P[0] - P[2]).sum())) < 0.015  # a maximal coupling
    assert abs(np.mean(a == 0) - 0.5) < 0.015 and abs(np.mean(b == 2) - 0.5) < 0.015


# --------------------------------------------------------------------------- exact ESS

def _stationary_means(P: np.ndarray, f: np.ndarray, pi: np.ndarray, n: int, reps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    s = KernelSampler(P)
    x = rng.choice(len(pi), size=reps, p=pi)
    total = f[x].copy()
    for _ in range(n - 1):
        x = s.step(x, rng.random(reps))
        total += f[x]
    return total / n


def test_exact_ess_two_state_closed_form_and_monte_carlo():
    a, b = 0.05, 0.15
    P = np.array([[1 - a, a], [b, 1 - b]])
    chain = Chain(P)
    f = np.array([0.0, 1.0])
    pi1 = a / (a + b)
    var = pi1 * (1 - pi1)
    lam = 1 - a - b
    sigma2 = var * (1 + lam) / (1 - lam)  # closed form of the two-state chain
    assert float(chain.asymptotic_variance(f)) == pytest.approx(sigma2, rel=1e-12)
    n, reps = 400, 3000
    means = _stationary_means(P, f, np.array([1 - pi1, pi1]), n, reps, seed=3)
    ess_mc = var / means.var(ddof=1)
    assert ess_mc == pytest.approx(n * var / sigma2, rel=0.1)
    assert not ess_mc == pytest.approx(n, rel=0.1)  # the naive n is far off: the test can fail


def test_exact_ess_birth_death_monte_carlo():
    K, p = 8, 0.3  # a lazy birth-death chain on 0..K, drifting to the middle (AR(1)-like)
    P = np.zeros((K + 1, K + 1))
    for i in range(K + 1):
        up = p * (K - i) / K
        down = p * i / K
        if i < K:
            P[i, i + 1] = up
        if i > 0:
            P[i, i - 1] = down
        P[i, i] = 1 - up - down
    chain = Chain(P)
    pi = np.asarray(chain.stationary)
    f = np.arange(K + 1, dtype=float)
    var = float(pi @ (f - pi @ f) ** 2)
    sigma2 = float(chain.asymptotic_variance(f))
    n, reps = 400, 3000
    means = _stationary_means(P, f, pi, n, reps, seed=5)
    assert var / means.var(ddof=1) == pytest.approx(n * var / sigma2, rel=0.1)


# --------------------------------------------------------------------------- verdicts and metastable sets

def _two_mode(field: float = 0.05) -> tuple[Chain, IsingModel]:
    src = IsingModel(nx.complete_graph(6), couplings=1.0, fields=field, beta=0.6)
    return Chain.from_source(src, "glauber"), src


def test_rhat_fooled_by_two_chains_in_the_same_mode():
    chain, src = _two_mode()
    rep = diagnose(chain, src, chains=2, steps=1500, start="0 0 0 0 0 0", functions=["magnetization"], seed=1)
    v = rep["verdicts"]["magnetization"]
    assert rep["diagnostics"]["magnetization"]["rhat"] < 1.01
    assert rep["exact"]["d_start"][-1] > 0.5
    assert v["rhat"]["verdict"] == "overconfident"
    assert v["ess_bulk"]["verdict"] == "overconfident"
    assert v["mcse"]["verdict"] == "overconfident"
    unvisited = [s for s in rep["metastable"] if not s["visited"]]
    assert len(unvisited) == 1 and unvisited[0]["mass"] > 0.5 and unvisited[0]["example"] == [1] * 6


def test_verdicts_agree_on_a_fast_chain():
    src = ScoreTable.random(2, 3, seed=1)
    chain = Chain.from_source(src, "glauber")
    rep = diagnose(chain, src, chains=4, steps=2000, functions=["count:1", "logpi"], seed=0)
    for f in ("count:1", "logpi"):
        v = rep["verdicts"][f]
        assert v["rhat"]["verdict"] == "agrees" and v["ess_bulk"]["verdict"] == "agrees"
        assert abs(rep["diagnostics"][f]["mean"] - rep["exact"]["mean"][f]) < 4 * rep["diagnostics"][f]["mcse"]
    assert rep["verdicts"]["coupling"]["verdict"] in ("agrees", "conservative")


@pytest.mark.parametrize("beta", [1.0, 5.0, 20.0])
def test_metastable_sets_are_the_two_magnetisation_modes(beta):
    src = IsingModel(nx.complete_graph(5), couplings=1.0, beta=beta)  # gap ~ 1e-11 at beta 5, 1.4e-104 at 20
    chain = Chain.from_source(src, "glauber")
    sets = metastable_sets(chain)
    assert len(sets) == 2
    plus = src.space.all_states().sum(axis=1) >= 3
    assert {tuple(s.states) for s in sets} == {tuple(plus), tuple(~plus)}
    for s in sets:
        assert s.mass == pytest.approx(0.5, rel=1e-9)
        assert s.exit_time > 1 / float(chain.spectral_gap) / 10
    no_modes = metastable_sets(Chain.from_source(IsingModel(nx.complete_graph(5), couplings=1.0, beta=0.05)))
    assert len(no_modes) == 1


# --------------------------------------------------------------------------- the command

def test_cli_json_keys_and_errors(capsys):
    rc = main(["diagnose", "--model", "scores", "--vocab", "2", "--length", "3", "--steps", "200", "--chains", "3",
               "--function", "count:1", "--function", "site:0=1", "--seed", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert {"exact", "diagnostics", "coupling", "verdicts", "mlmix_version", "inputs"} <= set(out)
    assert len(out["exact"]["d_start"]) == 201 and set(out["exact"]["ess"]) == {"count:1", "site:0=1"}
    assert {"rhat", "ess_bulk", "ess_tail", "mcse", "mean"} <= set(out["diagnostics"]["count:1"])
    assert out["inputs"]["seed"] == 2 and out["coupling"]["lag"] == 50
    for bad in (["--function", "count:7"], ["--start", "0 1"], ["--function", "wobble"], ["--chains", "1"]):
        assert main(["diagnose", "--model", "scores", "--vocab", "2", "--length", "3", *bad]) == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_empirical_gap_estimates_the_absolute_gap_and_is_blind_to_unvisited_modes():
    from mlmix.empirical.sampling.convergence import empirical_gap, simulate

    src = ScoreTable.random(2, 2, seed=3)
    chain = Chain.from_source(src, "glauber")
    states = simulate(None, chain.P, "glauber", np.zeros((4, 2), dtype=np.int64), 20000, 0, src.space)
    est = empirical_gap(states)
    assert est["visited_states"] == 4
    assert est["value"] == pytest.approx(float(chain.absolute_spectral_gap), rel=0.15)
    trapped, msrc = _two_mode()
    stuck = simulate(msrc, trapped.P, "glauber", np.zeros((2, 6), dtype=np.int64), 1500, 1, msrc.space)
    assert empirical_gap(stuck)["value"] > 100 * float(trapped.absolute_spectral_gap)


def test_the_absolute_gap_is_the_chains_own_on_every_size():
    """diagnose reports Chain.absolute_spectral_gap (the route `mlmix run samplers` takes) also for a
    non-reversible chain above the exact-t_mix limit, not "not computed"."""
    src = ScoreTable.random(3, 3, seed=4)  # incompatible conditionals: a non-reversible Glauber chain
    chain = Chain.from_source(src, "glauber")
    assert not chain.is_reversible
    rep = diagnose(chain, src, chains=2, steps=40, pairs=2, mixing_limit=8, metastable=False)
    assert rep["exact"]["absolute_spectral_gap"] == chain.absolute_spectral_gap.as_dict()
    assert rep["exact"]["absolute_spectral_gap"]["value"] is not None
    assert rep["verdicts"]["gap"]["exact"] == rep["exact"]["absolute_spectral_gap"]["value"]


@pytest.mark.parametrize("sampled, verdict", [(0.5, "overconfident"), (0.09, "agrees"), (0.02, "conservative"),
                                              (0.15, None), (None, None)])
def test_a_path_gap_against_an_interval_is_decided_only_where_the_whole_interval_agrees(sampled, verdict):
    out = interval_verdict("gap_estimate", sampled, 0.05, 0.08)
    assert out["verdict"] == verdict
    if sampled is not None:
        ratios = [sampled / 0.08, sampled / 0.05]  # the ratio over the interval's ends
        decided = {"overconfident": min(ratios) > 2, "conservative": max(ratios) < 0.5,
                   "agrees": 0.5 <= min(ratios) and max(ratios) <= 2}
        assert decided.get(verdict, not any(decided.values()))
    assert interval_verdict("gap_estimate", 0.5, 0.05, 0.08, value=0.1)["verdict"] == "overconfident"


def test_too_large_to_assemble_uses_the_certified_interval():
    src = IsingModel(nx.cycle_graph(8), couplings=1.0, beta=0.3)
    chain = Chain.from_source(src, "glauber", representation="operator")
    rep = diagnose(chain, src, chains=4, steps=400, start="0 0 0 0 0 0 0 0", kernel="glauber", seed=0)
    assert rep["exact"]["d_start"] is None and "too large" in rep["exact"]["reason"]
    v, tm = rep["verdicts"]["magnetization"]["rhat"], rep["exact"]["t_mix"]
    assert v["basis"].startswith("certified")
    if v["verdict"] == "conservative":
        assert tm["upper"] <= 400 and rep["diagnostics"]["magnetization"]["rhat"] >= 1.01
    assert rep["verdicts"]["magnetization"]["ess_bulk"]["verdict"] is None


def test_experiment_case_curves_match_the_exact_side():
    from mlmix.runs.diagnostics import prefixes, run_case

    assert prefixes(2000) == [50, 100, 200, 500, 1000, 2000] and prefixes(60) == [50, 60]
    case = {"name": "trap", "source": "--model ising --graph complete:6 --beta 0.6 --field 0.05",
            "start": "0 0 0 0 0 0", "functions": ["magnetization"]}
    res = run_case(case, chains=2, steps=300, seed=1)
    rows = res["curves"]
    assert [r["N"] for r in rows] == [50, 100, 200, 300]
    d = res["report"]["exact"]["d_start"]
    assert all(r["d_start"] == d[r["N"]] for r in rows)
    sigma2 = res["report"]["exact"]["sigma2"]["magnetization"]["value"]
    var = res["report"]["exact"]["variance"]["magnetization"]
    assert rows[-1]["exact_ess"] == pytest.approx(2 * 300 * var / sigma2)


def test_meeting_time_is_after_the_lag():
    """tau = inf{t > L : X_t = Y_{t-L}}: a pair that is equal at t = L meets at L + 1, so the bound at t = 0
    is 1 (d(0) may be close to 1 from a point start)."""
    src = _small_scores()
    chain = Chain.from_source(src, "glauber")
    x0 = np.zeros((50, 3), dtype=np.int64)
    for kernel, source in (("glauber", src), ("k-gibbs", None)):
        tau = meeting_times(source, chain.P, kernel, x0, x0.copy(), 3, 200, seed=0, space=src.space)
        assert (tau >= 4).all()
