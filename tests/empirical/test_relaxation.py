"""mlmix.empirical.model_constants.relaxation: certified bounds over context sets against brute force.

Every context of a small set goes through the model's own float64 forward pass (transformers,
``output_hidden_states``); its hidden states, logits and conditionals must lie inside the
relaxation's bounds at every layer, pointwise (value in c + g . eps(x) +- r) as well as in the
interval hull. Where the bounds are tight (the embeddings of one position: an exact hull), shrinking
them by 1% must exclude a context: the check can fail. influence_upper is compared with rho_ij
by enumeration, on the mlmix source's own conditionals too.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import set_inputs, tiny_masked_lm
from transformers import BertConfig, BertForMaskedLM

from mlmix.empirical.model_constants import affine_forms as af
from mlmix.empirical.model_constants import relaxation as rx
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.local.influence import influence_matrix

WORDS = ("a", "b", "c", "!")
SITE = 2  # input position of [MASK] in [CLS] x0 [MASK] x2 x3 [SEP]
ALPHABET = [5, 6, 7, 8]  # the ids of WORDS (specials first: tests/mlm_fixtures.py)


@lru_cache(maxsize=None)
def setup(kind: str = "spread"):
    """("spread": tests/mlm_fixtures' 2-layer BERT, weights with a large scale, where the relaxation
    goes vacuous beyond one token per position; "default": BERT's own initialisation, hidden 32,
    2 layers, where it holds) as (model in float64, tokenizer, alphabet ids, frame ids)."""
    model, tok = tiny_masked_lm(hidden=16, layers=2, seed=1)
    if kind == "default":
        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=64, max_position_embeddings=16))
    model = model.eval().double()
    alphabet = tok.convert_tokens_to_ids(list(WORDS))
    assert alphabet == ALPHABET
    frame = [tok.cls_token_id, alphabet[0], tok.mask_token_id, alphabet[1], alphabet[2], tok.sep_token_id]
    return model, tok, alphabet, frame



def forward(model, ids: list[int]):
    """(embedding sum before its LayerNorm, hidden states, logits at SITE): the model's own float64 pass."""
    with torch.no_grad():
        x = torch.tensor([ids])
        emb = model.bert.embeddings
        pre = (emb.word_embeddings(x) + emb.token_type_embeddings(torch.zeros_like(x))
               + emb.position_embeddings(torch.arange(len(ids))[None]))[0]
        out = model(input_ids=x, output_hidden_states=True)
    return pre, [h[0] for h in out.hidden_states], out.logits[0, SITE, ALPHABET]


def inside(value: torch.Tensor, form: af.Affine, eps: torch.Tensor) -> tuple[bool, bool]:
    """(value in the interval hull, value in c + g . eps +- (r + |g_fresh|_1))."""
    lo, hi = form.bounds()
    hull = bool(((value >= lo) & (value <= hi)).all())
    point = bool(((value - form.evaluate(eps)).abs() <= form.radius()).all())
    return hull, point


SETS = {
    "single context": {1: [5], 3: [6], 4: [7]},
    "one position, two tokens": {1: [5, 8], 3: [6], 4: [7]},
    "two positions, 3 x 2 tokens": {1: [5, 6, 8], 3: [6, 7], 4: [7]},
    "every context": {1: [5, 6, 7, 8], 3: [5, 6, 7, 8], 4: [5, 6, 7, 8]},
}


@pytest.mark.parametrize("kind", ["spread", "default"])
@pytest.mark.parametrize("name", list(SETS))
def test_every_context_lies_inside_the_bounds_at_every_layer(name, kind):
    model, _, alphabet, frame = setup(kind)
    allowed = SETS[name]
    prop = rx.propagate(model, frame, SITE, allowed, alphabet)
    lower, upper = rx.probability_bounds(prop.logits, 0.7)
    assert len(prop.hidden) == 3
    for ids in set_inputs(frame, allowed):
        pre, hidden, logits = forward(model, ids)
        eps = prop.eps_of(ids)
        assert inside(pre, prop.embedding_sum, eps) == (True, True)
        for layer, (h, form) in enumerate(zip(hidden, prop.hidden)):
            assert inside(h, form, eps) == (True, True), f"layer {layer}"
        assert inside(logits, prop.logits, eps) == (True, True)
        p = torch.softmax(logits / 0.7, -1).numpy()
        assert np.all(lower <= p) and np.all(p <= upper)


