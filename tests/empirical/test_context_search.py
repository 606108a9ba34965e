"""The searched lower bounds of rho_ij and Delta_ij (mlmix.empirical.model_constants.context_search) against the
enumerated exact values: sound (never above the supremum), attained by their witnesses, within the
pass budget, and finding a planted worst context that uniform sampling misses."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import tiny_masked_lm

from mlmix.empirical.model_constants.context_search import search_worst_contexts
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.local.influence import influence_and_oscillation, pair_distances
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.theory.sources.space import StateSpace

#: float32 logits of the same context asked in two batches of different composition
TOL = 1e-5


@lru_cache(maxsize=None)
def _tiny(arch: str, q: int, n: int, seed: int) -> tuple[MaskedLMConditionals, ScoreTable]:
    words = ("a", "b", "c", "!")[:q]
    model, tok = tiny_masked_lm(arch, words=words, seed=seed)
    source = MaskedLMConditionals(model, tok, n, device="cpu")
    return source, ScoreTable.from_conditionals(source)


class _Counting(Conditionals):
    """A source that counts the score rows asked of it."""

    def __init__(self, inner: Conditionals) -> None:
        super().__init__(inner.space, inner.temperature)
        self.inner, self.rows = inner, 0

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        self.rows += contexts.shape[0]
        return self.inner.site_scores(contexts, site)


def _check_witnesses(source: Conditionals, found, tol: float) -> None:
    for matrix, witnesses, part in ((found.rho_lower, found.witnesses, 0), (found.delta_lower, found.delta_witnesses, 1)):
        for (i, j), (x, y) in witnesses.items():
            assert np.flatnonzero(x != y).tolist() == [j]  # the two contexts differ at j only
            s = source.scores(np.stack([x, y]), i)
            value = pair_distances(s[0], s[1], source.temperature)[part]
            assert value == pytest.approx(matrix[i, j], abs=tol)


@settings(max_examples=8, deadline=None)
@given(arch=st.sampled_from(["bert", "roberta"]), q=st.integers(3, 4), n=st.integers(3, 4),
       model_seed=st.integers(0, 3), seed=st.integers(0, 2**16), starts=st.integers(1, 4))
def test_tiny_mlm_lower_bounds_are_sound_and_attained(arch, q, n, model_seed, seed, starts):
    source, table = _tiny(arch, q, n, model_seed)
    exact, osc = influence_and_oscillation(table)
    found = search_worst_contexts(source, starts=starts, seed=seed)
    assert np.all(found.rho_lower <= exact.rho_ij + TOL)
    assert np.all(found.delta_lower <= osc.delta_ij + TOL)
    assert found.rho <= exact.rho + 2 * n * TOL
    assert len(found.witnesses) == n * (n - 1)
    _check_witnesses(source, found, TOL)
    assert found.passes <= n * q ** (n - 1)  # rows are cached: never more than the whole table


@given(seed=st.integers(0, 2**16), q=st.integers(2, 5), n=st.integers(2, 4))
@settings(max_examples=30, deadline=None)
def test_score_table_bounds_and_pass_count(seed, q, n):
    table = ScoreTable.random(q, n, seed=seed, scale=2.0)
    exact, osc = influence_and_oscillation(table)
    counting = _Counting(table)
    found = search_worst_contexts(counting, starts=2, seed=seed)
    assert found.passes == counting.rows  # every row asked is counted once, none twice
    assert np.all(found.rho_lower <= exact.rho_ij + 1e-12)
    assert np.all(found.delta_lower <= osc.delta_ij + 1e-12)
    _check_witnesses(table, found, 1e-12)
    report = json.loads(json.dumps(found.as_dict()))
    assert report["passes"] == found.passes and report["rho"] == pytest.approx(found.rho)
    if n == 2:  # one column per pair is the whole supremum
        np.testing.assert_allclose(found.rho_lower, exact.rho_ij, rtol=0, atol=1e-12)


def _planted(q: int = 5, n: int = 5, pattern: tuple[int, ...] = (3, 1, 4), weight: float = 1.0) -> ScoreTable:
    """Site 0 reads whether x_1 = 2, the more strongly the more free sites 2..n-1 match ``pattern``:
    s_0 = weight (1 + m) 1{x_1 = 2} e_0 with m the number of matches, plus small noise; every other
    site is almost context free. The unique worst context of (0, 1) is x_{2..} = pattern, one of
    q^(n-2) = 125; each matching site raises the influence, so a climb reaches it from anywhere."""
    rng = np.random.default_rng(7)
    space = StateSpace(q, n)
    table = 0.01 * rng.standard_normal((n, q ** (n - 1), q))
    ctx = space.all_states()[: q ** (n - 1)]  # x_0 = 0: the contexts of site 0, in the table's order
    matches = (ctx[:, 2:] == np.asarray(pattern)).sum(axis=1)
    table[0, :, 0] += weight * (1 + matches) * (ctx[:, 1] == 2)
    return ScoreTable(space, table)


def test_planted_worst_context_is_found():
    table = _planted()
    exact, _ = influence_and_oscillation(table)
    enumeration = 5 * 5 ** 4
    for seed in range(3):
        found = search_worst_contexts(table, starts=2, seed=seed, pairs=[(0, 1)])
        x, y = found.witnesses[(0, 1)]
        assert 2 in (x[1], y[1])
        assert x[2:].tolist() == [3, 1, 4]
        assert found.rho_lower[0, 1] == pytest.approx(exact.rho_ij[0, 1], abs=1e-12)
        assert found.converged and found.passes < enumeration / 4
    # uniform contexts with 5x the rows (n + n (n-1)(|V|-1) = 85 per context), without the climb, stay below
    contexts = 5 * found.passes // 85
    for seed in range(3):
        rng = np.random.default_rng(seed)
        sampled, _ = influence_and_oscillation(table, rng.integers(0, 5, size=(contexts, 5)))
        assert sampled.rho_ij[0, 1] < 0.95 * exact.rho_ij[0, 1]


def test_max_passes_is_respected():
    table = ScoreTable.random(6, 4, seed=3, scale=2.0)
    free = search_worst_contexts(table, starts=3, seed=1)
    assert free.converged
    for budget in (1, 5, 6, 50, 200, free.passes - 1, free.passes):
        counting = _Counting(table)
        found = search_worst_contexts(counting, max_passes=budget, starts=3, seed=1)
        assert found.passes == counting.rows <= budget
        assert not found.converged or budget >= free.passes
    # a budget past the local maxima goes on best-first, up to the whole table at most
    whole = 4 * 6 ** 3
    ample = search_worst_contexts(table, max_passes=10 * whole, starts=3, seed=1)
    assert ample.converged and free.passes < ample.passes <= whole
    exact, _ = influence_and_oscillation(table)
    np.testing.assert_allclose(ample.rho_lower, exact.rho_ij, rtol=0, atol=1e-12)  # reached here, not in general
    nothing = search_worst_contexts(table, max_passes=5, starts=3, seed=1)  # one column is 6 rows
    assert nothing.passes == 0 and not nothing.witnesses and not nothing.rho_lower.any()


def test_bad_arguments_are_one_line_errors():
    table = ScoreTable.random(3, 3, seed=0)
    for kwargs, error in (({"max_passes": 0}, ValueError), ({"starts": 0}, ValueError), ({"starts": True}, TypeError),
                          ({"pairs": [(0, 0)]}, ValueError), ({"pairs": [(0, 3)]}, ValueError),
                          ({"pairs": []}, ValueError), ({"pairs": "01"}, TypeError), ({"seed": -1}, ValueError)):
        with pytest.raises(error) as info:
            search_worst_contexts(table, **kwargs)
        assert "\n" not in str(info.value)
