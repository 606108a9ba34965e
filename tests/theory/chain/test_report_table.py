"""The report's figures are declared once (:data:`mlmix.theory.results.REPORT`): the result names, the keys
of ``Chain.summary()``, the figures ``Chain.save`` keeps, the rows of ``mlmix exact``'s table and the exact
JSON schema's figures (:mod:`mlmix.commands.exact_schema`) follow it. A throw-away quantity registered with
one table line (and its Chain member) shows up in the Chain, the summary, the saved figures, ``mlmix exact``'s
table and JSON, and the generated schema, which then requires it, with no hand edit."""

import json
import re
from functools import cached_property
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from mlmix.cli import main
from mlmix.commands.exact_schema import exact_schema
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.results import NAMES, REPORT, ReportQuantity, Result, register, unregister

SCHEMA = Path(__file__).resolve().parents[3] / "docs" / "schema" / "exact.schema.json"


def _schema_figures(schema: dict) -> tuple[list[str], list[str]]:
    """The figures the exact schema ``schema`` lists as properties, and those a complete report requires."""
    return list(schema["$defs"]["report"]["properties"]), schema["$defs"]["complete_report"]["required"]


def _toy(chain: Chain) -> Result:
    """A throw-away figure: 1 - P(0, 0), the escape probability of state 0 (exact in floating point here)."""
    return Result.exact("toy escape", 1.0 - float(chain.to_dense()[0, 0]), "1 - P(0, 0)")


@pytest.fixture
def toy(monkeypatch):
    member = cached_property(_toy)
    member.__set_name__(Chain, "toy_escape")
    monkeypatch.setattr(Chain, "toy_escape", member, raising=False)
    register(ReportQuantity("toy_escape", "toy escape", "toy escape P(0, not 0)", "toy_escape", "gaps", True, True))
    yield
    unregister("toy_escape")


def test_the_table_is_the_one_list():
    assert [q.key for q in REPORT][:3] == ["stationary", "spectral_gap", "absolute_spectral_gap"]
    assert all(NAMES[q.key] == q.name for q in REPORT)
    assert all(hasattr(Chain, q.member) for q in REPORT)
    chain = Chain(np.array([[0.9, 0.1], [0.2, 0.8]]))
    summary = chain.summary(progress=False)
    assert [k for k in summary if k in NAMES] == [q.key for q in REPORT if q.phase is not None]
    published = json.loads(SCHEMA.read_text())
    assert _schema_figures(published) == ([k for k in summary if k in NAMES],) * 2
    assert published["$defs"]["report"]["properties"]["stationary"]["$ref"] == "#/$defs/vector_result"


def test_a_registered_quantity_is_everywhere(toy, capsys, tmp_path):
    P = np.array([[0.75, 0.25], [0.5, 0.5]])
    chain = Chain(P)
    assert chain.toy_escape.value == 0.25 and NAMES["toy_escape"] == "toy escape"
    summary = chain.summary(progress=False)
    assert summary["toy_escape"].value == 0.25
    keys = list(summary)
    assert keys.index("poincare_constant") < keys.index("toy_escape") < keys.index("conductance")  # its phase
    chain.save(tmp_path / "c.npz")
    assert Chain.load(tmp_path / "c.npz").computed(("toy_escape",))["toy_escape"].value == 0.25
    np.save(tmp_path / "P.npy", P)
    assert main(["exact", "--matrix", str(tmp_path / "P.npy"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"\n  toy escape P\(0, not 0\) +0\.25 ", text) and "toy_escape: 1 - P(0, 0)" in text
    assert main(["exact", "--matrix", str(tmp_path / "P.npy"), "--no-progress", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["toy_escape"]["value"] == 0.25
    # the schema derives it: listed and required, the published file to be regenerated (no hand edit)
    published = json.loads(SCHEMA.read_text())
    schema = exact_schema(published)
    listed, required = _schema_figures(schema)
    assert listed[-1] == required[-1] == "toy_escape" and "toy_escape" not in _schema_figures(published)[0]
    assert schema["$defs"]["report"]["properties"]["toy_escape"]["$ref"] == "#/$defs/result"
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(doc)
    assert not validator.is_valid({k: v for k, v in doc.items() if k != "toy_escape"})
    assert not validator.is_valid({**doc, "toy_escape": {**doc["toy_escape"], "method": None}})
    assert jsonschema.Draft202012Validator(published).is_valid({k: v for k, v in doc.items() if k != "toy_escape"})


def test_a_name_is_declared_once(toy):
    with pytest.raises(ValueError, match="already declared"):
        register(ReportQuantity("toy_escape", "x", None, "toy_escape", None, False, False))


def test_a_figure_names_a_schema_definition():
    with pytest.raises(ValueError, match="schema must be 'result' or 'vector_result', got 'number'"):
        ReportQuantity("toy_escape", "x", None, "toy_escape", None, False, False, "number")
