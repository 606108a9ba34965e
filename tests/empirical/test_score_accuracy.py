"""The stated accuracy of a model's scores (mlmix.theory.sources.score_accuracy) travels with every table made
from the model and is charged by every certified bracket: on tiny random BERT / RoBERTa / ModernBERT models the
cached-table route and the streamed route both give brackets that contain the constants of the same model
evaluated in float64 (rho, alpha, Delta, T*, R), and miss them once the charge is removed; float32 and
float64 tables never share a cache entry; score files keep the arithmetic; AntiBERTy n = 2 (8 s)."""

import functools

import numpy as np
import pytest
import torch
from helpers import FR1, NEXT
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import tiny_masked_lm

from mlmix.empirical.model_constants import certify as cf
from mlmix.empirical.model_constants.streamed_rectangle import table_rectangle
from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.local.influence import aggregate_influence, contraction_temperature, influence_and_oscillation
from mlmix.theory.sources import score_accuracy as sa
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.theory.sources.scorefile import load_scores, save_scores

QUIET = {"progress": False, "log": lambda _: None}


def source(arch: str, seed: int, n: int, T: float = 1.0, dtype: str = "float32") -> MaskedLMConditionals:
    """A fresh model each time (a float64 source converts its model in place)."""
    model, tok = tiny_masked_lm(arch, seed=seed, hidden=32)
    return MaskedLMConditionals(model, tok, n, device="cpu", temperature=T, dtype=dtype)


@functools.lru_cache(maxsize=None)
def float64_truth(arch: str, seed: int, n: int, T: float) -> dict:
    """rho, alpha, Delta, T* and max R of the model evaluated in float64 (every context enumerated)."""
    table = tab.tabulate(source(arch, seed, n, T, "float64"), use_cache=False, **QUIET)
    infl, osc = influence_and_oscillation(table)
    agg, t_star = aggregate_influence(infl.rho_ij), contraction_temperature(osc.delta_ij)
    return {"rho": agg.rho, "alpha": agg.alpha, "delta": 4 * t_star, "contraction_temperature": t_star,
            "rectangle": table_rectangle(table.table, T).max}


def misses(out: cf.CertifiedConstants, truth: dict) -> list[str]:
    """The constants whose bracket does not contain the float64 value."""
    return [name for name, value in truth.items()
            if not getattr(out, name).lower <= value <= getattr(out, name).upper]


@settings(max_examples=8, deadline=None)
@given(arch=st.sampled_from(["bert", "roberta", "modernbert"]), seed=st.integers(0, 3), n=st.integers(2, 3),
       T=st.sampled_from([0.5, 1.0, 3.0]))
def test_cached_and_streamed_brackets_contain_the_float64_evaluation(arch, seed, n, T):
    truth = float64_truth(arch, seed, n, T)
    mlm = source(arch, seed, n, T)
    streamed = cf.certify(mlm, use_cache=False, log=lambda _: None)
    tab.tabulate(mlm, **QUIET)
    cached = cf.certify(mlm)  # the cached exact table: 0 passes
    assert streamed.passes > 0 and cached.passes == 0
    for out in (streamed, cached):
        assert out.score_accuracy.dtype == "float32" and out.score_accuracy.error > 0
        assert misses(out, truth) == []
        assert out.as_dict()["score_accuracy"] == out.score_accuracy.as_dict()
    # the same scores, the same charge: the two routes agree
    assert cached.rho.lower == streamed.rho.lower and cached.delta.upper == streamed.delta.upper


def test_the_brackets_miss_the_float64_evaluation_without_the_charge(monkeypatch):
    """With the float32 charge set to 0 the brackets are float64 rounding wide and miss the float64 values:
    the charge is what makes them contain them."""
    monkeypatch.setitem(sa.SCORE_ULPS, "float32", 0)
    missed = []
    for arch in ("bert", "roberta", "modernbert"):
        table = tab.tabulate(source(arch, 0, 2), use_cache=False, **QUIET)
        assert table.score_accuracy.error == 0.0
        missed += misses(cf.certify(table), float64_truth(arch, 0, 2, 1.0))
    assert {"rho", "delta", "contraction_temperature"} <= set(missed)


