"""Exact decoder laws against plain recursion, Monte Carlo runs and the chain-rule identity."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
from scipy.special import softmax
from scipy.stats import chisquare

from mlmix.theory.kernels.decoders import (
    PartialScoreTable,
    decoder_law,
    expected_conditional_tc,
    schedule_tc,
    tv_kl,
)
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, PottsModel, ScoreTable
from mlmix.theory.sources.space import StateSpace


def cond(t: PartialScoreTable, x: tuple, i: int, top_k: int | None = None) -> np.ndarray:
    """p_i(. | x_S) straight from the table: the other sites' symbols (mask = q) as a base-(q+1) number."""
    q, n = t.space.vocab_size, t.space.length
    c = 0
    for j in range(n):
        if j != i:
            c = c * (q + 1) + x[j]
    p = softmax(t.table[i, c] / t.temperature)
    if top_k is not None:
        kth = np.sort(p)[-top_k]
        p = np.where(p >= kth, p, 0.0)
        p = p / p.sum()
    return p


def exact_by_recursion(t, sampler, k=1, order=None, top_k=None):
    """The decoder's law by plain recursion over its random choices (no shared state with the DP)."""
    q, n = t.space.vocab_size, t.space.length
    law = {}

    def go(x, w):
        masked = [i for i in range(n) if x[i] == q]
        if not masked:
            law[x] = law.get(x, 0.0) + w
            return
        if sampler in ("any-order", "left-to-right"):
            sites = masked if sampler == "any-order" else [next(i for i in (order or range(n)) if x[i] == q)]
            for i in sites:
                p = cond(t, x, i, top_k)
                for a in range(q):
                    y = list(x)
                    y[i] = a
                    go(tuple(y), w * p[a] / len(sites))
        elif sampler == "parallel":
            subsets = list(itertools.combinations(masked, min(k, len(masked))))
            for G in subsets:
                ps = [cond(t, x, i, top_k) for i in G]
                for A in itertools.product(range(q), repeat=len(G)):
                    y = list(x)
                    pr = 1.0
                    for i, a, p in zip(G, A, ps):
                        y[i] = a
                        pr *= p[a]
                    go(tuple(y), w * pr / len(subsets))
        else:  # confidence
            ps = [cond(t, x, i, top_k) for i in masked]
            for A in itertools.product(range(q), repeat=len(masked)):
                pr = math.prod(p[a] for p, a in zip(ps, A))
                conf = sorted(range(len(masked)), key=lambda j: (-ps[j][A[j]], masked[j]))[:k]
                y = list(x)
                for j in conf:
                    y[masked[j]] = A[j]
                go(tuple(y), w * pr)

    go(tuple([q] * n), 1.0)
    out = np.zeros(q**n)
    for x, w in law.items():
        out[int(np.dot(x, q ** np.arange(n - 1, -1, -1)))] += w
    return out


CASES = [("any-order", 1, None), ("left-to-right", 1, [2, 0, 1]), ("parallel", 2, None), ("parallel", 3, None),
         ("confidence", 1, None), ("confidence", 2, None)]


@pytest.mark.parametrize("q,n,seed", [(2, 2, 0), (3, 3, 1), (2, 3, 4)])
@pytest.mark.parametrize("sampler,k,order", CASES)
def test_decoder_law_matches_recursion(q, n, seed, sampler, k, order):
    order = order if order is None or len(order) == n else None
    k = min(k, n)
    t = PartialScoreTable.random(q, n, seed=seed, scale=1.5, temperature=0.8)
    d = decoder_law(t, sampler, k=k, order=order)
    ref = exact_by_recursion(t, sampler, k, order)
    assert abs(d.law.sum() - 1) < 1e-14 and d.law.min() >= 0
    assert np.abs(d.law - ref).max() < 1e-14


def test_confidence_ties_and_truncation():
    q, n = 3, 3
    t = PartialScoreTable(StateSpace(q, n), np.zeros((n, (q + 1) ** (n - 1), q)))  # all uniform: every draw ties
    d = decoder_law(t, "confidence", k=1)
    assert np.abs(d.law - exact_by_recursion(t, "confidence", 1)).max() < 1e-15
    t = PartialScoreTable.random(4, 2, seed=7, scale=2.0)
    d = decoder_law(t, "parallel", k=1, top_k=2)
    ref = exact_by_recursion(t, "parallel", 1, top_k=2)
    assert np.abs(d.law - ref).max() < 1e-14
    assert (d.law == 0).sum() > 0  # truncation removes sequences


