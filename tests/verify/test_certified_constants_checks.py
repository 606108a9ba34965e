"""The checks of paper G's constants of a model under ``mlmix verify`` (verify/theorems/certified_constants.py):
each holds on the default search, and each fails when the code under test is made wrong (monkeypatched):
a bracket shrunk by 1% or with its ends swapped, a verdict taken on the wrong end, a streamed or searched
entry off by 1%, a witness of another pair, relaxation bounds narrowed by 1% or swapped."""

import dataclasses
import types

import numpy as np
import pytest

import mlmix.empirical.model_constants.relaxation as relaxation_module
from mlmix.empirical.model_constants import certify as cf
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.verify import instances as S
from mlmix.verify.mlm_instances import ModelSpec, masked_lm_source
from mlmix.verify.runner import load_theorems
from mlmix.verify.theorems import certified_constants as C
from mlmix.verify.verdicts import REGISTRY, search

load_theorems()

IDS = ("constants.certified-brackets", "constants.streamed", "constants.searched-lower-bounds", "constants.relaxation")


def table_case(q: int = 3, n: int = 3, table_seed: int = 1, T: float = 1.0, **options) -> C.Case:
    return C.Case(S.Instance(ScoreTable.random(q, n, seed=table_seed, scale=1.0, temperature=T), "gaussian-table",
                             {"seed": table_seed}), options)


def queried_case(T: float, **options) -> C.Case:
    case = table_case(T=T)
    return C.Case(S.Instance(C.Queried(case.source), case.inst.kind, case.inst.params), options)


def failing_search(theorem_id: str) -> str:
    """The status of a short search (no shrinking) of a theorem."""
    return search(REGISTRY[theorem_id], examples=12, seed=0, shrink=False).status


@pytest.mark.parametrize("theorem_id", IDS)
def test_each_check_holds_and_its_weakened_bounds_are_caught(theorem_id):
    report = search(REGISTRY[theorem_id], examples=5, seed=0)
    assert report.status == "holds", report.counterexample or report.errors
    assert report.weakened == "caught", report.weakened_parts


# ------------------------------------------------------------------------------------------- certify
def _interval(lower, upper):
    return types.SimpleNamespace(lower=lower, upper=upper)


def test_a_bracket_shrunk_by_one_percent_is_caught(monkeypatch):
    real = C.certify

    def shrunk(*args, **kwargs):
        out = real(*args, **kwargs)
        r = out.rho
        return dataclasses.replace(out, rho=_interval(r.lower, r.upper - 0.01 * abs(r.upper)))

    case = table_case(mode="enumeration")
    assert C.CertifiedBrackets().check(case).holds
    monkeypatch.setattr(C, "certify", shrunk)
    v = C.CertifiedBrackets().check(case)
    assert "upper end of rho >= enumerated rho" in v.failing()
    assert failing_search("constants.certified-brackets") == "fails"


def test_per_pair_ends_swapped_are_caught(monkeypatch):
    real = C.certify
    monkeypatch.setattr(C, "certify", lambda *a, **k: (lambda out: dataclasses.replace(
        out, rho_lower=out.rho_upper, rho_upper=out.rho_lower * 0.99))(real(*a, **k)))
    v = C.CertifiedBrackets().check(table_case(mode="enumeration"))
    assert "rho_ij upper ends >= enumerated rho_ij (worst pair)" in v.failing()
    assert failing_search("constants.certified-brackets") == "fails"


def test_a_verdict_on_the_lower_end_of_rho_is_caught(monkeypatch):
    """A cold table seen through one query: no context fits, rho's bracket is [0, n - 1] while rho >= 1."""
    case = queried_case(T=0.05, mode="bounds", max_passes=1, lower="uniform contexts", relaxation="none", seed=0)
    assert C.enumerated(case.source).rho >= 1
    assert C.CertifiedBrackets().check(case).holds
    real = cf.theorem5_verdict
    monkeypatch.setattr(cf, "theorem5_verdict", lambda rho, t_star, T: {"verdict": cf.APPLIES} if rho.lower < 1
                        else real(rho, t_star, T))
    assert "Theorem 5 'applies' only when the enumerated rho < 1" in C.CertifiedBrackets().check(case).failing()


def test_the_exact_delta_hook_gives_tight_upper_ends_through_lemma_6():
    case = queried_case(T=0.7, mode="bounds", max_passes=26, lower="search", relaxation="exact Delta", seed=3)
    out = C.run_certify(case)
    truth = C.enumerated(case.source)
    assert out.method.startswith("lower: worst-context search") and out.delta_upper is not None
    assert out.delta.upper == pytest.approx(4 * truth.t_star, rel=1e-12)
    assert np.all(out.rho_upper >= truth.rho_ij) and C.CertifiedBrackets().check(case).holds


# ------------------------------------------------------------------------------------------- streamed
def test_a_streamed_entry_off_by_one_percent_is_caught(monkeypatch):
    real = C.streamed_constants

    def off(*args, **kwargs):
        s = real(*args, **kwargs)
        rho = s.rho_ij.copy()
        rho[0, 1] *= 1.01
        return dataclasses.replace(s, rho_ij=rho)

    case = table_case(block_rows=2)
    assert C.StreamedConstants().check(case).holds
    monkeypatch.setattr(C, "streamed_constants", off)
    assert "streamed rho_ij = enumerated rho_ij" in C.StreamedConstants().check(case).failing()
    assert failing_search("constants.streamed") == "fails"