def test_a_float64_source_scores_in_float64_with_its_own_charge():
    s32, s64 = source("bert", 1, 2), source("bert", 1, 2, dtype="float64")
    x = np.array([[0, 1], [2, 3]])
    a, b = s32.scores(x, 0), s64.scores(x, 0)
    assert s64.score_dtype == torch.float64 and next(s64.model.parameters()).dtype == torch.float64
    t32, t64 = (tab.tabulate(s, use_cache=False, **QUIET) for s in (s32, s64))
    assert t64.table.dtype == np.float64 and t64.score_accuracy.dtype == "float64"
    assert 0 < np.abs(a - b).max() <= t32.score_accuracy.error  # float32 within its charge of float64
    assert t64.score_accuracy.error == pytest.approx(t32.score_accuracy.error * 2.0**-29, rel=1e-6)
    narrow, wide = cf.certify(t64), cf.certify(t32)
    assert narrow.rho.upper - narrow.rho.lower < 1e-6 * (wide.rho.upper - wide.rho.lower)


def test_float32_and_float64_tables_have_their_own_cache_entries(tmp_path):
    s32, s64 = source("roberta", 2, 2), source("roberta", 2, 2, dtype="float64")
    k32, k64 = tab.table_key(s32), tab.table_key(s64)
    assert k32[0] != k64[0] and (k32[1]["dtype"], k64[1]["dtype"]) == ("float32", "float64")
    first = tab.tabulate(s32, cache_dir=tmp_path, **QUIET)
    assert tab.cached_table(s64, tmp_path) is None  # never the float32 table
    second = tab.tabulate(s64, cache_dir=tmp_path, **QUIET)
    again = tab.cached_table(s64, tmp_path)
    assert again.score_accuracy == second.score_accuracy and again.score_accuracy.dtype == "float64"
    assert tab.cached_table(s32, tmp_path).score_accuracy == first.score_accuracy
    assert again.describe()["score_accuracy"]["dtype"] == "float64"
    assert not np.array_equal(first.table, second.table)


def test_tables_given_as_numbers_are_exact_and_score_files_keep_the_arithmetic(tmp_path):
    given_table = ScoreTable.random(3, 2, seed=0)
    assert given_table.score_accuracy == sa.EXACT and cf.certify(given_table).score_accuracy.error == 0.0
    mlm = source("bert", 3, 2)
    queried = ScoreTable.from_conditionals(mlm)
    assert queried.score_accuracy.dtype == "float32" and queried.score_accuracy.error > 0
    table = tab.tabulate(mlm, use_cache=False, **QUIET)
    save_scores(tmp_path / "s.npz", table)
    back = load_scores(tmp_path / "s.npz")
    assert back.score_accuracy == table.score_accuracy
    assert cf.certify(back).rho.upper == cf.certify(table).rho.upper
    save_scores(tmp_path / "g.npz", given_table)
    assert load_scores(tmp_path / "g.npz").score_accuracy == sa.EXACT


def test_the_charge_and_bad_input():
    acc = sa.ScoreAccuracy.of("float32", 2.0)
    assert acc.error >= 256 * 2.0**-24 * 2.0 and acc.error == np.nextafter(256 * 2.0**-24 * 2.0, np.inf)
    assert sa.ScoreAccuracy.of("exact", 5.0) == sa.EXACT and sa.ScoreAccuracy.of("bfloat16", 0.0).error == 0.0
    assert sa.max_abs_score(np.array([[-np.inf, -3.0, 1.0]])) == 3.0
    with pytest.raises(ValueError, match="no stated score accuracy"):
        sa.ScoreAccuracy.of("int8", 1.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        sa.ScoreAccuracy.of("float32", float("nan"))
    with pytest.raises(TypeError, match="score_accuracy must be a ScoreAccuracy"):
        ScoreTable(ScoreTable.random(2, 2).space, np.zeros((2, 2, 2)), score_accuracy=1e-6)


def test_antiberty_n2_brackets_contain_the_float64_evaluation(converted, tmp_path, monkeypatch):
    """Frame LR at n = 2, T = 1 (40 passes a dtype): the cached float32 table's brackets contain the float64
    evaluation of AntiBERTy, and the float64 run's much narrower brackets contain it too."""
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path))
    frame = {"prefix": FR1, "suffix": NEXT[2], "candidates": "A C D E F G H I K L M N P Q R S T V W Y"}
    make = functools.partial(MaskedLMConditionals.from_pretrained, converted, 2, device="cpu", progress=False, **frame)
    t64 = tab.tabulate(make(dtype="float64"), **QUIET)
    infl, osc = influence_and_oscillation(t64)
    truth = {"rho": aggregate_influence(infl.rho_ij).rho, "contraction_temperature": contraction_temperature(osc.delta_ij)}
    tab.tabulate(make(dtype="float32"), **QUIET)
    wide, narrow = cf.certify(make(dtype="float32")), cf.certify(make(dtype="float64"))
    assert wide.passes == narrow.passes == 0
    assert misses(wide, truth) == [] and misses(narrow, truth) == []
    assert narrow.contraction_temperature.upper - narrow.contraction_temperature.lower < 1e-9