def test_a_single_context_is_certified_tightly():
    model, _, alphabet, frame = setup()
    lower, upper = rx.conditional_bounds(model, frame, SITE, SETS["single context"], 1.0, alphabet=alphabet)
    p = torch.softmax(forward(model, frame)[2], -1).numpy()
    assert np.all(lower <= p) and np.all(p <= upper)
    # rounding only, amplified through two layers of a random model with large weights
    assert float((upper - lower).max()) < 1e-3
    widths = rx.layer_widths(model, frame, SITE, SETS["single context"], alphabet)
    assert [r["layer"] for r in widths] == [0, 1, 2, "logits"]
    assert widths[0]["width_max"] < 1e-10


@pytest.mark.parametrize("tokens", [[5, 8], [5, 6, 8]])
def test_the_embeddings_hull_is_exact_so_a_bound_shrunk_by_one_percent_is_caught(tokens):
    """One free position: its embedding sum and their LayerNorm are exact affine functions of the
    token's indicator, so every coordinate's bound is attained; shrunk 1% toward its centre, each
    bound of nonzero width excludes some context."""
    model, _, alphabet, frame = setup()
    allowed = {1: tokens, 3: [6], 4: [7]}
    prop = rx.propagate(model, frame, SITE, allowed, alphabet)
    runs = [forward(model, ids) for ids in set_inputs(frame, allowed)]
    for form, values in ((prop.embedding_sum, [r[0] for r in runs]), (prop.hidden[0], [r[1][0] for r in runs])):
        lo, hi = form.bounds()
        stack = torch.stack(values)
        assert bool(((stack >= lo) & (stack <= hi)).all())
        wide = (hi - lo) > 1e-6
        mid, half = (lo + hi) / 2, (hi - lo) / 2 * 0.99
        outside = (stack < mid - half) | (stack > mid + half)
        assert int(wide.sum()) > 10
        assert bool(outside.any(0)[wide].all())


def test_conditional_bounds_contain_the_mlmix_source_conditionals():
    model, tok, _, _ = setup()
    source = MaskedLMConditionals(model.float(), tok, 3, candidates=" ".join(WORDS), device="cpu", temperature=0.8)
    try:
        allowed = {0: [0, 3], 2: [1]}
        lower, upper = rx.source_conditional_bounds(source, 1, allowed)
        for a, b in itertools.product([0, 3], range(4)):
            p = np.exp(source.log_conditionals(np.array([[a, b, 1]]), 1))[0]
            # the source computes in float32: its conditionals carry ~1e-7 of rounding
            assert np.all(lower - 1e-5 <= p) and np.all(p <= upper + 1e-5)
    finally:
        model.double()


def exact_rho(model, frame, i, j, allowed, alphabet, temperature) -> float:
    """sup TV(p_i(.|x), p_i(.|x')) over x, x' in the set differing only at j, in float64."""
    best = 0.0
    probs = {}
    for ids in set_inputs(frame, allowed):
        probs[tuple(ids)] = torch.softmax(forward(model, ids)[2] / temperature, -1).numpy()
    for ids in set_inputs(frame, allowed):
        for t in allowed[j]:
            other = list(ids)
            other[j] = t
            best = max(best, 0.5 * float(np.abs(probs[tuple(ids)] - probs[tuple(other)]).sum()))
    return best


