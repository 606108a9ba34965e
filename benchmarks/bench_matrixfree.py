"""Benchmark of the matrix-free exact engine: targets, side-by-side comparison, scaling.

Every run is a subprocess (fresh peak-memory counter: its max RSS) and is recorded in --out (JSON,
written atomically after each run; --resume skips recorded runs). The load average of the machine is
recorded before and after each run (the machine may be shared).

Cases (all heat-bath Glauber):
  ising:N        Ising model on the N-cycle, J = 1, h = 0, beta = --beta (2^N states); the gap is
                 checked against the closed form (1 - tanh(2 beta)) / N
  scores:Q^N     ScoreTable.random(Q, N, seed=0): an incompatible (non-reversible) chain on Q^N states

Implementations:
  operator       mlmix.theory.chain.operator_chain.analyse_operator on kernel_operator(source):
                 stationary law, gap, conductance interval, t_mix bounds
  exact-cli      `mlmix exact --model ising --graph cycle:N --beta B --json` as a user runs it (the
                 CSR path of mlmix.Chain), wall-clock time of the command
  scipy          baseline: assemble the CSR Glauber kernel (glauber_kernel), pi from log mu, then
                 eigsh(D^1/2 P D^-1/2, k=2, which='LA', tol=1e-10) for the gap (gap only)

    python benchmarks/bench_matrixfree.py targets --out mf.json            # ising:24 and scores:20^5
    python benchmarks/bench_matrixfree.py compare --n 20 --out mf.json     # operator vs mlmix exact vs scipy
    python benchmarks/bench_matrixfree.py scaling --out mf.json            # ising:12..24, time and memory
    python benchmarks/bench_matrixfree.py run ising:16 --impl operator     # one run, printed
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _source(case: str, beta: float):
    import networkx as nx

    from mlmix.theory.sources.conditionals import IsingModel, ScoreTable

    kind, _, size = case.partition(":")
    if kind == "ising" and size.isdigit():
        return IsingModel(nx.cycle_graph(int(size)), beta=beta)
    q, _, n = size.partition("^")
    if kind == "scores" and q.isdigit() and n.isdigit():
        return ScoreTable.random(int(q), int(n), seed=0)
    raise ValueError(f"bad case {case!r}: use ising:N or scores:Q^N")


# ---------------------------------------------------------------- worker side

def run_operator(case: str, beta: float, threads: int, device: str, dtype: str, gap_rtol: float) -> dict:
    import torch

    from mlmix.theory.chain.operator_chain import analyse_operator, summary_dict
    from mlmix.theory.kernels.operators import kernel_operator

    torch.set_num_threads(threads)
    src = _source(case, beta)
    t0 = time.perf_counter()
    op = kernel_operator(src, device=device, dtype=dtype)
    build = time.perf_counter() - t0
    res = analyse_operator(op, gap_rtol=gap_rtol, progress=True)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    out = {"time_s": seconds, "build_s": build, **res["timings"], "peak_mb": _peak_mb(),
           "summary": summary_dict(res)}
    if device.startswith("cuda"):
        out["gpu_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    if case.startswith("ising:"):
        n = int(case.split(":")[1])
        exact = (1 - math.tanh(2 * beta)) / n
        gap = res["spectral_gap"]
        out["closed_form_gap"] = exact
        out["gap_error_vs_closed_form"] = abs(gap.value - exact) / exact if gap.value is not None else None
        out["closed_form_inside"] = gap.lower <= exact <= gap.upper
    return out


def run_scipy(case: str, beta: float, threads: int) -> dict:
    import numpy as np
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    from mlmix.theory.kernels.assembled import glauber_kernel

    src = _source(case, beta)
    t0 = time.perf_counter()
    P = glauber_kernel(src, max_states=src.space.size)
    build = time.perf_counter() - t0
    lw = src.log_joint()
    s = np.exp((lw - lw.max()) / 2)
    s /= np.linalg.norm(s)
    coo = P.tocoo()
    B = sp.csr_array((coo.data * s[coo.row] / s[coo.col], (coo.row, coo.col)), shape=P.shape)
    vals = spla.eigsh(B, k=2, which="LA", tol=1e-10, v0=np.random.default_rng(0).standard_normal(P.shape[0]),
                      return_eigenvectors=False)
    gap = float(1.0 - np.sort(vals)[0])
    return {"time_s": time.perf_counter() - t0, "build_s": build, "peak_mb": _peak_mb(), "gap": gap,
            "nnz": int(P.nnz)}


def worker(impl: str, case: str, beta: float, threads: int, device: str, dtype: str, gap_rtol: float) -> dict:
    if impl == "operator":
        return run_operator(case, beta, threads, device, dtype, gap_rtol)
    if impl == "scipy":
        return run_scipy(case, beta, threads)
    raise ValueError(f"unknown implementation {impl!r}")


# ---------------------------------------------------------------- driver

def _load() -> list[float]:
    return list(os.getloadavg())


def _subprocess(argv: list[str], timeout: float, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load = _load()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"skipped": f"timed out after {timeout:g} s", "load_before": load}
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"skipped": f"failed: {last[:200]}", "load_before": load}
    return {"wall_s": wall, "load_before": load, "load_after": _load(), "stdout": proc.stdout,
            "stderr_tail": (proc.stderr.strip().splitlines() or [""])[-1]}


def run_one(impl: str, case: str, args: argparse.Namespace) -> dict:
    if impl == "exact-cli":
        n = case.split(":")[1]
        cmd = [sys.executable, "-m", "mlmix.cli", "exact", "--model", "ising", "--graph", f"cycle:{n}",
               "--beta", str(args.beta), "--json"]
        time_cmd = ["/usr/bin/time", "-f", "%M"] if Path("/usr/bin/time").exists() else []
        rec = _subprocess(time_cmd + cmd, args.timeout, args.threads)
        if "skipped" in rec:
            return rec
        out = json.loads(rec.pop("stdout"))
        tail = rec.pop("stderr_tail")
        rec.update(time_s=rec["wall_s"], summary=out, note="wall-clock of the command, imports included")
        if time_cmd and tail.isdigit():
            rec["peak_mb"] = int(tail) / 1024.0  # /usr/bin/time's maximum resident set size (KB)
        gap = out.get("spectral_gap", {})
        if gap.get("value") is not None:
            exact = (1 - math.tanh(2 * args.beta)) / int(n)
            rec["gap_error_vs_closed_form"] = abs(gap["value"] - exact) / exact
        return rec
    argv = [sys.executable, __file__, "--worker", impl, case, str(args.beta), str(args.threads), args.device,
            args.dtype, str(args.gap_rtol)]
    rec = _subprocess(argv, args.timeout, args.threads)
    if "skipped" in rec:
        return rec
    rec.pop("stderr_tail")
    rec.update(json.loads(rec.pop("stdout").strip().splitlines()[-1]))
    return rec


def _save(path: Path | None, results: dict) -> None:
    if path is not None:
        from mlmix.files import atomic_write_text, dumps_json

        atomic_write_text(path, dumps_json(results))


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _interval(d: dict | None) -> str:
    if not d:
        return "-"
    if d.get("value") is not None:
        return f"{d['value']:.6g}"
    return f"[{_fmt(d.get('lower'), '.4g')}, {_fmt(d.get('upper'), '.4g')}]"


def table(results: dict) -> str:
    head = ("| run | time (s) | peak RSS (MB) | gap | rel. error vs closed form | conductance | t_mix(1/4) | "
            "load before/after | note |")
    lines = [head, "|" + "---|" * 9]
    for key, rec in results.items():
        if "skipped" in rec:
            lines.append(f"| {key} | | | | | | | | {rec['skipped']} |")
            continue
        summ = rec.get("summary", {})
        gap = summ.get("additive_gap") or ({"value": rec["gap"]} if "gap" in rec else None)
        load = f"{rec['load_before'][0]:.1f} / {rec.get('load_after', [math.nan])[0]:.1f}"
        peak = rec.get("peak_mb")
        lines.append(f"| {key} | {rec['time_s']:.1f} | {_fmt(peak, '.0f')} | {_interval(gap)} | "
                     f"{_fmt(rec.get('gap_error_vs_closed_form'), '.1e')} | {_interval(summ.get('conductance'))} | "
                     f"{_interval(summ.get('t_mix'))} | {load} | {rec.get('note', '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=("targets", "compare", "scaling", "run"), default="targets")
    parser.add_argument("case", nargs="?", help="case for mode 'run' (ising:N or scores:Q^N)")
    parser.add_argument("--impl", default="operator", help="implementation for mode 'run'")
    parser.add_argument("--n", type=int, default=20, help="cycle length of the comparison (default 20)")
    parser.add_argument("--sizes", default="12,14,16,18,20,22,24", help="cycle lengths of the scaling table")
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    parser.add_argument("--gap-rtol", type=float, default=1e-8, help="residual target relative to the gap")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the results")
    parser.add_argument("--resume", action="store_true", help="skip runs already recorded in --out")
    parser.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        from mlmix.files import dumps_json

        impl, case, beta, threads, device, dtype, gap_rtol = args.worker
        print(dumps_json(worker(impl, case, float(beta), int(threads), device, dtype, float(gap_rtol)), indent=None))
        return 0
    if args.mode == "targets":
        runs = [("operator", "ising:24"), ("operator", "scores:20^5")]
    elif args.mode == "compare":
        runs = [(impl, f"ising:{args.n}") for impl in ("operator", "scipy", "exact-cli")]
    elif args.mode == "scaling":
        runs = [("operator", f"ising:{n}") for n in args.sizes.split(",")]
    else:
        if not args.case:
            parser.error("mode 'run' needs a case")
        runs = [(args.impl, args.case)]
    results: dict = {}
    if args.resume and args.out is not None and args.out.exists():
        results = json.loads(args.out.read_text())
    tag = f"threads={args.threads} {args.device} {args.dtype}"
    for impl, case in runs:
        key = f"{case} {impl} ({tag})"
        if key in results:
            continue
        print(f"[{key}] running", file=sys.stderr, flush=True)
        results[key] = run_one(impl, case, args)
        _save(args.out, results)
    if args.mode == "scaling":
        pts = [(int(k.split()[0].split(":")[1]), r["time_s"], r["peak_mb"]) for k, r in results.items()
               if k.startswith("ising:") and " operator " in k and "time_s" in r and tag in k]
        if len(pts) >= 2:
            import numpy as np

            n, t, m = (np.array(v, dtype=float) for v in zip(*pts))
            logN = n * math.log(2)
            results["scaling fit"] = {"time_slope": float(np.polyfit(logN, np.log(t), 1)[0]),
                                      "memory_slope": float(np.polyfit(logN[n >= 18], np.log(m[n >= 18]), 1)[0])
                                      if (n >= 18).sum() >= 2 else None, "sizes": n.tolist(), "note": tag}
            _save(args.out, results)
            print(f"fitted slopes (log-log in the state count): {results['scaling fit']}", file=sys.stderr)
    print(table({k: v for k, v in results.items() if k != "scaling fit"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
