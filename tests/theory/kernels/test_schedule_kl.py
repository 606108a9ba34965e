"""The expected KL of a random-order schedule (mlmix.theory.kernels.schedule_kl) against brute force: exact
rational schedule laws averaged over every order with mpmath logarithms, the chain-rule total correlations of
the decoder module (Hypothesis over Dirichlet, Ising, Potts, HMM and bigram joints, L <= 6), exhaustive search
over compositions, and the copy law that attains the sharp bound."""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import product

import mpmath
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.kernels import schedule_kl as skl
from mlmix.theory.kernels.decoders import schedule_tc
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, PottsModel
from mlmix.theory.sources.space import StateSpace


def _rational_joint(q: int, n: int, seed: int) -> tuple[dict, LogWeightTable]:
    rng = np.random.default_rng(seed)
    w = rng.integers(1, 9, size=q**n)
    w[rng.random(q**n) < 0.2] = 0
    w[0] = max(w[0], 1)
    total = int(w.sum())
    states = list(product(range(q), repeat=n))
    p = {x: Fraction(int(wi), total) for x, wi in zip(states, w)}
    return p, LogWeightTable.from_probabilities(StateSpace(q, n), w / total)


def _marginal(p: dict, sites: tuple[int, ...], x: tuple[int, ...]) -> Fraction:
    return sum((v for y, v in p.items() if all(y[s] == x[s] for s in sites)), Fraction(0))


def _brute_expected_kl(p: dict, sizes: tuple[int, ...]) -> mpmath.mpf:
    """mean over ordered block partitions G of sum_x p(x) log(p(x) / q_G(x)), q_G exact in Fractions."""
    mpmath.mp.dps = 40
    total, count = mpmath.mpf(0), 0
    for blocks in skl.ordered_blocks(sizes):
        count += 1
        for x, px in p.items():
            if px == 0:
                continue
            qx, seen = Fraction(1), ()
            for block in blocks:
                base = _marginal(p, seen, x)
                for i in block:
                    qx *= _marginal(p, tuple(sorted(seen + (i,))), x) / base
                seen = tuple(sorted(seen + block))
            total += mpmath.mpf(px.numerator) / px.denominator * mpmath.log(mpmath.mpf(px.numerator * qx.denominator)
                                                                           / (px.denominator * qx.numerator))
    return total / count


@pytest.mark.parametrize("q, n, seed, sizes", [(3, 3, 1, (2, 1)), (3, 3, 2, (1, 2)), (2, 4, 3, (2, 2)),
                                               (2, 4, 4, (3, 1)), (3, 4, 5, (1, 2, 1)), (3, 4, 6, (4,))])
def test_identity_matches_exact_rational_average_over_orders(q, n, seed, sizes):
    p, source = _rational_joint(q, n, seed)
    curve = skl.entropy_curve(source)
    want = float(_brute_expected_kl(p, sizes))
    got = skl.schedule_kl(curve, sizes)
    assert abs(float(got) - want) <= 2 * got.upper - 2 * float(got) + 1e-14
    by_orders = skl.expected_kl_by_orders(source, sizes)
    assert abs(float(by_orders) - want) <= by_orders.upper - by_orders.lower + 1e-14


def _joints() -> st.SearchStrategy:
    seeds = st.integers(0, 2**31)
    dirichlet = st.builds(lambda q, n, a, s: LogWeightTable.from_probabilities(
        StateSpace(q, n), np.random.default_rng(s).dirichlet(np.full(q**n, a))),
        st.sampled_from((2, 3)), st.integers(2, 4), st.sampled_from((0.1, 0.5, 1.0, 5.0)), seeds)
    ising = st.builds(lambda n, beta, s: IsingModel(nx.cycle_graph(n), couplings={
        e: float(j) for e, j in zip(nx.cycle_graph(n).edges, np.random.default_rng(s).normal(size=n))},
        fields=np.random.default_rng(s + 1).normal(scale=0.5, size=n), beta=beta),
        st.integers(3, 6), st.sampled_from((0.2, 1.0, 3.0)), seeds)
    potts = st.builds(lambda n, s: PottsModel.random(nx.path_graph(n), 3, seed=s, coupling_scale=1.5),
                      st.integers(2, 5), seeds)
    hmm = st.builds(_hmm, st.integers(2, 6), st.sampled_from((2, 3)), seeds)
    ngram = st.builds(_bigram, st.integers(2, 6), st.sampled_from((2, 3)), seeds)
    return st.one_of(dirichlet, ising, potts, hmm, ngram)


def _from_probabilities(q: int, n: int, p: np.ndarray) -> LogWeightTable:
    return LogWeightTable.from_probabilities(StateSpace(q, n), p.reshape(-1))


