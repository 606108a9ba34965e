"""The ``mlmix`` command: one entry point, subcommands implemented in each package.

Each subcommand module exposes ``configure(parser)`` and ``run(args) -> int``; modules are
imported only when their subcommand runs, so ``mlmix exact`` never imports torch.

Errors: bad input (arguments, files, sizes that do not fit in ``--max-memory``) ends with one line on
stderr and exit status 2; a numerical failure (a solver that did not converge) with one line and
exit status 1; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from mlmix import __version__
from mlmix.errors import NumericalError
from mlmix.validation import memory_limit, parse_size

SUBCOMMANDS = {
    "exact": ("mlmix.theory.cli", "analyse a chain exactly: a toy model, an MLM frame, or a transition-matrix file"),
    "verify": ("mlmix.verify.cli", "check the papers' theorems with Hypothesis and print the table"),
    "estimate": ("mlmix.empirical.cli", "estimate bound constants of a masked language model"),
    "convert": ("mlmix.empirical.convert", "write a safetensors copy of a masked-LM checkpoint with its tokenizer"),
    "diagnose": ("mlmix.empirical.diagnose", "R-hat, ESS and a coupling bound of simulated chains beside the exact truth"),
    "run": ("mlmix.run", "run a reproduction or experiment of the papers, writing data and a figure to --out"),
}


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (and exit status 2), without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    parser.add_argument("--max-memory", default=None, metavar="SIZE",
                        help="refuse steps whose estimated memory exceeds SIZE (e.g. 4GiB; default: 80%% of the "
                             "memory available)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = OneLineParser(prog="mlmix", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"mlmix {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}",
                                parser_class=OneLineParser)
    name = next((a for a in argv if a in SUBCOMMANDS), None)
    for cmd, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(cmd, help=help_text, description=help_text)
        if cmd == name:
            importlib.import_module(module).configure(p)
            _common(p)
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # a bad argument (one line already printed), --help or --version
        return int(stop.code or 0)
    try:
        limit = None if args.max_memory is None else parse_size(args.max_memory)
        with memory_limit(limit):
            return int(importlib.import_module(SUBCOMMANDS[args.command][0]).run(args) or 0)
    except (ValueError, TypeError, OSError) as err:
        if args.debug:
            raise
        print(f"mlmix {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except NumericalError as err:
        if args.debug:
            raise
        print(f"mlmix {args.command}: could not compute: {_one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"mlmix {args.command}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as stop:  # a sub-parser's bad argument (mlmix run NAME ...): one line already printed
        return int(stop.code or 0)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if text else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
