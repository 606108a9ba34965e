"""How close the matrix-free gap of the Ising cycle comes to the machine's memory bandwidth.

The yardstick: one application P u of heat-bath Glauber on the n-cycle (2^n states,
float64) done as one sweep per site reads u, reads ``out`` and writes ``out`` for each of the n sites,
and the layout rotation of the trailing sites copies u in and the result back (two reads and two
writes), so such an application moves at least

    bytes(P u) = 8 N (3 n + 4)        (N = 2^n states, one float64 each)

and at the measured stream bandwidth B (torch triad a = b + s c on three 2^n vectors, 24 N bytes,
best of five) it cannot take less than bytes / B. The benchmark reports, against that bound:

* one application alone (median of three), and
* the certified gap (``operator_gap``: thick-restart Lanczos with full reorthogonalisation), as its
  time divided by its operator applications, so the ratio includes the Krylov work of each step.

mlmix's operator no longer sweeps site by site: it applies the sites in passes of up to six, piece by
piece in cache (``KernelOperator.application_traffic``: 8 N (3 p + 5) bytes for p passes), so the
record also gives that traffic, its bound and the application's ratio to it.

    python benchmarks/bench_bandwidth.py --n 24             # the Ising cycle:24 target (about 2 min)
    python benchmarks/bench_bandwidth.py --n 20 --basis 24  # quicker; another Lanczos basis

Prints one Markdown row (and the JSON record with --out). Run it on a quiet machine: the bound and the
timings are measured in the same process, one after the other.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path


def stream_bandwidth(N: int, repeats: int = 5) -> float:
    """Bytes per second of the triad a = b + 0.5 c on float64 vectors of N entries (best of ``repeats``)."""
    import torch

    a, b, c = (torch.rand(N, dtype=torch.float64) for _ in range(3))
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=0.5, out=a)
        best = min(best, time.perf_counter() - t0)
    return 24.0 * N / best


def measure(n: int, beta: float, basis: int, threads: int) -> dict:
    import networkx as nx
    import torch

    from mlmix.theory.chain.spectral import operator_gap
    from mlmix.theory.chain.stationary import operator_stationary
    from mlmix.theory.kernels.operators import kernel_operator
    from mlmix.theory.sources.conditionals import IsingModel

    torch.set_num_threads(threads)
    N = 2**n
    bandwidth = stream_bandwidth(N)
    op = kernel_operator(IsingModel(nx.cycle_graph(n), beta=beta), device="cpu", dtype="float64")
    bytes_per_apply = 8.0 * N * (3 * n + 4)
    bound = bytes_per_apply / bandwidth
    u, out = torch.rand(N, dtype=torch.float64), torch.empty(N, dtype=torch.float64)
    op.apply(u, "symmetric", out)  # warm-up: the work buffers are allocated once
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        op.apply(u, "symmetric", out)
        times.append(time.perf_counter() - t0)
    apply_s = sorted(times)[1]
    del u, out
    pi = operator_stationary(op)
    t0 = time.perf_counter()
    gap = operator_gap(op, pi, basis_size=basis)
    gap_s = time.perf_counter() - t0
    matvecs = int(gap.gap.details["matvecs"])
    own = getattr(op, "application_traffic", None)  # absent before the passes (older commits)
    own_bytes = float(own()) if own is not None else bytes_per_apply
    exact = (1 - math.tanh(2 * beta)) / n
    return {"n": n, "states": N, "beta": beta, "basis": basis, "threads": threads,
            "stream_GBps": bandwidth / 1e9, "bytes_per_apply_GB": bytes_per_apply / 1e9, "bound_s": bound,
            "apply_s": apply_s, "apply_ratio": apply_s / bound,
            "own_bytes_GB": own_bytes / 1e9, "own_bound_s": own_bytes / bandwidth,
            "apply_own_ratio": apply_s / (own_bytes / bandwidth),
            "gap_s": gap_s, "gap_applications": matvecs, "gap_s_per_application": gap_s / matvecs,
            "gap_ratio": gap_s / matvecs / bound,
            "gap": [gap.gap.lower, gap.gap.upper], "closed_form_inside": gap.gap.lower <= exact <= gap.gap.upper,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "load": list(os.getloadavg())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=24, help="cycle length: 2^n states (default 24)")
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--basis", type=int, default=16, help="Lanczos basis of the gap (default 16, as mlmix exact)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the record")
    args = parser.parse_args(argv)
    rec = measure(args.n, args.beta, args.basis, args.threads)
    if args.out is not None:
        from mlmix.files import atomic_write_text

        atomic_write_text(args.out, json.dumps(rec, indent=1))
    print("| states | stream (GB/s) | bytes per application | bound (s) | application (s) | ratio | "
          "gap (s) / applications | gap s per application | ratio | own traffic, its bound, application's ratio | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| 2^{rec['n']} | {rec['stream_GBps']:.1f} | {rec['bytes_per_apply_GB']:.2f} GB | {rec['bound_s']:.3f} | "
          f"{rec['apply_s']:.3f} | {rec['apply_ratio']:.2f}x | {rec['gap_s']:.1f} / {rec['gap_applications']} | "
          f"{rec['gap_s_per_application']:.3f} | **{rec['gap_ratio']:.2f}x** | {rec['own_bytes_GB']:.2f} GB, "
          f"{rec['own_bound_s']:.3f} s, {rec['apply_own_ratio']:.2f}x | {rec['peak_mb']:,.0f} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
