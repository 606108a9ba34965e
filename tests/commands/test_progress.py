"""Progress and cost (mlmix/progress.py): a cost line before a long step, one line per phase when
stderr is not a terminal (checked in captured subprocesses), a bar on a terminal, nothing with
progress=False / --no-progress; the sparse distance curve; the report's t_mix limit."""

import inspect
import os
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from mlmix import Chain
from mlmix.limits import REPORT_MIXING_LIMIT
from mlmix.progress import Progress
from mlmix.theory.sources.conditionals import IsingModel

SCRIPT = """
import sys, networkx as nx
from mlmix import Chain
from mlmix.theory.sources.conditionals import IsingModel
chain = Chain.from_source(IsingModel(nx.cycle_graph(4), beta=0.5))
chain.summary(progress=sys.argv[1] == "on")
chain.distance_curve(5, progress=sys.argv[1] == "on")
"""
PHASES = ("stationary law", "gaps", "conductance", "Kemeny constant", "t_mix")


def _run(argv, threshold="0"):
    env = dict(os.environ, MLMIX_PROGRESS_THRESHOLD=threshold)
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300, env=env)


def _planned(stderr):
    """The lines of stderr but those of a step that outlasted its expected time on a loaded machine (a
    slow start-up: mlmix.progress.if_late)."""
    return [line for line in stderr.splitlines() if "(still running after " not in line]


def test_one_line_per_phase_when_stderr_is_not_a_terminal():
    done = _run(["-c", SCRIPT, "on"])
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "\r" not in done.stderr  # no bar in a log
    cost, *phases, curve = lines
    assert "16 states" in cost and "expected" in cost and "GFLOP/s measured" in cost
    assert len(phases) == len(PHASES) and all(f": {name} (expected" in line for name, line in zip(PHASES, phases))
    assert "distance curve d(t)" in curve and "6 steps" in curve
    assert _run(["-c", SCRIPT, "off"]).stderr == ""
    assert _run(["-c", SCRIPT, "on"], threshold="1e9").stderr == ""  # short steps stay quiet


PROPERTY_SCRIPT = """
import math, os, sys, networkx as nx
from mlmix import Chain
from mlmix.theory.sources.conditionals import IsingModel
small, big, quiet = (Chain.from_source(IsingModel(nx.cycle_graph(n), beta=0.5)) for n in (3, 8, 8))
expected = [sum(s for _, s, _ in c._progress_plan("conductance", "conductance")[2]) for c in (small, big)]
os.environ["MLMIX_PROGRESS_THRESHOLD"] = repr(math.sqrt(expected[0] * expected[1]))  # between the two
quiet.progress = False
for chain in (small, big, quiet):
    print("--", file=sys.stderr, flush=True)
    chain.conductance
"""


def test_a_property_read_on_its_own_announces_its_phases():
    """chain.conductance of 256 states (above the threshold): the cost line, then the phases it runs
    in order (stationary law, gaps, conductance); of 8 states (below it) or with chain.progress = False:
    nothing; within summary() the properties add no line (test above: exactly one line per phase)."""
    done = _run(["-c", PROPERTY_SCRIPT])
    assert done.returncode == 0, done.stderr
    small, big, quiet = done.stderr.split("--\n")[1:]
    assert small == "" and quiet == ""
    cost, *phases = big.splitlines()
    assert cost.startswith("mlmix: conductance of chain on 256 states: 256 states") and "expected" in cost
    names = ("stationary law", "gaps", "conductance")
    assert len(phases) == len(names)  # the later phases may add the measured pace (test_progress_pace.py)
    assert all(line.startswith(f"mlmix: conductance of chain on 256 states: {name} (expected < 1 s")
               for name, line in zip(names, phases))


def test_cli_exact_and_verify_in_a_log():
    exact = _run(["-m", "mlmix", "exact", "--graph", "cycle:4"])
    assert exact.returncode == 0 and len(_planned(exact.stderr)) == 1 + len(PHASES) + 2  # + paper G's constants
    assert _run(["-m", "mlmix", "exact", "--graph", "cycle:4", "--no-progress"]).stderr == ""
    verify = _run(["-m", "mlmix", "verify", "--theorem", "glauber.prop1", "--theorem", "glauber.thm8",
                   "--examples", "2"])
    assert verify.returncode == 0, verify.stderr
    cost, *lines = _planned(verify.stderr)
    total = len(lines)  # id prefixes bring their families (glauber.thm8.*)
    assert f"{total} results, 2 instances each" in cost and total >= 2
    assert [line.split("]: ")[0] for line in lines] == [f"mlmix: verify [{i}/{total}" for i in range(1, total + 1)]
    ids = [line.split("]: ")[1] for line in lines]
    assert ids[0] == "glauber.prop1" and all(i.startswith("glauber.thm8") for i in ids[1:])


