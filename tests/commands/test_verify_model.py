"""``mlmix verify --mlm``: paper G's results on a model's frame (applies / does not apply / unknown at
this size), against ``mlmix exact --mlm`` on the same frame."""

import json

import numpy as np
import pytest
from helpers import FR1, NEXT

from mlmix.cli import main
from mlmix.commands import verify_model as vm
from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR
from mlmix.theory.results import Result

FRAME = ["--frame", "a _ _ _ b c", "--candidates", "a b c !", "--no-progress"]


def _run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in args else out


def _by_id(report):
    return {r["id"]: r for r in report["results"]}


def test_shipped_model_against_mlmix_exact(capsys):
    code, rep = _run(capsys, "verify", "--mlm", str(DEFAULT_MODEL_DIR), *FRAME, "--basin", "b b b", "--json")
    assert code == 0
    code, ex = _run(capsys, "exact", "--mlm", str(DEFAULT_MODEL_DIR), *FRAME, "--basin", "1 1 1", "--json")
    assert code == 0
    r, g = _by_id(rep), ex["paper_g"]
    assert rep["chain"]["n_states"] == ex["n_states"] == 64
    assert rep["chain"]["t_mix"]["value"] == ex["t_mix"]["value"]
    assert rep["chain"]["reversible"] is ex["reversible"] is False
    # Theorem 5: rho < 1 on every context of this frame, its t_mix bound holds on the exact chain
    thm5 = r["glauber.thm5"]
    assert thm5["status"] == "applies" and thm5["conclusion"] == "holds"
    assert thm5["rho"]["value"] == g["rho"]["value"] < 1
    assert thm5["bound"] == g["thm5_t_mix_bound"]["value"] >= thm5["exact"]["value"]
    # Corollary 7 at T = 1 < T*: does not apply, and says why
    cor7 = r["glauber.cor7"]
    assert cor7["status"] == "does not apply" and "T = 1 <= T*" in cor7["why"]
    assert cor7["t_star"]["value"] == g["contraction_temperature"]["value"] > 1
    # Theorem 8 on the local mode b b b: Assumption 1 holds, Phi(B) below the bound
    thm8 = r["glauber.thm8"]
    assert thm8["status"] == "applies" and thm8["conclusion"] == "holds"
    assert thm8["gamma"] == pytest.approx(g["basin"]["gamma"], rel=1e-12) and thm8["gamma"] > 0
    assert thm8["exact"]["value"] == pytest.approx(g["basin"]["phi_exact"]["value"], rel=1e-12)
    assert thm8["exact"]["value"] <= thm8["bound"] == pytest.approx(g["basin"]["thm8_escape_bound"], rel=1e-12)
    # the rectangle test: R > 0, and the exact chain is indeed not reversible
    rect = r["glauber.rectangle"]
    assert rect["status"] == "applies" and rect["conclusion"] == "holds"
    assert rect["r_max"] == pytest.approx(g["rectangle"]["max"], rel=1e-12) and rect["r_max"] > 0


def test_above_the_corollary_7_temperature(capsys):
    code, rep = _run(capsys, "verify", "--mlm", str(DEFAULT_MODEL_DIR), *FRAME, "--temperature", "2", "--json")
    assert code == 0
    cor7 = _by_id(rep)["glauber.cor7"]
    assert cor7["status"] == "applies" and cor7["conclusion"] == "holds"
    assert cor7["rho"]["value"] <= cor7["rho_bound"] == pytest.approx(cor7["t_star"]["value"] / 2, rel=1e-12)
    code, text = _run(capsys, "verify", "--mlm", str(DEFAULT_MODEL_DIR), *FRAME, "--temperature", "0.3",
                      "--basin", "a a a")
    assert code == 0
    assert "glauber.thm5" in text and "DOES NOT APPLY: rho = " in text and ">= 1 (all contexts)" in text
    assert "Assumption 1 fails on the basin" in text


def test_above_the_exact_limit_the_streamed_brackets_decide(capsys, monkeypatch):
    """Above the exact limit rho and T* come from the certified brackets streamed over every context (the
    limit is lowered to reach that path): Theorem 5 and Corollary 7 are decided as below it, with the same
    numbers; the rectangle statistic and Theorem 8's margin come from samples / stay unknown."""
    code, small = _run(capsys, "verify", "--mlm", str(DEFAULT_MODEL_DIR), *FRAME, "--json")
    monkeypatch.setattr("mlmix.commands.verify_model.CONSTANTS_LIMIT", 16)
    monkeypatch.setattr("mlmix.theory.local.constants.CONSTANTS_LIMIT", 16)
    code, cold = _run(capsys, "verify", "--mlm", str(DEFAULT_MODEL_DIR), *FRAME, "--temperature", "0.3",
                      "--basin", "b b b", "--json")
    assert code == 0
    r = _by_id(cold)
    assert r["glauber.thm5"]["status"] == "does not apply" and "(all contexts)" in r["glauber.thm5"]["why"]
    assert r["glauber.thm8"]["status"] == "unknown at this size"
    assert "streamed" in cold["constants"]
    code, warm = _run(capsys, "verify", "--mlm", str(DEFAULT_MODEL_DIR), *FRAME, "--json")
    r, s = _by_id(warm), _by_id(small)
    assert r["glauber.thm5"]["status"] == s["glauber.thm5"]["status"] == "applies"
    assert r["glauber.thm5"]["rho"]["value"] == s["glauber.thm5"]["rho"]["value"]
    assert r["glauber.thm5"]["bound"] == s["glauber.thm5"]["bound"]
    assert r["glauber.cor7"]["status"] == "does not apply"  # T = 1 <= T*
    assert r["glauber.cor7"]["t_star"]["value"] == pytest.approx(s["glauber.cor7"]["t_star"]["value"], rel=1e-12)
    assert r["glauber.rectangle"]["status"] == "applies"  # a sampled R > 0 certifies incompatibility


