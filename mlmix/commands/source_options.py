"""The options that build a source, defined once: the built-in models (Ising, Potts, score tables, the
clique model), a score file, a masked LM over a frame (``--mlm``), and a transition-matrix file, with
the sampler that makes a chain of them (``--kernel``, read from the registry
:data:`~mlmix.theory.kernels.registry.KERNELS`). ``mlmix exact``, ``decode``, ``diagnose``, ``verify
--mlm`` and the runs that take a source parse and build it here; each command module only parses its
own options and calls.

Nothing here imports torch at import time, so ``mlmix exact --help`` and the toy-model paths stay light.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from mlmix.commands.options import (
    add_frame_arguments,
    add_model_arguments,
    add_threads_argument,
    check_sampler_options,
)
from mlmix.provenance import file_sha256
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.decoders import PartialScoreTable
from mlmix.theory.kernels.registry import DEFAULT_KERNEL, KERNELS, check_kernel_options, kernel_options, resolve_kernel
from mlmix.theory.kernels.representation import REPRESENTATIONS
from mlmix.theory.kernels.scan_and_mh import ENERGIES, Truncated
from mlmix.theory.sources.conditionals import Conditionals, IsingModel, PottsModel, ScoreTable, clique_ising
from mlmix.theory.sources.scorefile import load_scores
from mlmix.validation import check_int, check_memory, check_real, check_temperature

MODELS = ("ising", "potts", "scores", "clique")


def kernel_options_table() -> dict[str, dict[str, object]]:
    """The options of each ``--kernel`` beyond the source's, with their defaults: the registry's
    (:data:`~mlmix.theory.kernels.registry.KERNELS`), and ``--basin`` of glauber, which feeds paper G's
    constants (computed for Glauber dynamics only). The one table of which kernel takes what: an option
    given to a kernel that does not take it is refused, not ignored."""
    table = kernel_options()
    for name, spec in KERNELS.items():
        if spec.single_site_heat_bath:
            table[name]["basin"] = None
    return table


def parse_graph(spec: str) -> nx.Graph:
    """Graph from a spec: cycle:N, path:N, complete:N, star:N (N nodes), grid:RxC (row-major
    labels), random:N:p:seed (Erdos-Renyi G(N, p)). Nodes are always 0..N-1."""
    kind, _, rest = spec.partition(":")
    parts = rest.split(":") if rest else []
    try:
        if kind in ("cycle", "path", "complete", "star") and len(parts) == 1:
            n = int(parts[0])
            if n < 1 or (kind == "cycle" and n < 3):
                raise ValueError
            return {"cycle": nx.cycle_graph, "path": nx.path_graph, "complete": nx.complete_graph,
                    "star": lambda m: nx.star_graph(m - 1)}[kind](n)
        if kind == "grid" and len(parts) == 1:
            r, c = (int(v) for v in parts[0].lower().split("x"))
            if r < 1 or c < 1:
                raise ValueError
            return nx.convert_node_labels_to_integers(nx.grid_2d_graph(r, c), ordering="sorted")
        if kind == "random" and len(parts) == 3:
            n, p, seed = int(parts[0]), float(parts[1]), int(parts[2])
            if n < 1 or not 0 <= p <= 1:
                raise ValueError
            return nx.gnp_random_graph(n, p, seed=seed)
    except ValueError:
        pass
    raise ValueError(f"bad graph spec {spec!r}: use cycle:N (N >= 3), path:N, complete:N, star:N, grid:RxC "
                     "or random:N:p:seed")


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


def add_source_arguments(parser: argparse.ArgumentParser, seed_flag: str = "--seed") -> None:
    """The chain and source options of ``mlmix exact`` (also used by ``mlmix diagnose``, which names the
    source's seed ``--source-seed``: its own ``--seed`` seeds the chains)."""
    src = parser.add_argument_group("chain")
    src.add_argument("--matrix", type=Path, help="transition matrix file: .npy (dense) or .npz (scipy sparse)")
    src.add_argument("--scores", type=Path, default=None, metavar="FILE",
                     help="a score table file (.npz, docs/samplers.md; a partial one gives its full contexts)")
    src.add_argument("--model", choices=MODELS, default="ising", help="built-in source (default ising)")
    src.add_argument("--kernel", choices=tuple(KERNELS), default=DEFAULT_KERNEL, help=f"sampler (default {DEFAULT_KERNEL})")
    src.add_argument("--k", type=int, default=None, help="block size of k-Gibbs (default 2)")
    src.add_argument("--order", default=None, help='sweep order of --kernel systematic, e.g. "2 0 1" (default 0..n-1)')
    src.add_argument("--energy", choices=ENERGIES, default=None,
                     help="target exp(-E)/Z of --kernel mh: logit (sum of raw scores) or pll (default logit)")
    src.add_argument("--top-k", type=int, default=None, help="keep the k most probable symbols of every conditional")
    src.add_argument("--top-p", type=float, default=None,
                     help="keep the smallest most-probable set of mass >= p (after temperature and top-k)")
    src.add_argument("--representation", choices=REPRESENTATIONS, default="auto",
                     help="dense / sparse matrix or matrix-free operator (default auto: by size and memory)")
    add_threads_argument(src)
    src.add_argument("--temperature", type=float, default=None,
                     help="temperature T > 0 (default 1; for ising/potts give --beta or --temperature, not both)")
    mod = parser.add_argument_group("models")
    add_toy_model_arguments(mod, seed_flag=seed_flag)
    add_mlm_arguments(parser)


def validate_source(args: argparse.Namespace) -> None:
    """The source options of :func:`add_source_arguments`: finite and in range, and only the kernel
    options that ``--kernel`` takes (:func:`kernel_options_table`, which also gives their defaults)."""
    check_sampler_options(args, "--kernel", args.kernel, kernel_options_table())
    if args.k is not None:
        check_int(args.k, "--k", minimum=1)
    validate_toy_model_arguments(args)
    if args.model in ("ising", "potts") and args.beta is not None and args.temperature is not None \
            and args.matrix is None:
        raise ValueError("give --beta or --temperature, not both: for ising/potts they combine as beta/T")


def build_source(args: argparse.Namespace) -> tuple[Conditionals, str]:
    """The built-in source of conditionals the arguments describe, and a one-line description."""
    if getattr(args, "scores", None) is not None:

        src = load_scores(args.scores, args.temperature)
        kind = "partial" if src.partial_conditionals else "full"
        full = src.full_table() if kind == "partial" else src
        full.tokens = src.tokens  # the file's alphabet names the states (--basins patterns, reports)
        return full, (f"{kind} score table {args.scores} (|V| = {src.space.vocab_size}, n = {src.space.length}, "
                      f"T = {src.temperature:g})")
    if args.mlm is not None:  # a masked LM over a frame, tabulated exactly (cached)
        return mlm_source_from_args(args)
    T = 1.0 if args.temperature is None else args.temperature
    beta = 0.5 if args.beta is None else args.beta
    if args.model == "ising":
        graph = parse_graph(args.graph)
        src = IsingModel(graph, couplings=args.coupling, fields=args.field, beta=beta, temperature=T)
        return src, f"Ising model on {args.graph} (beta={beta:g}, T={T:g}, J={args.coupling:g}, h={args.field:g})"
    if args.model == "potts":
        graph = parse_graph(args.graph)
        if args.seed is not None:
            src = PottsModel.random(graph, args.q, seed=args.seed, coupling_scale=args.coupling, temperature=T)
            return src, f"random Potts model (q={args.q}) on {args.graph}, seed {args.seed}, T={T:g}"
        fields = np.full((graph.number_of_nodes(), args.q), args.field)
        src = PottsModel(graph, args.q, couplings=args.coupling, fields=fields, beta=beta, temperature=T)
        return src, f"Potts model (q={args.q}) on {args.graph} (beta={beta:g}, T={T:g}, J={args.coupling:g})"
    if args.model == "scores":
        seed = 0 if args.seed is None else args.seed
        table_bytes = 8.0 * args.length * float(args.vocab) ** args.length
        check_memory(table_bytes, f"a score table of {args.vocab}^{args.length} contexts")
        src = ScoreTable.random(args.vocab, args.length, seed=seed, scale=args.scale, temperature=T)
        return src, (f"random score table |V|={args.vocab}, n={args.length}, seed {seed}, T={T:g} "
                     "(generally incompatible)")
    if args.clique_size > args.length:
        raise ValueError(f"--clique-size {args.clique_size} exceeds --length {args.length}")
    src = clique_ising(args.length, range(args.clique_size), args.coupling, args.field, temperature=T)
    return src, (f"clique Ising of paper P eq. (5): n={args.length}, |C|={args.clique_size}, "
                 f"J={args.coupling:g}, h={args.field:g}, T={T:g}")


def build_chain(args: argparse.Namespace) -> tuple[Chain, str, Conditionals | None]:
    """The chain to analyse, its title, and its source (None for a matrix file)."""
    if args.matrix is not None:
        chain = Chain.load(args.matrix)
        return chain, f"transition matrix {args.matrix} ({chain.n_states} states)", None
    source, description = build_source(args)
    q, n = source.space.vocab_size, source.space.length
    given = {option: getattr(args, option, None) for option in KERNELS[args.kernel].options}
    check_kernel_options(source.space, args.kernel, "--", **given)
    if args.top_k is not None or args.top_p is not None:
        source = Truncated(source, args.top_k, args.top_p)
        description += f"; truncated (top-k {args.top_k}, top-p {args.top_p}, after the temperature)"
    spec, kernel_name, options = resolve_kernel(args.kernel, **given)
    chain = Chain.from_source(source, kernel_name, k=args.k, order=args.order,
                              representation=args.representation)  # memory checked
    kernel = spec.title(source, options)
    return chain, f"{description}; {kernel}; |V|^n = {q}^{n} = {chain.n_states} states", source


def add_partial_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The source of partial conditionals (a score file, a built-in model, or --mlm over a frame), the
    temperature and the truncations: shared by ``mlmix decode`` and ``mlmix run samplers``."""

    src = parser.add_argument_group("source")
    src.add_argument("--temperature", type=float, default=None, help="temperature T > 0 (default 1)")
    src.add_argument("--top-k", type=int, default=None, help="keep the k most probable symbols of every conditional")
    src.add_argument("--top-p", type=float, default=None, help="keep the smallest most-probable set of mass >= p")
    src.add_argument("--scores", type=Path, default=None, metavar="FILE",
                     help="a partial score table (.npz, docs/samplers.md) instead of a built-in source")
    src.add_argument("--model", choices=MODELS, default="ising",
                     help="built-in source (default ising); scores is a random table over (V + mask)^(n-1) contexts")
    add_toy_model_arguments(src, graph="cycle:4", length=3)
    add_threads_argument(src)
    add_mlm_arguments(parser, table="partial")


def validate_partial_source_arguments(args: argparse.Namespace) -> None:
    """The options of :func:`add_partial_source_arguments` (ValueError -> exit 2, one line)."""
    validate_toy_model_arguments(args)
    if args.scores is not None and args.mlm is not None:
        raise ValueError("give --scores or --mlm, not both")


def build_partial_source(args: argparse.Namespace) -> tuple[PartialScoreTable, str, Conditionals | None]:
    """(partial conditionals, description, the joint source when there is one)."""
    if args.scores is not None:

        src = load_scores(args.scores, args.temperature)
        if not src.partial_conditionals:
            raise ValueError(f"{args.scores} holds a full score table; a decoder needs partial contexts "
                             "(kind 'partial')")
        return src, f"partial score table {args.scores} (|V| = {src.space.vocab_size}, n = {src.space.length})", None
    if args.mlm is not None:
        src, title = mlm_partial_source_from_args(args)
        return src, title, None
    if args.model == "scores":
        seed = 0 if args.seed is None else args.seed
        T = 1.0 if args.temperature is None else args.temperature
        src = PartialScoreTable.random(args.vocab, args.length, seed=seed, scale=args.scale, temperature=T)
        return src, (f"random partial score table |V|={args.vocab}, n={args.length}, seed {seed}, T={T:g} "
                     "(contexts over V + {mask})"), None

    joint, description = build_source(args)
    return PartialScoreTable.from_joint(joint), description + "; exact marginal conditionals of the joint", joint


#: The masked forward passes of each tabulated table (``TableKind.passes`` of
#: :mod:`mlmix.empirical.models.tabulate` and :mod:`~mlmix.empirical.models.partial_tables`, one per site and context
#: over the other sites; a test counts them with a fake model), for the ``--mlm`` help.
MLM_PASSES = {"full": "n |V|^(n-1)", "partial": "n (|V|+1)^(n-1)"}


def add_mlm_arguments(parser: argparse.ArgumentParser, table: str = "full") -> None:
    """The ``--mlm MODEL`` source of ``mlmix exact``: a masked LM over a frame, tabulated exactly
    (:mod:`mlmix.empirical.models.tabulate`). Adds the frame and model options; ``--length``,
    ``--temperature`` and ``--threads`` are the parser's own (with ``--frame``, a ``--length`` left at
    its default is ignored: the frame's blanks give n). ``table``: "full" (the conditionals given the
    other sites) or "partial" (given every partial context: ``mlmix decode``), for the pass count."""
    group = parser.add_argument_group("masked language model (--mlm): its exact chain over a frame")
    group.add_argument("--mlm", default=None, metavar="ID_OR_PATH",
                       help="Hugging Face id or local folder of a masked LM, or sceptr[:VARIANT] (SCEPTR from its "
                            f"PyPI wheel): tabulate its {'partial ' if table == 'partial' else ''}conditionals over "
                            f"the frame ({MLM_PASSES[table]} masked passes, cached) and analyse "
                            f"{'it' if table == 'partial' else 'the exact chain'}")
    add_frame_arguments(group, length=False)
    add_model_arguments(group)
    group.add_argument("--max-passes", type=int, default=None,
                       help="refuse to tabulate when more masked forward passes are needed (default: no cap)")
    if "--no-progress" not in parser._option_string_actions:  # the command may have its own
        group.add_argument("--no-progress", action="store_true",
                           help="no cost estimates or progress bars (tabulation and analysis)")
    parser.set_defaults(mlm_length_default=parser.get_default("length"))


def masked_lm_class(model: str) -> type:
    """The source class of a masked LM named on the command line: that of the first family of the registry
    :data:`~mlmix.empirical.models.families.MODELS` that recognises the name (``sceptr`` / ``sceptr:VARIANT``:
    SCEPTR from its PyPI wheel; anything else: a Hugging Face masked LM)."""
    # deferred: a family's module (torch, transformers) loads only when a model is given
    from mlmix.empirical.models.families import family_of

    return family_of(model).source_class()


def _load_mlm(args: argparse.Namespace) -> Any:
    """The masked LM of ``--mlm MODEL`` over the frame and alphabet the options describe (quiet
    transformers; ``--threads`` is set by ``mlmix`` itself, :func:`mlmix.commands.options.torch_threads`)."""
    # deferred: torch and transformers load only when --mlm is used
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
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
    """The tabulated MLM that ``mlmix exact --mlm MODEL ...`` describes (``masked_lm``: the model source it was
    tabulated from, whose weights give the head bound), and a one-line title."""
    # deferred: torch and transformers load only when a model is given
    from mlmix.empirical.models.tabulate import cached_weights_hash, tabulate  # deferred: torch

    mlm = _load_mlm(args)
    table = tabulate(mlm, max_passes=args.max_passes, progress=not args.no_progress)
    table.info["model_sha256"] = cached_weights_hash(mlm)  # computed for the cache key: no extra pass
    table.masked_lm = mlm
    return table, _title(table, "table")


def mlm_partial_source_from_args(args: argparse.Namespace) -> tuple[Any, str]:
    """The partial table of the masked LM that ``mlmix decode --mlm MODEL ...`` describes, and a title."""
    # deferred: torch and transformers load only when a model is given
    from mlmix.empirical.models.partial_tables import tabulate_partial  # deferred: torch
    from mlmix.empirical.models.tabulate import cached_weights_hash  # deferred: torch

    mlm = _load_mlm(args)
    table = tabulate_partial(mlm, max_passes=args.max_passes, progress=not args.no_progress)
    table.info["model_sha256"] = cached_weights_hash(mlm)  # the provenance header's model_hash
    return table, _title(table, "partial table")


#: The parameters of each built-in model (``inputs.source`` of the JSON report).
_MODEL_PARAMETERS = {"ising": ("graph", "beta", "coupling", "field"), "potts": ("graph", "q", "beta", "coupling", "field"),
                     "scores": ("vocab", "length", "scale"), "clique": ("length", "clique_size", "coupling", "field")}


def exact_inputs(args: argparse.Namespace, source: Conditionals | None) -> dict:
    """The structured inputs of an ``mlmix exact`` report (:func:`mlmix.provenance.inputs`)."""
    if args.matrix is not None:
        return {"source": {"kind": "matrix", "path": str(args.matrix), "sha256": file_sha256(args.matrix)}}
    given = {"kernel": args.kernel, "temperature": source.temperature,  # the T used (a score file's own unless overridden)
             **{o: getattr(args, o) for o in KERNELS[args.kernel].options if getattr(args, o, None) is not None},
             **{key: getattr(args, key) for key in ("top_k", "top_p") if getattr(args, key, None) is not None}}
    return {**given, **source_inputs(args, source)}


def source_inputs(args: argparse.Namespace, source: Conditionals) -> dict:
    """The ``source`` of the structured inputs (a score file with its SHA-256, a masked LM over a frame, or a
    built-in model with its parameters) and, where they apply, ``seed``, ``frame`` and ``model_hash``:
    shared by ``mlmix exact``, ``decode`` and ``verify --mlm``."""
    if getattr(args, "scores", None) is not None:
        return {"source": {"kind": "scores-file", "path": str(args.scores), "sha256": file_sha256(args.scores)}}
    if args.mlm is not None:
        base = getattr(source, "base", source)
        d = base.describe()
        return {"source": {"kind": "mlm", "model": d["model"], "architecture": d["architecture"],
                           "alphabet": base.tokens}, "frame": d["frame"], "model_hash": d.get("model_sha256")}
    values = {**vars(args), "beta": 0.5 if args.beta is None else args.beta}
    if args.model == "scores" and args.seed is None:
        values["seed"] = 0
    if args.model == "potts" and args.seed is not None:  # random couplings: the seed and scale replace beta, J, h
        values.update(beta=None, field=None)
    return {"seed": values["seed"] if args.model in ("scores", "potts") else None,
            "source": {"kind": args.model, **{key: values[key] for key in _MODEL_PARAMETERS[args.model]}}}