def simulate(t, sampler, k, rng, runs):
    """Monte Carlo runs of the decoder, written as the generation loop."""
    q, n = t.space.vocab_size, t.space.length
    counts = np.zeros(q**n)
    for _ in range(runs):
        x = [q] * n
        while q in x:
            masked = [i for i in range(n) if x[i] == q]
            if sampler == "any-order":
                i = masked[rng.integers(len(masked))]
                x[i] = rng.choice(q, p=cond(t, tuple(x), i))
            elif sampler == "parallel":
                G = rng.choice(masked, size=min(k, len(masked)), replace=False)
                draws = {i: rng.choice(q, p=cond(t, tuple(x), i)) for i in G}
                for i, a in draws.items():
                    x[i] = a
            else:
                draws = {i: rng.choice(q, p=cond(t, tuple(x), i)) for i in masked}
                conf = {i: cond(t, tuple(x), i)[a] for i, a in draws.items()}
                for i in sorted(masked, key=lambda j: (-conf[j], j))[:k]:
                    x[i] = draws[i]
        counts[int(np.dot(x, q ** np.arange(n - 1, -1, -1)))] += 1
    return counts


@pytest.mark.parametrize("sampler,k", [("any-order", 1), ("parallel", 2), ("confidence", 2)])
def test_decoder_law_against_monte_carlo(sampler, k):
    t = PartialScoreTable.random(2, 3, seed=11, scale=1.0)
    law = decoder_law(t, sampler, k=k).law
    runs = 3000
    counts = simulate(t, sampler, k, np.random.default_rng(2024), runs)
    assert chisquare(counts, runs * law).pvalue > 1e-3
    # the test has power: the law of another decoder is rejected by the same samples
    other = decoder_law(t, "parallel", k=3).law
    assert chisquare(counts, runs * other).pvalue < 1e-6


JOINTS = [IsingModel(nx.cycle_graph(4), couplings=0.9, fields=0.2),
          PottsModel.random(nx.path_graph(3), 3, seed=3, coupling_scale=1.5),
          LogWeightTable.random(StateSpace(2, 3), seed=5, scale=1.5)]


def kl(p, q):
    return float(np.sum(p * (np.log(p) - np.log(q))))


@pytest.mark.parametrize("src", JOINTS)
def test_chain_rule_identity_on_joints(src):
    p = src.joint()
    n = src.space.length
    t = PartialScoreTable.from_joint(src)
    # full conditionals of the table are the joint's
    ctx = src.space.all_states()
    for i in range(n):
        assert np.abs(t.log_conditionals(ctx, i) - src.log_conditionals(ctx, i)).max() < 1e-13
    # one at a time, any order: the joint exactly
    for sampler in ("any-order", "left-to-right"):
        assert np.abs(decoder_law(t, sampler).law - p).max() < 1e-14
    # one fully parallel step: KL = total correlation = sum_i H(X_i) - H(X)
    marg_h = sum(-np.sum(m * np.log(m)) for m in (p.reshape((src.space.vocab_size,) * n).sum(
        axis=tuple(j for j in range(n) if j != i)) for i in range(n)))
    tc = marg_h - (-np.sum(p * np.log(p)))
    assert tc > 1e-3
    assert abs(kl(p, decoder_law(t, "parallel", k=n).law) - tc) < 1e-12
    # a fixed schedule: the sum of expected conditional TCs
    sched = [[0, n - 1], list(range(1, n - 1))]
    mu = decoder_law(t, "schedule", schedule=sched).law
    assert abs(kl(p, mu) - schedule_tc(src, sched)) < 1e-12
    # random blocks of size 2 (the parallel decoder): below the average over its schedules (convexity)
    par = decoder_law(t, "parallel", k=2).law
    assert n <= 4  # so that the parallel decoder with k = 2 makes two steps: a uniform pair G, then the rest
    schedules = [[list(G), [s for s in range(n) if s not in G]] for G in itertools.combinations(range(n), 2)]
    avg = np.mean([schedule_tc(src, s) for s in schedules])
    mix = np.mean([decoder_law(t, "schedule", schedule=s).law for s in schedules], axis=0)
    assert np.abs(mix - par).max() < 1e-14  # the parallel decoder is the mixture of its schedule laws
    assert kl(p, par) <= avg + 1e-12 and kl(p, par) < avg - 1e-6  # strict on these instances
    assert expected_conditional_tc(src, [0], [1]) == pytest.approx(0.0, abs=1e-13)


