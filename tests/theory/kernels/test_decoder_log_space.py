"""The decoder law's dynamic programme in log space (mlmix.theory.kernels.decoders): against an mpmath recursion
over the decoders' random choices where linear space underflows (peaked score tables, a low-temperature
Ising model), and the refusal of tables whose rows are not conditional laws."""

from __future__ import annotations

import itertools

import mpmath as mp
import networkx as nx
import numpy as np
import pytest

from mlmix.cli import main
from mlmix.theory.kernels.decoders import PartialScoreTable, decoder_law, partial_log_probs
from mlmix.theory.sources.conditionals import IsingModel

mp.mp.dps = 40


def mp_cond(t: PartialScoreTable, x: tuple, i: int) -> list:
    """log p_i(. | x_S) in mpmath from the table's scores (mask = q in x)."""
    q, n = t.space.vocab_size, t.space.length
    c = 0
    for j in range(n):
        if j != i:
            c = c * (q + 1) + x[j]
    s = [mp.mpf(float(v)) / mp.mpf(t.temperature) for v in t.table[i, c]]
    norm = mp.log(mp.fsum(mp.exp(v) for v in s))
    return [v - norm for v in s]


def mp_law(t: PartialScoreTable, sampler: str, k: int = 1, blocks=None, tau: float = 0.5) -> dict:
    """The decoder's law in mpmath by recursion over its random choices (log-probabilities summed, then
    exponentiated in mpmath, which does not underflow): state -> probability."""
    q, n = t.space.vocab_size, t.space.length
    law: dict = {}

    def go(x, logw):
        masked = [i for i in range(n) if x[i] == q]
        if not masked:
            law[x] = law.get(x, mp.mpf(0)) + mp.exp(logw)
            return
        if sampler in ("any-order", "parallel", "schedule"):
            if sampler == "schedule":
                groups = [next(b for b in blocks if all(x[i] == q for i in b))]
            else:
                groups = list(itertools.combinations(masked, min(k, len(masked))))
            for G in groups:
                ps = [mp_cond(t, x, i) for i in G]
                for A in itertools.product(range(q), repeat=len(G)):
                    y = list(x)
                    for i, a in zip(G, A):
                        y[i] = a
                    go(tuple(y), logw + mp.fsum(p[a] for p, a in zip(ps, A)) - mp.log(len(groups)))
        else:  # confidence (k kept) or threshold (tau)
            ps = [mp_cond(t, x, i) for i in masked]
            for A in itertools.product(range(q), repeat=len(masked)):
                rank = sorted(range(len(masked)), key=lambda j: (-ps[j][A[j]], masked[j]))
                keep = rank[:k] if sampler == "confidence" else \
                    [j for j in rank if ps[j][A[j]] >= mp.log(tau)] or rank[:1]
                y = list(x)
                for j in keep:
                    y[masked[j]] = A[j]
                go(tuple(y), logw + mp.fsum(p[a] for p, a in zip(ps, A)))

    go(tuple([q] * n), mp.mpf(0))
    return law


def check_against_mpmath(t: PartialScoreTable, sampler: str, **kw) -> int:
    """Every log-law entry within the stated relative error of mpmath's; returns the number of entries
    below 1e-308 (those a linear-space programme loses)."""
    d = decoder_law(t, sampler, k=kw.get("k", 1), schedule=kw.get("blocks"), threshold=kw.get("tau"))
    ref = mp_law(t, sampler, **kw)
    q, n = t.space.vocab_size, t.space.length
    tiny = 0
    for x in itertools.product(range(q), repeat=n):
        idx = int(np.dot(x, q ** np.arange(n - 1, -1, -1)))
        if x not in ref:
            assert d.log_law[idx] == -np.inf
            continue
        exact = mp.log(ref[x])
        tiny += exact < mp.log(mp.mpf("1e-308"))
        assert abs(d.log_law[idx] - exact) <= d.rel_error, (x, d.log_law[idx], exact, d.rel_error)
    return tiny


PEAKED = [("any-order", {}), ("parallel", {"k": 2}), ("confidence", {"k": 2}), ("threshold", {"tau": 0.5}),
          ("schedule", {"blocks": [(2,), (0, 1)]})]


@pytest.mark.parametrize("sampler,kw", PEAKED)
def test_peaked_table_against_mpmath(sampler, kw):
    t = PartialScoreTable.random(2, 3, seed=5, scale=2000.0)
    tiny = check_against_mpmath(t, sampler, **kw)
    assert tiny >= 2  # the case is one where linear space underflows
    d = decoder_law(t, sampler, k=kw.get("k", 1), schedule=kw.get("blocks"), threshold=kw.get("tau"))
    assert (d.law[np.isfinite(d.log_law)] == 0).sum() >= 1  # exp(log_law) underflows there, log_law does not


def test_low_temperature_ising_against_mpmath():
    t = PartialScoreTable.from_joint(IsingModel(nx.cycle_graph(3), beta=300.0, fields=0.5))
    assert check_against_mpmath(t, "any-order") >= 2
    assert check_against_mpmath(t, "parallel", k=2) >= 2


@pytest.mark.parametrize("sampler,kw", PEAKED)
def test_ordinary_table_against_mpmath(sampler, kw):
    t = PartialScoreTable.random(3, 3, seed=2, scale=1.5, temperature=0.8)
    assert check_against_mpmath(t, sampler, **kw) == 0


def test_unnormalised_table_is_refused():
    t = PartialScoreTable.random(3, 3, seed=0)
    lp = partial_log_probs(t)
    with pytest.raises(ValueError, match=r"log_probs rows must sum to 1 \(tol 1e-09\); the conditional of site 0 at "
                                         r"partial assignment 0 sums to"):
        decoder_law(t, "any-order", log_probs=lp - 0.5)
    # within the tolerance: accepted and renormalised, the law of the normalised table
    near = decoder_law(t, "any-order", log_probs=lp + 1e-11)
    exact = decoder_law(t, "any-order", log_probs=lp)
    assert np.abs(near.log_law - exact.log_law).max() < 1e-13
    bad = lp.copy()
    bad[5, 1] = -np.inf  # a conditional with no mass
    with pytest.raises(ValueError, match="the conditional of site 1 at partial assignment 5 sums to 0.0"):
        decoder_law(t, "parallel", k=2, log_probs=bad)


def test_overflowing_conditional_is_one_line(capsys):
    t = PartialScoreTable.random(2, 3, seed=0, scale=1e300)
    hot = PartialScoreTable(t.space, np.abs(t.table), 1e-10)  # s / T = +inf twice in a row: NaN conditionals
    with pytest.raises(ValueError, match="holds NaN or \\+inf"):
        decoder_law(hot, "any-order")
    assert main(["decode", "--model", "scores", "--vocab", "2", "--length", "3", "--scale", "1e300",
                 "--temperature", "1e-10"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds NaN or +inf" in err and len(err.splitlines()) == 1
