"""`mlmix run samplers` on a toy joint: files written, laws and figures consistent with the library."""

import csv
import json

import networkx as nx
import numpy as np

from mlmix.cli import main
from mlmix.theory.sources.conditionals import IsingModel


def test_run_samplers_on_an_ising_joint(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "samplers", "--out", str(out), "--graph", "path:3", "--coupling", "1.5", "--k", "2"]) == 0
    text = capsys.readouterr().out
    assert "fully-parallel" in text and "mh-pll" in text
    report = json.loads((out / "samplers.json").read_text())
    p = IsingModel(nx.path_graph(3), couplings=1.5, beta=0.5).joint()
    laws = {k: np.asarray(v["law"]) for k, v in report["samplers"].items()}
    for name in ("glauber", "systematic", "any-order", "left-to-right", "joint"):  # all sample the joint
        assert np.abs(laws[name] - p).max() < 1e-12, name
    for name in ("parallel-2", "confidence-2", "fully-parallel", "mh-logit"):  # these do not
        assert 0.5 * np.abs(laws[name] - p).sum() > 1e-3, name
    d = report["distances"]
    assert d["fully-parallel"]["joint"]["tv"]["value"] == d["joint"]["fully-parallel"]["tv"]["value"]
    acc = report["samplers"]["mh-logit"]["acceptance_rate"]["value"]
    assert 0 < acc < 1
    rows = list(csv.DictReader((out / "samplers.csv").open()))
    assert [r["sampler"] for r in rows][:4] == ["glauber", "systematic", "mh-logit", "mh-pll"]
    assert rows[4]["steps"] == "3" and rows[6]["steps"] == "2"
    assert (out / "samplers.png").stat().st_size > 1000
