"""Checks compare the library with independent references: scaling a quantity that both sides of an
old-style check shared (the engine's conductance, its stationary law, every spectral gap) makes the
check fail, while the unscaled check holds."""

import dataclasses

import numpy as np
import pytest

import mlmix.verify.theorems.pitfalls.parallel_decoding as pitfalls_module
from mlmix.theory.chain.markov_chain import Chain
from mlmix.verify import instances as S
from mlmix.verify.runner import load_theorems
from mlmix.verify.theorems.facts import brute_force_conductance
from mlmix.verify.theorems.pitfalls.parallel_decoding import product_joint, subset_resampling_gap

THEOREMS = load_theorems()


def _three_site_chain() -> S.Instance:
    return S.Instance(S.ScoreTable.random(2, 3, seed=4, scale=1.5), "gaussian-table", {"seed": 4})


def test_cheeger_check_holds_and_matches_a_two_state_closed_form():
    assert THEOREMS["facts.cheeger"].check(_three_site_chain()).holds
    a, b = 0.3, 0.1  # two-state chain: pi = (b, a)/(a + b), Phi* = a (the set {0} of mass 1/4)
    P = np.array([[1 - a, a], [b, 1 - b]])
    phi, mask = brute_force_conductance(P, np.array([b, a]) / (a + b))
    assert phi == pytest.approx(a, rel=1e-15) and mask.tolist() == [True, False]


def test_scaling_the_engine_conductance_breaks_the_cheeger_check(monkeypatch):
    original = Chain.conductance

    def scaled(self):
        r = original.func(self)
        return dataclasses.replace(r, value=1.1 * r.value, lower=1.1 * r.lower, upper=1.1 * r.upper)

    monkeypatch.setattr(Chain, "conductance", property(scaled))
    v = THEOREMS["facts.cheeger"].check(_three_site_chain())
    assert v.failing() == ["Phi* (engine) = Phi* (enumeration of pi P)"]


def test_a_non_stationary_law_breaks_the_flow_identity(monkeypatch):
    original = Chain.stationary

    def tilted(self):
        r = original.func(self)
        value = r.value * np.linspace(0.9, 1.1, r.value.size)
        return dataclasses.replace(r, value=value / value.sum())

    monkeypatch.setattr(Chain, "stationary", property(tilted))
    v = THEOREMS["facts.cheeger"].check(_three_site_chain())
    assert "Q(S, S^c) = Q(S^c, S) at the minimising set" in v.failing()


def test_kgibbs_reference_gap_is_k_over_n_on_a_product_law():
    inst = product_joint()
    pi = inst.source.joint()
    assert subset_resampling_gap(pi, inst.source.space, 1) == pytest.approx(1 / 3, abs=1e-14)
    assert subset_resampling_gap(pi, inst.source.space, 2) == pytest.approx(2 / 3, abs=1e-14)


def test_scaling_every_gap_breaks_the_kgibbs_check(monkeypatch):
    theorem = THEOREMS["pitfalls.kgibbs_speedup"]
    inst = product_joint()
    assert theorem.check(inst).holds
    spectral_gap = pitfalls_module.spectral_gap
    monkeypatch.setattr(pitfalls_module, "spectral_gap", lambda P, pi: 1.1 * spectral_gap(P, pi))
    v = theorem.check(inst)  # the ratio gap_k / (k gap_1) is unchanged: only the references see it
    assert v.main.holds() and set(v.failing()) == {"gap(1-Gibbs): engine = dense reference",
                                                    "gap(k-Gibbs): engine = dense reference"}


def test_exact_w1_at_two_thousand_states_equals_the_sum_of_marginal_tvs_for_product_laws():
    """Hamming W1 between product laws is the sum of the coordinate TVs (coordinate-wise maximal coupling;
    f = sum_i f_i attains it): an independent closed form for the sparse Beckmann programme at 2048 states."""
    from mlmix.theory.sources.space import StateSpace
    from mlmix.verify.wasserstein import hamming_w1

    space = StateSpace(2, 11)
    rng = np.random.default_rng(5)
    a, b = rng.uniform(0.1, 0.9, 11), rng.uniform(0.1, 0.9, 11)
    states = space.all_states()
    law = lambda p: np.prod(np.where(states == 1, p, 1 - p), axis=1)
    lo, hi = hamming_w1([(law(a), law(b))], space)
    exact = float(np.abs(a - b).sum())
    assert lo[0] <= exact + 1e-12 and hi[0] >= exact - 1e-12 and hi[0] - lo[0] < 1e-9


def test_near_deterministic_laws_that_highs_rejects_fall_back_to_the_flow_programme():
    import networkx as nx

    from mlmix.theory.sources.conditionals import IsingModel

    graph = nx.empty_graph(5)
    graph.add_edge(0, 1)
    model = IsingModel(graph, {(0, 1): 0.5}, np.array([0.5, -1.0, 0, 0, 0])).at_temperature(0.05)
    v = THEOREMS["glauber.thm5"].check(S.Instance(model, "ising", {}))
    assert v.holds and all(p.lhs_error < 1e-9 for p in v.parts)
