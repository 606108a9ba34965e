"""``mlmix estimate --certify`` end to end: the ``certified`` brackets (schema-valid) contain the exact values
of the same report, the enumeration is checkpointed in the cache so a second run makes no pass, a pass cap
gives sampled lower and trivial upper ends with an honest verdict, and bad values exit 2 in one line."""

import json
import math
from pathlib import Path

import jsonschema
import pytest
from mlm_fixtures import save_model, tiny_masked_lm

from mlmix.cli import main

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schema" / "estimate.schema.json"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    model, tok = tiny_masked_lm("roberta", seed=21)
    return save_model(model, tok, tmp_path_factory.mktemp("models") / "rb")


def run(capsys, folder, *args):
    code = main(["estimate", "--model", str(folder), "--frame", "c _ _ ! _", "--candidates", "a b c",
                 "--contexts", "4", "--rectangles", "5", "--no-records", "--json", "--certify", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err


def test_certified_brackets_contain_the_exact_values_and_resume_from_the_cache(capsys, folder, tmp_path,
                                                                              monkeypatch):
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    report, err = run(capsys, folder, "--exact", "no")
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(report)
    cert = report["certified"]
    assert cert["method"] == "enumeration" and cert["passes"] == 3 * 9 + 64 and "streamed" in err
    report_exact, _ = run(capsys, folder, "--exact", "yes")  # tabulated now: certify reads the cached table
    exact = report_exact["exact"]
    assert report_exact["certified"]["passes"] == 0
    for name in ("rho", "alpha", "delta", "contraction_temperature"):
        r, value = cert[name], exact[name]["value"]
        assert r["lower"] <= value <= r["upper"] and r["upper"] - r["lower"] < 1e-3 * value + 1e-4, name
    assert cert["theorem5"]["verdict"] == ("applies" if exact["rho"]["value"] < 1 else "does not apply")
    streamed = list((tmp_path / "cache" / "streamed").iterdir())
    assert len(streamed) == 1 and (streamed[0] / "state.json").is_file()


def test_a_pass_cap_gives_bounds_and_an_honest_verdict(capsys, folder, tmp_path, monkeypatch):
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    frame = ["--frame", "c _ _ ! _ _", "--contexts", "1", "--rectangles", "1"]  # 1 context: 42 passes; all: 108
    report, _ = run(capsys, folder, *frame, "--exact", "no", "--max-passes", "90", "--temperature", "0.5")
    cert = report["certified"]
    assert report["forward_passes"] == {"used": 90, "cap": 90}  # the whole cap, never more
    assert cert["method"].startswith("lower: worst-context search") and cert["passes"] == 90 - 42
    assert "the estimate's 1 sampled contexts" in cert["method"]
    for name in ("rho", "alpha", "delta", "contraction_temperature"):  # the larger of two lower bounds
        assert cert[name]["lower"] >= report[name]["lower"] * (1 - 1e-9) - 1e-6, name
    assert cert["rho"]["value"] is None and cert["rho"]["lower"] <= cert["rho"]["upper"] <= 3.0
    # a BERT: the LayerNorm head bound gives Delta and T* a finite upper end with no pass
    assert "LayerNorm head bound" in cert["method"] and cert["delta"]["lower"] <= cert["delta"]["upper"] < math.inf
    verdict = cert["theorem5"]["verdict"]
    assert verdict == ("does not apply" if cert["rho"]["lower"] >= 1 else "undecided")
    threshold = cert["theorem5_threshold"]  # finite: B(T) < 1 at Cor. 7's T* upper end
    assert 0 < threshold["temperature"] <= cert["contraction_temperature"]["upper"] * (1 + 1e-9)
    capsys.readouterr()
    assert main(["estimate", "--model", str(folder), *frame, "--candidates", "a b c", "--certify",
                 "--max-passes", "90", "--exact", "no", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "certified over every context" in text and "Theorem 5 at T = 1" in text and "R max" in text
    assert "Theorem 5 provably applies at every T >=" in text
    assert "forward passes: 90 of the cap 90" in text


def test_the_estimate_takes_at_most_half_of_the_cap_with_certify(capsys, folder):
    code = main(["estimate", "--model", str(folder), "--frame", "c _ _ ! _ _", "--candidates", "a b c",
                 "--contexts", "1", "--rectangles", "1", "--certify", "--max-passes", "80", "--no-progress"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(errors) == 1 and "42 forward passes, over the 40" in errors[0]


@pytest.mark.parametrize("args, message", [
    (["--max-passes", "0"], "--max-passes must be >= 1"),
    (["--budget", "soon"], "--budget"),
    (["--budget", "0"], "--budget"),
])
def test_bad_values_exit_2_in_one_line(capsys, folder, args, message):
    assert main(["estimate", "--model", str(folder), "--length", "2", "--certify", "--no-progress", *args]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(errors) == 1 and message in errors[0]
