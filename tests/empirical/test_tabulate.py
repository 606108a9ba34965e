"""Exact tabulation of an MLM over a frame (mlmix.empirical.models.tabulate): the table against per-site
queries and against the Glauber kernel built from the model, the disk cache (keys, reuse at any
temperature, no forward pass on a hit), resuming an interrupted run, the cost estimate, and the
CLI routes (`mlmix exact --mlm`, `mlmix estimate` reusing the table, the time budget)."""

import json

import numpy as np
import pytest
import torch
from helpers import figure
from mlm_fixtures import save_model, tiny_masked_lm

from mlmix.cli import main
from mlmix.empirical.model_constants import estimated_constants as est
from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.sources.conditionals import ScoreTable


class Counter:
    """Counts masked rows of every MaskedLMConditionals (all instances) while installed."""

    def __init__(self, monkeypatch):
        self.rows = 0
        original = MaskedLMConditionals.masked_logits_torch

        def counted(mlm, token_ids, positions):
            self.rows += int(token_ids.shape[0])
            return original(mlm, token_ids, positions)

        monkeypatch.setattr(MaskedLMConditionals, "masked_logits_torch", counted)


@pytest.fixture()
def mlm():
    model, tok = tiny_masked_lm("bert", seed=13)
    return MaskedLMConditionals(model, tok, frame="c _ ! _ _", candidates="a b c !", device="cpu", temperature=0.9)


def test_table_equals_per_site_queries_and_gives_the_models_glauber_kernel(mlm, tmp_path):
    table = tab.tabulate(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    assert isinstance(table, ScoreTable) and table.table.shape == (3, 16, 4) and table.temperature == 0.9
    direct = ScoreTable.from_conditionals(mlm)  # site by site, contexts in index order
    np.testing.assert_allclose(table.table, direct.table, atol=1e-5)
    P_table = glauber_kernel(table).toarray()
    P_model = glauber_kernel(mlm).toarray()  # the kernel built from the model's own queries
    np.testing.assert_allclose(P_table, P_model, atol=1e-6)
    assert table.decode(np.array([3, 0])) == ["!", "a"]
    d = table.describe()
    assert d["frame"] == "c _ ! _ _" and d["table"]["passes"] == 3 * 16 and not d["table"]["from_cache"]


def test_the_cache_is_reused_at_any_temperature_without_a_forward_pass(mlm, tmp_path, monkeypatch):
    notes = []
    first = tab.tabulate(mlm, cache_dir=tmp_path, progress=False, log=notes.append)
    assert "48 masked forward passes" in notes[0] and "use --max-passes to cap" in notes[0]
    counter = Counter(monkeypatch)
    hot = mlm.at_temperature(2.5)
    again = tab.tabulate(hot, cache_dir=tmp_path, progress=False, log=notes.append)
    assert counter.rows == 0 and "read from the cache" in notes[-1]
    np.testing.assert_array_equal(again.table, first.table)
    assert again.temperature == 2.5 and again.describe()["table"]["from_cache"]
    assert tab.cached_table(hot, tmp_path) is not None
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".npz"]  # no partial folder left


def test_cache_keys_follow_weights_frame_alphabet_and_dtype(mlm):
    key = tab.table_key(mlm)[0]
    model, tok = mlm.model, mlm.tokenizer
    variants = [MaskedLMConditionals(model, tok, frame="c _ ! _ a", candidates="a b c !", device="cpu"),
                MaskedLMConditionals(model, tok, frame="c _ ! _ _", candidates="a b c", device="cpu"),
                MaskedLMConditionals(model, tok, frame="c _ ! _ _", candidates="a b c !", device="cpu",
                                     dtype="bfloat16")]
    other, _ = tiny_masked_lm("bert", seed=14)
    variants.append(MaskedLMConditionals(other, tok, frame="c _ ! _ _", candidates="a b c !", device="cpu"))
    keys = {tab.table_key(v)[0] for v in variants}
    assert len(keys) == 4 and key not in keys
    same = MaskedLMConditionals(model, tok, 3, prefix="c", candidates=["a", "b", "c", "!"], device="cpu",
                                temperature=4.0, frame="_ ! _ _")
    assert tab.table_key(same)[0] == key  # same frame and alphabet written differently; T is not part of it


