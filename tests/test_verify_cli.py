"""`mlmix verify`: selection, JSON records, the table, exit status 1 on a false theorem."""

import json

import pytest
from hypothesis import strategies as st

from mlmix.cli import main
from mlmix.verify.cli import JSON_KEYS, jsonable
from mlmix.verify.core import REGISTRY, Applicability, Theorem, compare, register
from mlmix.verify.runner import load_theorems, select


def run_cli(capsys, *argv):
    status = main(["verify", *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_json_records_have_the_documented_keys(capsys):
    status, out, _ = run_cli(capsys, "--theorem", "glauber.prop1", "--theorem", "glauber.lemma6",
                             "--examples", "5", "--json")
    assert status == 0
    records = json.loads(out)
    assert [r["id"] for r in records] == ["glauber.prop1", "glauber.lemma6"]
    for r in records:
        assert set(JSON_KEYS) <= set(r)
        assert r["paper"] == "glauber-mlm" and r["holds"] is True and r["counterexample"] is None
        assert r["examples"] >= 1 and r["examples"] <= 5


def test_prefix_selects_a_family_and_table_has_columns(capsys):
    status, out, _ = run_cli(capsys, "--theorem", "glauber.thm8", "--examples", "3", "--seed", "4")
    assert status == 0
    header = out.splitlines()[0]
    for column in ("id", "statement", "examples", "holds", "min slack", "tight med", "tight worst", "counterexample"):
        assert column in header
    for tid in ("glauber.thm8.escape", "glauber.thm8.conductance", "glauber.thm8.mixing"):
        assert tid in out
    assert "glauber.thm5" not in out


def test_unknown_theorem_is_a_clean_error(capsys):
    status, _, err = run_cli(capsys, "--theorem", "glauber.nope")
    assert status == 2 and "no theorem matches 'glauber.nope'" in err
    status, _, err = run_cli(capsys, "--examples", "0")
    assert status == 2 and "--examples" in err


class _FalseTheorem(Theorem):
    """Deliberately false: x <= x / 2 for every x in [1, 100]; the minimal counterexample is x = 1."""

    id = "test.false-halving"
    paper = "glauber-mlm"
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
    del REGISTRY[_FalseTheorem.id]
    del REGISTRY[_CrashingTheorem.id]


def test_false_theorem_gives_exit_status_one_and_minimal_counterexample(capsys, false_theorems):
    status, out, _ = run_cli(capsys, "--theorem", "test.", "--examples", "20", "--json")
    assert status == 1
    records = {r["id"]: r for r in json.loads(out)}
    false = records["test.false-halving"]
    assert false["holds"] is False and false["counterexample"]["instance"] == "1"
    assert false["counterexample"]["lhs"] == 1.0 and false["counterexample"]["rhs"] == 0.5
    crash = records["test.crashing"]
    assert crash["holds"] is False and "ZeroDivisionError: boom" in crash["counterexample"]["details"]["error"]
    status, out, _ = run_cli(capsys, "--theorem", "test.false-halving", "--examples", "20")
    assert status == 1 and "FAILS" in out and "NO" in out


def test_false_theorem_is_gone_after_the_test():
    assert "test.false-halving" not in REGISTRY
    assert "test.false-halving" not in [t.id for t in select(None)]


def test_jsonable_handles_numpy_and_non_finite():
    import numpy as np

    out = jsonable({"a": np.float64(np.inf), "b": np.int64(3), "c": np.array([1.5, np.nan]), "d": np.bool_(True)})
    assert out == {"a": "inf", "b": 3, "c": [1.5, "nan"], "d": True}
    json.dumps(out, allow_nan=False)
