"""Option groups shared by several commands, defined once: the thread count (set once, by ``mlmix`` itself:
:func:`torch_threads`), a masked LM's loading options (device, dtype, batch size, pickles, remote code),
a frame (free positions and alphabet), and the table of which sampler takes which option. The options
that build a source are in :mod:`mlmix.commands.source_options`.

Nothing here imports torch at import time, so ``mlmix exact --help`` and the toy-model paths stay light.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import re
import sys
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Callable, Iterator, NoReturn

import numpy as np

# deferred: torch and transformers load only when a model is given
from mlmix.empirical.models.frames import BLANK
from mlmix.errors import InputValueError
from mlmix.theory.local.constants import parse_basin
from mlmix.validation import check_int

#: torch CPU threads of every command that runs torch (more are slower on busy machines).
DEFAULT_THREADS = 1


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (and exit status 2), without the usage block,
    and prints its help as plain text (docstring markup removed, :func:`plain`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")

    def format_help(self) -> str:
        return plain(super().format_help())


def plain(text: str) -> str:
    """Help text without reStructuredText markup: ``code`` and :role:`~target` become their text, a
    literal-block marker '::' a colon."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", lambda m: m.group(1).rsplit(".", 1)[-1] if "~" in m.group(0)
                  else m.group(1), text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    return re.sub(r"(?<=\S)::(?=\s|$)", ":", text)


