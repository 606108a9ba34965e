"""Faults in a user's theorems: a NaN side, a check that exits or skips, a module that does not import,
a crash on a matrix instance. Each is the check's *error* (exit 3) reported once with its instance, or
a one-line bad input (exit 2); only Ctrl-C stops the run (exit 130); never a verdict, never a pass.
Small user modules are written to tmp_path and run through ``mlmix verify --module`` in process."""

import json
import math
import re
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlmix.cli import main
from mlmix.errors import InvalidResultError
from mlmix.theorem import assert_holds, compare, inequality
from mlmix.theory.results import Result
from mlmix.verify import user
from mlmix.verify.report import dumps_compact, format_table
from mlmix.verify.verdicts import RELATIONS, Part, UndefinedSide, describe_value, search, verdict

HEADER = """\
import math
import sys

import numpy as np
import pytest
from hypothesis import strategies as st

from mlmix.theorem import inequality, theorem

MATRICES = st.integers(2, 4).map(lambda n: np.arange(n * n, dtype=float).reshape(n, n) / 8)
"""


@pytest.fixture
def module(tmp_path, monkeypatch):
    """``module(name, body)`` writes tmp_path/name.py (HEADER + body); the test runs in tmp_path; the
    module and the theorems it registered are gone afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    names = []

    def write(name, body, tail=""):
        (tmp_path / f"{name}.py").write_text(HEADER + textwrap.dedent(body) + tail)
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)
        for key in [k for k, t in user.USER.items() if type(t).__module__ == name]:
            del user.USER[key]


def verify(capsys, *argv):
    status = main(["verify", "--no-progress", "--examples", "10", *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


# ----------------------------------------------------------------------------------------------
# 1. NaN is never a verdict


@given(st.sampled_from(RELATIONS), st.floats(allow_nan=False, allow_infinity=False), st.booleans())
def test_a_nan_side_is_an_error_for_every_relation_and_finite_other_side(relation, other, nan_left):
    lhs, rhs = (math.nan, other) if nan_left else (other, math.nan)
    side = "lhs" if nan_left else "rhs"
    for build in (lambda: Part("p", lhs, rhs, relation), lambda: compare(lhs, rhs, relation, name="p"),
                  lambda: inequality(lhs, relation, rhs, name="p")):
        with pytest.raises(UndefinedSide, match=f"side {side} of 'p' .* evaluated to NaN"):
            build()
    with pytest.raises(InvalidResultError, match="NaN"):  # nor can a NaN reach a verdict inside a Result
        Result.exact("g", math.nan, "test")
    with pytest.raises(UndefinedSide, match="error bound of side lhs"):
        Part("p", other, other, relation, math.nan, 0.0)


class _NaNTheorem(user.UserTheorem):
    id = "test.faults.nan"
    statement = "x relation 1 (the check's side is NaN from x = 3 on)"
    relation = "<="

    def strategy(self):
        return st.integers(0, 6)

    def check(self, x):
        return verdict(inequality(math.nan if x >= 3 else 1.0, self.relation, 1.0))


@pytest.mark.parametrize("relation", RELATIONS)
def test_a_nan_side_makes_the_search_report_an_error_never_holds_or_fails(relation):
    theorem = type("T", (_NaNTheorem,), {"relation": relation})()
    report = search(theorem, examples=20, seed=0)
    assert report.status == "error" and report.counterexample is None
    (error,) = report.errors  # one record, however many instances gave NaN
    assert error["error"].startswith("UndefinedSide: side lhs of 'main'") and int(error["instance"]) >= 3


def test_a_nan_side_in_a_user_module_exits_3_naming_the_check_and_the_instance_once(module, capsys):
    name = module("nanmod", """
        @theorem(statement="x <= 10 (NaN from x = 2 on)", strategy=st.integers(0, 5))
        def nan_side(x):
            return inequality(float("nan") if x >= 2 else x, "<=", 10.0)
        """)
    status, out, _ = verify(capsys, "--module", name)
    assert status == 3, out
    assert "FAILS" not in out and "counterexample" not in out
    line = "nanmod.nan_side (user theorem) ERROR in search: UndefinedSide: side lhs of 'main' (<=) evaluated to NaN"
    assert out.count(line) == 1 and out.count("evaluated to NaN") == 1
    assert len(re.findall(r"^  (first )?instance: [2-5]$", out, re.M)) == 1  # an instance that gave NaN, once


def test_an_infinite_side_is_a_value_not_an_infinite_error():
    assert not inequality(math.inf, "<=", 1.0).holds()  # an infinite quantity refutes a finite bound
    assert not compare(math.inf, 1.0, "<=").holds
    assert inequality(1.0, "<=", math.inf).holds() and inequality(-math.inf, "<=", -1e300).holds()
    equal = Part("e", math.inf, math.inf, "==")
    assert equal.holds() and equal.slack == 0.0 and equal.tightness is None and not equal.resolved
    assert compare(math.inf, 2.0, ">=").tightness is None  # no looseness factor against infinity


# ----------------------------------------------------------------------------------------------
# 2. Exits, skips and interrupts inside a check; modules that do not import


@pytest.mark.parametrize("body, error", [
    ("sys.exit(0)", "SystemExit: 0"),  # before: exit 0 and no output, a CI job passed
    ('raise SystemExit("bye")', "SystemExit: bye"),
    ('pytest.skip("not today")', "Skipped: not today"),
    ('pytest.fail("no")', "Failed: no"),
    ("raise GeneratorExit", "GeneratorExit"),
])
def test_whatever_a_check_raises_is_its_error_exit_3(module, capsys, body, error):
    name = module("exits", f"""
        @theorem(statement="raises", strategy=st.integers(0, 5))
        def raises(x):
            {body}
        """)
    status, out, err = verify(capsys, "--module", name)
    assert status == 3, out + err
    assert out.count(f"exits.raises (user theorem) ERROR in search: {error} (") == 1
    assert "Traceback" not in out + err


def test_keyboard_interrupt_in_a_check_stops_the_run_with_130_and_one_line(module, capsys):
    name = module("interrupts", """
        @theorem(statement="ctrl-c", strategy=st.integers(0, 5))
        def ctrl_c(x):
            raise KeyboardInterrupt
        """)
    status, out, err = verify(capsys, "--module", name)
    assert status == 130 and out == "" and err == "mlmix verify: interrupted\n"


@pytest.mark.parametrize("body, error", [
    ('raise RuntimeError("broken module")', "RuntimeError: broken module (at "),
    ("def f(:\n", "SyntaxError: "),
    ('sys.exit("bye")', "SystemExit: bye (at "),
    ('@theorem(statement="no strategy")\ndef f(x):\n    pass\n', "TypeError: "),
])
def test_a_module_that_fails_to_import_is_one_line_exit_2(module, capsys, body, error):
    name = module("broken", """
        @theorem(statement="registered before the failure", strategy=st.integers(0, 5))
        def first(x):
            return inequality(x, "<=", 5)
        """, body)
    status, out, err = verify(capsys, "--module", name)
    assert status == 2 and out == "", out
    assert err.count("\n") == 1 and err.startswith(f"mlmix verify: error: cannot import module 'broken': {error}")
    assert not any(type(t).__module__ == "broken" for t in user.USER.values())  # nothing half-registered


def test_json_names_the_module_and_its_file(module, capsys, tmp_path):
    name = module("jsonmod", """
        @theorem(statement="x <= 2x", strategy=st.integers(0, 5))
        def double(x):
            return inequality(x, "<=", 2 * x)
        """)
    status, out, _ = verify(capsys, "--module", name, "--json")
    assert status in (0, 4)  # holds (the weakened bound is caught at x = 0 only if drawn)
    doc = json.loads(out)
    assert doc["inputs"]["modules"] == [{"name": "jsonmod", "file": str(tmp_path / "jsonmod.py")}]
    assert doc["mlmix_version"] and doc["schema"].startswith("mlmix.verify/")


def test_assert_holds_turns_a_skip_in_a_check_into_a_failure(module):
    module("skipper", """
        @theorem(statement="skips", strategy=st.integers(0, 5))
        def skips(x):
            pytest.skip("a skip inside a check must not pass the test")
        """)
    from skipper import skips  # noqa: PLC0415 - the module is written by the test

    try:
        assert_holds(skips, examples=5)
    except AssertionError as err:
        message = str(err)
    except BaseException as err:  # a skip (or anything else) escaping would let the user's test pass
        pytest.fail(f"escaped assert_holds: {type(err).__name__}: {err}")
    else:
        pytest.fail("assert_holds passed")
    assert "skipper.skips: the check raised an error" in message
    assert message.count("Skipped: a skip inside") == 1 and "instance: " in message  # once, traceback included
    assert "Traceback" in message and "--debug" not in message  # no --debug under pytest: the traceback itself


# ----------------------------------------------------------------------------------------------
# 3. Crashes once with their instance; compact counterexamples


def test_a_crash_is_printed_once_with_its_instance_one_row_per_line(module, capsys):
    name = module("crashes", """
        @theorem(statement="crashes from n = 3 on", strategy=MATRICES)
        def crash(m):
            if m.shape[0] >= 3:
                raise RuntimeError("boom on a big matrix")
            return inequality(m.sum(), ">=", 0.0)
        """)
    status, out, _ = verify(capsys, "--module", name, "--examples", "20")
    assert status == 3
    assert out.count("RuntimeError: boom on a big matrix") == 1
    rows = {line.strip().rstrip(",") for line in out.splitlines()}
    first_rows = {"[0.0, 0.125, 0.25]", "[0.0, 0.125, 0.25, 0.375]"}  # n = 3 or 4: one row per line
    assert rows & first_rows and out.count("instance: [") == 1


def test_counterexamples_are_compact_in_json_and_in_pytest_messages(module, capsys):
    name = module("matrices", """
        @theorem(statement="sum of the matrix <= 1 (false from n = 3)", strategy=MATRICES)
        def small_sum(m):
            return inequality(m.sum(), "<=", 1.0)
        """)
    status, out, _ = verify(capsys, "--module", name, "--json")
    assert status == 1
    (record,) = json.loads(out)["results"]
    matrix = record["counterexample"]["instance"]
    assert isinstance(matrix, list) and len(matrix) == 3 and all(len(row) == 3 for row in matrix)
    assert "[0.0, 0.125, 0.25]" in out  # one row per line, not one number per line
    assert not re.search(r"^\s*-?[0-9][0-9.e+-]*,?$", out, re.M)  # never one number per line
    from matrices import small_sum  # noqa: PLC0415 - the module is written by the test

    with pytest.raises(AssertionError) as err:
        assert_holds(small_sum, examples=10)
    message = str(err.value)
    assert "[0.0, 0.125, 0.25]," in message and not re.search(r"^\s*-?[0-9][0-9.e+-]*,?$", message, re.M)


def test_compact_json_keeps_rows_on_one_line_and_is_strict_json():
    value = {"instance": np.arange(6.0).reshape(2, 3), "lhs": math.inf, "parts": [{"name": "main", "lhs": 1.0}],
             "nested": {"a": [1, 2], "b": {"c": [[1, 2], [3, 4]]}}}
    text = dumps_compact(value)
    assert json.loads(text) == {"instance": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], "lhs": None,
                                "parts": [{"name": "main", "lhs": 1.0}], "nested": {"a": [1, 2],
                                                                                     "b": {"c": [[1, 2], [3, 4]]}}}
    assert " [0.0, 1.0, 2.0],\n" in text and '{"name": "main", "lhs": 1.0}' in text
    assert describe_value(np.eye(2)) == [[1.0, 0.0], [0.0, 1.0]]
    assert describe_value((np.eye(1), 3)) == [[[1.0]], "3"]
    assert "\n" not in describe_value(object.__new__(type("Multi", (), {"__repr__": lambda self: "a\n  b"})))


def test_format_table_shows_a_repeated_error_once_with_its_count():
    class Crash(user.UserTheorem):
        id = "test.faults.crash"
        statement = "crashes on every instance"

        def strategy(self):
            return st.integers(0, 9)

        def check(self, x):
            raise ZeroDivisionError("boom")

    report = search(Crash(), examples=20, seed=0)
    (error,) = report.errors
    assert error["more"] >= 1
    text = format_table([report])
    assert text.count("ZeroDivisionError: boom") == 1 and f"on {error['more'] + 1} instances" in text
