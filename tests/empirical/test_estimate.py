"""mlmix.empirical.model_constants.estimated_constants: estimates over all contexts equal the exact values, which in turn equal
brute-force computations from the exact Glauber kernel of the same model; lower-bound behaviour
on samples; the shipped default model is the promised incompatible MLM of a known law."""

import json

import networkx as nx
import numpy as np
import pytest
from helpers import figure
from mlm_fixtures import tiny_masked_lm

from mlmix.empirical.model_constants.estimated_constants import (
    constants,
    convergence,
    estimate,
    level_set,
    states_with_count,
    windows,
)
from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR, MaskedLMConditionals
from mlmix.empirical.models.shipped_model import conditional_kl, load_law, true_law
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.sources.conditionals import PottsModel, ScoreTable
from mlmix.theory.sources.space import StateSpace

N = 3
BANG = 3  # symbol of "!" in the fixtures' words (a, b, c, !)


@pytest.fixture(scope="module")
def mlm():
    model, tok = tiny_masked_lm("bert", seed=11)
    return MaskedLMConditionals(model, tok, N, device="cpu", temperature=0.8)


@pytest.fixture(scope="module")
def kernel_conditionals(mlm):
    """pi_i(v | x_{-i}) for every state x, site i, symbol v, read off the exact Glauber kernel:
    n P(x, x^{i<-v}) off the diagonal, and 1 minus the rest for v = x_i."""
    space = mlm.space
    P = glauber_kernel(ScoreTable.from_conditionals(mlm)).toarray()
    idx = np.arange(space.size)
    cond = np.empty((space.size, N, space.vocab_size))
    states = space.all_states()
    for i in range(N):
        cond[:, i] = N * P[idx[:, None], space.neighbours(idx, i)]
        cond[idx, i, states[:, i]] = 0.0
        cond[idx, i, states[:, i]] = 1.0 - cond[:, i].sum(axis=1)
    return P, cond


@pytest.fixture(scope="module")
def exact_report(mlm):
    return constants(mlm, None, np.random.default_rng(0), drift_symbols=[BANG], drift_k=1)


def test_all_contexts_give_the_exact_values(mlm, exact_report):
    # float32 logits: the two paths batch the queries differently, so agreement is to float32 rounding
    states = mlm.space.all_states()
    sampled = constants(mlm, states, np.random.default_rng(0), replacements=None, drift_symbols=[BANG],
                        drift_k=1, drift_states=3000, rectangles=500)
    assert exact_report["kind"] == "exact" and sampled["kind"] == "estimate"
    np.testing.assert_allclose(sampled["rho_ij"], exact_report["rho_ij"], atol=1e-5)
    np.testing.assert_allclose(sampled["delta_ij"], exact_report["delta_ij"], atol=1e-5)
    for key in ("rho", "alpha", "delta", "contraction_temperature"):
        assert figure(sampled[key]) == pytest.approx(figure(exact_report[key]), abs=1e-5)
    for key in ("min", "max"):  # 3000 draws cover the 27 states of the level set
        assert sampled["drift"][key] == pytest.approx(exact_report["drift"][key], abs=1e-5)
    assert sampled["trap"]["gamma"] == pytest.approx(exact_report["trap"]["gamma"], abs=1e-5)
    assert sampled["trap"]["local_modes"] == exact_report["trap"]["local_modes"]
    assert sampled["rectangle"]["count"] == 500 and len(sampled["rectangle"]["records"]) == 500
    assert exact_report["rectangle"]["count"] == mlm.space.size * 3 * 9  # |V|^n C(n,2) (|V|-1)^2
    assert sampled["rectangle"]["max"] <= exact_report["rectangle"]["max"] + 1e-12


