"""``mlmix exact``: analyse a sampler's chain on a built-in source, or a transition matrix from a file.

Examples::

    mlmix exact                                          # Ising on cycle:6, beta 0.5, Glauber
    mlmix exact --beta 10 --json                         # metastable: gap 1.416e-18 to full accuracy
    mlmix exact --model potts --q 3 --graph grid:2x3 --beta 0.8 --json
    mlmix exact --model scores --vocab 3 --length 5 --temperature 0.5 --seed 0 --basin "0 0 * * *"
    mlmix exact --model clique --length 6 --clique-size 4 --coupling 0.3 --field 0.1 --kernel k-gibbs --k 2
    mlmix exact --matrix P.npz --stationary --json
    mlmix exact --beta 2 --basins "0 0 0 0 0 0" "1 1 1 1 1 1"   # transition paths between the two ground states
    mlmix exact --matrix P.npz --basins 0,1 7                    # sets as state indices
    mlmix exact --model scores --temperature 0.3 --basins metastable:0 metastable:1
    mlmix exact --model scores --save-matrix P.npz       # write the kernel that was analysed

Every figure comes with its method and accuracy; a figure that cannot be resolved at the accuracy
target is printed as an interval with the reason, never as roundoff. For a Glauber chain of a source
(Ising, Potts, score table, clique) the output also holds paper G's constants of that source: rho and
the contraction verdict, Delta and Corollary 7's temperature, Theorem 5's bound next to the exact
t_mix, the rectangle statistic R, and with ``--basin`` the margin and Theorem 8's bounds. With
``--basins A B`` it reports transition path theory between two disjoint sets of states
(:mod:`mlmix.theory.chain.transition_paths`): the rates and mean first passage times A -> B and B -> A,
the total reactive flux, the fractions of time last spent in A and in B, and the top channels.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mlmix.commands.constants_view import certified_lines
from mlmix.commands.options import parse_state_set
from mlmix.commands.source_options import add_source_arguments, build_chain, exact_inputs, validate_source
from mlmix.errors import InputValueError
from mlmix.files import dumps_json
from mlmix.limits import MIXING_LIMIT, REPORT_MIXING_LIMIT
from mlmix.plots import report_figure, save_figure
from mlmix.progress import Progress
from mlmix.provenance import stamp
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.metastable import metastable_sets
from mlmix.theory.local.constants import paper_constants, paper_constants_seconds, parse_basin
from mlmix.theory.results import REPORT, Result, report_keys
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.scorefile import save_scores
from mlmix.validation import check_basins, check_eps, check_int, check_output_file

#: Channels of the pathway decomposition that ``--basins`` lists (the share they leave is reported).
TOP_PATHWAYS = 5

#: States of a basin listed by name in the report (its size is always given).
LISTED_STATES = 8


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
    out.add_argument("--basins", nargs=2, default=None, metavar=("A", "B"),
                     help="transition path theory between two disjoint sets: state indices \"0,1,2\", "
                          "\"metastable:K\" (the K-th metastable set), \"pcca:K/M\" (the K-th of M PCCA+ sets) or a "
                          "pattern of n tokens or symbols and '*'")
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
    if not chain.holds_matrix and args.save_matrix is not None:
        raise InputValueError("--save-matrix needs a matrix: the chain is held as a matrix-free operator "
                              "(use --representation sparse)")
    if source is None:
        for flag, given, why in (("--save-scores", args.save_scores, "a source of conditionals, not a matrix file"),
                                 ("--basin", args.basin, "a built-in source (it is a pattern over V^n)")):
            if given is not None:
                raise InputValueError(f"{flag} needs {why}")
    if args.basin is None:
        return None
    if source.truncated:
        raise InputValueError("--basin is not an option of a truncated source (--top-k / --top-p): paper G's "
                              "constants, which it feeds, are computed for the source itself")
    return parse_basin(args.basin, source.space.vocab_size, source.space.length)


def _basins(args: argparse.Namespace, chain: Chain, source: Conditionals | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The two sets of ``--basins`` as masks (None without it), checked before anything is computed."""
    if args.basins is None:
        return None
    tokens = None if source is None else [_token(source, k) for k in range(source.space.vocab_size)]
    length = None if source is None else source.space.length
    found: list[np.ndarray] = []

    def metastable() -> list[np.ndarray]:
        if not chain.holds_matrix:
            raise InputValueError("--basins metastable:K needs a matrix: the chain is held as a matrix-free operator "
                                  "(use --representation sparse)")
        if not found:
            found.extend(s.states for s in metastable_sets(chain))
        return found

    def pcca(m: int) -> list[np.ndarray]:
        return chain.pcca(m).sets

    A, B = (parse_state_set(text, chain.n_states, tokens=tokens, length=length, metastable=metastable, pcca=pcca)
            for text in args.basins)
    return check_basins(A, B, chain.n_states)


