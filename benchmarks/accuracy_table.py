"""Accuracy of mlmix's exact chain figures on metastable chains, against closed forms and
high-precision (mpmath) references: prints the markdown table of docs/accuracy.md.

    python benchmarks/accuracy_table.py > table.md

Each row: the chain, the figure, mlmix's value, the reference, the actual relative error, and the
error bound mlmix states (an interval is printed when mlmix reports one: the reference must lie in it).
"""

from __future__ import annotations

import math
import time

import mpmath as mp
import networkx as nx
import numpy as np

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.reference import birth_death, mp_additive, mp_chain, mp_gap, mp_stationary, noisy_ferromagnet
from mlmix.theory.sources.conditionals import IsingModel


def two_state(a: float, b: float) -> np.ndarray:
    return np.array([[1 - a, a], [b, 1 - b]])


def row(chain: str, figure: str, result, ref: float) -> str:
    if result.resolved:
        err = abs(result.value / ref - 1) if ref else abs(result.value)
        return (f"| {chain} | {figure} | {result.value:.10g} | {ref:.10g} | {err:.1e} | "
                f"{result.rel_error:.1e} |")
    inside = result.lower <= ref <= (result.upper if result.upper is not None else math.inf)
    return (f"| {chain} | {figure} | [{result.lower:.4g}, {result.upper:.4g}] | {ref:.10g} | "
            f"{'inside' if inside else 'OUTSIDE'} | interval |")


def main() -> None:
    lines = ["| chain | figure | mlmix | reference | relative error | stated bound |", "|---|---|---|---|---|---|"]
    start = time.perf_counter()
    with mp.workdps(400):  # 1 - a - b exact for rates down to 1e-300
        for a, b in [(1e-12, 1e-12), (1e-12, 3e-12), (1e-100, 0.3), (1e-300, 1e-300)]:
            ch = Chain(two_state(a, b))
            name = f"two-state a={a:g}, b={b:g}"
            A, B = mp.mpf(a), mp.mpf(b)
            lines.append(row(name, "spectral gap", ch.spectral_gap, float(A + B)))
            lines.append(row(name, "asymptotic variance of 1_{1}", ch.asymptotic_variance(np.array([0.0, 1.0])),
                             float(B / (A + B) * A / (A + B) * (2 - A - B) / (A + B))))
            lines.append(row(name, "Kemeny constant", ch.kemeny_constant, float(1 / (A + B))))
            lam = 1 - A - B
            t_ref = float(mp.ceil(mp.log(mp.mpf("0.25") / (max(A, B) / (A + B))) / mp.log(lam)))
            lines.append(row(name, "t_mix(1/4)", ch.mixing_time(), t_ref))
    with mp.workdps(120):
        for beta in (2.0, 6.0, 10.0, 20.0):
            ch = Chain.from_source(IsingModel(nx.cycle_graph(6), beta=beta))
            ref = float(2 / ((mp.exp(4 * mp.mpf(beta)) + 1) * 6))
            lines.append(row(f"Ising cycle:6, beta={beta:g}", "spectral gap (closed form)", ch.spectral_gap, ref))
        for depth in (30.0, 80.0, 200.0):
            P, _ = birth_death(12, depth, 2.0)
            M = mp_chain(P)
            with mp.workdps(int(60 + depth / 2)):
                ref = float(mp_gap(M))
            lines.append(row(f"birth-death, barrier {depth:g}", "spectral gap", Chain(P).spectral_gap, ref))
        for T in (0.2, 0.05, 0.02):
            P = glauber_kernel(noisy_ferromagnet().at_temperature(T)).toarray()
            ch = Chain(P)
            with mp.workdps(120 + int(2 / T)):
                M = mp_chain(P)
                pi = mp_stationary(M)
                ref = float(mp_gap(mp_additive(M, pi)))
            name = f"noisy ferromagnet 2^4, T={T:g} (non-reversible)"
            lines.append(row(name, "additive gap", ch.additive_gap, ref))
            k = int(np.argmin(ch.stationary.value))
            lines.append(f"| {name} | smallest pi(x) | {ch.stationary.value[k]:.10g} | {float(pi[k]):.10g} | "
                         f"{abs(ch.stationary.value[k] / float(pi[k]) - 1):.1e} | {ch.stationary.rel_error:.1e} |")
    print("\n".join(lines))
    print(f"\n({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
