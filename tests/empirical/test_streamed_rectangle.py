"""The rectangle statistic streamed over every context (mlmix.empirical.model_constants.streamed_rectangle):
max R equals rectangle_summary's (theory/local/rectangles.py) bit for bit on score tables (Hypothesis over
sizes, seeds, temperatures and blocks) and within the stated accuracy on tiny BERT/RoBERTa models queried
directly; its witness re-evaluates to it; R = 0 within the accuracy on compatible sources (Ising, a table
built from a joint); an interrupted sweep resumes; checkpoints of the earlier layout resume; the folder
function reads a run's site files; certify and verify --mlm report it."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import tiny_masked_lm

from mlmix.commands import verify_model as vm
from mlmix.empirical.model_constants import streamed_constants as sc
from mlmix.empirical.model_constants import streamed_rectangle as rect
from mlmix.empirical.model_constants.certify import certify, random_context_lower_bounds
from mlmix.empirical.model_constants.context_search import search_lower_bounds
from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.local.rectangles import rectangle_statistic, rectangle_summary
from mlmix.theory.sources.conditionals import Conditionals, IsingModel, ScoreTable
from mlmix.theory.sources.space import StateSpace


def quiet(_):
    return None


def reevaluate(source, witness) -> float:
    """R of the witness rectangle, by the four edge log-ratios of rectangles.py."""
    return float(rectangle_statistic(source, np.array([witness["state"]]), witness["i"], witness["j"],
                                     witness["a_new"], witness["b_new"])[0])


def joint_table(q: int, n: int, seed: int, T: float = 1.0) -> ScoreTable:
    """s_i(v | x_{-i}) = E(x^{i<-v}) for a random energy E on V^n: compatible (its joint is exp(E/T))."""
    space = StateSpace(q, n)
    E = 3.0 * np.random.default_rng(seed).standard_normal(space.size)
    place = q ** np.arange(n - 2, -1, -1, dtype=np.int64)
    rest = (np.arange(q ** (n - 1), dtype=np.int64)[:, None] // place) % q
    table = np.empty((n, q ** (n - 1), q))
    for i in range(n):
        for v in range(q):
            table[i, :, v] = E[space.encode(np.insert(rest, i, v, axis=1))]
    return ScoreTable(space, table, T)


class Queried(Conditionals):
    """A score table's scores as a queried source (no table at hand: certify counts passes)."""

    def __init__(self, table: ScoreTable) -> None:
        super().__init__(table.space, table.temperature)
        self.table_source = table

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        return self.table_source.site_scores(contexts, site)


def mlm(arch: str, seed: int, T: float = 1.0, frame: str = "c _ ! _ _", candidates: str = "a b c !"):
    model, tok = tiny_masked_lm(arch, seed=seed)
    return MaskedLMConditionals(model, tok, frame=frame, candidates=candidates, device="cpu", temperature=T)


@settings(max_examples=30, deadline=None)
@given(q=st.integers(2, 5), n=st.integers(2, 4), seed=st.integers(0, 10**6), T=st.floats(0.2, 5.0),
       block=st.sampled_from([1, 3, 7, 64, 1 << 15]))
def test_a_table_gives_rectangle_summary_bit_for_bit_and_its_witness(q, n, seed, T, block):
    table = ScoreTable.random(q, n, seed=seed, scale=2.0, temperature=T)
    exact = rectangle_summary(table, quantiles=())
    r = sc.streamed_constants(table, block_rows=block).rectangle
    assert r.max == exact.max and r.count == exact.count and r.score_error == 0.0
    assert rect.table_rectangle(table.table, T, block).max == exact.max
    assert abs(reevaluate(table, r.witness) - r.max) <= r.accuracy
    assert r.witness["a_new"] != r.witness["state"][r.witness["i"]]
    assert r.witness["b_new"] != r.witness["state"][r.witness["j"]]
    res = r.result()
    assert res.lower <= exact.max <= res.upper


@pytest.mark.parametrize("arch,seed", [("bert", 13), ("roberta", 4)])
def test_a_queried_model_matches_its_table_within_the_stated_accuracy(arch, seed, tmp_path):
    source = mlm(arch, seed, T=0.9)
    table = tab.tabulate(source, cache_dir=tmp_path, progress=False, log=quiet)
    exact = rectangle_summary(table, quantiles=())
    r = sc.streamed_constants(source, block_rows=5, log=quiet).rectangle
    assert r.score_error > 0 and abs(r.max - exact.max) <= r.accuracy
    assert abs(reevaluate(table, r.witness) - r.max) <= r.accuracy
    assert exact.max > 100 * r.accuracy  # a random model is incompatible, and certified so
    assert sc.streamed_constants(table, block_rows=5).rectangle.max == exact.max  # its scores: bit for bit


