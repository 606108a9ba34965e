"""The paper's experiments as reproducible commands (paper G; reported numbers in docs/experiments.md).

Each module is a run, ``mlmix run NAME --out DIR [--model ...]`` (:mod:`mlmix.commands.run`: NAME with dashes),
that writes JSON, CSV and a PNG figure into DIR:

- :mod:`~mlmix.runs.rectangle_table` — mean rectangle statistic R per model (section 4,
  Table 1), with a compatible control;
- :mod:`~mlmix.runs.drift_certificate` — drift of the count of a token on states with
  exactly k copies (section 5.4);
- :mod:`~mlmix.runs.mixing_crossover` — hitting time of an embedding-distance threshold
  versus n, and the coupling-time map over (T, n) (section 6.1);
- :mod:`~mlmix.runs.traps` — trap states of long chains and Theorem 8 (appendix A.1).

Without ``--model`` they run on the shipped small model (``empirical/models/default_model``). This module
holds what they share: arguments, model loading, start states, decoding, atomic output.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from mlmix.commands.options import add_threads_argument, set_threads
from mlmix.empirical.models.mlm import (
    DEFAULT_MODEL_DIR,
    MaskedLMConditionals,
    TokenConditionals,
    load_pretrained,
)
from mlmix.empirical.sampling.drift import (
    ConcatEmbedder,
    Embedder,
    SentenceTransformerEmbedder,
    TokenBagEmbedder,
)
from mlmix.files import (
    atomic_write_csv,
    atomic_write_json,
    dumps_json,
    jsonable,
)
from mlmix.plot_style import save


def add_common_arguments(parser: argparse.ArgumentParser, many_models: bool = False) -> None:
    """--out, --model, --texts, --seed, --device, --dtype, --trust-remote-code, --threads, --no-progress."""
    parser.add_argument("--out", required=True, type=Path,
                        help="output folder (created; a rerun with the same options resumes)")
    if many_models:
        parser.add_argument("--model", nargs="+", default=[str(DEFAULT_MODEL_DIR)],
                            help="masked LMs: hub ids (local cache) or folders with safetensors weights")
    else:
        parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR),
                            help="masked LM: hub id (local cache) or folder with safetensors weights")
    parser.add_argument("--texts", type=Path, default=None,
                        help="seed passages, one per line (e.g. MS MARCO); default: uniformly random tokens")
    parser.add_argument("--seed", type=int, default=0, help="seed of start states and chains")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", default=None, help="compute dtype: float32, bfloat16 or float16 (default: auto)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow custom model code (off by default)")
    add_threads_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def load_model(model: str, length: int | None, args: argparse.Namespace, temperature: float = 1.0,
               max_length: int = 20) -> MaskedLMConditionals:
    """The masked LM at ``model`` as conditionals on ``length`` content tokens (None: the longest
    the model allows, at most ``max_length``)."""
    set_threads(args.threads)
    mdl, tok = load_pretrained(MaskedLMConditionals.auto_class, model, trust_remote_code=args.trust_remote_code)
    options = dict(temperature=temperature, device=args.device, dtype=args.dtype)
    if length is None:
        probe = MaskedLMConditionals(mdl, tok, 1, **options)
        room = probe.max_positions()
        wrapped = probe.token_ids(torch.zeros((1, 1), dtype=torch.long, device=probe.device)).shape[1]  # 1 + specials
        length = max_length if room is None else min(max_length, room - (wrapped - 1))
        if length < 2:
            raise ValueError(f"model {model} leaves room for {length} content tokens; at least 2 are needed")
    return MaskedLMConditionals(mdl, tok, int(length), **options)


def start_states(source: TokenConditionals, count: int, rng: np.random.Generator,
                 texts: Path | None = None) -> np.ndarray:
    """``count`` start states (count, n): the first n tokens of passages of ``texts`` (drawn with
    replacement from those with at least n tokens in the support), else uniform random symbols."""
    n = source.space.length
    if texts is None:
        return rng.integers(0, source.space.vocab_size, size=(count, n))
    pool = []
    for line in Path(texts).read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                sym = source.encode(line.strip())
            except ValueError:  # tokens outside the support (e.g. unknown words)
                continue
            if sym.size >= n:
                pool.append(sym[:n])
    if not pool:
        raise ValueError(f"no passage in {texts} has {n} tokens inside the model's support")
    pool_arr = np.stack(pool)
    return pool_arr[rng.integers(0, len(pool_arr), size=count)]


def decoder(source: TokenConditionals) -> Callable[[np.ndarray], list[str]]:
    """States (B, n) -> texts, through the model's tokenizer."""
    def decode(states: np.ndarray) -> list[str]:
        ids = source.support_ids[np.asarray(states)]
        return [source.tokenizer.decode(row.tolist()) for row in ids]
    return decode


def add_embedder_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--embedder", default="bag",
                        help="'bag' (mean of the MLM's input embeddings), 'hamming' (one-hot concatenation: "
                             "distance = normalised Hamming distance) or a local sentence-transformers model")


def make_embedder(name: str, source: TokenConditionals) -> Embedder:
    """The embedder named by ``--embedder`` for a language-model source."""
    if name == "bag":
        return TokenBagEmbedder.from_mlm(source)
    if name == "hamming":
        return ConcatEmbedder.one_hot(source.space.vocab_size)
    return SentenceTransformerEmbedder(name, decoder(source))


def write_json(path: Path, obj: object) -> None:
    atomic_write_json(path, obj, indent=2)


def write_csv(path: Path, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    atomic_write_csv(path, fields, ([_cell(r.get(k)) for k in fields] for r in rows))


def save_figure(fig, path: Path) -> None:
    """Save a figure atomically (PDF, SVG or PNG by the suffix, :func:`mlmix.plot_style.save`) and close it."""
    save(fig, path)


def _cell(value: object) -> object:
    """A CSV cell: sequences as JSON lists, numpy scalars as Python numbers."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return dumps_json(value, indent=None)
    return jsonable(value)
