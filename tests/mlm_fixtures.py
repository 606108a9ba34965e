"""Tiny Hugging Face language models with random weights, built offline for tests.

Shared by the empirical tests (helper modules import it as ``from mlm_fixtures import ...``).

- :func:`word_tokenizer` — a WordLevel tokenizer over a few words plus the architecture's special
  tokens, with a whitespace pre-tokenizer and a template post-processor (without those two a
  WordLevel tokenizer silently mis-tokenises and adds no [CLS]/[SEP]).
- :func:`tiny_masked_lm` — a BERT, RoBERTa or ModernBERT masked LM (a few thousand parameters).
- :func:`tiny_causal_lm` — a GPT-2 causal LM with a BOS token.
- :func:`save_model` — ``save_pretrained`` of model and tokenizer into a folder (safetensors).

Every builder is seeded, so two calls with the same arguments give identical weights.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    BertConfig,
    BertForMaskedLM,
    GPT2Config,
    GPT2LMHeadModel,
    ModernBertConfig,
    ModernBertForMaskedLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    RobertaConfig,
    RobertaForMaskedLM,
)

#: Default content words: four symbols and an unused slot that must stay out of the support.
WORDS = ("a", "b", "c", "!")

ARCHITECTURES = ("bert", "roberta", "modernbert")

_SPECIALS = {
    # style: (pad, unk, cls/bos, sep/eos, mask)
    "bert": ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    "roberta": ("<pad>", "<unk>", "<s>", "</s>", "<mask>"),
    "gpt2": ("<pad>", "<unk>", "<|bos|>", "<|eos|>", None),
}


def word_tokenizer(words: tuple[str, ...] = WORDS, style: str = "bert") -> PreTrainedTokenizerFast:
    """WordLevel tokenizer: specials first (ids 0..), then ``words``, then one ``[unused0]`` slot.

    ``style`` "bert" / "roberta" wraps content as ``CLS x SEP`` / ``<s> x </s>``; "gpt2" prepends
    a BOS token only.
    """
    pad, unk, cls, sep, mask = _SPECIALS[style]
    specials = [t for t in (pad, unk, cls, sep, mask) if t is not None]
    vocab = {tok: i for i, tok in enumerate([*specials, *words, "[unused0]"])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if style == "gpt2":
        core.post_processor = processors.TemplateProcessing(single=f"{cls} $A", special_tokens=[(cls, vocab[cls])])
        return PreTrainedTokenizerFast(tokenizer_object=core, unk_token=unk, pad_token=pad, bos_token=cls,
                                       eos_token=sep)
    core.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token=unk, pad_token=pad, cls_token=cls,
                                   sep_token=sep, mask_token=mask, bos_token=cls, eos_token=sep)


def tiny_masked_lm(arch: str = "bert", words: tuple[str, ...] = WORDS, seed: int = 0, hidden: int = 16,
                   layers: int = 2, max_positions: int = 16) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A masked LM of architecture ``arch`` with random (seeded) weights, in eval mode, and its tokenizer.

    Weights are drawn with a larger scale than the default initialisation so that the
    conditionals genuinely depend on the context (random BERTs are otherwise nearly constant).
    ``max_positions`` content+special positions fit (RoBERTa gets two extra slots for its
    padding offset).
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {ARCHITECTURES}, got {arch!r}")
    tok = word_tokenizer(words, "roberta" if arch == "roberta" else "bert")
    ids = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, hidden_size=hidden, num_hidden_layers=layers,
               num_attention_heads=2, intermediate_size=2 * hidden)
    torch.manual_seed(seed)
    if arch == "bert":
        model = BertForMaskedLM(BertConfig(max_position_embeddings=max_positions, **ids))
    elif arch == "roberta":
        model = RobertaForMaskedLM(RobertaConfig(max_position_embeddings=max_positions + tok.pad_token_id + 1,
                                                 bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, **ids))
    else:
        model = ModernBertForMaskedLM(ModernBertConfig(
            max_position_embeddings=max_positions, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
            cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id, global_attn_every_n_layers=1,
            local_attention=max_positions, **ids))
    _spread_weights(model, seed)
    return model.eval(), tok


def tiny_causal_lm(words: tuple[str, ...] = WORDS, seed: int = 0, hidden: int = 16,
                   layers: int = 2, max_positions: int = 16) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A GPT-2 causal LM with random (seeded) weights, in eval mode, and its BOS-prepending tokenizer."""
    tok = word_tokenizer(words, "gpt2")
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=max_positions, n_embd=hidden,
                                       n_layer=layers, n_head=2, bos_token_id=tok.bos_token_id,
                                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    _spread_weights(model, seed)
    return model.eval(), tok


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, folder: str | Path) -> Path:
    """Save weights (safetensors), config and tokenizer files into ``folder``; returns it."""
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _spread_weights(model: PreTrainedModel, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "norm" not in name.lower():
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / p.shape[-1] ** 0.5))


def set_inputs(frame: list[int], allowed: dict[int, list[int]]) -> Iterator[list[int]]:
    """Every input of a relaxation's set: ``frame`` with each position k in ``allowed`` set to each of its
    tokens (full token ids)."""
    keys = sorted(allowed)
    for combo in itertools.product(*(allowed[k] for k in keys)):
        ids = list(frame)
        for k, t in zip(keys, combo):
            ids[k] = t
        yield ids
