"""Checkpoints users actually have: pickled pytorch_model.bin folders (only with allow_pickle, read
with torch.load(weights_only=True)), a lone vocab.txt as the tokenizer, and ``mlmix convert`` to a
safetensors folder that reproduces the original logits exactly."""

import json

import numpy as np
import pytest
import torch
from mlm_fixtures import WORDS, save_model, tiny_masked_lm

from mlmix.cli import main
from mlmix.empirical.models.checkpoint_copy import convert
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.empirical.models.vocab import tokenizer_from_vocab

N = 3
BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "[unused0]"]  # the fixtures' id order


def pickle_folder(path, arch="bert", seed=0, tokenizer="vocab"):
    """config.json + pytorch_model.bin (+ vocab.txt, the tokenizer files, or nothing)."""
    model, tok = tiny_masked_lm(arch, seed=seed)
    path.mkdir(parents=True)
    model.config.save_pretrained(path)
    torch.save(model.state_dict(), path / "pytorch_model.bin")
    if tokenizer == "vocab":
        (path / "vocab.txt").write_text("\n".join(BERT_VOCAB) + "\n")
    elif tokenizer == "files":
        tok.save_pretrained(path)
    return model, tok


def logits(mlm, rows=6):
    x = np.random.default_rng(0).integers(0, mlm.space.vocab_size, (rows, mlm.space.length))
    return mlm.all_log_conditionals(x)


def test_pickled_weights_need_allow_pickle_and_then_give_the_original_logits(tmp_path):
    model, tok = pickle_folder(tmp_path / "m", tokenizer="files")
    with pytest.raises(ValueError, match="only pickled weights.*--allow-pickle.*mlmix convert"):
        MaskedLMConditionals.from_pretrained(tmp_path / "m", N)
    loaded = MaskedLMConditionals.from_pretrained(tmp_path / "m", N, allow_pickle=True, device="cpu")
    np.testing.assert_array_equal(logits(loaded), logits(MaskedLMConditionals(model, tok, N, device="cpu")))


def test_pickles_are_read_with_weights_only(tmp_path, monkeypatch):
    pickle_folder(tmp_path / "m", tokenizer="files")
    seen = []
    original = torch.load

    def spy(*args, **kwargs):
        seen.append(kwargs.get("weights_only"))
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    MaskedLMConditionals.from_pretrained(tmp_path / "m", N, allow_pickle=True, device="cpu")
    assert seen and all(w is True for w in seen)


def test_a_lone_vocab_txt_becomes_the_tokenizer(tmp_path):
    model, tok = pickle_folder(tmp_path / "m", tokenizer="vocab")
    loaded = MaskedLMConditionals.from_pretrained(tmp_path / "m", N, allow_pickle=True, device="cpu",
                                                  prefix="a !", suffix="c")
    ref = MaskedLMConditionals(model, tok, N, prefix="a !", suffix="c", device="cpu")
    assert loaded.decode(np.arange(4)) == list(WORDS)
    np.testing.assert_array_equal(loaded._template.numpy(), ref._template.numpy())  # same ids, [CLS] .. [SEP]
    np.testing.assert_array_equal(logits(loaded), logits(ref))


def test_folders_without_weights_tokenizer_or_with_missing_weights_are_clear_errors(tmp_path):
    pickle_folder(tmp_path / "notok", tokenizer=None)
    with pytest.raises(ValueError, match="has no tokenizer.*mlmix convert .* --vocab"):
        MaskedLMConditionals.from_pretrained(tmp_path / "notok", N, allow_pickle=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no weights"):
        MaskedLMConditionals.from_pretrained(tmp_path / "empty", N)
    model, _ = pickle_folder(tmp_path / "cut", tokenizer="vocab")
    state = model.state_dict()
    state.pop("bert.encoder.layer.0.attention.self.query.weight")
    torch.save(state, tmp_path / "cut" / "pytorch_model.bin")
    with pytest.raises(ValueError, match="lacks 1 weights.*would stay random"):
        MaskedLMConditionals.from_pretrained(tmp_path / "cut", N, allow_pickle=True)


def test_tokenizer_from_vocab_wordlevel_wordpiece_and_errors(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<cls>\n<pad>\n<eos>\n<unk>\nL\nA\nG\n<mask>\n")
    esm = tokenizer_from_vocab(vocab)
    assert esm("L A G")["input_ids"] == [0, 4, 5, 6, 2] and esm.mask_token == "<mask>"
    assert esm("LAG", add_special_tokens=False)["input_ids"] == [3]  # one unknown word, not three residues
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nplay\n##ing\nthe")
    wp = tokenizer_from_vocab(vocab)
    assert wp.convert_ids_to_tokens(wp("the playing")["input_ids"]) == ["[CLS]", "the", "play", "##ing", "[SEP]"]
    assert tokenizer_from_vocab(vocab, lowercase=True)("The")["input_ids"][1] == 7
    for lines, message in [(["[PAD]", "[MASK]", "a"], "no unknown token"), (["[UNK]", "a"], "no mask token"),
                           (["[UNK]", "[MASK]", "a", "a"], "line 4 is a repeat of 'a'")]:
        vocab.write_text("\n".join(lines))
        with pytest.raises(ValueError, match=message):
            tokenizer_from_vocab(vocab)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_convert_writes_a_safetensors_copy_with_identical_logits(tmp_path, arch):
    model, tok = pickle_folder(tmp_path / "src", arch=arch, seed=4, tokenizer="files")
    info = convert(tmp_path / "src", tmp_path / "dst")
    assert "model.safetensors" in info["files"] and "tokenizer.json" in info["files"] and info["files"][-1] == \
        "config.json"
    copy = MaskedLMConditionals.from_pretrained(tmp_path / "dst", N, device="cpu")  # no pickle needed
    np.testing.assert_array_equal(logits(copy), logits(MaskedLMConditionals(model, tok, N, device="cpu")))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dst.")]  # no temporary folder left


def test_convert_cli_with_a_separate_vocab_file(tmp_path, capsys):
    model, tok = pickle_folder(tmp_path / "src", tokenizer=None)
    (tmp_path / "vocab.txt").write_text("\n".join(BERT_VOCAB))
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--vocab", str(tmp_path / "vocab.txt")]) == 0
    assert "reproduces the original's logits exactly" in capsys.readouterr().out
    assert json.loads((tmp_path / "dst" / "config.json").read_text())["model_type"] == "bert"
    copy = MaskedLMConditionals.from_pretrained(tmp_path / "dst", N, device="cpu")
    np.testing.assert_array_equal(logits(copy), logits(MaskedLMConditionals(model, tok, N, device="cpu")))
    # a second conversion into the same folder is refused (one line, exit code 2)
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--vocab", str(tmp_path / "vocab.txt")]) == 2
    err = capsys.readouterr().err
    assert "not an empty folder" in err and len(err.strip().splitlines()) == 1
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "dst2")]) == 2  # no tokenizer anywhere
    assert "no tokenizer" in capsys.readouterr().err and not (tmp_path / "dst2").exists()


