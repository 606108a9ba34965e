"""The sampler checks that rebuild each object in the check (verify/theorems/samplers_*.py): each holds on a
handful of instances with its weakened form caught, and a kernel with a planted bug (monkeypatched into the
library) makes it fail."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import log_softmax

from mlmix.theory.kernels import decoders as D
from mlmix.theory.kernels import scan_and_mh as M
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.verify import instances as S
from mlmix.verify.runner import load_theorems
from mlmix.verify.theorems import samplers_decoders as SD
from mlmix.verify.theorems import samplers_scan as SS
from mlmix.verify.theorems import samplers_truncation as ST
from mlmix.verify.verdicts import REGISTRY, search

load_theorems()
HOLDING = ["samplers.systematic-sweep", "samplers.mh-energies", "samplers.decoder-sequential",
           "samplers.decoder-parallel", "samplers.truncation"]


@pytest.mark.parametrize("theorem_id", HOLDING)
def test_holds_and_weakened_is_caught(theorem_id):
    report = search(REGISTRY[theorem_id], examples=6, seed=3)
    assert report.status == "holds", report.counterexample
    assert report.weakened == "caught", report.weakened_parts
    assert report.nontrivial == report.examples


def test_top_p_one_keeps_tiny_probabilities():
    """The library's log-space truncation keeps probabilities below 1e-16 at p = 1 and decides a mass equal
    to p exactly (the float truncation before it failed this check)."""
    report = search(REGISTRY["samplers.truncation-tails"], examples=6, seed=3)
    assert report.status == "holds", report.counterexample


def _exact_truncation(lp, top_k=None, top_p=None):
    """The check's own truncations: integer arithmetic on the dyadic tables (every 16 p an integer), else the
    sorted reference (tiny probabilities kept by p = 1)."""
    lp = np.asarray(lp, dtype=np.float64)
    rows = lp.reshape(-1, lp.shape[-1])
    w = np.exp(rows) * ST.DYADIC
    dyadic = np.allclose(w, np.rint(w), rtol=0, atol=1e-9) and (w >= 0.5).all()
    exact = ST.dyadic_truncate if dyadic else ST.reference_truncate
    return exact(rows, top_k, top_p)[0].reshape(lp.shape)


def test_tails_hold_with_an_exact_truncation(monkeypatch):
    """The tails check depends on the library only through the truncation: with the check's own exact
    truncation patched in, it holds too."""
    monkeypatch.setattr(M, "truncate_log_probs", _exact_truncation)
    monkeypatch.setattr(D, "truncate_log_probs", _exact_truncation)
    report = search(REGISTRY["samplers.truncation-tails"], examples=6, seed=3)
    assert report.status == "holds", report.counterexample


# ---------------------------------------------------------------------------------------- planted bugs

def _scan_instance(seed=1):
    return S.Instance(ScoreTable.random(3, 3, seed=seed), "gaussian-table", {"seed": seed})


def _fails(theorem_id, instance):
    theorem = REGISTRY[theorem_id]
    assert theorem.check(instance).holds  # the unpatched library passes
    return theorem


def test_reversed_or_short_sweep_is_caught(monkeypatch):
    inst = (_scan_instance(), [0, 1, 2])
    theorem = _fails("samplers.systematic-sweep", inst)
    real = M.systematic_kernel
    monkeypatch.setattr(SS, "systematic_kernel", lambda src, order: real(src, list(order)[::-1]))
    assert not theorem.check(inst).holds


    def short(src, order):  # the first site of the order skipped
        P = np.eye(src.space.size)
        for i in list(order)[1:]:
            P = P @ M.heat_bath_kernel(src, i).toarray()
        return P

    monkeypatch.setattr(SS, "systematic_kernel", short)
    assert not theorem.check(inst).holds


def _mh_instance():
    prod = S.Instance(S.product_table(3, 3, seed=4, scale=1.0), "product", {})
    return _scan_instance(2), prod, 7


@pytest.mark.parametrize("bug", ["swapped", "sign"])
def test_swapped_or_flipped_energies_are_caught(monkeypatch, bug):
    inst = _mh_instance()
    theorem = _fails("samplers.mh-energies", inst)
    real = M.target_law
    if bug == "swapped":
        bad = lambda src, kind: real(src, {"logit": "pll", "pll": "logit"}[kind])  # noqa: E731
    else:
        bad = lambda src, kind: real(src, -M.energy(src, kind))  # noqa: E731
    monkeypatch.setattr(SS, "target_law", bad)
    assert not theorem.check(inst).holds


def _decoder_instance(seed=2, n=3):
    table = PartialScoreTable.random(3, n, seed=seed)
    return S.Instance(table, "gaussian-partial", {"seed": seed})


def test_any_order_with_the_wrong_conditional_is_caught(monkeypatch):
    inst = (_decoder_instance(), None, [2, 0, 1])
    theorem = _fails("samplers.decoder-sequential", inst)
    real = SD.decoder_law

    def bad(table, sampler, **kw):  # any-order drawn from the all-masked conditionals (one parallel step)
        return real(table, "parallel", k=table.space.length, log_probs=kw.get("log_probs")) \
            if sampler == "any-order" else real(table, sampler, **kw)

    monkeypatch.setattr(SD, "decoder_law", bad)
    assert not theorem.check(inst).holds


def test_confidence_keeping_the_least_confident_is_caught(monkeypatch):
    inst = (_decoder_instance(3), None, 2, [[0], [1, 2]])
    theorem = _fails("samplers.decoder-parallel", inst)
    real = D._confidence_moves

    def least(codes, sites, keep, lp, place, q, log_tau=None):
        if keep is None:
            return real(codes, sites, keep, lp, place, q, log_tau)
        flipped = np.where(np.isfinite(lp), -lp, lp)  # ranks reversed; the weights recomputed below
        child, _ = real(codes, sites, keep, flipped, place, q)
        _, logw = real(codes, sites, keep, lp, place, q)
        return child, logw

    monkeypatch.setattr(D, "_confidence_moves", least)
    assert not theorem.check(inst).holds


_REAL_TRUNCATE = M.truncate_log_probs


def _off_by_one_top_k(lp, top_k=None, top_p=None):
    lp = np.asarray(lp, dtype=np.float64)
    if top_k is not None:
        kth = -np.sort(-lp, axis=-1)[..., top_k - 1:top_k]
        lp = log_softmax(np.where(lp > kth, lp, -np.inf), axis=-1)  # drops the k-th and its ties
    return _REAL_TRUNCATE(lp, None, top_p)


def test_top_k_off_by_one_is_caught(monkeypatch):
    inst = (_decoder_instance(4), None, 2, None)
    theorem = _fails("samplers.truncation", inst)
    monkeypatch.setattr(M, "truncate_log_probs", _off_by_one_top_k)
    monkeypatch.setattr(D, "truncate_log_probs", _off_by_one_top_k)
    assert not theorem.check(inst).holds


def test_top_p_without_renormalisation_is_caught(monkeypatch):
    inst = (_decoder_instance(5), None, None, 0.7)
    theorem = _fails("samplers.truncation", inst)
    unnormalised = lambda lp, top_k=None, top_p=None: np.where(  # noqa: E731
        np.isfinite(_REAL_TRUNCATE(lp, top_k, top_p)), np.asarray(lp, dtype=np.float64), -np.inf)
    monkeypatch.setattr(M, "truncate_log_probs", unnormalised)
    assert not theorem.check(inst).holds  # the kernels' truncation, caught by the check
    monkeypatch.setattr(D, "truncate_log_probs", unnormalised)
    with pytest.raises(ValueError, match="rows must sum to 1"):  # the decoders refuse such rows themselves
        theorem.check(inst)


# ---------------------------------------------------------------------------------------- the reference truncation

@settings(max_examples=60, deadline=None, database=None)
@given(st.lists(st.integers(-4, 4), min_size=2, max_size=6), st.sampled_from((0.3, 0.5, 0.7, 0.9, 0.99)))
def test_reference_top_p_is_the_smallest_top_set_with_ties(scores, p):
    """The kept set has mass >= p, contains every symbol tied with a kept one, and dropping its least probable
    tie group leaves mass < p (its smallest such set)."""
    lp = log_softmax(np.array(scores, dtype=np.float64) / 2.0)[None, :]
    out, ambiguous = ST.reference_truncate(lp, None, p)
    if ambiguous[0]:
        return
    kept = np.isfinite(out[0])
    probs = np.exp(lp[0])
    assert probs[kept].sum() >= p - 1e-12
    assert not any(kept[j] != kept[i] for i in range(len(scores)) for j in range(len(scores)) if lp[0, i] == lp[0, j])
    lowest = lp[0][kept].min()
    assert probs[kept & (lp[0] > lowest)].sum() < p
    assert np.isclose(np.exp(out[0][kept]).sum(), 1.0)


def test_reference_identities_and_top_k_ties():
    lp = log_softmax(np.array([[3.0, 1.0, 1.0, -40.0]]), axis=-1)
    assert np.array_equal(ST.reference_truncate(lp, 4, None)[0], lp)
    assert np.array_equal(ST.reference_truncate(lp, None, 1.0)[0], lp)
    assert np.isfinite(ST.reference_truncate(lp, 2, None)[0][0]).tolist() == [True, True, True, False]


def test_reference_sweep_is_the_product_formula():
    """Without repeats P_sys(x, y) = prod_k p_{i_k}(y_{i_k} | y on i_1..i_{k-1}, x elsewhere), written out."""
    src = ScoreTable.random(2, 3, seed=9)
    order = [2, 0, 1]
    P = SS.reference_sweep(src, order)
    states = src.space.all_states()
    for x in range(src.space.size):
        for y in range(src.space.size):
            z, prob = states[x].copy(), 1.0
            for i in order:
                prob *= np.exp(src.log_conditionals(z[None, :], i))[0, states[y, i]]
                z[i] = states[y, i]
            assert np.isclose(P[x, y], prob, rtol=1e-12)


def _through_the_boundary(lp, top_k=None, top_p=None):
    """An exact truncation with the planted bug 'keep v when the mass above v is <= p' (not < p)."""
    lp = np.asarray(lp, dtype=np.float64)
    rows = lp.reshape(-1, lp.shape[-1])
    w = np.rint(np.exp(rows) * ST.DYADIC)
    keep = w > 0
    if top_p is not None and top_p < 1.0:
        above = (w[:, None, :] * (w[:, None, :] > w[:, :, None])).sum(axis=-1)
        keep &= above <= top_p * w.sum(axis=-1, keepdims=True)
    out = np.where(keep, np.log(np.where(keep, w, 1.0)) - np.log(np.where(keep, w, 0.0).sum(axis=-1, keepdims=True)),
                   -np.inf)
    return out.reshape(lp.shape)


def test_top_p_mass_equal_to_p_is_decided_exactly(monkeypatch):
    """Conditionals (2, 2, 12) / 16 and p = 3/4: the most probable symbol alone has mass p, so only it is kept."""
    w = np.broadcast_to(np.array([2.0, 2.0, 12.0]), (2, 4, 3))
    inst = (S.Instance(PartialScoreTable(S.StateSpace(3, 2), np.log(w)), "dyadic-partial", {}), None, None, 0.75)
    theorem = REGISTRY["samplers.truncation-tails"]
    monkeypatch.setattr(M, "truncate_log_probs", _exact_truncation)
    monkeypatch.setattr(D, "truncate_log_probs", _exact_truncation)
    assert theorem.check(inst).holds
    monkeypatch.setattr(M, "truncate_log_probs", _through_the_boundary)
    monkeypatch.setattr(D, "truncate_log_probs", _through_the_boundary)
    assert not theorem.check(inst).holds
