"""Top-k / top-p truncation against a truncation written out in the check.

Generation code truncates the tempered conditionals p = softmax(s / T): top-k keeps the k most probable
symbols and every symbol tied with the k-th; top-p then keeps the smallest set of most probable symbols whose
mass is >= p, every symbol tied with its least probable member included (equivalently: v is kept when the mass
of the symbols strictly more probable than v is < p); the kept probabilities are renormalised. So top-k with
k = |V| and top-p with p = 1 change nothing, whatever the probabilities (a symbol of probability 1e-30 stays).

The reference sorts the exact conditionals itself (log-sum-exp of the strictly more probable symbols,
compared with log p) and flags a context whose mass lies within 1e-9 of p (the kept set is then decided by
rounding: either answer is accepted there). It is compared with the library's truncated source
(:class:`~mlmix.theory.kernels.scan_and_mh.Truncated`) at every full context and with the decoders' truncated
partial conditionals through the any-order and one-step laws (:mod:`samplers_decoders`' references).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from scipy.special import log_softmax

from mlmix.theory.kernels.decoders import decoder_law, partial_log_probs
from mlmix.theory.kernels.scan_and_mh import Truncated
from mlmix.theory.results import EPS
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.verify import instances as S
from mlmix.verify.theorems.samplers_decoders import MAX_STATES, References, _DecoderTheorem, decoder_tables
from mlmix.verify.theorems.samplers_scan import _probability_rows, _ratio_parts
from mlmix.verify.verdicts import Part, Verdict, register, verdict

#: A context whose top-p mass lies within this relative distance of p is decided by rounding.
AMBIGUOUS = 1e-9


def _renormalised(lp: np.ndarray) -> np.ndarray:
    """lp - log sum exp(lp) along the last axis (rows with a finite entry)."""
    top = lp.max(axis=-1, keepdims=True)
    return lp - (top + np.log(np.exp(lp - top).sum(axis=-1, keepdims=True)))


def reference_truncate(log_probs: np.ndarray, top_k: int | None, top_p: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(truncated and renormalised log-probabilities, rows whose top-p decision is within rounding of p):
    top-k keeps lp >= the k-th largest; top-p keeps v when sum_{u: lp_u > lp_v} p_u < p (a sum of positive
    terms, accurate to a few ulps), everything when p = 1."""
    lp = np.array(log_probs, dtype=np.float64)
    ambiguous = np.zeros(lp.shape[0], dtype=bool)
    if top_k is not None:
        kth = np.sort(lp, axis=-1)[:, ::-1][:, top_k - 1:top_k]
        lp = _renormalised(np.where(lp >= kth, lp, -np.inf))
    if top_p is not None and top_p < 1.0:
        greater = lp[:, None, :] > lp[:, :, None]  # [b, v, u]: u strictly more probable than v
        above = (greater * np.exp(lp)[:, None, :]).sum(axis=-1)  # mass strictly above v
        live = np.isfinite(lp)
        ambiguous = (live & (np.abs(above - top_p) <= AMBIGUOUS * top_p)).any(axis=-1)
        lp = _renormalised(np.where(live & (above < top_p), lp, -np.inf))
    return lp, ambiguous


@st.composite
def tied_partial_tables(draw, max_states: int = MAX_STATES) -> tuple:
    """Partial scores k/2 with k in -2..2 from a seed (many exact ties), at a temperature with spread/T <= 30."""
    large = draw(st.sampled_from((False, True, True)))
    q, n = draw(S.shapes(max_states, large=large))
    seed = draw(S.seeds())
    T = draw(S.temperatures(1 / 15, S.T_MAX))
    scores = np.random.default_rng(seed).integers(-2, 3, (n, (q + 1) ** (n - 1), q)) / 2.0
    return S.Instance(PartialScoreTable(S.StateSpace(q, n), scores, T), "tied-partial", {"seed": seed}), None


@st.composite
def _truncation_instances(draw) -> tuple:
    inst, p = draw(st.one_of(decoder_tables(), tied_partial_tables()))
    k, top_p = draw(S.truncation_levels(inst.space.vocab_size))
    return inst, p, k, top_p


