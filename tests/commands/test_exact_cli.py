"""``mlmix exact``: JSON cross-checked against the API and closed forms, the issue's metastable examples,
paper G's constants, matrix files, and a bad-input battery (exit 2, one line, nothing written)."""

import json

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import two_state

from mlmix.cli import main
from mlmix.commands.source_options import parse_graph
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.local.influence import aggregate_influence, influence_matrix
from mlmix.theory.reference import ising_cycle_gap
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable


def _no_constants(token):
    raise AssertionError(f"invalid JSON token {token}")


def run_json(capsys, *argv):
    assert main(["exact", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=_no_constants)  # strict: no NaN/Infinity


def test_default_table(capsys):
    assert main(["exact"]) == 0
    out = capsys.readouterr().out
    ch = Chain.from_source(IsingModel(nx.cycle_graph(6), beta=0.5))
    assert "Ising model on cycle:6" in out and "64" in out
    assert f"{ch.spectral_gap.value:.6g}" in out
    assert f"{int(ch.mixing_time())}   (exact)" in out
    assert "paper G: rho" in out and "how each figure was computed" in out


@pytest.mark.parametrize("beta", [6.0, 10.0, 20.0])
def test_the_issue_example_metastable_ising(capsys, beta):
    """Gap (1 - tanh(2 beta))/n to relative accuracy; t_mix and conductance as certified intervals."""
    res = run_json(capsys, "--beta", str(beta))
    exact = ising_cycle_gap(6, beta)
    gap = res["spectral_gap"]
    assert abs(gap["value"] / exact - 1) < 1e-12 and gap["rel_error"] < 1e-9
    assert res["poincare_constant"]["value"] == pytest.approx(1 / exact, rel=1e-12)
    cond = res["conductance"]
    assert 0 <= cond["lower"] <= cond["upper"] <= 1 and cond["set_size"] >= 1
    t = res["t_mix"]
    assert t["value"] is None and t["lower"] > 0 and t["upper"] >= t["lower"] and "periodic" not in t["reason"]


def test_json_matches_the_api(capsys):
    res = run_json(capsys, "--graph", "path:4", "--beta", "0.8", "--field", "0.2", "--stationary")
    ch = Chain.from_source(IsingModel(nx.path_graph(4), beta=0.8, fields=0.2))
    assert res["n_states"] == 16 and res["reversible"] is True and res["period"] == 1
    np.testing.assert_allclose(res["stationary"]["value"], ch.stationary.value, rtol=1e-14)
    for key in ("spectral_gap", "absolute_spectral_gap", "relaxation_time", "additive_gap", "poincare_constant",
                "conductance", "kemeny_constant"):
        assert res[key]["value"] == pytest.approx(getattr(ch, key).value, rel=1e-13), key
        assert res[key]["method"] and res[key]["rel_error"] is not None
    assert res["t_mix"]["value"] == int(ch.mixing_time(0.25)) and res["t_mix"]["rel_error"] == 0
    assert "exhaustive" in res["conductance"]["method"]  # 16 states: enumerated


def test_paper_constants_next_to_the_chain(capsys):
    res = run_json(capsys, "--model", "scores", "--vocab", "2", "--length", "4", "--temperature", "2", "--seed", "3")
    g = res["paper_g"]
    src = ScoreTable.random(2, 4, seed=3, temperature=2.0)
    rho = aggregate_influence(influence_matrix(src).rho_ij).rho
    assert g["rho"]["value"] == pytest.approx(rho, rel=1e-13)
    assert g["contraction_temperature"]["value"] == pytest.approx(g["delta"]["value"] / 4, rel=1e-13)
    assert g["rectangle"]["max"] > 0 and res["reversible"] is False  # incompatible <=> R > 0 <=> non-reversible
    if rho < 1:
        assert res["t_mix"]["value"] <= g["thm5_t_mix_bound"]["value"]  # Theorem 5
    ising = run_json(capsys, "--beta", "0.3")["paper_g"]
    assert ising["rectangle"]["max"] < 1e-12  # compatible
    basin = run_json(capsys, "--model", "scores", "--vocab", "2", "--length", "4", "--temperature", "0.3",
                     "--basin", "1 1 * *")["paper_g"]["basin"]
    assert basin["states"] == 4 and 0 < basin["mass"] < 1 and basin["phi_exact"]["value"] > 0


def test_non_reversible_and_other_kernels(capsys):
    res = run_json(capsys, "--model", "scores", "--vocab", "2", "--length", "5", "--temperature", "0.5", "--seed", "3")
    assert res["reversible"] is False and res["spectral_gap"]["value"] is None
    assert "not reversible" in res["spectral_gap"]["reason"]
    ch = Chain.from_source(ScoreTable.random(2, 5, seed=3, temperature=0.5))
    assert res["poincare_constant"]["value"] == pytest.approx(float(ch.poincare_constant), rel=1e-12)
    res = run_json(capsys, "--model", "potts", "--q", "3", "--graph", "path:3", "--kernel", "k-gibbs", "--k", "2")
    assert res["n_states"] == 27 and res["reversible"] is True and "paper_g" not in res
    res = run_json(capsys, "--model", "clique", "--length", "4", "--clique-size", "3", "--coupling", "0.3",
                   "--kernel", "parallel")
    assert res["n_states"] == 16


def test_matrix_files_and_save_matrix(tmp_path, capsys):
    P = two_state(0.3, 0.1)
    np.save(tmp_path / "p.npy", P)
    res = run_json(capsys, "--matrix", str(tmp_path / "p.npy"), "--stationary")
    np.testing.assert_allclose(res["stationary"]["value"], [0.25, 0.75], rtol=1e-14)
    assert res["spectral_gap"]["value"] == pytest.approx(0.4, rel=1e-14)
    assert res["conductance"]["value"] == pytest.approx(0.3, rel=1e-14)
    sp.save_npz(tmp_path / "p.npz", sp.csr_array(P))
    assert run_json(capsys, "--matrix", str(tmp_path / "p.npz"))["t_mix"] == res["t_mix"]
    # --save-matrix writes the kernel that was analysed; reading it back gives the same figures
    res1 = run_json(capsys, "--model", "scores", "--vocab", "2", "--length", "3", "--save-matrix",
                    str(tmp_path / "k.npz"))
    res2 = run_json(capsys, "--matrix", str(tmp_path / "k.npz"))
    assert res2["additive_gap"]["value"] == res1["additive_gap"]["value"]
    flip = np.array([[0.0, 1.0], [1.0, 0.0]])
    np.save(tmp_path / "flip.npy", flip)
    res = run_json(capsys, "--matrix", str(tmp_path / "flip.npy"))
    assert res["period"] == 2 and res["t_mix"]["value"] is None and "periodic" in res["t_mix"]["reason"]
    assert res["relaxation_time"]["value"] is None


@pytest.mark.parametrize("argv, message", [
    (["--eps", "nan"], "--eps must be finite"),
    (["--eps", "1.5"], "--eps must be < 1"),
    (["--eps", "0"], "--eps must be > 0"),
    (["--temperature", "0"], "temperature must be > 0"),
    (["--temperature", "inf"], "finite"),
    (["--beta", "nan"], "--beta must be finite"),
    (["--beta", "1", "--temperature", "2"], "not both"),
    (["--coupling", "inf"], "--coupling must be finite"),
    (["--scale", "-1"], "--scale must be > 0"),
    (["--graph", "cycle:2"], "bad graph spec"),
    (["--graph", "torus:4"], "bad graph spec"),
    (["--model", "potts", "--q", "1"], "--q must be >= 2"),
    (["--model", "scores", "--vocab", "1"], "--vocab must be >= 2"),
    (["--model", "scores", "--kernel", "k-gibbs"], "joint"),
    (["--kernel", "k-gibbs", "--k", "9"], "--k must lie in"),
    (["--mixing-limit", "0"], "--mixing-limit must be >= 1"),
    (["--model", "scores", "--vocab", "1000", "--length", "2", "--representation", "sparse"], "needs about"),
    (["--graph", "cycle:20", "--kernel", "k-gibbs", "--k", "10"], "needs about"),
    (["--model", "scores", "--vocab", "3", "--length", "4", "--max-memory", "1KiB"], "memory limit of"),
    (["--max-memory", "lots"], "--max-memory must be a size"),
    (["--model", "scores", "--vocab", "2", "--length", "3", "--basin", "1 *"], "basin pattern"),
    (["--k", "x"], "invalid int value"),
    (["--basins", "0,1", "1,2"], "disjoint"),
    (["--basins", "0", "64"], "state indices must lie in [0, 64)"),
    (["--basins", "0", "1 1"], "basin pattern must have n = 6"),
    (["--basins", "0", "x 1 1 1 1 1"], "neither '*' nor a token"),
    (["--basins", "0", "metastable:9"], "metastable set(s)"),
    (["--basins", "0", "pcca:2/2"], "PCCA+ set(s)"),
    (["--basins", "0", "pcca:1"], "'pcca:K/M' needs"),
    (["--basins", "pcca:0/65", "pcca:1/65"], "'pcca:K/M' needs"),
    (["--model", "scores", "--vocab", "3", "--length", "3", "--basins", "pcca:0/2", "pcca:1/2"], "G-PCCA+"),
    (["--basins", "0"], "expected 2 arguments"),
])
def test_bad_arguments_give_one_line_and_exit_2(capsys, argv, message):
    assert main(["exact", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


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
    assert "unknown .npz layout" in capsys.readouterr().err
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04 not really a zip")
    assert main(["exact", "--matrix", str(tmp_path / "corrupt.npz")]) == 2
    assert "not a readable" in capsys.readouterr().err
    (tmp_path / "p.txt").write_text("1 0\n0 1\n")
    assert main(["exact", "--matrix", str(tmp_path / "p.txt")]) == 2
    assert ".npy or .npz" in capsys.readouterr().err
    assert main(["exact", "--matrix", str(tmp_path / "missing.npy")]) == 2
    assert "does not exist" in capsys.readouterr().err
    np.save(tmp_path / "red.npy", np.eye(2))
    res = run_json(capsys, "--matrix", str(tmp_path / "red.npy"))  # two closed classes: named, not a crash
    assert "2 closed classes" in res["reason"]
    bad_out = tmp_path / "dir.npz"
    bad_out.mkdir()
    assert main(["exact", "--save-matrix", str(bad_out)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_debug_shows_the_traceback():
    with pytest.raises(ValueError, match="--eps"):
        main(["exact", "--eps", "2", "--debug"])


def test_graph_specs():
    assert parse_graph("cycle:5").number_of_edges() == 5
    g = parse_graph("grid:2x3")
    assert sorted(g.nodes) == list(range(6)) and g.number_of_edges() == 7
    assert parse_graph("complete:4").number_of_edges() == 6
    assert parse_graph("star:4").number_of_edges() == 3
    assert parse_graph("random:6:0.5:1").number_of_nodes() == 6


def test_basins_match_the_api_and_the_symmetry(capsys):
    """--basins between the two ground states of a ferromagnetic Ising cycle: the JSON's figures are those of
    Chain.transition_paths, the spin-flip symmetry gives k_AB = k_BA and time last in A = 1/2, the mean first
    passage time is 1/k, and the channels (listed by their spins) start in A, end in B, share at most 1."""
    res = run_json(capsys, "--beta", "2", "--basins", "0 0 0 0 0 0", "1 1 1 1 1 1")
    b = res["basins"]
    tp = Chain.from_source(IsingModel(nx.cycle_graph(6), beta=2.0)).transition_paths([0], [63])
    for key, r in (("total_flux", tp.total_flux), ("rate_AB", tp.rate), ("mfpt_AB", tp.mfpt), ("mfpt_BA", tp.mfpt_back)):
        assert b[key]["value"] == pytest.approx(r.value, rel=1e-14) and b[key]["rel_error"] < 1e-9, key
    assert b["rate_AB"]["value"] == pytest.approx(b["rate_BA"]["value"], rel=1e-12)
    assert b["mfpt_AB"]["value"] == pytest.approx(1 / b["rate_AB"]["value"], rel=1e-12)
    assert b["time_last_in_A"]["value"] == pytest.approx(0.5, rel=1e-12)
    assert b["A"] == {"size": 1, "states": ["0 0 0 0 0 0"], "mass": b["A"]["mass"]}
    paths = b["pathways"]
    assert len(paths) == 5 and all(p["states"][0] == "0 0 0 0 0 0" and p["states"][-1] == "1 1 1 1 1 1" for p in paths)
    assert sum(p["share"] for p in paths) + b["pathways_remainder"] == pytest.approx(1.0)
    assert main(["exact", "--beta", "2", "--basins", "0 0 0 0 0 0", "1 1 1 1 1 1"]) == 0
    out = capsys.readouterr().out
    assert "mean first passage A -> B" in out and "channel 1" in out and "other channels" in out


def test_basins_as_indices_of_a_matrix_and_as_metastable_sets(tmp_path, capsys):
    """A matrix file's states by index (the two-state chain: k_AB = a, k_BA = b exactly), and the metastable
    sets of a cold score table (the first two, by mass) as the basins."""
    np.save(tmp_path / "P.npy", two_state(0.3, 0.1))
    b = run_json(capsys, "--matrix", str(tmp_path / "P.npy"), "--basins", "0", "1")["basins"]
    assert b["rate_AB"]["value"] == pytest.approx(0.3, rel=1e-12) and b["rate_BA"]["value"] == pytest.approx(0.1, rel=1e-12)
    assert b["pathways"] == [{"states": ["0", "1"], "share": pytest.approx(1.0)}]
    b = run_json(capsys, "--model", "scores", "--vocab", "3", "--length", "3", "--temperature", "0.2", "--seed", "1",
                 "--basins", "metastable:0", "metastable:1")["basins"]
    assert b["A"]["size"] >= 1 and b["B"]["size"] >= 1 and b["mfpt_AB"]["value"] > 1


def test_basins_as_pcca_sets(capsys):
    """"pcca:K/M" is the K-th crisp set of Chain.pcca(M) (largest coarse mass first): the two PCCA+ sets of the
    cold Ising cycle partition its 64 states."""
    b = run_json(capsys, "--beta", "2", "--basins", "pcca:0/2", "pcca:1/2")["basins"]
    sets = Chain.from_source(IsingModel(nx.cycle_graph(6), beta=2.0)).pcca(2)
    assert [b["A"]["size"], b["B"]["size"]] == [int(s.sum()) for s in sets.sets]
    assert b["A"]["size"] + b["B"]["size"] == 64 and b["rate_AB"]["value"] > 0