@settings(max_examples=10, deadline=None)
@given(q=st.integers(2, 5), n=st.integers(2, 4), seed=st.integers(0, 10**6))
def test_compatible_sources_have_r_zero_within_the_accuracy(q, n, seed):
    r = sc.streamed_constants(joint_table(q, n, seed, T=0.7), block_rows=4).rectangle
    assert r.max <= r.accuracy and r.result().lower == 0.0
    ising = ScoreTable.from_conditionals(IsingModel(nx.cycle_graph(4), couplings=1.0, beta=0.3))
    r = rect.table_rectangle(ising.table, 1.0)
    assert r.max <= r.accuracy
    incompatible = rect.table_rectangle(ScoreTable.random(q, n, seed=seed).table, 1.0)
    assert incompatible.max > 1e6 * incompatible.accuracy


@settings(max_examples=15, deadline=None)
@given(q=st.integers(2, 4), n=st.integers(2, 4), seed=st.integers(0, 10**6), keep=st.floats(0.2, 1.0))
def test_evaluated_rectangles_are_a_lower_bound_attained_by_their_witness(q, n, seed, keep):
    table = ScoreTable.random(q, n, seed=seed, scale=2.0, temperature=0.6)
    exact = rectangle_summary(table, quantiles=())
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n):
        x = table.space.all_states()
        x[:, k] = 0
        x = np.unique(x, axis=0)
        x = x if keep == 1.0 else x[rng.random(len(x)) < keep]
        rows.append((x, table.site_scores(x, k)))
    found = rect.evaluated_rectangles(rows, 0.6)
    assert found["max"] <= exact.max * (1 + 1e-12)
    if keep == 1.0:
        assert found["max"] == pytest.approx(exact.max, rel=1e-12) and found["rectangles"] == exact.count
    if found["witness"] is not None:
        assert reevaluate(table, found["witness"]) == pytest.approx(found["max"], rel=1e-12)


def _interrupt_sweep_after(monkeypatch, blocks: int) -> dict:
    """Make the rectangle sweep stop (KeyboardInterrupt) after ``blocks`` checkpoints; count the blocks."""
    original = rect.sweep
    seen = {"blocks": 0}

    def interrupted(scores, n, q, block_rows, state, save=None, **kw):
        def checkpoint():
            save()
            seen["blocks"] += 1
            if seen["blocks"] == blocks:
                raise KeyboardInterrupt
        return original(scores, n, q, block_rows, state, checkpoint, **kw)

    monkeypatch.setattr(rect, "sweep", interrupted)
    return seen


def test_an_interrupted_rectangle_sweep_resumes_from_its_block(tmp_path, monkeypatch):
    source = mlm("bert", 3, T=1.3, frame="_ _ b _", candidates="a b c")
    folder = tmp_path / "ck"
    _interrupt_sweep_after(monkeypatch, 6)
    with pytest.raises(KeyboardInterrupt):
        sc.streamed_constants(source, folder=folder, block_rows=3, log=quiet)
    state = json.loads((folder / "state.json").read_text())
    # one context r per block, 3 per pair, then the pair's end: stopped after 2 blocks of the second pair
    assert state["site"] == 3 and (state["rect_pair"], state["rect_row"]) == (1, 2)
    assert all((folder / f"site-{k}.f64").is_file() for k in range(3))  # kept for the rectangle sweep
    shutil.copytree(folder, tmp_path / "sites", ignore=shutil.ignore_patterns("*.json", ".*"))
    seen = _interrupt_sweep_after(monkeypatch, 0)
    queried = {"rows": 0}
    original = sc.query_scores

    def counting(src, states, site):
        queried["rows"] += len(states)
        return original(src, states, site)

    monkeypatch.setattr(sc, "query_scores", counting)
    resumed = sc.streamed_constants(source, folder=folder, block_rows=3, log=quiet)
    # 3 pairs x (3 blocks + the pair's end) in all, 6 of them done before
    assert resumed.resumed and queried["rows"] == 0 and seen["blocks"] == 12 - 6
    monkeypatch.undo()
    direct = rect.rectangle_from_folder(tmp_path / "sites", 1.3, block_rows=3)
    assert resumed.rectangle.max == direct.max and resumed.rectangle.witness == direct.witness
    assert resumed.rectangle.accuracy == direct.accuracy
    whole = sc.streamed_constants(source, block_rows=3, log=quiet).rectangle
    assert abs(whole.max - resumed.rectangle.max) <= whole.accuracy
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["run.json", "state.json"]


