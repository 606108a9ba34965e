"""``mlmix run samplers``: every sampler of docs/samplers.md on one frame, exactly.

For a source of partial conditionals (a masked LM over a frame with ``--mlm``, a score file, a random
toy table or a joint law) it computes the law of each sampler on V^n:

* chains (stationary laws, :class:`~mlmix.theory.chain.markov_chain.Chain`): random-scan Glauber, systematic scan
  (one sweep in ``--order``; its kernel is dense, so up to
  :data:`~mlmix.theory.kernels.scan_and_mh.SYSTEMATIC_LIMIT` states), MH with the logit and the PLL energies
  (with their acceptance and move rates at stationarity); each with its absolute spectral gap and the
  gap of its additive reversibilization (P + P*)/2 (1 / the Poincaré constant: what is resolved for a
  large non-reversible chain);
* decoders (exact laws by dynamic programming, :mod:`mlmix.theory.kernels.decoders`): any-order,
  left-to-right, parallel and confidence with ``--k`` per step, one fully parallel step, and the
  threshold rule with ``--threshold`` (default 0.9); each with its number of steps (expected, for the
  threshold rule);
* the joint law when the source has one;

and writes ``samplers.json`` (every figure with its method and accuracy, the laws, TV and KL between
every pair), ``samplers.csv`` (one row per sampler: gap or steps, acceptance, TV to every other law)
and ``samplers.png`` (the TV matrix).
"""

from __future__ import annotations

import argparse
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from mlmix.commands.source_options import (
    add_partial_source_arguments,
    build_partial_source,
    validate_partial_source_arguments,
)
from mlmix.errors import MemoryLimitError, ReducibleChainError, UnderflowError
from mlmix.files import atomic_write_csv, atomic_write_json, jsonable
from mlmix.limits import SYSTEMATIC_LIMIT
from mlmix.plot_style import save, subplots, symbols
from mlmix.progress import Progress, dense_seconds, seconds_for
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.decoders import PartialScoreTable, decoder_law, partial_log_probs, tv_kl
from mlmix.theory.kernels.scan_and_mh import Truncated, check_order, mh_acceptance
from mlmix.theory.results import Result
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.validation import check_int, check_real

#: One line for ``mlmix run --list``.
DESCRIPTION = "exact laws of scan, MH and decoding samplers on one frame, TV/KL between them"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--k", type=int, default=2, help="positions per step of parallel / confidence (default 2)")
    parser.add_argument("--order", default=None, help='order of systematic scan and left-to-right (default 0..n-1)')
    parser.add_argument("--threshold", type=float, default=0.9, help="tau of the threshold decoder (default 0.9)")
    add_partial_source_arguments(parser)


def sampler_laws(table: PartialScoreTable, joint: Conditionals | None = None, *, k: int = 2, order=None,
                 top_k: int | None = None, top_p: float | None = None, threshold: float = 0.9) -> dict[str, dict]:
    """name -> {"law" (or None), "rel_error", "kind", figures...} for every sampler (module doc)."""
    n = table.space.length
    k = check_int(k, "k", minimum=1, maximum=n)
    order = check_order(table.space, order)
    full = table.full_table()
    if top_k is not None or top_p is not None:
        full = Truncated(full, top_k, top_p)
    out: dict[str, dict] = {}
    with _announce(table.space, k, threshold) as bar:
        for name in CHAINS:
            with bar.phase(name):
                out[name] = _chain_entry(full, name, order)
        lp = partial_log_probs(table, top_k, top_p)
        for name, sampler, kk in _decoders(n, k, threshold):
            with bar.phase(name):
                d = decoder_law(table, sampler, k=kk, order=order, log_probs=lp, threshold=threshold)
            out[name] = {"kind": "decoder", "law": d.law, "rel_error": d.rel_error, "steps": d.steps,
                         "method": d.method}
    if joint is not None:
        lw = joint.log_joint()
        p = np.exp(lw - lw.max())
        out["joint"] = {"kind": "joint", "law": p / p.sum(), "rel_error": 4 * 2.0**-53 * (2 + float(np.ptp(lw)))
                        + lw.size * 2.0**-53}
    return out


