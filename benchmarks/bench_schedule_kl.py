"""Tables of docs/decoding-theory.md: entropy curves, optimal schedules, the gap of the common schedules and the
looseness of the bounds on the expected KL of random-order parallel decoding (mlmix.theory.kernels.schedule_kl).

    python benchmarks/bench_schedule_kl.py            # every table (about 10 s on one core)

Every figure is resolved to the relative accuracy its Result states (1e-9 or better here); a value that is
not (a KL at the floating-point floor) is printed as its enclosure.
"""

from __future__ import annotations

import math
import time

import networkx as nx
import numpy as np

from mlmix.theory.kernels import schedule_kl as skl
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, PottsModel
from mlmix.theory.sources.space import StateSpace


def _copy(q: int, n: int) -> LogWeightTable:
    p = np.zeros(q**n)
    p[[v * sum(q**j for j in range(n)) for v in range(q)]] = 1.0 / q
    return LogWeightTable.from_probabilities(StateSpace(q, n), p)


MODELS = {
    "Ising cycle:8, beta 0.5": lambda: IsingModel(nx.cycle_graph(8), beta=0.5),
    "Ising cycle:8, beta 1.0": lambda: IsingModel(nx.cycle_graph(8), beta=1.0),
    "Potts q=3 path:6, beta 1.0": lambda: PottsModel(nx.path_graph(6), 3, beta=1.0),
    "Potts q=3 complete:5, beta 0.5": lambda: PottsModel(nx.complete_graph(5), 3, beta=0.5),
    "Dirichlet(1) on {0,1,2}^5, seed 0": lambda: LogWeightTable.from_probabilities(
        StateSpace(3, 5), np.random.default_rng(0).dirichlet(np.ones(3**5))),
    "copy law on {0,1,2}^5": lambda: _copy(3, 5),
}


def _cell(r) -> str:
    return format(r, ".4g/.2g|-=")


def curves() -> None:
    print("## Entropy curves h(m) (nats)\n")
    print("| model | h(0) ... h(L-1) | sum_i I(X_i; X_-i) | max abs. error |")
    print("|---|---|---|---|")
    for name, build in MODELS.items():
        c = skl.entropy_curve(build())
        print(f"| {name} | {' '.join(f'{v:.4f}' for v in c.h)} | {_cell(c.mutual_information_sum())} | "
              f"{c.abs_error:.1e} |")


def optimal() -> None:
    print("\n## Optimal K-step schedules and the common ones (E KL in nats; ratio to the optimum)\n")
    print("| model | K | optimal sizes | optimal E KL | uniform | cosine | log-linear | geometric | "
          "reversed cosine | randomised sizes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, build in MODELS.items():
        c = skl.entropy_curve(build())
        for K in range(2, c.length):
            rows = skl.schedule_gaps(c, K)
            opt = rows[0]
            cells = []
            for row in rows[1:]:
                ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3g}"
                cells.append(f"{_cell(row['kl'])} ({ratio})")
            print(f"| {name} | {K} | {opt['sizes']} | {_cell(opt['kl'])} | " + " | ".join(cells) + " |")


def looseness() -> None:
    print("\n## Looseness (bound / exact E KL) of the sharp constant (s_max - 1)/L and of (2^ceil(log2 s_max) - 1)/L"
          " (a reported reading of Li & Cai's Theorem 1, not confirmed from the paper), largest block first\n")
    print("| model | sizes | exact E KL | sharp bound | looseness | reported Li & Cai | looseness |")
    print("|---|---|---|---|---|---|---|")
    for name, build in MODELS.items():
        c = skl.entropy_curve(build())
        L = c.length
        for s in (2, 3, 4, 5):
            if s > L:
                continue
            sizes = (s,) * (L // s) + ((L % s,) if L % s else ())
            kl, bound = skl.schedule_kl(c, sizes), skl.sharp_bound(c, sizes)
            li = (2 ** math.ceil(math.log2(s)) - 1) * float(c.mutual_information_sum()) / L
            if kl.resolved and float(kl) > 0:
                print(f"| {name} | {list(sizes)} | {_cell(kl)} | {_cell(bound)} | {float(bound) / float(kl):.4g} | "
                      f"{li:.4g} | {li / float(kl):.4g} |")


if __name__ == "__main__":
    start = time.perf_counter()
    curves()
    optimal()
    looseness()
    print(f"\n({time.perf_counter() - start:.1f} s)")
