"""Paper P section 3.1 / Appendix L.6: squared parameter error of k-pseudolikelihood fits versus k.

Ground truth: the eq. (5) Ising model with N = |C| = 4, h = 0 and J = 0.05 (Fig. 1) or J = 0.3
(Fig. 2), parametrised as in eq. (5)/(K.57) (ordered pairs, theta = (h_1..h_4, J_e for the 6 edges),
statistic 2 x_u x_v per edge: :class:`mlmix.theory.training.exponential_family.IsingFamily` with
``convention="ordered"``). For each repetition we draw ``n`` exact samples from the enumerated joint,
fit every k = 1..4 by L-BFGS on the empirical k-PL loss, and record ||theta_hat - theta*||^2.

Two estimators, both compared with their exact asymptotic prediction Tr(Gamma)/n:
* ``all``: each sample's loss averages over all k-subsets (the usual k-PL objective);
  Gamma = H^{-1} Cov_X(E_K grad) H^{-1}.
* ``sampled``: one uniformly drawn k-subset per sample (P Definition 2); Gamma^k = H_k^{-1} (Lemma 2),
  the matrix of Theorem 1.
The same samples are used for every k and both estimators within a repetition.

    mlmix run pl-variance --out results/pl_variance
"""

from __future__ import annotations

import argparse
from pathlib import Path

import networkx as nx
import numpy as np
from tqdm import tqdm

from mlmix.files import (
    Checkpoint,
    atomic_write_csv,
    atomic_write_json,
)
from mlmix.plot_style import legend, pyplot, save
from mlmix.theory.training.exponential_family import IsingFamily
from mlmix.theory.training.pseudolikelihood import (
    MaskDistribution,
    PseudoLikelihood,
    asymptotic_covariance,
    fit_pseudolikelihood,
    sample_pair_weights,
)
from mlmix.validation import check_int, check_real

#: One line for ``mlmix run --list``.
DESCRIPTION = "paper P 3.1 / L.6: k-PL parameter error against k"

MODES = ("all", "sampled")


def ground_truth(N: int, J: float) -> tuple[IsingFamily, np.ndarray]:
    """The family (complete graph on N spins, ordered-pair convention) and theta* = (0, ..., 0, J, ..., J)."""
    family = IsingFamily(nx.complete_graph(N), convention="ordered")
    theta = np.concatenate([np.zeros(N), np.full(len(family.edges), float(J))])
    return family, theta


def predictions(family: IsingFamily, theta: np.ndarray) -> dict[str, list[float]]:
    """Tr(Gamma^k) for k = 1..N under both estimators (multiply by 1/n for the predicted error)."""
    out: dict[str, list[float]] = {mode: [] for mode in MODES}
    for k in range(1, family.space.length + 1):
        masks = MaskDistribution.k_subsets(family.space, k)
        for mode in MODES:
            out[mode].append(asymptotic_covariance(family, theta, masks, mask_averaged=(mode == "all")).trace)
    return out


def fit_errors(family: IsingFamily, theta: np.ndarray, n_samples: int, modes: tuple[str, ...],
               rng: np.random.Generator) -> dict[str, list[tuple[float, bool]]]:
    """One repetition: squared errors (and convergence flags) of the k-PL fits, k = 1..N, per mode."""
    states = family.sample(theta, n_samples, rng)
    out: dict[str, list[tuple[float, bool]]] = {mode: [] for mode in modes}
    for k in range(1, family.space.length + 1):
        masks = MaskDistribution.k_subsets(family.space, k)
        for mode in modes:
            blocks = masks.sample(states, rng) if mode == "sampled" else None
            pl = PseudoLikelihood(family, masks, sample_pair_weights(states, blocks, masks))
            res = fit_pseudolikelihood(pl)
            out[mode].append((float(np.sum((res.x - theta) ** 2)), bool(res.success)))
    return out


