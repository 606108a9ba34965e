"""``mlmix run NAME --out DIR``: the papers' reproductions and experiments, each writing its data
(JSON, CSV) and figure (PNG) into DIR.

    mlmix run --list
    mlmix run pl-variance --out runs/pl --reps 3
    mlmix run rectangle-table --out runs/rect --model ./my-model

Every run writes only into ``--out`` (never into the installed package or the repository's docs).
The folder is locked while the run writes (a second run on it is refused at once) and keeps a
manifest of the run's parameters: rerunning with the same parameters resumes an interrupted run
(finished parts are kept), rerunning with other parameters is refused unless ``--overwrite``, so
results of different settings are never mixed. A folder holding a symbolic link is refused
(mlmix never writes one, and writing through it could reach a file outside). The global options
``--debug`` and ``--max-memory`` go anywhere on the line.

Each runnable module exposes ``configure(parser)`` (its options, including ``--out``) and
``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
from typing import Any

from mlmix.commands.options import OneLineParser
from mlmix.files import OutputDir

#: Where the runs live, found without importing them (each is imported when it runs).
_RUNS_PATH = importlib.util.find_spec("mlmix.runs").submodule_search_locations


def runnables() -> dict[str, str]:
    """name -> module of every run in :mod:`mlmix.runs` (each module but ``common``, name with dashes)."""
    return {m.name.replace("_", "-"): f"mlmix.runs.{m.name}" for m in pkgutil.iter_modules(_RUNS_PATH)
            if m.name != "common" and not m.name.startswith("_")}


def _descriptions() -> dict[str, str]:
    return {name: importlib.import_module(module).DESCRIPTION for name, module in runnables().items()}


#: Options that do not change a run's results (left out of the parameter manifest).
_NOT_PARAMETERS = {"out", "overwrite", "no_progress", "threads", "workers", "address"}


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``mlmix run``: the name, then that run's own options."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "runs: mlmix run --list"
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    parser.add_argument("name", nargs="?", metavar="NAME", help="the run (see --list)")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the run's own options (mlmix run NAME --help)")


def run(args: argparse.Namespace) -> int:
    if args.list or args.name is None:
        texts = _descriptions()
        width = max(map(len, texts))
        print("\n".join(f"{name:<{width}}  {text}" for name, text in texts.items()))
        return 0
    names = runnables()
    if args.name not in names:
        raise ValueError(f"unknown run {args.name!r}; the runs are: {', '.join(names)}")
    module = importlib.import_module(names[args.name])
    parser = OneLineParser(prog=f"mlmix run {args.name}", description=module.DESCRIPTION)
    module.configure(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the results of an earlier run with other parameters in --out")
    options = parser.parse_args(args.options)
    params: dict[str, Any] = {k: v for k, v in vars(options).items() if k not in _NOT_PARAMETERS}
    with OutputDir(options.out, f"run {args.name}", params, overwrite=options.overwrite) as out:
        if out.resumed:
            print(f"mlmix run {args.name}: resuming in {options.out} (same parameters)")
        return int(module.run(options) or 0)
