"""Paper G section 6.1: the mixing-time crossover in temperature and length.

(a) Hitting time. At a fixed temperature, for each length n, ``--chains`` Glauber chains from start
states (``--texts`` passages or random tokens) run ``--steps`` steps; the semantic drift
d_t = 1 - cos(e(x_t), e(x_0)) (:mod:`mlmix.empirical.sampling.drift`) gives the hitting time
tau = min{t : d_t >= threshold}. The mean tau over chains that hit is fitted by least squares to

    tau(n) = a n log n + b       (the n log n scaling of Theorem 5's bound).

(b) Coupling map. For each (T, n), ``--pairs`` pairs of chains from independent start states run
under the coupling of Theorem 5 (same site, maximal coupling; :func:`mlmix.empirical.sampling.simulation.run_coupled`)
for at most ``--coupling-steps`` steps; the cell records the coupling times, and cells where the
median pair has not met are the no-coupling-within-budget region.

Embedding: the MLM's own input embeddings averaged over tokens by default (``--embedder bag``),
``--embedder hamming`` (the distance is then the normalised Hamming distance to the start), or a
local sentence-transformers model with ``--embedder PATH`` (the paper used Jina v4).

    mlmix run mixing-crossover --out runs/mix
    mlmix run mixing-crossover --out runs/mix --model bert-base-uncased --texts msmarco.txt \\
        --lengths 5 10 15 20 --chains 100 --steps 10000 --temperature 2.0 \\
        --coupling-temperatures 0.5 1 1.5 2 3 --pairs 100 --coupling-steps 10000 --address tcp://scheduler:8786

Every (n) and (T, n) cell is a resumable sweep task (``--workers``, ``--address``); chain records
go to OUT/chains/. Writes hitting.csv, coupling.csv, mixing_crossover.json and mixing_crossover.png.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mlmix.empirical.sampling.drift import (
    NOT_HIT,
    drift_from_start,
    embed_records,
    hitting_times,
)
from mlmix.empirical.sampling.simulation import NOT_COUPLED, run_chains, run_coupled
from mlmix.empirical.sampling.sweep import run_sweep
from mlmix.plot_style import legend, pyplot
from mlmix.runs.common import (
    add_common_arguments,
    add_embedder_argument,
    load_model,
    make_embedder,
    save_figure,
    start_states,
    write_csv,
    write_json,
)

#: One line for ``mlmix run --list``.
DESCRIPTION = "paper G 6.1: hitting times vs n and the coupling-time map"


def configure(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="sequence lengths n (default: 5 values from 2 to the longest the model fits, <= 20)")
    parser.add_argument("--temperature", type=float, default=1.0, help="temperature of the hitting-time part")
    parser.add_argument("--chains", type=int, default=100, help="chains per length (paper: 100 trials)")
    parser.add_argument("--steps", type=int, default=2000, help="step budget of the hitting-time chains")
    parser.add_argument("--threshold", type=float, default=0.3, help="embedding-distance threshold")
    parser.add_argument("--record-every", type=int, default=5, help="record (and time resolution) every k steps")
    add_embedder_argument(parser)
    parser.add_argument("--coupling-temperatures", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--pairs", type=int, default=20, help="coupled pairs per (T, n) cell")
    parser.add_argument("--coupling-steps", type=int, default=2000, help="step budget of the coupled pairs")
    parser.add_argument("--workers", type=int, default=0, help="local worker processes (0: this process)")
    parser.add_argument("--address", default=None, help="Dask scheduler address to run the cells on")


def _source(params: dict, temperature: float):
    return load_model(params["model"], params["length"], argparse.Namespace(**params), temperature=temperature)


def _starts(source, params: dict, stream: int) -> np.ndarray:
    rng = np.random.default_rng([params["seed"], stream])
    texts = None if params["texts"] is None else Path(params["texts"])
    return start_states(source, params["count"], rng, texts)


def hitting_task(params: dict) -> dict:
    """Hitting times of ``count`` chains at one length (a sweep task)."""
    source = _source(params, params["temperature"])
    x0 = _starts(source, params, 0)
    tr = run_chains(source, x0, params["steps"], seeds=params["seed"] * 100_003 + np.arange(params["count"]),
                    record_every=params["record_every"], path=params["record_path"], progress=params["progress"])
    d = drift_from_start(embed_records(make_embedder(params["embedder"], source), tr.states))
    tau = hitting_times(d, tr.steps, params["threshold"])
    return {"hitting_time": tau.tolist(), "final_distance": d[-1].tolist(), "mean_distance": d.mean(axis=1).tolist(),
            "steps": tr.steps.tolist()}


def coupling_task(params: dict) -> dict:
    """Coupling times of ``count`` pairs at one (T, n) (a sweep task)."""
    source = _source(params, params["temperature"])
    x0, y0 = _starts(source, params, 1), _starts(source, params, 2)
    tr = run_coupled(source, x0, y0, params["steps"], seeds=params["seed"] * 100_003 + np.arange(params["count"]),
                     record_every=params["record_every"], path=params["record_path"], progress=params["progress"])
    return {"coupling_time": tr.coupling_time.tolist()}


def fit_n_log_n(lengths: np.ndarray, times: np.ndarray) -> dict:
    """Least-squares fit tau(n) = a n log n + b; returns a, b and R^2 (needs two distinct lengths)."""
    n = np.asarray(lengths, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if np.unique(n).size < 2:
        raise ValueError("the n log n fit needs at least two lengths with hitting times")
    X = np.column_stack([n * np.log(n), np.ones_like(n)])
    (a, b), *_ = np.linalg.lstsq(X, t, rcond=None)
    resid = t - X @ np.array([a, b])
    ss = ((t - t.mean()) ** 2).sum()
    return {"a": float(a), "b": float(b), "r2": float(1 - (resid**2).sum() / ss) if ss > 0 else 1.0}


def run(args: argparse.Namespace) -> int:
    for name in ("chains", "steps", "pairs", "coupling_steps", "record_every"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be positive")
    lengths = args.lengths or _default_lengths(args)
    base = dict(model=args.model, seed=args.seed, texts=None if args.texts is None else str(args.texts),
                device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                threads=args.threads, record_every=args.record_every, progress=False)
    chains_dir = args.out / "chains"
    hit_tasks = [dict(base, length=n, temperature=args.temperature, count=args.chains, steps=args.steps,
                      threshold=args.threshold, embedder=args.embedder,
                      record_path=str(chains_dir / f"hit_T{args.temperature:g}_n{n}_seed{args.seed}.jsonl"))
                 for n in lengths]
    cpl_tasks = [dict(base, length=n, temperature=T, count=args.pairs, steps=args.coupling_steps,
                      record_path=str(chains_dir / f"couple_T{T:g}_n{n}_seed{args.seed}.jsonl"))
                 for T in args.coupling_temperatures for n in lengths]
    sweep = dict(address=args.address, max_workers=args.workers, progress=not args.no_progress)
    hits = run_sweep(hitting_task, hit_tasks, args.out / "tasks", **sweep)
    cpls = run_sweep(coupling_task, cpl_tasks, args.out / "tasks", **sweep)

    hit_rows = []
    for n, res in zip(lengths, hits):
        tau = np.asarray(res["hitting_time"])
        ok = tau[tau != NOT_HIT]
        hit_rows.append({"length": n, "temperature": args.temperature, "chains": int(tau.size),
                         "hit_fraction": float(ok.size / tau.size), "mean_hitting_time": float(ok.mean()) if ok.size
                         else None, "median_hitting_time": float(np.median(ok)) if ok.size else None,
                         "sem": float(ok.std(ddof=1) / np.sqrt(ok.size)) if ok.size > 1 else None})
    fit_rows = [r for r in hit_rows if r["hit_fraction"] >= 0.5]
    fit = (fit_n_log_n(np.array([r["length"] for r in fit_rows]), np.array([r["mean_hitting_time"] for r in fit_rows]))
           if len({r["length"] for r in fit_rows}) >= 2 else None)
    cpl_rows = []
    for task, res in zip(cpl_tasks, cpls):
        tc = np.asarray(res["coupling_time"])
        met = tc != NOT_COUPLED
        median = float(np.median(np.where(met, tc, np.inf)))
        cpl_rows.append({"temperature": task["temperature"], "length": task["length"], "pairs": int(tc.size),
                         "coupled_fraction": float(met.mean()), "median_coupling_time": None if np.isinf(median)
                         else median, "budget": task["steps"], "coupled_within_budget": bool(np.isfinite(median))})
    settings = {k: v for k, v in vars(args).items() if k not in {"out", "no_progress"}}
    settings["lengths"] = lengths
    write_csv(args.out / "hitting.csv", hit_rows)
    write_csv(args.out / "coupling.csv", cpl_rows)
    write_json(args.out / "mixing_crossover.json",
               {"settings": settings, "hitting": hit_rows, "fit_n_log_n": fit,
                "fit_note": "least squares on lengths where at least half the chains hit", "coupling": cpl_rows})
    _figure(hit_rows, fit, cpl_rows, args.coupling_temperatures, lengths, args.out / "mixing_crossover.png")
    for r in hit_rows:
        mean = "-" if r["mean_hitting_time"] is None else f"{r['mean_hitting_time']:.1f}"
        print(f"n = {r['length']:>3}: mean hitting time {mean} ({r['hit_fraction']:.0%} hit)")
    if fit is not None:
        print(f"fit tau = {fit['a']:.3f} n log n + {fit['b']:.2f} (R^2 = {fit['r2']:.3f})")
    return 0


def _default_lengths(args: argparse.Namespace) -> list[int]:
    longest = load_model(args.model, None, args).space.length
    return sorted({int(round(v)) for v in np.linspace(2, longest, 5)})


def _figure(hit_rows, fit, cpl_rows, temps, lengths, path: Path) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    pts = [r for r in hit_rows if r["mean_hitting_time"] is not None]
    ax1.errorbar([r["length"] for r in pts], [r["mean_hitting_time"] for r in pts],
                 yerr=[r["sem"] or 0.0 for r in pts], fmt="o", label="mean hitting time")
    if fit is not None:
        grid = np.linspace(min(lengths), max(lengths), 100)
        ax1.plot(grid, fit["a"] * grid * np.log(grid) + fit["b"], "--",
                 label=f"{fit['a']:.2f} $n \\log n$ + {fit['b']:.1f} ($R^2$ {fit['r2']:.2f})")
    ax1.set_xlabel("sequence length $n$")
    ax1.set_ylabel("steps to embedding distance threshold")
    legend(ax1)
    grid = np.full((len(temps), len(lengths)), np.nan)
    for r in cpl_rows:
        if r["median_coupling_time"] is not None:
            grid[temps.index(r["temperature"]), lengths.index(r["length"])] = r["median_coupling_time"]
    im = ax2.imshow(np.log10(np.maximum(grid, 1)), origin="lower", aspect="auto", cmap="viridis")
    for r in cpl_rows:
        if not r["coupled_within_budget"]:
            ax2.text(lengths.index(r["length"]), temps.index(r["temperature"]), "×", ha="center", va="center",
                     color="red", fontsize=14)
    ax2.set_xticks(range(len(lengths)), lengths)
    ax2.set_yticks(range(len(temps)), [f"{t:g}" for t in temps])
    ax2.set_xlabel("sequence length $n$")
    ax2.set_ylabel("temperature $T$")
    ax2.set_title("median coupling time (× : not within budget)", fontsize=9)
    fig.colorbar(im, ax=ax2, label=r"$\log_{10}$ steps")
    save_figure(fig, path)

