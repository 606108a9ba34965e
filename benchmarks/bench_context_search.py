"""Searched lower bounds of rho_ij against the exact suprema, on AntiBERTy (docs/real-model.md,
"Searched lower bounds").

For each frame and n, the exact table (``mlmix.empirical.models.tabulate``: n 20^(n-1) masked passes, read
from ~/.cache/mlmix/tables when cached) gives the exact rho_ij, rho, alpha and Delta; then
:func:`mlmix.empirical.model_constants.context_search.search_worst_contexts` runs on that table with several
``--starts``. A row of the table is exactly the conditional a masked forward pass returns, so the
passes the search counts are the passes it would make on the model (the search asks rows, the
table answers them without the model). Also printed: the "maximum over random contexts" of
``mlmix estimate`` at the same number of passes (uniform contexts, every replacement: n + n(n-1)19
rows per context). Frames (left context, n free positions, right context):

* L:  ``E V Q L V E S G G G _ ... _`` (framework 1's first ten residues, then the gap);
* LR: the same with the six germline residues after the gap on the right (n = 3: ``P G G S L R``,
  n = 4: ``G G S L R L``);
* C:  ``E V Q L V E S G G G L V Q P G G S L R L S C A A S _ ... _`` (the gap where CDR1 starts).

With ``--landscape``, the exact table is also read as the search's landscape, per pair (i, j) at
n = 4 or more (f(z) = max over (a, b) of TV at the free sites z): how many z are within 1% of the
supremum, how many are local maxima (no single free site re-chosen is better), and from which share
of the starts z a steepest ascent ends within 1%, moving on f itself (a neighbour's whole column at j)
and moving as the search does (a neighbour's value with the pair (a, b) of the current z, the rows
the two stars evaluate; then (a, b) re-chosen at the new z).

With ``--checkpoint``, a frame whose table is not cached yet is measured on the sites its
interrupted (or running) tabulation has completed (rows r = i 20^(n-1) + c are computed site by site):
only the pairs (i, j) with site i complete are searched and compared, and rho and T* (column sums
over all sites) are left out.

    OMP_NUM_THREADS=1 python benchmarks/bench_context_search.py --lengths 3 --frames L LR C --starts 1 2 4 8
    OMP_NUM_THREADS=1 python benchmarks/bench_context_search.py --lengths 4 --frames L --starts 1 2 4 8 --checkpoint
    OMP_NUM_THREADS=1 python benchmarks/bench_context_search.py --lengths 4 --frames L LR --starts 1 --budgets 0.1 0.2 0.4 --landscape
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mlmix.empirical.model_constants.context_search import search_worst_contexts
from mlmix.empirical.models.mlm import MaskedLMConditionals, load_pretrained
from mlmix.empirical.models.tabulate import cache_root, table_key, tabulate
from mlmix.theory.local.influence import (
    aggregate_influence,
    contraction_temperature,
    influence_and_oscillation,
    pair_distances,
)
from mlmix.theory.sources.conditionals import ScoreTable

AA = "A C D E F G H I K L M N P Q R S T V W Y"
LEFT = "E V Q L V E S G G G"
RIGHT = {2: "Q P G G S L", 3: "P G G S L R", 4: "G G S L R L"}
CDR1 = "E V Q L V E S G G G L V Q P G G S L R L S C A A S"


def frame(name: str, n: int) -> dict:
    """prefix/suffix keyword arguments of a frame."""
    return {"L": {"prefix": LEFT}, "LR": {"prefix": LEFT, "suffix": RIGHT[n]}, "C": {"prefix": CDR1}}[name]


def antiberty():
    """(model, tokenizer) of the converted AntiBERTy: the tests' copy, else fetched and converted once."""
    from mlmix.empirical.models.antiberty import VERSION

    root = Path.home() / ".cache" / "mlmix" / f"antiberty-{VERSION}-converted"
    for dest in (root / "model", root):
        if (dest / "config.json").is_file():
            return load_pretrained(MaskedLMConditionals.auto_class, dest)
    from bench_tabulate import antiberty as fetch_and_convert  # this folder: the script's own directory

    return fetch_and_convert()[:2]


