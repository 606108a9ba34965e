"""Throughput of masked conditionals for a bert-base-sized model (random weights, built from its config).

Compares, at n content tokens (default 16):

* naive: one masked sequence per forward pass, full ``model(...).logits`` at every position, then
  the masked row (what a straightforward loop does);
* batched: :meth:`MaskedLMConditionals.scores_torch` (many rows per pass, the LM head only at the
  masked position, autocast on CUDA);
* all-sites: :meth:`MaskedLMConditionals.all_scores_torch` (the n masked copies of each sequence in
  one batched pass), counted in masked sequences.

Reports masked sequences per second, the speed-up over the naive loop and, with ``--peak-tflops``,
the fraction of the card's dense FLOP bound reached (FLOPs counted per masked sequence: 2 x encoder
weights x positions + attention 4 L^2 H per layer + the head at one position).

    python benchmarks/bench_mlm.py --device cpu --threads 1
    python benchmarks/bench_mlm.py --device cuda --dtype bfloat16 --peak-tflops 989
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

from mlmix.empirical.models.mlm import MaskedLMConditionals


def bert_base(vocab_size: int = 30522) -> tuple[BertForMaskedLM, PreTrainedTokenizerFast]:
    """bert-base-uncased's architecture with random weights and a WordLevel tokenizer of the same size."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials + [f"w{k}" for k in range(vocab_size - len(specials))])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                  sep_token="[SEP]", mask_token="[MASK]")
    torch.manual_seed(0)
    return BertForMaskedLM(BertConfig(vocab_size=vocab_size)).eval(), tok


def flops_per_masked_sequence(config: BertConfig, positions: int) -> float:
    """Forward FLOPs of one masked sequence with the head at one position."""
    H, I, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_layer = 2 * positions * (4 * H * H + 2 * H * I) + 4 * positions * positions * H
    head = 2 * (H * H + H * config.vocab_size)
    return layers * per_layer + head


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int) -> float:
    """Best wall time of ``repeats`` calls after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--naive", type=int, default=None, help="masked sequences in the naive loop")
    parser.add_argument("--batch", type=int, default=None, help="masked sequences per batched call")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per forward pass (default: automatic)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense FLOP bound of the device, TFLOP/s")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cuda = torch.device(args.device).type == "cuda"
    naive_count = args.naive or (256 if cuda else 8)
    batch = args.batch or (32768 if cuda else 64)

    model, tok = bert_base()
    mlm = MaskedLMConditionals(model, tok, args.length, device=args.device, dtype=args.dtype,
                               batch_size=args.batch_size, compile=args.compile)
    dev, n = mlm.device, args.length
    rng = np.random.default_rng(0)
    symbols = torch.as_tensor(rng.integers(0, mlm.space.vocab_size, (batch, n)), device=dev)
    sites = torch.as_tensor(rng.integers(0, n, batch), device=dev)

    ids = mlm.token_ids(symbols[:naive_count])
    pos = mlm.slots[sites[:naive_count]]
    ids[torch.arange(naive_count, device=dev), pos] = mlm.mask_id

    def naive() -> None:
        with torch.inference_mode(), mlm.autocast():
            for b in range(naive_count):
                model(input_ids=ids[b:b + 1]).logits[0, pos[b]].float().cpu()

    def batched() -> None:
        mlm.scores_torch(symbols, sites).cpu()

    def all_sites() -> None:
        mlm.all_scores_torch(symbols[:max(1, batch // n)]).cpu()

    t_naive = timed(naive, dev, args.repeats)
    t_batched = timed(batched, dev, args.repeats)
    t_all = timed(all_sites, dev, args.repeats)
    rates = {"naive": naive_count / t_naive, "batched": batch / t_batched, "all_sites": max(1, batch // n) * n / t_all}
    flops = flops_per_masked_sequence(model.config, mlm.positions)
    result = {"device": str(dev), "gpu": torch.cuda.get_device_name(dev) if cuda else None,
              "dtype": str(mlm.dtype).replace("torch.", ""), "threads": args.threads, "length": n,
              "positions": mlm.positions, "batch_size": mlm.batch_size, "masked_per_s": rates,
              "speedup_batched": rates["batched"] / rates["naive"], "speedup_all_sites": rates["all_sites"] / rates["naive"],
              "tflops": {k: v * flops / 1e12 for k, v in rates.items()}, "torch": torch.__version__}
    if args.peak_tflops:
        result["fraction_of_peak"] = {k: v / args.peak_tflops for k, v in result["tflops"].items()}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"bert-base-sized MLM, n = {n} ({result['positions']} positions), {result['device']} "
              f"{result['dtype']}, {args.threads} thread(s), batch size {mlm.batch_size}")
        for k, v in rates.items():
            extra = f", {result['fraction_of_peak'][k]:.1%} of peak" if args.peak_tflops else ""
            print(f"  {k:<10} {v:12.1f} masked sequences/s  ({result['tflops'][k]:.3f} TFLOP/s{extra})")
        print(f"  speed-up over the naive loop: batched {result['speedup_batched']:.1f}x, "
              f"all-sites {result['speedup_all_sites']:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
