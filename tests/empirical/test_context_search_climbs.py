"""The climbs of mlmix.empirical.model_constants.context_search, pair by pair: a worst context planted
for EVERY pair (i, j) (each its own pattern of the free sites) is found for each of them; on random
tiny BERTs and random score tables, with and without a pass budget, every searched value is at most
the enumerated supremum and attained by its witness; the budget is never exceeded and no score row is
asked twice."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import tiny_masked_lm

from mlmix.empirical.model_constants.context_search import search_worst_contexts
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.local.influence import aggregate_influence, influence_and_oscillation, pair_distances
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.theory.sources.space import StateSpace

#: float32 logits of the same context asked in two batches of different composition
TOL = 1e-5


class _Ledger(Conditionals):
    """A source that counts the score rows asked of it and records every (site, context x_{-i})."""

    def __init__(self, inner: Conditionals) -> None:
        super().__init__(inner.space, inner.temperature)
        self.inner, self.rows, self.asked = inner, 0, []

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        self.rows += contexts.shape[0]
        for x in np.asarray(contexts):
            y = np.array(x, dtype=np.int64)
            y[site] = 0
            self.asked.append((site, y.tobytes()))
        return self.inner.site_scores(contexts, site)


def _planted_pairs(q: int = 5, n: int = 5, weight: float = 0.2) -> tuple[ScoreTable, dict]:
    """For every pair (i, j), site i's score of symbol 1 + (j's rank among the other sites) is raised by
    weight (1 + 2 m_ij) when x_j = 2, m_ij the number of free sites k (not i, j) with x_k equal to the
    pair's own random pattern; plus small noise. Each pair's influence grows with its matches, so its
    supremum is at its pattern: 20 worst contexts, one per pair, in different places."""
    rng = np.random.default_rng(11)
    table = 0.01 * rng.standard_normal((n, q ** (n - 1), q))
    contexts = np.array(np.unravel_index(np.arange(q ** (n - 1)), (q,) * (n - 1))).T  # x_{-i}, in the table's order
    patterns = {}
    for i in range(n):
        others = [k for k in range(n) if k != i]
        for rank, j in enumerate(others):
            free = [c for c in range(n - 1) if c != rank]
            pattern = rng.integers(0, q, size=len(free))
            patterns[(i, j)] = {others[c]: int(v) for c, v in zip(free, pattern)}
            matches = (contexts[:, free] == pattern).sum(axis=1)
            table[i, :, rank + 1] += weight * (1 + 2 * matches) * (contexts[:, rank] == 2)
    return ScoreTable(StateSpace(q, n), table), patterns


def _check_witnesses(source: Conditionals, found, tol: float) -> None:
    for matrix, witnesses, part in ((found.rho_lower, found.witnesses, 0), (found.delta_lower, found.delta_witnesses, 1)):
        for (i, j), (x, y) in witnesses.items():
            assert np.flatnonzero(x != y).tolist() == [j]
            s = source.scores(np.stack([x, y]), i)
            assert pair_distances(s[0], s[1], source.temperature)[part] == pytest.approx(matrix[i, j], abs=tol)


def test_planted_worst_context_of_every_pair_is_found():
    table, patterns = _planted_pairs()
    exact, _ = influence_and_oscillation(table)
    enumeration = 5 * 5 ** 4
    off = ~np.eye(5, dtype=bool)
    for seed in range(3):
        found = search_worst_contexts(table, starts=1, seed=seed)
        for (i, j), pattern in patterns.items():
            x, y = found.witnesses[(i, j)]
            assert 2 in (x[j], y[j])
            assert {k: int(x[k]) for k in pattern} == pattern, (i, j)
        np.testing.assert_allclose(found.rho_lower, exact.rho_ij, rtol=0, atol=1e-12)
        assert found.converged and found.passes < enumeration / 2
        # uniform contexts with 5x the rows (n + n (n-1)(|V|-1) = 85 per context) leave entries 10% below
        rng = np.random.default_rng(seed)
        sampled, _ = influence_and_oscillation(table, rng.integers(0, 5, size=(5 * found.passes // 85, 5)))
        assert (sampled.rho_ij[off] / exact.rho_ij[off]).min() < 0.9


@lru_cache(maxsize=None)
def _tiny(q: int, n: int, model_seed: int) -> tuple[MaskedLMConditionals, ScoreTable]:
    model, tok = tiny_masked_lm("bert", words=("a", "b", "c", "!")[:q], seed=model_seed)
    source = MaskedLMConditionals(model, tok, n, device="cpu")
    return source, ScoreTable.from_conditionals(source)


@settings(max_examples=6, deadline=None)
@given(q=st.integers(3, 4), n=st.integers(3, 4), model_seed=st.integers(0, 3), seed=st.integers(0, 2**16),
       fraction=st.sampled_from([None, 0.2, 0.5]))
def test_tiny_bert_lower_bounds_never_above_enumeration(q, n, model_seed, seed, fraction):
    source, table = _tiny(q, n, model_seed)
    exact, osc = influence_and_oscillation(table)
    budget = None if fraction is None else max(1, int(fraction * n * q ** (n - 1)))
    ledger = _Ledger(source)
    found = search_worst_contexts(ledger, starts=1, seed=seed, max_passes=budget)
    assert np.all(found.rho_lower <= exact.rho_ij + TOL)
    assert np.all(found.delta_lower <= osc.delta_ij + TOL)
    whole = aggregate_influence(exact.rho_ij)
    assert found.rho <= whole.rho + 2 * n * TOL and found.alpha <= whole.alpha + 2 * n * TOL
    _check_witnesses(source, found, TOL)
    assert found.passes == ledger.rows <= (n * q ** (n - 1) if budget is None else budget)
    assert len(set(ledger.asked)) == len(ledger.asked)  # no pass made twice


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), q=st.integers(2, 6), n=st.integers(2, 5), starts=st.integers(1, 3),
       budget=st.integers(1, 400))
def test_budget_is_respected_and_no_row_is_asked_twice(seed, q, n, starts, budget):
    table = ScoreTable.random(q, n, seed=seed, scale=2.0)
    ledger = _Ledger(table)
    found = search_worst_contexts(ledger, max_passes=budget, starts=starts, seed=seed)
    assert found.passes == ledger.rows <= budget
    assert len(set(ledger.asked)) == len(ledger.asked)
    exact, osc = influence_and_oscillation(table)
    assert np.all(found.rho_lower <= exact.rho_ij + 1e-12) and np.all(found.delta_lower <= osc.delta_ij + 1e-12)
    _check_witnesses(table, found, 1e-12)
