"""The sampler/incompatibility split of a decoder's KL against a reference joint (mlmix.theory.kernels.decoder_split):
the chain-rule identity KL(pi || mu_G^q) = S_G + I_G with both sides computed independently (the left by the
decoder's dynamic programme, the right by brute-force marginals written here), on random score tables and
random or Glauber reference laws, to 1e-12."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import log_softmax

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.decoder_split import decoder_schedules, decoder_split
from mlmix.theory.kernels.decoders import PartialScoreTable, decoder_law


def q_cond(t: PartialScoreTable, shown: dict, i: int) -> np.ndarray:
    """q_i(. | x_S) straight from the table (the unshown sites masked)."""
    q, n = t.space.vocab_size, t.space.length
    c = 0
    for j in range(n):
        if j != i:
            c = c * (q + 1) + shown.get(j, q)
    return np.exp(log_softmax(t.table[i, c] / t.temperature))


def marginal(pi: np.ndarray, q: int, n: int, sites: list) -> dict:
    """pi(x_A) for every assignment of the sites A, by summing pi over the states (a dict)."""
    out: dict = {}
    for idx, x in enumerate(itertools.product(range(q), repeat=n)):
        key = tuple(x[s] for s in sites)
        out[key] = out.get(key, 0.0) + pi[idx]
    return out


def entropy(m: dict) -> float:
    return -sum(v * math.log(v) for v in m.values() if v > 0)


def brute_split(t: PartialScoreTable, pi: np.ndarray, blocks) -> tuple[float, float]:
    """S_G = sum_t [sum_{i in G_t} H(X_i | X_C) - H(X_G | X_C)] and I_G = sum_t sum_i E KL(pi_i(.|x_C) || q_i(.|x_C))."""
    q, n = t.space.vocab_size, t.space.length
    S = I = 0.0
    C: list = []
    for G in blocks:
        HC = entropy(marginal(pi, q, n, sorted(C))) if C else 0.0
        S += sum(entropy(marginal(pi, q, n, sorted(C + [i]))) - HC for i in G)
        S -= entropy(marginal(pi, q, n, sorted(C + list(G)))) - HC
        mC = marginal(pi, q, n, sorted(C)) if C else {(): 1.0}
        for i in G:
            mCi = marginal(pi, q, n, sorted(C + [i]))
            pos = sorted(C + [i]).index(i)
            for xc, w in mC.items():
                if w == 0:
                    continue
                shown = dict(zip(sorted(C), xc))
                qi = q_cond(t, shown, i)
                for a in range(q):
                    key = list(xc)
                    key.insert(pos, a)
                    p_a = mCi[tuple(key)] / w
                    if p_a > 0:
                        I += w * p_a * math.log(p_a / qi[a])
        C += list(G)
    return S, I


def kl(p: np.ndarray, m: np.ndarray) -> float:
    s = p > 0
    return float((p[s] * np.log(p[s] / m[s])).sum())


@pytest.mark.parametrize("q,n,seed,blocks", [(2, 3, 0, [(1,), (0, 2)]), (3, 3, 1, [(0, 1, 2)]),
                                             (2, 4, 2, [(3, 1), (0,), (2,)]), (3, 2, 3, [(1,), (0,)])])
def test_chain_rule_split_on_random_tables(q, n, seed, blocks):
    t = PartialScoreTable.random(q, n, seed=seed, scale=1.3)
    rng = np.random.default_rng(seed)
    for pi in (rng.dirichlet(np.ones(q ** n)), np.asarray(Chain.from_source(t.full_table(), "glauber").stationary.value)):
        mu = decoder_law(t, "schedule", schedule=blocks).law
        S, I = brute_split(t, pi, blocks)
        assert abs(kl(pi, mu) - (S + I)) < 1e-12
        r = decoder_split(t, "schedule", pi, 1e-15, schedule=blocks)
        assert abs(r["kl"].value - kl(pi, mu)) < 1e-12 and r["identity_residual"] < 1e-12
        assert abs(r["sampler"].details["computed"] - S) < 1e-12 and abs(r["incompatibility"].details["computed"] - I) < 1e-12
        assert r["mixture_gain"].upper < 1e-12  # one schedule: no mixture


@pytest.mark.parametrize("sampler,k", [("any-order", 1), ("parallel", 2)])
def test_random_order_decoders_are_mixtures_of_their_schedules(sampler, k):
    t = PartialScoreTable.random(2, 4, seed=7, scale=1.3)
    schedules = decoder_schedules(t.space, sampler, k)
    assert len(schedules) == (24 if sampler == "any-order" else 6)
    mixture = np.mean([decoder_law(t, "schedule", schedule=b).law for b in schedules], axis=0)
    assert np.abs(mixture - decoder_law(t, sampler, k=k).law).max() < 1e-14
    pi = np.random.default_rng(1).dirichlet(np.ones(16))
    r = decoder_split(t, sampler, pi, 1e-15, k=k)
    parts = [brute_split(t, pi, b) for b in schedules]
    mean_kl = np.mean([kl(pi, decoder_law(t, "schedule", schedule=b).law) for b in schedules])
    assert abs(r["sampler"].details["computed"] - np.mean([s for s, _ in parts])) < 1e-12
    assert abs(r["incompatibility"].details["computed"] - np.mean([i for _, i in parts])) < 1e-12
    assert abs(r["mixture_gain"].details["computed"] - (mean_kl - kl(pi, decoder_law(t, sampler, k=k).law))) < 1e-12
    assert r["mixture_gain"].details["computed"] > 0  # convexity, strict here


def test_compatible_conditionals_have_no_incompatibility():
    """Conditionals read from pi itself: the incompatibility part vanishes and the sampler part is the KL."""
    from mlmix.theory.sources.conditionals import LogWeightTable

    pi = np.random.default_rng(3).dirichlet(np.ones(27))
    t = PartialScoreTable.from_joint(LogWeightTable.from_probabilities(PartialScoreTable.random(3, 3).space, pi))
    r = decoder_split(t, "parallel", pi, 1e-15, k=2)
    assert r["incompatibility"].upper < 1e-12
    assert abs(r["sampler"].details["computed"] - r["kl"].details["computed"] - r["mixture_gain"].details["computed"]) < 1e-12


def test_adaptive_decoders_are_refused():
    t = PartialScoreTable.random(2, 3, seed=0)
    with pytest.raises(ValueError, match="mixture of fixed schedules"):
        decoder_split(t, "confidence", np.full(8, 1 / 8), 0.0, k=2)