def checkpointed(source: MaskedLMConditionals) -> tuple[ScoreTable, int] | None:
    """(table with the completed sites filled, zeros elsewhere; number of completed sites) from the
    checkpoint chunks of the source's tabulation, or None when there is no complete site."""
    space = source.space
    contexts = space.vocab_size ** (space.length - 1)
    chunks = sorted((cache_root() / f"{table_key(source)[0]}.partial").glob("chunk-*.npz"))
    rows = np.concatenate([np.load(c)["scores"] for c in chunks]) if chunks else np.zeros((0, space.vocab_size))
    sites = rows.shape[0] // contexts
    if sites == 0:
        return None
    table = np.zeros((space.length, contexts, space.vocab_size))
    table[:sites] = rows[:sites * contexts].reshape(sites, contexts, -1)
    return ScoreTable(space, table, source.temperature), sites


def exact_rows(table: ScoreTable, sites: int) -> np.ndarray:
    """rho_ij for i < ``sites`` by enumeration of site i's contexts (pairs differing at j, every j)."""
    n, q = table.space.length, table.space.vocab_size
    rho = np.zeros((n, n))
    for i in range(sites):
        scores = table.table[i].reshape((q,) * n)  # the other sites in order, then the symbol
        for axis, j in enumerate(k for k in range(n) if k != i):
            column = np.moveaxis(scores, axis, 0)
            for u in range(q):
                rho[i, j] = max(rho[i, j], float(pair_distances(column, column[u], table.temperature)[0].max()))
    return rho


def _step(score: np.ndarray, z: tuple[int, ...]) -> tuple[int, ...]:
    """One steepest-ascent step on the grid of free sites: the best neighbour of z (one free site
    re-chosen) when it beats z, else z."""
    best, where = score[z], z
    for axis in range(score.ndim):
        line = score[z[:axis] + (slice(None),) + z[axis + 1:]]
        w = int(np.argmax(line))
        if line[w] > best:
            best, where = line[w], z[:axis] + (w,) + z[axis + 1:]
    return where


