"""Every `--json` output carries the provenance header (mlmix_version, schema "mlmix.<kind>/1", the inputs
actually used) and validates against its published JSON Schema (docs/schema/); the schemas are strict
enough to reject a document missing a header field."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from mlmix import __version__
from mlmix.cli import main
from mlmix.commands.exact_schema import GENERATED, exact_schema
from mlmix.commands.exact_schema import main as regenerate
from mlmix.provenance import INPUT_KEYS, file_sha256
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.scorefile import save_scores

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schema"
COMMANDS = ("exact", "decode", "diagnose", "estimate", "verify")


@pytest.fixture(scope="module")
def validators() -> dict:
    out = {}
    for name in COMMANDS:
        schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        out[name] = jsonschema.Draft202012Validator(schema)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """A tiny partial score file at T = 0.5 (|V| = 2, n = 3), a full one, one with zero conditionals."""
    d = tmp_path_factory.mktemp("scores")
    save_scores(d / "partial.npz", PartialScoreTable.random(2, 3, seed=1, temperature=0.5), ["a", "b"])
    save_scores(d / "full.npz", ScoreTable.random(2, 3, seed=2, temperature=0.5))
    zeros = PartialScoreTable.random(2, 3, seed=3)
    zeros.table[0, 0, 0] = -np.inf
    save_scores(d / "zeros.npz", zeros)
    np.save(d / "P.npy", np.array([[0.5, 0.5], [0.25, 0.75]]))
    return {p.stem: str(p) for p in d.iterdir()}


def run_json(capsys, *argv: str) -> dict:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def check(validators: dict, command: str, doc: dict) -> dict:
    validators[command].validate(doc)
    assert doc["mlmix_version"] == __version__ and doc["schema"].startswith(f"mlmix.{command}")
    assert tuple(doc["inputs"])[:len(INPUT_KEYS)] == INPUT_KEYS
    return doc


def test_exact_every_kernel_and_score_files(capsys, validators, files):
    for kernel in ("glauber", "k-gibbs", "parallel", "systematic", "mh"):
        doc = check(validators, "exact", run_json(capsys, "exact", "--graph", "cycle:3", "--kernel", kernel))
        assert doc["inputs"]["kernel"] == kernel
    for kernel in ("glauber", "parallel", "systematic", "mh"):
        for name in ("partial", "full"):
            doc = check(validators, "exact", run_json(capsys, "exact", "--scores", files[name], "--kernel", kernel))
            # the temperature the chain used: the file's own (the option's default is not used)
            assert doc["inputs"]["temperature"] == 0.5, (kernel, name)
            assert doc["inputs"]["source"] == {"kind": "scores-file", "path": files[name],
                                               "sha256": file_sha256(files[name])}
    doc = check(validators, "exact", run_json(capsys, "exact", "--scores", files["partial"], "--temperature", "0.8",
                                              "--top-k", "1", "--stationary"))
    assert doc["inputs"]["temperature"] == 0.8 and doc["inputs"]["top_k"] == 1
    doc = check(validators, "exact", run_json(capsys, "exact", "--scores", files["zeros"]))
    assert "reason" in doc["paper_g"]
    doc = check(validators, "exact", run_json(capsys, "exact", "--matrix", files["P"]))
    assert doc["inputs"]["temperature"] is None and doc["inputs"]["source"]["kind"] == "matrix"
    doc = check(validators, "exact", run_json(capsys, "exact", "--scores", files["full"], "--basins", "0,1", "1 1 *"))
    assert doc["basins"]["B"]["states"] == ["1 1 0", "1 1 1"] and doc["basins"]["A"]["states"] == ["0 0 0", "0 0 1"]
    doc = check(validators, "exact", run_json(capsys, "exact", "--scores", files["partial"], "--basins", "0", "b b b"))
    assert doc["basins"]["B"]["states"] == ["b b b"]


def test_decode_carries_the_header(capsys, validators, files):
    doc = check(validators, "decode", run_json(capsys, "decode", "--model", "ising", "--graph", "cycle:3",
                                               "--temperature", "2"))
    assert doc["inputs"]["source"]["kind"] == "ising" and doc["inputs"]["temperature"] == 2.0
    assert doc["inputs"]["kernel"] == "any-order"
    doc = check(validators, "decode", run_json(capsys, "decode", "--scores", files["partial"], "--sampler", "parallel",
                                               "--k", "2", "--law"))
    assert doc["inputs"]["temperature"] == 0.5 and doc["inputs"]["k"] == 2 and len(doc["law"]) == 8
    assert doc["inputs"]["source"]["sha256"] == file_sha256(files["partial"])
    for extra in (["--sampler", "threshold"], ["--sampler", "schedule", "--schedule", "0 1 | 2 3", "--split"],
                  ["--model", "scores", "--sampler", "left-to-right", "--order", "2 1 0", "--top-p", "0.9"]):
        doc = check(validators, "decode", run_json(capsys, "decode", *extra))
    assert doc["inputs"]["order"] == "2 1 0" and doc["inputs"]["seed"] == 0 and doc["inputs"]["top_p"] == 0.9


def test_diagnose_carries_the_header(capsys, validators):
    doc = check(validators, "diagnose", run_json(capsys, "diagnose", "--model", "ising", "--graph", "cycle:3",
                                                 "--chains", "2", "--steps", "20", "--seed", "5"))
    assert doc["inputs"]["seed"] == 5 and doc["inputs"]["chains"] == 2


def test_verify_run_list_and_module_fields(capsys, validators):
    doc = check(validators, "verify", run_json(capsys, "verify", "--theorem", "samplers.one-step-tc", "--examples",
                                               "2", "--no-progress"))
    assert doc["schema"] == "mlmix.verify/1" and doc["results"][0]["id"] == "samplers.one-step-tc"
    listed = check(validators, "verify", run_json(capsys, "verify", "--list", "--theorem", "glauber."))
    assert listed["schema"] == "mlmix.verify-list/1" and listed["results"]
    # the inputs may name more (the modules of --module): the header stays valid
    assert validators["verify"].is_valid({**doc, "inputs": {**doc["inputs"], "modules": ["mypkg.bounds"]}})
    assert not validators["verify"].is_valid({**doc, "results": [{"id": "x"}]})


def test_estimate_and_verify_mlm_on_the_shipped_model(capsys, validators, tmp_path, monkeypatch):
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    doc = check(validators, "estimate", run_json(capsys, "estimate", "--length", "3", "--contexts", "4",
                                                 "--rectangles", "8", "--drift-states", "4", "--no-records",
                                                 "--no-progress", "--seed", "2"))
    assert doc["inputs"]["seed"] == 2 and len(doc["inputs"]["model_hash"]) == 64
    from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR

    code = main(["verify", "--mlm", str(DEFAULT_MODEL_DIR), "--length", "3", "--json", "--no-progress"])
    doc = json.loads(capsys.readouterr().out)
    assert code in (0, 1)  # 1: a conclusion violated on this chain (a verdict, not an error)
    check(validators, "verify", doc)
    assert doc["schema"] == "mlmix.verify-mlm/1" and doc["inputs"]["source"]["kind"] == "mlm"


def test_the_schemas_reject_a_missing_header_field(capsys, validators, files):
    docs = {"exact": run_json(capsys, "exact", "--graph", "cycle:3"),
            "decode": run_json(capsys, "decode", "--scores", files["partial"]),
            "diagnose": run_json(capsys, "diagnose", "--graph", "cycle:3", "--chains", "2", "--steps", "8",
                                 "--no-metastable"),
            "verify": run_json(capsys, "verify", "--list", "--theorem", "samplers.")}
    for command, doc in docs.items():
        assert validators[command].is_valid(doc), command
        broken = [{k: v for k, v in doc.items() if k != key} for key in ("mlmix_version", "schema", "inputs")]
        broken += [{**doc, "inputs": {k: v for k, v in doc["inputs"].items() if k != key}} for key in INPUT_KEYS]
        broken += [{**doc, "schema": f"mlmix.{command}/0"}, {**doc, "mlmix_version": ""}]
        for bad in broken:
            assert not validators[command].is_valid(bad), (command, bad.keys(), bad.get("inputs", {}).keys())
    # nested results keep their accuracy contract
    tv = docs["decode"]["distances"]["glauber"]["tv"]
    bad = {**docs["decode"], "distances": {"glauber": {"tv": {**tv, "method": None}, "kl": tv}}}
    assert not validators["decode"].is_valid(bad)


def test_the_shared_definitions_do_not_drift():
    """The header's definitions are repeated in each schema (each file stands alone): they stay equal."""
    defs = [json.loads((SCHEMAS / f"{name}.schema.json").read_text())["$defs"] for name in COMMANDS]
    for key in ("result", "inputs", "number_or_null"):
        assert all(d[key] == defs[0][key] for d in defs), key
    assert all(d["source"] == defs[0]["source"] for d in defs if "source" in d)