def test_comparisons_can_fail_and_be_undecided():
    t_mix = Result.exact("t_mix", 8, "exact")
    assert vm._compare(t_mix, "<=", 8) == "holds" and vm._compare(t_mix, "<=", 7) == "violated"
    assert vm._compare(Result.interval("t_mix", 6.0, 9.0, "bounds", "x"), "<=", 8) == "undecided"
    assert vm._compare(Result.interval("t", 6.0, 9.0, "bounds", "x"), ">=", 10) == "violated"
    c = {"rho": Result.approximate("rho", 0.5, 1e-15, "x"), "t_star": Result.approximate("T*", 0.4, 1e-15, "x")}
    assert vm._thm5(c, True, 3, 0.25, Result.exact("t_mix", 10_000, "x"))["conclusion"] == "violated"


@pytest.mark.parametrize("args, message", [
    (["--basin", "b b"], "basin pattern must have n = 3 entries"),
    (["--basin", "b zz b"], "basin entry 'zz' is neither"),
    (["--eps", "2"], "--eps"),
])
def test_bad_input_is_one_line(capsys, args, message):
    assert main(["verify", "--mlm", str(DEFAULT_MODEL_DIR), *FRAME, *args]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]  # after the cache note
    assert len(errors) == 1 and message in errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("n, states", [(2, 400), (3, 8000)])
def test_antiberty_against_mlmix_exact(capsys, converted, n, states):  # noqa: F811
    """AntiBERTy over all 20 residues at n = 2 (40 masked passes) and n = 3 (1,200 passes; t_mix then
    comes as certified bounds above the dense limit): the same numbers as ``mlmix exact --mlm``."""
    frame = ["--frame", f"{FR1} {' '.join(['_'] * n)} {NEXT[n]}", "--no-progress"]
    code, rep = _run(capsys, "verify", "--mlm", str(converted), *frame, "--json")
    assert code == 0
    code, ex = _run(capsys, "exact", "--mlm", str(converted), *frame, "--json")
    r, g = _by_id(rep), ex["paper_g"]
    assert rep["chain"]["n_states"] == ex["n_states"] == states
    for key in ("value", "lower", "upper"):
        assert rep["chain"]["t_mix"][key] == ex["t_mix"][key]
    assert r["glauber.thm5"]["rho"]["value"] == g["rho"]["value"]
    assert r["glauber.thm5"]["status"] == ("applies" if g["rho"]["value"] < 1 else "does not apply")
    assert r["glauber.cor7"]["t_star"]["value"] == g["contraction_temperature"]["value"]
    assert r["glauber.rectangle"]["r_max"] == pytest.approx(g["rectangle"]["max"], rel=1e-12)
    assert all(x.get("conclusion") != "violated" for x in rep["results"])
    assert rep["chain"]["reversible"] == ex["reversible"]


def test_compatible_source_passes_the_rectangle_test():
    """A Gibbs source (Ising on a 4-cycle): R = 0 on every rectangle and the exact chain is reversible;
    at beta = 0.2 each neighbour moves a site by (sigma(4 beta) - 1/2) = tanh(2 beta)/2, so rho = tanh(0.4) < 1
    (Theorem 5 applies), and Delta_ij = 4 beta, so T* = 2 x 0.8 / 4 = 0.4 < T = 1 (Corollary 7 applies)."""
    import networkx as nx

    from mlmix.theory.sources.conditionals import IsingModel

    rep = vm.model_report(IsingModel(nx.cycle_graph(4), couplings=1.0, beta=0.2))
    r = _by_id(rep)
    assert r["glauber.rectangle"]["status"] == "applies" and r["glauber.rectangle"]["conclusion"] == "holds"
    assert r["glauber.rectangle"]["why"].startswith("compatible") and rep["chain"]["reversible"] is True
    assert r["glauber.thm5"]["status"] == "applies" and r["glauber.thm5"]["conclusion"] == "holds"
    assert r["glauber.thm5"]["rho"].value == pytest.approx(np.tanh(0.4), rel=1e-12)
    assert r["glauber.cor7"]["status"] == "applies" and r["glauber.cor7"]["conclusion"] == "holds"
    assert r["glauber.cor7"]["t_star"].value == pytest.approx(0.4, rel=1e-12)


def test_a_sampled_rectangle_never_certifies_compatibility(monkeypatch):
    """Above the exact limit rho and T* are exact (streamed over every context), but where the streamed R
    is not at hand (here removed) R = 0 on sampled rectangles does not make every rectangle 0: a
    compatible (Ising) source stays 'unknown', never 'compatible' from a sample."""
    from dataclasses import replace

    import networkx as nx

    from mlmix.theory.sources.conditionals import IsingModel, ScoreTable

    report = vm.model_constants
    monkeypatch.setattr(vm, "model_constants", lambda *a, **k: replace(report(*a, **k), rectangle=None))
    monkeypatch.setattr("mlmix.commands.verify_model.CONSTANTS_LIMIT", 16)
    monkeypatch.setattr("mlmix.theory.local.constants.CONSTANTS_LIMIT", 16)
    source = ScoreTable.from_conditionals(IsingModel(nx.cycle_graph(5), beta=0.4))
    r = {e["id"]: e for e in vm.model_report(source)["results"]}
    assert r["glauber.thm5"]["status"] == "applies"  # rho from every context: exact
    assert r["glauber.rectangle"]["status"] == "unknown at this size"
