"""The Krylov engine's costs that docs/exact.md and docs/benchmarks.md quote, each measured here.

1. Loading torch (which a sparse chain now does): seconds and resident memory of ``import torch`` in a
   fresh interpreter that has already imported mlmix's dense path.
2. Lanczos for the gap of the additive reversibilization of scores:3^11 (177,147 states, as
   ``lanczos_gap`` runs it): products and seconds with a basis of 16 and 24 vectors, and with one and
   two torch threads.
3. GMRES(50), Jacobi-preconditioned, on the grounded stationary system of the same chain: mlmix's
   engine against scipy's, products and seconds.
4. A Gram-Schmidt pass of the matrix-free gap at 2^24 states: ``V[:12] @ w`` over 12 basis vectors
   against the torch triad, in GB/s (``--big`` to run it: it needs about 2 GB).

    python benchmarks/bench_krylov.py            # 1-3, about a minute
    python benchmarks/bench_krylov.py --big      # and 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def torch_import_cost() -> dict:
    code = ("import resource, time, mlmix.theory.chain.markov_chain\n"
            "r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; t = time.perf_counter()\n"
            "import torch\n"
            "print(time.perf_counter() - t, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - r0) / 1024)")
    seconds, mb = map(float, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                            check=True).stdout.split())
    return {"import_torch_s": seconds, "import_torch_mb": mb}


def _chain():
    import numpy as np
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    from mlmix import Chain
    from mlmix.theory.chain.spectral import additive_reversibilization, symmetric_form
    from mlmix.theory.kernels.assembled import glauber_kernel
    from mlmix.theory.sources.conditionals import ScoreTable

    P = sp.csr_array(glauber_kernel(ScoreTable.random(3, 11, seed=0)))
    logpi = np.log(Chain(P).stationary.value)
    B = spla.aslinearoperator(symmetric_form(sp.csr_array(additive_reversibilization(P, logpi))))
    return P, logpi, B


def lanczos_costs(P, logpi, B) -> dict:
    import numpy as np
    import scipy.sparse.linalg as spla
    import torch

    from mlmix.theory.linalg.krylov import lanczos

    N = P.shape[0]
    sq = np.exp(logpi / 2)
    sq /= np.linalg.norm(sq)
    count = [0]

    def deflated(v):
        count[0] += 1
        return B @ v - sq * (sq @ v)

    op = spla.LinearOperator((N, N), matvec=deflated, dtype=np.float64)
    v0 = np.random.default_rng(0).standard_normal(N)
    out = {}
    for threads, basis in ((1, 16), (1, 24), (2, 24)):
        torch.set_num_threads(threads)
        count[0] = 0
        t0 = time.perf_counter()
        lanczos(op, v0 - sq * (sq @ v0), tol=lambda theta: 1e-10 * abs(theta), basis_size=basis, max_matvecs=100_000)
        out[f"lanczos basis {basis}, {threads} thread(s)"] = {"products": count[0], "s": time.perf_counter() - t0}
    torch.set_num_threads(1)
    return out


def gmres_costs(P) -> dict:
    import numpy as np
    import scipy.sparse.linalg as spla

    from mlmix.theory.chain.stationary import _off_diagonal
    from mlmix.theory.linalg.krylov import gmres

    N = P.shape[0]
    z = int(np.argmax(P.diagonal()))
    R = np.ones(N, dtype=bool)
    R[z] = False
    offT, d, _ = _off_diagonal(P)
    count = [0]

    def grounded(v):
        count[0] += 1
        full = np.zeros(N)
        full[R] = v
        return d[R] * v - (offT @ full)[R]

    A = spla.LinearOperator((N - 1, N - 1), matvec=grounded, dtype=np.float64)
    M = spla.LinearOperator(A.shape, matvec=lambda v: v / d[R], dtype=np.float64)
    unit = np.zeros(N)
    unit[z] = 1.0
    b = (offT @ unit)[R]
    out = {}
    for name, solve in (("scipy gmres", lambda: spla.gmres(A, b, rtol=1e-12, atol=0.0, restart=50, maxiter=200, M=M)),
                        ("mlmix gmres", lambda: gmres(A, b, preconditioner=M, restart=50, rtol=1e-12,
                                                      max_matvecs=51 * 200, patience=200))):
        count[0] = 0
        t0 = time.perf_counter()
        solve()
        out[name] = {"products": count[0], "s": time.perf_counter() - t0}
    return out


def gram_schmidt_rate(n: int = 24, k: int = 12) -> dict:
    import torch

    N = 2**n
    V = torch.rand(k, N, dtype=torch.float64)
    w, a = torch.rand(N, dtype=torch.float64), torch.empty(N, dtype=torch.float64)

    def best(f) -> float:
        f()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return min(times)

    triad = best(lambda: torch.add(w, V[0], alpha=0.5, out=a))
    gemv = best(lambda: V @ w)
    return {"triad_GBps": 24 * N / triad / 1e9, f"V[:{k}] @ w GBps": 8 * (k + 1) * N / gemv / 1e9,
            "gemv_ms": gemv * 1e3, "gemv_at_triad_rate_ms": 8 * (k + 1) * N / (24 * N / triad) * 1e3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", action="store_true", help="also the 2^24 Gram-Schmidt rate (about 2 GB)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    report = {"torch": torch_import_cost()}
    P, logpi, B = _chain()
    report["lanczos"] = lanczos_costs(P, logpi, B)
    report["gmres"] = gmres_costs(P)
    if args.big:
        report["gram_schmidt"] = gram_schmidt_rate()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
