"""The LayerNorm head bound of a masked LM (``empirical/model_constants/head_bound.py``): H, its cost, Cor. 7's
T* upper end (n - 1) H / 4 and the temperature from which the head's rho bound (the smaller of Lemma 6's
tanh(H / 4T) and the ellipsoid bound ``influence_upper``) certifies rho <= (n - 1) rho_ij < 1.

    OMP_NUM_THREADS=1 python benchmarks/bench_head_bound.py MODEL_DIR [--sceptr] [--lengths 2 3 4 5 8 20 30]

MODEL_DIR: a masked LM folder (AntiBERTy: the ``mlmix convert`` copy); ``--sceptr`` adds SCEPTR. The threshold
is found by bisection on T in [1e-3, 1e6] and checked at 200 geometric points up to 1000 times it (the bound is
evaluated pointwise: certify does the same at the one temperature it is asked about).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from mlmix.empirical.model_constants.head_bound import head_parts, influence_upper, oscillation_bound

AMINO_ACIDS = "A C D E F G H I K L M N P Q R S T V W Y".split()


def rho_pair_upper(parts, H: float, T: float) -> float:
    return min(math.tanh(H / (4 * T)), influence_upper(parts, T))


def threshold(parts, H: float, n: int, route) -> float:
    """The smallest T (bisection, relative 1e-6) with (n - 1) route(T) < 1, checked above it."""
    lo, hi = 1e-3, 1e6
    while hi / lo > 1 + 1e-6:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if (n - 1) * route(parts, H, mid) < 1 else (mid, hi)
    assert all((n - 1) * route(parts, H, T) < 1 for T in np.geomspace(hi, 1000 * hi, 200)), "not monotone"
    return hi


def report(name: str, parts, lengths: list[int]) -> None:
    t0 = time.perf_counter()
    bound = oscillation_bound(parts)
    seconds = time.perf_counter() - t0
    H = bound.delta
    print(f"{name}: d = {bound.width}, |V| = {len(parts.rows)}, H = {H:.6f} (pair {bound.pair}), {seconds * 1e3:.1f} ms")
    lemma6 = lambda p, h, T: math.tanh(h / (4 * T))  # noqa: E731
    print("| n | T* upper end (n - 1) H / 4 | rho < 1 from T (Lemma 6) | rho < 1 from T (ellipsoid) |")
    print("|---|---|---|---|")
    for n in lengths:
        print(f"| {n} | {(n - 1) * H / 4:.4f} | {threshold(parts, H, n, lemma6):.4f} | "
              f"{threshold(parts, H, n, rho_pair_upper):.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="a masked LM folder")
    parser.add_argument("--sceptr", action="store_true", help="also SCEPTR (its wheel)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2, 3, 4, 5, 6, 7, 8, 20, 30])
    args = parser.parse_args()
    if args.model:
        from transformers import AutoModelForMaskedLM, AutoTokenizer  # deferred: heavy

        model = AutoModelForMaskedLM.from_pretrained(args.model).eval()
        ids = AutoTokenizer.from_pretrained(args.model).convert_tokens_to_ids(AMINO_ACIDS)
        report(args.model, head_parts(model, ids), args.lengths)
    if args.sceptr:
        from mlmix.empirical.models.sceptr import SceptrConditionals  # deferred: heavy

        source = SceptrConditionals.from_pretrained(length=2)
        report("SCEPTR", head_parts(source.model, np.asarray(source.support_ids)), args.lengths)


if __name__ == "__main__":
    main()
