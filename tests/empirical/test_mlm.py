"""mlmix.empirical.models.mlm: masked-LM conditionals against the model's own full forward pass, on tiny
BERT / RoBERTa / ModernBERT models with random weights (built offline, tests/mlm_fixtures.py)."""

from functools import lru_cache

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mlm_fixtures import ARCHITECTURES, WORDS, save_model, tiny_masked_lm
from scipy.special import log_softmax

from mlmix.empirical.models.mlm import MaskedLMConditionals

N = 4


@pytest.fixture(scope="module", params=ARCHITECTURES)
def mlm(request):
    model, tok = tiny_masked_lm(request.param, seed=3)
    return MaskedLMConditionals(model, tok, N, device="cpu")


def full_forward_scores(mlm: MaskedLMConditionals, context: np.ndarray, site: int, prefix: str = "") -> np.ndarray:
    """Independent reference: tokenize the text, mask the site, full model(...).logits, support columns."""
    text = " ".join([prefix] * bool(prefix) + mlm.decode(context))
    ids = mlm.tokenizer(text)["input_ids"]
    start = len(ids) - 1 - N  # content sits right before the closing special token
    ids[start + site] = mlm.tokenizer.mask_token_id
    with torch.no_grad():
        logits = mlm.model(input_ids=torch.tensor([ids])).logits[0, start + site]
    return logits[torch.as_tensor(mlm.support_ids)].double().numpy()


def test_support_is_the_words_without_special_or_unused_tokens(mlm):
    assert mlm.decode(np.arange(mlm.space.vocab_size)) == list(WORDS)
    assert mlm.space.vocab_size == len(WORDS) and mlm.space.length == N
    assert mlm.encode("b ! a c").tolist() == [1, 3, 0, 2]
    assert mlm.encode(["c", "a"]).tolist() == [2, 0]
    assert mlm.encode("a zz [unused0] b", skip_outside=True).tolist() == [0, 1]


def test_scores_equal_the_full_forward_pass_and_conditionals_are_distributions(mlm):
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, mlm.space.vocab_size, (6, N))
    sites = rng.integers(0, N, 6)
    scores = mlm.scores(ctx, sites)
    ref = np.stack([full_forward_scores(mlm, c, s) for c, s in zip(ctx, sites)])
    np.testing.assert_allclose(scores, ref, atol=1e-5)
    logp = mlm.log_conditionals(ctx, sites)
    assert logp.dtype == np.float64
    np.testing.assert_allclose(np.exp(logp).sum(axis=1), 1.0, atol=1e-12)
    # the symbol at the queried site is ignored
    other = ctx.copy()
    other[np.arange(6), sites] = (other[np.arange(6), sites] + 1) % mlm.space.vocab_size
    np.testing.assert_allclose(mlm.scores(other, sites), scores, atol=1e-6)


def test_conditionals_depend_on_the_context(mlm):
    ctx = np.array([[0, 0, 0, 0], [3, 3, 0, 3]])
    s = mlm.scores(ctx, 2)
    assert np.abs(s[0] - s[1]).max() > 1e-2


def test_temperature_scales_the_scores(mlm):
    ctx = np.array([[0, 1, 2, 3], [3, 3, 1, 0]])
    s = mlm.scores(ctx, 1)
    for T in (0.1, 0.5, 3.0):
        hot = mlm.at_temperature(T)
        np.testing.assert_allclose(hot.log_conditionals(ctx, 1), log_softmax(s / T, axis=1), atol=1e-12)
        np.testing.assert_allclose(hot.log_conditionals_torch(hot.to_tensor(ctx), 1).double().numpy(),
                                   log_softmax(s / T, axis=1), atol=1e-5)
    assert mlm.temperature == 1.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature"):
            mlm.at_temperature(bad)


def test_batched_equals_one_at_a_time(mlm):
    rng = np.random.default_rng(1)
    ctx = rng.integers(0, mlm.space.vocab_size, (23, N))
    sites = rng.integers(0, N, 23)
    whole = mlm.scores(ctx, sites)
    singles = np.concatenate([mlm.scores(ctx[b:b + 1], sites[b:b + 1]) for b in range(23)])
    saved = mlm.batch_size
    try:
        mlm.batch_size = 5
        chunked = mlm.scores(ctx, sites)
    finally:
        mlm.batch_size = saved
    np.testing.assert_allclose(singles, whole, atol=1e-5)
    np.testing.assert_allclose(chunked, whole, atol=1e-5)


@lru_cache(maxsize=None)
def cached_mlm(arch: str) -> MaskedLMConditionals:
    return MaskedLMConditionals(*tiny_masked_lm(arch, seed=8), N, device="cpu")


@settings(max_examples=15)
@given(arch=st.sampled_from(ARCHITECTURES), rows=st.integers(1, 12), batch_size=st.integers(1, 7),
       seed=st.integers(0, 2**16), T=st.floats(0.05, 20.0))
