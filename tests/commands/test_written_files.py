"""Every command names the result files it wrote, in one line at its end (mlmix/files.py
``recording_writes``, printed by mlmix/cli.py), and records where its source came from."""

import json

import pytest

from mlmix.cli import main
from mlmix.files import describe_written


def _run(capsys, *argv):
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def test_run_names_its_result_files_once(tmp_path, capsys):
    out = tmp_path / "toy"
    code, _, err = _run(capsys, "run", "samplers", "--out", out, "--model", "scores", "--vocab", "2", "--length", "3")
    assert code == 0
    wrote = [line for line in err if "wrote" in line]
    assert wrote == [f"mlmix run: wrote {out}: samplers.json, samplers.csv, samplers.png"]


def test_many_files_in_a_sub_folder_are_counted(tmp_path):
    paths = [tmp_path / "d.json", tmp_path / "d.png"] + [tmp_path / "cases" / f"{k}.json" for k in range(7)]
    assert describe_written(paths) == f"{tmp_path}: d.json, d.png, cases/ (7 files)"
    assert describe_written(paths[:1]) == str(tmp_path / "d.json")
    few = [tmp_path / "a" / "x.json", tmp_path / "b.csv"]
    assert describe_written(few) == f"{tmp_path}: a/x.json, b.csv"


def test_run_records_a_built_in_source_as_what_it_is(tmp_path, capsys):
    out = tmp_path / "toy"
    assert _run(capsys, "run", "samplers", "--out", out, "--model", "scores", "--vocab", "2", "--length", "3")[0] == 0
    source = json.loads((out / "run.json").read_text())["inputs"]["source"]
    assert source == {"kind": "scores"}  # a random toy table, not a masked LM


def test_plot_and_save_scores_are_named(tmp_path, capsys):
    plot = tmp_path / "chain.pdf"
    code, _, err = _run(capsys, "exact", "--model", "ising", "--graph", "cycle:4", "--beta", "1", "--plot", plot)
    assert code == 0 and err[-1] == f"mlmix exact: wrote {plot}" and plot.stat().st_size > 0
    scores = tmp_path / "scores.npz"
    code, _, err = _run(capsys, "decode", "--model", "scores", "--vocab", "2", "--length", "2",
                        "--save-scores", scores)
    assert code == 0 and err[-1] == f"mlmix decode: wrote {scores}"


@pytest.mark.parametrize("argv", [["exact", "--model", "ising", "--graph", "cycle:4", "--beta", "nan"],
                                  ["exact", "--model", "ising", "--graph", "cycle:4"]])
def test_nothing_named_without_a_result_file(tmp_path, capsys, argv):
    _, _, err = _run(capsys, *argv)
    assert not any("wrote" in line for line in err)
