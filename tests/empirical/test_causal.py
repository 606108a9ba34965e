"""mlmix.empirical.models.causal: the autoregressive control is compatible, so every rectangle statistic is 0
(paper G Prop. 4; the GPT-2 row of Table 1) and its joint is the Glauber chain's stationary law
(Thm 3). Tiny GPT-2 with random weights, built offline."""

import numpy as np
import pytest
import torch
from mlm_fixtures import tiny_causal_lm
from tokenizers import processors

from mlmix.empirical.model_constants.estimated_constants import constants
from mlmix.empirical.models.causal import CausalLMConditionals
from mlmix.theory.chain.shortcuts import is_reversible
from mlmix.theory.chain.stationary import stationary_distribution
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.local.rectangles import (
    all_rectangles,
    compatible_joint,
    is_compatible,
    sample_rectangles,
)
from mlmix.theory.sources.conditionals import ScoreTable

N = 3


@pytest.fixture(scope="module")
def causal():
    model, tok = tiny_causal_lm(seed=2)
    return CausalLMConditionals(model, tok, N, device="cpu")


def reference_log_prob(c: CausalLMConditionals, seq: np.ndarray) -> float:
    """log p(x) by hand: BOS + tokens, full forward, sum of next-token log-probabilities."""
    ids = c.tokenizer(" ".join(c.decode(seq)))["input_ids"]
    assert ids[0] == c.tokenizer.bos_token_id and len(ids) == N + 1
    with torch.no_grad():
        logp = torch.log_softmax(c.model(input_ids=torch.tensor([ids])).logits[0], dim=-1).double()
    return float(sum(logp[t, ids[t + 1]] for t in range(N)))


def test_scores_are_log_probabilities_of_the_substituted_sequences(causal):
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, causal.space.vocab_size, (3, N))
    sites = np.array([0, 2, 1])
    scores = causal.scores(ctx, sites)
    for b in range(3):
        for v in range(causal.space.vocab_size):
            seq = ctx[b].copy()
            seq[sites[b]] = v
            assert scores[b, v] == pytest.approx(reference_log_prob(causal, seq), abs=1e-5)
    np.testing.assert_allclose(np.exp(causal.log_conditionals(ctx, sites)).sum(axis=1), 1.0, atol=1e-12)


def test_every_rectangle_statistic_is_zero(causal):
    rects = all_rectangles(causal)
    assert rects.count == 4**N * 3 * 9
    assert rects.max < 1e-5
    hot = causal.at_temperature(0.3)
    assert all_rectangles(hot).max < 1e-4
    assert is_compatible(causal, tol=1e-6)
    sampled = sample_rectangles(causal, causal.space.all_states(), 40, np.random.default_rng(1), top_k=2)
    assert sampled.max < 1e-5
    report = constants(causal, None, np.random.default_rng(0))
    assert report["rectangle"]["max"] < 1e-5


def test_the_joint_is_the_stationary_law_of_the_glauber_chain(causal):
    hot = causal.at_temperature(0.7)
    log_mu = hot.log_joint()
    mu = np.exp(log_mu - log_mu.max())
    mu /= mu.sum()
    P = glauber_kernel(ScoreTable.from_conditionals(hot))
    np.testing.assert_allclose(stationary_distribution(P), mu, atol=1e-6)
    assert is_reversible(P, mu, rtol=1e-5)
    joint = compatible_joint(hot, tol=1e-6)
    np.testing.assert_allclose(joint, mu, atol=1e-6)


def test_prefix_and_start_token():
    model, tok = tiny_causal_lm(seed=3)
    plain = CausalLMConditionals(model, tok, N, device="cpu")
    pre = CausalLMConditionals(model, tok, N, prefix="! a", device="cpu")
    assert int(plain.slots[0]) == 1 and int(pre.slots[0]) == 3
    ctx = np.array([[0, 1, 2]])
    assert np.abs(pre.scores(ctx, 1) - plain.scores(ctx, 1)).max() > 1e-3
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(single="$A", special_tokens=[])
    tok.bos_token = None
    assert tok("a b")["input_ids"] == tok("a b", add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match="needs a start"):
        CausalLMConditionals(model, tok, N, device="cpu")
    assert int(CausalLMConditionals(model, tok, N, prefix="!", device="cpu").slots[0]) == 1
