"""Faults of the command line: a bug is an internal error (exit 3), not bad input (exit 2); a refused
command writes nothing; an option the chosen sampler would ignore is refused; the Python API refuses a
fractional or boolean scan order and a log_probs table of the wrong shape; progress never writes to
standard output and a failing standard error never costs the result."""

import json
import os
import subprocess
import sys
import time

import hypothesis.strategies as st
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings

import mlmix.commands.exact as exact_cmd
from mlmix.cli import main, refused_input
from mlmix.commands.decode import sampler_options_table
from mlmix.commands.source_options import kernel_options_table
from mlmix.errors import InputError, InputTypeError, InputValueError, MemoryLimitError, ReducibleChainError
from mlmix.progress import Progress
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels import KERNELS
from mlmix.theory.kernels.decoders import SAMPLERS, check_schedule, decoder_law, partial_log_probs
from mlmix.theory.kernels.scan_and_mh import check_order, systematic_kernel
from mlmix.theory.local.constants import paper_constants_seconds
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_int, check_sites

# ---------------------------------------------------------------------------------------- 1. exit codes


def _raise_type_error(args):
    raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")


def _broadcast(args):
    return np.ones(2) + np.ones(3)  # numpy's own ValueError: a bug, not the user's input


@pytest.mark.parametrize("bug, text", [
    (_raise_type_error, "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'"),
    (_broadcast, "ValueError: operands could not be broadcast together with shapes (2,) (3,)"),
])
def test_a_bug_is_an_internal_error_not_bad_input(bug, text, monkeypatch, capsys):
    monkeypatch.setattr(exact_cmd, "build_chain", bug)
    assert main(["exact", "--graph", "cycle:3"]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"mlmix exact: internal error: {text} (run with --debug for the traceback)\n"


def test_debug_shows_the_bug_itself(monkeypatch):
    monkeypatch.setattr(exact_cmd, "build_chain", _raise_type_error)
    with pytest.raises(TypeError, match="unsupported operand"):
        main(["exact", "--debug", "--graph", "cycle:3"])


@pytest.mark.parametrize("argv, text", [
    (["exact", "--eps", "2"], "--eps must be < 1"),
    (["exact", "--graph", "cycle:x"], "bad graph spec"),
    (["exact", "--k", "0", "--kernel", "k-gibbs"], "--k must be >= 1"),
    (["exact", "--kernel", "systematic", "--order", "0 1 2.5"], "order must be integers"),
    (["exact", "--kernel", "systematic", "--order", "0 1 7", "--graph", "cycle:3"], "site 7 is outside"),
    (["exact", "--model", "scores", "--vocab", "2", "--length", "3", "--basin", "0 0"], "basin pattern"),
    (["exact", "--matrix", "no-such-file.npz"], "does not exist"),
    (["exact", "--graph", "cycle:3", "--max-memory", "1"], "memory limit"),
    (["decode", "--sampler", "schedule", "--schedule", "0 1 | 1 2 3"], "a schedule is"),
])
def test_bad_input_is_still_exit_2(argv, text, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert text in err and err.count("\n") == 1 and "internal error" not in err


def test_validation_raises_input_errors_that_keep_the_python_contract():
    with pytest.raises(InputTypeError) as kind:
        check_int(1.5, "k")
    with pytest.raises(InputValueError) as value:
        check_int(-1, "k", minimum=0)
    assert isinstance(kind.value, TypeError) and isinstance(value.value, ValueError)
    assert issubclass(MemoryLimitError, InputError) and issubclass(MemoryLimitError, ValueError)
    assert issubclass(ReducibleChainError, InputError) and issubclass(ReducibleChainError, ValueError)
    assert refused_input(kind.value) and refused_input(FileNotFoundError("x")) and not refused_input(TypeError("x"))


# ---------------------------------------------------------------------------------------- 2. nothing written


@pytest.mark.parametrize("argv", [
    ["exact", "--model", "scores", "--vocab", "2", "--length", "3", "--save-scores", "{d}/s.npz", "--basin", "0 0"],
    ["exact", "--graph", "cycle:3", "--save-matrix", "{d}/m.npz", "--save-scores", "{d}/s.txt"],
    ["exact", "--graph", "cycle:3", "--save-matrix", "{d}/m.npz", "--save-scores", "{d}/folder"],
    ["exact", "--graph", "cycle:3", "--save-matrix", "{d}/m.npz", "--kernel", "k-gibbs", "--k", "9"],
    ["decode", "--save-scores", "{d}/s.npz", "--sampler", "left-to-right", "--order", "0 0"],
    ["decode", "--save-scores", "{d}/s.npz", "--sampler", "schedule"],
])
def test_a_refused_command_writes_nothing(argv, tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    assert main([a.replace("{d}", str(tmp_path)) for a in argv]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]
    assert capsys.readouterr().err.count("\n") == 1


def test_the_outputs_are_written_when_nothing_is_refused(tmp_path, capsys):
    assert main(["exact", "--graph", "cycle:3", "--save-matrix", str(tmp_path / "m.npz"),
                 "--save-scores", str(tmp_path / "s.npz"), "--json"]) == 0
    assert main(["decode", "--graph", "cycle:3", "--save-scores", str(tmp_path / "d.npz"), "--json"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz", "m.npz", "s.npz"]


# ---------------------------------------------------------------------------------------- 3. ignored options


def test_one_table_of_options_per_command():
    assert set(kernel_options_table()) == set(KERNELS) and set(sampler_options_table()) == set(SAMPLERS)


def _ignoring(table):
    options = sorted({o for opts in table.values() for o in opts})
    return [(s, o) for s in table for o in options if o not in table[s]]


_VALUES = {"k": "2", "order": "0 1 2", "energy": "pll", "basin": "* * *", "threshold": "0.5", "schedule": "0 | 1 2",
           "gamma": "0.5"}


@pytest.mark.parametrize("kernel, option", _ignoring(kernel_options_table()))
def test_exact_refuses_an_option_its_kernel_ignores(kernel, option, capsys):
    flag = "--" + option.replace("_", "-")
    assert main(["exact", "--graph", "cycle:3", "--kernel", kernel, flag, _VALUES[option]]) == 2
    err = capsys.readouterr().err
    assert f"{flag} is not an option of --kernel {kernel}" in err and err.count("\n") == 1


@pytest.mark.parametrize("sampler, option", _ignoring(sampler_options_table()))
def test_decode_refuses_an_option_its_sampler_ignores(sampler, option, capsys):
    flag = "--" + option.replace("_", "-")
    assert main(["decode", "--graph", "cycle:3", "--sampler", sampler, flag, _VALUES[option]]) == 2
    err = capsys.readouterr().err
    assert f"{flag} is not an option of --sampler {sampler}" in err and err.count("\n") == 1


def test_options_a_sampler_takes_still_work(capsys):
    assert main(["exact", "--graph", "cycle:3", "--kernel", "k-gibbs", "--k", "2", "--json"]) == 0
    assert "2-Gibbs" in json.loads(capsys.readouterr().out)["chain"]
    assert main(["decode", "--graph", "cycle:3", "--sampler", "threshold", "--json"]) == 0  # default tau 0.9
    assert "tau = 0.9" in json.loads(capsys.readouterr().out)["sampler"]
    assert main(["decode", "--graph", "cycle:3", "--sampler", "confidence", "--k", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sampler"] == "confidence, k = 3"


def test_basin_of_a_truncated_source_is_refused(capsys):
    assert main(["exact", "--graph", "cycle:3", "--top-k", "1", "--basin", "* * *"]) == 2
    assert "truncated" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------- 4. Python API


@pytest.fixture(scope="module")
def scores():
    return ScoreTable.random(2, 3, seed=0)


@pytest.mark.parametrize("order, error", [([0, 1, 2.7], TypeError), ([True, 0, 2], TypeError),
                                          ([0, 1, np.float64(2.0)], TypeError), ([0, 1, 3], ValueError),
                                          ([0, 1, -1], ValueError), (3, TypeError), ([0, 1], ValueError)])
def test_systematic_order_must_be_integer_sites(scores, order, error):
    with pytest.raises(error) as err:
        systematic_kernel(scores, order)
    assert "\n" not in str(err.value)


@given(st.lists(st.one_of(st.integers(-2, 4), st.floats(allow_nan=False), st.booleans()), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_check_sites_takes_exactly_integers_in_range(values):
    ok = all(type(v) is int and 0 <= v < 3 for v in values)
    if ok:
        assert check_sites(values, 3, "order") == values
    else:
        with pytest.raises((TypeError, ValueError)):
            check_sites(values, 3, "order")


def test_an_integer_order_is_taken_as_before(scores):
    assert check_order(scores.space, np.array([2, 1, 0])) == [2, 1, 0] == check_order(scores.space, "2, 1 0")
    assert check_schedule(scores.space, [np.array([0, 1]), (2,)]) == [(0, 1), (2,)]
    with pytest.raises(TypeError, match="2.0"):
        check_schedule(scores.space, [[0, 1], [2.0]])


def test_decoder_law_refuses_log_probs_of_the_wrong_shape():
    table = PartialScoreTable.random(2, 3, seed=0)
    lp = partial_log_probs(table)
    assert decoder_law(table, "any-order", log_probs=lp).law.sum() == pytest.approx(1, abs=1e-12)
    for bad in (np.concatenate([lp, lp]), lp[:, :2], lp[..., None]):
        with pytest.raises(ValueError, match=r"shape \(27, 3, 2\).*got " + repr(bad.shape).replace("(", r"\(")
                           .replace(")", r"\)")):
            decoder_law(table, "any-order", log_probs=bad)


# ---------------------------------------------------------------------------------------- 5. progress


_CMD = [sys.executable, "-m", "mlmix", "exact", "--graph", "cycle:3", "--json"]
_REDIRECTS = {"closed": "2>&-", "full": "2>/dev/full", "pipe": ""}


@pytest.fixture(scope="module")
def runs() -> dict[str, subprocess.CompletedProcess]:
    """``mlmix exact ... --json`` through sh, standard error closed (Python's sys.stderr is None:
    print would fall back to stdout), on a full device (every write fails) or a pipe; every progress
    line on (threshold 0). The three run side by side."""
    env = dict(os.environ, MLMIX_PROGRESS_THRESHOLD="0", OMP_NUM_THREADS="1")
    command = " ".join(f"'{a}'" for a in _CMD)
    procs = {name: subprocess.Popen(["sh", "-c", f"{command} {redirect}"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env)
             for name, redirect in _REDIRECTS.items()}
    return {name: subprocess.CompletedProcess(p.args, p.wait(120), *p.communicate(timeout=120))
            for name, p in procs.items()}


@pytest.mark.parametrize("name", ["closed", "full"])
def test_progress_never_costs_the_result(runs, name):
    """The JSON on stdout is intact and the exit status 0."""
    done = runs[name]
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_states"] == 8 and "mlmix:" not in done.stdout


def test_progress_to_a_pipe_is_plain_lines_on_stderr_only(runs):
    done = runs["pipe"]
    assert done.returncode == 0
    assert json.loads(done.stdout)["n_states"] == 8
    # a start-up that outlasts 2 s on a loaded machine says so (mlmix.progress.if_late): not a phase line
    lines = [line for line in done.stderr.splitlines() if "(still running after " not in line]
    assert len(lines) == 8 and all(line.startswith("mlmix: analysis of chain on 8 states") for line in lines[:6])
    assert lines[6:] == ["mlmix: paper G constants of chain on 8 states: 8 states, n = 3, about < 1 s expected "
                         f"(paper G constants < 1 s; {lines[6].split('; ')[-1]}",
                         "mlmix: paper G constants of chain on 8 states: paper G constants (expected < 1 s)"]
    assert "\r" not in done.stderr


def test_an_estimate_short_of_the_truth_is_announced_late(monkeypatch, capsys):
    """A computation expected below the threshold that runs past it says so once, names the phase
    running then and every later phase (one line each); one that ends in time stays quiet."""
    monkeypatch.setattr("mlmix.progress.late_after", lambda: 0.05)
    monkeypatch.setattr("mlmix.progress._interactive", lambda stream: False)
    with Progress("job", [("one", 0.0), ("two", 0.0)], cost="4 states") as bar:
        with bar.phase("one"):
            time.sleep(0.5)
        with bar.phase("two"):
            pass
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["mlmix: job: 4 states, still running after < 1 s (about < 1 s expected)",
                     "mlmix: job: one (expected < 1 s)", "mlmix: job: two (expected < 1 s)"]
    with Progress("quick", [("one", 0.0)]) as bar:
        with bar.phase("one"):
            pass
    time.sleep(0.1)
    assert capsys.readouterr().err == ""


def test_paper_constants_are_announced_by_their_cost():
    """3,000 N n^2 |V|^2 operations (0 above CONSTANTS_LIMIT, where they are not computed)."""
    assert paper_constants_seconds(StateSpace(2, 12)) / paper_constants_seconds(StateSpace(2, 10)) == pytest.approx(4 * 1.44)
    assert paper_constants_seconds(StateSpace(2, 19)) == 0.0


def test_the_sparse_cost_counts_products_timed_on_the_chain(monkeypatch):
    """The sparse estimate is in units of one measured product with P (not the dense flop rate, 10-15
    times too fast for a memory-bound sparse product): scaling the product time scales the estimate."""
    chain = Chain.from_source(IsingModel(nx.cycle_graph(10), beta=0.5), representation="sparse")
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", object()))  # no start-up term
    for product in (1e-3, 2e-3):
        monkeypatch.setattr("mlmix.theory.chain.chain_summary.product_seconds", lambda P, t=product: t)
        phases = dict(chain._summary_cost(2048)[0])
        assert sum(phases.values()) == pytest.approx(1650 * product)


def test_a_broken_result_invariant_is_an_internal_error(monkeypatch, capsys):
    """A Result built with lower > upper is a bug of mlmix (exit 3), though it is a ValueError raised in mlmix."""
    from mlmix.commands import exact
    from mlmix.theory.results import Result

    def broken(args):
        Result("gap", 0.5, "planted", lower=0.6, upper=0.4)

    monkeypatch.setattr(exact, "run", broken)
    assert main(["exact", "--model", "ising", "--graph", "cycle:3"]) == 3
    assert "internal error: InvalidResultError" in capsys.readouterr().err
