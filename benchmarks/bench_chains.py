"""Benchmark: Glauber steps per second of B parallel chains on a bert-base-sized masked LM.

The model is ``BertForMaskedLM(BertConfig())`` (bert-base: 12 layers, hidden 768, |V| = 30,522)
with random weights and a WordLevel tokenizer of the same size, so nothing is downloaded. For
each length n and batch size B, :func:`mlmix.empirical.sampling.simulation.run_chains` advances B chains together
(one batched masked forward pass per step) and is compared with a loop that advances the same B
chains one at a time (batch 1). Reported: chain-steps per second (B x steps / seconds) of both and
their ratio. One warm-up step per configuration is not timed.

    python benchmarks/bench_chains.py                                 # CPU, small: about two minutes
    python benchmarks/bench_chains.py --device cuda --batches 1 64 256 1024 --steps 20 --out bench_chains.json

Results go to --out as JSON (written atomically).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from bench_mlm import bert_base as random_bert_base  # this folder: the script's own directory is on sys.path

from mlmix.empirical.models.mlm import MaskedLMConditionals, resolve_device
from mlmix.empirical.sampling.simulation import run_chains
from mlmix.files import atomic_write_text


def bert_base(device: torch.device):
    """Random-weight bert-base masked LM and a 30,522-token WordLevel tokenizer (:mod:`bench_mlm`), on ``device``."""
    model, tok = random_bert_base()
    return model.to(device), tok


def chain_steps_per_second(source: MaskedLMConditionals, x0: np.ndarray, steps: int, one_by_one: bool) -> float:
    """B chains x ``steps`` steps per second, together or one chain at a time."""
    B = len(x0)
    groups = [(x0[b:b + 1], [b]) for b in range(B)] if one_by_one else [(x0, np.arange(B))]
    for g, s in groups:  # warm-up
        run_chains(source, g, 1, seeds=s)
    if source.device.type == "cuda":
        torch.cuda.synchronize(source.device)
    start = time.perf_counter()
    for g, s in groups:
        run_chains(source, g, steps, seeds=s, record_every=steps)
    if source.device.type == "cuda":
        torch.cuda.synchronize(source.device)
    return B * steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16, float16 (default: auto)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32], help="numbers of parallel chains B")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per configuration")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=None, help="JSON results file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    model, tok = bert_base(device)
    rows = []
    for n in args.lengths:
        source = MaskedLMConditionals(model, tok, n, device=device, dtype=args.dtype)
        for B in args.batches:
            x0 = np.random.default_rng(n).integers(0, source.space.vocab_size, size=(B, n))
            batched = chain_steps_per_second(source, x0, args.steps, one_by_one=False)
            looped = chain_steps_per_second(source, x0, args.steps, one_by_one=True)
            rows.append({"length": n, "chains": B, "batched_steps_per_s": batched, "loop_steps_per_s": looped,
                         "speedup": batched / looped})
            print(f"n = {n:3d}  B = {B:5d}  batched {batched:10.1f} chain-steps/s   one-chain loop {looped:8.1f}"
                  f"   x{batched / looped:.1f}", flush=True)
    info = {"device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
            else "cpu", "dtype": str(source.dtype), "threads": args.threads, "steps": args.steps,
            "torch": torch.__version__, "model": "BertForMaskedLM(BertConfig()), random weights", "rows": rows}
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(info, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
