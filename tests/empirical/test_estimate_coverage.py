"""Sampled estimates carry confidence intervals whose coverage is checked against exact values."""

from __future__ import annotations

import numpy as np
import pytest

from mlmix.empirical.model_constants.estimated_constants import (
    estimate,
    level_set,
    mean_interval,
    states_with_count,
    uniform_contexts,
)
from mlmix.theory.local.margins import count_drift
from mlmix.theory.local.rectangles import rectangle_summary, sample_rectangles
from mlmix.theory.sources.conditionals import ScoreTable

REPS = 200


def _covers(ci: dict, value: float, shrink: float = 1.0) -> bool:
    mid, half = (ci["lower"] + ci["upper"]) / 2, (ci["upper"] - ci["lower"]) / 2 * shrink
    return mid - half <= value <= mid + half


def test_rectangle_mean_interval_covers_the_exact_mean():
    """95% intervals of the sampled rectangle mean (uniform replacements: the exact all-rectangle mean is
    the estimand) cover it in 90-99% of 200 seeded repetitions; 100 rectangles share 16 contexts, so the
    cluster-robust interval is needed: the interval that treats them as independent, and the one of half
    the width, cover less than 90%."""
    src = ScoreTable.random(3, 4, seed=0)
    exact = rectangle_summary(src).mean
    cover = {"clustered": 0, "independent": 0, "half": 0}
    for rep in range(REPS):
        rng = np.random.default_rng(rep)
        r = sample_rectangles(src, uniform_contexts(src.space, 16, rng), 100, rng)
        ci = mean_interval(r.values, clusters=np.unique(r.states, axis=0, return_inverse=True)[1].ravel())
        cover["clustered"] += _covers(ci, exact)
        cover["half"] += _covers(ci, exact, 0.5)
        cover["independent"] += _covers(mean_interval(r.values), exact)
    assert 0.90 * REPS <= cover["clustered"] <= 0.99 * REPS
    assert cover["independent"] < 0.90 * REPS and cover["half"] < 0.90 * REPS


def test_drift_mean_interval_covers_the_exact_drift():
    src = ScoreTable.random(3, 4, seed=1)
    exact = float(count_drift(src, level_set(src.space, [0], 2), [0]).mean())
    cover = half = 0
    for rep in range(REPS):
        rng = np.random.default_rng(rep)
        ci = mean_interval(count_drift(src, states_with_count(src.space, [0], 2, 60, rng), [0]))
        cover += _covers(ci, exact)
        half += _covers(ci, exact, 0.5)
    assert 0.90 * REPS <= cover <= 0.99 * REPS
    assert half < 0.90 * REPS


def test_mean_interval_closed_form_and_degenerate():
    ci = mean_interval(np.array([1.0, 3.0]))  # mean 2, s = sqrt(2), t_{0.975, 1} = 12.7062
    assert ci["upper"] - 2 == pytest.approx(12.706204736174698 * np.sqrt(2) / np.sqrt(2), rel=1e-9)
    assert mean_interval(np.array([1.0]))["lower"] is None


def test_estimate_reports_intervals_and_suprema_as_lower_bounds():
    src = ScoreTable.random(3, 3, seed=2)
    rep = estimate(src, contexts=32, seed=0, top_k=None, drift_symbols=[0], drift_states=40)
    rect, drift, ex = rep["rectangle"], rep["drift"], rep["exact"]
    assert rect["mean_ci"]["lower"] <= rect["mean"] <= rect["mean_ci"]["upper"]
    assert "cluster" in rect["mean_ci"]["method"] and drift["mean_ci"]["level"] == 0.95
    rho = rep["rho"]
    column_sums = np.asarray(rep["rho_ij"]).sum(axis=0)  # rho = max_j sum_i rho_ij over the sample
    assert rho.value is None and rho.lower == pytest.approx(column_sums.max(), rel=1e-12) and rho.upper is None
    assert "lower bound" in rho.reason
    assert ex["rho"].value is not None and ex["rho"].rel_error is not None  # all contexts: exact to rounding
    assert rho.lower <= ex["rho"].value + 1e-12  # a sampled supremum never exceeds the exact one
    assert rect["supremum"].lower <= ex["rectangle"]["max"] + 1e-12
    assert "mean_ci" not in ex["drift"]
