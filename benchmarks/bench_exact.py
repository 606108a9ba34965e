"""Benchmark of the exact engine: stationary law + gap of the additive reversibilization.

For each case (a random Potts model on a cycle, reversible; or a random score table, not
reversible) the Glauber kernel is built once and saved; then every implementation runs in its
own subprocess (fresh peak-memory counter, a timeout, an address-space limit) on that matrix:

  mlmix     mlmix.Chain(P): .stationary and .additive_gap
  scipy     plain baseline: eigs(P^T, k=1) for pi, eigsh((B + B^T)/2, k=2) with B = D^1/2 P D^-1/2
  deeptime  MarkovStateModel(P).stationary_distribution and 1 - eigenvalues(2)[1]  (eigenvalues of P)
  pydtmc    MarkovChain(dense P).pi and .spectral_gap  (dense, skipped above --dense-limit states)

Every worker imports from the environment that runs the script (the same interpreter and packages:
mlmix as installed, ``pip install -e .`` or ``pip install .``); the peers are run when installed there
(``pip install deeptime==0.4.5 PyDTMC==8.7.0``, or in a virtual environment of their own with mlmix), else
skipped with a note. Nothing is added to ``sys.path`` or ``PYTHONPATH``. Time excludes imports (mlmix
and torch, which its Krylov engine runs on) and loading the matrix;
peak memory is the worker's max RSS (it includes the loaded matrix and the imported modules). Results
go to --out (JSON, written atomically after every run; --resume skips what is already there).

    python benchmarks/bench_exact.py --cases potts:3^6,potts:3^8,potts:4^8,scores:3^8
    python benchmarks/bench_exact.py --cases potts:3^11,potts:4^10,scores:3^11 --out bench.json --resume
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMPLEMENTATIONS = ("mlmix", "scipy", "deeptime", "pydtmc")
DEFAULT_CASES = "potts:3^6,potts:3^8,potts:4^8,potts:3^11,potts:4^10,scores:3^8,scores:3^11"


def parse_case(text: str) -> tuple[str, int, int]:
    kind, _, size = text.partition(":")
    q, _, n = size.partition("^")
    if kind not in ("potts", "scores") or not q.isdigit() or not n.isdigit():
        raise ValueError(f"bad case {text!r}: use potts:Q^N or scores:Q^N")
    return kind, int(q), int(n)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---------------------------------------------------------------- worker side (one subprocess per run)

def build(kind: str, q: int, n: int, path: str) -> dict:
    import networkx as nx
    import scipy.sparse as sp

    from mlmix.theory.kernels.assembled import glauber_kernel
    from mlmix.theory.sources.conditionals import PottsModel, ScoreTable

    src = PottsModel.random(nx.cycle_graph(n), q, seed=0) if kind == "potts" else ScoreTable.random(q, n, seed=0)
    t0 = time.perf_counter()
    P = glauber_kernel(src)
    seconds = time.perf_counter() - t0
    sp.save_npz(path, P, compressed=False)
    return {"time_s": seconds, "peak_mb": _peak_mb(), "nnz": int(P.nnz)}


def _residual(P, pi) -> float:
    import numpy as np

    return float(np.abs(P.T @ pi - pi).sum())


def run_mlmix(P):
    from mlmix import Chain  # imported by the worker before the clock starts

    chain = Chain(P)
    st = chain.stationary
    return st.value, chain.additive_gap.value, f"{st.method}; {chain.additive_gap.method}"


def run_scipy(P):
    import numpy as np
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    _, vecs = spla.eigs(P.T, k=1, which="LM")
    pi = np.real(vecs[:, 0])
    pi = pi / pi.sum()
    s = np.sqrt(np.abs(pi))
    B = sp.diags_array(s) @ P @ sp.diags_array(1.0 / s)
    vals = spla.eigsh((B + B.T) / 2, k=2, which="LA", return_eigenvectors=False)
    return pi, float(1.0 - np.sort(vals)[0]), "eigs(P^T) + eigsh((B+B^T)/2)"


def run_deeptime(P):
    from deeptime.markov.msm import MarkovStateModel

    msm = MarkovStateModel(P)
    pi = msm.stationary_distribution
    lam = msm.eigenvalues(2)
    return pi, float(1.0 - abs(lam[1])), "MarkovStateModel: 1 - |lambda_2(P)|"


def run_pydtmc(P):
    import numpy as np
    from pydtmc import MarkovChain

    mc = MarkovChain(P.toarray())
    pi = np.asarray(mc.pi[0])
    return pi, float(mc.spectral_gap), "MarkovChain (dense): .pi, .spectral_gap"


def worker(impl: str, path: str) -> dict:
    import scipy.sparse as sp

    runner = {"mlmix": run_mlmix, "scipy": run_scipy, "deeptime": run_deeptime, "pydtmc": run_pydtmc}[impl]
    try:
        __import__({"deeptime": "deeptime", "pydtmc": "pydtmc"}.get(impl, "scipy"))
    except ImportError as err:
        return {"skipped": f"not importable ({err.name}); pip install deeptime==0.4.5 PyDTMC==8.7.0"}
    if impl == "mlmix":  # imports are outside the timing (module docstring): mlmix, and torch for its Krylov engine
        import torch  # noqa: F401

        from mlmix import Chain  # noqa: F401
    P = sp.csr_array(sp.load_npz(path))
    t0 = time.perf_counter()
    pi, gap, method = runner(P)
    seconds = time.perf_counter() - t0
    return {"time_s": seconds, "peak_mb": _peak_mb(), "gap": gap, "residual": _residual(P, pi), "method": method}


# ---------------------------------------------------------------- driver

def _subprocess(argv: list[str], timeout: float, mem_gb: float) -> dict:
    def limit() -> None:
        cap = int(mem_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    try:
        proc = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, timeout=timeout,
                              preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return {"skipped": f"timed out after {timeout:g} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        if "MemoryError" in proc.stderr or proc.returncode in (-9, 137):
            return {"skipped": f"out of memory (address-space cap {mem_gb:g} GB): {last[:120]}"}
        return {"skipped": f"failed: {last[:160]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def _fmt(x: object, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(results: dict, cases: list[str]) -> str:
    head = "| case | states | impl | time (s) | peak RSS (MB) | gap | rel. diff vs mlmix | residual pi | note |"
    lines = [head, "|" + "---|" * 9]
    for case in cases:
        build_rec = results.get(f"{case}|build", {})
        ref = results.get(f"{case}|mlmix", {}).get("gap")
        lines.append(f"| {case} | {build_rec.get('states', '-')} | glauber_kernel build | "
                     f"{_fmt(build_rec.get('time_s'), '.2f')} | {_fmt(build_rec.get('peak_mb'), '.0f')} | | | | "
                     f"nnz {build_rec.get('nnz', '-')} |")
        for impl in IMPLEMENTATIONS:
            rec = results.get(f"{case}|{impl}")
            if rec is None:
                continue
            if "skipped" in rec:
                lines.append(f"| {case} | | {impl} | | | | | | {rec['skipped']} |")
                continue
            diff = abs(rec["gap"] - ref) / abs(ref) if ref else None
            lines.append(f"| {case} | | {impl} | {rec['time_s']:.2f} | {rec['peak_mb']:.0f} | {rec['gap']:.6g} | "
                         f"{_fmt(diff, '.1e')} | {rec['residual']:.1e} | {rec['method']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES, help=f"comma-separated kind:Q^N (default {DEFAULT_CASES})")
    parser.add_argument("--impls", default=",".join(IMPLEMENTATIONS), help="implementations to run")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per implementation and case")
    parser.add_argument("--mem-gb", type=float, default=16.0, help="address-space cap per worker (GB)")
    parser.add_argument("--dense-limit", type=int, default=20000, help="largest state count for dense peers")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the results")
    parser.add_argument("--resume", action="store_true", help="skip runs already recorded in --out")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        if args.worker[0] == "build":
            kind, q, n, path = args.worker[1], int(args.worker[2]), int(args.worker[3]), args.worker[4]
            print(json.dumps(build(kind, q, n, path)))
        else:
            print(json.dumps(worker(args.worker[0], args.worker[1])))
        return 0

    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    for impl in impls:
        if impl not in IMPLEMENTATIONS:
            raise SystemExit(f"unknown implementation {impl!r}; choose from {IMPLEMENTATIONS}")
    results: dict = {}
    if args.resume and args.out is not None and args.out.exists():
        results = json.loads(args.out.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            kind, q, n = parse_case(case)
            states = q**n
            if all(f"{case}|{i}" in results for i in impls) and f"{case}|build" in results:
                continue
            path = os.path.join(tmp, f"{kind}_{q}_{n}.npz")
            print(f"[{case}] building the Glauber kernel ({states} states)", file=sys.stderr, flush=True)
            rec = _subprocess(["--worker", "build", kind, str(q), str(n), path], args.timeout * 4, args.mem_gb)
            results[f"{case}|build"] = {**rec, "states": states}
            if "skipped" in rec:
                continue
            for impl in impls:
                key = f"{case}|{impl}"
                if key in results:
                    continue
                if impl == "pydtmc" and states > args.dense_limit:
                    gb = states**2 * 8 / 2**30
                    results[key] = {"skipped": f"dense peer: the {states}x{states} matrix needs {gb:.0f} GiB"}
                    continue
                print(f"[{case}] {impl}", file=sys.stderr, flush=True)
                results[key] = _subprocess(["--worker", impl, path], args.timeout, args.mem_gb)
                if args.out is not None:
                    _write_atomic(args.out, results)
    if args.out is not None:
        _write_atomic(args.out, results)
    print(table(results, cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