@pytest.mark.parametrize("kind", ["spread", "default"])
@pytest.mark.parametrize("name", ["one position, two tokens", "two positions, 3 x 2 tokens"])
def test_influence_upper_bounds_rho_by_enumeration(name, kind):
    model, _, alphabet, frame = setup(kind)
    allowed = SETS[name]
    for j in (1, 3):
        rho = exact_rho(model, frame, SITE, j, allowed, alphabet, 1.0)
        up = rx.influence_upper(model, frame, SITE, j, allowed, 1.0, alphabet=alphabet)
        assert rho <= up <= 1.0
        if len(allowed[j]) == 1:
            assert up == 0.0
        elif kind == "default":  # where the relaxation holds the bound says something (at 400-1700 x rho)
            assert up < 0.5


def test_influence_upper_of_a_source_bounds_the_exact_rho_matrix():
    model, tok, _, _ = setup()
    source = MaskedLMConditionals(model.float(), tok, 3, candidates=" ".join(WORDS), device="cpu", temperature=2.0)
    try:
        rho = influence_matrix(source).rho_ij
        for i, j in itertools.permutations(range(3), 2):
            assert rho[i, j] <= rx.source_influence_upper(source, i, j) + 1e-6  # float32 conditionals
    finally:
        model.double()


def test_lemma6_part_is_attained_on_a_two_token_softmax():
    """The tanh(osc / 4T) step (paper G Lemma 6) is tight: logits (d/2, 0) vs (-d/2, 0) give TV = tanh(d/4)."""
    d = 1.3
    g = torch.tensor([[d / 2], [0.0]], dtype=torch.float64)
    form = af.Affine(torch.zeros(2, dtype=torch.float64), g, torch.zeros(2, dtype=torch.float64),
                     torch.tensor([7]))
    osc = rx._osc_upper(form, slice(0, 1))
    assert osc == pytest.approx(d, rel=1e-12) and osc >= d
    tv = abs(1 / (1 + math.exp(-d / 2)) - 1 / (1 + math.exp(d / 2)))
    assert math.tanh(osc / 4) >= tv and math.tanh(osc / 4) == pytest.approx(tv, rel=1e-12)


# ---------------------------------------------------------------------------- operations, one at a time
def _random_form(draw_seed: int, shape: tuple[int, ...], scale: float, radius: float) -> af.Affine:
    gen = torch.Generator().manual_seed(draw_seed)
    groups = torch.tensor([0, 0, 1])  # a position with three tokens, one with two
    c = torch.randn(shape, generator=gen, dtype=torch.float64) * scale
    g = torch.randn((*shape, 3), generator=gen, dtype=torch.float64) * scale / 2
    r = torch.rand(shape, generator=gen, dtype=torch.float64) * radius
    return af.Affine(c, g, r, groups)


FEASIBLE = [torch.tensor(e, dtype=torch.float64) for e in
            ([-1, -1, -1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1], [1, -1, 1], [-1, 1, 1])]


def _erf_gelu(t: float) -> float:
    return 0.5 * t * (1 + math.erf(t / math.sqrt(2)))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), scale=st.sampled_from([1e-6, 0.1, 1.0, 4.0]),
       radius=st.sampled_from([0.0, 1e-9, 0.05, 0.5]), frac=st.floats(-1, 1))
def test_each_operation_encloses_its_function_at_every_feasible_point(seed, scale, radius, frac):
    x = _random_form(seed, (5,), scale, radius)
    y = _random_form(seed + 1, (5,), scale, radius)
    pos = af.add(af.scale(af.bilinear(x, x, "d,d->d", 1), 1.0), af.Affine(
        torch.full((5,), 0.5, dtype=torch.float64), torch.zeros((5, 3), dtype=torch.float64),
        torch.zeros(5, dtype=torch.float64), x.groups))  # x^2 + 0.5 > 0
    cases = [
        (af.exp(x), lambda v, w, q: math.exp(v)),
        (af.gelu(x), lambda v, w, q: _erf_gelu(v)),
        (af.bilinear(x, y, "d,d->d", 1), lambda v, w, q: v * w),
        (af.reciprocal(pos, 0.5), lambda v, w, q: 1 / q),
        (af.rsqrt(pos, 0.5), lambda v, w, q: 1 / math.sqrt(q)),
        (af.softmax(x, -1), None),
    ]
    for eps in FEASIBLE:
        xv = (x.evaluate(eps) + frac * x.r).tolist()  # a value the form allows at eps
        yv = (y.evaluate(eps) - frac * y.r).tolist()
        qv = [v * v + 0.5 for v in xv]
        sm = torch.softmax(torch.tensor(xv, dtype=torch.float64), -1).tolist()
        for out, f in cases:
            centre, r = out.evaluate(eps).tolist(), out.r.tolist()
            lo, hi = out.bounds()
            for k in range(5):
                truth = sm[k] if f is None else f(xv[k], yv[k], qv[k])
                assert abs(truth - centre[k]) <= r[k] * (1 + 1e-12) + 1e-15 * abs(truth)
                assert lo[k] <= truth <= hi[k]


