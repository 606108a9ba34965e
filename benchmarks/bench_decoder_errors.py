"""Tables of docs/decoding-theory.md on the EB-sampler and ParallelBench's bound (verify/theorems/decoder_errors.py):
the exact KL of the entropy-bounded sampler against its decomposition and its gamma bound, and the looseness of
ParallelBench's lower bound on mis-specified factorised models.

    python benchmarks/bench_decoder_errors.py            # both tables (about 10 s on one core)

Every KL is KL(p || decoder law) from the exact law (``decoder_law``), resolved to 1e-9 relative or better; the
right sides come from the joint's marginal entropies along the reached partial assignments.
"""

from __future__ import annotations

import time

import networkx as nx
import numpy as np

from mlmix.theory.kernels.decoder_split import entropy_bounded_terms
from mlmix.theory.kernels.decoders import decoder_law, partial_log_probs
from mlmix.theory.kernels.schedule_kl import entropy_curve
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, PottsModel
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.space import StateSpace
from mlmix.verify.instances import Instance
from mlmix.verify.theorems import decoder_errors as DE
from mlmix.verify.theorems.decoding_theory import copy_law

MODELS = {
    "Ising cycle:6, beta 0.8": lambda: Instance(IsingModel(nx.cycle_graph(6), beta=0.8), "ising", {}),
    "Potts q=3 path:5, beta 1.0": lambda: Instance(PottsModel(nx.path_graph(5), 3, beta=1.0), "potts", {}),
    "Dirichlet(1) on {0,1,2}^4, seed 0": lambda: Instance(LogWeightTable.from_probabilities(
        StateSpace(3, 4), np.random.default_rng(0).dirichlet(np.ones(3**4))), "dirichlet", {}),
    "copy law on {0,1,2}^4": lambda: copy_law(3, 4),
}
GAMMAS = (0.0, 0.05, 0.2, 0.5, 1.0, 2.0)


def entropy_bounded() -> None:
    print("## EB-sampler with the joint's exact conditionals (nats)\n")
    print("| model | gamma | E steps (sampler) | KL(p \\|\\| q_EB) | E_p sum TC | E_p sum (sum H - max H) | "
          "gamma E_p[steps >= 2] | bound / KL |")
    print("|---|---|---|---|---|---|---|---|")
    for name, build in MODELS.items():
        inst = build()
        logp = DE.normalised_log_joint(inst)
        table = PartialScoreTable.from_joint(inst.source)
        lp = partial_log_probs(table)
        for gamma in GAMMAS:
            law = decoder_law(table, "entropy-bounded", gamma=gamma, log_probs=lp)
            kl, err = DE.kl_to_law(logp, law)
            t = entropy_bounded_terms(logp, lp, gamma)
            bound = gamma * t["parallel"]
            ratio = f"{bound / kl:.3g}" if kl > 1e3 * err else "-"
            kl_cell = f"{kl:.4g}" if kl > 1e3 * err else f"[0, {kl + err:.1g}]"
            print(f"| {name} | {gamma:g} | {law.steps:.4g} | {kl_cell} | {t['tc']:.4g} | {t['budget']:.4g} | "
                  f"{bound:.4g} | {ratio} |")


def parallelbench() -> None:
    print("\n## ParallelBench's bound on factorised models q = p's conditionals at temperature T (nats)\n")
    print("| model | sets | T | KL(p \\|\\| q_S) | L_T = sum E C(S_t \\| S_<t) | model error | KL / L_T |")
    print("|---|---|---|---|---|---|---|")
    for name, build in MODELS.items():
        inst = build()
        n = inst.space.length
        logp = DE.normalised_log_joint(inst)
        exact = PartialScoreTable.from_joint(inst.source)
        H = entropy_curve(inst.source).subset_entropies
        blocks = [tuple(range(0, n, 2)), tuple(range(1, n, 2))]
        L = DE.partition_tc(H, blocks)
        for T in (1.0, 0.8, 1.25):
            table = exact if T == 1.0 else PartialScoreTable(exact.space, exact.table, temperature=T)
            kl, _ = DE.kl_to_law(logp, decoder_law(table, "schedule", schedule=[list(b) for b in blocks]))
            me = DE.model_error(logp, partial_log_probs(table), blocks)
            me_cell = f"{me:.4g}" if abs(me) > 1e-12 else "0 (below 1e-12)"
            print(f"| {name} | {[list(b) for b in blocks]} | {T:g} | {kl:.4g} | {L:.4g} | {me_cell} | {kl / L:.4g} |")


if __name__ == "__main__":
    start = time.perf_counter()
    entropy_bounded()
    parallelbench()
    print(f"\n({time.perf_counter() - start:.1f} s)")