def test_full_table_and_validation():
    t = PartialScoreTable.random(3, 2, seed=0)
    full = t.full_table()
    assert isinstance(full, ScoreTable)
    assert np.array_equal(full.table[0], t.table[0, :3])
    with pytest.raises(ValueError):
        PartialScoreTable(StateSpace(2, 2), np.zeros((2, 2, 2)))
    with pytest.raises(ValueError):
        decoder_law(t, "nonsense")
    with pytest.raises(TypeError):
        decoder_law(full, "any-order")
    with pytest.raises(ValueError):
        decoder_law(t, "schedule", schedule="0")
    r = tv_kl(np.array([0.5, 0.5, 0.0]), 0.0, np.array([0.2, 0.3, 0.5]), 0.0, "x")
    assert r["kl"].lower == math.inf and r["tv"].value == pytest.approx(0.5)


def test_sympy_exact_rationals_on_the_smallest_frame():
    """|V| = 2, n = 2, scores log(w) with integer w: the decoders' laws are exact rationals."""
    import sympy

    q, n = 2, 2
    w = np.random.default_rng(9).integers(1, 7, size=(n, q + 1, q))
    t = PartialScoreTable(StateSpace(q, n), np.log(w.astype(float)))

    def p(i, other):  # p_i(. | x_other), other in {0, 1, 2 = masked}
        return [sympy.Rational(int(v), int(w[i, other].sum())) for v in w[i, other]]

    law = {"any-order": {}, "parallel": {}, "confidence": {}}
    for a, b in itertools.product(range(q), repeat=2):
        # any-order: site 0 first (prob 1/2) then site 1 given a, or the reverse
        law["any-order"][(a, b)] = (sympy.Rational(1, 2) * p(0, q)[a] * p(1, a)[b]
                                    + sympy.Rational(1, 2) * p(1, q)[b] * p(0, b)[a])
        law["parallel"][(a, b)] = p(0, q)[a] * p(1, q)[b]
        # confidence k = 1: both draw; the more probable draw is kept (ties: site 0), the other is redrawn
        total = sympy.Integer(0)
        for ya, yb in itertools.product(range(q), repeat=2):
            pa, pb = p(0, q)[ya], p(1, q)[yb]
            if pa >= pb and ya == a:
                total += pa * pb * p(1, a)[b]
            if pb > pa and yb == b:
                total += pa * pb * p(0, b)[a]
        law["confidence"][(a, b)] = total
    for sampler, k in (("any-order", 1), ("parallel", 2), ("confidence", 1)):
        exact = np.array([float(law[sampler][x]) for x in itertools.product(range(q), repeat=2)])
        assert sum(law[sampler].values()) == 1
        assert np.abs(decoder_law(t, sampler, k=k).law - exact).max() < 1e-15


def threshold_by_recursion(t, tau):
    """(law, expected steps) of the threshold rule by plain recursion over the draws."""
    q, n = t.space.vocab_size, t.space.length
    law = np.zeros(q**n)
    steps = [0.0]

    def go(x, w):
        masked = [i for i in range(n) if x[i] == q]
        if not masked:
            law[int(np.dot(x, q ** np.arange(n - 1, -1, -1)))] += w
            return
        steps[0] += w
        ps = [cond(t, x, i) for i in masked]
        for A in itertools.product(range(q), repeat=len(masked)):
            pr = math.prod(p[a] for p, a in zip(ps, A))
            keep = [j for j in range(len(masked)) if ps[j][A[j]] >= tau]
            if not keep:
                keep = [min(range(len(masked)), key=lambda j: (-ps[j][A[j]], masked[j]))]
            y = list(x)
            for j in keep:
                y[masked[j]] = A[j]
            go(tuple(y), w * pr)

    go(tuple([q] * n), 1.0)
    return law, steps[0]


@pytest.mark.parametrize("q,n,tau", [(2, 2, 0.6), (3, 3, 0.4), (2, 3, 0.9), (3, 2, 1.0)])
def test_threshold_decoder_matches_recursion(q, n, tau):
    t = PartialScoreTable.random(q, n, seed=q + n, scale=2.0)
    d = decoder_law(t, "threshold", threshold=tau)
    law, steps = threshold_by_recursion(t, tau)
    assert np.abs(d.law - law).max() < 1e-14 and abs(d.steps - steps) < 1e-13
    assert 1 - 1e-13 <= d.steps <= n + 1e-13
    if tau == 1.0:  # nothing reaches 1: one position per step, the most probable draw
        assert abs(d.steps - n) < 1e-13
        assert np.abs(d.law - decoder_law(t, "confidence", k=1).law).max() < 1e-14
