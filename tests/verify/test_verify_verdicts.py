"""What makes `mlmix verify` fail: a violation (exit 1), a crash (status "error", exit 3, never a
counterexample nor a verdict, traceback under --debug) and a blind spot (exit 4): a weakened bound that
no instance catches, or an attaining instance looser than its recorded factor. For every result with a
recorded attaining instance, a constant looser by 10% makes the run fail."""

import json
import math

import pytest
from hypothesis import strategies as st

from mlmix.cli import main
from mlmix.verify.report import EXIT_CODES
from mlmix.verify.runner import load_theorems
from mlmix.verify.verdicts import (
    Attaining,
    Counterexample,
    Part,
    Theorem,
    compare,
    register,
    search,
    unregister,
    verdict,
)


def run_cli(capsys, *argv):
    status = main(["verify", *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


class _Sqrt(Theorem):
    """sqrt(x) <= x on integers >= 1, attained at x = 1."""

    id = "test.sqrt"
    paper = "facts"
    number = "test only"
    statement = "sqrt(x) <= x"
    factor = 1.0  # a looser constant: sqrt(x) <= factor x
    attaining = (Attaining("x = 1: sqrt(1) = 1", lambda: 1, looseness=1.0),)

    def strategy(self):
        return st.integers(1, 100)

    def check(self, instance):
        return compare(math.sqrt(instance), self.factor * instance, "<=")


class _Looser(_Sqrt):
    id = "test.looser-sqrt"
    factor = 1.1


class _Loose(_Sqrt):
    """log(x) + 0.1 <= 10 x: true and never within a factor 2: the weakened bound is missed."""

    id = "test.loose"
    attaining = ()

    def check(self, instance):
        return compare(math.log(instance) + 0.1, 10.0 * instance, "<=")


class _Crashing(_Sqrt):
    id = "test.crash"

    def check(self, instance):
        if instance > 5:
            raise ZeroDivisionError("boom")
        return super().check(instance)


class _KnownFalseCrashing(Theorem):
    """A known-false entry whose stored counterexample crashes: an error, not 'fails'."""

    id = "test.knownfalse.crash"
    paper = "facts"
    number = "test only"
    statement = "x <= 0"
    refuted_in = "nowhere"
    counterexamples = (Counterexample("x = 1", lambda: 1),)

    def strategy(self):
        return st.just(-1)

    def check(self, instance):
        if instance > 0:
            raise RuntimeError("broken check")
        return compare(instance, 0.0, "<=")


@pytest.fixture
def registered():
    load_theorems()
    classes = (_Sqrt, _Looser, _Loose, _Crashing, _KnownFalseCrashing)
    for cls in classes:
        register(cls)
    yield
    for cls in classes:
        unregister(cls.id)


def test_a_looser_constant_fails_the_run_with_its_own_exit_code(capsys, registered):
    assert run_cli(capsys, "--theorem", "test.sqrt", "--examples", "10")[0] == 0
    status, out, _ = run_cli(capsys, "--theorem", "test.looser-sqrt", "--examples", "10", "--json")
    assert status == EXIT_CODES["blind spot"] == 4
    (record,) = json.loads(out)["results"]
    assert record["status"] == "holds"  # true, but 10% looser than recorded
    assert "looser than recorded" in record["blind_spots"][0] and "1.1 > recorded 1" in record["blind_spots"][0]


def test_a_weakened_bound_that_is_never_violated_fails_the_run(capsys, registered):
    status, out, _ = run_cli(capsys, "--theorem", "test.loose", "--examples", "10")
    assert status == 4 and "BLIND SPOT: weakened bound not caught" in out


def test_a_crash_is_an_error_not_a_counterexample(capsys, registered):
    report = search(_Crashing(), examples=30, seed=0)
    assert report.status == "error" and report.counterexample is None
    assert report.errors[0]["error"] == "ZeroDivisionError: boom" and "Traceback" in report.errors[0]["traceback"]
    status, out, _ = run_cli(capsys, "--theorem", "test.crash", "--examples", "30")
    assert status == EXIT_CODES["error"] == 3
    assert "ERROR in search: ZeroDivisionError: boom" in out and "Traceback" not in out
    status, out, _ = main(["verify", "--debug", "--theorem", "test.crash", "--examples", "30"]), None, None
    assert status == 3 and "Traceback (most recent call last)" in capsys.readouterr().out


def test_a_crash_never_turns_a_known_false_entry_into_fails(registered):
    report = search(_KnownFalseCrashing(), examples=5, seed=0)
    assert report.status == "error" and not report.unexpected
    assert report.stored[0]["conclusion_fails"] is None and "broken check" in report.errors[0]["error"]


def test_violation_beats_error_beats_blind_spot(capsys, registered):
    assert run_cli(capsys, "--theorem", "test.crash", "--theorem", "test.loose", "--examples", "10")[0] == 3


def test_a_recorded_factor_is_checked_part_by_part():
    a = Attaining("two parts", lambda: None, looseness=(1.0, None, 2.0))
    v = verdict(Part("p0", 1.0, 1.0, "<="), Part("p1", 1.0, 1.0, "=="), Part("p2", 1.0, 2.5, "<="))
    assert a.looser(v) == ["p2: 2.5 > recorded 2"]
    with pytest.raises(ValueError):
        Attaining("below 1", lambda: None, looseness=0.9)


@pytest.mark.parametrize("theorem_id", [tid for tid, t in load_theorems().items()
                                        if isinstance(t, Theorem) and t.attaining and t.refuted_in is None])
def test_every_attaining_instance_catches_a_constant_looser_by_ten_percent(theorem_id):
    """Scale every recorded part's bound of each attaining instance by 1.1 in the loose direction: the
    re-check must call it looser than recorded (the floor is what a looser constant would miss)."""
    theorem = load_theorems()[theorem_id]
    for a in theorem.attaining:
        v = theorem.check(a.build())
        assert not a.looser(v), (a.description, a.looser(v))
        recorded = a.looseness + (None,) * len(v.parts)
        scale = {"<=": 1.1, ">=": 1 / 1.1}
        looser = verdict(*(Part(p.name, p.lhs, p.rhs * scale[p.relation] if r is not None else p.rhs, p.relation,
                                p.lhs_error, p.rhs_error, p.ratio) for p, r in zip(v.parts, recorded)))
        flagged = a.looser(looser)
        assert len(flagged) == sum(r is not None for r in a.looseness), (a.description, flagged)


#: Results given attaining instances so that a looser bound shows (glauber.prop4 states an identity R = 0 and has
#: no constant): a search whose check returns every bound 10% looser reports the blind spot.
ATTAINED_RESULTS = ("glauber.cor2", "glauber.thm8.mixing", "glauber.drift.band", "facts.paulin",
                         "pitfalls.thm1", "pitfalls.prop7", "pitfalls.thm4.pinsker", "pitfalls.prop4",
                         "pitfalls.prop5.repaired", "pitfalls.cor3")


@pytest.mark.parametrize("theorem_id", ATTAINED_RESULTS)
def test_a_search_with_a_constant_looser_by_ten_percent_reports_a_blind_spot(theorem_id, monkeypatch):
    theorem = load_theorems()[theorem_id]
    assert theorem.attaining
    exact = search(theorem, examples=2, shrink=False)
    assert exact.status == "holds" and not any("looser than recorded" in b for b in exact.blind_spots)
    check = type(theorem).check
    scale = {"<=": 1.1, ">=": 1 / 1.1, "==": 1.0}

    def looser(self, instance):
        v = check(self, instance)
        return verdict(*(Part(p.name, p.lhs, p.rhs * scale[p.relation], p.relation, p.lhs_error,
                              p.rhs_error * 1.1, p.ratio) for p in v.parts), conditions=v.conditions)

    monkeypatch.setattr(type(theorem), "check", looser)
    report = search(theorem, examples=2, shrink=False)
    assert not report.errors  # still true, only looser (a stored counterexample may stop failing: "fails")
    flagged = [b for b in report.blind_spots if "looser than recorded" in b]
    assert len(flagged) == len(theorem.attaining), report.blind_spots