def _full_contexts(table, top_k, top_p, reference=reference_truncate) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(library truncated log-probabilities, reference, ambiguous rows) at every site and full context."""
    space = table.space
    states = space.all_states()
    trunc = Truncated(table, top_k=top_k, top_p=top_p)
    lib, ref, amb = [], [], []
    for i in range(space.length):
        exact = log_softmax(table.scores(states, i) / table.temperature, axis=-1)
        r, a = reference(exact, top_k, top_p)
        lib.append(trunc.log_conditionals(states, i))
        ref.append(r)
        amb.append(a)
    return np.concatenate(lib), np.concatenate(ref), np.concatenate(amb)


def _truncation_parts(inst, top_k: int | None, top_p: float | None, tails: bool = False,
                      reference=reference_truncate) -> tuple[list[Part], dict[str, bool], dict]:
    table = inst.source
    n, q = inst.space.length, inst.space.vocab_size
    rel = 16 * EPS * (n + 2) * (2 + float(np.abs(table.table).max()) / table.temperature + 60.0 * tails)
    parts: list[Part] = []
    conditions: dict[str, bool] = {}
    lib, ref, amb = _full_contexts(table, top_k, top_p, reference)
    ok = ~amb
    new, cond = _ratio_parts("truncated p_i(. | x_{-i})", np.exp(lib[ok]), np.exp(ref[ok]), 4 * rel)
    parts += new
    conditions.update(cond)
    for name, k, p in (("top-k with k = |V|", q, None), ("top-p with p = 1", None, 1.0)):
        same = Truncated(table, top_k=k, top_p=p)
        states = inst.space.all_states()
        base = np.concatenate([log_softmax(table.scores(states, i) / table.temperature, axis=-1) for i in range(n)])
        got = np.concatenate([same.log_conditionals(states, i) for i in range(n)])
        new, cond = _ratio_parts(f"{name}: p_i(. | x_{{-i}})", np.exp(got), np.exp(base), 4 * rel)
        parts += new
        conditions.update(cond)
    # the decoders' truncated partial conditionals, through the any-order and one-step laws
    flags: list[bool] = []

    def cut(partial: np.ndarray, site: int) -> np.ndarray:
        out, a = reference(table.partial_log_conditionals(partial, site), top_k, top_p)
        flags.append(bool(a.any()))
        return out

    ref_laws = References(inst.space, cut)
    want_any, want_one = ref_laws.any_order(), ref_laws.blocks([list(range(n))])
    details = {"ambiguous_contexts": int(amb.sum())}
    lp = partial_log_probs(table, top_k, top_p)
    conditions["every truncated partial conditional is a probability vector"] = _probability_rows(lp)
    if not conditions["every truncated partial conditional is a probability vector"]:
        details["decoders"] = "skipped: the library's truncated partial conditionals are not probability vectors"
    elif not any(flags):
        for name, sampler, kk, want in (("any-order", "any-order", 1, want_any), ("one step", "parallel", n, want_one)):
            law = decoder_law(table, sampler, k=kk, log_probs=lp)
            new, cond = _ratio_parts(f"truncated {name} law", law.law, want, 2 * law.rel_error + 4 * rel)
            parts += new
            conditions.update(cond)
    else:
        details["decoders"] = "skipped: a partial context's top-p mass is within rounding of p"
    return parts, conditions, details


@register
class TruncationLaws(_DecoderTheorem):
    id = "samplers.truncation"
    number = "Top-k / top-p truncation (temperature, then top-k, then top-p)"
    statement = ("top-k keeps the k most probable symbols and every one tied with the k-th; top-p keeps the smallest set of "
                 "most probable symbols of mass >= p, ties with its least probable member included; the kept "
                 "probabilities are renormalised; k = |V| and p = 1 change nothing. Checked at every full context "
                 "(Truncated sources) and through the any-order and one-step decoder laws")
    extras = ("top_k", "top_p")

    def strategy(self) -> st.SearchStrategy:
        return _truncation_instances()

    def check(self, instance: tuple) -> Verdict:
        inst, _, top_k, top_p = instance
        parts, conditions, details = _truncation_parts(inst, top_k, top_p)
        return verdict(*parts, conditions=conditions, **details)


#: Denominator of the dyadic conditionals of the boundary instances (every probability is w / 16).
DYADIC = 16


def dyadic_truncate(log_probs: np.ndarray, top_k: int | None, top_p: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The truncation in exact integer arithmetic for conditionals w / 16 (w positive integers, recovered by
    rounding 16 p): top-k keeps w >= the k-th largest; top-p keeps v when 
    sum_{kept u: w_u > w_v} w_u < p sum_{kept} w (p dyadic, so both sides are exact)."""
    w = np.rint(np.exp(np.asarray(log_probs, dtype=np.float64)) * DYADIC).astype(np.int64)
    keep = w > 0
    if top_k is not None:
        kth = np.sort(w, axis=-1)[:, ::-1][:, top_k - 1:top_k]
        keep &= w >= kth
    if top_p is not None and top_p < 1.0:
        kept = np.where(keep, w, 0)
        above = (kept[:, None, :] * (kept[:, None, :] > kept[:, :, None])).sum(axis=-1)
        keep &= above < top_p * kept.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        out = np.where(keep, np.log(w) - np.log(np.where(keep, w, 0).sum(axis=-1, keepdims=True)), -np.inf)
    return out, np.zeros(w.shape[0], dtype=bool)


