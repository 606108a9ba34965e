"""Tabulation throughput: masked forward passes per second of `mlmix.empirical.models.tabulate.tabulate`
against plain `transformers` loops measured in the same run, on AntiBERTy or a bert-base-sized model.

Every masked pass yields one conditional pi_i(. | x_{-i}) over the alphabet. Compared, on the same
frame (``--context`` fixed residues around n free positions) and alphabet:

* mlmix: ``tabulate`` of the table of a ``--letters``-token alphabet (n |V|^(n-1) passes, plus the 64
  of its rate measurement: the code path of ``mlmix exact --mlm``, chunks, progress and all, without
  the disk cache);
* plain batched: the same rows through ``model(input_ids=batch).logits`` (full logits at every
  position, batches of ``--batch`` rows), then the masked rows;
* plain one by one: ``model(input_ids=one_row).logits`` per pass, what a straightforward loop does
  (``--naive`` passes).

One full batch warms the model up first; each loop is timed ``--repeats`` times, best kept.
Prints passes/s, the speed-ups, GFLOP/s (encoder + head at one position per pass) and the process's
peak RSS. AntiBERTy is fetched from PyPI into ~/.cache/mlmix (see ``mlmix.empirical.models.antiberty``)::

    python benchmarks/bench_tabulate.py --model antiberty --threads 1
    python benchmarks/bench_tabulate.py --model bert-base --threads 1 --letters 3 --naive 16
    python benchmarks/bench_tabulate.py --model antiberty --device cuda --dtype bfloat16 --letters 20 --length 4
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time
from pathlib import Path

import numpy as np
import torch
from bench_mlm import _sync, bert_base, flops_per_masked_sequence  # this folder: the script's own directory

from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals

ANTIBERTY_CONTEXT = "E V Q L V E S G G G L V Q P G G S L R L S C A A S G F T F S S Y A M S W V R Q A P G K G L E W V S"


def antiberty() -> tuple[torch.nn.Module, object, list[str]]:
    """The converted AntiBERTy (fetched and converted once into ~/.cache/mlmix)."""
    from mlmix.empirical.models.antiberty import AMINO_ACIDS, VERSION, fetch
    from mlmix.empirical.models.checkpoint_copy import convert
    from mlmix.empirical.models.mlm import load_pretrained

    root = Path.home() / ".cache" / "mlmix"
    dest = root / f"antiberty-{VERSION}-converted"
    if not (dest / "config.json").is_file():
        model_dir, vocab = fetch(root / f"antiberty-{VERSION}")
        convert(model_dir, dest, vocab=vocab, overwrite=True)
    model, tok = load_pretrained(MaskedLMConditionals.auto_class, dest)
    return model, tok, AMINO_ACIDS.split()


def frame_text(context: list[str], length: int) -> str:
    """Half the context before the n free positions, half after."""
    half = len(context) // 2
    return " ".join(context[:half] + ["_"] * length + context[half:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="antiberty", help="antiberty, bert-base (random weights) or a folder")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    parser.add_argument("--length", type=int, default=4, help="n free positions (default 4)")
    parser.add_argument("--letters", type=int, default=5, help="alphabet size of the timed table (default 5)")
    parser.add_argument("--context", type=int, default=16, help="fixed tokens around the free positions (default 16)")
    parser.add_argument("--batch", type=int, default=None, help="rows per forward pass (default: mlmix's choice)")
    parser.add_argument("--naive", type=int, default=64, help="passes of the one-by-one loop (default 64)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="timed repetitions of each loop; best kept (default 2)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense FLOP bound of the device, TFLOP/s")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()

    if args.model == "antiberty":
        model, tok, words = antiberty()
        context = ANTIBERTY_CONTEXT.split()
    elif args.model == "bert-base":
        model, tok = bert_base()
        words = [f"w{k}" for k in range(100)]
        context = words[-args.context:]
    else:
        from mlmix.empirical.models.mlm import load_pretrained

        model, tok = load_pretrained(MaskedLMConditionals.auto_class, args.model)
        words = None
        context = None
    frame = frame_text((context or [])[:args.context], args.length)
    candidates = None if words is None else words[:args.letters]
    mlm = MaskedLMConditionals(model, tok, frame=frame, candidates=candidates, device=args.device, dtype=args.dtype,
                               batch_size=args.batch)
    dev, batch = mlm.device, mlm.batch_size
    passes = tab.passes_needed(mlm.space)

    # the same rows as inputs with the mask placed, for the plain loops
    q, n = mlm.space.vocab_size, mlm.space.length
    rows = np.arange(passes)
    site, index = rows // q ** (n - 1), rows % q ** (n - 1)
    digits = (index[:, None] // q ** np.arange(n - 2, -1, -1)) % q
    symbols = np.zeros((passes, n), dtype=np.int64)
    for r in range(passes):
        symbols[r, [k for k in range(n) if k != site[r]]] = digits[r]
    ids = mlm.token_ids(torch.as_tensor(symbols, device=dev))
    pos = mlm.slots[torch.as_tensor(site, device=dev)]
    ids[torch.arange(passes, device=dev), pos] = mlm.mask_id
    support = torch.as_tensor(mlm.support_ids, device=dev)

    def plain(lo: int, hi: int) -> torch.Tensor:
        with torch.inference_mode(), mlm.autocast():
            logits = model(input_ids=ids[lo:hi]).logits
            return logits[torch.arange(hi - lo, device=dev), pos[lo:hi]][:, support].float()

    def timed(fn) -> tuple[float, object]:
        """Best of ``--repeats`` wall times (the result of the last call)."""
        best, out = float("inf"), None
        for _ in range(args.repeats):
            _sync(dev)
            start = time.perf_counter()
            out = fn()
            _sync(dev)
            best = min(best, time.perf_counter() - start)
        return best, out

    plain(0, min(passes, batch))  # warm-up: one full batch
    naive = min(args.naive, passes)
    # mlmix's tabulate makes 64 more passes to measure its rate (2 x 32), counted in its rate
    t_mlmix, table = timed(lambda: tab.tabulate(mlm, use_cache=False, progress=False, log=lambda _: None))
    t_batched, batched = timed(lambda: torch.cat([plain(lo, min(passes, lo + batch))
                                                  for lo in range(0, passes, batch)]))
    t_naive, one = timed(lambda: torch.cat([plain(r, r + 1) for r in range(naive)]))
    agree = float((batched.cpu().double().numpy() - table.table.reshape(-1, q)).__abs__().max())
    agree = max(agree, float((one.cpu().double().numpy() - table.table.reshape(-1, q)[:naive]).__abs__().max()))

    rates = {"mlmix": (passes + 64) / t_mlmix, "plain_batched": passes / t_batched,
             "plain_one_by_one": naive / t_naive}
    flops = flops_per_masked_sequence(model.config, mlm.positions)
    result = {
        "model": args.model, "architecture": type(model).__name__,
        "parameters": sum(int(p.numel()) for p in model.parameters()), "frame": mlm.frame.text(tok),
        "positions": mlm.positions, "alphabet": q, "length": n, "passes": passes, "device": str(dev),
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None, "cpu": platform.processor() or
        platform.machine(), "threads": args.threads, "dtype": str(mlm.dtype).replace("torch.", ""),
        "batch_size": batch, "passes_per_s": rates,
        "speedup": {"over_plain_batched": rates["mlmix"] / rates["plain_batched"],
                    "over_one_by_one": rates["mlmix"] / rates["plain_one_by_one"]},
        "gflops_per_s": {k: v * flops / 1e9 for k, v in rates.items()}, "gflop_per_pass": flops / 1e9,
        "max_abs_logit_difference": agree, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch": torch.__version__,
    }
    if args.peak_tflops:
        result["fraction_of_peak"] = {k: v / (1e3 * args.peak_tflops) for k, v in result["gflops_per_s"].items()}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{args.model} ({result['parameters']:,} parameters), frame of {mlm.positions} positions, n = {n}, "
              f"|V| = {q}: {passes:,} passes on {dev} ({result['dtype']}, {args.threads} thread(s), batch {batch})")
        for k, v in rates.items():
            extra = f", {result['fraction_of_peak'][k]:.1%} of peak" if args.peak_tflops else ""
            print(f"  {k:<18} {v:10.1f} passes/s  ({result['gflops_per_s'][k]:.1f} GFLOP/s{extra})")
        print(f"  mlmix vs plain batched {result['speedup']['over_plain_batched']:.2f}x, vs one by one "
              f"{result['speedup']['over_one_by_one']:.1f}x; logits agree to {agree:.1e}; "
              f"peak RSS {result['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