def test_exact_values_equal_brute_force_from_the_glauber_kernel(mlm, exact_report, kernel_conditionals):
    P, cond = kernel_conditionals
    space = mlm.space
    states = space.all_states()
    np.testing.assert_allclose(cond.sum(axis=2), 1.0, atol=1e-12)
    # influence: max over x, j, b of TV at site i between x and x^{j<-b}
    rho = np.zeros((N, N))
    for j in range(N):
        nb = space.neighbours(np.arange(space.size), j)  # (S, q)
        tv = 0.5 * np.abs(cond[:, None, :, :] - cond[nb]).sum(axis=3)  # (S, q, n)
        rho[:, j] = tv.max(axis=(0, 1))
    np.fill_diagonal(rho, 0.0)
    np.testing.assert_allclose(exact_report["rho_ij"], rho, atol=1e-9)
    assert figure(exact_report["rho"]) == pytest.approx(rho.sum(axis=0).max(), abs=1e-9)
    # drift of N(x) = number of "!": (P N)(x) - N(x) on the level set N = 1
    count = (states == BANG).sum(axis=1).astype(float)
    drift = (P @ count - count)[count == 1]
    assert exact_report["drift"]["count"] == drift.size == 3 * 9  # C(3,1) sites for "!", 3^2 fillings
    assert exact_report["drift"]["min"] == pytest.approx(drift.min(), abs=1e-9)
    assert exact_report["drift"]["median"] == pytest.approx(np.median(drift), abs=1e-9)
    # rectangle statistic of the worst rectangle from the kernel's conditionals
    w = exact_report["rectangle"]["worst"]
    x = np.array(w["state"])
    x10, x01, x11 = x.copy(), x.copy(), x.copy()
    x10[w["i"]] = x11[w["i"]] = w["a_new"]
    x01[w["j"]] = x11[w["j"]] = w["b_new"]

    def l(c, c2, k):
        p = cond[space.encode(c), k]
        return np.log(p[c2[k]]) - np.log(p[c[k]])

    R = abs(l(x, x10, w["i"]) + l(x10, x11, w["j"]) - l(x, x01, w["j"]) - l(x01, x11, w["i"]))
    assert w["R"] == pytest.approx(R, abs=1e-9) and R == pytest.approx(exact_report["rectangle"]["max"], abs=1e-9)


def test_sampled_suprema_are_lower_bounds_and_grow_with_the_contexts(mlm, exact_report):
    contexts = np.random.default_rng(5).integers(0, 4, (80, N))
    rows = convergence(mlm, contexts, seed=1, rectangles=50)
    assert [r["n_contexts"] for r in rows] == [16, 64, 80]
    rho = [r["rho"] for r in rows]
    tstar = [r["contraction_temperature"] for r in rows]
    assert np.all(np.diff(rho) >= 0) and np.all(np.diff(tstar) >= 0)
    assert rho[-1] <= figure(exact_report["rho"]) + 1e-12
    assert tstar[-1] <= figure(exact_report["contraction_temperature"]) + 1e-12
    assert "lower bound" in constants(mlm, contexts[:4], np.random.default_rng(0))["contraction"]


def test_rectangles_vanish_for_conditionals_of_a_joint():
    potts = PottsModel.random(nx.cycle_graph(4), 3, seed=2, temperature=0.7)
    exact = constants(potts, None, np.random.default_rng(0))
    sampled = constants(potts, potts.space.all_states()[::3], np.random.default_rng(0), rectangles=100, top_k=2)
    assert exact["rectangle"]["max"] < 1e-12 and sampled["rectangle"]["max"] < 1e-12
    assert exact["rectangle"]["count"] == 3**4 * 6 * 4


def test_temperature_scales_rectangles_and_cor7_temperature_gives_contraction(mlm, exact_report):
    T_star = figure(exact_report["contraction_temperature"])
    hot = constants(mlm.at_temperature(2 * mlm.temperature), None, np.random.default_rng(0))
    assert hot["rectangle"]["max"] == pytest.approx(exact_report["rectangle"]["max"] / 2, rel=1e-9)
    assert figure(hot["contraction_temperature"]) == pytest.approx(T_star, rel=1e-12)  # scores are T-free
    above = constants(mlm.at_temperature(1.01 * T_star), None, np.random.default_rng(0))
    assert figure(above["rho"]) < 1 and above["contraction"].startswith("rho < 1")