@st.composite
def dyadic_tables(draw) -> tuple:
    """Partial tables whose every conditional is w / 16 (a composition of 16 into |V| positive parts drawn
    from a seed), at T = 1, with a dyadic top-p: the mass above a symbol often equals p exactly, where the
    strict < decides (n in {2, 3}, |V| in {3, 4})."""
    q, n = draw(st.sampled_from(((3, 2), (4, 2), (3, 3), (4, 3))))
    seed = draw(S.seeds())
    rng = np.random.default_rng(seed)
    rows = n * (q + 1) ** (n - 1)
    cuts = np.sort(np.stack([rng.choice(np.arange(1, DYADIC), q - 1, replace=False) for _ in range(rows)]), axis=1)
    w = np.diff(np.concatenate([np.zeros((rows, 1), np.int64), cuts, np.full((rows, 1), DYADIC)], axis=1), axis=1)
    table = PartialScoreTable(S.StateSpace(q, n), np.log(w.astype(np.float64)).reshape(n, -1, q))
    k = draw(st.sampled_from((None, None) + tuple(range(1, q + 1))))
    top_p = draw(st.sampled_from((0.25, 0.375, 0.5, 0.625, 0.75, 0.875)))
    return S.Instance(table, "dyadic-partial", {"seed": seed}), None, k, top_p


@st.composite
def _tail_instances(draw) -> tuple:
    """Partial tables at a temperature with spread/T in [40, 80] (probabilities down to ~1e-35) with
    p = 1 or k = |V|, or dyadic tables (:func:`dyadic_tables`) one time in three."""
    if draw(st.sampled_from((False, False, True))):
        return draw(dyadic_tables())
    inst, p = draw(decoder_tables())
    table = inst.source
    spread = float((table.table.max(axis=-1) - table.table.min(axis=-1)).max())
    ratio = draw(S.temperatures(40.0, 80.0))
    cold = table.at_temperature(spread / ratio) if spread > 0 else table
    k, top_p = draw(st.sampled_from(((None, 1.0), (inst.space.vocab_size, None), (inst.space.vocab_size, 1.0))))
    return S.Instance(cold, inst.kind, dict(inst.params, spread_over_T=ratio)), p, k, top_p


@register
class TruncationTails(_DecoderTheorem):
    id = "samplers.truncation-tails"
    number = "Truncation at the edges of floating point: probabilities below 1e-16, a mass exactly p"
    statement = ("top-p with p = 1 and top-k with k = |V| are the identity on conditionals with probabilities far below the "
                 "double-precision unit roundoff (spread/T in [40, 80]): no symbol is dropped; on dyadic conditionals "
                 "w / 16 the top-p set is the smallest of mass >= p also when a mass equals p exactly (integer "
                 "arithmetic in the check); at full contexts and in the decoders' partial conditionals")
    extras = ("top_k", "top_p")

    def strategy(self) -> st.SearchStrategy:
        return _tail_instances()

    def check(self, instance: tuple) -> Verdict:
        inst, _, top_k, top_p = instance
        reference = dyadic_truncate if inst.kind == "dyadic-partial" else reference_truncate
        parts, conditions, details = _truncation_parts(inst, top_k, top_p, tails=True, reference=reference)
        return verdict(*parts, conditions=conditions, **details)
