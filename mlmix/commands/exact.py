"""``mlmix exact``: analyse a sampler's chain on a built-in source, or a transition matrix from a file.

Examples::

    mlmix exact                                          # Ising on cycle:6, beta 0.5, Glauber
    mlmix exact --beta 10 --json                         # metastable: gap 1.416e-18 to full accuracy
    mlmix exact --model potts --q 3 --graph grid:2x3 --beta 0.8 --json
    mlmix exact --model scores --vocab 3 --length 5 --temperature 0.5 --seed 0 --basin "0 0 * * *"
    mlmix exact --model clique --length 6 --clique-size 4 --coupling 0.3 --field 0.1 --kernel k-gibbs --k 2
    mlmix exact --matrix P.npz --stationary --json
    mlmix exact --model scores --save-matrix P.npz       # write the kernel that was analysed

Every figure comes with its method and accuracy; a figure that cannot be resolved at the accuracy
target is printed as an interval with the reason, never as roundoff. For a Glauber chain of a source
(Ising, Potts, score table, clique) the output also holds paper G's constants of that source: rho and
the contraction verdict, Delta and Corollary 7's temperature, Theorem 5's bound next to the exact
t_mix, the rectangle statistic R, and with ``--basin`` the margin and Theorem 8's bounds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import networkx as nx
import numpy as np

from mlmix.commands.options import (
    add_mlm_arguments,
    add_threads_argument,
    add_toy_model_arguments,
    check_sampler_options,
    mlm_source_from_args,
    set_threads,
    validate_toy_model_arguments,
)
from mlmix.errors import InputValueError
from mlmix.files import dumps_json
from mlmix.limits import MIXING_LIMIT, REPORT_MIXING_LIMIT
from mlmix.plots import report_figure, save_figure
from mlmix.progress import Progress
from mlmix.provenance import file_sha256, stamp
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.decoders import PartialScoreTable
from mlmix.theory.kernels.representation import REPRESENTATIONS
from mlmix.theory.kernels.scan_and_mh import ENERGIES, Truncated, check_order, mh_acceptance
from mlmix.theory.local.constants import paper_constants, paper_constants_seconds, parse_basin
from mlmix.theory.results import Result
from mlmix.theory.sources.conditionals import Conditionals, IsingModel, PottsModel, ScoreTable, clique_ising
from mlmix.theory.sources.scorefile import load_scores, save_scores
from mlmix.validation import check_eps, check_int, check_memory, check_output_file

MODELS = ("ising", "potts", "scores", "clique")
KERNELS = ("glauber", "k-gibbs", "parallel", "systematic", "mh")

#: The options of each --kernel beyond the source's, with their defaults (the one table of which kernel
#: takes what: an option given to a kernel that does not take it is refused, not ignored). ``--basin``
#: feeds paper G's constants, which are computed for Glauber dynamics only.
KERNEL_OPTIONS: dict[str, dict[str, object]] = {
    "glauber": {"basin": None}, "k-gibbs": {"k": 2}, "parallel": {}, "systematic": {"order": None},
    "mh": {"energy": "logit"}}


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


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``mlmix exact``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("Examples::", 1)[1]
    add_source_arguments(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument("--stationary", action="store_true", help="include the stationary law")
    out.add_argument("--eps", type=float, default=0.25, help="TV threshold of t_mix (default 0.25)")
    out.add_argument("--basin", default=None, metavar="PATTERN",
                     help="a basin for Theorem 8: n symbols or '*' (free), e.g. \"1 1 * * *\"")
    out.add_argument("--mixing-limit", type=int, default=REPORT_MIXING_LIMIT,
                     help=f"largest state count for the exact dense t_mix (default {REPORT_MIXING_LIMIT}; "
                          f"at most {MIXING_LIMIT}); larger chains get certified bounds")
    out.add_argument("--plot", type=Path, default=None, metavar="FILE",
                     help="also draw the distance curve, spectrum, stationary law and rho_ij into FILE "
                          "(.pdf, .svg or .png)")
    out.add_argument("--save-scores", type=Path, default=None, metavar="FILE",
                     help="also write the full score table of the source (.npz, read back by --scores)")
    out.add_argument("--save-matrix", type=Path, default=None, metavar="FILE",
                     help="also write the analysed transition matrix (.npz, read back by --matrix)")


def add_source_arguments(parser: argparse.ArgumentParser, seed_flag: str = "--seed") -> None:
    """The chain and source options of ``mlmix exact`` (also used by ``mlmix diagnose``, which names the
    source's seed ``--source-seed``: its own ``--seed`` seeds the chains)."""
    src = parser.add_argument_group("chain")
    src.add_argument("--matrix", type=Path, help="transition matrix file: .npy (dense) or .npz (scipy sparse)")
    src.add_argument("--scores", type=Path, default=None, metavar="FILE",
                     help="a score table file (.npz, docs/samplers.md; a partial one gives its full contexts)")
    src.add_argument("--model", choices=MODELS, default="ising", help="built-in source (default ising)")
    src.add_argument("--kernel", choices=KERNELS, default="glauber", help="sampler (default glauber)")
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


def _validate(args: argparse.Namespace) -> None:
    """Every numeric option: finite and in range (ValueError -> exit 2, one line)."""
    check_eps(args.eps, "--eps")
    check_int(args.mixing_limit, "--mixing-limit", minimum=1, maximum=MIXING_LIMIT)
    if args.plot is not None and args.plot.suffix.lower() not in (".pdf", ".svg", ".png"):
        raise ValueError(f"--plot must name a .pdf, .svg or .png file, got {args.plot.name}")
    for flag in ("save_matrix", "save_scores"):
        if getattr(args, flag) is not None:
            check_output_file(getattr(args, flag), f"--{flag.replace('_', '-')}", (".npz",))
    validate_source(args)


def _check_with_chain(args: argparse.Namespace, chain: Chain, source: Conditionals | None) -> np.ndarray | None:
    """The options that need the chain or its source, checked before anything is written (a refused
    command leaves no file behind); returns the basin of ``--basin`` (None without it)."""
    if chain.representation == "operator" and args.save_matrix is not None:
        raise InputValueError("--save-matrix needs a matrix: the chain is held as a matrix-free operator "
                              "(use --representation sparse)")
    if source is None:
        for flag, given, why in (("--save-scores", args.save_scores, "a source of conditionals, not a matrix file"),
                                 ("--basin", args.basin, "a built-in source (it is a pattern over V^n)")):
            if given is not None:
                raise InputValueError(f"{flag} needs {why}")
    if args.basin is None:
        return None
    if isinstance(source, Truncated):
        raise InputValueError("--basin is not an option of a truncated source (--top-k / --top-p): paper G's "
                              "constants, which it feeds, are computed for the source itself")
    return parse_basin(args.basin, source.space.vocab_size, source.space.length)


def validate_source(args: argparse.Namespace) -> None:
    """The source options of :func:`add_source_arguments`: finite and in range, and only the kernel
    options that ``--kernel`` takes (:data:`KERNEL_OPTIONS`, which also gives their defaults)."""
    check_sampler_options(args, "--kernel", args.kernel, KERNEL_OPTIONS)
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
        kind = "partial" if isinstance(src, PartialScoreTable) else "full"
        full = src.full_table() if kind == "partial" else src
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
    if args.kernel == "k-gibbs" and not 1 <= args.k <= n:
        raise ValueError(f"--k must lie in 1..n = {n}, got {args.k}")
    if args.top_k is not None or args.top_p is not None:
        source = Truncated(source, args.top_k, args.top_p)
        description += f"; truncated (top-k {args.top_k}, top-p {args.top_p}, after the temperature)"
    kernel_name = f"mh-{args.energy}" if args.kernel == "mh" else args.kernel
    chain = Chain.from_source(source, kernel_name, k=args.k, order=args.order,
                              representation=args.representation)  # memory checked
    if chain.representation == "operator":
        set_threads(args.threads)
    kernel = {"glauber": "Glauber dynamics", "k-gibbs": f"{args.k}-Gibbs block dynamics",
              "parallel": "independent parallel sampler",
              "systematic": f"systematic scan, one sweep in order {check_order(source.space, args.order)}",
              "mh": f"Metropolis-Hastings, target exp(-E_{args.energy})/Z, MLM proposal"}[args.kernel]
    return chain, f"{description}; {kernel}; |V|^n = {q}^{n} = {chain.n_states} states", source


#: The parameters of each built-in model (``inputs.source`` of the JSON report).
_MODEL_PARAMETERS = {"ising": ("graph", "beta", "coupling", "field"), "potts": ("graph", "q", "beta", "coupling", "field"),
                     "scores": ("vocab", "length", "scale"), "clique": ("length", "clique_size", "coupling", "field")}


def exact_inputs(args: argparse.Namespace, source: Conditionals | None) -> dict:
    """The structured inputs of an ``mlmix exact`` report (:func:`mlmix.provenance.inputs`)."""
    if args.matrix is not None:
        return {"source": {"kind": "matrix", "path": str(args.matrix), "sha256": file_sha256(args.matrix)}}
    given = {"kernel": args.kernel, "temperature": source.temperature,  # the T used (a score file's own unless overridden)
             **({"k": args.k} if args.kernel == "k-gibbs" else {}),
             **({"order": args.order} if args.kernel == "systematic" and args.order is not None else {}),
             **({"energy": args.energy} if args.kernel == "mh" else {}),
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


def _has_zeros(source: Conditionals) -> bool:
    """Whether a score table has zero conditionals (-inf scores)."""
    return isinstance(source, ScoreTable) and not np.isfinite(source.table).all()


def run(args: argparse.Namespace) -> int:
    """Analyse the chain and print a table (or JSON with --json)."""
    _validate(args)
    chain, title, source = build_chain(args)
    basin = _check_with_chain(args, chain, source)
    if args.save_matrix is not None:  # the first write: every option was checked above
        chain.save(args.save_matrix)
    if args.save_scores is not None:
        save_scores(args.save_scores, getattr(source, "base", source), getattr(source, "tokens", None))
    summary = chain.summary(args.eps, include_stationary=args.stationary, mixing_limit=args.mixing_limit,
                            **({} if chain.representation == "operator" else {"progress": not args.no_progress}))
    report = stamp("exact", {"chain": title, **summary}, exact_inputs(args, source))
    if source is not None and args.kernel == "glauber" and "reason" not in report and not isinstance(source, Truncated):
        if _has_zeros(source):
            report["paper_g"] = {"reason": "the source has zero conditionals (-inf scores); paper G's constants "
                                           "assume positive ones"}
        else:
            phase = "paper G constants"
            with Progress(f"{phase} of {chain.name}", [(phase, paper_constants_seconds(source.space))],
                          cost=f"{chain.n_states:,} states, n = {source.space.length}",
                          enabled=not args.no_progress) as bar, bar.phase(phase):
                report["paper_g"] = paper_constants(source, chain, args.eps, basin)
    if source is not None and args.kernel == "mh":
        report.update(mh_acceptance(source, args.energy))
    if args.plot is not None:  # what the chain answers is drawn, what it does not is named on its panel
        save_figure(report_figure(chain, source if args.kernel == "glauber" else None, title=title, eps=args.eps),
                    args.plot)
    if args.json:
        print(dumps_json(report))
    else:
        print(format_report(report))
    return 0


def _fmt(value: object) -> str:
    if isinstance(value, Result):
        if value.value is not None:
            acc = "exact" if value.rel_error == 0 else (f"rel. err <= {value.rel_error:.0e}"
                                                        if value.rel_error is not None else "")
            return f"{value.value:.6g}" + (f"   ({acc})" if acc else "")
        lo = "?" if value.lower is None else f"{value.lower:.4g}"
        hi = "?" if value.upper is None else f"{value.upper:.4g}"
        return f"[{lo}, {hi}]   (not resolved)" if (value.lower is not None or value.upper is not None) else "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return "-" if value is None else str(value)


def format_report(report: dict) -> str:
    """A readable table of the report, then each figure's method and, for intervals, the reason."""
    rows = [("states", report["n_states"]), ("irreducible", report["irreducible"])]
    if "reason" in report:
        return "\n".join([report["chain"], "", *(f"  {k:<28}{_fmt(v)}" for k, v in rows), "", report["reason"]])
    rows += [("period", report["period"]), ("reversible", report["reversible"]),
             ("spectral gap", report["spectral_gap"]), ("absolute spectral gap", report["absolute_spectral_gap"]),
             ("relaxation time", report["relaxation_time"]), ("additive gap (P+P*)/2", report["additive_gap"]),
             ("Poincare constant", report["poincare_constant"]), ("conductance Phi*", report["conductance"]),
             ("Kemeny constant", report["kemeny_constant"]),
             (f"t_mix({report['eps']:g}), worst-start TV", report["t_mix"])]
    rows += [(label, report[key]) for key, label in (("acceptance_rate", "MH acceptance at stationarity"),
                                                     ("move_rate", "MH move rate at stationarity")) if key in report]
    g = report.get("paper_g") or {}
    if "rho" in g:
        rows += [("paper G: rho (Thm 5)", g["rho"]), ("  contraction", g["contraction"]),
                 ("  alpha (row sums)", g["alpha"]), ("  Delta", g["delta"]),
                 ("  T* = Delta/4 (Cor 7)", g["contraction_temperature"]),
                 ("  Thm 5 bound on t_mix", g["thm5_t_mix_bound"]),
                 ("  rectangle R max / mean", f"{g['rectangle']['max']:.4g} / {g['rectangle']['mean']:.4g}")]
        if "basin" in g:
            b = g["basin"]
            rows += [("  basin: states, pi(B)", f"{b['states']}, {b['mass']:.4g}"),
                     ("  basin margin gamma", b["gamma"]), ("  Phi(B) exact", b["phi_exact"]),
                     ("  Thm 8 bound on exit prob.", b.get("thm8_escape_bound")),
                     ("  Thm 8 lower bound on t_mix", b.get("thm8_t_mix_lower_bound"))]
    width = max(len(name) for name, _ in rows)
    lines = [report["chain"], ""] + [f"  {name:<{width}}  {_fmt(value)}" for name, value in rows]
    lines += ["", "how each figure was computed:"]
    for key in ("spectral_gap", "absolute_spectral_gap", "additive_gap", "conductance", "kemeny_constant", "t_mix"):
        r = report[key]
        if isinstance(r, Result):
            lines.append(f"  {key}: {r.method}" + (f" -- {r.reason}" if r.reason else ""))
    lines.append(f"  stationary law: {report['stationary']['method']}")
    if report.get("stationary", {}).get("value") is not None:
        pi = np.asarray(report["stationary"]["value"])
        lines += ["", "stationary law:", "  " + np.array2string(pi, precision=6, max_line_width=96)]
    return "\n".join(lines)