def _token(source: Conditionals, symbol: int) -> str:
    """A symbol by its alphabet token (a masked LM's or a score file's), else its index."""
    tokens = getattr(source, "tokens", None) or getattr(getattr(source, "base", source), "tokens", None)
    return str(tokens[symbol]) if tokens is not None else str(symbol)


def _label(source: Conditionals | None, state: int) -> str:
    """A state by its sequence of tokens (a chain of a source) or its index."""
    if source is None:
        return str(state)
    return " ".join(_token(source, int(k)) for k in source.space.decode(int(state)))


def basins_report(chain: Chain, A: np.ndarray, B: np.ndarray, source: Conditionals | None) -> dict:
    """Transition path theory between A and B (:meth:`Chain.transition_paths`): the sets, F, the rates and
    mean first passage times both ways, the fractions of time last in A and in B, and the top channels."""
    tp = chain.transition_paths(A, B)
    paths = tp.pathways(TOP_PATHWAYS)
    st = chain.stationary

    def described(S: np.ndarray) -> dict:
        idx = np.flatnonzero(S)
        mass = float(np.asarray(st.value)[S].sum())
        pi_S = (Result.approximate("pi(S)", mass, st.rel_error, st.method) if st.rel_error is not None else
                Result.interval("pi(S)", 0.0, 1.0, st.method, "the stationary law has no entrywise bound"))
        return {"size": int(idx.size), "states": [_label(source, i) for i in idx[:LISTED_STATES]], "mass": pi_S}

    q = tp.forward_committor
    return {"A": described(A), "B": described(B), "total_flux": tp.total_flux, "rate_AB": tp.rate,
            "rate_BA": tp.rate_back, "mfpt_AB": tp.mfpt, "mfpt_BA": tp.mfpt_back,
            "time_last_in_A": tp.details["mass_A_last"], "time_last_in_B": tp.details["mass_B_last"],
            "committor": {"method": q.method, "rel_error": q.rel_error, "backward_method": tp.backward_committor.method,
                          "backward_rel_error": tp.backward_committor.rel_error},
            "pathways": [{"states": [_label(source, i) for i in path], "share": float(share)}
                         for path, share in zip(paths.details["paths"], paths.value)],
            "pathways_remainder": paths.details["remainder"], "pathways_method": paths.method}


def _has_zeros(source: Conditionals) -> bool:
    """Whether a score table has zero conditionals (-inf scores)."""
    return source.has_table and not np.isfinite(source.table).all()


def run(args: argparse.Namespace) -> int:
    """Analyse the chain and print a table (or JSON with --json)."""
    _validate(args)
    chain, title, source = build_chain(args)
    basin = _check_with_chain(args, chain, source)
    basins = _basins(args, chain, source)
    if args.save_matrix is not None:  # the first write: every option was checked above
        chain.save(args.save_matrix)
    if args.save_scores is not None:
        save_scores(args.save_scores, getattr(source, "base", source), getattr(source, "tokens", None))
    summary = chain.summary(args.eps, include_stationary=args.stationary, mixing_limit=args.mixing_limit,
                            progress=not args.no_progress)
    report = stamp("exact", {"chain": title, **summary}, exact_inputs(args, source))
    spec = chain.kernel_spec  # None for a matrix file
    single_site = spec is not None and spec.single_site_heat_bath  # paper G's chain P_T
    if single_site and not source.truncated and "reason" not in report:
        if _has_zeros(source):
            report["paper_g"] = {"reason": "the source has zero conditionals (-inf scores); paper G's constants "
                                           "assume positive ones"}
        else:
            phase = "paper G constants"
            with Progress(f"{phase} of {chain.name}", [(phase, paper_constants_seconds(source.space))],
                          cost=f"{chain.n_states:,} states, n = {source.space.length}",
                          enabled=not args.no_progress) as bar, bar.phase(phase):
                report["paper_g"] = paper_constants(source, chain, args.eps, basin)
            if getattr(args, "mlm", None) is not None and source.space.length >= 2:
                report["model_constants"] = _model_constants(source)
    if spec is not None and spec.figures is not None:
        report.update(spec.figures(source, chain.kernel_options))
    if basins is not None and "reason" not in report:
        report["basins"] = basins_report(chain, *basins, source)
    if args.plot is not None:  # what the chain answers is drawn, what it does not is named on its panel
        save_figure(report_figure(chain, source if single_site else None, title=title, eps=args.eps), args.plot)
    if args.json:
        print(dumps_json(report))
    else:
        print(format_report(report))
    return 0