def test_the_exact_schema_lists_the_report_table(tmp_path):
    """The figures of exact.schema.json are generated from REPORT (mlmix.commands.exact_schema): the committed
    file is the generated one, and the regeneration command rewrites only the generated entries."""
    published = json.loads((SCHEMAS / "exact.schema.json").read_text())
    assert exact_schema(published) == published, \
        "regenerate: python -m mlmix.commands.exact_schema docs/schema/exact.schema.json"
    stale = {**published, "$defs": {**published["$defs"], **{key: {} for key in GENERATED}}}
    (tmp_path / "exact.schema.json").write_text(json.dumps(stale, indent=1) + "\n")
    assert regenerate([str(tmp_path / "exact.schema.json")]) == 0
    assert (tmp_path / "exact.schema.json").read_text() == (SCHEMAS / "exact.schema.json").read_text()
    assert regenerate([]) == 2 and regenerate([str(tmp_path / "missing.json")]) == 2


def test_decode_of_a_masked_lm_names_model_frame_and_weights(tmp_path, capsys, monkeypatch, validators):
    import torch
    from mlm_fixtures import save_model, tiny_masked_lm

    from mlmix.empirical.models.tabulate import weights_hash

    torch.set_num_threads(1)
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    model, tok = tiny_masked_lm("bert", seed=3)
    folder = save_model(model, tok, tmp_path / "m")
    doc = check(validators, "decode", run_json(capsys, "decode", "--mlm", str(folder), "--frame", "a _ _ !",
                                               "--candidates", "a b c", "--temperature", "0.8", "--no-progress"))
    inputs = doc["inputs"]
    assert inputs["source"] == {"kind": "mlm", "model": str(folder), "architecture": "BertForMaskedLM",
                                "alphabet": ["a", "b", "c"]}
    assert inputs["frame"] == "a _ _ !" and inputs["temperature"] == 0.8 and inputs["model_hash"] == weights_hash(model)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_estimate_certify_states_the_dtype_and_the_score_accuracy(capsys, validators, tmp_path, monkeypatch, dtype):
    """`--certify` reports the accuracy it charged (the dtype's units of the largest |score|), and the schema
    requires it: a float64 run charges 2^-29 times the float32 units."""
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    doc = check(validators, "estimate", run_json(capsys, "estimate", "--length", "2", "--contexts", "4", "--certify",
                                                 "--exact", "no", "--no-records", "--no-progress", "--dtype", dtype))
    acc = doc["certified"]["score_accuracy"]
    assert doc["dtype"] == acc["dtype"] == dtype and acc["max_abs_score"] > 0
    assert acc["error"] >= acc["units"] * acc["unit_roundoff"] * acc["max_abs_score"] > 0
    assert acc["error"] < (1e-12 if dtype == "float64" else 1e-2) * acc["max_abs_score"]
    missing = {**doc, "certified": {k: v for k, v in doc["certified"].items() if k != "score_accuracy"}}
    assert not validators["estimate"].is_valid(missing)