#: The chains of :func:`sampler_laws`, in the order they are computed and reported.
CHAINS = ("glauber", "systematic", "mh-logit", "mh-pll")


def _decoders(n: int, k: int, threshold: float) -> list[tuple[str, str, int]]:
    """(report name, decoder, positions per step) of every decoder of :func:`sampler_laws`."""
    return [("any-order", "any-order", 1), ("left-to-right", "left-to-right", 1), (f"parallel-{k}", "parallel", k),
            (f"confidence-{k}", "confidence", k), ("fully-parallel", "parallel", n),
            (f"threshold-{threshold:g}", "threshold", 1)]


def _announce(space, k: int, threshold: float) -> Progress:
    """One phase per sampler, for :func:`mlmix.progress.Progress`: a chain about 20 N^3 operations
    densely (stationary law, its gaps; 3 N^3 for the systematic sweep's product), a decoder's dynamic
    programme about 50 N 2^n (a mask pattern per subset of positions); announced with a line per
    sampler when the sum reaches the threshold, or once it has run that long."""
    N, n = space.size, space.length
    chain = dense_seconds(N, 20.0) if N <= SYSTEMATIC_LIMIT else seconds_for(2000.0 * N * n * space.vocab_size)
    phases = [(name, chain) for name in CHAINS] + \
        [(name, seconds_for(50.0 * N * 2.0**n)) for name, _, _ in _decoders(n, k, threshold)]
    return Progress(f"the samplers' exact laws on {N:,} states", phases, cost=f"{len(phases)} samplers")


def _chain_entry(full: Conditionals, name: str, order) -> dict:
    """The stationary law of one chain of :func:`sampler_laws` with its gaps (and MH's acceptance), or
    the reason it was not computed."""
    entry: dict = {"kind": "chain"}
    if name == "systematic" and full.space.size > SYSTEMATIC_LIMIT:
        return {**entry, "law": None, "rel_error": math.inf,
                "reason": f"the sweep kernel is dense: computed up to {SYSTEMATIC_LIMIT} states, "
                          f"this frame has {full.space.size}"}
    try:
        chain = Chain.from_source(full, name, order=order)
        st = chain.stationary
        entry.update(law=np.asarray(st.value), rel_error=st.rel_error if st.rel_error is not None else math.inf,
                     stationary_method=st.method, absolute_spectral_gap=chain.absolute_spectral_gap,
                     additive_gap=chain.additive_gap)
        if name.startswith("mh-"):
            entry.update(mh_acceptance(full, name[3:]))
    except (ReducibleChainError, UnderflowError, MemoryLimitError) as err:
        entry.update(law=None, rel_error=math.inf, reason=str(err))
    return entry


def pairwise(laws: dict[str, dict]) -> dict[str, dict[str, dict[str, Result]]]:
    """TV(a, b) and KL(b || a) for every ordered pair of computed laws (row a, column b)."""
    names = [k for k, v in laws.items() if v["law"] is not None]
    return {a: {b: tv_kl(laws[a]["law"], laws[a]["rel_error"], laws[b]["law"], laws[b]["rel_error"], b)
                for b in names if b != a} for a in names}


def run(args: argparse.Namespace) -> int:
    check_int(args.k, "--k", minimum=1)
    validate_partial_source_arguments(args)
    table, description, joint = build_partial_source(args)
    check_real(args.threshold, "--threshold", minimum=0.0, maximum=1.0, open_min=True)
    laws = sampler_laws(table, joint, k=min(args.k, table.space.length), order=args.order, top_k=args.top_k,
                        top_p=args.top_p, threshold=args.threshold)
    dist = pairwise(laws)
    out = Path(args.out)
    report = {"source": description, "states": table.space.size, "k": args.k, "order": args.order,
              "top_k": args.top_k, "top_p": args.top_p,
              "samplers": {name: {key: v for key, v in e.items()} for name, e in laws.items()},
              "distances": dist}
    atomic_write_json(out / "samplers.json", jsonable(report))
    names = list(laws)
    rows = []
    for a in names:
        e = laws[a]
        gap = e.get("absolute_spectral_gap")
        acc = e.get("acceptance_rate")
        add = e.get("additive_gap")
        rows.append([a, e["kind"], _num(gap) if gap is not None else "", _num(add) if add is not None else "",
                     e.get("steps", ""),
                     _num(acc) if acc is not None else "", e.get("reason", "")]
                    + [_num(dist[a][b]["tv"]) if a in dist and b in dist[a] else "" for b in names])
    atomic_write_csv(out / "samplers.csv", ["sampler", "kind", "absolute_spectral_gap", "additive_gap", "steps",
                                            "acceptance",
                                            "not_computed"] + [f"tv_to_{b}" for b in names], rows)
    save(heatmap(names, laws, dist, f"{description}: {table.space.vocab_size}^{table.space.length} states"),
         out / "samplers.png")
    print(format_table(description, names, laws, dist))
    return 0


