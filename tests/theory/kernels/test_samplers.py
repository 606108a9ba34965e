"""Systematic scan and Metropolis-Hastings kernels against brute force written here."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
import sympy

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.kernels.scan_and_mh import (
    Truncated,
    energy,
    mh_acceptance,
    mh_kernel,
    systematic_kernel,
    target_law,
    truncate_log_probs,
)
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, PottsModel, ScoreTable
from mlmix.theory.sources.space import StateSpace


def states_of(q: int, n: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(q), repeat=n))  # first site most significant, as StateSpace


def cond_loop(table: np.ndarray, q: int, n: int, x: tuple, i: int, T: float = 1.0) -> np.ndarray:
    """p_i(. | x_{-i}) straight from table[i, c, :], c the base-q number of x_{-i}."""
    rest = [x[j] for j in range(n) if j != i]
    c = 0
    for d in rest:
        c = c * q + d
    s = table[i, c] / T
    w = np.exp(s - s.max())
    return w / w.sum()


def brute_systematic(table, q, n, order, T=1.0):
    S = states_of(q, n)
    idx = {x: k for k, x in enumerate(S)}
    P = np.eye(len(S))
    for i in order:
        Pi = np.zeros((len(S), len(S)))
        for x in S:
            p = cond_loop(table, q, n, x, i, T)
            for a in range(q):
                y = list(x)
                y[i] = a
                Pi[idx[x], idx[tuple(y)]] += p[a]
        P = P @ Pi
    return P


def brute_energy(table, q, n, kind, T=1.0):
    S = states_of(q, n)
    E = np.zeros(len(S))
    for k, x in enumerate(S):
        for i in range(n):
            rest = [x[j] for j in range(n) if j != i]
            c = 0
            for d in rest:
                c = c * q + d
            E[k] -= table[i, c, x[i]] / T if kind == "logit" else math.log(cond_loop(table, q, n, x, i, T)[x[i]])
    return E


def brute_mh(table, q, n, E, T=1.0):
    """The acceptance rule of the issue, literally."""
    S = states_of(q, n)
    idx = {x: k for k, x in enumerate(S)}
    P = np.zeros((len(S), len(S)))
    for x in S:
        for i in range(n):
            p = cond_loop(table, q, n, x, i, T)
            for a in range(q):
                y = list(x)
                y[i] = a
                y = tuple(y)
                ratio = math.exp(-E[idx[y]]) * p[x[i]] / (math.exp(-E[idx[x]]) * p[a])
                acc = min(1.0, ratio)
                P[idx[x], idx[y]] += p[a] * acc / n
                P[idx[x], idx[x]] += p[a] * (1 - acc) / n
    return P


@pytest.mark.parametrize("q,n,seed", [(2, 2, 0), (3, 3, 1), (2, 3, 2)])
def test_systematic_matches_brute_force(q, n, seed):
    src = ScoreTable.random(q, n, seed=seed, temperature=0.7)
    for order in (list(range(n)), list(range(n))[::-1], [n - 1] + list(range(n))):
        P = systematic_kernel(src, order)
        assert np.abs(P - brute_systematic(src.table, q, n, order, 0.7)).max() < 1e-13
        assert np.abs(P.sum(axis=1) - 1).max() < 1e-13


@pytest.mark.parametrize("q,n,seed", [(2, 2, 0), (3, 3, 1)])
@pytest.mark.parametrize("kind", ["logit", "pll"])
def test_mh_matches_brute_force_and_is_reversible(q, n, seed, kind):
    T = 1.3
    src = ScoreTable.random(q, n, seed=seed, temperature=T)
    E = brute_energy(src.table, q, n, kind, T)
    assert np.abs(energy(src, kind) - E).max() < 1e-12
    P = mh_kernel(src, kind).toarray()
    assert np.abs(P - brute_mh(src.table, q, n, E, T)).max() < 1e-13
    w = np.exp(-(E - E.min()))
    pi = w / w.sum()
    assert np.abs(target_law(src, kind) - pi).max() < 1e-14
    assert np.abs(pi @ P - pi).max() < 1e-12  # stationarity of exp(-E)/Z
    F = pi[:, None] * P
    assert np.abs(F - F.T).max() < 1e-14  # detailed balance
    chain = Chain.from_source(src, f"mh-{kind}")
    assert chain.is_reversible
    assert np.abs(chain.stationary.value - pi).max() < 1e-12


def test_mh_acceptance_rate_brute_force():
    q, n, T = 3, 2, 0.8
    src = ScoreTable.random(q, n, seed=5, temperature=T)
    E = brute_energy(src.table, q, n, "pll", T)
    w = np.exp(-(E - E.min()))
    pi = w / w.sum()
    acc = move = 0.0
    for k, x in enumerate(states_of(q, n)):
        for i in range(n):
            p = cond_loop(src.table, q, n, x, i, T)
            for a in range(q):
                y = list(x)
                y[i] = a
                ky = states_of(q, n).index(tuple(y))
                alpha = min(1.0, math.exp(-E[ky]) * p[x[i]] / (math.exp(-E[k]) * p[a]))
                acc += pi[k] * p[a] * alpha / n
                move += pi[k] * p[a] * alpha / n * (a != x[i])
    res = mh_acceptance(src, "pll")
    assert abs(res["acceptance_rate"].value - acc) < 1e-13 and abs(res["move_rate"].value - move) < 1e-13
    P = mh_kernel(src, "pll").toarray()
    assert abs(res["move_rate"].value - (pi * (1 - np.diag(P))).sum()) < 1e-13
    assert 0 < res["move_rate"].value < res["acceptance_rate"].value < 1


def _rational_table(q: int, n: int, seed: int) -> tuple[np.ndarray, list]:
    """Scores log(w) with small integer weights w: the conditionals are exact rationals."""
    rng = np.random.default_rng(seed)
    w = rng.integers(1, 6, size=(n, q ** (n - 1), q))
    return np.log(w.astype(float)), w.tolist()


def test_sympy_exact_smallest():
    q, n = 2, 2
    table, w = _rational_table(q, n, 3)
    src = ScoreTable(StateSpace(q, n), table)
    S = states_of(q, n)
    idx = {x: k for k, x in enumerate(S)}

    def p(x, i):
        c = x[1 - i]
        tot = sum(w[i][c])
        return [sympy.Rational(v, tot) for v in w[i][c]]

    # systematic scan 0 then 1, exact; its stationary law by an exact null space
    P0 = sympy.zeros(4, 4)
    P1 = sympy.zeros(4, 4)
    for x in S:
        for a in range(q):
            P0[idx[x], idx[(a, x[1])]] += p(x, 0)[a]
            P1[idx[x], idx[(x[0], a)]] += p(x, 1)[a]
    Ps = P0 * P1
    assert np.abs(np.array(Ps, dtype=float) - systematic_kernel(src, [0, 1])).max() < 1e-15
    ns = (Ps.T - sympy.eye(4)).nullspace()[0]
    pi_exact = np.array([float(v) for v in ns / sum(ns)])
    assert np.abs(Chain.from_source(src, "systematic").stationary.value - pi_exact).max() < 1e-14
    # MH with the logit energy: exp(-E(x)) = prod_i w_i(x_i | x_-i), an integer
    expE = {x: sympy.Integer(w[0][x[1]][x[0]] * w[1][x[0]][x[1]]) for x in S}
    Pm = sympy.zeros(4, 4)
    for x in S:
        for i in range(n):
            for a in range(q):
                y = list(x)
                y[i] = a
                y = tuple(y)
                alpha = sympy.Min(1, expE[y] * p(x, i)[x[i]] / (expE[x] * p(x, i)[a]))
                Pm[idx[x], idx[y]] += p(x, i)[a] * alpha / n
                Pm[idx[x], idx[x]] += p(x, i)[a] * (1 - alpha) / n
    pi_m = sympy.Matrix([expE[x] for x in S]) / sum(expE.values())
    assert (pi_m.T * Pm - pi_m.T).applyfunc(sympy.simplify) == sympy.zeros(1, 4)  # exactly stationary
    assert np.abs(np.array(Pm, dtype=float) - mh_kernel(src, "logit").toarray()).max() < 1e-15


@pytest.mark.parametrize("src", [IsingModel(nx.cycle_graph(4), couplings=0.8, fields=0.3),
                                 PottsModel.random(nx.path_graph(3), 3, seed=2),
                                 LogWeightTable.random(StateSpace(3, 3), seed=4, scale=2.0)])
def test_systematic_scan_on_compatible_source_keeps_the_joint(src):
    joint = src.joint()
    n = src.space.length
    for order in (list(range(n)), list(range(n))[::-1], [1, 0] + list(range(2, n)) + [0]):
        chain = Chain.from_source(src, "systematic", order=order)
        assert np.abs(joint @ chain.P - joint).max() < 1e-13
        assert np.abs(chain.stationary.value - joint).max() < 1e-12


def test_systematic_scan_order_matters_on_incompatible_table():
    src = ScoreTable.random(2, 3, seed=0, scale=2.0)
    a = Chain.from_source(src, "systematic", order=[0, 1, 2]).stationary.value
    b = Chain.from_source(src, "systematic", order=[2, 1, 0]).stationary.value
    g = Chain.from_source(src, "glauber").stationary.value
    assert 0.5 * np.abs(a - b).sum() > 1e-3 and 0.5 * np.abs(a - g).sum() > 1e-3


@pytest.mark.parametrize("src", [IsingModel(nx.cycle_graph(4), couplings=1.1, fields=-0.2, temperature=0.7),
                                 PottsModel.random(nx.path_graph(3), 3, seed=1)])
def test_glauber_equals_mh_with_minus_log_p(src):
    E = -src.log_joint()
    P = mh_kernel(src, E).toarray()
    G = glauber_kernel(src).toarray()
    assert np.abs(P - G).max() < 1e-14
    assert abs(mh_acceptance(src, E)["acceptance_rate"].value - 1) < 1e-12
    # the named energies are not -log p: MH then targets another law and rejects some proposals
    assert mh_acceptance(src, "logit")["acceptance_rate"].value < 1 - 1e-3


def test_truncation():
    lp = np.log(np.array([[0.5, 0.2, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]]))
    k2 = np.exp(truncate_log_probs(lp, top_k=2))
    assert np.allclose(k2[0], [0.5 / 0.9, 0.2 / 0.9, 0.2 / 0.9, 0]) and np.allclose(k2[1], 0.25)  # ties kept
    p6 = np.exp(truncate_log_probs(lp, top_p=0.6))
    assert np.allclose(p6[0], [0.5 / 0.9, 0.2 / 0.9, 0.2 / 0.9, 0])
    p5 = np.exp(truncate_log_probs(lp, top_p=0.45))
    assert np.allclose(p5[0], [1, 0, 0, 0])
    rng = np.random.default_rng(0)  # ties everywhere: brute force of "mass strictly above < p"
    for _ in range(100):
        q = int(rng.integers(2, 7))
        w = rng.integers(1, 5, size=(4, q)).astype(float)
        w /= w.sum(axis=-1, keepdims=True)
        for cut in (0.1234, 0.2718, 0.5772, 0.7071, 0.9137, 1.0):  # away from the masses k / sum (rounding)
            kept = np.isfinite(truncate_log_probs(np.log(w), top_p=cut))
            ref = np.array([[w[r][w[r] > w[r][v]].sum() < cut for v in range(q)] for r in range(4)])
            assert (kept == ref).all()
    src = ScoreTable.random(4, 2, seed=3, temperature=2.0)
    t = Truncated(src, top_k=2)
    ctx = np.zeros((1, 2), dtype=np.int64)
    s = src.scores(ctx, 0)[0] / 2.0
    keep = np.argsort(-s)[:2]
    ref = np.zeros(4)
    ref[keep] = np.exp(s[keep]) / np.exp(s[keep]).sum()  # temperature first, then truncation
    assert np.abs(np.exp(t.log_conditionals(ctx, 0)[0]) - ref).max() < 1e-15
    P = glauber_kernel(t).toarray()
    assert np.abs(P.sum(axis=1) - 1).max() < 1e-13 and (P > 0).sum(axis=1).max() <= 1 + 2 * 1 * 2
    with pytest.raises(ValueError):
        Truncated(src, top_k=5)
    with pytest.raises(ValueError):
        truncate_log_probs(lp, top_p=0.0)


def test_cli_kernels(capsys):
    from mlmix.cli import main

    assert main(["exact", "--model", "scores", "--vocab", "2", "--length", "3", "--kernel", "mh",
                 "--energy", "pll", "--json"]) == 0
    out = capsys.readouterr().out
    assert "acceptance_rate" in out
    assert main(["exact", "--model", "scores", "--vocab", "2", "--length", "3", "--kernel", "systematic",
                 "--order", "0 2"]) == 2
