"""Frames (mlmix.empirical.models.frames): free positions anywhere in a fixed context, alphabets of single
tokens, and the clear errors a new user needs. Scores are checked against the model's own full
forward pass on the text with the mask placed by hand."""

import numpy as np
import pytest
import torch
from mlm_fixtures import save_model, tiny_causal_lm, tiny_masked_lm, word_tokenizer
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from mlmix.empirical.models.causal import CausalLMConditionals
from mlmix.empirical.models.frames import build_frame, parse_alphabet
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.local.rectangles import all_rectangles


@pytest.fixture(scope="module", params=["bert", "roberta", "modernbert"])
def model(request):
    return tiny_masked_lm(request.param, seed=21)


def reference_scores(mlm, text_tokens, site_position, support):
    """Full model(...).logits at the masked position of the tokenised text (specials added by the tokenizer)."""
    ids = mlm.tokenizer(" ".join(text_tokens))["input_ids"]
    head = len(ids) - len(text_tokens) - 1  # one closing special token
    ids[head + site_position] = mlm.tokenizer.mask_token_id
    with torch.no_grad():
        logits = mlm.model(input_ids=torch.tensor([ids])).logits[0, head + site_position]
    return logits[torch.as_tensor(support)].double().numpy()


def test_free_positions_inside_the_frame_are_scored_like_a_hand_masked_text(model):
    mlm = MaskedLMConditionals(*model, frame="! _ c _ a", candidates="a b c", device="cpu")
    assert mlm.space.length == 2 and mlm.space.vocab_size == 3 and mlm.frame.free == (1, 3)
    assert mlm.frame.text(mlm.tokenizer) == "! _ c _ a"
    states = np.array([[0, 2], [1, 1], [2, 0]])
    for site, position in ((0, 1), (1, 3)):
        got = mlm.scores(states, site)
        for row, x in zip(got, states):
            text = ["!", "abc"[x[0]], "c", "abc"[x[1]], "a"]
            np.testing.assert_allclose(row, reference_scores(mlm, text, position, mlm.support_ids), atol=1e-5)


def test_prefix_and_suffix_give_the_same_frame_as_the_frame_text(model):
    a = MaskedLMConditionals(*model, frame="c ! _ _ _ b", device="cpu")
    b = MaskedLMConditionals(*model, 3, prefix="c !", suffix="b", device="cpu")
    c = MaskedLMConditionals(*model, frame="_ _ _", prefix="c !", suffix=["b"], device="cpu")
    assert a.frame == b.frame == c.frame and a.frame.fixed == 3
    x = np.array([[0, 3, 1]])
    np.testing.assert_array_equal(a.all_log_conditionals(x), b.all_log_conditionals(x))


def test_the_right_context_changes_the_conditionals(model):
    left = MaskedLMConditionals(*model, 2, prefix="c", device="cpu")
    both = MaskedLMConditionals(*model, 2, prefix="c", suffix="! ! a", device="cpu")
    x = np.array([[0, 1]])
    assert np.abs(left.scores(x, 1) - both.scores(x, 1)).max() > 1e-3


def test_alphabets_from_text_file_list_and_ids(tmp_path):
    tok = word_tokenizer()
    (tmp_path / "alpha.txt").write_text("c\n!  a\n")
    assert parse_alphabet(tok, "@" + str(tmp_path / "alpha.txt")) == tok.convert_tokens_to_ids(["c", "!", "a"])
    assert parse_alphabet(tok, "b a") == parse_alphabet(tok, ["b", "a"]) == parse_alphabet(tok, [6, 5])
    everything = parse_alphabet(tok, None, excluded=set(tok.all_special_ids))
    assert tok.convert_ids_to_tokens(everything) == ["a", "b", "c", "!"]  # [unused0] and specials left out
    with pytest.raises(ValueError, match="does not exist"):
        parse_alphabet(tok, "@" + str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="duplicates: \\['a'\\]"):
        parse_alphabet(tok, "a b a")
    with pytest.raises(ValueError, match="at least 2"):
        parse_alphabet(tok, "a")
    with pytest.raises(ValueError, match="special"):
        parse_alphabet(tok, "a [MASK]", excluded=set(tok.all_special_ids))


def test_unspaced_residues_and_multi_token_entries_are_refused_with_a_hint():
    tok = word_tokenizer(("E", "V", "Q", "S", "G"))
    with pytest.raises(ValueError, match="'EVQ'.*separated by spaces"):
        build_frame(tok, frame="EVQ _ _ S G", candidates="E V")
    with pytest.raises(ValueError, match="unknown candidate token 'EV'.*separate single tokens"):
        build_frame(tok, length=2, candidates="EV Q")
    # a WordPiece vocabulary splits "ab" into two tokens: not a single token
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##b"])}
    core = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    wp = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", mask_token="[MASK]")
    with pytest.raises(ValueError, match="'ab' is 2 tokens of the tokenizer \\(a ##b\\), not one"):
        parse_alphabet(wp, "a ab")


def test_frame_errors():
    tok = word_tokenizer()
    with pytest.raises(ValueError, match="no free position"):
        build_frame(tok, frame="a b c")
    with pytest.raises(ValueError, match="--length 3 disagrees with the 2 free positions"):
        build_frame(tok, frame="a _ _", length=3)
    with pytest.raises(ValueError, match="--length"):
        build_frame(tok)
    with pytest.raises(ValueError, match="no tokenizer"):
        build_frame(None, length=2)
    with pytest.raises(ValueError, match="unknown to the tokenizer: 'zz'"):
        build_frame(tok, length=2, suffix="a zz")


def test_a_frame_longer_than_the_model_allows_is_refused():
    model, tok = tiny_masked_lm("bert", max_positions=16)
    MaskedLMConditionals(model, tok, frame="a a a a a a _ _ a a a a a a", device="cpu")  # 16 positions
    with pytest.raises(ValueError, match="frame needs 17 positions.*longer than the 16"):
        MaskedLMConditionals(model, tok, frame="a a a a a a _ _ a a a a a a a", device="cpu")


def test_a_missing_tokenizer_is_a_clear_error():
    model, _ = tiny_masked_lm("bert")
    with pytest.raises(ValueError, match="no tokenizer"):
        MaskedLMConditionals(model, None, 2, device="cpu")


def test_causal_frames_with_a_right_context_stay_compatible(tmp_path):
    model, tok = tiny_causal_lm(seed=5)
    causal = CausalLMConditionals(model, tok, frame="a _ b _ !", device="cpu")
    assert all_rectangles(causal).max < 1e-5
    states = causal.space.all_states()[:6]
    logp = causal.log_prob(states)
    for x, value in zip(states, logp):
        ids = tok(" ".join(["a", WORD[x[0]], "b", WORD[x[1]], "!"]))["input_ids"]
        with torch.no_grad():
            out = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)
        # every token after the first free position (the fixed "b" and "!" included), none before
        want = sum(float(out[t - 1, ids[t]]) for t in range(2, len(ids)))
        assert value == pytest.approx(want, abs=1e-4)


WORD = ("a", "b", "c", "!")


def test_a_saved_folder_keeps_the_frame_semantics(tmp_path):
    model, tok = tiny_masked_lm("roberta", seed=2)
    folder = save_model(model, tok, tmp_path / "rb")
    direct = MaskedLMConditionals(model, tok, frame="b _ a _", device="cpu")
    loaded = MaskedLMConditionals.from_pretrained(folder, frame="b _ a _", device="cpu")
    x = np.array([[1, 2], [3, 0]])
    np.testing.assert_array_equal(direct.all_log_conditionals(x), loaded.all_log_conditionals(x))
