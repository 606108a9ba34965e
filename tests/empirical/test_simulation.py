"""Batched and coupled Glauber chains against the exact kernel of mlmix.theory.kernels.assembled."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from mlmix.empirical.sampling.simulation import (
    NOT_COUPLED,
    inverse_cdf,
    load_trajectory,
    maximal_coupling,
    run_chains,
    run_coupled,
)
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.sources.conditionals import Conditionals, PottsModel, ScoreTable

P_VALUE_FLOOR = 1e-4  # fixed seeds make these deterministic; the floors leave room for changes of stream
TV_RATIO = 2.0  # empirical TV at most twice its typical size under the exact law


def _site_kernels(source: Conditionals) -> list[np.ndarray]:
    """K_i(x, y) = 1[y_{-i} = x_{-i}] pi_i(y_i | x_{-i}), built state by state (independent of glauber_kernel)."""
    space = source.space
    states = space.all_states()
    out = []
    for i in range(space.length):
        K = np.zeros((space.size, space.size))
        probs = np.exp(source.log_conditionals(states, i))
        np.put_along_axis(K, space.neighbours(np.arange(space.size), i), probs, axis=1)
        out.append(K)
    return out


def _law_matches(samples: np.ndarray, space, row: np.ndarray) -> tuple[float, float]:
    """(chi-square p-value with bins of expectation < 5 pooled, TV / typical TV) of sampled states
    against a law; the typical TV of M exact samples is about (1/2) sum_v sqrt(2 p_v (1 - p_v) / (pi M))."""
    counts = np.bincount(space.encode(samples), minlength=space.size).astype(float)
    expected = row * counts.sum()
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    tv = 0.5 * np.abs(counts / counts.sum() - row).sum()
    typical = 0.5 * np.sqrt(2 * row * (1 - row) / (np.pi * counts.sum())).sum()
    return chisquare(obs[keep], exp[keep]).pvalue, tv / typical


@pytest.fixture(scope="module")
def table() -> ScoreTable:
    return ScoreTable.random(3, 3, seed=11, scale=1.5)


def test_batched_chains_follow_the_rows_of_P_t(table):
    P = glauber_kernel(table).toarray()
    M, t = 3000, 5
    starts = table.space.decode(np.array([0, 13]))
    x0 = np.repeat(starts, M, axis=0)  # two different starts mixed in one batch
    tr = run_chains(table, x0, t, seeds=np.arange(2 * M) + 1000, record_every=t)
    Pt = np.linalg.matrix_power(P, t)
    for k, start in enumerate([0, 13]):
        pval, tv = _law_matches(tr.states[-1, k * M:(k + 1) * M], table.space, Pt[start])
        assert pval > P_VALUE_FLOOR
        assert tv < TV_RATIO
    # the test has power: the law after t - 2 steps is rejected
    pval, _ = _law_matches(tr.states[-1, :M], table.space, np.linalg.matrix_power(P, t - 2)[0])
    assert pval < P_VALUE_FLOOR


def test_prefix_is_held_and_the_rest_follows_the_restricted_kernel(table):
    kernels = _site_kernels(table)
    np.testing.assert_allclose(sum(kernels) / 3, glauber_kernel(table).toarray(), atol=1e-14)
    P_free = (kernels[1] + kernels[2]) / 2  # site 0 is the prefix
    M, t = 3000, 4
    x0 = np.repeat(table.space.decode(np.array([22])), M, axis=0)
    tr = run_chains(table, x0, t, seeds=np.arange(M), prefix=1, record_every=1)
    assert (tr.states[:, :, 0] == x0[0, 0]).all()
    pval, tv = _law_matches(tr.states[-1], table.space, np.linalg.matrix_power(P_free, t)[22])
    assert pval > P_VALUE_FLOOR and tv < TV_RATIO, (pval, tv)


def test_each_chain_depends_only_on_its_seed(table):
    x0 = table.space.decode(np.array([1, 5, 9, 26]))
    together = run_chains(table, x0, 40, seeds=[7, 8, 9, 10], record_every=3)
    for b in range(4):
        alone = run_chains(table, x0[b:b + 1], 40, seeds=[7 + b], record_every=8)  # grouping of steps differs too
        np.testing.assert_array_equal(alone.states[-1, 0], together.states[-1, b])
    shuffled = run_chains(table, x0[::-1], 40, seeds=[10, 9, 8, 7], record_every=40)
    np.testing.assert_array_equal(shuffled.states[-1], together.states[-1, ::-1])


def test_inverse_cdf_never_picks_a_zero_probability_symbol():
    p = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]] * 3, dtype=torch.float64)
    u = torch.tensor([0.0, 0.5, np.nextafter(1.0, 0.0)], dtype=torch.float64)
    assert inverse_cdf(p, u).tolist() == [1, 3, 3]
    grid = (torch.arange(1000, dtype=torch.float64) + 0.5) / 1000
    w = torch.tensor([[0.1, 0.0, 0.6, 0.3]], dtype=torch.float64)
    counts = torch.bincount(inverse_cdf(w.expand(1000, 4), grid), minlength=4)
    assert counts.tolist() == [100, 0, 600, 300]


def test_maximal_coupling_has_the_right_marginals_and_agreement():
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
    q = torch.tensor([0.1, 0.3, 0.4, 0.2], dtype=torch.float64)
    N = 200_000
    u = torch.rand((3, N), generator=gen, dtype=torch.float64)
    x, y = maximal_coupling(p.expand(N, 4), q.expand(N, 4), *u)
    tv = 0.5 * (p - q).abs().sum().item()  # 0.4
    assert abs((x == y).double().mean().item() - (1 - tv)) < 0.005
    np.testing.assert_allclose(torch.bincount(x, minlength=4).numpy() / N, p.numpy(), atol=0.005)
    np.testing.assert_allclose(torch.bincount(y, minlength=4).numpy() / N, q.numpy(), atol=0.005)
    same = maximal_coupling(q.expand(10, 4), q.expand(10, 4), *u[:, :10])
    assert torch.equal(same[0], same[1])


def test_coupled_marginals_follow_P_t_and_pairs_never_separate(table):
    P = glauber_kernel(table).toarray()
    M, t = 3000, 4
    x0 = np.repeat(table.space.decode(np.array([0])), M, axis=0)
    y0 = np.repeat(table.space.decode(np.array([26])), M, axis=0)
    tr = run_coupled(table, x0, y0, t, seeds=np.arange(M), record_every=1, stop_when_coupled=False)
    Pt = np.linalg.matrix_power(P, t)
    for states, start in [(tr.states, 0), (tr.states_y, 26)]:
        pval, tv = _law_matches(states[-1], table.space, Pt[start])
        assert pval > P_VALUE_FLOOR and tv < TV_RATIO, (pval, tv)
    # coupling inequality: P(X_t != Y_t) >= TV(P^t(x,.), P^t(y,.))
    assert (tr.states[-1] != tr.states_y[-1]).any(axis=1).mean() >= 0.5 * np.abs(Pt[0] - Pt[26]).sum() - 0.03
    long = run_coupled(table, x0[:200], y0[:200], 300, seeds=np.arange(200), record_every=1, stop_when_coupled=False)
    met = long.coupling_time
    assert (met != NOT_COUPLED).all()
    for b in range(200):
        after = long.steps >= met[b]
        assert np.array_equal(long.states[after, b], long.states_y[after, b])
        before = long.steps < met[b]
        assert (long.states[before, b] != long.states_y[before, b]).any(axis=1).all()


def test_one_step_coupling_contracts_hamming_distance_as_in_theorem_5():
    # x, y differ at site j only: E d_H(X_1, Y_1) = 1 - 1/n + (1/n) sum_{i != j} TV(pi_i(.|x), pi_i(.|y))
    src = PottsModel.random(nx.cycle_graph(4), 3, seed=3, coupling_scale=1.5)
    x = np.array([0, 1, 2, 0])
    y = x.copy()
    y[2] = 1
    n = 4
    tvs = [0.5 * np.abs(np.exp(src.log_conditionals(x[None], i)) - np.exp(src.log_conditionals(y[None], i))).sum()
           for i in range(n) if i != 2]
    exact = 1 - 1 / n + sum(tvs) / n
    M = 20_000
    tr = run_coupled(src, np.tile(x, (M, 1)), np.tile(y, (M, 1)), 1, seeds=np.arange(M), stop_when_coupled=False)
    observed = (tr.states[-1] != tr.states_y[-1]).sum(axis=1).mean()
    assert abs(observed - exact) < 4 * 0.5 / np.sqrt(M)


class _Interrupt(Exception):
    pass


class _Flaky(Conditionals):
    """Wraps a source and raises after a number of queries (a run killed midway)."""

    def __init__(self, inner: Conditionals, fail_after: int) -> None:
        super().__init__(inner.space, inner.temperature)
        self.inner, self.left = inner, fail_after

    def site_scores(self, contexts, site):
        self.left -= 1
        if self.left < 0:
            raise _Interrupt
        return self.inner.site_scores(contexts, site)


@pytest.mark.parametrize("coupled", [False, True])
def test_resume_after_interruption_gives_the_uninterrupted_run(tmp_path, table, coupled):
    rng = np.random.default_rng(0)
    x0, y0 = rng.integers(0, 3, (6, 3)), rng.integers(0, 3, (6, 3))
    args = (x0, y0) if coupled else (x0,)
    runner = run_coupled if coupled else run_chains
    kwargs = dict(seeds=np.arange(6) + 50, record_every=7)
    if coupled:
        kwargs["stop_when_coupled"] = False
    full = runner(_Flaky(table, 10**9), *args, 60, path=tmp_path / "full.jsonl", **kwargs)
    cut = tmp_path / "cut.jsonl"
    with pytest.raises(_Interrupt):
        runner(_Flaky(table, 100), *args, 60, path=cut, **kwargs)
    with open(cut, "a") as fh:  # a record torn by the kill
        fh.write('{"step": 99, "x": [[0, ')
    resumed = runner(_Flaky(table, 10**9), *args, 60, path=cut, **kwargs)
    assert (tmp_path / "full.jsonl").read_text() == cut.read_text()
    np.testing.assert_array_equal(resumed.states, full.states)
    np.testing.assert_array_equal(load_trajectory(cut).states, full.states)
    if coupled:
        np.testing.assert_array_equal(resumed.coupling_time, full.coupling_time)
    # extending a finished run continues the same streams
    longer = runner(_Flaky(table, 10**9), *args, 90, path=cut, **kwargs)
    ref = runner(table, *args, 90, **kwargs)
    assert longer.steps.tolist() == sorted(ref.steps.tolist() + [60])  # the old final record stays
    np.testing.assert_array_equal(longer.states[longer.steps != 60], ref.states)


def test_stopping_when_coupled_keeps_the_streams_exact(tmp_path, table):
    rng = np.random.default_rng(1)
    x0, y0 = rng.integers(0, 3, (5, 3)), rng.integers(0, 3, (5, 3))
    f = tmp_path / "c.jsonl"
    early = run_coupled(table, x0, y0, 500, seeds=np.arange(5), record_every=50, path=f)
    assert early.steps[-1] == early.coupling_time.max() < 500
    cont = run_coupled(table, x0, y0, 600, seeds=np.arange(5), record_every=50, path=f, stop_when_coupled=False)
    ref = run_coupled(table, x0, y0, 600, seeds=np.arange(5), record_every=50, stop_when_coupled=False)
    np.testing.assert_array_equal(cont.states[-1], ref.states[-1])
    np.testing.assert_array_equal(cont.coupling_time, ref.coupling_time)


def test_record_file_format_and_decoded_text(tmp_path, table):
    f = tmp_path / "t.jsonl"
    tr = run_chains(table, np.zeros((2, 3), int), 10, record_every=4, path=f,
                    decode=lambda s: ["".join("abc"[v] for v in row) for row in s])
    lines = [json.loads(line) for line in f.read_text().splitlines()]
    assert lines[0]["format"] == "mlmix-glauber-chains"
    assert [r["step"] for r in lines[1:]] == [0, 4, 8, 10] == tr.steps.tolist()
    assert tr.texts[0] == ["aaa", "aaa"]
    assert tr.texts[-1] == ["".join("abc"[v] for v in row) for row in tr.states[-1]]


def test_bad_input_is_refused(tmp_path, table):
    x0 = np.zeros((2, 3), int)
    with pytest.raises(ValueError, match="prefix"):
        run_chains(table, x0, 1, prefix=3)
    with pytest.raises(ValueError, match="seeds"):
        run_chains(table, x0, 1, seeds=[1])
    with pytest.raises(ValueError, match="shape"):
        run_chains(table, np.zeros((2, 4), int), 1)
    with pytest.raises(ValueError, match="prefix"):
        run_coupled(table, x0, np.ones((2, 3), int), 1, prefix=1)
    with pytest.raises(ValueError, match="record_every"):
        run_chains(table, x0, 1, record_every=0)
    f = tmp_path / "r.jsonl"
    run_chains(table, x0, 3, path=f)
    with pytest.raises(ValueError, match="different run"):
        run_chains(table.at_temperature(2.0), x0, 3, path=f)


class _NumpyOnly(Conditionals):
    """The same source seen only through the numpy interface (no torch fast path)."""

    def __init__(self, inner: Conditionals) -> None:
        super().__init__(inner.space, inner.temperature)
        self.inner = inner

    def site_scores(self, contexts, site):
        return self.inner.site_scores(contexts, site)


def test_mlm_chains_use_the_torch_path_and_follow_the_exact_kernel():
    from mlm_fixtures import tiny_masked_lm

    from mlmix.empirical.models.mlm import MaskedLMConditionals

    mlm = MaskedLMConditionals(*tiny_masked_lm("bert", seed=4), 3, device="cpu", temperature=0.7)
    P = glauber_kernel(mlm).toarray()
    M, t = 3000, 3
    x0 = np.repeat(mlm.space.decode(np.array([5])), M, axis=0)
    fast = run_chains(mlm, x0, t, seeds=np.arange(M), record_every=t)
    pval, tv = _law_matches(fast.states[-1], mlm.space, np.linalg.matrix_power(P, t)[5])
    assert pval > P_VALUE_FLOOR and tv < TV_RATIO, (pval, tv)
    # one sampling implementation: the numpy route gives the same trajectories (float32 logits both ways)
    slow = run_chains(_NumpyOnly(mlm), x0[:200], 20, seeds=np.arange(200), record_every=20)
    np.testing.assert_array_equal(run_chains(mlm, x0[:200], 20, seeds=np.arange(200), record_every=20).states,
                                  slow.states)
    held = run_chains(mlm, x0[:50], 30, seeds=np.arange(50), prefix=2, record_every=1)
    assert (held.states[:, :, :2] == x0[0, :2]).all()
    assert (held.states[-1, :, 2] != x0[0, 2]).any()


def test_the_chain_loop_skips_the_synchronising_range_checks_of_the_torch_path(monkeypatch):
    # the checks (aminmax + int() on the device) would stall a GPU once per step; the chain's own
    # states and sites are valid by construction, so the same trajectory comes without them
    from mlm_fixtures import tiny_masked_lm

    from mlmix.empirical.models.mlm import MaskedLMConditionals

    mlm = MaskedLMConditionals(*tiny_masked_lm("bert", seed=4), 3, device="cpu")
    x0 = np.zeros((8, 3), dtype=np.int64)
    ref = run_coupled(mlm, x0, x0 + 1, 15, seeds=np.arange(8), stop_when_coupled=False)

    def no_checks(*args, **kwargs):
        raise AssertionError("a range check ran inside the chain loop")

    monkeypatch.setattr(torch, "aminmax", no_checks)
    again = run_coupled(mlm, x0, x0 + 1, 15, seeds=np.arange(8), stop_when_coupled=False)
    np.testing.assert_array_equal(again.states, ref.states)
    np.testing.assert_array_equal(again.states_y, ref.states_y)
    with pytest.raises(AssertionError):  # the public torch API still validates
        mlm.log_conditionals_torch(torch.zeros((1, 3), dtype=torch.long), 0)