def heatmap(names: list[str], laws: dict, dist: dict, title: str) -> Any:
    """TV between the exact laws of the samplers (row a, column b; the upper end where a distance is
    only enclosed). A sampler whose law was not computed has no row or column: it is named under the
    heat map with the reason (no blank cross)."""
    shown = [a for a in names if laws[a]["law"] is not None]
    M = np.full((len(shown), len(shown)), np.nan)
    for i, a in enumerate(shown):
        for j, b in enumerate(shown):
            if a == b:
                M[i, j] = 0.0
            elif a in dist and b in dist[a]:
                r = dist[a][b]["tv"]
                M[i, j] = r.value if r.value is not None else (r.upper if r.upper is not None else np.nan)
    fig, ax = subplots(figsize=(2.0 + 0.6 * len(shown), 1.4 + 0.6 * len(shown)))
    im = ax.imshow(M, vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(shown)), shown, rotation=60, ha="right")
    ax.set_yticks(range(len(shown)), shown)
    for i in range(len(shown)):
        for j in range(len(shown)):
            if np.isfinite(M[i, j]):
                ax.text(j, i, f"{M[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if M[i, j] < 0.5 else "black")
    ax.set_xlabel("sampler $b$")
    ax.set_ylabel("sampler $a$")
    fig.colorbar(im, ax=ax, label="total variation TV($a$, $b$) of the exact laws")
    ax.set_title(textwrap.fill(symbols(f"exact laws of the samplers, {title}"), 70))
    missing = [f"{a}: not computed ({laws[a].get('reason', 'no law')})" for a in names if laws[a]["law"] is None]
    if missing:
        fig.text(0.01, 0.0, textwrap.fill("; ".join(missing), 110), fontsize=7, va="top", ha="left")
    return fig


def _num(r: Result) -> str:
    """A figure of the table (:meth:`Result.__format__`): the value, its interval, or '-'."""
    return format(r, ".6g/.3g|-")


def format_table(description: str, names: list[str], laws: dict, dist: dict) -> str:
    """The text table of the run: gap / steps / acceptance and TV to Glauber, any-order and the joint."""
    refs = [r for r in ("glauber", "any-order", "mh-pll", "joint") if r in dist]
    head = f"  {'sampler':<16}{'abs. gap':>12}{'add. gap':>12}{'steps':>7}{'accept':>10}" + \
        "".join(f"{'TV ' + r:>16}" for r in refs)
    lines = [description, "", head]
    for a in names:
        e = laws[a]
        gap = _num(e["absolute_spectral_gap"]) if "absolute_spectral_gap" in e else ""
        add = _num(e["additive_gap"]) if "additive_gap" in e else ""
        acc = _num(e["acceptance_rate"]) if "acceptance_rate" in e else ""
        tvs = "".join(f"{(_num(dist[a][r]['tv']) if a in dist and r in dist[a] else '-'):>16}" for r in refs)
        steps = f"{e['steps']:.4g}" if "steps" in e else ""
        lines.append(f"  {a:<16}{gap:>12}{add:>12}{steps:>7}{acc:>10}{tvs}")
    notes = [f"  {a}: {e['reason']}" for a, e in laws.items() if e.get("reason")]
    return "\n".join(lines + ([""] + notes if notes else []))