def test_any_batching_gives_the_per_row_conditionals(arch, rows, batch_size, seed, T):
    mlm = cached_mlm(arch).at_temperature(T)
    rng = np.random.default_rng(seed)
    ctx = rng.integers(0, mlm.space.vocab_size, (rows, N))
    sites = rng.integers(0, N, rows)
    mlm.batch_size = batch_size  # the clone's own attribute
    got = mlm.log_conditionals(ctx, sites)
    ref = np.stack([full_forward_scores(mlm, c, s) for c, s in zip(ctx, sites)])
    np.testing.assert_allclose(got, log_softmax(ref / T, axis=1), atol=2e-5 * max(1.0, 1.0 / T))


def test_all_sites_mode_equals_per_site_queries(mlm):
    rng = np.random.default_rng(2)
    ctx = rng.integers(0, mlm.space.vocab_size, (9, N))
    per_site = np.stack([mlm.log_conditionals(ctx, i) for i in range(N)], axis=1)
    np.testing.assert_allclose(mlm.all_log_conditionals(ctx), per_site, atol=1e-5)
    torch_all = mlm.all_log_conditionals_torch(mlm.to_tensor(ctx))
    assert torch_all.shape == (9, N, mlm.space.vocab_size) and torch_all.device == mlm.device
    np.testing.assert_allclose(torch_all.double().numpy(), per_site, atol=1e-5)


def test_head_only_at_the_mask_equals_the_full_head():
    model, tok = tiny_masked_lm("bert", seed=5)
    fast = MaskedLMConditionals(model, tok, N, device="cpu")
    full = MaskedLMConditionals(model, tok, N, device="cpu")
    full._head = None  # the generic path: full forward pass, then gather
    ctx = np.random.default_rng(3).integers(0, 4, (7, N))
    np.testing.assert_allclose(fast.all_log_conditionals(ctx), full.all_log_conditionals(ctx), atol=1e-6)


def test_prefix_is_placed_before_the_content_and_changes_the_conditionals():
    model, tok = tiny_masked_lm("bert", seed=4)
    plain = MaskedLMConditionals(model, tok, N, device="cpu")
    pre = MaskedLMConditionals(model, tok, N, prefix="! ! c", device="cpu")
    assert int(pre.slots[0]) == 4 and pre.space == plain.space
    ctx = np.array([[0, 1, 2, 0]])
    np.testing.assert_allclose(pre.scores(ctx, 2)[0], full_forward_scores(pre, ctx[0], 2, prefix="! ! c"), atol=1e-5)
    assert np.abs(pre.scores(ctx, 2) - plain.scores(ctx, 2)).max() > 1e-3


def test_candidates_restrict_the_support():
    model, tok = tiny_masked_lm("roberta", seed=6)
    full = MaskedLMConditionals(model, tok, N, device="cpu")
    sub = MaskedLMConditionals(model, tok, N, candidates=["!", "a"], device="cpu")
    assert sub.decode(np.array([0, 1])) == ["!", "a"]
    ctx_sub = np.array([[0, 1, 1, 0]])
    ctx_full = np.array([[3, 0, 0, 3]])
    np.testing.assert_allclose(sub.scores(ctx_sub, 1), full.scores(ctx_full, 1)[:, [3, 0]], atol=1e-6)
    with pytest.raises(ValueError, match="special"):
        MaskedLMConditionals(model, tok, N, candidates=["a", "<mask>"], device="cpu")
    with pytest.raises(ValueError, match="unknown candidate"):
        MaskedLMConditionals(model, tok, N, candidates=["a", "zz"], device="cpu")
    with pytest.raises(ValueError, match="duplicates"):
        MaskedLMConditionals(model, tok, N, candidates=["a", "a"], device="cpu")


def test_save_and_reload_from_a_local_folder_gives_identical_logits(tmp_path):
    model, tok = tiny_masked_lm("modernbert", seed=7)
    folder = save_model(model, tok, tmp_path / "m")
    first = MaskedLMConditionals(model, tok, N, device="cpu")
    again = MaskedLMConditionals.from_pretrained(folder, N, device="cpu")
    ctx = np.random.default_rng(4).integers(0, 4, (5, N))
    np.testing.assert_array_equal(again.all_log_conditionals(ctx), first.all_log_conditionals(ctx))


def test_an_unknown_model_id_offline_names_the_local_folder_route(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="not available offline.*--local-dir"):
        MaskedLMConditionals.from_pretrained("mlmix-test/no-such-model", N)
    with pytest.raises(ValueError, match="does not exist"):
        MaskedLMConditionals.from_pretrained("./no/such/folder", N)


