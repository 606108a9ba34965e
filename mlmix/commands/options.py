"""Option groups shared by several commands, defined once: the thread count, a masked LM's loading
options (device, dtype, batch size, pickles, remote code), a frame (free positions and alphabet), and the
``--mlm`` source of ``mlmix exact``.

Nothing here imports torch at import time, so ``mlmix exact --help`` and the toy-model paths stay light.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, NoReturn

# deferred: torch and transformers load only when a model is given
from mlmix.empirical.frames import BLANK
from mlmix.errors import InputValueError
from mlmix.validation import check_int, check_real, check_temperature

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
    """Validate ``--threads`` and set torch's thread count (each worker process sets its own)."""
    threads = check_int(threads, "--threads", minimum=1)
    import torch  # deferred: only commands that run torch call this

    torch.set_num_threads(threads)


def add_toy_model_arguments(group: argparse._ArgumentGroup, *, graph: str = "cycle:6", length: int = 5,
                            seed_flag: str = "--seed") -> None:
    """The built-in sources' parameters (Ising/Potts on a graph, random score tables, the clique model),
    shared by ``mlmix exact``, ``mlmix decode`` and ``mlmix diagnose`` (which calls the source's seed
    ``--source-seed``: its own ``--seed`` seeds the chains)."""
    group.add_argument("--graph", default=graph, help=f"graph for ising/potts (default {graph})")
    group.add_argument("--beta", type=float, default=None, help="inverse temperature of ising/potts (default 0.5)")
    group.add_argument("--coupling", type=float, default=1.0, help="coupling J on every edge (default 1)")
    group.add_argument("--field", type=float, default=0.0, help="field h on every site (default 0)")
    group.add_argument("--q", type=int, default=3, help="number of Potts states (default 3)")
    group.add_argument("--vocab", type=int, default=3, help="|V| for scores (default 3)")
    group.add_argument("--length", type=int, default=length, help=f"n for scores and clique (default {length})")
    group.add_argument("--clique-size", type=int, default=3, help="|C| for clique, sites 0..|C|-1 (default 3)")
    group.add_argument(seed_flag, dest="seed", type=int, default=None,
                       help="seed of random scores (default 0) or of random Potts couplings and fields")
    group.add_argument("--scale", type=float, default=1.0, help="standard deviation of random scores (default 1)")


def validate_toy_model_arguments(args: argparse.Namespace) -> None:
    """The options of :func:`add_toy_model_arguments`, ``--threads``, ``--temperature`` and the
    truncations ``--top-k``/``--top-p``: finite and in range (ValueError -> exit 2, one line)."""
    check_int(args.threads, "--threads", minimum=1)
    check_int(args.vocab, "--vocab", minimum=2)
    check_int(args.length, "--length", minimum=1)
    check_int(args.q, "--q", minimum=2)
    check_int(args.clique_size, "--clique-size", minimum=2)
    for name in ("coupling", "field"):
        check_real(getattr(args, name), f"--{name}")
    check_real(args.scale, "--scale", minimum=0.0, open_min=True)
    if args.temperature is not None:
        check_temperature(args.temperature, "--temperature")
    if args.beta is not None:
        check_real(args.beta, "--beta")
    if args.top_k is not None:
        check_int(args.top_k, "--top-k", minimum=1)
    if args.top_p is not None:
        check_real(args.top_p, "--top-p", minimum=0.0, maximum=1.0, open_min=True)


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
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                        help="compute dtype (autocast; auto: bfloat16 on CUDA, float32 on CPU)")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per forward pass (default: automatic)")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="load pickled pytorch_model.bin weights (torch.load(weights_only=True)); "
                             "`mlmix convert` makes a safetensors copy once instead")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow the model repository's own Python code (off by default)")


