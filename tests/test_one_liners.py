"""One-liners: a masked LM as a source of Chain.from_source (load, tabulate once, chain), checked
against the explicit tabulation and the model's own conditionals, and chain.simulate (trajectories
by the chain's convention), checked against P and pi."""

import sys

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from mlm_fixtures import save_model, tiny_masked_lm

from mlmix import Chain
from mlmix.theory.sources.conditionals import IsingModel

torch.set_num_threads(1)


def test_a_masked_lm_is_a_source_tabulated_once(tmp_path, monkeypatch):
    from mlmix.empirical.models.mlm import MaskedLMConditionals
    from mlmix.empirical.models.tabulate import tabulate

    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    folder = str(save_model(*tiny_masked_lm("bert", seed=5), tmp_path / "bert"))
    mlm = MaskedLMConditionals.from_pretrained(folder, frame="c _ _ a", candidates="a b !", temperature=0.7,
                                               device="cpu")
    chain = Chain.from_source(mlm)
    manual = Chain.from_source(tabulate(mlm, progress=False))  # the explicit route, from the cache now
    assert chain.n_states == 9 and chain.kernel == "glauber" and chain.name == "bert on 'c _ _ a', T=0.7"
    assert abs(chain.to_dense() - manual.to_dense()).max() == 0.0
    assert chain.additive_gap.value == manual.additive_gap.value is not None
    # against the model itself: P(x, y) for y = x with site i changed is pi_i(y_i | x_{-i}) / n
    x = np.array([[0, 1]])
    direct = np.exp(mlm.all_log_conditionals(x))[0]  # (n, |V|)
    P = chain.to_dense()
    a, b = mlm.space.encode(np.array([[0, 1]]))[0], mlm.space.encode(np.array([[2, 1]]))[0]
    assert abs(P[a, b] - direct[0, 2] / 2) < 1e-6
    hot = Chain.from_source(mlm.at_temperature(1.4), "parallel", name="hot")
    assert hot.kernel == "parallel" and hot.source.temperature == 1.4 and hot.name == "hot"


def test_simulate_follows_P_and_reaches_pi():
    P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.25, 0.25, 0.5]])
    chain = Chain(P)
    x = chain.simulate(20000, start=0, chains=4, seed=1)
    assert x.shape == (4, 20001) and (x[:, 0] == 0).all()
    assert np.array_equal(x, chain.simulate(20000, start=0, chains=4, seed=1))  # the seed fixes the run
    # transition frequencies against P: each count within 5 standard deviations
    counts = np.zeros((3, 3))
    np.add.at(counts, (x[:, :-1].ravel(), x[:, 1:].ravel()), 1)
    rows = counts.sum(axis=1, keepdims=True)
    sd = np.sqrt(P * (1 - P) / rows)
    assert (np.abs(counts / rows - P) <= 5 * sd).all()
    # occupation frequencies against pi (mixing is fast here: the variance is a few times binomial)
    pi = np.asarray(chain.stationary)
    freq = np.bincount(x.ravel(), minlength=3) / x.size
    assert np.abs(freq - pi).max() < 0.02
    # a sparse chain with holding probabilities (the diagonal is 1 - the off-diagonal row sums)
    ising = Chain.from_source(IsingModel(nx.cycle_graph(3), beta=0.3))
    assert sp.issparse(ising.P)
    y = ising.simulate(3000, chains=8, seed=2)  # started from pi
    held = (y[:, 1:] == y[:, :-1]).mean()
    expected_hold = float(np.sum(np.asarray(ising.stationary) * ising.P.diagonal()))
    assert abs(held - expected_hold) < 0.03
    frozen = Chain(np.eye(2)).simulate(5, start=[0, 1], chains=2)
    assert (frozen == np.array([[0] * 6, [1] * 6])).all()
    with pytest.raises(ValueError):
        chain.simulate(3, start=7)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
