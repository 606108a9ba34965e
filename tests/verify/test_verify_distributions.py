"""The instance distributions of the searches match the strategies' docstrings: measured on the
theorems' own strategies (seeded Hypothesis runs, no checks), with the shares `mlmix verify --stats`
prints (mlmix.verify.verdicts.regime_shares).

The shares are measured in a fresh interpreter, as `mlmix verify` runs: Hypothesis biases its draws with
constants it collects from the modules already imported, so inside a long pytest session the same seeded
search can draw other instances than the command does."""

import json
import subprocess
import sys
import tempfile
from functools import cache

import pytest
from hypothesis import strategies as st

from mlmix.verify import instances as S
from mlmix.verify.runner import PROFILES, examples_for, load_theorems
from mlmix.verify.verdicts import Theorem, part, regime_shares, search, verdict

THEOREMS = load_theorems()
LARGE = "n>=4 and |V|>=3"


class _Probe(Theorem):
    """Draws a theorem's instances (its strategy, hypotheses and regimes) without checking them."""

    id = "test.probe"
    paper = "facts"
    number = "-"
    statement = "-"

    def __init__(self, theorem: Theorem):
        self.theorem = theorem

    def strategy(self):
        return self.theorem.strategy()

    def hypotheses(self, instance):
        return self.theorem.hypotheses(instance)

    def regime(self, instance):
        return self.theorem.regime(instance)

    def check(self, instance):
        return verdict(part("x", 1.0, 1.0, "<="))


def probe_shares(theorem_id: str) -> dict:
    """The shares of the default `mlmix verify` search (same seed and number of instances), here."""
    theorem = THEOREMS[theorem_id]
    return search(_Probe(theorem), examples=examples_for(theorem, PROFILES["default"]["examples"]),
                  seed=0).regimes["shares"]


@cache
def shares(theorem_id: str) -> dict:
    """:func:`probe_shares` in a fresh interpreter (module docstring)."""
    code = ("import importlib.util, json, sys; spec = importlib.util.spec_from_file_location('probe', sys.argv[1]); "
            "t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t); "
            "print(json.dumps(t.probe_shares(sys.argv[2])))")
    out = subprocess.run([sys.executable, "-c", code, __file__, theorem_id], capture_output=True, text=True,
                         timeout=600, cwd=tempfile.gettempdir())
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("theorem_id", ["glauber.prop1", "glauber.cor2", "glauber.lemma6", "facts.dirichlet",
                                        "facts.eigenvalue", "pitfalls.thm2", "pitfalls.lemma2"])
def test_at_least_forty_percent_of_the_instances_have_n_ge_4_and_v_ge_3(theorem_id):
    assert shares(theorem_id)[LARGE] >= 40.0


def test_pitfalls_families_are_strongly_coupled_and_never_edgeless_by_accident():
    s = shares("pitfalls.thm2")
    assert s["edgeless"] == 0.0 and s["|theta| >= 2"] >= 30.0


def test_kgibbs_never_draws_k_equal_n_and_reaches_81_states():
    s = shares("pitfalls.kgibbs_speedup")
    assert s["k = n"] == 0.0 and s[LARGE] >= 30.0 and s["states 17..81"] >= 30.0


def test_ising_and_potts_sources_always_interact():
    seen = []

    @S.st.composite
    def collect(draw):
        src, _, params = draw(st.one_of(S.ising_sources(), S.potts_sources()))
        seen.append(params)
        return src

    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(collect())
    def draw_all(_):
        pass

    draw_all()
    assert len(seen) >= 30 and all(any(j != 0 for j in p["J"]) for p in seen)


def test_regime_shares_count_sizes_bins_and_flags():
    regimes = [{"n": 4, "vocab": 3, "states": 81, "edgeless": False}, {"n": 2, "vocab": 2, "states": 4, "edgeless": True}]
    assert regime_shares(regimes) == {LARGE: 50.0, "states <=16": 50.0, "states 17..81": 50.0,
                                      "states 82..729": 0.0, "states >729": 0.0, "edgeless": 50.0}
