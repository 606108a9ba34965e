"""Paper G section 5.4: drift certificate of the basin {N >= k}, N(x) = number of copies of a token.

``--states`` states with exactly k copies of ``--token`` (paper: '!') at uniformly random
positions, the other positions from the start states (``--texts`` or random tokens) with any copy
of the token replaced; at each temperature the one-step drift

    D(x) = E[N(X_1) - N(x) | X_0 = x]
         = (1/n) sum_i ( 1[x_i != a] pi_i^T(a|x_{-i}) - 1[x_i = a] (1 - pi_i^T(a|x_{-i})) )

(:func:`mlmix.theory.local.margins.count_drift`). D > 0 on every sampled boundary state pushes the count inward.

    mlmix run drift-certificate --out runs/drift
    mlmix run drift-certificate --out runs/drift --model bert-base-uncased \\
        --texts msmarco.txt --length 20 --k 5 --temperatures 1.0 0.5

Writes drift.csv (every state and temperature), drift_certificate.json and drift_certificate.png.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mlmix.plot_style import legend, pyplot
from mlmix.runs.common import (
    add_common_arguments,
    decoder,
    load_model,
    save_figure,
    start_states,
    write_csv,
    write_json,
)
from mlmix.theory.local.margins import count_drift

#: One line for ``mlmix run --list``.
DESCRIPTION = "paper G 5.4: drift of a token count"

#: Paper G section 5.4 (its k and temperatures were lost in extraction): (min, median) per temperature.
PAPER = [{"min": 0.042, "median": 0.080}, {"min": 0.024, "median": 0.066}]


def configure(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--token", default="!", help="the counted token a (paper: '!')")
    parser.add_argument("--k", type=int, default=None, help="copies of the token per state (default: n // 2)")
    parser.add_argument("--states", type=int, default=200, help="sampled boundary states (paper: 200)")
    parser.add_argument("--temperatures", type=float, nargs=2, default=[1.0, 0.5], help="two temperatures")
    parser.add_argument("--length", type=int, default=None, help="content tokens n (default: up to 20 the model fits)")


def boundary_states(base: np.ndarray, symbol: int, k: int, vocab_size: int, rng: np.random.Generator) -> np.ndarray:
    """Copies of ``base`` (B, n) with exactly k sites set to ``symbol`` (uniform positions) and every
    other site different from it (a copy there is redrawn uniformly from the other symbols)."""
    x = np.array(base, dtype=np.int64, copy=True)
    B, n = x.shape
    if not 0 <= k <= n:
        raise ValueError(f"k must lie in [0, {n}], got {k}")
    other = rng.integers(0, vocab_size - 1, size=x.shape)
    x = np.where(x == symbol, other + (other >= symbol), x)
    pos = np.argsort(rng.random((B, n)), axis=1)[:, :k]
    np.put_along_axis(x, pos, symbol, axis=1)
    return x


def run(args: argparse.Namespace) -> int:
    source = load_model(args.model, args.length, args)
    n = source.space.length
    k = n // 2 if args.k is None else args.k
    symbol = int(source.encode([args.token])[0])
    rng = np.random.default_rng(args.seed)
    states = boundary_states(start_states(source, args.states, rng, args.texts), symbol, k, source.space.vocab_size,
                             rng)
    texts = decoder(source)(states)
    rows, summary = [], []
    for T, paper in zip(args.temperatures, PAPER):
        D = count_drift(source.at_temperature(T), states, [symbol])
        summary.append({"temperature": T, "min": float(D.min()), "median": float(np.median(D)),
                        "mean": float(D.mean()), "positive": int((D > 0).sum()), "states": int(D.size),
                        "all_positive": bool((D > 0).all()), "paper_min": paper["min"],
                        "paper_median": paper["median"]})
        rows += [{"temperature": T, "state": s.tolist(), "text": t, "drift": float(d)}
                 for s, t, d in zip(states, texts, D)]
    settings = {"model": args.model, "token": args.token, "k": k, "length": n, "states": args.states,
                "seed": args.seed, "texts": None if args.texts is None else str(args.texts)}
    write_csv(args.out / "drift.csv", rows)
    write_json(args.out / "drift_certificate.json", {"settings": settings, "summary": summary})
    _figure(rows, summary, args.out / "drift_certificate.png", settings)
    for s in summary:
        print(f"T = {s['temperature']:g}: min D {s['min']:.3f}, median {s['median']:.3f}, "
              f"{s['positive']}/{s['states']} positive")
    return 0


def _figure(rows: list[dict], summary: list[dict], path, settings: dict) -> None:
    """Histograms of D(x) per temperature on the same bins (widths comparable), settings in the title."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    edges = np.histogram_bin_edges([r["drift"] for r in rows], bins=30)
    for s in summary:
        d = [r["drift"] for r in rows if r["temperature"] == s["temperature"]]
        ax.hist(d, bins=edges, alpha=0.6, label=f"$T$ = {s['temperature']:g} (median {s['median']:.3f})")
    ax.set_title(f"drift of the count of '{settings['token']}' (paper G 5.4): {Path(settings['model']).name}, "
                 f"n = {settings['length']}, k = {settings['k']}, {settings['states']} states, seed {settings['seed']}",
                 fontsize=8)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_xlabel("one-step drift $D(x)$ of the token count")
    ax.set_ylabel("states")
    legend(ax)
    save_figure(fig, path)

