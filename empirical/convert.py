"""``mlmix convert SRC DST``: a safetensors copy of a masked-LM checkpoint, with a working tokenizer.

Checkpoints as users have them are often a folder with a pickled ``pytorch_model.bin``, a
``config.json`` and at most a ``vocab.txt`` (AntiBERTy's PyPI wheel, many protein and older text
models). ``mlmix convert`` loads such a folder once (``torch.load(weights_only=True)``), writes the
weights as safetensors with the config and a fast tokenizer, reloads the copy and checks that it
gives the same logits as the original, so later runs need neither pickles nor ``--allow-pickle``::

    mlmix convert antiberty/trained_models/AntiBERTy_md_smooth ./antiberty --vocab antiberty/trained_models/vocab.txt
    mlmix estimate --model ./antiberty --candidates "A C D E F G H I K L M N P Q R S T V W Y" --length 3

Without tokenizer files (tokenizer.json / tokenizer_config.json) the tokenizer is built from a
BERT-style ``vocab.txt`` (in SRC, or ``--vocab``): one token per line, id = line number; WordPiece
when the vocabulary has ``##`` continuation pieces, otherwise WordLevel over whitespace-separated
tokens; no lower-casing unless ``--lowercase``; the ``[CLS] x [SEP]`` template (``<cls> x <eos>``
for ESM-style vocabularies) around every sequence.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from mlmix.files import atomic_write_bytes

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
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

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


def convert(src: str | Path, dst: str | Path, *, vocab: str | Path | None = None, lowercase: bool = False,
            trust_remote_code: bool = False, overwrite: bool = False) -> dict:
    """Write a safetensors copy of the masked LM at ``src`` into the folder ``dst`` (see the module
    docstring) and return a summary. The copy is saved into a temporary folder next to ``dst``,
    reloaded and compared with the original on a probe sequence (identical logits required), and
    only then written file by file (atomically, config.json last) into ``dst``."""
    import numpy as np
    import torch
    from transformers import AutoConfig

    from mlmix.empirical.mlm import MaskedLMConditionals, load_pretrained, load_tokenizer

    src, dst = Path(src).expanduser(), Path(dst).expanduser()
    if not src.is_dir():
        raise ValueError(f"model folder {src} does not exist")
    if dst.exists() and (not dst.is_dir() or (any(dst.iterdir()) and not overwrite)):
        raise ValueError(f"{dst} exists and is not an empty folder; choose another destination or pass --overwrite")
    options = {"trust_remote_code": trust_remote_code, "local_files_only": True}
    if vocab is not None:
        config = AutoConfig.from_pretrained(src, **options)
        tokenizer = tokenizer_from_vocab(vocab, lowercase, getattr(config, "max_position_embeddings", None))
    else:
        tokenizer = load_tokenizer(str(src), **options)
        if lowercase:
            raise ValueError("--lowercase applies only to a tokenizer built from --vocab")
    model, _ = load_pretrained(MaskedLMConditionals.auto_class, src, trust_remote_code=trust_remote_code,
                               allow_pickle=True, tokenizer=tokenizer)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dst.parent, prefix=f".{dst.name}.") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        copy, copy_tok = load_pretrained(MaskedLMConditionals.auto_class, tmp, trust_remote_code=trust_remote_code)
        probe = MaskedLMConditionals(model, tokenizer, 2, device="cpu", dtype="float32")
        again = MaskedLMConditionals(copy, copy_tok, 2, device="cpu", dtype="float32")
        states = np.random.default_rng(0).integers(0, probe.space.vocab_size, size=(8, 2))
        if not np.array_equal(probe.all_log_conditionals(states), again.all_log_conditionals(states)):
            raise ValueError("the safetensors copy does not reproduce the original's logits; nothing was written")
        files = sorted(Path(tmp).iterdir(), key=lambda f: f.name == "config.json")
        dst.mkdir(exist_ok=True)
        for f in files:
            atomic_write_bytes(dst / f.name, f.read_bytes())
    params = sum(int(p.numel()) for p in model.parameters())
    return {"source": str(src), "destination": str(dst), "architecture": type(model).__name__,
            "parameters": params, "vocabulary": len(tokenizer), "files": [f.name for f in files],
            "alphabet_example": tokenizer.convert_ids_to_tokens(probe.support_ids[:5].tolist()),
            "torch": torch.__version__}


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``mlmix convert``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 2)[1]
    parser.add_argument("src", type=Path, help="model folder (config.json + pytorch_model.bin or safetensors)")
    parser.add_argument("dst", type=Path, help="new folder for the safetensors copy")
    parser.add_argument("--vocab", type=Path, default=None,
                        help="vocabulary file (vocab.txt) to build the tokenizer from (default: SRC's tokenizer files "
                             "or SRC/vocab.txt)")
    parser.add_argument("--lowercase", action="store_true", help="lower-case text in the tokenizer built from --vocab")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow the model's own code (off by default)")
    parser.add_argument("--overwrite", action="store_true", help="write into a non-empty destination folder")


def run(args: argparse.Namespace) -> int:
    """Convert and print a one-paragraph summary."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    info = convert(args.src, args.dst, vocab=args.vocab, lowercase=args.lowercase,
                   trust_remote_code=args.trust_remote_code, overwrite=args.overwrite)
    print(f"mlmix convert: {info['architecture']} ({info['parameters']:,} parameters, vocabulary "
          f"{info['vocabulary']}) written to {info['destination']} as safetensors; the copy reproduces the "
          f"original's logits exactly. Files: {', '.join(info['files'])}")
    return 0
