"""`mlmix decode`, score files (--scores / --save-scores) and their validation."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

from mlmix.cli import main
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.decoders import PartialScoreTable, decoder_law
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable
from mlmix.theory.sources.scorefile import load_scores, save_scores
from mlmix.validation import SCORES_FORMAT


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_decode_ising_parallel_is_total_correlation(capsys):
    out = run_json(capsys, ["decode", "--graph", "cycle:4", "--sampler", "parallel", "--k", "4", "--json", "--law"])
    src = IsingModel(nx.cycle_graph(4), couplings=1.0, fields=0.0, beta=0.5)
    p = src.joint()
    marg = [p.reshape((2,) * 4).sum(axis=tuple(j for j in range(4) if j != i)) for i in range(4)]
    tc = sum(-(m * np.log(m)).sum() for m in marg) + (p * np.log(p)).sum()
    assert abs(out["distances"]["joint"]["kl"]["value"] - tc) < 1e-12
    assert out["steps"] == 1
    law = np.asarray(out["law"])
    assert abs(law.sum() - 1) < 1e-14
    # the Glauber stationary law of a joint is the joint: same distances
    assert abs(out["distances"]["glauber"]["tv"]["value"] - out["distances"]["joint"]["tv"]["value"]) < 1e-12


def test_decode_any_order_of_a_joint_is_the_joint(capsys):
    out = run_json(capsys, ["decode", "--model", "potts", "--q", "3", "--graph", "path:3", "--sampler",
                            "left-to-right", "--order", "2 0 1", "--json"])
    kl = out["distances"]["joint"]["kl"]
    assert kl["value"] is None and kl["upper"] < 1e-12  # zero, stated as an interval at the floor


def test_scores_round_trip_and_cli(tmp_path, capsys):
    t = PartialScoreTable.random(3, 3, seed=4, scale=1.2)
    f = tmp_path / "t.npz"
    assert save_scores(f, t, ["a", "b", "c"]) == "partial"
    back = load_scores(f)
    assert isinstance(back, PartialScoreTable) and np.array_equal(back.table, t.table) and back.tokens == ["a", "b", "c"]
    out = run_json(capsys, ["decode", "--scores", str(f), "--sampler", "confidence", "--k", "2", "--json", "--law"])
    assert np.abs(np.asarray(out["law"]) - decoder_law(t, "confidence", k=2).law).max() < 1e-15
    # exact reads the full contexts of a partial file; --save-scores writes the full table
    g = tmp_path / "full.npz"
    out = run_json(capsys, ["exact", "--scores", str(f), "--json", "--stationary", "--save-scores", str(g)])
    pi = Chain.from_source(t.full_table(), "glauber").stationary.value
    assert np.abs(np.asarray(out["stationary"]["value"]) - pi).max() < 1e-14
    full = load_scores(g)
    assert isinstance(full, ScoreTable) and np.array_equal(full.table, t.full_table().table)
    # decode refuses a full table; the MLM-style save of decode writes the partial one
    assert main(["decode", "--scores", str(g)]) == 2
    h = tmp_path / "again.npz"
    assert main(["decode", "--model", "scores", "--seed", "4", "--scale", "1.2", "--save-scores", str(h)]) == 0
    assert np.array_equal(load_scores(h).table, t.table)


@pytest.mark.parametrize("change,msg", [({"mlmix_format": "other"}, "format"), ({"kind": "dense"}, "kind"),
                                         ({"table": np.zeros((3, 9, 3))}, "shape"),
                                         ({"table": np.full((3, 16, 3), np.nan)}, "finite"),
                                         ({"tokens": np.array(["a"])}, "tokens"), ({"temperature": -1.0}, "temperature")])
def test_score_file_validation(tmp_path, change, msg):
    arrays = {"mlmix_format": np.array(SCORES_FORMAT), "kind": np.array("partial"), "vocab_size": np.array(3),
              "length": np.array(3), "table": np.zeros((3, 16, 3))}
    arrays.update({k: np.asarray(v) for k, v in change.items()})
    f = tmp_path / "bad.npz"
    np.savez(f, **arrays)
    with pytest.raises(ValueError, match=msg):
        load_scores(f)


def test_bad_input_exit_2(tmp_path):
    assert main(["decode", "--sampler", "parallel", "--k", "0"]) == 2
    assert main(["decode", "--scores", str(tmp_path / "missing.npz")]) == 2
    assert main(["decode", "--sampler", "schedule", "--schedule", "0 | 0 1 2 3"]) == 2
    assert main(["decode", "--top-p", "1.5"]) == 2
    assert main(["decode", "--sampler", "threshold", "--threshold", "1.5"]) == 2
    (tmp_path / "junk.npz").write_bytes(b"junk")
    assert main(["decode", "--scores", str(tmp_path / "junk.npz")]) == 2
    with pytest.raises(ValueError):
        save_scores(tmp_path / "x.txt", ScoreTable.random(2, 2, seed=0))


def test_law_table_in_tokens(tmp_path, capsys):
    """--law: the most probable states in the alphabet's tokens, sorted, with the count and mass of the rest;
    the JSON's law_table agrees with the whole law vector."""
    t = PartialScoreTable.random(3, 3, seed=4, scale=1.2)
    f = tmp_path / "t.npz"
    save_scores(f, t, ["a", "b", "c"])
    law = decoder_law(t, "confidence", k=2).law
    out = run_json(capsys, ["decode", "--scores", str(f), "--sampler", "confidence", "--k", "2", "--json", "--law",
                            "--law-rows", "4"])
    table = out["law_table"]
    top = np.argsort(-law, kind="stable")[:4]
    assert [r["index"] for r in table["rows"]] == top.tolist()
    assert table["rows"][0]["state"] == " ".join("abc"[v] for v in t.space.decode(int(top[0])))
    assert all(abs(r["probability"] - law[r["index"]]) <= 1e-15 for r in table["rows"])
    assert table["others"]["states"] == 23 and abs(table["others"]["mass"] - np.sort(law)[:23].sum()) < 1e-14
    assert main(["decode", "--scores", str(f), "--sampler", "confidence", "--k", "2", "--law", "--law-rows", "2"]) == 0
    text = capsys.readouterr().out.splitlines()
    i = next(j for j, line in enumerate(text) if line.strip().startswith("#  state"))
    assert text[i + 1].split()[:4] == ["1", *table["rows"][0]["state"].split()]
    assert text[i + 3].strip().startswith("the other 25 states: mass")
    assert main(["decode", "--law", "--law-rows", "-1"]) == 2


