"""The ``mlmix`` command: one entry point, subcommands implemented in each package.

Each subcommand module exposes ``configure(parser)`` and ``run(args) -> int``; modules are
imported only when their subcommand runs, so ``mlmix exact`` never imports torch.

Errors: refused input (arguments, files, sizes that do not fit in ``--max-memory``) ends with one line
on stderr and exit status 2; a numerical failure (a solver that did not converge) with one line and
exit status 1; anything else is a bug of mlmix, not of the input: one line "internal error: TYPE:
MESSAGE" and exit status 3. ``--debug`` shows the traceback instead. Refused input is an
:class:`~mlmix.errors.InputError` (what :mod:`mlmix.validation` raises), an :class:`OSError` (a file),
or a :class:`ValueError` raised by mlmix's own code (its one-line refusals); a :class:`TypeError`, or a
:class:`ValueError` raised inside numpy, scipy or Python's library, is an internal error. The global
options ``--debug`` and ``--max-memory`` go anywhere on the line. A reader that closes the pipe early (``mlmix verify | head``)
ends the command quietly with exit status 141 (128 + SIGPIPE, as other Unix tools).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import TracebackType

from mlmix import __version__
from mlmix.commands.options import OneLineParser, torch_threads
from mlmix.errors import InputError, InvalidResultError, NumericalError
from mlmix.files import describe_written, recording_writes
from mlmix.progress import announce, if_late, model_stack_seconds, no_announcements, write_stderr
from mlmix.validation import memory_limit, parse_size

SUBCOMMANDS = {
    "exact": ("mlmix.commands.exact", "analyse a chain exactly: a toy model, an MLM frame, or a transition-matrix file"),
    "decode": ("mlmix.commands.decode", "the exact law of a masked-diffusion / parallel decoder and its distances"),
    "verify": ("mlmix.commands.verify", "check the papers' theorems with Hypothesis and print the table"),
    "estimate": ("mlmix.commands.estimate", "estimate bound constants of a masked language model"),
    "convert": ("mlmix.commands.convert", "write a safetensors copy of a masked-LM checkpoint with its tokenizer"),
    "diagnose": ("mlmix.commands.diagnose", "R-hat, ESS and a coupling bound of simulated chains beside the exact truth"),
    "run": ("mlmix.commands.run", "run a reproduction or experiment of the papers, writing data and a figure to --out"),
}


def _global_options(argv: list[str]) -> tuple[list[str], bool, str | None]:
    """Take ``--debug`` and ``--max-memory SIZE`` out of ``argv`` wherever they stand (before a
    ``--``): (the other arguments, debug, max_memory)."""
    rest: list[str] = []
    debug, memory = False, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest += argv[i:]
            break
        if a == "--debug":
            debug = True
        elif a == "--max-memory" and i + 1 < len(argv):
            memory = argv[i + 1]
            i += 1
        elif a.startswith("--max-memory="):
            memory = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return rest, debug, memory


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    parser.add_argument("--max-memory", default=None, metavar="SIZE",
                        help="refuse steps whose estimated memory exceeds SIZE (e.g. 4GiB; default: 80%% of the "
                             "memory available)")


def main(argv: list[str] | None = None) -> int:
    """Run one ``mlmix`` command line; returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader left (mlmix verify | head): stop quietly
        _silence_stdout()
        return 141


def _main(argv: list[str] | None) -> int:
    argv, debug, max_memory = _global_options(sys.argv[1:] if argv is None else list(argv))
    parser = OneLineParser(prog="mlmix", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--version", action="version", version=f"mlmix {__version__}")
    _common(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}",
                                parser_class=OneLineParser)
    name = next((a for a in argv if a in SUBCOMMANDS), None)
    # its modules load before its options are parsed: a line if that outlasts late_after() (a loaded machine)
    with if_late(f"mlmix {name}: loading its modules", enabled=name is not None and "--no-progress" not in argv):
        for cmd, (module, help_text) in SUBCOMMANDS.items():
            p = sub.add_parser(cmd, help=help_text, description=help_text)
            if cmd == name:
                importlib.import_module(module).configure(p)
                _common(p)
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # a bad argument (one line already printed), --help or --version
        return int(stop.code or 0)
    args.debug, args.max_memory = debug, max_memory
    if loads_model(args):
        announce(f"mlmix {args.command}: importing torch and transformers", model_stack_seconds(),
                 enabled=not getattr(args, "no_progress", False))
    try:
        limit = None if args.max_memory is None else parse_size(args.max_memory)
        with memory_limit(limit), torch_threads(getattr(args, "threads", None)), recording_writes() as written, \
                no_announcements(getattr(args, "no_progress", False)):  # --threads: set here only
            code = int(importlib.import_module(SUBCOMMANDS[args.command][0]).run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers below
        if written:
            write_stderr(f"mlmix {args.command}: wrote {describe_written(written)}")
        return code
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        write_stderr(f"mlmix {args.command}: interrupted")
        return 130
    except SystemExit as stop:  # a sub-parser's bad argument (mlmix run NAME ...): one line already printed
        return int(stop.code or 0)
    except Exception as err:
        if args.debug:
            raise
        if refused_input(err):
            write_stderr(f"mlmix {args.command}: error: {_one_line(err)}")
            return 2
        if isinstance(err, NumericalError):
            write_stderr(f"mlmix {args.command}: could not compute: {_one_line(err)}")
            return 1
        write_stderr(f"mlmix {args.command}: internal error: {type(err).__name__}: {_one_line(err)} "
                     "(run with --debug for the traceback)")
        return 3


def loads_model(args: argparse.Namespace) -> bool:
    """Whether the command loads a language model (``estimate``, ``convert``, any ``--mlm``): then
    torch and transformers are imported first, which takes seconds (:func:`model_stack_seconds`)."""
    return args.command in ("estimate", "convert") or getattr(args, "mlm", None) is not None


def refused_input(err: BaseException) -> bool:
    """Whether ``err`` refuses the input (exit status 2) rather than reveals a bug (module doc): an
    :class:`InputError`, an :class:`OSError`, or a plain :class:`ValueError` raised in mlmix's own code."""
    if isinstance(err, InvalidResultError):  # an invariant of a computed Result broke: a bug
        return False
    if isinstance(err, (InputError, OSError)):
        return True
    return isinstance(err, ValueError) and _raised_in_mlmix(err.__traceback__)


def _raised_in_mlmix(tb: TracebackType | None) -> bool:
    """Whether the innermost frame of the traceback ``tb`` runs a module of the mlmix package."""
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = str(tb.tb_frame.f_globals.get("__name__", ""))
    return module == "mlmix" or module.startswith("mlmix.")


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a file descriptor (captured)
        pass


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if text else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
