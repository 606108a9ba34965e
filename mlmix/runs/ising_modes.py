"""Paper P Appendix L.7: steps for k-Gibbs to reach the big mode R_1 from R_-1, and the independent
parallel sampler's failure, on the eq. (5) model with N = 10, |C| = 4, h_i = 5 and a sweep of J.

For every J and sampler (k-Gibbs for each k, and the independent parallel sampler):
* simulated: ``reps`` chains on the full model from the all -1 state (in R_-1), each recording the
  first step t >= 1 with X_t in R_1, or the budget when R_1 is not reached (as in the paper's plot);
* exact (beyond the paper): the hitting-time distribution P(tau <= t), t = 0..budget, from the clique
  chain (:func:`mlmix.theory.training.modes.reach_curve`), with P(tau <= budget), E[min(tau, budget)] (the
  quantity the simulated mean estimates), the median and E[tau]
  (:func:`mlmix.theory.chain.hitting.expected_hitting_times`, accurate where a plain solve is not);
* cross-check: the same distribution from the full 2^10-state kernels (k-Gibbs sparse, parallel
  dense 1024 x 1024) for the k listed in ``--full-check-k`` and the parallel sampler.

    mlmix run ising-modes --out results/ising_modes
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.special import softmax
from tqdm import tqdm

from mlmix.files import (
    Checkpoint,
    atomic_write_csv,
    atomic_write_json,
)
from mlmix.plot_style import legend, pyplot, save
from mlmix.theory.chain.hitting import expected_hitting_times, hitting_time_distribution
from mlmix.theory.kernels.assembled import independent_parallel_kernel, k_gibbs_kernel
from mlmix.theory.sources.conditionals import IsingModel
from mlmix.theory.sources.space import StateSpace
from mlmix.theory.training.modes import (
    CliqueIsing,
    assumption5,
    c_R1,
    c_stuck,
    clique_kernel,
    mode_masks,
    prop4_steps,
    reach_curve,
)
from mlmix.validation import check_int, check_real

#: One line for ``mlmix run --list``.
DESCRIPTION = "paper P L.7: k-Gibbs vs the parallel sampler on eq. (5)"


def simulate_k_gibbs(model: IsingModel, clique: list[int], k: int, budget: int,
                     rng: np.random.Generator) -> int | None:
    """First t in 1..budget with the clique all +1 under k-Gibbs from the all -1 state (None if never)."""
    n = model.space.length
    configs = StateSpace(2, k).all_states()
    x = np.zeros(n, dtype=np.int64)
    for t in range(1, budget + 1):
        K = rng.choice(n, size=k, replace=False)
        cand = np.repeat(x[None, :], configs.shape[0], axis=0)
        cand[:, K] = configs
        x = cand[rng.choice(configs.shape[0], p=softmax(model.log_weight(cand)))]
        if x[clique].all():
            return t
    return None


def simulate_parallel(model: IsingModel, clique: list[int], budget: int, rng: np.random.Generator) -> int | None:
    """First t in 1..budget with the clique all +1 under the independent parallel sampler (None if never)."""
    x = np.zeros(model.space.length, dtype=np.int64)
    for t in range(1, budget + 1):
        p_up = np.exp(model.all_log_conditionals(x[None, :])[0, :, 1])
        x = (rng.random(x.size) < p_up).astype(np.int64)
        if x[clique].all():
            return t
    return None


def exact_summary(spec: CliqueIsing, sampler: str, k: int | None, budget: int) -> dict:
    """Exact hitting-time statistics of R_1 from the all -1 state, via the clique chain."""
    curve = reach_curve(spec, sampler, 0, budget, k)
    target = np.zeros(2 ** spec.size, dtype=bool)
    target[-1] = True
    mean = float(expected_hitting_times(clique_kernel(spec, sampler, k), target)[0])
    reached = np.flatnonzero(curve >= 0.5)
    return {"p_reach_within_budget": float(curve[-1]), "capped_mean": float(np.sum(1.0 - curve[:-1])),
            "median": int(reached[0]) if reached.size else None, "expected_hitting_time": mean,
            "curve": curve}


def full_kernel_difference(spec: CliqueIsing, sampler: str, k: int | None, budget: int, curve: np.ndarray) -> float:
    """max_t |P(tau <= t)| difference between the full 2^n kernel and the clique chain."""
    model = spec.model()
    if sampler == "parallel":
        P = independent_parallel_kernel(model, max_states=2 ** spec.n)
    else:
        P = k_gibbs_kernel(model, k)
    law = np.zeros(2 ** spec.n)
    law[0] = 1.0
    full = hitting_time_distribution(P, law, mode_masks(spec)[0], budget)
    return float(np.abs(full - curve).max())


def reproduce(out_dir: Path, couplings: list[float], ks: list[int], reps: int, budget: int, seed: int, N: int = 10,
        clique_size: int = 4, field: float = 5.0, full_check_k: tuple[int, ...] = (1, 4), delta: float = 0.1,
        figure: bool = True) -> dict:
    """Run the sweep (resumable), write ising_modes.json / .csv / .png into ``out_dir``, return the record."""
    out_dir = Path(out_dir)
    settings = {"N": N, "clique_size": clique_size, "h": field, "couplings": couplings, "k": ks, "reps": reps,
                "budget": budget, "seed": seed, "full_check_k": list(full_check_k), "delta": delta}
    ckpt = Checkpoint(out_dir / "ising_modes.partial.json", settings)
    clique = list(range(clique_size))
    jobs = [(ji, J, s) for ji, J in enumerate(couplings) for s in [f"k={k}" for k in ks] + ["parallel"]]
    for ji, J, sampler in tqdm(jobs, desc="samplers x J", unit="cfg"):
        key = f"J={J}|{sampler}"
        if key in ckpt:
            continue
        spec = CliqueIsing(N, tuple(clique), J, (field,) * N)
        model = spec.model()
        k = None if sampler == "parallel" else int(sampler[2:])
        kind = "parallel" if k is None else "k-gibbs"
        rng = np.random.default_rng([seed, ji, 0 if k is None else k])
        hits = [simulate_parallel(model, clique, budget, rng) if k is None
                else simulate_k_gibbs(model, clique, k, budget, rng) for _ in range(reps)]
        exact = exact_summary(spec, kind, k, budget)
        curve = exact.pop("curve")
        entry = {"J": J, "sampler": kind, "k": k, "simulated_steps": [budget if t is None else t for t in hits],
                 "simulated_reached": sum(t is not None for t in hits), **exact}
        if k is None or k in full_check_k:
            entry["full_kernel_max_difference"] = full_kernel_difference(spec, kind, k, budget, curve)
        if k is not None and k >= clique_size:  # Prop 4's constants, formal when Assumption 5 fails
            c = c_R1(spec, k)
            entry["c_R1_formal"] = c
            entry["prop4_T_formal"] = prop4_steps(c, delta) if 0 <= c < 1 else None
        ckpt.record(key, entry)
    entries = [ckpt[f"J={J}|{s}"] for J in couplings for s in [f"k={k}" for k in ks] + ["parallel"]]
    for e in entries:
        sim = np.array(e["simulated_steps"], dtype=float)
        e["simulated_mean"] = float(sim.mean())
        e["simulated_std"] = float(sim.std(ddof=1)) if sim.size > 1 else 0.0
    spec0 = CliqueIsing(N, tuple(clique), couplings[0], (field,) * N)
    a5 = {f"J={J}": assumption5(CliqueIsing(N, tuple(clique), J, (field,) * N)).__dict__ for J in couplings}
    record = {"experiment": "paper P L.7: steps to reach R_1 from R_-1 (N = 10, |C| = 4, h_i = 5)",
              "settings": settings, "convention": "eq. (5) ordered pairs (each clique edge carries 2J)",
              "assumption5": a5, "c_stuck_formal": c_stuck(spec0), "results": entries}
    atomic_write_json(out_dir / "ising_modes.json", record)
    header = ["J", "sampler", "k", "simulated_mean", "simulated_std", "simulated_reached", "p_reach_within_budget",
              "capped_mean",
              "median", "expected_hitting_time", "full_kernel_max_difference", "simulated_steps"]
    atomic_write_csv(out_dir / "ising_modes.csv", header,
                     [[e.get(h) if h != "simulated_steps" else " ".join(map(str, e[h])) for h in header]
                      for e in entries])
    if figure:
        plot(entries, couplings, ks, budget, out_dir / "ising_modes.png")
    ckpt.remove()
    return record


def plot(entries: list[dict], couplings: list[float], ks: list[int], budget: int, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k in ks + [None]:
        rows = [e for e in entries if e["k"] == k]
        label = "independent parallel" if k is None else f"k = {k}"
        color = "black" if k is None else None
        line = ax.errorbar(couplings, [e["simulated_mean"] for e in rows],
                           yerr=[0.5 * e["simulated_std"] for e in rows], fmt="o", capsize=3, color=color, label=label)
        ax.plot(couplings, [max(e["capped_mean"], 1e-1) for e in rows], "-", color=line[0].get_color(), alpha=0.6)
    ax.axhline(budget, ls=":", color="grey")
    ax.set_yscale("log")
    ax.set_xlabel("coupling $J$")
    ax.set_ylabel(f"steps to reach $R_1$ (budget {budget})")
    ax.set_title(r"$N$ = 10, $|C|$ = 4, $h_i$ = 5: simulated mean ± 0.5 sd (dots), exact "
                 r"$E[\min(\tau, \mathrm{budget})]$ (lines)")
    legend(ax)
    save(fig, path)


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of ``mlmix run ising-modes``."""
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--J", type=float, nargs="+", default=[0.5, 1.0, 1.5, 2.0, 3.0, 4.0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8, 10])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--N", type=int, default=10)
    parser.add_argument("--clique-size", type=int, default=4)
    parser.add_argument("--h", type=float, default=5.0, help="field on every spin")
    parser.add_argument("--full-check-k", type=int, nargs="*", default=[1, 4],
                        help="k whose full 2^N kernel is built to cross-check the clique chain")
    parser.add_argument("--no-figure", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Simulate and compute exactly, write ising_modes.{json,csv,png} into --out, print the table."""
    check_int(args.reps, "--reps", minimum=1)
    check_int(args.budget, "--budget", minimum=1)
    check_int(args.N, "--N", minimum=2, maximum=12)
    check_int(args.clique_size, "--clique-size", minimum=2, maximum=args.N)
    check_real(args.h, "--h")
    for k in args.k:
        check_int(k, "--k", minimum=1, maximum=args.N)
    for J in args.J:
        check_real(J, "--J")
    record = reproduce(args.out, args.J, args.k, args.reps, args.budget, args.seed, args.N, args.clique_size, args.h,
                       tuple(args.full_check_k), figure=not args.no_figure)
    for e in record["results"]:
        name = "parallel" if e["k"] is None else f"k={e['k']}"
        print(f"J={e['J']:<4} {name:<9} simulated {e['simulated_mean']:8.1f} ± {e['simulated_std']:7.1f}   "
              f"exact E[min(tau,{args.budget})] {e['capped_mean']:8.1f}  "
              f"P(tau<={args.budget}) {e['p_reach_within_budget']:.3g}")
    return 0
