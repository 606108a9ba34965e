"""Tiny masked LMs with random weights for the checks of paper G's constants of a model (built offline).

A BERT, RoBERTa or ModernBERT of width 16 or 32, one or two layers and two heads over the words
``a b c d`` (specials [PAD] [UNK] [CLS] [SEP] [MASK], [CLS] x [SEP] framing), seeded, so two builds with the
same :class:`ModelSpec` have identical weights. ``spread`` redraws every weight matrix with standard
deviation 1/sqrt(fan-in) (random BERTs at their own initialisation, 0.02, have nearly constant
conditionals); without it the model keeps its initialisation, where the affine relaxation of
:mod:`mlmix.empirical.model_constants.relaxation` stays tight. A source is the model's conditionals on
``n`` free positions (no fixed token) over the first ``q`` words at a temperature
(:class:`~mlmix.empirical.models.mlm.MaskedLMConditionals`, float32 on the CPU).

torch and transformers load on the first build, not on import.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import asdict, dataclass
from typing import Any

from hypothesis import strategies as st

from mlmix.verify import instances as S

#: The content words; a source's alphabet is the first |V| of them.
WORDS = ("a", "b", "c", "d")
ARCHITECTURES = ("bert", "roberta", "modernbert")
#: Input positions of every model: [CLS], up to 4 free positions, [SEP], with room to spare.
MAX_POSITIONS = 8


@dataclass(frozen=True)
class ModelSpec:
    """How a tiny masked LM is built (JSON-able: it rebuilds the model)."""

    arch: str
    seed: int
    hidden: int = 16
    layers: int = 1
    spread: bool = True


@functools.lru_cache(maxsize=1)
def tokenizer() -> Any:
    """The WordLevel tokenizer of :data:`WORDS` (built once)."""
    # deferred: tokenizers and transformers load only when a model check runs
    from mlmix.empirical.models.shipped_model import build_tokenizer

    return build_tokenizer(WORDS)


@functools.lru_cache(maxsize=16)
def tiny_masked_lm(spec: ModelSpec) -> Any:
    """The model of ``spec`` in eval mode (cached: the checks query it many times)."""
    # deferred: torch and transformers load only when a model check runs
    import torch
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        ModernBertConfig,
        ModernBertForMaskedLM,
        RobertaConfig,
        RobertaForMaskedLM,
    )

    if spec.arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {ARCHITECTURES}, got {spec.arch!r}")
    tok = tokenizer()
    common = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, hidden_size=spec.hidden,
                  num_hidden_layers=spec.layers, num_attention_heads=2, intermediate_size=2 * spec.hidden)
    torch.manual_seed(spec.seed)
    if spec.arch == "bert":
        model = BertForMaskedLM(BertConfig(max_position_embeddings=MAX_POSITIONS, **common))
    elif spec.arch == "roberta":
        model = RobertaForMaskedLM(RobertaConfig(max_position_embeddings=MAX_POSITIONS + tok.pad_token_id + 1,
                                                 bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
                                                 **common))
    else:
        model = ModernBertForMaskedLM(ModernBertConfig(
            max_position_embeddings=MAX_POSITIONS, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
            cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id, global_attn_every_n_layers=1,
            local_attention=MAX_POSITIONS, **common))
    if spec.spread:
        gen = torch.Generator().manual_seed(spec.seed + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() >= 2 and "norm" not in name.lower():
                    p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
    return model.eval()


def masked_lm_source(spec: ModelSpec, length: int, vocab_size: int, temperature: float,
                     dtype: str = "float32") -> Any:
    """The conditionals of ``spec``'s model on ``length`` free positions over the first ``vocab_size``
    words at ``temperature`` (a MaskedLMConditionals on the CPU, float32; "float64": on a float64 copy of
    the model, the reference evaluation of the float32 scores)."""
    # deferred: torch loads only when a model check runs
    from mlmix.empirical.models.mlm import MaskedLMConditionals

    model = tiny_masked_lm(spec) if dtype == "float32" else float64_model(spec)
    return MaskedLMConditionals(model, tokenizer(), length, candidates=" ".join(WORDS[:vocab_size]),
                                device="cpu", temperature=temperature, dtype=dtype)


@functools.lru_cache(maxsize=8)
def float64_model(spec: ModelSpec) -> Any:
    """The model of ``spec`` in float64 (a copy: the float32 one stays as it is)."""
    return copy.deepcopy(tiny_masked_lm(spec)).double()


@st.composite
def model_specs(draw, architectures: tuple[str, ...] = ARCHITECTURES, spread: tuple[bool, ...] = (True, False),
                layers: tuple[int, ...] = (1, 2)) -> ModelSpec:
    """A model: architecture, seed 0..7 (a few distinct models, so the cache serves the search), width 16
    or 32, ``layers`` and ``spread`` drawn from the tuples (repeat an entry to draw it more often)."""
    return ModelSpec(draw(st.sampled_from(architectures)), draw(st.integers(0, 7)), draw(st.sampled_from((16, 32))),
                     draw(st.sampled_from(layers)), draw(st.sampled_from(spread)))


@st.composite
def masked_lm_instances(draw, max_length: int = 3, temperature: tuple[float, float] = (0.1, 10.0),
                        architectures: tuple[str, ...] = ARCHITECTURES) -> S.Instance:
    """An :class:`~mlmix.verify.instances.Instance` holding a tiny masked LM's conditionals: n in 2..max_length,
    |V| in 2..4, T log-uniform in ``temperature``; params rebuild it."""
    spec = draw(model_specs(architectures))
    n = draw(st.integers(2, max_length))
    q = draw(st.integers(2, len(WORDS)))
    T = draw(S.temperatures(*temperature))
    source = masked_lm_source(spec, n, q, T)
    return S.Instance(source, "tiny-mlm", asdict(spec))
