"""``mlmix exact``: table and JSON output cross-checked against the API, matrix files, bad input."""

import json

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from test_spectral import two_state

from mlmix.cli import main
from mlmix.theory.cli import parse_graph
from mlmix.theory.conditionals import IsingModel, ScoreTable
from mlmix.theory.kernels import glauber_kernel, k_gibbs_kernel
from mlmix.theory.mixing import mixing_time
from mlmix.theory.spectral import additive_gap, spectral_gap, stationary


def run_json(capsys, *argv):
    assert main(["exact", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_default_prints_the_ising_table(capsys):
    assert main(["exact"]) == 0
    out = capsys.readouterr().out
    P = glauber_kernel(IsingModel(nx.cycle_graph(6), beta=0.5))
    assert "Ising model on cycle:6" in out and "64" in out
    assert f"{spectral_gap(P):.6g}" in out
    assert f"{mixing_time(P)}" in out.split("worst-start TV")[1].split()[0]


def test_json_keys_and_values_match_the_api(capsys):
    res = run_json(capsys, "--graph", "path:4", "--beta", "0.8", "--field", "0.2", "--stationary")
    P = glauber_kernel(IsingModel(nx.path_graph(4), beta=0.8, fields=0.2))
    pi = stationary(P).pi
    for key in ("n_states", "reversible", "stationary", "spectral_gap", "absolute_spectral_gap", "relaxation_time",
                "poincare_constant", "conductance", "t_mix", "method"):
        assert key in res
    assert res["n_states"] == 16 and res["reversible"] is True
    np.testing.assert_allclose(res["stationary"], pi, rtol=1e-12)
    assert res["spectral_gap"] == pytest.approx(spectral_gap(P, pi), rel=1e-12)
    assert res["poincare_constant"] == pytest.approx(1 / additive_gap(P, pi), rel=1e-12)
    assert res["relaxation_time"] == pytest.approx(1 / res["absolute_spectral_gap"], rel=1e-12)
    assert isinstance(res["conductance"], float)  # 16 states: exhaustive
    assert res["t_mix"] == mixing_time(P, 0.25, pi)
    assert "residual" in res["method"]["stationary"]


def test_non_reversible_scores_and_block_kernels(capsys):
    res = run_json(capsys, "--model", "scores", "--vocab", "2", "--length", "5", "--temperature", "0.5",
                   "--seed", "3")
    assert res["reversible"] is False and res["spectral_gap"] is None
    P = glauber_kernel(ScoreTable.random(2, 5, seed=3, temperature=0.5))
    assert res["poincare_constant"] == pytest.approx(1 / additive_gap(P), rel=1e-10)
    assert set(res["conductance"]) == {"lower", "upper"}
    assert res["conductance"]["lower"] <= res["conductance"]["upper"]
    res = run_json(capsys, "--model", "potts", "--q", "3", "--graph", "path:3", "--kernel", "k-gibbs", "--k", "2")
    assert res["n_states"] == 27 and res["reversible"] is True
    res = run_json(capsys, "--model", "clique", "--length", "4", "--clique-size", "3", "--coupling", "0.3",
                   "--kernel", "parallel")
    assert res["n_states"] == 16
    joint = IsingModel(nx.path_graph(3), couplings=0.5)
    assert spectral_gap(k_gibbs_kernel(joint, 3)) == pytest.approx(1.0)  # one step samples the joint


def test_matrix_files(tmp_path, capsys):
    P = two_state(0.3, 0.1)
    np.save(tmp_path / "p.npy", P)
    res = run_json(capsys, "--matrix", str(tmp_path / "p.npy"), "--stationary")
    np.testing.assert_allclose(res["stationary"], [0.25, 0.75])
    assert res["spectral_gap"] == pytest.approx(0.4) and res["conductance"] == pytest.approx(0.3)
    sp.save_npz(tmp_path / "p.npz", sp.csr_array(P))
    assert run_json(capsys, "--matrix", str(tmp_path / "p.npz"))["t_mix"] == res["t_mix"]
    flip = np.array([[0.0, 1.0], [1.0, 0.0]])
    np.save(tmp_path / "flip.npy", flip)
    res = run_json(capsys, "--matrix", str(tmp_path / "flip.npy"))
    assert res["t_mix"] is None and res["relaxation_time"] is None and "periodic" in res["method"]["t_mix"]


@pytest.mark.parametrize("argv, message", [
    (["--graph", "cycle:2"], "bad graph spec"),
    (["--graph", "grid:0x3"], "bad graph spec"),
    (["--graph", "torus:4"], "bad graph spec"),
    (["--temperature", "0"], "temperature"),
    (["--temperature", "-1"], "temperature"),
    (["--model", "potts", "--q", "1"], "vocab_size"),
    (["--model", "scores", "--vocab", "1"], "vocab_size"),
    (["--model", "scores", "--kernel", "k-gibbs"], "joint"),
    (["--kernel", "k-gibbs", "--k", "9"], "k must"),
])
def test_bad_model_arguments(capsys, argv, message):
    assert main(["exact", *argv]) == 2
    assert message in capsys.readouterr().err


def test_bad_matrix_files(tmp_path, capsys):
    cases = {"nonsquare.npy": np.ones((2, 3)) / 3, "nan.npy": np.array([[np.nan, 1.0], [0.5, 0.5]]),
             "negative.npy": np.array([[1.5, -0.5], [0.5, 0.5]]), "rows.npy": np.array([[0.5, 0.4], [0.5, 0.5]])}
    messages = {"nonsquare.npy": "square", "nan.npy": "NaN", "negative.npy": "negative", "rows.npy": "sum to 1"}
    for name, M in cases.items():
        np.save(tmp_path / name, M)
        assert main(["exact", "--matrix", str(tmp_path / name)]) == 2
        assert messages[name] in capsys.readouterr().err
    np.savez(tmp_path / "plain.npz", a=np.eye(2))
    assert main(["exact", "--matrix", str(tmp_path / "plain.npz")]) == 2
    assert "save_npz" in capsys.readouterr().err
    (tmp_path / "p.txt").write_text("1 0\n0 1\n")
    assert main(["exact", "--matrix", str(tmp_path / "p.txt")]) == 2
    assert ".npy or .npz" in capsys.readouterr().err
    assert main(["exact", "--matrix", str(tmp_path / "missing.npy")]) == 2
    assert "does not exist" in capsys.readouterr().err
    reducible = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.save(tmp_path / "red.npy", reducible)
    assert main(["exact", "--matrix", str(tmp_path / "red.npy")]) == 2
    assert "reducible" in capsys.readouterr().err


def test_graph_specs():
    assert parse_graph("cycle:5").number_of_edges() == 5
    g = parse_graph("grid:2x3")
    assert sorted(g.nodes) == list(range(6)) and g.number_of_edges() == 7
    assert parse_graph("complete:4").number_of_edges() == 6
    assert parse_graph("star:4").number_of_edges() == 3
    assert parse_graph("random:6:0.5:1").number_of_nodes() == 6