def test_exp_above_its_range_is_vacuous_not_wrong():
    x = af.Affine(torch.tensor([800.0, 1.0], dtype=torch.float64), torch.zeros((2, 0), dtype=torch.float64),
                  torch.tensor([1.0, 0.0], dtype=torch.float64), torch.zeros(0, dtype=torch.long))
    lo, hi = af.exp(x).bounds()
    assert math.isinf(hi[0]) and math.isinf(lo[0])
    assert lo[1] <= math.e <= hi[1] and float(hi[1] - lo[1]) < 1e-12


# ---------------------------------------------------------------------------- bad input
def test_bad_input_is_a_one_line_error():
    model, _, alphabet, frame = setup()
    with pytest.raises(ValueError, match="temperature"):
        rx.conditional_bounds(model, frame, SITE, SETS["single context"], 0.0, alphabet=alphabet)
    with pytest.raises(ValueError, match="token ids"):
        rx.conditional_bounds(model, frame, SITE, {1: [99]}, 1.0, alphabet=alphabet)
    with pytest.raises(ValueError, match="empty"):
        rx.conditional_bounds(model, frame, SITE, {1: []}, 1.0, alphabet=alphabet)
    with pytest.raises(ValueError, match="outside"):
        rx.conditional_bounds(model, frame, 9, {1: [5]}, 1.0, alphabet=alphabet)
    with pytest.raises(ValueError, match="i != j"):
        rx.influence_upper(model, frame, SITE, SITE, {1: [5]}, 1.0, alphabet=alphabet)
    with pytest.raises(ValueError, match="not free"):
        rx.influence_upper(model, frame, SITE, 3, {1: [5, 6]}, 1.0, alphabet=alphabet)
    with pytest.raises(ValueError, match="not allowed"):
        rx.propagate(model, frame, SITE, {1: [5]}, alphabet).eps_of([0, 6] + frame[2:])
    roberta, _ = tiny_masked_lm("roberta")
    with pytest.raises(ValueError, match="BertForMaskedLM"):
        rx.conditional_bounds(roberta, frame, SITE, {1: [5]}, 1.0, alphabet=alphabet)


def test_linear_steps_pass_the_whole_remainder_on():
    """A remainder pattern e = r sign(W_i) reaches output i at distance exactly (|W| r)_i from the
    centre: a linear step that passed on less (e.g. half) of the remainder would exclude it."""
    x = _random_form(5, (2, 5), 1.0, 0.3)
    w = torch.randn((4, 5), generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    b = torch.randn(4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    out = af.linear(x, w, b)
    cen = af.center(x)
    for eps in FEASIBLE:
        base = x.evaluate(eps)
        for i in range(4):
            value = (base + x.r * torch.sign(w[i])) @ w[i] + b[i]
            assert bool(((value - out.evaluate(eps)[:, i]).abs() <= out.r[:, i]).all())
            assert bool(((value - out.evaluate(eps)[:, i]).abs() >= out.r[:, i] * 0.999).all())
        for k in range(5):  # centring: e_k = r_k, the others -r: distance r_k + mean(r) - 2 r_k / d
            e = -x.r.clone()
            e[:, k] = x.r[:, k]
            z = base + e
            value = z[:, k] - z.mean(-1)
            assert bool(((value - cen.evaluate(eps)[:, k]).abs() <= cen.r[:, k]).all())