def _earlier_layout(folder) -> None:
    """Rewrite the checkpoint as the mlmix before the rectangle wrote it (no rect_* keys)."""
    state = json.loads((folder / "state.json").read_text())
    (folder / "state.json").write_text(json.dumps({k: v for k, v in state.items() if not k.startswith("rect_")}))


def test_checkpoints_of_the_earlier_layout_resume(tmp_path, monkeypatch):
    source = mlm("bert", 3, T=1.3, frame="_ _ b _", candidates="a b c")
    whole = sc.streamed_constants(source, block_rows=4, log=quiet)
    original = sc.query_scores

    def stop_at(call):
        calls = {"n": 0}

        def failing(src, states, site):
            calls["n"] += 1
            if calls["n"] == call:
                raise KeyboardInterrupt
            return original(src, states, site)
        return failing

    # stopped inside site 1; the earlier mlmix had removed site 0's scores: rho resumes, R is not computed
    monkeypatch.setattr(sc, "query_scores", stop_at(5))
    with pytest.raises(KeyboardInterrupt):
        sc.streamed_constants(source, folder=tmp_path / "a", block_rows=4, log=quiet)
    _earlier_layout(tmp_path / "a")
    (tmp_path / "a" / "site-0.f64").unlink()
    monkeypatch.setattr(sc, "query_scores", original)
    s = sc.streamed_constants(source, folder=tmp_path / "a", block_rows=4, log=quiet)
    np.testing.assert_allclose(s.rho_ij, whole.rho_ij, atol=1e-6)
    assert s.resumed and s.rectangle.max is None and "earlier mlmix" in s.rectangle.reason
    assert not s.rectangle.result().resolved and s.rectangle.result().reason == s.rectangle.reason
    # stopped inside site 0 (no site removed yet): the rectangle keys are filled and R is computed
    monkeypatch.setattr(sc, "query_scores", stop_at(2))
    with pytest.raises(KeyboardInterrupt):
        sc.streamed_constants(source, folder=tmp_path / "b", block_rows=4, log=quiet)
    _earlier_layout(tmp_path / "b")
    monkeypatch.setattr(sc, "query_scores", original)
    s = sc.streamed_constants(source, folder=tmp_path / "b", block_rows=4, log=quiet)
    assert s.resumed and abs(s.rectangle.max - whole.rectangle.max) <= whole.rectangle.accuracy
    # a finished run of the earlier layout: answered without a pass, R not computed
    _earlier_layout(tmp_path / "b")
    monkeypatch.setattr(sc, "query_scores", stop_at(1))  # any query fails
    s = sc.streamed_constants(source, folder=tmp_path / "b", block_rows=4, log=quiet)
    assert np.array_equal(s.rho_ij, sc.streamed_constants(source, folder=tmp_path / "b", block_rows=4).rho_ij)
    assert s.rectangle.max is None and "earlier mlmix" in s.rectangle.reason


