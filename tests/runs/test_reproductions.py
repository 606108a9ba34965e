"""Reproductions of paper P section 3.1 / L.6 and L.7 at tiny settings: files, numbers, resume."""

import csv
import json

import numpy as np
import pytest

from mlmix.cli import main
from mlmix.files import Checkpoint, atomic_write_json
from mlmix.runs import ising_modes as modes_repro
from mlmix.runs import pl_variance


def test_pl_variance_tiny(tmp_path):
    record = pl_variance.reproduce(tmp_path, couplings=[0.3], samples=[3000], reps=2, modes=("all", "sampled"), seed=0)
    saved = json.loads((tmp_path / "pl_variance.json").read_text())
    assert saved["summary"] == record["summary"]
    rows = {(s["mode"], s["k"]): s for s in record["summary"]}
    assert len(rows) == 8
    # Theorem 1: the sampled-mask prediction decreases with k; k = N is the MLE for both estimators
    pred = [rows["sampled", k]["trace_gamma"] for k in range(1, 5)]
    assert all(a > b for a, b in zip(pred, pred[1:]))
    assert rows["all", 4]["trace_gamma"] == pytest.approx(rows["sampled", 4]["trace_gamma"], rel=1e-10)
    assert rows["all", 4]["mean_sq_error"] == pytest.approx(rows["sampled", 4]["mean_sq_error"], rel=1e-6)
    # mask-averaged k-PL with k >= N - 2 is the MLE on the complete graph (2-site marginals saturated)
    for k in (2, 3):
        assert rows["all", k]["trace_gamma"] == pytest.approx(rows["all", 4]["trace_gamma"], rel=1e-9)
        assert rows["all", k]["mean_sq_error"] == pytest.approx(rows["all", 4]["mean_sq_error"], rel=1e-4)
    for s in record["summary"]:
        assert s["predicted"] == pytest.approx(s["trace_gamma"] / 3000) and s["all_converged"]
        assert 0.02 < s["ratio_to_prediction"] < 20
    with open(tmp_path / "pl_variance.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 16
    assert (tmp_path / "pl_variance.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "pl_variance.partial.json").exists()


def test_ising_modes_tiny(tmp_path):
    record = modes_repro.reproduce(tmp_path, couplings=[1.0], ks=[1, 3], reps=3, budget=60, seed=0, N=5,
                             clique_size=3, field=0.5, full_check_k=(1, 3), figure=False)
    results = {e["k"]: e for e in record["results"]}
    assert set(results) == {1, 3, None}
    for e in results.values():
        assert e["full_kernel_max_difference"] < 1e-12
        assert all(1 <= t <= 60 for t in e["simulated_steps"])
        assert 0 <= e["capped_mean"] <= 60 and 0 <= e["p_reach_within_budget"] <= 1
        assert e["expected_hitting_time"] >= e["capped_mean"] - 1e-9
    # k = |C| = 3 updates the whole clique at once with probability 1/binom(5,3): faster than k = 1
    assert results[3]["capped_mean"] < results[1]["capped_mean"]
    assert "c_R1_formal" in results[3] and not record["assumption5"]["J=1.0"]["holds"]
    assert not (tmp_path / "ising_modes.png").exists()
    with open(tmp_path / "ising_modes.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 3


def test_resume_skips_finished_configurations(tmp_path):
    settings = {"N": 5, "clique_size": 3, "h": 0.5, "couplings": [1.0], "k": [2], "reps": 1, "budget": 10,
                "seed": 0, "full_check_k": [], "delta": 0.1}
    fake = {"J": 1.0, "sampler": "k-gibbs", "k": 2, "simulated_steps": [7], "simulated_reached": 1,
            "p_reach_within_budget": 0.5, "capped_mean": 7.0, "median": 7, "expected_hitting_time": 9.0}
    atomic_write_json(tmp_path / "ising_modes.partial.json", {"settings": settings, "results": {"J=1.0|k=2": fake}})
    record = modes_repro.reproduce(tmp_path, [1.0], [2], 1, 10, 0, N=5, clique_size=3, field=0.5, full_check_k=(),
                             figure=False)
    kept = [e for e in record["results"] if e["k"] == 2][0]
    assert kept["expected_hitting_time"] == 9.0  # taken from the checkpoint, not recomputed


def test_checkpoint_settings_must_match(tmp_path):
    ck = Checkpoint(tmp_path / "c.json", {"a": 1})
    ck.record("x", [1, 2])
    assert "x" in Checkpoint(tmp_path / "c.json", {"a": 1})
    assert "x" not in Checkpoint(tmp_path / "c.json", {"a": 2})
    (tmp_path / "bad.json").write_text("{not json")
    assert Checkpoint(tmp_path / "bad.json", {"a": 1}).results == {}


def test_cli_validation(tmp_path, capsys):
    assert main(["run", "pl-variance", "--out", str(tmp_path / "a"), "--reps", "0"]) == 2
    assert "--reps must be >= 1" in capsys.readouterr().err
    assert main(["run", "ising-modes", "--out", str(tmp_path / "b"), "--k", "11"]) == 2
    assert "--k must be <= 10" in capsys.readouterr().err
    assert main(["run", "ising-modes", "--out", str(tmp_path / "c"), "--J", "2.0", "--k", "2", "--reps", "1",
                 "--budget", "5", "--N", "4", "--clique-size", "2", "--full-check-k", "--no-figure"]) == 0
    assert np.isfinite(json.loads((tmp_path / "c" / "ising_modes.json").read_text())["c_stuck_formal"])


def test_run_folders_are_locked_and_never_mix_parameters(tmp_path, capsys):
    """A rerun with other parameters is refused (or --overwrite), the same ones resume; a
    second run on a locked folder is refused at once; nothing is written outside --out."""
    from mlmix.files import OutputDir

    out = tmp_path / "modes"
    base = ["run", "ising-modes", "--out", str(out), "--J", "2.0", "--k", "2", "--budget", "5", "--N", "4",
            "--clique-size", "2", "--full-check-k", "--no-figure"]
    assert main([*base, "--reps", "1"]) == 0
    first = json.loads((out / "ising_modes.json").read_text())
    assert json.loads((out / "run.json").read_text())["params"]["reps"] == 1
    assert main([*base, "--reps", "2"]) == 2  # a smaller or larger budget is another run
    assert "different parameters: reps: 1 there, 2 now" in capsys.readouterr().err
    assert json.loads((out / "ising_modes.json").read_text()) == first  # the old results were not touched
    assert main([*base, "--reps", "1"]) == 0 and "resuming" in capsys.readouterr().out
    assert main([*base, "--reps", "2", "--overwrite"]) == 0
    assert json.loads((out / "run.json").read_text())["params"]["reps"] == 2
    with OutputDir(out, "run ising-modes", {"other": 1}, overwrite=True):
        assert main([*base, "--reps", "2"]) == 2  # locked by the run in progress
        assert "another mlmix run is writing" in capsys.readouterr().err
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    assert main(["run", "ising-modes", "--out", str(tmp_path / "foreign"), "--reps", "1"]) == 2
    assert "not written by mlmix" in capsys.readouterr().err
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "mine"


def test_run_list_and_unknown(capsys):
    assert main(["run", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("pl-variance", "ising-modes", "tightness", "traps", "train-default"))
    assert main(["run", "nothing"]) == 2 and "unknown run 'nothing'" in capsys.readouterr().err
