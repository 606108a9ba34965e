"""`mlmix verify`: selection, --list (every result, full statements), JSON records with status,
regimes, tightness and weakening, --stats, and exit status 1 on an unexpected failure."""

import json

import pytest
from hypothesis import strategies as st

from mlmix.cli import main
from mlmix.verify.report import JSON_KEYS
from mlmix.verify.runner import load_theorems, select
from mlmix.verify.verdicts import CATALOGUE, Applicability, Theorem, compare, register, unregister


def run_cli(capsys, *argv):
    status = main(["verify", *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_json_records_have_the_documented_keys(capsys):
    status, out, _ = run_cli(capsys, "--theorem", "glauber.prop1", "--theorem", "glauber.lemma6",
                             "--theorem", "pitfalls.prop2", "--examples", "10", "--json")
    assert status == 0
    document = json.loads(out)
    assert document["schema"] == "mlmix.verify/1" and document["inputs"]["seed"] == 0
    assert document["inputs"]["examples"] == 10 and document["mlmix_version"]
    records = document["results"]
    # a prefix selects the family: glauber.lemma6 brings glauber.lemma6.softmax
    assert [r["id"] for r in records] == ["glauber.prop1", "glauber.lemma6", "glauber.lemma6.softmax",
                                          "pitfalls.prop2"]
    for r in records:
        assert set(JSON_KEYS) <= set(r)
    checked, unchecked = records[1], records[3]
    assert checked["status"] == "holds" and checked["weakened"] == "caught" and checked["number"].startswith("Lemma 6")
    # 10 Hypothesis examples (seeded, so exactly 10) plus the attaining instances; most are non-trivial
    assert checked["instances"] == 10 + len(checked["attained"])
    assert 1 <= checked["nontrivial"] <= checked["instances"]
    assert checked["attained"] and checked["attained"][0]["tightness"][0] == pytest.approx(1.0)
    assert set(checked["regimes"]) == {"n", "vocab", "temperature", "states", "nonreversible", "shares"}
    assert checked["regimes"]["n"][0] <= checked["regimes"]["n"][1]
    assert {"resolved", "at_floor"} <= set(checked["tightness"])
    assert unchecked["status"] == "not checkable" and "Transformer" in unchecked["reason"]


def test_list_prints_every_result_with_full_statements(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    status, out, _ = run_cli(capsys, "--list")
    assert status == 0
    for entry in CATALOGUE.values():
        assert entry.id in out
    assert max(len(line) for line in out.splitlines()) <= 80 + 60  # wrapped, ids and numbers on one line
    words = CATALOGUE["glauber.thm5"].statement.split()
    assert words[-1] in out and "..." not in out.split("glauber.thm5 ")[1][:200]
    status, out, _ = run_cli(capsys, "--list", "--json")
    records = json.loads(out)["results"]
    assert {r["id"] for r in records} == set(CATALOGUE)
    by_id = {r["id"]: r for r in records}
    assert by_id["pitfalls.prop5"]["known_false"] and by_id["pitfalls.lemma1"]["checkable"] is False
    assert by_id["glauber.drift.boundary"]["stored_counterexamples"]


def test_table_and_stats(capsys):
    status, out, _ = run_cli(capsys, "--theorem", "glauber.thm8", "--examples", "10", "--seed", "4", "--stats")
    assert status == 0
    header = out.splitlines()[0]
    for column in ("id", "result", "status", "instances", "non-trivial", "weakened", "tightness"):
        assert column in header
    for tid in ("glauber.thm8.escape", "glauber.thm8.conductance", "glauber.thm8.mixing"):
        assert tid in out
    assert "glauber.thm5" not in out and "mlmix verify --list" in out
    stats = out.split("non-reversible")[1]
    assert "glauber.thm8.escape" in stats


def test_unknown_theorem_is_a_clean_error(capsys):
    status, _, err = run_cli(capsys, "--theorem", "glauber.nope")
    assert status == 2 and "no theorem matches 'glauber.nope'" in err
    status, _, err = run_cli(capsys, "--examples", "0")
    assert status == 2 and "--examples" in err


def test_known_false_results_do_not_change_the_exit_status(capsys):
    status, out, _ = run_cli(capsys, "--theorem", "pitfalls.prop5", "--examples", "20")
    assert status == 0 and "known false" in out and "FAILS as documented" in out


class _FalseTheorem(Theorem):
    """Deliberately false: x <= x / 2 for every x in [1, 100]; the minimal counterexample is x = 1."""

    id = "test.false-halving"
    paper = "glauber"
    number = "test only"
    statement = "x <= x/2"

    def strategy(self):
        return st.integers(1, 100)

    def hypotheses(self, instance):
        return Applicability(True)

    def check(self, instance):
        return compare(instance, instance / 2, "<=")


class _CrashingTheorem(_FalseTheorem):
    id = "test.crashing"
    statement = "check raises"

    def check(self, instance):
        raise ZeroDivisionError("boom")


@pytest.fixture
def false_theorems():
    load_theorems()
    register(_FalseTheorem)
    register(_CrashingTheorem)
    yield
    unregister(_FalseTheorem.id)
    unregister(_CrashingTheorem.id)


def test_false_theorem_gives_exit_status_one_and_minimal_counterexample(capsys, false_theorems):
    status, out, _ = run_cli(capsys, "--theorem", "test.", "--examples", "20", "--json")
    assert status == 1
    records = {r["id"]: r for r in json.loads(out)["results"]}
    false = records["test.false-halving"]
    assert false["status"] == "fails" and false["counterexample"]["instance"] == "1"
    assert false["counterexample"]["lhs"] == 1.0 and false["counterexample"]["rhs"] == 0.5
    crash = records["test.crashing"]  # a crash is an error, never a counterexample
    assert crash["status"] == "error" and crash["counterexample"] is None
    assert "ZeroDivisionError: boom" in crash["errors"][0]["error"]
    status, out, _ = run_cli(capsys, "--theorem", "test.false-halving", "--examples", "20")
    assert status == 1 and "FAILS UNEXPECTEDLY" in out


def test_false_theorem_is_gone_after_the_test():
    assert "test.false-halving" not in CATALOGUE
    assert "test.false-halving" not in [t.id for t in select(None)]
