"""The ``mlmix`` command: one entry point, subcommands implemented in each package.

Each subcommand module exposes ``configure(parser)`` and ``run(args) -> int``; modules are
imported only when their subcommand runs, so ``mlmix exact`` never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from mlmix import __version__

SUBCOMMANDS = {
    "exact": ("mlmix.theory.cli", "analyse a toy chain or a transition-matrix file exactly"),
    "verify": ("mlmix.verify.cli", "check the papers' theorems with Hypothesis and print the table"),
    "estimate": ("mlmix.empirical.cli", "estimate bound constants of a masked language model"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="mlmix", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"mlmix {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}")
    name = next((a for a in argv if a in SUBCOMMANDS), None)
    for cmd, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(cmd, help=help_text, description=help_text)
        if cmd == name:
            importlib.import_module(module).configure(p)
    args = parser.parse_args(argv)
    try:
        return int(importlib.import_module(SUBCOMMANDS[args.command][0]).run(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"mlmix {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
