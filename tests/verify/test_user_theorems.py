"""User theorems (mlmix.theorem), the certified assertions (mlmix.testing) and the pytest plugin: a
sample user package (tests/user_package, never imported by mlmix) is run through pytest and through
``mlmix verify --module`` in subprocesses, as in a user's own repository."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import strategies as st

from mlmix.cli import main
from mlmix.testing import UndecidedError, assert_at_least, assert_at_most, assert_close, enclosure
from mlmix.theorem import Part, check, compare, inequality, register, theorem
from mlmix.theory.results import Result
from mlmix.verify import user
from mlmix.verify.report import report_record

PACKAGE = Path(__file__).parent / "user_package"


@pytest.fixture
def user_repo(tmp_path):
    """A copy of the sample package in a fresh folder: no mlmix conftest, no mlmix pyproject."""
    shutil.copytree(PACKAGE, tmp_path / "repo", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "repo"


def _env():
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("MLMIX_THOROUGH", None)
    return env


def test_pytest_plugin_reports_the_false_theorem_with_a_counterexample(user_repo):
    out = subprocess.run([sys.executable, "-m", "pytest", "check_mybounds.py", "-p", "no:cacheprovider", "-q",
                          "-rN", "--tb=short"], cwd=user_repo, capture_output=True, text=True, env=_env(), timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "1 failed, 2 passed" in text
    assert "check_mybounds.py:15: in test_gap_without_n_is_refuted" in text
    assert "mybounds.bounds.gap_without_n: a counterexample was found" in text
    assert '"mode": "product-cold"' in text  # the shrunk instance: independent sites, where gap = 1/n
    assert "mlmix: 2 theorem check(s) (default budget): 1 holds, 1 fails; weakened bound caught for 1 of 1" in text


def test_verify_module_runs_user_theorems_with_the_same_report(user_repo):
    out = subprocess.run([sys.executable, "-m", "mlmix.cli", "verify", "--module", "mybounds.bounds", "--json",
                          "--examples", "20"], cwd=user_repo, capture_output=True, text=True, env=_env(), timeout=300)
    assert out.returncode == 1, out.stderr  # a false theorem fails the run (CI)
    records = {r["id"]: r for r in json.loads(out.stdout)["results"]}
    true, false = records["mybounds.bounds.gap_from_contraction"], records["mybounds.bounds.gap_without_n"]
    assert true["status"] == "holds" and true["weakened"] == "caught" and true["nontrivial"] >= 10
    assert true["tightness"]["best"] == pytest.approx(1.0, rel=1e-9)  # attained by independent sites
    assert false["status"] == "fails"
    ce = false["counterexample"]
    assert ce["instance"]["length"] == 2 and ce["lhs"] < ce["rhs"]  # shrunk to two sites: gap 1/2 < 1 - rho = 1
    assert ce["lhs"] == pytest.approx(0.5, rel=1e-9) and ce["rhs"] == 1.0
    unchecked = records["mybounds.bounds.large_n"]
    assert unchecked["status"] == "not checkable" and "asymptotic" in unchecked["reason"]


def test_verify_module_errors_are_one_line(user_repo, monkeypatch, capsys):
    monkeypatch.chdir(user_repo)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the current directory first
    assert main(["verify", "--module", "no_such_module"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot import module 'no_such_module'" in err
    assert main(["verify", "--module", "mybounds"]) == 2  # the package itself registers nothing
    assert "registers no user theorem" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# In process: the decorator, the base class, inequality with certified sides


def test_decorator_and_weakening_in_process():
    @theorem(id="test.user.square", statement="x^2 >= 2x - 1 for x in [0, 3]",
             strategy=st.integers(0, 30).map(lambda k: k / 10))
    def square(x):
        return compare(x * x, 2 * x - 1, ">=", rtol=1e-12, atol=1e-12)

    try:
        report = check(square, examples=30)
        assert report.status == "holds" and report.weakened == "caught"  # equality at x = 1: 2 (2x-1) > x^2 there
        assert report.paper == "user" and report.number == "user theorem"
        record = report_record(report)
        assert record["holds"] is True
        with pytest.raises(ValueError, match="registered twice"):
            @theorem(id="test.user.square", statement="again", strategy=st.just(1.0))
            def other(x):
                return compare(x, x, "==")
    finally:
        user.USER.pop("test.user.square", None)


def test_base_class_form_and_bad_returns():
    @register
    class Sqrt(user.UserTheorem):
        id = "test.user.sqrt"
        statement = "sqrt(x) <= x / 2 for x >= 1 (false below 4)"

        def strategy(self):
            return st.integers(1, 100)

        def check(self, x):
            return inequality(math.sqrt(x), "<=", x / 2)

    try:
        report = check(user.USER["test.user.sqrt"], examples=50)
        assert report.status == "fails"
        assert report.counterexample["instance"] in ("1", "2", "3")  # shrunk to the smallest integers
    finally:
        user.USER.pop("test.user.sqrt", None)
    with pytest.raises(ValueError, match="statement"):
        @register
        class NoStatement(user.UserTheorem):
            id = "test.user.none"
    with pytest.raises(TypeError, match="Verdict or Part"):
        user._as_verdict(1.0)


def test_inequality_uses_the_certified_interval():
    exact = Result.exact("g", 0.5, "closed form")
    assert inequality(exact, ">=", 0.5).holds() and not inequality(exact, ">=", 0.5).holds(0.5)
    interval = Result.interval("g", 0.4, 0.6, "bounds", "not resolved")
    p = inequality(interval, ">=", 0.55)  # straddles: cannot refute
    assert p.holds() and p.lhs == pytest.approx(0.5) and p.lhs_error == pytest.approx(0.1)
    assert not inequality(interval, ">=", 0.61).holds()  # the whole interval is below: refuted
    unknown = Result.missing("g", "none", "too large")
    assert inequality(unknown, ">=", 1e9).holds()  # an unknown side never produces a counterexample


# ----------------------------------------------------------------------------------------------
# mlmix.testing: pass, fail, undecided


def test_certified_assertions_pass_fail_and_undecided():
    r = Result.checked("gap", 1e-12, 1e-20, "test")  # [1e-12 - 1e-20, 1e-12 + 1e-20]
    assert_at_least(r, 0.9e-12)
    assert_at_most(r, 1.1e-12)
    assert_close(r, 1e-12, rtol=1e-6)
    with pytest.raises(AssertionError, match="below the bound") as err:
        assert_at_least(r, 2e-12)
    assert not isinstance(err.value, UndecidedError)
    with pytest.raises(UndecidedError, match="UNDECIDED"):
        assert_at_least(r, 1e-12)  # the bound lies inside the enclosure: roundoff cannot decide
    with pytest.raises(UndecidedError):
        assert_at_most(Result.interval("t", 3.0, 9.0, "bounds", "not resolved"), 5.0)
    with pytest.raises(AssertionError, match="above the bound"):
        assert_at_most(Result.interval("t", 6.0, 9.0, "bounds", "not resolved"), 5.0)
    with pytest.raises(AssertionError, match="differs"):
        assert_close(r, 1.1e-12, rtol=1e-3)
    with pytest.raises(UndecidedError):
        assert_close(Result.missing("t", "none", "too large"), 1.0)
    assert enclosure(Result.missing("t", "none", "x")) == (-math.inf, math.inf)
    with pytest.raises(TypeError):
        enclosure("1.0")


def test_plugin_fixtures_give_closed_forms(metastable_chain, exact_chain, ising_source, score_table_source):
    assert_close(metastable_chain.spectral_gap, 3e-12, rtol=1e-9)
    chain = exact_chain(score_table_source)
    assert chain.n_states == 81 and not chain.is_reversible
    assert_at_least(exact_chain(ising_source).spectral_gap, 1e-3)


def test_thorough_budget_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("MLMIX_THOROUGH", "1")
    assert user._budget() == (500, True)
    monkeypatch.delenv("MLMIX_THOROUGH")
    assert user._budget() == (100, False)


def test_part_is_reexported():
    assert Part is user.Part


def test_thorough_option_raises_the_budgets(tmp_path):
    (tmp_path / "test_budget.py").write_text(
        "from hypothesis import settings\n"
        "from mlmix import pytest_plugin\n"
        "from mlmix.verify import user\n\n"
        "def test_budget():\n"
        "    assert pytest_plugin.THOROUGH and user._budget() == (500, True)\n"
        "    assert settings.default.max_examples >= 500\n")
    args = [sys.executable, "-m", "pytest", "test_budget.py", "-p", "no:cacheprovider", "-q"]
    thorough = subprocess.run(args + ["--mlmix-thorough"], cwd=tmp_path, capture_output=True, text=True, env=_env(),
                              timeout=300)
    assert thorough.returncode == 0, thorough.stdout
    plain = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=300)
    assert plain.returncode == 1 and "test_budget - assert (False)" in plain.stdout  # default budgets without it
