"""The LayerNorm head bound: every Delta_ij <= H = 2 sqrt(d) max_{a,b} ||P0(gamma o (W_a - W_b))||.

Soundness against an independent brute force: every context of a tiny random BERT / RoBERTa / ModernBERT
(n <= 3 free positions, 2-3 letters), each site masked, the logits of a float64 copy of the model read
straight off ``model(input_ids)`` (no mlmix code on that path), Delta_ij and rho_ij(T) enumerated pair by
pair. Sharpness: a model whose head is steered so that two contexts put its LayerNorm output at
+-sqrt(d) P0(gamma o (W_a - W_b)) / ||.|| attains H (to eps); H shrunk by 1% is then below the enumerated
Delta_ij.
"""

import copy
import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import WORDS, tiny_masked_lm

from mlmix.empirical.model_constants.certify import certify
from mlmix.empirical.model_constants.head_bound import (
    HeadNotNormalised,
    head_bound_upper,
    head_parts,
    influence_upper,
    oscillation_bound,
    pair_norms_upper,
    source_head_bound,
)
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.verify.theorems.head_bound_checks import steer_head

#: The float64 evaluation's own rounding, relative to H (the bound is of the network in exact arithmetic).
F64 = 1e-12


def brute_force(model, tok, n: int, letters: tuple[str, ...], T: float) -> tuple[np.ndarray, np.ndarray]:
    """(Delta_ij, rho_ij(T)) over every context of [CLS] x_0 .. x_{n-1} [SEP], from a float64 copy's logits."""
    m = copy.deepcopy(model).double().eval()
    ids = tok.convert_tokens_to_ids(list(letters))
    q = len(ids)
    contexts = list(itertools.product(range(q), repeat=n))
    scores = np.zeros((n,) + (q,) * n + (q,))
    with torch.no_grad():
        for i in range(n):
            batch = torch.tensor([[tok.cls_token_id, *(ids[c] for c in ctx), tok.sep_token_id] for ctx in contexts])
            batch[:, 1 + i] = tok.mask_token_id
            logits = m(input_ids=batch).logits[:, 1 + i][:, ids].numpy()
            for ctx, row in zip(contexts, logits):
                scores[(i, *ctx)] = row
    delta, rho = np.zeros((n, n)), np.zeros((n, n))
    for i, j in itertools.permutations(range(n), 2):
        s = np.moveaxis(scores[i], j, -2)  # (..., x_j, V)
        diff = s[..., :, None, :] - s[..., None, :, :]  # (..., x_j, y_j, V)
        delta[i, j] = (diff.max(-1) - diff.min(-1)).max()
        p = np.exp(s / T - (s / T).max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        rho[i, j] = (0.5 * np.abs(p[..., :, None, :] - p[..., None, :, :]).sum(-1)).max()
    return delta, rho


def head_bound_of(model, tok, letters) -> float:
    return oscillation_bound(head_parts(model, tok.convert_tokens_to_ids(list(letters)))).delta


@settings(max_examples=12)
@given(arch=st.sampled_from(["bert", "roberta", "modernbert"]), seed=st.integers(0, 7), n=st.integers(2, 3),
       q=st.integers(2, 3), T=st.floats(0.2, 20.0))
def test_the_head_bound_is_above_every_enumerated_oscillation(arch, seed, n, q, T):
    model, tok = tiny_masked_lm(arch, seed=seed, hidden=8, layers=1)
    letters = WORDS[:q]
    delta, rho = brute_force(model, tok, n, letters, T)
    H = head_bound_of(model, tok, letters)
    assert delta.max() <= H * (1 + F64)
    assert (n - 1) * H / 4 >= delta.sum(axis=0).max() / 4 * (1 - F64)  # Cor. 7's T*
    assert (rho <= np.tanh(H / (4 * T)) * (1 + F64) + F64).all()  # Lemma 6
    assert rho.max() <= influence_upper(head_parts(model, tok.convert_tokens_to_ids(list(letters))), T) * (1 + F64)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_the_ellipsoid_influence_bound_is_attained_at_high_temperature_and_one_percent_less_is_caught(arch):
    """Two letters, T = 200 H: the logits stay near equal (pi_v near 1/2), the steered pair moves l_a - l_b by H,
    so rho_01 = TV is within 1% of (sqrt(d) / T) sqrt(lambda_max) = H / 4T; the bound shrunk by 1% is below it."""
    letters = WORDS[:2]
    model, tok = steered(arch, letters)
    parts = head_parts(model, tok.convert_tokens_to_ids(list(letters)))
    T = 200 * oscillation_bound(parts).delta
    _, rho = brute_force(model, tok, 2, letters, T)
    bound = influence_upper(parts, T)
    assert rho.max() <= bound * (1 + F64)
    assert rho.max() > 0.99 * bound


def steered(arch: str, letters) -> tuple:
    """A model whose head attains H at n = 2, site 0, between the contexts (a, a) and (a, b)
    (:func:`~mlmix.verify.theorems.head_bound_checks.steer_head`), and its tokenizer."""
    model, tok = tiny_masked_lm(arch, seed=1, hidden=8, layers=1)
    ids = tok.convert_tokens_to_ids(list(letters))
    inputs = torch.tensor([[tok.cls_token_id, tok.mask_token_id, ids[k], tok.sep_token_id] for k in (0, 1)])
    return steer_head(model.double(), inputs, 1, ids), tok


@pytest.mark.parametrize("arch", ["bert", "roberta", "modernbert"])
def test_the_head_bound_is_attained_and_one_percent_less_is_caught(arch):
    letters = WORDS[:3]
    model, tok = steered(arch, letters)
    delta, _ = brute_force(model, tok, 2, letters, 1.0)
    H = head_bound_of(model, tok, letters)
    assert delta.max() <= H * (1 + F64)
    assert delta.max() > 0.99 * H  # the bound shrunk by 1% is wrong on this model


def test_pair_norms_against_exact_rationals():
    """The rounded-up norms are >= the exact ||P0(gamma o (W_a - W_b))|| (Fractions on the float64 inputs) and
    within 1e-12 of it; without centring, the plain norm."""
    from fractions import Fraction

    rng = np.random.default_rng(3)
    gamma = rng.normal(size=7).astype(np.float32).astype(np.float64)
    rows = rng.normal(size=(3, 7)).astype(np.float32).astype(np.float64) * 1e3
    rows[2] = rows[1] + 1e-4  # a nearly equal pair: the norm is small against the rows
    for centred in (True, False):
        upper = pair_norms_upper(gamma, rows, centred)
        for a, b in itertools.permutations(range(3), 2):
            w = [Fraction(float(g)) * (Fraction(float(x)) - Fraction(float(y))) for g, x, y in
                 zip(gamma, rows[a], rows[b])]
            mean = sum(w) / len(w) if centred else 0
            sq = sum((x - mean) ** 2 for x in w)
            assert Fraction(float(upper[a, b])) ** 2 >= sq
            assert upper[a, b] <= math.sqrt(sq) * (1 + 1e-12) + 1e-300


def test_certify_uses_the_head_bound_for_a_finite_t_star_beyond_enumeration():
    model, tok = tiny_masked_lm("bert", seed=2, hidden=8, layers=1)
    source = MaskedLMConditionals(model, tok, 3, candidates=" ".join(WORDS[:3]), device="cpu", temperature=50.0)
    H = source_head_bound(source).delta
    cert = certify(source, max_passes=1, use_cache=False)  # nothing enumerated, no context sampled
    assert cert.passes == 0 and "LayerNorm head bound" in cert.delta.method
    assert cert.delta.upper >= 2 * H and cert.delta.upper == pytest.approx(2 * H, rel=1e-12)
    assert cert.contraction_temperature.upper == pytest.approx(2 * H / 4, rel=1e-12)
    delta, rho = brute_force(model, tok, 3, WORDS[:3], 50.0)
    assert cert.delta.upper >= delta.sum(axis=0).max() and cert.rho.upper >= rho.sum(axis=0).max()
    verdict = cert.theorem5["verdict"]
    assert verdict == ("applies" if 50.0 > cert.contraction_temperature.upper or cert.rho.upper < 1 else "undecided")
    without = certify(source, max_passes=1, use_cache=False, head_bound=None)
    assert without.delta.upper is None


def test_a_head_that_is_not_normalised_is_refused_with_its_reason():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt = GPT2LMHeadModel(GPT2Config(vocab_size=10, n_positions=8, n_embd=4, n_layer=1, n_head=1))
    with pytest.raises(HeadNotNormalised, match="GPT2LMHeadModel's head is not known"):
        head_parts(gpt, [1, 2])
    out = head_bound_upper(np.zeros(3))
    assert out["delta_upper"] is None and out["method"].startswith("head bound not available: ndarray")


@pytest.mark.slow
def test_antiberty_every_oscillation_and_influence_at_n2_is_below_its_head_bounds(plain):
    """AntiBERTy, frame S at n = 2, all 20 amino acids: H = 143.669... from the weights (the figure of
    docs/real-model.md), above every enumerated Delta_ij of the float64 model; both rho bounds above rho_ij."""
    model, tok = plain
    letters = tuple("A C D E F G H I K L M N P Q R S T V W Y".split())
    parts = head_parts(model, tok.convert_tokens_to_ids(list(letters)))
    H = oscillation_bound(parts).delta
    assert 143.669 < H < 143.670
    for T in (1.0, 60.0):
        delta, rho = brute_force(model, tok, 2, letters, T)
        assert delta.max() <= H
        assert rho.max() <= min(math.tanh(H / (4 * T)), influence_upper(parts, T))
