"""``mlmix exact --mlm``: paper G's constants of the model as a view of ``model_constants`` (how="enumerate" on the
exact table, 0 more passes), the same brackets and text as ``mlmix estimate --certify`` on that table, each
bracket containing the exact value of the chain's own paper_g section."""

import json

import pytest
from helpers import figure
from mlm_fixtures import save_model, tiny_masked_lm

from mlmix.cli import main

FRAME = ["--frame", "b _ _ _", "--candidates", "a b c !"]


@pytest.fixture()
def folder(tmp_path):
    model, tok = tiny_masked_lm("bert", seed=5)
    return save_model(model, tok, tmp_path / "m")


def test_exact_mlm_reports_the_model_constants_of_estimate_certify(folder, capsys):
    assert main(["exact", "--mlm", str(folder), *FRAME, "--no-progress", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    mc, g = res["model_constants"], res["paper_g"]
    assert mc["how"] == "enumerate" and mc["method"] == "enumeration" and mc["passes"] == 0
    for key in ("rho", "alpha", "delta", "contraction_temperature"):  # the chain's exact value inside the bracket
        assert mc[key]["lower"] <= figure(g[key]) <= mc[key]["upper"]
    assert mc["rectangle"]["lower"] <= g["rectangle"]["max"] <= mc["rectangle"]["upper"]
    assert mc["score_accuracy"]["error"] > 0  # a float32 model's scores: charged, though read from a table
    t5 = mc["theorem5_threshold"]["temperature"]
    assert 0 < t5 <= mc["contraction_temperature"]["upper"]
    assert main(["estimate", "--model", str(folder), *FRAME, "--certify", "--contexts", "4", "--json",
                 "--no-progress"]) == 0
    cert = json.loads(capsys.readouterr().out)["certified"]
    for key in ("rho", "alpha", "delta", "contraction_temperature", "rectangle"):
        assert (cert[key]["lower"], cert[key]["upper"]) == (mc[key]["lower"], mc[key]["upper"])
    assert cert["theorem5_threshold"] == mc["theorem5_threshold"]


def test_exact_mlm_text_prints_the_brackets_as_estimate_does(folder, capsys):
    assert main(["exact", "--mlm", str(folder), *FRAME, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "paper G's constants of the model, certified over every context (enumeration; 0 passes):" in out
    assert "Theorem 5 provably applies at every T >= " in out and "paper G: rho (Thm 5)" not in out
    assert "paper G: Thm 5 bound on t_mix" in out


def test_a_toy_source_keeps_its_paper_g_rows_and_has_no_model_constants(capsys):
    assert main(["exact", "--model", "scores", "--vocab", "2", "--length", "3", "--no-progress", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert "model_constants" not in res and "rho" in res["paper_g"]
