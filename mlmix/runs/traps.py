"""Paper G appendix A.1: trap states of long Glauber chains, their margins and Theorem 8.

``--chains`` chains run ``--steps`` steps at ``--temperature`` (records every ``--record-every``
steps to OUT/chains.jsonl, so a killed run resumes). A trap is a stretch where the rolling
``--window``-step mean cosine drift of the embedding stays below ``--threshold`` (paper: 0.12 over
300 steps; :func:`mlmix.empirical.sampling.trap_states.detect_traps`). For each trapped state: per-site score gaps,
the all-argmax flag (a "perfect" trap satisfies Assumption 1), min and mean gap, the exact one-step
exit probability, and Theorem 8's lower bound e^{gamma/T} / (|V| - 1) on the expected stay next to
the observed duration (:func:`mlmix.empirical.sampling.trap_states.trap_table`).

    mlmix run traps --out runs/traps
    mlmix run traps --out runs/traps --model bert-base-uncased --texts msmarco.txt \\
        --length 15 --temperature 0.5 --steps 10000

Writes traps.csv, traps.json and traps.png.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mlmix.empirical.sampling.drift import embed_records
from mlmix.empirical.sampling.simulation import run_chains
from mlmix.empirical.sampling.trap_states import (
    DEFAULT_THRESHOLD,
    DEFAULT_WINDOW,
    detect_traps,
    trap_table,
    window_drift,
)
from mlmix.plot_style import legend, pyplot
from mlmix.runs.common import (
    add_common_arguments,
    add_embedder_argument,
    decoder,
    load_model,
    make_embedder,
    save_figure,
    start_states,
    write_csv,
    write_json,
)

#: One line for ``mlmix run --list``.
DESCRIPTION = "paper G A.1: trap states, their margins and Theorem 8"

#: Paper G appendix A.1 (bert-base-uncased, 30 chains of 10,000 steps).
PAPER = {"traps": 17, "perfect": 4, "approximate": 13, "mean_duration": 671, "min_duration": 150,
         "max_duration": 4950, "vocab_size": 30522}


def configure(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--chains", type=int, default=30, help="chains (paper: 30)")
    parser.add_argument("--steps", type=int, default=10_000, help="steps per chain (paper: 10,000)")
    parser.add_argument("--temperature", type=float, default=0.5, help="temperature of the chains")
    parser.add_argument("--length", type=int, default=None, help="content tokens n (default: up to 15 the model fits)")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="rolling window in steps (paper: 300)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="mean drift threshold (paper: 0.12)")
    parser.add_argument("--record-every", type=int, default=10, help="record every k steps")
    add_embedder_argument(parser)


def run(args: argparse.Namespace) -> int:
    if args.chains < 1 or args.steps < 1 or args.record_every < 1:
        raise ValueError("--chains, --steps and --record-every must be positive")
    source = load_model(args.model, args.length, args, temperature=args.temperature, max_length=15)
    decode = decoder(source)
    rng = np.random.default_rng(args.seed)
    x0 = start_states(source, args.chains, rng, args.texts)
    tr = run_chains(source, x0, args.steps, seeds=args.seed * 100_003 + np.arange(args.chains),
                    record_every=args.record_every, path=args.out / "chains.jsonl", decode=decode,
                    progress=not args.no_progress)
    emb = embed_records(make_embedder(args.embedder, source), tr.states)
    traps = [t for b in range(args.chains)
             for t in detect_traps(tr.steps, tr.states[:, b], emb[:, b], args.window, args.threshold, chain=b)]
    rows = trap_table(source, traps)
    texts = decode(np.array([r["state"] for r in rows])) if rows else []
    for row, text in zip(rows, texts):
        row["text"] = text
    durations = np.array([r["duration"] for r in rows], dtype=float)
    perfect = sum(r["all_argmax"] for r in rows)
    summary = {"traps": len(rows), "perfect": perfect, "approximate": len(rows) - perfect,
               "mean_duration": float(durations.mean()) if rows else None,
               "min_duration": float(durations.min()) if rows else None,
               "max_duration": float(durations.max()) if rows else None,
               "vocab_size": source.space.vocab_size, "length": source.space.length,
               "bound_exceeds_one_step": sum(r["predicted_stay"] is not None and r["predicted_stay"] > 1 for r in rows)}
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "no_progress"}
    write_csv(args.out / "traps.csv", rows)
    write_json(args.out / "traps.json", {"settings": settings, "summary": summary, "paper": PAPER, "traps": rows})
    _figure(tr.steps, emb, args.window, args.threshold, traps, rows, args.out / "traps.png")
    print(f"{summary['traps']} traps ({perfect} perfect) in {args.chains} chains of {args.steps} steps; "
          f"mean duration {summary['mean_duration']}; paper: {PAPER['traps']} ({PAPER['perfect']} perfect), "
          f"mean {PAPER['mean_duration']}")
    return 0


def _figure(steps, emb, window, threshold, traps, rows, path: Path) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    shown = sorted({t.chain for t in traps})[:3] or list(range(min(3, emb.shape[1])))
    for b in shown:
        line, = ax1.plot(steps, window_drift(steps, emb[:, b], window), lw=0.8, label=f"chain {b}")
        for t in traps:
            if t.chain == b:
                ax1.axvspan(t.start, t.end, color=line.get_color(), alpha=0.15)
    ax1.axhline(threshold, color="black", lw=0.8, ls="--", label=f"threshold {threshold:g}")
    ax1.set_xlabel("step")
    ax1.set_ylabel(f"mean drift over the next {window} steps")
    ax1.set_title("window drift (shaded: detected traps)", fontsize=9)
    legend(ax1)
    if rows:
        dur = np.array([r["duration"] for r in rows], dtype=float)
        exact = np.array([r["expected_stay"] for r in rows], dtype=float)
        ax2.scatter(dur, exact, marker="o", label="exact expected stay $1/P(x, x^c)$")
        pred = [(d, r["predicted_stay"]) for d, r in zip(dur, rows) if r["predicted_stay"] is not None]
        if pred:
            ax2.scatter(*zip(*pred), marker="x", color="red", label=r"Thm 8: $e^{\gamma/T}/(|V|-1)$ (perfect traps)")
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        lo, hi = ax2.get_xlim()
        ax2.plot([lo, hi], [lo, hi], color="gray", lw=0.8)
        legend(ax2)
    ax2.set_xlabel("observed trap duration (steps)")
    ax2.set_ylabel("steps")
    save_figure(fig, path)