def reproduce(out_dir: Path, couplings: list[float], samples: list[int], reps: int, modes: tuple[str, ...],
        seed: int, N: int = 4, figure: bool = True) -> dict:
    """Run the sweep (resumable), write pl_variance.json / .csv / .png into ``out_dir``, return the record."""
    out_dir = Path(out_dir)
    settings = {"N": N, "couplings": couplings, "samples": samples, "reps": reps, "modes": list(modes), "seed": seed}
    ckpt = Checkpoint(out_dir / "pl_variance.partial.json", settings)
    jobs = [(ji, J, si, n, r) for ji, J in enumerate(couplings) for si, n in enumerate(samples) for r in range(reps)]
    truths = {J: ground_truth(N, J) for J in couplings}
    for ji, J, si, n, r in tqdm(jobs, desc="k-PL fits", unit="rep"):
        key = f"J={J}|n={n}|rep={r}"
        if key in ckpt:
            continue
        family, theta = truths[J]
        errs = fit_errors(family, theta, n, modes, np.random.default_rng([seed, ji, si, r]))
        ckpt.record(key, errs)
    rows, summary = [], []
    for J in couplings:
        family, theta = truths[J]
        pred = predictions(family, theta)
        for n in samples:
            for mode in modes:
                for k in range(1, N + 1):
                    errs = [ckpt[f"J={J}|n={n}|rep={r}"][mode][k - 1] for r in range(reps)]
                    sq = np.array([e for e, _ in errs])
                    rows += [[J, n, mode, k, r, e, ok] for r, (e, ok) in enumerate(errs)]
                    summary.append({"J": J, "n_samples": n, "mode": mode, "k": k, "mean_sq_error": float(sq.mean()),
                                    "std_sq_error": float(sq.std(ddof=1)) if reps > 1 else 0.0,
                                    "predicted": pred[mode][k - 1] / n, "trace_gamma": pred[mode][k - 1],
                                    "ratio_to_prediction": float(sq.mean() / (pred[mode][k - 1] / n)),
                                    "all_converged": all(ok for _, ok in errs)})
    record = {"experiment": "paper P section 3.1 / L.6: k-PL squared parameter error vs k",
              "settings": settings, "parametrisation": "eq. (5)/(K.57) ordered pairs; theta = (h_1..h_N, J_e)",
              "summary": summary}
    atomic_write_json(out_dir / "pl_variance.json", record)
    atomic_write_csv(out_dir / "pl_variance.csv", ["J", "n_samples", "mode", "k", "rep", "sq_error", "converged"], rows)
    if figure:
        plot(summary, couplings, samples, modes, out_dir / "pl_variance.png")
    ckpt.remove()
    return record


def plot(summary: list[dict], couplings: list[float], samples: list[int], modes: tuple[str, ...], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(couplings), figsize=(5.5 * len(couplings), 4), squeeze=False)
    for ax, J in zip(axes[0], couplings):
        for n in samples:
            for mode, marker in zip(modes, "os"):
                rows = [s for s in summary if s["J"] == J and s["n_samples"] == n and s["mode"] == mode]
                ks = [s["k"] for s in rows]
                line = ax.errorbar(ks, [s["mean_sq_error"] for s in rows], yerr=[0.5 * s["std_sq_error"] for s in rows],
                                   marker=marker, capsize=3, label=f"n={n}, {mode} masks")
                ax.plot(ks, [s["predicted"] for s in rows], "--", color=line[0].get_color(), alpha=0.7)
        ax.set_yscale("log")
        ax.set_xlabel("block size $k$")
        ax.set_ylabel("squared parameter error")
        ax.set_title(f"$N = |C| = 4$, $h = 0$, $J = {J}$ (dashed: $\\mathrm{{Tr}}(\\Gamma^k)/n$)")
        ax.set_xticks(range(1, 5))
        legend(ax, where="below")
    save(fig, path)


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of ``mlmix run pl-variance``."""
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--J", type=float, nargs="+", default=[0.05, 0.3], help="couplings (default 0.05 0.3)")
    parser.add_argument("--samples", type=int, nargs="+", default=[1000, 10000], help="training set sizes")
    parser.add_argument("--reps", type=int, default=10, help="repetitions (default 10)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-figure", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Fit, write pl_variance.{json,csv,png} into --out, print the summary."""
    check_int(args.reps, "--reps", minimum=1)
    for n in args.samples:
        check_int(n, "--samples", minimum=1)
    for J in args.J:
        check_real(J, "--J")
    record = reproduce(args.out, args.J, args.samples, args.reps, tuple(args.modes), args.seed,
                       figure=not args.no_figure)
    for s in record["summary"]:
        print(f"J={s['J']:<5} n={s['n_samples']:<6} {s['mode']:<8} k={s['k']}  "
              f"error {s['mean_sq_error']:.3e} ± {s['std_sq_error']:.1e}   predicted {s['predicted']:.3e}")
    return 0