def add_threads_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--threads N``, the same option and default (:data:`DEFAULT_THREADS`) in every command."""
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help=f"torch CPU threads (default {DEFAULT_THREADS}: more are slower on busy machines)")


def set_threads(threads: int) -> None:
    """Validate ``--threads`` and set torch's thread count: for the runs of ``mlmix run``, which parse
    their own options (each worker process sets its own); a command's is set by :func:`torch_threads`."""
    threads = check_int(threads, "--threads", minimum=1)
    import torch  # deferred: only commands that run torch call this

    torch.set_num_threads(threads)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` once the module ``name`` has been imported (its first import only)."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # one shot: the other finders find the module itself
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then

        def exec_module(module: ModuleType) -> None:
            type(loader).exec_module(loader, module)
            del loader.exec_module  # the loader is the module's own again
            then(module)

        loader.exec_module = exec_module  # this spec's loader only (an instance attribute)
        return spec


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """``--threads``, set once for a whole command (``mlmix`` calls this around every command; None: the
    command has no ``--threads``): torch's CPU thread count, set at once when torch is already loaded,
    else as soon as the command first imports it, so that a command that never runs torch never
    imports it. One-line InputValueError for a count below 1."""
    if threads is None:
        yield
        return
    threads = check_int(threads, "--threads", minimum=1)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
        yield
        return
    hook = _AfterImport("torch", lambda torch: torch.set_num_threads(threads))
    sys.meta_path.insert(0, hook)
    try:
        yield
    finally:
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)


def check_sampler_options(args: argparse.Namespace, flag: str, chosen: str,
                          table: dict[str, dict[str, Any]]) -> None:
    """Refuse an option that the sampler ``chosen`` (the value of ``flag``, e.g. ``--kernel``) does not
    take, and give the options it takes their defaults. ``table``: sampler -> {option's dest: default}
    for every sampler-specific option (declared once, next to the options; their argparse default is
    None, so an option given is told from one left out; one the parser lacks counts as not given).
    One-line InputValueError naming the sampler."""
    takes = table[chosen]
    for name in sorted({option for options in table.values() for option in options}):
        if name in takes:
            if getattr(args, name, None) is None:
                setattr(args, name, takes[name])
        elif getattr(args, name, None) is not None:
            own = ", ".join(f"--{o.replace('_', '-')}" for o in takes) or "none"
            raise InputValueError(f"--{name.replace('_', '-')} is not an option of {flag} {chosen}, which would "
                                  f"ignore it (its own options: {own})")


def add_frame_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, length: bool = True) -> None:
    """--frame, --prefix, --suffix, --candidates (and --length unless the parser already has one)."""
    parser.add_argument("--frame", default=None, metavar="TEXT",
                        help=f"fixed tokens with {BLANK} at each free position, e.g. \"E V Q {BLANK} {BLANK} S G\"")
    parser.add_argument("--prefix", default=None, metavar="TEXT", help="fixed text before the free positions")
    parser.add_argument("--suffix", default=None, metavar="TEXT", help="fixed text after the free positions")
    parser.add_argument("--candidates", default=None, metavar="TOKENS",
                        help="the alphabet: whitespace-separated single tokens, or @FILE (default: every "
                             "ordinary token of the vocabulary)")
    if length:
        parser.add_argument("--length", type=int, default=None,
                            help="n, the number of free positions (with --frame: the number of _)")


def add_model_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--device, --dtype, --batch-size, --allow-pickle, --trust-remote-code."""
    parser.add_argument("--device", default=None, metavar="DEVICE",
                        help="cpu, cuda or cuda:N (default: cuda when available)")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16", "float64"), default="auto",
                        help="compute dtype (autocast; auto: bfloat16 on CUDA, float32 on CPU; float64 runs the "
                             "model in float64: scores 2^29 times more accurate than float32, narrower certified "
                             "brackets, its own cache entries)")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per forward pass (default: automatic)")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="load pickled pytorch_model.bin weights (torch.load(weights_only=True)); "
                             "`mlmix convert` makes a safetensors copy once instead")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow the model repository's own Python code (off by default)")


def parse_token_basin(pattern: str, tokens: list[str], length: int) -> np.ndarray:
    """A basin pattern with alphabet tokens (or symbol indices) and '*' as a mask over V^n."""

    index = {t: str(k) for k, t in enumerate(tokens)}
    parts = []
    for p in pattern.split():
        if p == "*" or p in index:
            parts.append(index.get(p, "*"))
        elif p.isdigit():
            parts.append(p)
        else:
            raise ValueError(f"basin entry {p!r} is neither '*' nor a token of the alphabet {' '.join(tokens)}")
    return parse_basin(" ".join(parts), len(tokens), length)


def _kth_set(text: str, sets: list[np.ndarray], k: int, what: str) -> np.ndarray:
    """The K-th set of a list named on the command line (one line naming the range otherwise)."""
    if k >= len(sets):
        raise InputValueError(f"set {text!r}: the chain has {len(sets)} {what} (K = 0..{len(sets) - 1})")
    return sets[k]


def parse_state_set(text: str, n_states: int, *, tokens: list[str] | None = None, length: int | None = None,
                    metastable: Callable[[], list[np.ndarray]] | None = None,
                    pcca: Callable[[int], list[np.ndarray]] | None = None) -> np.ndarray:
    """A set of states of a chain from the command line, as a mask: state indices "0,1,2" (or one index),
    "metastable:K" (the K-th metastable set of ``metastable()``, largest mass first, 0-based), "pcca:K/M" (the
    K-th of the M crisp PCCA+ sets of ``pcca(M)``, largest coarse mass first), or, for a chain of a source, a
    pattern of n alphabet tokens or symbol indices and '*' (free), e.g. "L V" or "1 * *"."""
    spec = text.strip()
    if spec.startswith("metastable:"):
        k = spec.partition(":")[2]
        if metastable is None or not k.isdigit():
            raise InputValueError(f"set {text!r}: 'metastable:K' needs an index K >= 0 and a chain with metastable sets")
        return _kth_set(text, metastable(), int(k), "metastable set(s)")
    if spec.startswith("pcca:"):
        km = re.fullmatch(r"pcca:(\d+)/(\d+)", spec)
        if pcca is None or km is None or not 1 <= int(km[2]) <= n_states:
            raise InputValueError(f"set {text!r}: 'pcca:K/M' needs 0 <= K < M <= {n_states} (the K-th of M PCCA+ "
                                  "sets) and a chain with PCCA+ sets")
        return _kth_set(text, pcca(int(km[2])), int(km[1]), "PCCA+ set(s)")
    if re.fullmatch(r"\d+(\s*,\s*\d+)*,?", spec):
        idx = np.array([int(x) for x in spec.split(",") if x.strip()], dtype=np.int64)
        if idx.max() >= n_states:
            raise InputValueError(f"set {text!r}: state indices must lie in [0, {n_states})")
        mask = np.zeros(n_states, dtype=bool)
        mask[idx] = True
        return mask
    if tokens is None or length is None:
        raise InputValueError(f"set {text!r}: give state indices \"0,1,2\" or \"metastable:K\" (patterns of tokens "
                              "need a chain of a source)")
    return parse_token_basin(spec, tokens, length)
