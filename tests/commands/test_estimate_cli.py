"""``mlmix estimate`` end to end (in process): the shipped default model, local folders of tiny
models, JSON keys, exact values side by side, and clean errors."""

import json

import numpy as np
import pytest
from helpers import figure
from mlm_fixtures import save_model, tiny_causal_lm, tiny_masked_lm

from mlmix.cli import main
from mlmix.empirical.model_constants.estimated_constants import constants
from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR, MaskedLMConditionals

KEYS = ("model", "temperature", "n_contexts", "rho", "delta", "contraction_temperature", "rectangle",
        "device", "seconds", "exact")


def run_json(capsys, *args):
    assert main(["estimate", "--json", "--no-progress", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def default_report():
    """The default run, as JSON (module scope: one run shared by several checks)."""
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["estimate", "--json", "--no-progress", "--contexts", "100", "--rectangles", "60",
                     "--temperature", "1.5", "--state", "a a a a a a"]) == 0
    return json.loads(buf.getvalue())


def test_default_model_json_has_the_estimate_and_the_exact_values(default_report):
    r = default_report
    assert all(key in r for key in KEYS)
    assert r["model"] == str(DEFAULT_MODEL_DIR) and r["device"] == "cpu" and r["temperature"] == 1.5
    assert r["n_contexts"] == 100 and r["length"] == 6 and r["vocab_size"] == 4


def test_default_model_json_carries_its_provenance(default_report):
    from mlmix import __version__
    from mlmix.empirical.models.tabulate import weights_hash

    r = default_report
    assert r["mlmix_version"] == __version__ and r["schema"] == "mlmix.estimate/1"
    inputs = r["inputs"]
    assert (inputs["temperature"], inputs["seed"], inputs["kernel"]) == (1.5, 0, "glauber")
    assert inputs["source"]["model"] == str(DEFAULT_MODEL_DIR) and inputs["frame"] == r["frame"]
    assert inputs["model_hash"] == weights_hash(MaskedLMConditionals.from_pretrained(DEFAULT_MODEL_DIR, 6).model)
    assert set(r["rectangle"]) >= {"mean", "median", "q90", "count", "records"}
    assert r["rectangle"]["count"] == 60 == len(r["rectangle"]["records"])
    ex = r["exact"]
    assert all(key in ex for key in ("rho", "delta", "contraction_temperature", "rectangle"))
    assert ex["n_contexts"] == 4**6 and ex["rectangle"]["count"] == 4**6 * 15 * 9
    for key in ("rho", "alpha", "delta", "contraction_temperature"):
        assert figure(r[key]) <= figure(ex[key]) + 1e-9  # sampled suprema are lower bounds
    assert r["drift"]["symbols"] == [3] and r["drift"]["k"] == 3
    assert r["margins"]["tokens"] == ["a"] * 6
    assert r["true_law"]["rectangle"]["max"] < 1e-9 < ex["rectangle"]["max"]


def test_default_model_exact_values_match_a_direct_computation(default_report):
    mlm = MaskedLMConditionals.from_pretrained(DEFAULT_MODEL_DIR, 6, device="cpu", temperature=1.5)
    direct = constants(mlm, None, np.random.default_rng(0), drift_symbols=[3])
    for key in ("rho", "delta", "contraction_temperature"):
        assert figure(default_report["exact"][key]) == pytest.approx(figure(direct[key]), abs=1e-6)
    assert default_report["exact"]["rectangle"]["mean"] == pytest.approx(direct["rectangle"]["mean"], abs=1e-6)


def test_table_output_and_output_file(capsys, tmp_path):
    out = tmp_path / "report.json"
    assert main(["estimate", "--no-progress", "--contexts", "20", "--rectangles", "10", "--exact", "no",
                 "--output", str(out), "--no-records"]) == 0
    text = capsys.readouterr().out
    assert "rho (Thm 5 aggregate)" in text and "true law" not in text and "exact" not in text.splitlines()[1]
    saved = json.loads(out.read_text())
    assert saved["exact"] is None and "records" not in saved["rectangle"]
    assert not list(tmp_path.glob("*.tmp"))


def test_a_local_modernbert_folder_with_candidates_prefix_and_text(capsys, tmp_path):
    model, tok = tiny_masked_lm("modernbert", seed=9)
    folder = save_model(model, tok, tmp_path / "mb")
    text = tmp_path / "text.txt"
    text.write_text("a b ! c zz a a b c ! ! a b c a\n")
    r = run_json(capsys, "--model", str(folder), "--length", "3", "--candidates", "a b !", "--prefix", "c",
                 "--suffix", "a", "--contexts", "12", "--rectangles", "20", "--text", str(text), "--drift-token", "!",
                 "--drift-k", "1", "--convergence")
    assert r["vocab_size"] == 3 and r["fixed_tokens"] == 2 and r["exact"]["n_contexts"] == 27
    assert r["frame"] == "c _ _ _ a"
    assert r["drift"]["symbols"] == [2] and [c["n_contexts"] for c in r["convergence"]] == [12]
    assert "true_law" not in r


def test_the_causal_control_has_zero_rectangles(capsys, tmp_path):
    model, tok = tiny_causal_lm(seed=4)
    folder = save_model(model, tok, tmp_path / "gpt")
    r = run_json(capsys, "--model", str(folder), "--causal", "--length", "3", "--contexts", "16",
                 "--rectangles", "30")
    assert r["architecture"] == "GPT2LMHeadModel"
    assert r["rectangle"]["max"] < 1e-5 and r["exact"]["rectangle"]["max"] < 1e-5


@pytest.mark.parametrize("args, message", [
    (["--temperature", "0"], "temperature must be > 0"),
    (["--length", "7"], "longer than the 8 positions"),
    (["--model", "./missing/folder"], "does not exist"),
    (["--model", "nobody/no-such-mlm"], "not available offline"),
    (["--contexts", "0"], "--contexts must be >= 1"),
    (["--state", "a b zz"], "unknown to the tokenizer"),
    (["--drift-token", "[CLS]"], "not in the support"),
    (["--exact", "yes", "--exact-limit", "10"], "exceeds the exact limit"),
])
def test_bad_input_gives_a_clean_error(capsys, monkeypatch, args, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["estimate", "--no-progress", "--contexts", "8", "--rectangles", "5", *args]) == 2
    assert message in capsys.readouterr().err


def test_corrupt_model_files_and_a_folder_as_output(tmp_path, capsys):
    """A truncated model.safetensors, an invalid config.json, and --output naming a folder end
    in one line and exit 2, with nothing written."""
    import shutil

    from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR

    folder = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, folder)
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[:1000])
    assert main(["estimate", "--model", str(folder), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "corrupt or incomplete" in err and err.count("\n") == 1
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_text("{not json")
    assert main(["estimate", "--model", str(folder), "--no-progress"]) == 2
    assert "corrupt or incomplete" in capsys.readouterr().err
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    assert main(["estimate", "--no-progress", "--contexts", "4", "--rectangles", "5", "--output", str(out_dir)]) == 2
    assert "is a folder" in capsys.readouterr().err and not any(out_dir.iterdir())