def add_mlm_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--mlm MODEL`` source of ``mlmix exact``: a masked LM over a frame, tabulated exactly
    (:mod:`mlmix.empirical.tabulate`). Adds the frame and model options; ``--length``,
    ``--temperature`` and ``--threads`` are the parser's own (with ``--frame``, a ``--length`` left at
    its default is ignored: the frame's blanks give n)."""
    group = parser.add_argument_group("masked language model (--mlm): its exact chain over a frame")
    group.add_argument("--mlm", default=None, metavar="ID_OR_PATH",
                       help="Hugging Face id or local folder of a masked LM, or sceptr[:VARIANT] (SCEPTR from its "
                            "PyPI wheel): tabulate its conditionals over the frame (n |V|^(n-1) masked passes, "
                            "cached) and analyse the exact chain")
    add_frame_arguments(group, length=False)
    add_model_arguments(group)
    group.add_argument("--max-passes", type=int, default=None,
                       help="refuse to tabulate when more masked forward passes are needed (default: no cap)")
    if "--no-progress" not in parser._option_string_actions:  # the command may have its own
        group.add_argument("--no-progress", action="store_true",
                           help="no cost estimates or progress bars (tabulation and analysis)")
    parser.set_defaults(mlm_length_default=parser.get_default("length"))


def masked_lm_class(model: str) -> type:
    """The source class of a masked LM named on the command line: ``sceptr`` / ``sceptr:VARIANT`` (no
    folder of that name) is SCEPTR read from its PyPI wheel (:mod:`mlmix.empirical.sceptr`), anything
    else a Hugging Face masked LM (:class:`~mlmix.empirical.mlm.MaskedLMConditionals`)."""
    # deferred: torch and transformers load only when a model is given
    from mlmix.empirical.mlm import MaskedLMConditionals
    from mlmix.empirical.sceptr import SceptrConditionals, is_sceptr

    return SceptrConditionals if is_sceptr(model) else MaskedLMConditionals


def _load_mlm(args: argparse.Namespace) -> Any:
    """The masked LM of ``--mlm MODEL`` over the frame and alphabet the options describe (quiet
    transformers, ``--threads`` set)."""
    # deferred: torch and transformers load only when --mlm is used
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    set_threads(args.threads)
    length = args.length
    if args.frame is not None and length == getattr(args, "mlm_length_default", None):
        length = None  # the frame's blanks give n; --length was left at the parser's default
    return masked_lm_class(args.mlm).from_pretrained(
        args.mlm, length, frame=args.frame, prefix=args.prefix, suffix=args.suffix, candidates=args.candidates,
        temperature=1.0 if args.temperature is None else args.temperature, device=args.device, dtype=args.dtype,
        batch_size=args.batch_size, allow_pickle=args.allow_pickle, trust_remote_code=args.trust_remote_code)


def _title(table: Any, what: str) -> str:
    d = table.describe()
    origin = "read from the cache" if d["table"]["from_cache"] else f"{d['table']['passes']:,} masked passes"
    return (f"masked LM {d['model']} ({d['architecture']}) on the frame '{d['frame']}', alphabet of "
            f"{table.space.vocab_size} tokens, n = {table.space.length}, T = {table.temperature:g}, "
            f"{d['dtype']} {what} ({origin})")


def mlm_source_from_args(args: argparse.Namespace) -> tuple[Any, str]:
    """The tabulated MLM that ``mlmix exact --mlm MODEL ...`` describes, and a one-line title."""
    # deferred: torch and transformers load only when a model is given
    from mlmix.empirical.tabulate import cached_weights_hash, tabulate  # deferred: torch

    mlm = _load_mlm(args)
    table = tabulate(mlm, max_passes=args.max_passes, progress=not args.no_progress)
    table.info["model_sha256"] = cached_weights_hash(mlm)  # computed for the cache key: no extra pass
    return table, _title(table, "table")


def mlm_partial_source_from_args(args: argparse.Namespace) -> tuple[Any, str]:
    """The partial table of the masked LM that ``mlmix decode --mlm MODEL ...`` describes, and a title."""
    # deferred: torch and transformers load only when a model is given
    from mlmix.empirical.partial_tables import tabulate_partial  # deferred: torch
    from mlmix.empirical.tabulate import cached_weights_hash  # deferred: torch

    mlm = _load_mlm(args)
    table = tabulate_partial(mlm, max_passes=args.max_passes, progress=not args.no_progress)
    table.info["model_sha256"] = cached_weights_hash(mlm)  # the provenance header's model_hash
    return table, _title(table, "partial table")