def test_the_folder_function_refuses_what_is_not_a_run(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        rect.rectangle_from_folder(tmp_path / "none")
    with pytest.raises(ValueError, match="site-0.f64"):
        rect.rectangle_from_folder(tmp_path)
    table = ScoreTable.random(3, 3, seed=1)
    for k in range(3):
        np.save(tmp_path / f"site-{k}.npy", table.table[k])
        (tmp_path / f"site-{k}.npy").rename(tmp_path / f"site-{k}.f64")
    r = rect.rectangle_from_folder(tmp_path, 2.0, model_scores=False)
    assert r.max == rect.table_rectangle(table.table, 2.0).max and r.score_error == 0.0
    assert rect.rectangle_from_folder(tmp_path, 2.0).score_error > 0  # float32 model scores: stated accuracy
    with pytest.raises(ValueError, match="temperature"):
        rect.rectangle_from_folder(tmp_path, 0.0)
    unfinished = table.table[1].copy()
    unfinished[5:] = 0.0
    np.save(tmp_path / "site-1.npy", unfinished)
    (tmp_path / "site-1.npy").rename(tmp_path / "site-1.f64")
    with pytest.raises(ValueError, match="row of zeros"):
        rect.rectangle_from_folder(tmp_path)
    np.save(tmp_path / "site-1.npy", table.table[1][:, :2])
    (tmp_path / "site-1.npy").rename(tmp_path / "site-1.f64")
    with pytest.raises(ValueError, match="shape"):
        rect.rectangle_from_folder(tmp_path)
    (tmp_path / "site-1.f64").unlink()
    with pytest.raises(ValueError, match="site-0.f64"):
        rect.rectangle_from_folder(tmp_path)


def test_certify_reports_r_exact_or_as_a_lower_bound():
    table = ScoreTable.random(3, 4, seed=2, scale=2.0, temperature=0.8)
    exact = rectangle_summary(table, quantiles=()).max
    c = certify(table)
    assert c.rectangle.value == exact and c.as_dict()["rectangle"] is c.rectangle
    source = Queried(table)  # the same scores, queried
    bounded = certify(source, max_passes=60, lower_bounds=search_lower_bounds)
    assert bounded.method != "enumeration" and bounded.rectangle.upper is None
    assert 0 < bounded.rectangle.lower <= exact
    assert reevaluate(table, bounded.rectangle.details["witness"]) <= exact
    sampled = certify(source, max_passes=100, lower_bounds=random_context_lower_bounds)  # uniform contexts: the planes through them, from the same rows
    assert sampled.passes == 96 and sampled.rectangle.upper is None and 0 < sampled.rectangle.lower <= exact
    assert sampled.rectangle.details["rectangles"] >= 6 * 4 * 3 * 3  # at least 6 whole planes, 4 (C(3, 2))^2 each
    w = sampled.rectangle.details["witness"]
    assert reevaluate(table, w) == pytest.approx(w["R"], rel=1e-12) and sampled.rectangle.lower <= w["R"]
    none = certify(source, max_passes=10, lower_bounds=random_context_lower_bounds)  # no context fits: no rectangle, R >= 0 only
    assert none.rectangle.lower == 0.0 and none.rectangle.upper is None and "no rectangle" in none.rectangle.reason


@pytest.fixture
def above_the_exact_limit(monkeypatch):
    monkeypatch.setattr("mlmix.commands.verify_model.CONSTANTS_LIMIT", 16)
    monkeypatch.setattr("mlmix.theory.local.constants.CONSTANTS_LIMIT", 16)


def test_verify_uses_every_rectangle_above_the_exact_limit(above_the_exact_limit):
    compatible = ScoreTable.from_conditionals(IsingModel(nx.cycle_graph(5), beta=0.4))
    rep = vm.model_report(compatible)
    r = {e["id"]: e for e in rep["results"]}["glauber.rectangle"]
    assert r["status"] == "applies" and r["why"].startswith("compatible") and r["conclusion"] == "holds"
    assert "every rectangle, streamed" in rep["constants"]
    rep = vm.model_report(ScoreTable.random(2, 5, seed=3))
    r = {e["id"]: e for e in rep["results"]}["glauber.rectangle"]
    assert r["status"] == "applies" and "(all rectangles): incompatible" in r["why"] and r["conclusion"] == "holds"
    assert r["r_max"] == rectangle_summary(ScoreTable.random(2, 5, seed=3), quantiles=()).max


def test_verify_falls_back_to_sampled_rectangles_when_r_is_not_computed(above_the_exact_limit, monkeypatch):
    original = vm.model_constants
    missing = rect.StreamedRectangle(None, None, 1.0, 0, 0.0, reason="not computed here").result()
    monkeypatch.setattr(vm, "model_constants", lambda *a, **k: replace(original(*a, **k), rectangle=missing))
    rep = vm.model_report(ScoreTable.random(2, 5, seed=3))
    r = {e["id"]: e for e in rep["results"]}["glauber.rectangle"]
    assert "(sampled)" in r["why"] and "sampled contexts for the rectangle statistic" in rep["constants"]


def test_estimate_certify_json_reports_the_rectangle(capsys, tmp_path, monkeypatch):
    import jsonschema
    from mlm_fixtures import save_model

    from mlmix.cli import main

    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    model, tok = tiny_masked_lm("roberta", seed=21)
    folder = save_model(model, tok, tmp_path / "rb")
    base = ["estimate", "--model", str(folder), "--frame", "c _ _ ! _ _", "--candidates", "a b c", "--contexts", "1",
            "--rectangles", "1", "--no-records", "--json", "--certify", "--no-progress"]
    assert main([*base, "--exact", "yes"]) == 0
    report = json.loads(capsys.readouterr().out)
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs/schema/estimate.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(report)
    R, exact = report["certified"]["rectangle"], report["exact"]["rectangle"]["max"]
    assert R["lower"] <= exact <= R["upper"] and R["value"] == pytest.approx(exact, rel=1e-12)
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "empty"))  # no cached table: bounds from 48 passes
    assert main([*base, "--exact", "no", "--max-passes", "90"]) == 0  # (42 for the estimate's context)
    R = json.loads(capsys.readouterr().out)["certified"]["rectangle"]
    assert R["upper"] is None and 0 <= R["lower"] <= exact