def _model_constants(table: Conditionals) -> dict:
    """``--mlm``: :func:`~mlmix.empirical.model_constants.constants_report.model_constants` by enumeration of the
    exact table already tabulated (0 more passes), its brackets charged the scores' stated accuracy, the threshold
    with the head bound of the model the table came from (``masked_lm``): the JSON form of ``mlmix estimate
    --certify``'s ``certified``."""
    # deferred: the model stack is already loaded for --mlm; the toy sources never import it
    from mlmix.empirical.model_constants.constants_report import model_constants
    from mlmix.empirical.model_constants.head_bound import head_bound_upper

    mlm = getattr(table, "masked_lm", None)
    head = head_bound_upper if mlm is None else (lambda _table: head_bound_upper(mlm))
    return model_constants(table, how="enumerate", budget=None, folder=None, head_bound=head).as_dict()


def _fmt(value: object) -> str:
    """A cell of the table: a Result through :meth:`Result.__format__` (value and accuracy, or the interval)."""
    if isinstance(value, Result):
        return format(value, ".6g/.4g|a-")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return "-" if value is None else str(value)


def _basin_rows(b: dict) -> list[tuple[str, object]]:
    """The table rows of ``--basins``: the sets, the TPT figures and the top channels with their shares."""
    def named(S: dict) -> str:
        more = f" (+{S['size'] - len(S['states'])} more)" if S["size"] > len(S["states"]) else ""
        return f"{S['size']} state(s): " + "; ".join(S["states"]) + more

    rows = [("TPT: set A", named(b["A"])), ("  set B", named(b["B"])), ("  pi(A)", b["A"]["mass"]),
            ("  pi(B)", b["B"]["mass"]), ("  total reactive flux F", b["total_flux"]), ("  rate k_AB", b["rate_AB"]),
            ("  rate k_BA", b["rate_BA"]), ("  mean first passage A -> B", b["mfpt_AB"]),
            ("  mean first passage B -> A", b["mfpt_BA"]), ("  time last in A", b["time_last_in_A"])]
    rows += [(f"  channel {k + 1} ({p['share']:.4g} of F)", " -> ".join(f"[{s}]" for s in p["states"]))
             for k, p in enumerate(b["pathways"])]
    if b["pathways_remainder"] > 0:
        rows.append(("  other channels", f"{b['pathways_remainder']:.4g} of F"))
    return rows


def format_report(report: dict) -> str:
    """A readable table of the report, then each figure's method and, for intervals, the reason."""
    rows = [("states", report["n_states"]), ("irreducible", report["irreducible"])]
    if "reason" in report:
        return "\n".join([report["chain"], "", *(f"  {k:<28}{_fmt(v)}" for k, v in rows), "", report["reason"]])
    rows += [("period", report["period"]), ("reversible", report["reversible"])]
    rows += [(q.label.format(eps=report["eps"]), report[q.key]) for q in REPORT if q.label and q.key in report]
    rows += [(label, report[key]) for key, label in (("acceptance_rate", "MH acceptance at stationarity"),
                                                     ("move_rate", "MH move rate at stationarity")) if key in report]
    g = report.get("paper_g") or {}
    if "rho" in g and "model_constants" in report:  # a masked LM: the brackets are printed below, as by estimate
        rows += [("paper G: Thm 5 bound on t_mix", g["thm5_t_mix_bound"]),
                 ("  rectangle R mean", f"{g['rectangle']['mean']:.4g}")]
    elif "rho" in g:
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
    if "basins" in report:
        rows += _basin_rows(report["basins"])
    width = max(len(name) for name, _ in rows)
    lines = [report["chain"], ""] + [f"  {name:<{width}}  {_fmt(value)}" for name, value in rows]
    if "model_constants" in report:
        view = certified_lines(report["model_constants"])
        lines += ["", "paper G's constants of the model, " + view[0], *view[1:]]
    lines += ["", "how each figure was computed:"]
    for key in report_keys(explained=True):
        r = report[key]
        if isinstance(r, Result):
            lines.append(f"  {key}: {r.method}" + (f" -- {r.reason}" if r.reason else ""))
    lines.append(f"  stationary law: {report['stationary']['method']}")
    if report.get("stationary", {}).get("value") is not None:
        pi = np.asarray(report["stationary"]["value"])
        lines += ["", "stationary law:", "  " + np.array2string(pi, precision=6, max_line_width=96)]
    return "\n".join(lines)
