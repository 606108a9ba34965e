"""Searched lower bounds against the exact values on the site files of a streamed run
(docs/real-model.md, section 11, the n = 5 row).

A streamed run (``mlmix estimate --certify``, :mod:`mlmix.empirical.model_constants.streamed_constants`)
writes each site's scores to ``site-I.f64`` in its folder and removes them at its end: hard-link or
copy them while it runs to keep them. Read as a :class:`~mlmix.theory.sources.conditionals.ScoreTable`
they give the exact rho_ij again (0 passes, the same scores), and
:func:`~mlmix.empirical.model_constants.context_search.search_worst_contexts` runs on that table: a row
of it is exactly the conditional a masked pass returns, so the passes it counts are the model's.

    OMP_NUM_THREADS=1 python benchmarks/bench_search_site_files.py SITES --vocab 20 --budget 0.1 --seeds 0
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mlmix.empirical.model_constants.context_search import search_worst_contexts
from mlmix.empirical.model_constants.streamed_constants import streamed_constants
from mlmix.theory.local.influence import aggregate_influence
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.theory.sources.space import StateSpace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="folder holding site-0.f64 .. site-(n-1).f64")
    parser.add_argument("--vocab", type=int, default=20, help="alphabet size |V|")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--budget", type=float, nargs="+", default=[0.1], help="fractions of enumeration's passes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    sites = []
    while True:
        try:
            sites.append(np.load(f"{args.folder}/site-{len(sites)}.f64", mmap_mode="r"))
        except FileNotFoundError:
            break
    n, q = len(sites), args.vocab
    table = ScoreTable(StateSpace(q, n), np.ascontiguousarray(np.stack(sites)), args.temperature)
    t0 = time.perf_counter()
    exact = streamed_constants(table, log=lambda _: None)
    print(f"exact (streamed on the table, {time.perf_counter() - t0:.0f} s): rho {exact.rho:.6f} "
          f"alpha {exact.alpha:.6f} T* {exact.contraction_temperature:.6f}")
    off = ~np.eye(n, dtype=bool)
    enumeration = n * q ** (n - 1)
    for fraction in args.budget:
        for seed in args.seeds:
            t0 = time.perf_counter()
            found = search_worst_contexts(table, max_passes=int(enumeration * fraction), starts=1, seed=seed)
            ratio = found.rho_lower[off] / exact.rho_ij[off]
            agg = aggregate_influence(found.rho_lower)
            print(f"budget {fraction:g} x enumeration, seed {seed}: {found.passes:,} passes "
                  f"({enumeration / found.passes:.1f}x fewer), rho {agg.rho:.6f}, alpha {agg.alpha:.6f}, "
                  f"T* {found.contraction_temperature:.4f}, within 1%: {int((ratio >= 0.99).sum())} of "
                  f"{int(off.sum())}, worst {ratio.min():.3f} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
