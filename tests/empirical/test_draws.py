"""Diagnostics on a user's own draws (mlmix diagnose --draws, diagnose(chain, draws=...))."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import jsonschema
import networkx as nx
import numpy as np
import pytest
import torch
from arviz_stats.base import array_stats

from mlmix.cli import main
from mlmix.empirical.sampling.convergence import check_transitions, diagnose, read_draws
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.sources.conditionals import IsingModel

torch.set_num_threads(1)

N_SITES, BETA = 5, 0.7


def _source() -> IsingModel:
    return IsingModel(nx.cycle_graph(N_SITES), beta=BETA)


def _plain_glauber(m: int = 4, steps: int = 600, seed: int = 3, start: np.ndarray | None = None) -> np.ndarray:
    """Heat-bath Glauber on the Ising cycle written from the formula, not with mlmix:
    p(x_i = 1 | x_-i) = 1 / (1 + exp(-2 beta (s_{i-1} + s_{i+1}))), s = 2x - 1."""
    rng = np.random.default_rng(seed)
    n = N_SITES
    x = rng.integers(0, 2, size=(m, n)) if start is None else np.tile(start, (m, 1))
    out = np.empty((m, steps, n), dtype=np.int64)
    rows = np.arange(m)
    for t in range(steps):
        out[:, t] = x
        i = rng.integers(0, n, size=m)
        s = 2 * x - 1
        h = BETA * (s[rows, (i - 1) % n] + s[rows, (i + 1) % n])
        x = x.copy()
        x[rows, i] = (rng.random(m) < 1 / (1 + np.exp(-2 * h))).astype(np.int64)
    return out


@pytest.fixture(scope="module")
def chain():
    return Chain.from_source(_source(), "glauber")


def test_the_library_numbers_are_arviz_stats_own(chain):
    draws = _plain_glauber()
    rep = diagnose(chain, draws=draws, functions=["count:1"], metastable=False)
    values = (draws == 1).sum(axis=-1).astype(float)  # (m, N): the draws' own chain axis first
    kw = dict(chain_axis=0, draw_axis=1)
    got = rep["diagnostics"]["count:1"]
    assert got["rhat"] == float(array_stats.rhat(values, method="rank", **kw))
    assert got["ess_bulk"] == float(array_stats.ess(values, method="bulk", **kw))
    assert got["ess_tail"] == float(array_stats.ess(values, method="tail", prob=(0.05, 0.95), **kw))
    assert got["mcse"] == float(array_stats.mcse(values, method="mean", **kw))
    assert got["mean"] == values.mean()
    assert rep["inputs"]["chains"] == 4 and rep["inputs"]["steps"] == 599 and rep["inputs"]["draws"] == "supplied"


def test_the_start_law_is_the_draws_first_states(chain):
    draws = _plain_glauber(m=6, seed=11)
    rep = diagnose(chain, draws=draws, functions=["magnetization"], metastable=False)
    space = chain.source.space
    mu = np.bincount(space.encode(draws[:, 0]), minlength=space.size) / draws.shape[0]
    pi = np.asarray(chain.stationary)
    P = chain.P.toarray() if hasattr(chain.P, "toarray") else np.asarray(chain.P)
    d = rep["exact"]["d_start"]
    for t in (0, 1, 7, 40):
        law = mu @ np.linalg.matrix_power(P, t)
        assert d[t] == pytest.approx(0.5 * np.abs(law - pi).sum(), abs=1e-12)


def _count_one_exact(chain) -> tuple:
    """diagnose of the plain Glauber draws on count:1, with the chain's P, pi, f = count of 1s and the
    fundamental matrix Z = (I - P + 1 pi)^-1 for the exact sides of the ESS tests."""
    draws = _plain_glauber()
    rep = diagnose(chain, draws=draws, functions=["count:1"], metastable=False)
    P = chain.P.toarray() if hasattr(chain.P, "toarray") else np.asarray(chain.P)
    pi = np.asarray(chain.stationary)
    f = (chain.source.space.all_states() == 1).sum(axis=1).astype(float)
    Z = np.linalg.inv(np.eye(len(pi)) - P + np.outer(np.ones(len(pi)), pi))  # fundamental matrix
    return draws, rep, pi, f, Z


def test_exact_ess_from_an_independent_poisson_solve(chain):
    draws, rep, pi, f, Z = _count_one_exact(chain)
    fbar = f - pi @ f
    g = Z @ fbar
    var = pi @ fbar**2
    sigma2 = 2 * pi @ (fbar * g) - var
    m, kept = draws.shape[0], draws.shape[1]
    assert rep["exact"]["ess"]["count:1"] == pytest.approx(m * kept * var / sigma2, rel=1e-8)
    assert rep["exact"]["mean"]["count:1"] == pytest.approx(pi @ f, rel=1e-12)


def test_a_callable_equals_its_spec(chain):
    draws = _plain_glauber()

    def ones(states):
        return (states == 1).sum(axis=1)

    by_spec = diagnose(chain, draws=draws, functions=["count:1"], metastable=False)
    by_callable = diagnose(chain, draws=draws, functions=[ones], metastable=False)
    assert by_callable["diagnostics"]["ones"] == by_spec["diagnostics"]["count:1"]
    assert by_callable["exact"]["ess"]["ones"] == by_spec["exact"]["ess"]["count:1"]


def test_draws_that_do_not_fit_the_chain_are_refused(chain):
    draws = _plain_glauber()
    jump = draws.copy()
    jump[2, 10] = 1 - jump[2, 9]  # every site flips at once: impossible for Glauber
    with pytest.raises(ValueError, match=r"chain 2, step 9 -> 10: .* probability 0"):
        diagnose(chain, draws=jump)
    with pytest.raises(TypeError, match="integer array"):
        diagnose(chain, draws=draws.astype(float))
    with pytest.raises(TypeError, match="integer array"):
        diagnose(chain, draws=draws.astype(bool))
    with pytest.raises(ValueError, match="outside 0..1"):
        diagnose(chain, draws=draws + 1)
    with pytest.raises(ValueError, match=r"shape \(chains, steps, n = 5\)"):
        diagnose(chain, draws=draws[..., :4])
    with pytest.raises(ValueError, match="chains, steps"):
        diagnose(chain, draws=draws, chains=4, steps=10)
    with pytest.raises(ValueError, match="returned shape"):
        diagnose(chain, draws=draws, functions=[lambda s: s.sum()])
    with pytest.raises(ValueError, match="non-finite"):
        diagnose(chain, draws=draws, functions=[lambda s: np.where(s[:, 0] == 1, np.nan, 0.0)])


def test_a_zero_probability_transition_is_found_on_every_representation():
    """The same check on the assembled kernel and, for a matrix-free Glauber chain, from the conditionals."""
    src = _source()
    dense = Chain.from_source(src, "glauber")
    draws = _plain_glauber(m=2, steps=50).transpose(1, 0, 2)
    assert "assembled" in check_transitions(dense, src, "glauber", draws)
    assert "Glauber moves" in check_transitions(object(), src, "glauber", draws)
    bad = draws.copy()
    bad[5, 1] = 1 - bad[4, 1]
    for chain in (dense, object()):
        with pytest.raises(ValueError, match="chain 1, step 4 -> 5"):
            check_transitions(chain, src, "glauber", bad)


def test_cli_draws_file(tmp_path, capsys):
    draws = _plain_glauber()
    path = tmp_path / "draws.npz"
    np.savez(path, states=draws)
    argv = ["diagnose", "--model", "ising", "--graph", f"cycle:{N_SITES}", "--beta", str(BETA), "--draws", str(path),
            "--function", "count:1", "--no-metastable", "--json"]
    assert main(argv) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["inputs"]["draws_file"] == str(path) and rep["coupling"]["upper_bound"] is None
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schema" / "diagnose.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(rep)
    values = (draws == 1).sum(axis=-1).astype(float)
    assert rep["diagnostics"]["count:1"]["rhat"] == float(array_stats.rhat(values, method="rank", chain_axis=0,
                                                                             draw_axis=1))
    for extra, match in ((["--chains", "3"], "--chains configure the simulation"),
                         (["--seed", "1"], "--seed configure the simulation")):
        assert main(argv + extra) == 2
        assert match in capsys.readouterr().err
    for name, payload in (("bad.npz", b"PK\x03\x04 not a zip"), ("none.npz", None)):
        bad = tmp_path / name
        if payload is not None:
            bad.write_bytes(payload)
        assert main(argv[:7] + ["--draws", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(bad) in err[0]
    np.savez(tmp_path / "other.npz", x=draws)
    assert main(argv[:7] + ["--draws", str(tmp_path / "other.npz")]) == 2
    assert "no array 'states'" in capsys.readouterr().err


def test_inference_data_netcdf(tmp_path, monkeypatch):
    draws = _plain_glauber(m=2, steps=20)
    path = str(tmp_path / "draws.nc")
    if "arviz" not in sys.modules:
        monkeypatch.setitem(sys.modules, "arviz", None)  # not installed: a one-line refusal
        with pytest.raises(ValueError, match="needs arviz"):
            read_draws(path)
    posterior = {"states": types.SimpleNamespace(values=draws)}
    fake = types.SimpleNamespace(from_netcdf=lambda p: types.SimpleNamespace(posterior=posterior))
    monkeypatch.setitem(sys.modules, "arviz", fake)
    assert np.array_equal(read_draws(path), draws)
    posterior.clear()
    with pytest.raises(ValueError, match="no variable 'states'"):
        read_draws(path)


def test_the_shortest_draws_and_the_largest_warmup_are_accepted(chain, tmp_path, capsys):
    """One rule (mlmix.validation.MIN_KEPT_DRAWS draws kept per chain) for the draws' length and --warmup:
    4 draws per chain with warm-up 0, and 4 + w draws with warm-up w, are diagnosed; one more warm-up step is
    refused with one line naming the largest allowed; the same rule for a simulation (its start is no draw)."""
    draws = _plain_glauber(steps=6)
    for length, warmup in ((4, 0), (6, 2)):
        rep = diagnose(chain, draws=draws[:, :length], warmup=warmup, functions=["count:1"], metastable=False)
        assert rep["inputs"]["kept_per_chain"] == 4 and rep["inputs"]["warmup"] == warmup
        with pytest.raises(ValueError, match=rf"warmup must be <= {length - 4} \({length} draws per chain"):
            diagnose(chain, draws=draws[:, :length], warmup=warmup + 1, functions=["count:1"], metastable=False)
    with pytest.raises(ValueError, match="at least 2 chains of at least 4 states"):
        diagnose(chain, draws=draws[:, :3])
    rep = diagnose(chain, _source(), chains=2, steps=6, warmup=2, pairs=2, metastable=False)
    assert rep["inputs"]["kept_per_chain"] == 4
    with pytest.raises(ValueError, match=r"warmup must be <= 2 \(6 draws per chain"):
        diagnose(chain, _source(), chains=2, steps=6, warmup=3, metastable=False)
    path = tmp_path / "four.npz"
    np.savez(path, states=draws[:, :4])
    argv = ["diagnose", "--model", "ising", "--graph", f"cycle:{N_SITES}", "--beta", str(BETA), "--draws", str(path),
            "--no-metastable"]
    assert main(argv) == 0
    assert "4 chains x 3 steps" in capsys.readouterr().out
    assert main(argv + ["--warmup", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warmup must be <= 0 (4 draws per chain" in err


def test_the_tail_ess_is_compared_with_the_exact_tail_ess(chain):
    """The tail ESS estimates the ESS of the indicators 1{f <= q_p} (p = 5%, 95%), not of the mean: the exact
    side solves the Poisson equation of each indicator at the pi-quantile (here by the fundamental matrix)."""
    draws, rep, pi, f, Z = _count_one_exact(chain)
    total = draws.shape[0] * draws.shape[1]
    want = []
    for p, row in zip((0.05, 0.95), rep["exact"]["ess_tail"]["count:1"]["quantiles"]):
        levels = [v for v in range(N_SITES + 1) if pi[f <= v].sum() >= p]
        assert row["level"] == levels[0]
        g = (f <= levels[0]).astype(float)
        gbar = g - pi @ g
        var = pi @ gbar**2
        if var == 0:
            assert row["ess"] is None
            continue
        sigma2 = 2 * pi @ (gbar * (Z @ gbar)) - var
        assert row["ess"] == pytest.approx(total * var / sigma2, rel=1e-8)
        want.append(row["ess"])
    tail = rep["exact"]["ess_tail"]["count:1"]["value"]
    assert want and tail == min(want)
    verdict = rep["verdicts"]["count:1"]["ess_tail"]
    assert verdict["exact"] == tail != rep["exact"]["ess"]["count:1"]
    assert verdict["ess_tail"] == rep["diagnostics"]["count:1"]["ess_tail"]


def test_the_exact_tail_ess_of_a_two_state_chain():
    """P = [[1 - a, a], [b, 1 - b]], f = x: the 5% quantile is 0 (pi_0 = 3/4), g = 1{x = 0} has
    sigma^2 / Var = (1 + lambda) / (1 - lambda), lambda = 1 - a - b; the 95% indicator is constant (left out)."""
    from mlmix.empirical.sampling.convergence import exact_tail_ess

    a, b = 0.05, 0.15
    chain = Chain(np.array([[1 - a, a], [b, 1 - b]]))
    lam = 1 - a - b
    out = exact_tail_ess(chain, np.array([0.0, 1.0]), np.asarray(chain.stationary), 1000)
    assert out["value"] == pytest.approx(1000 * (1 - lam) / (1 + lam), rel=1e-12)
    assert [q["level"] for q in out["quantiles"]] == [0.0, 1.0] and out["quantiles"][1]["ess"] is None
    flat = exact_tail_ess(chain, np.array([2.0, 2.0]), np.asarray(chain.stationary), 1000)
    assert flat["value"] is None and "undefined" in flat["reason"]