def landscape(table: ScoreTable, sites: int) -> None:
    """Per pair (i, j): the free-site landscape f(z) = max_{a,b} TV (module docstring, ``--landscape``)."""
    n, q = table.space.length, table.space.vocab_size
    for i in range(sites):
        scores = table.table[i].reshape((q,) * n)
        for axis, j in enumerate(k for k in range(n) if k != i):
            column = np.moveaxis(scores, axis, 0)  # (a, free sites..., symbol)
            tv = np.stack([pair_distances(column[a][None], column, table.temperature)[0] for a in range(q)])
            tv = np.moveaxis(tv, (0, 1), (-2, -1))  # (free sites..., a, b)
            f = tv.max(axis=(-2, -1))
            top = float(f.max())
            grid = f.shape
            peaks = sum(all(f[z] >= f[tuple(slice(None) if k == ax else z[k] for k in range(f.ndim))].max()
                            for ax in range(f.ndim)) for z in np.ndindex(grid))
            whole = star = 0
            for z in np.ndindex(grid):
                at = z
                while (nxt := _step(f, at)) != at:
                    at = nxt
                whole += f[at] >= 0.99 * top
                at = z
                while True:  # the stars' climb: neighbours scored with the current pair (a, b)
                    a, b = np.unravel_index(int(tv[at].argmax()), (q, q))
                    nxt = _step(tv[..., a, b], at)
                    if nxt == at:
                        break
                    at = nxt
                star += f[at] >= 0.99 * top
            print(f"  ({i}, {j}): sup {top:.4f}; {int((f >= 0.99 * top).sum())} of {f.size} free contexts within 1%, "
                  f"{peaks} local maxima; ascents ending within 1%: {whole / f.size:.0%} on f, "
                  f"{star / f.size:.0%} as the stars climb", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--frames", nargs="+", default=["L", "LR", "C"], choices=["L", "LR", "C"])
    parser.add_argument("--starts", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--budgets", type=float, nargs="*", default=[0.1],
                        help="also run with max_passes = this fraction of the enumeration's n 20^(n-1) passes")
    parser.add_argument("--seeds", type=int, default=3, help="search seeds per setting (ranges over them reported)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--landscape", action="store_true",
                        help="also print each pair's landscape over the free sites (module docstring)")
    parser.add_argument("--checkpoint", action="store_true",
                        help="measure an uncached table's completed sites (from its tabulation checkpoints)")
    args = parser.parse_args(argv)
    model, tok = antiberty()
    print("| frame | n | starts | max_passes | passes (median) | enumeration / passes | rho search / exact | alpha search / exact "
          "| T* search / exact | entries within 1% | worst entry | random contexts, same passes: alpha |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.lengths:
        for name in args.frames:
            source = MaskedLMConditionals(model, tok, n, candidates=AA, device="cpu", dtype="float32",
                                          temperature=args.temperature, **frame(name, n))
            found = checkpointed(source) if args.checkpoint else None
            if args.checkpoint and found is not None and found[1] < n:
                table, sites = found
                rho_exact, agg, t_star = exact_rows(table, sites), None, None
            else:
                table, sites = tabulate(source, progress=False).at_temperature(args.temperature), n
                exact, osc = influence_and_oscillation(table, max_states=table.space.size)
                rho_exact, agg, t_star = exact.rho_ij, aggregate_influence(exact.rho_ij), contraction_temperature(osc.delta_ij)
            if args.landscape and n >= 4:
                print(f"landscape of frame {name}, n = {n}:")
                landscape(table, sites)
            pairs = [(i, j) for i in range(sites) for j in range(n) if j != i]
            enumeration = sites * 20 ** (n - 1)
            per_context = sites * (1 + (n - 1) * 19)  # rows per uniform context (estimate protocol)
            positive = rho_exact > 0
            alpha = float(rho_exact.sum(axis=1).max())
            settings = [(starts, None) for starts in args.starts]
            settings += [(starts, int(f * enumeration)) for f in args.budgets for starts in args.starts]
            for starts, budget in settings:
                runs = [search_worst_contexts(table, starts=starts, seed=seed, max_passes=budget, pairs=pairs)
                        for seed in range(args.seeds)]
                passes = int(np.median([r.passes for r in runs]))
                ratios = [r.rho_lower[positive] / rho_exact[positive] for r in runs]
                within = [int((x >= 0.99).sum()) for x in ratios]
                worst = min(float(x.min()) for x in ratios)
                sampled = []
                for seed in range(args.seeds):
                    rng = np.random.default_rng(seed)
                    ctx = rng.integers(0, 20, size=(max(1, passes // per_context), n))
                    sampled.append(float(influence_and_oscillation(table, ctx)[0].rho_ij[:sites].sum(axis=1).max()))

                def span(values):
                    return f"{min(values):.4f}-{max(values):.4f}" if max(values) > min(values) else f"{values[0]:.4f}"
                rho_text = "-" if agg is None else f"{span([r.rho for r in runs])} / {agg.rho:.4f}"
                t_text = "-" if t_star is None else f"{span([r.contraction_temperature for r in runs])} / {t_star:.3f}"
                alpha_runs = [float(r.rho_lower[:sites].sum(axis=1).max()) for r in runs]
                print(f"| {name}{'' if sites == n else f' (sites < {sites})'} | {n} | {starts} "
                      f"| {'-' if budget is None else f'{budget:,}'} | {passes:,} | {enumeration / passes:.1f}x "
                      f"| {rho_text} | {span(alpha_runs)} / {alpha:.4f} | {t_text} "
                      f"| {min(within)}-{max(within)} of {int(positive.sum())} | {worst:.3f} | {span(sampled)} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
