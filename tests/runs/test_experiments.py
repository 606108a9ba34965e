"""Each experiment end to end on tiny random-weight models, cross-checked against theory code."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from mlm_fixtures import save_model, tiny_causal_lm, tiny_masked_lm

from mlmix.cli import main
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.empirical.sampling.simulation import load_trajectory
from mlmix.runs import mixing_crossover
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.local.margins import count_drift
from mlmix.theory.local.rectangles import rectangle_statistic

PNG = b"\x89PNG\r\n\x1a\n"


def run(name: str, argv: list[str]) -> int:
    return main(["run", name, *argv])
QUIET = ["--device", "cpu", "--no-progress"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"bert": str(save_model(*tiny_masked_lm("bert", seed=1), root / "bert")),
            "roberta": str(save_model(*tiny_masked_lm("roberta", seed=2), root / "roberta")),
            "gpt2": str(save_model(*tiny_causal_lm(seed=3), root / "gpt2"))}


def _source(path: str, length: int, temperature: float = 1.0) -> MaskedLMConditionals:
    return MaskedLMConditionals.from_pretrained(path, length, device="cpu", temperature=temperature)


def _csv(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_rectangle_table(models, tmp_path):
    out = tmp_path / "rect"
    argv = ["--out", str(out), "--model", models["bert"], models["roberta"], "--causal", models["gpt2"],
            "--rectangles", "40", "--top-k", "2", "--length", "5", *QUIET]
    assert run("rectangle-table", argv) == 0
    table = json.loads((out / "rectangle_table.json").read_text())["table"]
    assert [r["kind"] for r in table] == ["masked", "masked", "causal"]
    assert table[0]["mean_R"] > 0.05 and table[1]["mean_R"] > 0.05  # random MLMs are incompatible
    assert table[2]["mean_R"] < 1e-4  # the causal joint telescopes (float32 rounding only)
    rects = _csv(out / "rectangles.csv")
    assert len(rects) == 120
    # independent recomputation of R for the recorded BERT rectangles
    src = _source(models["bert"], 5)
    mine = [r for r in rects if r["model"] == models["bert"]]
    states = np.array([json.loads(r["state"]) for r in mine])
    get = lambda key: np.array([int(r[key]) for r in mine])  # noqa: E731
    R = rectangle_statistic(src, states, get("i"), get("j"), get("a_new"), get("b_new"))
    np.testing.assert_allclose(R, [float(r["R"]) for r in mine], rtol=1e-5, atol=1e-6)
    assert table[0]["mean_R"] == pytest.approx(R.mean(), rel=1e-5)
    # top-2 replacements: each a' is one of the model's two best symbols at i other than x_i
    s = src.scores(states, get("i"))
    s[np.arange(len(mine)), states[np.arange(len(mine)), get("i")]] = -np.inf
    assert (np.argsort(-s, axis=1)[:, :2] == get("a_new")[:, None]).any(axis=1).all()
    assert (out / "rectangle_table.png").read_bytes().startswith(PNG)
    before = (out / "rectangle_table.json").read_text()
    assert run("rectangle-table", argv) == 0  # resumed: every model task is already done
    assert (out / "rectangle_table.json").read_text() == before


def test_drift_certificate_matches_the_exact_kernel(models, tmp_path):
    out = tmp_path / "drift"
    argv = ["--out", str(out), "--model", models["bert"], "--token", "!", "--k", "2", "--states", "30",
            "--length", "4", "--temperatures", "1.0", "0.5", *QUIET]
    assert run("drift-certificate", argv) == 0
    summary = json.loads((out / "drift_certificate.json").read_text())["summary"]
    rows = _csv(out / "drift.csv")
    src = _source(models["bert"], 4)
    bang = int(src.encode(["!"])[0])
    for s, T in zip(summary, (1.0, 0.5)):
        mine = [r for r in rows if float(r["temperature"]) == T]
        states = np.array([json.loads(r["state"]) for r in mine])
        assert ((states == bang).sum(axis=1) == 2).all()
        D = np.array([float(r["drift"]) for r in mine])
        # D(x) = sum_y P_T(x, y) (N(y) - N(x)) from the exact Glauber kernel of the same model
        P = glauber_kernel(src.at_temperature(T)).toarray()
        N = (src.space.all_states() == bang).sum(axis=1)
        idx = src.space.encode(states)
        np.testing.assert_allclose(D, P[idx] @ N - N[idx], atol=1e-6)
        np.testing.assert_allclose(D, count_drift(src.at_temperature(T), states, [bang]), atol=1e-6)
        assert s["min"] == pytest.approx(D.min()) and s["median"] == pytest.approx(np.median(D))
        assert s["positive"] == int((D > 0).sum())
    assert (out / "drift_certificate.png").read_bytes().startswith(PNG)


def test_n_log_n_fit_recovers_exact_coefficients():
    n = np.array([2, 4, 8, 16])
    fit = mixing_crossover.fit_n_log_n(n, 2.5 * n * np.log(n) + 3.0)
    assert fit["a"] == pytest.approx(2.5) and fit["b"] == pytest.approx(3.0) and fit["r2"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two lengths"):
        mixing_crossover.fit_n_log_n(np.array([4, 4]), np.array([1.0, 2.0]))


def test_mixing_crossover(models, tmp_path):
    out = tmp_path / "mix"
    argv = ["--out", str(out), "--model", models["bert"], "--lengths", "2", "4", "6", "--chains", "6", "--steps", "120",
            "--threshold", "0.3", "--embedder", "hamming", "--record-every", "1", "--coupling-temperatures", "0.05",
            "2.0", "--pairs", "4", "--coupling-steps", "150", *QUIET]
    assert run("mixing-crossover", argv) == 0
    res = json.loads((out / "mixing_crossover.json").read_text())
    assert [r["length"] for r in res["hitting"]] == [2, 4, 6]
    cells = [(T, n) for T in (0.05, 2.0) for n in (2, 4, 6)]
    assert [(r["temperature"], r["length"]) for r in res["coupling"]] == cells
    # hamming embedding: the hitting time is the first step at which d_H(x_t, x_0) >= 0.3 n, from the records
    saved = [json.loads(p.read_text()) for p in (out / "tasks").iterdir()]
    tasks = {t["params"]["length"]: t["result"] for t in saved if "threshold" in t["params"]}  # hitting tasks
    assert len(tasks) == 3
    for n in (2, 4, 6):
        tr = load_trajectory(out / "chains" / f"hit_T1_n{n}_seed0.jsonl")
        frac = (tr.states != tr.states[:1]).mean(axis=2)  # (R, B)
        hit = frac >= 0.3
        expected = np.where(hit.any(axis=0), tr.steps[np.argmax(hit, axis=0)], -1)
        assert tasks[n]["hitting_time"] == expected.tolist()
    assert any(r["hit_fraction"] > 0 for r in res["hitting"])
    fit_rows = [r for r in res["hitting"] if r["hit_fraction"] >= 0.5]
    if len(fit_rows) >= 2:
        ref = mixing_crossover.fit_n_log_n(np.array([r["length"] for r in fit_rows]),
                                           np.array([r["mean_hitting_time"] for r in fit_rows]))
        assert res["fit_n_log_n"] == pytest.approx(ref)
    for r in res["coupling"]:
        assert r["coupled_within_budget"] == (r["median_coupling_time"] is not None)
        if r["median_coupling_time"] is not None:
            assert 0 <= r["median_coupling_time"] <= 150
    assert (out / "mixing_crossover.png").read_bytes().startswith(PNG)


def test_traps_experiment_checks_theorem_8(models, tmp_path):
    out = tmp_path / "traps"
    T = 0.05
    argv = ["--out", str(out), "--model", models["bert"], "--length", "4", "--chains", "3", "--steps", "400",
            "--temperature", str(T), "--window", "50", "--record-every", "5", "--embedder", "hamming", *QUIET]
    assert run("traps", argv) == 0
    res = json.loads((out / "traps.json").read_text())
    rows = res["traps"]
    assert rows and res["summary"]["traps"] == len(rows)
    assert any(r["all_argmax"] for r in rows)  # the frozen chains sit on strict local maxima
    assert res["summary"]["perfect"] == sum(r["all_argmax"] for r in rows)
    src = _source(models["bert"], 4, temperature=T)
    P = glauber_kernel(src).toarray()
    for r in rows:
        x = int(src.space.encode(np.array(r["state"])))
        assert r["exit_probability"] == pytest.approx(1 - P[x, x], abs=1e-6)
        assert r["duration"] >= 50
        if r["all_argmax"]:
            assert r["exit_probability"] <= r["exit_bound"] * (1 + 1e-6)  # Theorem 8
    assert (out / "traps.png").read_bytes().startswith(PNG)
    lines = (out / "chains.jsonl").read_text()
    assert run("traps", argv) == 0  # resumed from the complete record file: nothing rerun
    assert (out / "chains.jsonl").read_text() == lines
    assert json.loads((out / "traps.json").read_text())["traps"] == rows


def test_rectangle_table_on_the_shipped_model_has_a_zero_law_control(tmp_path):
    out = tmp_path / "shipped"
    assert run("rectangle-table", ["--out", str(out), "--rectangles", "30", *QUIET]) == 0
    table = json.loads((out / "rectangle_table.json").read_text())["table"]
    assert [(r["kind"], r["length"], r["vocab_size"]) for r in table] == [("masked", 6, 4), ("law", 6, 4)]
    assert table[0]["mean_R"] > 1e-3  # the trained MLM is incompatible ...
    assert table[1]["max_R"] < 1e-12  # ... its Potts training law is not


def test_start_states_from_passages(models, tmp_path):
    from mlmix.runs.common import decoder, start_states

    src = _source(models["bert"], 3)
    texts = tmp_path / "seeds.txt"
    texts.write_text("a b ! c a\n\nb b\nzebra a b c\nc ! a\n")  # too short / unknown word are skipped
    states = start_states(src, 50, np.random.default_rng(0), texts)
    assert set(decoder(src)(states)) == {"a b !", "c ! a"}
    with pytest.raises(ValueError, match="no passage"):
        start_states(_source(models["bert"], 6), 2, np.random.default_rng(0), texts)
