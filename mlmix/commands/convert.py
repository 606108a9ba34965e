"""``mlmix convert SRC DST``: a safetensors copy of a masked-LM checkpoint, with a working tokenizer
(:mod:`mlmix.empirical.models.checkpoint_copy`).

    mlmix convert antiberty/trained_models/AntiBERTy_md_smooth ./antiberty --vocab antiberty/trained_models/vocab.txt
    mlmix estimate --model ./antiberty --candidates "A C D E F G H I K L M N P Q R S T V W Y" --length 3
"""

from __future__ import annotations

import argparse
from pathlib import Path


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
    # deferred: torch and transformers load only when the command runs, not for --help
    from transformers.utils import logging as hf_logging

    # deferred: torch and transformers load only when the command runs
    from mlmix.empirical.models.checkpoint_copy import convert

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    info = convert(args.src, args.dst, vocab=args.vocab, lowercase=args.lowercase,
                   trust_remote_code=args.trust_remote_code, overwrite=args.overwrite)
    print(f"mlmix convert: {info['architecture']} ({info['parameters']:,} parameters, vocabulary "
          f"{info['vocabulary']}) written to {info['destination']} as safetensors; the copy reproduces the "
          f"original's logits exactly. Files: {', '.join(info['files'])}")
    return 0
