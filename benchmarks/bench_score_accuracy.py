"""How far a masked LM's float32 (or bfloat16) scores are from its float64 scores, over every context.

For each model, frame and n, every score s_i(v | x_{-i}) of the exact table (n |V|^(n-1) masked passes)
is computed twice, in the compared dtype and in float64, and the script prints the largest error in
units u M (u the dtype's unit roundoff, M the largest |score| of the float64 table) beside the units
charged by :mod:`mlmix.theory.sources.score_accuracy`, and the largest per-row error in units of the
row's own largest |score|. The charge must exceed every measured ratio with margin: it is the stated
accuracy of the scores that every certified bracket built from them carries.

Models: AntiBERTy 0.1.3 from the mlmix cache (``~/.cache/mlmix/antiberty-0.1.3-converted/model``; skipped
when absent) on the frames S (``[CLS] _ .. _ [SEP]``), L (the heavy chain's first ten residues, then the
free positions) and LR (L with the six germline residues after the gap); random tiny BERT, RoBERTa and
ModernBERT models of ``mlmix verify`` (:mod:`mlmix.verify.mlm_instances`, 2 layers, widths 16 and 64,
seeds 0-3).

    OMP_NUM_THREADS=1 python benchmarks/bench_score_accuracy.py
    OMP_NUM_THREADS=1 python benchmarks/bench_score_accuracy.py --models antiberty --lengths 2 3
    OMP_NUM_THREADS=1 python benchmarks/bench_score_accuracy.py --models random --dtypes bfloat16
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import numpy as np
import torch

from mlmix.empirical.models.antiberty import AMINO_ACIDS, VERSION
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.empirical.models.tabulate import tabulate
from mlmix.theory.sources.score_accuracy import SCORE_ULPS, UNIT_ROUNDOFF
from mlmix.verify.mlm_instances import ARCHITECTURES, ModelSpec, tiny_masked_lm, tokenizer

ANTIBERTY = Path.home() / ".cache" / "mlmix" / f"antiberty-{VERSION}-converted" / "model"
HEAVY = "E V Q L V E S G G G"
NEXT = {2: "Q P G G S L", 3: "P G G S L R", 4: "G G S L R L"}


def table(make, dtype: str) -> np.ndarray:
    """The exact score table of a fresh source (``make(dtype)``), uncached, as float64."""
    return np.asarray(tabulate(make(dtype), use_cache=False, progress=False, log=lambda _: None).table, np.float64)


def compare(label: str, make, dtype: str) -> dict:
    """Largest |s_dtype - s_float64| over the table, in units u M and per row in units u M_row."""
    start = time.perf_counter()
    exact, low = table(make, "float64"), table(make, dtype)
    err = np.abs(low - exact)
    M = float(np.abs(exact).max())
    u = UNIT_ROUNDOFF[dtype]
    row = float((err.max(axis=-1) / np.abs(exact).max(axis=-1)).max()) / u
    out = {"label": label, "dtype": dtype, "M": M, "max_error": float(err.max()), "units": float(err.max()) / (u * M),
           "row_units": row, "charged": SCORE_ULPS[dtype], "seconds": time.perf_counter() - start}
    print(f"{label:44s} {dtype:9s} M = {M:8.3f}  max |error| = {out['max_error']:.3e} = {out['units']:6.2f} u M  "
          f"(row: {row:6.2f} u M_row)  charged {SCORE_ULPS[dtype]} u M  [{out['seconds']:.1f} s]", flush=True)
    return out


def antiberty_cases(lengths: list[int]):
    if not (ANTIBERTY / "config.json").is_file():
        print("AntiBERTy: no converted model in the cache, skipped")
        return
    for n in lengths:
        frames = {"S": {"length": n}, "L": {"prefix": HEAVY, "length": n}}
        if n in NEXT:
            frames["LR"] = {"prefix": HEAVY, "suffix": NEXT[n], "length": n}
        for name, frame in frames.items():
            yield (f"AntiBERTy frame {name}, n = {n}",
                   lambda d, frame=frame: MaskedLMConditionals.from_pretrained(
                       ANTIBERTY, candidates=AMINO_ACIDS, dtype=d, device="cpu", progress=False, **frame))


def random_cases(lengths: list[int]):
    for arch in ARCHITECTURES:
        for hidden in (16, 64):
            for seed in range(4):
                for n in lengths:
                    def make(d, arch=arch, hidden=hidden, seed=seed, n=n):
                        # a copy: the source converts the model to its dtype in place
                        model = copy.deepcopy(tiny_masked_lm(ModelSpec(arch, seed, hidden=hidden, layers=2)))
                        return MaskedLMConditionals(model, tokenizer(), n, dtype=d, device="cpu")
                    yield f"random {arch} width {hidden} seed {seed}, n = {n}", make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["random", "antiberty"], choices=["random", "antiberty"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[2, 3])
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=["float32", "bfloat16", "float16", "float64"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for kind in args.models:
        cases = antiberty_cases(args.lengths) if kind == "antiberty" else random_cases(args.lengths)
        for label, make in cases:
            rows.extend(compare(label, make, d) for d in args.dtypes)
    for d in args.dtypes:
        mine = [r for r in rows if r["dtype"] == d]
        if mine:
            worst = max(mine, key=lambda r: r["units"])
            print(f"{d}: largest error {worst['units']:.2f} u M ({worst['label']}), charged {SCORE_ULPS[d]} u M: "
                  f"margin {SCORE_ULPS[d] / worst['units']:.1f}x over {len(mine)} tables")


if __name__ == "__main__":
    main()
