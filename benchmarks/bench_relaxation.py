"""Where the sound relaxation of :mod:`mlmix.empirical.model_constants.relaxation` holds and where it breaks.

For each model and each context set (one free position ranging over k tokens, every other
position fixed, the site masked) it prints, per layer, the max / mean width of the certified
interval hull of the hidden states, the widest attention score and probability, the widest GELU
(ReLU for SCEPTR) output of the MLP, the smallest certified LayerNorm variance, then the widest
certified conditional probability at the site (1 = vacuous), once per ``--fresh-symbols`` value (how
many remainders each nonlinear step moves to fresh noise symbols; 0 = all in the interval
remainders). Models:

* ``random``: a 2-layer BertForMaskedLM, width 64, 4 heads, default initialisation (seeded);
* ``antiberty``: AntiBERTy 0.1.3 (8 layers, width 512, 8 heads), from the mlmix cache
  (``~/.cache/mlmix/antiberty-0.1.3-converted/model``, written by the test fixtures or
  ``mlmix convert``; skipped when absent);
* ``sceptr``, ``sceptr_tiny``: SCEPTR 1.2.0 (3 layers, width 64 / 16, 8 heads, ReLU), from the
  cached wheel (``mlmix.empirical.models.sceptr.fetch``; skipped when it cannot be had), the CDR3B
  frame ``C A S S L A P G A T N E K L F F``.

    OMP_NUM_THREADS=1 python benchmarks/bench_relaxation.py
    OMP_NUM_THREADS=1 python benchmarks/bench_relaxation.py --models antiberty --sizes 1 2 20
    OMP_NUM_THREADS=1 python benchmarks/bench_relaxation.py --models sceptr --fresh-symbols 0 64 256
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM

from mlmix.empirical.model_constants import relaxation as rx
from mlmix.empirical.models import sceptr as sc
from mlmix.empirical.models.antiberty import AMINO_ACIDS, VERSION

ANTIBERTY = Path.home() / ".cache" / "mlmix" / f"antiberty-{VERSION}-converted" / "model"
#: The heavy-chain start the AntiBERTy tests use (frame positions: [CLS] residues [SEP]).
HEAVY = "E V Q L V E S G G G"
#: A human CDR3B for SCEPTR (input positions: [CLS] [CDR3B] residues).
CDR3B = "C A S S L A P G A T N E K L F F"


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


def sceptr(variant: str) -> tuple[sc.SceptrMLM, list[int], list[int]] | None:
    """(model in float64, frame ids with [MASK] at input position 5, the 20 amino acids' ids), or None."""
    try:
        wheel = sc.fetch()
    except sc.IndexUnreachable:
        return None
    state, config = sc.load_variant(wheel, variant)
    frame = [sc.CLS, sc.TOKENS.index("[CDR3B]"), *(sc.TOKENS.index(t) for t in CDR3B.split())]
    frame[5] = sc.MASK
    return sc.SceptrMLM(state, config, variant).double(), frame, list(range(sc.FIRST_RESIDUE, sc.FIRST_MARKER))


BUILDERS = {"random": random_bert, "antiberty": antiberty, "sceptr": lambda: sceptr("SCEPTR"),
            "sceptr_tiny": lambda: sceptr("SCEPTR_tiny")}


def rows(model, frame: list[int], alphabet: list[int], size: int, free: int = 3,
         fresh: int = 0) -> tuple[list[dict], float, float]:
    """Per-layer widths, the widest probability interval and the seconds of one propagation (the mean
    of the two taken), with input position ``free`` ranging over the first ``size`` alphabet tokens
    (its own token first) and ``fresh`` fresh symbols per nonlinear step."""
    own = frame[free]
    allowed = {free: [own] + [t for t in alphabet if t != own][: size - 1]}
    start = time.perf_counter()
    table = rx.layer_widths(model, frame, 5, allowed, alphabet, fresh=fresh)
    lower, upper = rx.probability_bounds(rx.propagate(model, frame, 5, allowed, alphabet, fresh=fresh).logits, 1.0)
    return table, float((upper - lower).max()), (time.perf_counter() - start) / 2


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.2g}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["random", "antiberty", "sceptr", "sceptr_tiny"],
                        choices=list(BUILDERS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[1, 2, 20])
    parser.add_argument("--fresh-symbols", nargs="+", type=int, default=[0, 64], metavar="N",
                        help="remainders each nonlinear step moves to fresh noise symbols (0: none)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("| model | tokens at one position | fresh | layer | hidden width max | mean | score width | prob width "
          "| MLP width | LN var lower |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    summary = []
    for name in args.models:
        built = BUILDERS[name]()
        if built is None:
            print(f"| {name} | (not cached) ||||||||")
            continue
        model, frame, alphabet = built
        for size in args.sizes:
            for fresh in args.fresh_symbols:
                table, pwidth, secs = rows(model, frame, alphabet, size, fresh=fresh)
                for r in table:
                    print(f"| {name} | {size} | {fresh} | {r['layer']} | {_fmt(r['width_max'])} | "
                          f"{_fmt(r['width_mean'])} | {_fmt(r['score_width'])} | {_fmt(r['prob_width'])} | "
                          f"{_fmt(r['mlp_width'])} | {_fmt(r['var_lower'])} |", flush=True)
                summary.append((name, size, fresh, pwidth, secs))
    print()
    print("| model | tokens at one position | fresh | widest certified p_i(a given x) interval | seconds |")
    print("|---|---|---|---|---|")
    for name, size, fresh, pwidth, secs in summary:
        print(f"| {name} | {size} | {fresh} | {_fmt(pwidth)} | {secs:.1f} |")


if __name__ == "__main__":
    main()
