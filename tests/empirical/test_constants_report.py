"""model_constants (mlmix.empirical.model_constants.constants_report), the one entry point: its brackets contain
the enumerated suprema, its recipes (auto / enumerate / bounds) go where they say, Corollary 7's verdict follows
T*'s bracket, certify() in Python gets the same recipe as the command, and bad input is one ValueError."""

import pytest
from test_certify import Queried, enumerated

import mlmix
from mlmix.empirical.model_constants import ModelConstants, model_constants
from mlmix.empirical.model_constants.certify import certify
from mlmix.empirical.model_constants.constants_report import corollary7_verdict
from mlmix.theory.results import Result
from mlmix.theory.sources.conditionals import ScoreTable


def test_the_report_brackets_the_enumerated_suprema_with_both_verdicts():
    table = ScoreTable.random(3, 3, seed=4, scale=2.0, temperature=0.7)
    truth = enumerated(table)
    report = model_constants(table)
    assert isinstance(report, ModelConstants) and mlmix.model_constants is model_constants
    assert report.method == "enumeration" and report.passes == 0 and report.how == "auto"
    for name, value in truth.items():
        r = getattr(report, name)
        assert r.lower <= value <= r.upper
    t_star = truth["contraction_temperature"]
    assert report.corollary7["verdict"] == ("applies" if 0.7 > t_star else "does not apply")
    assert report.theorem5["verdict"] == ("applies" if truth["rho"] < 1 else "does not apply")
    d = report.as_dict()
    assert d["corollary7"] == report.corollary7 and d["theorem5_threshold"] == report.threshold


def test_the_recipes_go_where_they_say():
    table = ScoreTable.random(3, 3, seed=1, temperature=1.0)
    queried = Queried(table)
    truth = enumerated(table)
    bounds = model_constants(queried, how="bounds", budget=None)  # 27 queries would fit: not asked for
    assert bounds.method != "enumeration" and bounds.rho.upper == 2.0 and bounds.delta.upper is None
    assert "enumeration was not asked for" in bounds.threshold["why"]
    assert bounds.rho.lower <= truth["rho"]
    assert model_constants(queried, how="enumerate", max_passes=27).method == "enumeration"
    with pytest.raises(ValueError, match="enumeration needs 27 forward passes, over --max-passes 26"):
        model_constants(queried, how="enumerate", max_passes=26)
    capped = model_constants(queried, max_passes=26)
    assert capped.method != "enumeration" and capped.passes <= 26 and capped.max_passes == 26


def test_certify_in_python_gets_the_recipe_of_the_command():
    table = ScoreTable.random(3, 4, seed=2, temperature=1.0)
    a = certify(Queried(table), max_passes=50, seed=3)
    b = model_constants(Queried(table), max_passes=50, seed=3, budget=None).certified
    assert a.method == b.method and a.method.startswith("lower: worst-context search")
    assert (a.rho.lower, a.delta.lower, a.passes) == (b.rho.lower, b.delta.lower, b.passes)


def test_corollary_7_follows_the_bracket():
    t_star = Result.interval("T*", 2.0, 3.0, "m", "r")
    assert corollary7_verdict(t_star, 3.01)["verdict"] == "applies"
    assert corollary7_verdict(t_star, 2.0)["verdict"] == "does not apply"
    assert corollary7_verdict(t_star, 2.5)["verdict"] == "undecided"
    assert corollary7_verdict(Result.interval("T*", 2.0, None, "m", "r"), 99.0)["verdict"] == "undecided"


@pytest.mark.parametrize("kwargs, match", [({"how": "guess"}, "how must be one of"), ({"budget": "soon"}, "--budget"),
                                           ({"max_passes": -1}, "--max-passes")])
def test_bad_input_is_one_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        model_constants(ScoreTable.random(2, 3, seed=0), **kwargs)


def test_the_docs_snippet_runs_and_prints_what_it_says(capsys):
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "real-model.md").read_text(encoding="utf-8")
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", doc, flags=re.S) if "model_constants" in c]
    exec(compile(code, "docs/real-model.md", "exec"), {})  # noqa: S102 - our own documentation
    first, second = capsys.readouterr().out.splitlines()
    report = model_constants(ScoreTable.random(3, 4, seed=0, temperature=1.0), max_passes=2000)
    assert first.split()[2] == report.theorem5["verdict"].split()[0] and float(first.split()[0]) == report.rho.lower
    assert second.startswith("Theorem 5 provably applies at every T >=") and second.endswith("0 passes")
    assert float(second.split()[-4]) == report.threshold["temperature"]