def test_a_bar_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setenv("MLMIX_PROGRESS_THRESHOLD", "0")
    monkeypatch.setattr("mlmix.progress._interactive", lambda stream: True)
    with Progress("job", [("one", 1.0), ("two", 3.0)], cost="4 states") as bar:
        with bar.phase("one"):
            pass
        with bar.phase("two"):
            pass
    err = capsys.readouterr().err
    assert err.startswith("mlmix: job: 4 states, about 4 s expected (one 1 s, two 3 s;")
    assert "job: two: " in err and "%|" in err and "\r" in err


def test_sparse_distance_curve_agrees_with_dense_powers():
    """Two algorithms: dense N x N powers times the sparse P, and times the dense P."""
    chain = Chain.from_source(IsingModel(nx.cycle_graph(7), beta=0.6))
    assert sp.issparse(chain.P)
    sparse = chain.distance_curve(60, progress=False)
    dense = Chain(chain.P.toarray()).distance_curve(60, progress=False)
    assert "sparse P" in sparse.method and "dense P" in dense.method
    assert np.abs(sparse.value - dense.value).max() <= sparse.abs_error + dense.abs_error
    assert sparse.value[0] == pytest.approx(1 - np.exp(chain.facts.logpi).min(), rel=1e-12)  # d(0) = 1 - pi_min
    t_mix = int(chain.mixing_time(0.25))
    assert sparse.value[t_mix] <= 0.25 < sparse.value[t_mix - 1]  # the curve crosses eps at t_mix


def test_reports_stop_exact_t_mix_at_the_cli_limit():
    from mlmix.cli import OneLineParser
    from mlmix.commands import exact

    parser = OneLineParser()
    exact.configure(parser)
    assert inspect.signature(Chain.summary).parameters["mixing_limit"].default == REPORT_MIXING_LIMIT
    assert parser.get_default("mixing_limit") == REPORT_MIXING_LIMIT == 2048
    big = Chain(sp.eye_array(4096, format="csr"), dense_limit=4096)
    phases = dict(big._summary_cost(REPORT_MIXING_LIMIT)[0])
    assert phases["t_mix"] == 0.0 and phases["gaps"] > 0


def test_counter_in_a_log_says_each_tenth_with_its_eta(monkeypatch, capsys):
    """The tabulation's count (Counter) off a terminal: one line per further tenth, the ETA the elapsed
    time scaled by the work left (a fake clock, 1 s per reading: 1 s at construction, then one per update)."""
    clock = iter(range(1, 100))
    monkeypatch.setattr("mlmix.progress.time.perf_counter", lambda: next(clock))
    from mlmix.progress import Counter

    with Counter("tabulating", 200, unit="passes") as bar:
        for k in (30, 30, 100, 40):
            bar.update(k)
    assert capsys.readouterr().err.splitlines() == [
        "mlmix: tabulating: 30/200 passes (15%), 1 s elapsed, ETA 6 s",  # 1 s for 30: 170 left
        "mlmix: tabulating: 60/200 passes (30%), 2 s elapsed, ETA 5 s",
        "mlmix: tabulating: 160/200 passes (80%), 3 s elapsed, ETA < 1 s",  # 0.75 s
        "mlmix: tabulating: 200/200 passes (100%), 4 s elapsed, ETA < 1 s"]
    with Counter("tabulating", 200, enabled=False) as bar:
        bar.update(200)
    assert capsys.readouterr().err == ""


def test_krylov_convergence_line_extrapolates_the_geometric_decrease(monkeypatch, capsys):
    """Residual 1e-1 after 1 application, 1e-2 after 2 (a factor 10 per application), target 1e-8:
    6 more applications at 10 s each (20 s for 2) is an ETA of 60 s."""
    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr("mlmix.progress.time.perf_counter", lambda: next(clock))
    from mlmix.progress import Convergence

    report = Convergence("stationary law (GMRES)", True)
    report(1, 1e-1, 1e-8)
    report(2, 1e-2, 1e-8)
    assert capsys.readouterr().err.splitlines() == [
        "mlmix: stationary law (GMRES): 1 operator applications, 10 s: residual 1.00e-01 (target 1.0e-08), ETA ?",
        "mlmix: stationary law (GMRES): 2 operator applications, 20 s: residual 1.00e-02 (target 1.0e-08), ETA 60 s"]