def test_estimate_cli_refuses_pickles_unless_allowed(tmp_path, capsys):
    pickle_folder(tmp_path / "m", tokenizer="vocab")
    base = ["estimate", "--model", str(tmp_path / "m"), "--length", "2", "--contexts", "4", "--rectangles", "4",
            "--no-progress", "--json", "--exact", "no"]
    assert main(base) == 2
    assert "--allow-pickle" in capsys.readouterr().err
    assert main([*base, "--allow-pickle"]) == 0
    assert json.loads(capsys.readouterr().out)["vocab_size"] == 4


def test_saved_safetensors_folder_still_loads_without_flags(tmp_path):
    model, tok = tiny_masked_lm("modernbert", seed=1)
    folder = save_model(model, tok, tmp_path / "mb")
    again = MaskedLMConditionals.from_pretrained(folder, N, device="cpu")
    np.testing.assert_array_equal(logits(again), logits(MaskedLMConditionals(model, tok, N, device="cpu")))


def test_an_esm_style_protein_model_with_a_lone_vocab_txt(tmp_path):
    """ESM vocabularies (<cls> <pad> <eos> <unk> residues <mask>), rotary positions and token dropout:
    the frame's conditionals equal the plain forward pass on the tokenizer's ids with the mask placed
    by hand, and the head run only at the mask equals the full head."""
    from transformers import EsmConfig, EsmForMaskedLM

    residues = ["L", "A", "G", "V", "S", "E", "R", "T", "I", "D", "P", "K", "Q", "N", "F", "Y", "M", "H", "W", "C"]
    tokens = ["<cls>", "<pad>", "<eos>", "<unk>", *residues, "<mask>"]
    torch.manual_seed(0)
    config = EsmConfig(vocab_size=len(tokens), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=32, max_position_embeddings=64, pad_token_id=1, mask_token_id=len(tokens) - 1,
                       position_embedding_type="rotary", token_dropout=True)
    model = EsmForMaskedLM(config).eval()
    model.save_pretrained(tmp_path / "esm", safe_serialization=True)
    (tmp_path / "esm" / "vocab.txt").write_text("\n".join(tokens))
    mlm = MaskedLMConditionals.from_pretrained(tmp_path / "esm", frame="M K _ L _ A", candidates="A C D E",
                                               device="cpu")
    assert mlm.describe()["architecture"] == "EsmForMaskedLM" and mlm._template.tolist()[0] == 0  # <cls>
    x = np.array([[0, 1], [2, 3], [3, 3]])
    got = mlm.all_log_conditionals(x)
    for row, state in zip(got, x):
        words = ["M", "K", "ACDE"[state[0]], "L", "ACDE"[state[1]], "A"]
        for site, position in ((0, 2), (1, 4)):
            ids = mlm.tokenizer(" ".join(words))["input_ids"]  # <cls> ... <eos>
            ids[1 + position] = config.mask_token_id
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, 1 + position].double().numpy()
            ref = logits[mlm.support_ids]
            np.testing.assert_allclose(row[site], ref - np.logaddexp.reduce(ref), atol=1e-5)
    mlm._head = None  # the generic path: full forward, then gather
    np.testing.assert_allclose(mlm.all_log_conditionals(x), got, atol=1e-6)