@pytest.mark.parametrize("arch, longest", [("bert", 14), ("roberta", 14), ("modernbert", 14)])
def test_sequences_longer_than_the_model_allows_are_refused(arch, longest):
    model, tok = tiny_masked_lm(arch, max_positions=16)
    assert MaskedLMConditionals(model, tok, longest, device="cpu").space.length == longest
    with pytest.raises(ValueError, match="longer than the 16 positions"):
        MaskedLMConditionals(model, tok, longest + 1, device="cpu")


def test_bad_queries_are_refused(mlm):
    ctx = np.zeros((2, N), dtype=np.int64)
    with pytest.raises(ValueError, match="site must be <= 3, got 4"):
        mlm.scores(ctx, 4)
    with pytest.raises(ValueError, match="sites out of range"):
        mlm.scores(ctx, np.array([0, -1]))
    with pytest.raises(ValueError, match="shape"):
        mlm.scores(ctx, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="symbols must lie"):
        mlm.scores(ctx + 4, 0)
    with pytest.raises(ValueError, match="shape"):
        mlm.scores(np.zeros((2, N + 1), dtype=np.int64), 0)
    with pytest.raises(TypeError, match="integer"):
        mlm.scores(ctx.astype(float), 0)
    with pytest.raises(ValueError, match="unknown input token 'zz'"):
        mlm.encode(["a", "zz"])
    with pytest.raises(ValueError, match="unknown to the tokenizer"):
        mlm.encode("a zz")
    with pytest.raises(ValueError, match="not in the support"):
        mlm.encode(["a", "[unused0]"])
    with pytest.raises(ValueError, match="symbols must lie"):
        mlm.log_conditionals_torch(torch.full((1, N), 9), 0)
    with pytest.raises(ValueError, match="device 'cuda' requested") if not torch.cuda.is_available() else \
            pytest.raises(ValueError, match="device must be"):
        MaskedLMConditionals(mlm.model, mlm.tokenizer, N, device="cuda" if not torch.cuda.is_available() else "meta")
    with pytest.raises(ValueError, match="length"):
        MaskedLMConditionals(mlm.model, mlm.tokenizer, 0, device="cpu")


def test_bfloat16_autocast_returns_float64_close_to_float32():
    model, tok = tiny_masked_lm("bert", seed=3)
    ref = MaskedLMConditionals(model, tok, N, device="cpu")
    half = MaskedLMConditionals(model, tok, N, device="cpu", dtype="bfloat16")
    assert half.dtype == torch.bfloat16 and ref.dtype == torch.float32
    ctx = np.random.default_rng(5).integers(0, 4, (6, N))
    got, want = half.log_conditionals(ctx, 2), ref.log_conditionals(ctx, 2)
    assert got.dtype == np.float64 and half.all_log_conditionals(ctx).dtype == np.float64
    np.testing.assert_allclose(np.exp(got).sum(axis=1), 1.0, atol=1e-12)  # normalised in float64
    np.testing.assert_allclose(got, want, atol=0.1)  # bf16 keeps ~3 significant digits
    assert np.abs(got - want).max() > 0  # autocast really ran in bf16


def test_out_of_memory_halves_the_batch_and_keeps_every_row():
    model, tok = tiny_masked_lm("bert", seed=3)
    mlm = MaskedLMConditionals(model, tok, N, device="cpu", batch_size=16)
    ctx = np.random.default_rng(6).integers(0, 4, (13, N))
    sites = np.arange(13) % N
    want = mlm.scores(ctx, sites)
    encoder, seen = mlm._encoder, []

    def small_memory(input_ids):
        seen.append(input_ids.shape[0])
        if input_ids.shape[0] > 3:
            raise torch.cuda.OutOfMemoryError("simulated")
        return encoder(input_ids=input_ids)

    mlm._encoder = small_memory
    np.testing.assert_allclose(mlm.scores(ctx, sites), want, atol=1e-6)
    assert mlm.batch_size == 2 and seen[:4] == [13, 8, 4, 2] and sum(seen[3:]) == 13
    mlm.batch_size = 1  # nothing left to halve: the error reaches the caller
    mlm._encoder = lambda input_ids: small_memory(torch.zeros((4, 1)))
    with pytest.raises(torch.cuda.OutOfMemoryError):
        mlm.scores(ctx, sites)


def test_contexts_with_negative_strides_are_read():
    """A reversed view (x[:, ::-1]) is a valid array of contexts: torch.as_tensor refuses negative
    strides, so the contexts are made contiguous first."""
    model, tok = tiny_masked_lm("bert", seed=11)
    mlm = MaskedLMConditionals(model, tok, 3, device="cpu")
    x = np.array([[0, 1, 2], [2, 1, 0]])
    assert np.array_equal(mlm.all_log_conditionals(x[:, ::-1]), mlm.all_log_conditionals(x[:, ::-1].copy()))