def test_a_streamed_witness_of_another_pair_is_caught(monkeypatch):
    real = C.streamed_constants

    def moved(*args, **kwargs):
        s = real(*args, **kwargs)
        w = [row[:] for row in s.rho_witness]
        w[0][1], w[0][2] = w[0][2], w[0][1]
        return dataclasses.replace(s, rho_witness=w)

    monkeypatch.setattr(C, "streamed_constants", moved)
    failing = C.StreamedConstants().check(table_case(block_rows=64)).failing()
    assert "every witness pair differs at j only" in failing


@pytest.mark.parametrize("factor", [0.99, 1.01])
def test_a_streamed_rectangle_statistic_off_by_one_percent_is_caught(monkeypatch, factor):
    real = C.streamed_constants

    def off(*args, **kwargs):
        s = real(*args, **kwargs)
        return dataclasses.replace(s, rectangle=dataclasses.replace(s.rectangle, max=s.rectangle.max * factor))

    case = table_case(block_rows=5)
    v = C.StreamedConstants().check(case)
    assert v.holds and any(p.name == "streamed R max = enumerated R max" for p in v.parts)
    monkeypatch.setattr(C, "streamed_constants", off)
    assert "streamed R max = enumerated R max" in C.StreamedConstants().check(case).failing()


def test_model_scores_are_compared_within_their_stated_accuracy():
    source = masked_lm_source(ModelSpec("roberta", 1), 3, 3, 0.8)
    v = C.StreamedConstants().check(C.Case(S.Instance(source, "tiny-mlm", {}), {"block_rows": 5}))
    assert v.holds and v.details["bit_for_bit"] is False
    assert all(p.lhs_error + p.rhs_error > 0 for p in v.parts[:2])


# ------------------------------------------------------------------------------------------- search
def test_a_searched_entry_above_the_supremum_is_caught(monkeypatch):
    real = C.search_worst_contexts
    monkeypatch.setattr(C, "search_worst_contexts", lambda *a, **k: (lambda f: dataclasses.replace(
        f, rho_lower=f.rho_lower * 1.01))(real(*a, **k)))
    case = table_case(max_passes=None, starts=4, seed=0)
    failing = C.SearchedLowerBounds().check(case).failing()
    assert "searched rho_ij <= enumerated rho_ij (worst pair)" in failing
    assert "witness TV re-evaluated = searched rho_ij" in failing
    assert failing_search("constants.searched-lower-bounds") == "fails"


def test_a_searched_witness_of_another_pair_is_caught(monkeypatch):
    real = C.search_worst_contexts

    def moved(*args, **kwargs):
        f = real(*args, **kwargs)
        w = dict(f.witnesses)
        w[(0, 1)], w[(1, 0)] = w[(1, 0)], w[(0, 1)]
        return dataclasses.replace(f, witnesses=w)

    case = table_case(max_passes=None, starts=2, seed=1)
    assert C.SearchedLowerBounds().check(case).holds
    monkeypatch.setattr(C, "search_worst_contexts", moved)
    assert "every witness pair differs at j only" in C.SearchedLowerBounds().check(case).failing()


# ------------------------------------------------------------------------------------------- relaxation
def relaxation_case(allowed: dict, site: int = 0, spread: bool = False) -> C.Case:
    spec = ModelSpec("bert", 2, 16, 1, spread)
    return C.Case(S.Instance(masked_lm_source(spec, 3, 3, 1.0), "tiny-mlm", dataclasses.asdict(spec)),
                  {"site": site, "allowed": allowed})


@pytest.mark.parametrize("bug", ["narrowed by 1%", "ends swapped"])
def test_relaxation_bounds_made_wrong_are_caught(monkeypatch, bug):
    case = relaxation_case({1: [0, 2], 2: [1]})
    assert C.RelaxationBounds().check(case).holds
    real = relaxation_module.source_conditional_bounds

    def wrong(*args, **kwargs):
        lo, hi = real(*args, **kwargs)
        return (lo * 1.01, hi * 0.99) if bug == "narrowed by 1%" else (hi, lo)

    monkeypatch.setattr(relaxation_module, "source_conditional_bounds", wrong)
    assert C.RelaxationBounds().check(case).failing()[:2] == ["lower bound <= p_i(a | x) (worst input and symbol)",
                                                              "upper bound >= p_i(a | x) (worst input and symbol)"]
    assert failing_search("constants.relaxation") == "fails"


def test_a_relaxed_influence_below_the_enumerated_one_is_caught(monkeypatch):
    case = relaxation_case({0: [0, 1, 2], 1: [1]}, site=2)
    assert C.RelaxationBounds().check(case).holds
    monkeypatch.setattr(relaxation_module, "source_influence_upper", lambda *a, **k: 0.0)
    assert C.RelaxationBounds().check(case).failing() == ["rho_20 bound over the set >= enumerated rho_20"]