def test_states_with_exactly_k_target_symbols_are_uniform_on_the_level_set():
    space = StateSpace(3, 4)
    draws = states_with_count(space, [2], 2, 12000, np.random.default_rng(0))
    assert ((draws == 2).sum(axis=1) == 2).all()
    level = level_set(space, [2], 2)
    assert level.shape[0] == 6 * 4  # C(4,2) * 2^2
    counts = np.bincount(space.encode(draws), minlength=space.size)[space.encode(level)]
    assert counts.sum() == 12000 and abs(counts / 500 - 1).max() < 0.2
    with pytest.raises(ValueError, match="k must be"):
        states_with_count(space, [2], 5, 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="non-empty"):
        states_with_count(space, [], 1, 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="fewer than the length"):
        windows(np.arange(3), 4, 2, np.random.default_rng(0))
    # A = V leaves only k = n: every state, drawn uniformly (this used to crash on the empty complement)
    everything = states_with_count(space, [0, 1, 2], 4, 8100, np.random.default_rng(1))
    assert np.bincount(space.encode(everything), minlength=space.size).min() > 50
    assert level_set(space, [0, 1, 2], 4).shape == (space.size, 4)
    with pytest.raises(ValueError, match="all of V"):
        states_with_count(space, [0, 1, 2], 3, 10, np.random.default_rng(0))
    assert (np.diff(windows(np.arange(50), 4, 20, np.random.default_rng(0)), axis=1) == 1).all()


def test_estimate_reports_side_by_side_and_refuses_large_exact(mlm):
    report = estimate(mlm, contexts=32, rectangles=40, drift_symbols=[BANG], state=np.array([0, 0, 0]))
    assert report["n_contexts"] == 32 and report["exact"]["n_contexts"] == 64
    assert report["rectangle"]["count"] == 40 and report["margins"]["tokens"] == ["a", "a", "a"]
    assert report["temperature"] == 0.8 and report["seconds"] > 0
    with pytest.raises(ValueError, match="exceeds the exact limit"):
        estimate(mlm, contexts=4, exact=True, exact_limit=63)
    assert estimate(mlm, contexts=4, rectangles=5, exact_limit=63)["exact"] is None


@pytest.fixture(scope="module")
def default_mlm():
    return MaskedLMConditionals.from_pretrained(DEFAULT_MODEL_DIR, 6, device="cpu")


def test_the_shipped_model_is_an_incompatible_mlm_of_its_recorded_law(default_mlm):
    record = json.loads((DEFAULT_MODEL_DIR / "law.json").read_text())
    law = load_law(DEFAULT_MODEL_DIR)
    np.testing.assert_array_equal(law.h, true_law(record["training"]["seed"]).h)
    assert default_mlm.decode(np.arange(4)) == record["law"]["tokens"]
    kl = conditional_kl(law, default_mlm)
    assert kl["mean"] == pytest.approx(record["kl_to_true_conditionals"]["mean"], rel=1e-3)
    assert kl["mean"] < 5e-3  # it learned the conditionals on average ...
    truth = constants(law, None, np.random.default_rng(0))
    model = constants(default_mlm, None, np.random.default_rng(0))
    assert truth["rectangle"]["max"] < 1e-12 and figure(truth["rho"]) < 1  # the law contracts (Thm 5)
    assert model["rectangle"]["max"] > 0.1  # ... but is incompatible
    assert figure(model["rho"]) > figure(truth["rho"])


def test_theorem_8_escape_bound_at_the_default_model_trap(default_mlm):
    hot = default_mlm.at_temperature(0.5)
    report = constants(hot, None, np.random.default_rng(0))
    trap = report["trap"]
    assert trap["assumption_1"] and trap["local_modes"] >= 1
    P = glauber_kernel(ScoreTable.from_conditionals(hot))
    x = hot.space.encode(np.array(trap["state"]))
    leave = 1.0 - P[x, x]
    assert leave <= trap["escape_bound"] == pytest.approx(3 * np.exp(-trap["gamma"] / 0.5))
