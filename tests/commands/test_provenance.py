"""Provenance: every JSON output says which mlmix made it from which inputs (mlmix/provenance.py);
`mlmix exact --json` validates against its published schema; run.json carries the header; saved
chains keep their description and figures."""

import json
from pathlib import Path

import jsonschema
import networkx as nx
import numpy as np
import pytest

from mlmix import Chain, __version__
from mlmix.cli import main
from mlmix.files import OutputDir
from mlmix.provenance import INPUT_KEYS, file_sha256, folder_model_hash
from mlmix.theory.sources.conditionals import IsingModel

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schema" / "exact.schema.json").read_text())


def exact_json(capsys, *argv):
    assert main(["exact", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def validator():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    return jsonschema.Draft202012Validator(SCHEMA)


def test_exact_json_validates_against_the_published_schema(capsys, tmp_path, validator):
    P = np.array([[0.5, 0.5, 0.0], [0.25, 0.5, 0.25], [0.0, 0.5, 0.5]])
    np.save(tmp_path / "P.npy", P)
    reducible = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.save(tmp_path / "R.npy", reducible)
    runs = {
        "ising": exact_json(capsys, "--graph", "cycle:4", "--beta", "0.3"),
        "potts": exact_json(capsys, "--model", "potts", "--graph", "path:3", "--seed", "2"),
        "scores": exact_json(capsys, "--model", "scores", "--vocab", "2", "--length", "4", "--temperature", "0.3",
                             "--basin", "0 0 * *", "--stationary"),
        "clique": exact_json(capsys, "--model", "clique", "--length", "4", "--kernel", "k-gibbs", "--k", "2"),
        "matrix": exact_json(capsys, "--matrix", str(tmp_path / "P.npy")),
        "reducible": exact_json(capsys, "--matrix", str(tmp_path / "R.npy")),
    }
    for name, doc in runs.items():
        validator.validate(doc)  # raises with the failing path
        assert doc["mlmix_version"] == __version__ and doc["schema"] == "mlmix.exact/1", name
        assert tuple(doc["inputs"])[:len(INPUT_KEYS)] == INPUT_KEYS
    assert runs["ising"]["inputs"]["source"] == {"kind": "ising", "graph": "cycle:4", "beta": 0.3, "coupling": 1.0,
                                                 "field": 0.0}
    assert runs["potts"]["inputs"]["seed"] == 2 and runs["scores"]["inputs"]["temperature"] == 0.3
    assert runs["scores"]["inputs"]["seed"] == 0  # the default seed of random scores, stated
    assert runs["clique"]["inputs"]["kernel"] == "k-gibbs" and runs["clique"]["inputs"]["k"] == 2
    assert runs["matrix"]["inputs"]["source"]["sha256"] == file_sha256(tmp_path / "P.npy")
    assert "reason" in runs["reducible"] and "spectral_gap" not in runs["reducible"]


def test_the_schema_rejects_what_it_should(capsys, validator):
    doc = exact_json(capsys, "--graph", "cycle:3")
    broken = [
        {k: v for k, v in doc.items() if k != "mlmix_version"},
        {**doc, "schema": "mlmix.exact/0"},
        {**doc, "inputs": {k: v for k, v in doc["inputs"].items() if k != "seed"}},
        {**doc, "spectral_gap": {**doc["spectral_gap"], "reason": "resolved values carry no reason"}},
        {**doc, "t_mix": {**doc["t_mix"], "value": None, "reason": None}},  # an interval must say why
        {**doc, "reason": "both a reason and the figures"},
    ]
    for bad in broken:
        assert not validator.is_valid(bad)


def test_run_manifest_carries_the_header_and_still_resumes(tmp_path):
    from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR

    params = {"model": str(DEFAULT_MODEL_DIR), "seed": 3, "temperature": 0.5}
    with OutputDir(tmp_path / "out", "run test", params) as out:
        assert not out.resumed
    manifest = json.loads((tmp_path / "out" / "run.json").read_text())
    assert manifest["mlmix_version"] == __version__ and manifest["schema"] == "mlmix.run/1"
    assert manifest["command"] == "run test" and manifest["params"] == params
    inputs = manifest["inputs"]
    assert (inputs["seed"], inputs["temperature"], inputs["source"]["model"]) == (3, 0.5, str(DEFAULT_MODEL_DIR))
    assert inputs["model_hash"] == folder_model_hash(DEFAULT_MODEL_DIR) and len(inputs["model_hash"]) == 64
    with OutputDir(tmp_path / "out", "run test", params) as out:
        assert out.resumed
    with pytest.raises(ValueError, match="seed"):
        with OutputDir(tmp_path / "out", "run test", {**params, "seed": 4}):
            pass


def test_saved_chain_keeps_its_description_and_figures(tmp_path):
    chain = Chain.from_source(IsingModel(nx.cycle_graph(5), beta=0.4), name="ising5")
    gap, cond = chain.spectral_gap, chain.conductance
    chain.save(tmp_path / "c.npz")
    back = Chain.load(tmp_path / "c.npz")
    assert back.name == "ising5" and back.saved_about["mlmix_version"] == __version__
    assert back.saved_about["inputs"]["source"] == "IsingModel" and back.saved_about["inputs"]["kernel"] == "glauber"
    assert "spectral_gap" in back.__dict__ and "kemeny_constant" not in back.__dict__  # only what was computed
    for saved, original in ((back.spectral_gap, gap), (back.conductance, cond)):
        assert (saved.value, saved.lower, saved.upper, saved.method) == \
            (original.value, original.lower, original.upper, original.method)
    fresh = Chain(back.P)  # the figures are those of the matrix that was saved
    assert fresh.spectral_gap.value == pytest.approx(gap.value, rel=1e-13)


def test_exact_json_of_a_masked_lm_names_model_frame_and_weights(tmp_path, capsys, monkeypatch, validator):
    import torch
    from mlm_fixtures import save_model, tiny_masked_lm

    from mlmix.empirical.models.tabulate import weights_hash

    torch.set_num_threads(1)
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    model, tok = tiny_masked_lm("bert", seed=3)
    folder = save_model(model, tok, tmp_path / "m")
    doc = exact_json(capsys, "--mlm", str(folder), "--frame", "a _ _ !", "--candidates", "a b c",
                     "--temperature", "0.8", "--no-progress")
    validator.validate(doc)
    inputs = doc["inputs"]
    assert inputs["source"]["kind"] == "mlm" and inputs["source"]["model"] == str(folder)
    assert inputs["source"]["alphabet"] == ["a", "b", "c"] and inputs["frame"] == "a _ _ !"
    assert inputs["temperature"] == 0.8 and inputs["kernel"] == "glauber"
    assert inputs["model_hash"] == weights_hash(model)
