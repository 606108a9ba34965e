"""``mlmix decode --schedule ... --kl`` and ``--schedule optimal:K`` against the Python functions they print."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import networkx as nx
import pytest

from mlmix.cli import main
from mlmix.theory.kernels import schedule_kl as skl
from mlmix.theory.sources.conditionals import IsingModel


def test_kl_prints_the_identity_the_order_average_and_the_bound(capsys, tmp_path):
    assert main(["decode", "--model", "ising", "--graph", "cycle:5", "--beta", "0.8", "--schedule", "3,2", "--kl",
                 "--plot", str(tmp_path / "h.png")]) == 0
    out = capsys.readouterr().out
    curve = skl.entropy_curve(IsingModel(nx.cycle_graph(5), beta=0.8))
    kl, bound = skl.schedule_kl(curve, (3, 2)), skl.sharp_bound(curve, (3, 2))
    line = next(x for x in out.splitlines() if "by the identity" in x)
    assert math.isclose(float(line.split()[-1]), float(kl), rel_tol=1e-5)
    line = next(x for x in out.splitlines() if "by orders" in x)
    assert math.isclose(float(line.split()[6]), float(kl), rel_tol=1e-5)
    assert f"{float(bound):.6g}" in out
    assert (tmp_path / "h.png").stat().st_size > 0


def test_optimal_schedule_table(capsys):
    assert main(["decode", "--model", "potts", "--q", "3", "--graph", "path:4", "--schedule", "optimal:2"]) == 0
    out = capsys.readouterr().out
    assert "optimal 2-step schedule" in out
    for name in ("uniform", "cosine", "log-linear", "geometric", "randomised sizes"):
        assert f"  {name} " in out


@pytest.mark.parametrize("argv, msg", [
    (["--schedule", "optimal:x"], "positive integer"),
    (["--schedule", "optimal:9"], "K <= n"),
    (["--schedule", "3,3", "--kl"], "sum to the length"),
    (["--kl"], "needs --schedule"),
    (["--schedule", "2,2", "--kl", "--sampler", "parallel"], "--sampler does not apply"),
    (["--schedule", "2,2", "--kl", "--plot", "h.txt"], "--plot must name"),
])
def test_bad_schedule_options_exit_2(capsys, argv, msg):
    assert main(["decode", "--model", "ising", "--graph", "cycle:4", *argv]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1


SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schema" / "decode-schedule.schema.json").read_text())


@pytest.mark.parametrize("argv", [["--model", "potts", "--q", "3", "--graph", "path:4", "--schedule", "optimal:2"],
                                  ["--model", "scores", "--vocab", "2", "--length", "3", "--schedule", "2,1", "--kl"]])
def test_json_validates_and_carries_the_printed_figures(capsys, argv):
    assert main(["decode", *argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(doc, SCHEMA)
    assert doc["schema"] == "mlmix.decode-schedule/1" and doc["inputs"]["kernel"] == "random-order-schedule"
    body = doc.get("optimal") or doc["schedule"]
    assert body["kl"]["lower"] <= body["kl"]["upper"]
    del doc["entropy_curve"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)
