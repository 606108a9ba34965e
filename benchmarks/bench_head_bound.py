"""The LayerNorm head bound of a masked LM (``empirical/model_constants/head_bound.py``): H, its cost, Cor. 7's
T* upper end (n - 1) H / 4 and Theorem 5's certified threshold (the temperature above which rho < 1 is proved,
:func:`~mlmix.empirical.model_constants.certify.theorem5_threshold`) per method: Lemma 6 from H alone, and
Lemma 6 with the ellipsoid bound in its monotone envelope (what ``certify`` uses).

    OMP_NUM_THREADS=1 python benchmarks/bench_head_bound.py MODEL_DIR [--sceptr] [--lengths 2 3 4 5 8 20 30]

MODEL_DIR: a masked LM folder (AntiBERTy: the ``mlmix convert`` copy); ``--sceptr`` adds SCEPTR. Both
thresholds bisect on a bound of rho(T) that does not increase in T, so every T above them is certified.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mlmix.empirical.model_constants.certify import theorem5_threshold
from mlmix.empirical.model_constants.head_bound import head_parts, influence_upper, oscillation_bound

AMINO_ACIDS = "A C D E F G H I K L M N P Q R S T V W Y".split()


def thresholds(parts, H: float, n: int) -> tuple[float, float]:
    """Theorem 5's threshold from Lemma 6 with Delta_ij <= H alone, and with the ellipsoid envelope beside it."""
    off = ~np.eye(n, dtype=bool)
    delta = np.where(off, H, 0.0)
    envelope = (lambda T: np.where(off, influence_upper(parts, T, monotone=True), 0.0), "the ellipsoid envelope")
    return (theorem5_threshold(delta)["temperature"],
            theorem5_threshold(delta, rho_upper_at=(envelope,))["temperature"])


def report(name: str, parts, lengths: list[int]) -> None:
    t0 = time.perf_counter()
    bound = oscillation_bound(parts)
    seconds = time.perf_counter() - t0
    H = bound.delta
    print(f"{name}: d = {bound.width}, |V| = {len(parts.rows)}, H = {H:.6f} (pair {bound.pair}), {seconds * 1e3:.1f} ms")
    print("| n | T* upper end (n - 1) H / 4 | Theorem 5 threshold (Lemma 6) | (Lemma 6 and ellipsoid) |")
    print("|---|---|---|---|")
    for n in lengths:
        t = time.perf_counter()
        lemma6, ellipsoid = thresholds(parts, H, n)
        print(f"| {n} | {(n - 1) * H / 4:.4f} | {lemma6:.4f} | {ellipsoid:.4f} | "
              f"({(time.perf_counter() - t) * 1e3:.0f} ms)")


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
