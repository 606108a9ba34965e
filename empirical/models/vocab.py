"""A working fast tokenizer from a BERT-style ``vocab.txt``: one token per line, id = line number;
WordPiece when the vocabulary has ``##`` continuation pieces, otherwise WordLevel over
whitespace-separated tokens; no lower-casing unless asked; the ``[CLS] x [SEP]`` template (``<cls> x
<eos>`` for ESM-style vocabularies) around every sequence.

Checkpoints as users have them are often a folder with a pickled ``pytorch_model.bin``, a
``config.json`` and at most a ``vocab.txt`` (AntiBERTy's PyPI wheel, many protein and older text models).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

#: Special tokens recognised in a vocab.txt, by role (BERT style first, then ESM / RoBERTa style).
_ROLES = {
    "unk_token": ("[UNK]", "<unk>"),
    "pad_token": ("[PAD]", "<pad>"),
    "cls_token": ("[CLS]", "<cls>", "<s>"),
    "sep_token": ("[SEP]", "<eos>", "</s>"),
    "mask_token": ("[MASK]", "<mask>"),
}


def tokenizer_from_vocab(path: str | Path, lowercase: bool = False, model_max_length: int | None = None):
    """A ``PreTrainedTokenizerFast`` from a BERT-style vocabulary file (see the module docstring)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        raise ValueError(f"vocabulary file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"vocabulary file {path} is unreadable: {err}") from None
    tokens = [t.rstrip("\r") for t in lines]
    while tokens and not tokens[-1]:
        tokens.pop()
    vocab: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if not tok or tok in vocab:
            raise ValueError(f"vocabulary file {path}: line {i + 1} is {'empty' if not tok else f'a repeat of {tok!r}'}")
        vocab[tok] = i
    roles = {role: next((t for t in names if t in vocab), None) for role, names in _ROLES.items()}
    if roles["unk_token"] is None:
        raise ValueError(f"vocabulary file {path} has no unknown token ([UNK] or <unk>)")
    if roles["mask_token"] is None:
        raise ValueError(f"vocabulary file {path} has no mask token ([MASK] or <mask>): not a masked LM vocabulary")
    unk = roles["unk_token"]
    if any(t.startswith("##") for t in vocab):
        core = Tokenizer(models.WordPiece(vocab, unk_token=unk, continuing_subword_prefix="##"))
        core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    else:
        core = Tokenizer(models.WordLevel(vocab, unk_token=unk))
        core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if lowercase:
        core.normalizer = normalizers.Lowercase()
    cls, sep = roles["cls_token"], roles["sep_token"]
    if cls is not None and sep is not None:
        core.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
            special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    extra = {} if model_max_length is None else {"model_max_length": int(model_max_length)}
    return PreTrainedTokenizerFast(tokenizer_object=core, **{k: v for k, v in roles.items() if v is not None},
                                   **extra)