def _bigram(n: int, q: int, seed: int) -> LogWeightTable:
    """A Markov chain (2-gram) on V^n: p(x) = p0(x_1) prod_t P(x_t, x_(t+1)), Dirichlet rows."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(q, 0.5))
    P = rng.dirichlet(np.full(q, 0.5), size=q)
    for _ in range(n - 1):
        p = np.einsum("...a,ab->...ab", p, P)
    return _from_probabilities(q, n, p)


def _hmm(n: int, q: int, seed: int) -> LogWeightTable:
    """A hidden Markov model with 2 hidden states and emissions on V: the joint of the emissions."""
    rng = np.random.default_rng(seed)
    A, B, pi = rng.dirichlet(np.ones(2), size=2), rng.dirichlet(np.full(q, 0.5), size=2), rng.dirichlet(np.ones(2))
    joint = np.zeros(q**n)
    for k, x in enumerate(product(range(q), repeat=n)):
        alpha = pi * B[:, x[0]]
        for t in range(1, n):
            alpha = (alpha @ A) * B[:, x[t]]
        joint[k] = alpha.sum()
    return _from_probabilities(q, n, joint)


def _sizes(n: int) -> st.SearchStrategy:
    return st.integers(1, n).flatmap(lambda K: st.sampled_from(list(skl.compositions(n, K))))


@settings(max_examples=25, deadline=None)
@given(_joints(), st.data())
def test_identity_against_chain_rule_totals_over_orders(source, data):
    """The identity against sum_t E TC(G_t | G_<t) (decoders.schedule_tc, marginal entropies) averaged over
    every ordered partition; the sharp bound holds; h is non-increasing."""
    n = source.space.length
    sizes = data.draw(_sizes(n))
    curve = skl.entropy_curve(source)
    blocks = list(skl.ordered_blocks(sizes))
    want = sum(schedule_tc(source, [list(b) for b in bl]) for bl in blocks) / len(blocks)
    got = skl.schedule_kl(curve, sizes)
    assert abs(float(got) - want) <= (got.upper - got.lower) + 1e-12 * max(1.0, want)
    assert np.all(np.diff(curve.h) <= 2 * curve.abs_error)
    assert got.lower <= skl.sharp_bound(curve, sizes).upper


@settings(max_examples=25, deadline=None)
@given(_joints(), st.data())
def test_dynamic_programme_equals_exhaustive_search(source, data):
    curve = skl.entropy_curve(source)
    n = curve.length
    K = data.draw(st.integers(1, n))
    best, value = skl.optimal_schedule(curve, K)
    exhaustive = min(float(skl.schedule_kl(curve, c)) for c in skl.compositions(n, K))
    assert sum(best) == n and len(best) == K
    assert abs(float(value) - exhaustive) <= 1e-12
    assert float(value) <= min(float(skl.schedule_kl(curve, s)) for s in skl.common_schedules(n, K).values()) + 1e-12


@pytest.mark.parametrize("q, n", [(2, 2), (2, 5), (3, 4), (4, 3), (3, 5)])
def test_copy_law_attains_the_sharp_bound(q, n):
    """All tokens equal, uniform on V: h = (log q, 0, ..., 0), E KL = (k_1 - 1) log q, bound (s_max - 1) log q."""
    p = np.zeros(q**n)
    p[[v * sum(q**j for j in range(n)) for v in range(q)]] = 1.0 / q
    curve = skl.entropy_curve(LogWeightTable.from_probabilities(StateSpace(q, n), p))
    for s in range(1, n + 1):
        sizes = (s,) + (1,) * (n - s)
        kl, bound = skl.schedule_kl(curve, sizes), skl.sharp_bound(curve, sizes)
        assert abs(float(kl) - (s - 1) * math.log(q)) <= 1e-12
        assert abs(float(kl) - float(bound)) <= 1e-12
    assert abs(float(curve.mutual_information_sum()) - n * math.log(q)) <= 1e-12


def test_common_schedules_are_compositions():
    for n in range(1, 9):
        for K in range(1, n + 1):
            for name, sizes in skl.common_schedules(n, K).items():
                assert len(sizes) == K and sum(sizes) == n and min(sizes) >= 1, (name, n, K, sizes)


@pytest.mark.parametrize("sizes, error", [("3,2", ValueError), ("2,x", ValueError), ((0, 4), ValueError),
                                          (3.5, TypeError)])
def test_bad_sizes_are_one_line_errors(sizes, error):
    with pytest.raises(error) as info:
        skl.check_sizes(sizes, 4)
    assert "\n" not in str(info.value)


def test_a_source_without_joint_is_refused():
    from mlmix.theory.sources.partial import PartialScoreTable
    with pytest.raises(TypeError, match="joint"):
        skl.entropy_curve(PartialScoreTable.random(2, 3, seed=0).full_table())