def test_an_interrupted_tabulation_resumes_from_its_chunks(mlm, tmp_path, monkeypatch):
    monkeypatch.setattr(tab, "MIN_CHUNK_ROWS", 10)
    monkeypatch.setattr(tab, "CHUNK_SECONDS", 1e-9)  # chunks of MIN_CHUNK_ROWS passes
    ref = tab.tabulate(mlm, use_cache=False, progress=False, log=lambda _: None)
    original, calls = mlm.scores_torch, []

    def failing(symbols, sites, validate=True):
        calls.append(symbols.shape[0])
        if len(calls) == 5:  # two calls to measure the rate, two chunks, then the machine "dies"
            raise KeyboardInterrupt
        return original(symbols, sites, validate=validate)

    monkeypatch.setattr(mlm, "scores_torch", failing)
    with pytest.raises(KeyboardInterrupt):
        tab.tabulate(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    partial = next(tmp_path.glob("*.partial"))
    assert sorted(p.name for p in partial.glob("chunk-*")) == ["chunk-000000000000.npz", "chunk-000000000010.npz"]
    monkeypatch.setattr(mlm, "scores_torch", original)
    monkeypatch.setattr(tab, "MIN_CHUNK_ROWS", 4096)  # a resumed run keeps the chunking it started with
    counter = Counter(monkeypatch)
    resumed = tab.tabulate(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    assert counter.rows == 2 * 32 + (48 - 20)  # the rate measurement and only the missing chunks
    np.testing.assert_array_equal(resumed.table, ref.table)
    assert not partial.exists()


def test_max_passes_refuses_before_any_pass(mlm, tmp_path, monkeypatch):
    counter = Counter(monkeypatch)
    with pytest.raises(ValueError, match="needs 48 masked forward passes .* more than --max-passes 47"):
        tab.tabulate(mlm, cache_dir=tmp_path, max_passes=47, progress=False, log=lambda _: None)
    assert counter.rows == 0


def test_exact_cli_on_a_masked_lm_folder_and_its_cache(tmp_path, capsys, monkeypatch):
    model, tok = tiny_masked_lm("roberta", seed=3)
    folder = save_model(model, tok, tmp_path / "rb")
    args = ["exact", "--mlm", str(folder), "--frame", "a _ _ !", "--candidates", "a b c", "--temperature", "0.8",
            "--json", "--no-progress"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["n_states"] == 9 and "frame 'a _ _ !'" in first["chain"] and "(6 masked passes)" in first["chain"]
    counter = Counter(monkeypatch)
    assert main(args) == 0
    captured = capsys.readouterr()
    second = json.loads(captured.out)
    assert counter.rows == 0 and "read from the cache" in second["chain"] and "no forward pass" in captured.err
    assert second["absolute_spectral_gap"]["value"] == first["absolute_spectral_gap"]["value"]
    # the same chain built by hand from the model agrees
    P = glauber_kernel(MaskedLMConditionals(model, tok, frame="a _ _ !", candidates="a b c", device="cpu",
                                            temperature=0.8)).toarray()
    gap = 1 - np.sort(np.abs(np.linalg.eigvals(P)))[-2]
    assert second["absolute_spectral_gap"]["value"] == pytest.approx(gap, abs=1e-5)


@pytest.mark.parametrize("args, message", [
    (["--frame", "a _ _", "--length", "3"], "--length 3 disagrees with the 2 free positions"),
    (["--length", "2", "--candidates", "a zz"], "unknown candidate token 'zz'"),
    (["--length", "3", "--max-passes", "10"], "more than --max-passes 10"),
])
def test_exact_cli_errors_are_one_line(tmp_path, capsys, args, message):
    model, tok = tiny_masked_lm("bert", seed=3)
    folder = save_model(model, tok, tmp_path / "m")
    assert main(["exact", "--mlm", str(folder), "--no-progress", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_estimate_reuses_the_exact_table(tmp_path, capsys, monkeypatch):
    model, tok = tiny_masked_lm("bert", seed=5)
    folder = save_model(model, tok, tmp_path / "m")
    frame = ["--frame", "b _ _ _", "--candidates", "a b c !"]
    assert main(["exact", "--mlm", str(folder), *frame, "--no-progress", "--json"]) == 0
    chain = json.loads(capsys.readouterr().out)
    counter = Counter(monkeypatch)
    assert main(["estimate", "--model", str(folder), *frame, "--json", "--contexts", "30", "--rectangles", "40"]) == 0
    captured = capsys.readouterr()
    r = json.loads(captured.out)
    assert counter.rows == 0 and r["plan"]["source"] == "exact table" and r["plan"]["table"]["from_cache"]
    assert r["exact"]["n_contexts"] == 64 and r["n_contexts"] == 30 and r["frame"] == "b _ _ _"
    for key in ("rho", "delta", "contraction_temperature"):
        assert figure(r[key]) <= figure(r["exact"][key]) + 1e-12
    assert r["rectangle"]["max"] <= r["exact"]["rectangle"]["max"] + 1e-12
    # the same numbers as querying the model directly (float32 rounding of the batches apart)
    direct = est.constants(MaskedLMConditionals(model, tok, frame="b _ _ _", candidates="a b c !", device="cpu"),
                           None, np.random.default_rng(0))
    assert figure(r["exact"]["rho"]) == pytest.approx(figure(direct["rho"]), abs=1e-6)
    assert r["exact"]["rectangle"]["mean"] == pytest.approx(direct["rectangle"]["mean"], abs=1e-5)
    # `mlmix exact --mlm` reports the same constants as the exact column of `mlmix estimate`
    g = chain["paper_g"]
    assert g["rho"]["value"] == pytest.approx(figure(r["exact"]["rho"]), rel=1e-12)
    assert g["contraction_temperature"]["value"] == pytest.approx(figure(r["exact"]["contraction_temperature"]), rel=1e-12)
    for key in ("mean", "median", "q90", "max", "count"):
        assert g["rectangle"][key] == pytest.approx(r["exact"]["rectangle"][key], rel=1e-12)
    # without the exact values, the sampled estimates still come from the cached table
    counter.rows = 0
    assert main(["estimate", "--model", str(folder), *frame, "--json", "--exact", "no", "--contexts", "30",
                 "--rectangles", "40"]) == 0
    r_no = json.loads(capsys.readouterr().out)
    assert counter.rows == 0 and r_no["exact"] is None and r_no["plan"]["source"] == "exact table"
    assert figure(r_no["rho"]) == figure(r["rho"])


def test_query_rows_counts_every_forward_pass(monkeypatch):
    model, tok = tiny_masked_lm("bert", seed=6)
    mlm = MaskedLMConditionals(model, tok, 3, device="cpu")
    for kwargs in [{}, {"replacements": est.TopK(2), "top_k": None, "with_convergence": True},
                   {"drift_symbols": [3], "state": np.array([0, 1, 2]), "with_convergence": True}]:
        counter = Counter(monkeypatch)
        est.estimate(mlm, contexts=20, rectangles=15, drift_states=7, exact=False, **kwargs)
        rule = kwargs.get("replacements", "auto")
        want = est.query_rows(mlm.space, 20, rectangles=15, top_k=kwargs.get("top_k", est.DEFAULT_TOP_K),
                              replacements=est.default_replacements(mlm) if rule == "auto" else rule,
                              drift_states=7 if "drift_symbols" in kwargs else None, state="state" in kwargs,
                              with_convergence=kwargs.get("with_convergence", False))
        assert counter.rows == want
        monkeypatch.undo()


def test_the_budget_chooses_the_contexts_and_skips_an_exact_table_that_does_not_fit(tmp_path, capsys, monkeypatch):
    model, tok = tiny_masked_lm("bert", seed=7)
    folder = save_model(model, tok, tmp_path / "m")
    monkeypatch.setattr(tab, "measure_rate", lambda source, rows=32, seed=0: 100.0)  # 100 passes/s, by decree
    base = ["estimate", "--model", str(folder), "--length", "3", "--json", "--rectangles", "10",
            "--drift-states", "5"]
    counter = Counter(monkeypatch)
    assert main([*base, "--budget", "20s", "--exact", "no"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert counter.rows == r["plan"]["passes"]  # the printed cost is the work done
    counter.rows = 0
    assert main([*base, "--budget", "20s", "--exact", "no", "--candidates", "a b c"]) == 0  # no '!': no drift
    assert counter.rows == json.loads(capsys.readouterr().out)["plan"]["passes"]

    def rows(c):
        return est.query_rows(r_space(r), c, rectangles=10, replacements=None, drift_states=5)

    assert r["plan"]["passes"] == rows(r["n_contexts"]) <= 2000 < rows(r["n_contexts"] + 1)
    # 3 * 4^2 = 48 passes of the exact table do not fit in 0.4 s: skipped, and the note says so
    assert main([*base, "--budget", "0.4s", "--contexts", "2"]) == 0
    captured = capsys.readouterr()
    r = json.loads(captured.out)
    assert r["exact"] is None and "exact values skipped" in r["plan"]["note"] and "--exact yes" in captured.err
    assert main([*base, "--budget", "1s", "--exact", "no"]) == 2
    assert "one context already needs" in capsys.readouterr().err


def r_space(report):
    from mlmix.theory.sources.space import StateSpace

    return StateSpace(report["vocab_size"], report["length"])


def test_weights_hash_is_the_same_for_a_copy_and_differs_after_a_change():
    model, _ = tiny_masked_lm("bert", seed=1)
    copy, _ = tiny_masked_lm("bert", seed=1)
    assert tab.weights_hash(model) == tab.weights_hash(copy)
    with torch.no_grad():
        copy.bert.embeddings.word_embeddings.weight[5, 0] += 1e-7
    assert tab.weights_hash(model) != tab.weights_hash(copy)
