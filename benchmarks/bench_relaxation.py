"""Where the sound relaxation of :mod:`mlmix.empirical.model_constants.relaxation` holds and where it breaks.

For each model and each context set (one free position ranging over k tokens, every other
position fixed, the site masked) it prints, per layer, the max / mean width of the certified
interval hull of the hidden states, the widest attention score and probability, the widest GELU
output of the MLP, the smallest certified LayerNorm variance, then the widest certified
conditional probability at the site (1 = vacuous). Models:

* ``random``: a 2-layer BertForMaskedLM, width 64, 4 heads, default initialisation (seeded);
* ``antiberty``: AntiBERTy 0.1.3 (8 layers, width 512, 8 heads), from the mlmix cache
  (``~/.cache/mlmix/antiberty-0.1.3-converted/model``, written by the test fixtures or
  ``mlmix convert``; skipped when absent).

    OMP_NUM_THREADS=1 python benchmarks/bench_relaxation.py
    OMP_NUM_THREADS=1 python benchmarks/bench_relaxation.py --models antiberty --sizes 1 2 20
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM

from mlmix.empirical.model_constants import relaxation as rx
from mlmix.empirical.models.antiberty import AMINO_ACIDS, VERSION

ANTIBERTY = Path.home() / ".cache" / "mlmix" / f"antiberty-{VERSION}-converted" / "model"
#: The heavy-chain start the AntiBERTy tests use (frame positions: [CLS] residues [SEP]).
HEAVY = "E V Q L V E S G G G"


def random_bert(seed: int = 0) -> tuple[BertForMaskedLM, list[int], list[int]]:
    """(model, frame ids with [MASK] at input position 5, alphabet ids): width 64, 2 layers, vocab 30."""
    torch.manual_seed(seed)
    model = BertForMaskedLM(BertConfig(vocab_size=30, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=256, max_position_embeddings=32)).eval().double()
    alphabet = list(range(5, 25))
    frame = [2, *alphabet[:10], 3]  # [CLS] 10 tokens [SEP]
    frame[5] = 4  # [MASK]
    return model, frame, alphabet


def antiberty() -> tuple[BertForMaskedLM, list[int], list[int]] | None:
    """(model, frame ids with [MASK] at input position 5, the 20 amino acids' ids), or None."""
    if not (ANTIBERTY / "config.json").is_file():
        return None
    from transformers import AutoTokenizer  # deferred: only for the real model

    model = BertForMaskedLM.from_pretrained(ANTIBERTY).eval().double()
    tok = AutoTokenizer.from_pretrained(ANTIBERTY)
    alphabet = tok.convert_tokens_to_ids(AMINO_ACIDS.split())
    frame = tok(HEAVY)["input_ids"]
    frame[5] = tok.mask_token_id
    return model, frame, alphabet


def rows(model, frame: list[int], alphabet: list[int], size: int, free: int = 3) -> tuple[list[dict], float, float]:
    """Per-layer widths, the widest probability interval and the seconds taken, with input position
    ``free`` ranging over the first ``size`` alphabet tokens (its own token first)."""
    own = frame[free]
    allowed = {free: [own] + [t for t in alphabet if t != own][: size - 1]}
    start = time.perf_counter()
    table = rx.layer_widths(model, frame, 5, allowed, alphabet)
    lower, upper = rx.conditional_bounds(model, frame, 5, allowed, 1.0, alphabet=alphabet)
    return table, float((upper - lower).max()), time.perf_counter() - start


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.2g}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["random", "antiberty"], choices=["random", "antiberty"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1, 2, 20])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("| model | tokens at one position | layer | hidden width max | mean | score width | prob width "
          "| MLP width | LN var lower |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = []
    for name in args.models:
        built = random_bert() if name == "random" else antiberty()
        if built is None:
            print(f"| {name} | (not cached at {ANTIBERTY}) |||||||")
            continue
        model, frame, alphabet = built
        for size in args.sizes:
            table, pwidth, secs = rows(model, frame, alphabet, size)
            for r in table:
                print(f"| {name} | {size} | {r['layer']} | {_fmt(r['width_max'])} | {_fmt(r['width_mean'])} | "
                      f"{_fmt(r['score_width'])} | {_fmt(r['prob_width'])} | {_fmt(r['mlp_width'])} | "
                      f"{_fmt(r['var_lower'])} |")
            summary.append((name, size, pwidth, secs))
    print()
    print("| model | tokens at one position | widest certified p_i(a given x) interval | seconds |")
    print("|---|---|---|---|")
    for name, size, pwidth, secs in summary:
        print(f"| {name} | {size} | {_fmt(pwidth)} | {secs:.1f} |")


if __name__ == "__main__":
    main()
