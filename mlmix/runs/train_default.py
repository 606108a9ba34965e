"""``mlmix run train-default --out DIR``: retrain the shipped default model
(:func:`mlmix.empirical.models.shipped_model.train`) into DIR; to replace the shipped model, give its folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlmix.empirical.models.shipped_model import train
from mlmix.validation import check_int

#: One line for ``mlmix run --list``.
DESCRIPTION = "retrain the shipped default model (into --out)"


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of ``mlmix run train-default`` (to replace the shipped model, give its folder as --out)."""
    parser.add_argument("--out", type=Path, required=True, help="output folder of the trained model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--samples", type=int, default=20000, help="size of the fixed training sample")


def run(args: argparse.Namespace) -> int:
    """Train and save the model, its tokenizer and law.json into --out."""
    check_int(args.steps, "--steps", minimum=1)
    check_int(args.samples, "--samples", minimum=1)
    train(args.out, seed=args.seed, steps=args.steps, samples=args.samples)
    return 0
