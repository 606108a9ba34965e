"""A safetensors copy of a masked-LM checkpoint, with a working tokenizer.

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

import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig

from mlmix.empirical.models.mlm import MaskedLMConditionals, load_pretrained, load_tokenizer
from mlmix.empirical.models.vocab import tokenizer_from_vocab
from mlmix.files import atomic_write_bytes


def convert(src: str | Path, dst: str | Path, *, vocab: str | Path | None = None, lowercase: bool = False,
            trust_remote_code: bool = False, overwrite: bool = False) -> dict:
    """Write a safetensors copy of the masked LM at ``src`` into the folder ``dst`` (see the module
    docstring) and return a summary. The copy is saved into a temporary folder next to ``dst``,
    reloaded and compared with the original on a probe sequence (identical logits required), and
    only then written file by file (atomically, config.json last) into ``dst``."""
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
