"""Chain.timings: the seconds spent on each costly figure, with the same keys and meaning on the dense,
CSR and matrix-free representations."""

import time

import networkx as nx
import pytest

from mlmix import Chain
from mlmix.theory.chain import conductance as cond
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable

PHASES = {"stationary_s", "gap_s", "multiplicative_gap_s", "conductance_s"}


@pytest.mark.parametrize("representation", ["dense", "sparse", "operator"])
@pytest.mark.parametrize("source", [IsingModel(nx.cycle_graph(5), beta=0.4), ScoreTable.random(3, 3, seed=2)],
                         ids=["reversible", "non-reversible"])
def test_every_representation_times_the_same_phases(representation, source):
    chain = Chain.from_source(source, representation=representation)
    assert chain.timings == {}
    chain.stationary
    assert set(chain.timings) >= {"stationary_s"}
    chain.additive_gap, chain.multiplicative_gap, chain.conductance
    assert set(chain.timings) == PHASES and all(t >= 0 for t in chain.timings.values())
    before = dict(chain.timings)
    chain.additive_gap, chain.conductance  # cached: no second computation, no time added
    assert chain.timings == before


def test_a_phase_counts_the_seconds_of_its_route(monkeypatch):
    route = cond.chain_conductance

    def slow(chain):
        time.sleep(0.05)
        return route(chain)

    monkeypatch.setattr(cond, "chain_conductance", slow)
    for representation in ("dense", "operator"):
        chain = Chain.from_source(IsingModel(nx.cycle_graph(4), beta=0.3), representation=representation)
        chain.stationary, chain.additive_gap
        chain.conductance
        assert 0.05 <= chain.timings["conductance_s"] < 5
