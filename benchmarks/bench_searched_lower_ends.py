"""Certified T* and Theorem 5's threshold against searched lower ends, beyond enumeration (docs/real-model.md 8a).

For each run ``FRAME:N:PASSES`` (FRAME ``S``: the free residues alone; ``L``: after the prefix
``E V Q L V E S G G G``; ``sceptr``: SCEPTR's default frame of N residues) this builds the source and calls
:func:`~mlmix.empirical.model_constants.constants_report.model_constants` with ``how="bounds"`` and
``max_passes=PASSES`` (the worst-context search, seed 0, for the lower ends; the head bound and its ellipsoid
envelope for the upper ends, 0 passes), and prints one row: T*'s bracket, their ratio, the threshold
temperature above which Theorem 5 provably applies, the passes used and the seconds.

    OMP_NUM_THREADS=1 python benchmarks/bench_searched_lower_ends.py MODEL_DIR S:8:5000 L:8:2500 sceptr:8:3000
"""

from __future__ import annotations

import argparse
import time

AMINO_ACIDS = "A C D E F G H I K L M N P Q R S T V W Y"
PREFIX_L = "E V Q L V E S G G G"


def source(model_dir: str, frame: str, n: int):
    """The masked LM source of one run."""
    if frame == "sceptr":
        from mlmix.empirical.models.sceptr import SceptrConditionals  # deferred: heavy

        return SceptrConditionals.from_pretrained(length=n)
    from mlmix.empirical.models.mlm import MaskedLMConditionals  # deferred: heavy

    prefix = {"S": None, "L": PREFIX_L}[frame]
    return MaskedLMConditionals.from_pretrained(model_dir, n, prefix=prefix, candidates=AMINO_ACIDS, device="cpu",
                                                progress=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="the AntiBERTy folder (the mlmix convert copy)")
    parser.add_argument("runs", nargs="+", help="FRAME:N:PASSES")
    args = parser.parse_args()
    from mlmix.empirical.model_constants.constants_report import model_constants  # deferred: heavy

    print("| frame | n | T* lower (searched) | T* upper (head bound) | ratio | Theorem 5 threshold | passes | s |")
    print("|---|---|---|---|---|---|---|---|")
    for run in args.runs:
        frame, n, passes = run.split(":")
        src = source(args.model, frame, int(n))
        t = time.perf_counter()
        r = model_constants(src, how="bounds", budget=None, max_passes=int(passes), folder=None)
        lo, hi = r.contraction_temperature.lower, r.contraction_temperature.upper
        print(f"| {frame} | {n} | {lo:.4f} | {hi:.2f} | {hi / lo:.1f} | {r.threshold['temperature']:.2f} | "
              f"{r.passes:,} | {time.perf_counter() - t:.0f} |", flush=True)


if __name__ == "__main__":
    main()
