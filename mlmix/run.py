"""``mlmix run NAME --out DIR``: the papers' reproductions and experiments, each writing its data
(JSON, CSV) and figure (PNG) into DIR.

    mlmix run --list
    mlmix run pl-variance --out runs/pl --reps 3
    mlmix run rectangle-table --out runs/rect --model ./my-model

Every run writes only into ``--out`` (never into the installed package or the repository's docs).
The folder is locked while the run writes (a second run on it is refused at once) and keeps a
manifest of the run's parameters: rerunning with the same parameters resumes an interrupted run
(finished parts are kept), rerunning with other parameters is refused unless ``--overwrite``, so
results of different settings are never mixed. Options such as ``--debug`` and ``--max-memory`` go
before NAME.

Each runnable module exposes ``configure(parser)`` (its options, including ``--out``) and
``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from mlmix.files import OutputDir

#: name -> (module, what it reproduces)
RUNNABLES = {
    "pl-variance": ("mlmix.verify.reproductions.pl_variance", "paper P 3.1 / L.6: k-PL parameter error against k"),
    "ising-modes": ("mlmix.verify.reproductions.ising_modes",
                    "paper P L.7: k-Gibbs vs the parallel sampler on eq. (5)"),
    "tightness": ("mlmix.verify.tightness", "how loose Theorems 5 and 8 and Lemma 6 of paper G are on toy chains"),
    "rectangle-table": ("mlmix.empirical.experiments.rectangle_table", "paper G section 4, Table 1: mean R per model"),
    "drift-certificate": ("mlmix.empirical.experiments.drift_certificate", "paper G 5.4: drift of a token count"),
    "mixing-crossover": ("mlmix.empirical.experiments.mixing_crossover",
                         "paper G 6.1: hitting times vs n and the coupling-time map"),
    "traps": ("mlmix.empirical.experiments.traps", "paper G A.1: trap states, their margins and Theorem 8"),
    "diagnostics": ("mlmix.empirical.experiments.diagnostics", "R-hat, ESS and a coupling bound vs the exact d(t) and ESS"),
    "train-default": ("mlmix.empirical.train_default", "retrain the shipped default model (into --out)"),
}

#: Options that do not change a run's results (left out of the parameter manifest).
_NOT_PARAMETERS = {"out", "overwrite", "no_progress", "threads", "workers", "address"}


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``mlmix run``: the name, then that run's own options."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "runs:\n" + "\n".join(f"  {name:<18} {text}" for name, (_, text) in RUNNABLES.items())
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    parser.add_argument("name", nargs="?", metavar="NAME", help="the run (see --list)")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the run's own options (mlmix run NAME --help)")


def run(args: argparse.Namespace) -> int:
    if args.list or args.name is None:
        width = max(map(len, RUNNABLES))
        print("\n".join(f"{name:<{width}}  {text}" for name, (_, text) in RUNNABLES.items()))
        return 0
    if args.name not in RUNNABLES:
        raise ValueError(f"unknown run {args.name!r}; the runs are: {', '.join(RUNNABLES)}")
    module = importlib.import_module(RUNNABLES[args.name][0])
    from mlmix.cli import OneLineParser

    parser = OneLineParser(prog=f"mlmix run {args.name}", description=RUNNABLES[args.name][1])
    module.configure(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the results of an earlier run with other parameters in --out")
    options = parser.parse_args(args.options)
    params: dict[str, Any] = {k: v for k, v in vars(options).items() if k not in _NOT_PARAMETERS}
    with OutputDir(options.out, f"run {args.name}", params, overwrite=options.overwrite) as out:
        if out.resumed:
            print(f"mlmix run {args.name}: resuming in {options.out} (same parameters)")
        return int(module.run(options) or 0)