def test_law_table_shows_underflowed_probabilities(capsys):
    out = run_json(capsys, ["decode", "--model", "scores", "--vocab", "2", "--length", "3", "--scale", "2000",
                            "--law", "--law-rows", "0", "--json"])
    rows = out["law_table"]["rows"]
    assert len(rows) == 8 and out["law_table"]["others"] == {"states": 0, "mass": 0.0}
    low = rows[-1]
    assert low["probability"] == 0.0 and low["log_probability"] < -745  # below float64, its log kept
    assert main(["decode", "--model", "scores", "--vocab", "2", "--length", "3", "--scale", "2000", "--law",
                 "--law-rows", "0"]) == 0
    assert f"e^{low['log_probability']:.8g}" in capsys.readouterr().out


def test_split_against_the_glauber_law(capsys):
    """--split: KL(pi || law) = sampler + incompatibility - mixture gain, pi the Glauber stationary law; a joint
    source's conditionals are compatible (pi is the joint): no incompatibility, and the KL is the chain rule's."""
    out = run_json(capsys, ["decode", "--graph", "cycle:4", "--sampler", "parallel", "--k", "2", "--split", "--json"])
    sp = out["split"]
    assert sp["reference"] == "glauber" and sp["schedules"] == 6 and sp["identity_residual"] < 1e-13
    assert abs(sp["kl"]["value"] - out["distances"]["glauber"]["kl"]["value"]) < 1e-12
    assert sp["incompatibility"]["value"] is None and sp["incompatibility"]["upper"] < 1e-12
    assert abs(sp["sampler"]["value"] - sp["mixture_gain"]["value"] - sp["kl"]["value"]) < 1e-12
    out = run_json(capsys, ["decode", "--model", "scores", "--sampler", "left-to-right", "--split", "--json"])
    sp = out["split"]
    assert sp["schedules"] == 1 and abs(sp["sampler"]["computed"]) < 1e-14  # one at a time: no sampler part
    assert abs(sp["incompatibility"]["value"] - sp["kl"]["value"]) < 1e-12
    assert main(["decode", "--model", "scores", "--sampler", "schedule", "--schedule", "0 1 | 2", "--split"]) == 0
    assert "identity residual" in capsys.readouterr().out
    assert main(["decode", "--sampler", "threshold", "--split"]) == 2
    assert "mixture of fixed schedules" in capsys.readouterr().err
