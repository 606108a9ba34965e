"""``mlmix decode``: the exact law of a masked-diffusion / parallel decoder and its distances to the
laws of the other samplers (docs/samplers.md).

Examples::

    mlmix decode --model ising --graph cycle:4 --sampler parallel --k 2      # KL to the joint = sum of TCs
    mlmix decode --model scores --vocab 3 --length 3 --sampler confidence --k 2 --law --json
    mlmix decode --model potts --q 3 --graph path:3 --sampler left-to-right --order "2 1 0"
    mlmix decode --scores table.npz --sampler any-order --top-k 5 --temperature 0.7
    mlmix decode --mlm Exscientia/IgBert --frame "E V Q _ _ S G" --candidates @aa.txt --sampler parallel --k 2
    mlmix decode --model ising --graph cycle:6 --beta 0.8 --schedule 3,2,1 --kl   # exact E KL of random-order blocks
    mlmix decode --model potts --q 3 --graph path:5 --schedule optimal:2 --plot h.png   # the optimal 2-step schedule

The law is computed by dynamic programming over the (|V|+1)^n partial assignments; TV and KL(ref || law)
are given to the random-scan Glauber stationary law, the any-order law, the MH targets exp(-E_logit)/Z and
exp(-E_pll)/Z and, for a joint source (Ising, Potts, clique), the true joint. Temperature divides the
scores first; --top-k / --top-p then truncate and renormalise every conditional, for every sampler.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from mlmix.commands.law_table import format_law_table, law_table
from mlmix.commands.options import (
    check_sampler_options,
)
from mlmix.commands.source_options import (
    add_partial_source_arguments,
    build_partial_source,
    source_inputs,
    validate_partial_source_arguments,
)
from mlmix.errors import InputValueError, MemoryLimitError, ReducibleChainError, UnderflowError
from mlmix.files import dumps_json
from mlmix.limits import ORDER_AVERAGE_LIMIT
from mlmix.plots import FORMATS, plot_entropy_curve, save_figure
from mlmix.provenance import stamp
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels import schedule_kl as skl
from mlmix.theory.kernels.decoder_split import check_split_decoder, decoder_split
from mlmix.theory.kernels.decoders import (
    DECODERS,
    PartialScoreTable,
    decoder_law,
    partial_log_probs,
    partial_space_size,
    tv_kl,
)
from mlmix.theory.kernels.scan_and_mh import ENERGIES, Truncated, energy, target_law
from mlmix.theory.results import EPS, Result
from mlmix.theory.sources.conditionals import Conditionals, LogWeightTable
from mlmix.theory.sources.scorefile import save_scores
from mlmix.validation import check_int, check_output_file


def sampler_options_table() -> dict[str, dict[str, object]]:
    """The options of each ``--sampler``, with their defaults, from the registry
    :data:`~mlmix.theory.kernels.decoders.DECODERS` (the one table of which decoder takes what: an option
    given to a sampler that does not take it is refused, not ignored)."""
    return {name: dict(spec.options) for name, spec in DECODERS.items()}


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``mlmix decode``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("Examples::", 1)[1]
    dec = parser.add_argument_group("decoder")
    dec.add_argument("--sampler", choices=tuple(DECODERS), default="any-order", help="decoder (default any-order)")
    dec.add_argument("--k", type=int, default=None, help="positions per step of parallel / confidence (default 2)")
    dec.add_argument("--order", default=None, help='order of left-to-right, e.g. "2 0 1" (default 0..n-1)')
    dec.add_argument("--schedule", default=None,
                     help='blocks of the schedule sampler, e.g. "0 1 | 2"; with --kl block sizes in a random order, '
                          'e.g. "3,1"; "optimal:K" the optimal K-step block sizes (docs/decoding-theory.md)')
    dec.add_argument("--threshold", type=float, default=None,
                     help="tau of the threshold sampler: keep every draw of probability >= tau (default 0.9)")
    dec.add_argument("--gamma", type=float, default=None,
                     help="entropy budget (nats) of the entropy-bounded sampler: unmask the lowest-entropy positions "
                          "while sum H - max H <= gamma (default 0.1)")
    out = parser.add_argument_group("output")
    out.add_argument("--law", action="store_true",
                     help="print the law on V^n: its most probable states in the alphabet's tokens, with their "
                          "probabilities, and the number and mass of the others (JSON: law_table, and law, the "
                          "whole vector in the state order of mlmix exact --stationary)")
    out.add_argument("--law-rows", type=int, default=20, metavar="N",
                     help="states shown by --law (default 20; 0: all)")
    out.add_argument("--split", action="store_true",
                     help="split KL(pi || law), pi the Glauber stationary law, exactly into a sampler part and an "
                          "incompatibility part (any-order, left-to-right, parallel, schedule, entropy-bounded; "
                          "docs/samplers.md)")
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument("--save-scores", type=Path, default=None, metavar="FILE",
                     help="also write the partial score table of the source (.npz, read back by --scores)")
    add_schedule_kl_arguments(out)
    add_partial_source_arguments(parser)


def _law_error(logw: np.ndarray) -> float:
    """Entrywise relative error of exp(logw - max) / sum: 4 eps (2 + max |logw - max|) + N eps (first order)."""
    finite = logw[np.isfinite(logw)]
    return 4.0 * EPS * (2.0 + float(np.ptp(finite))) + logw.size * EPS


def references(table: PartialScoreTable, joint: Conditionals | None, top_k: int | None,
               top_p: float | None) -> dict[str, tuple[np.ndarray | None, float, str]]:
    """The laws a decoder is compared with: name -> (law or None, entrywise relative error, note)."""
    full = table.full_table()
    if top_k is not None or top_p is not None:
        full = Truncated(full, top_k, top_p)
    refs: dict[str, tuple[np.ndarray | None, float, str]] = {}
    try:
        st = Chain.from_source(full, "glauber").stationary
        rel = st.rel_error if st.rel_error is not None else math.inf
        refs["glauber"] = (np.asarray(st.value), rel, st.method)
    except (ReducibleChainError, UnderflowError, MemoryLimitError, ValueError) as err:
        refs["glauber"] = (None, math.inf, f"not computed: {err}")
    for kind in ENERGIES:
        E = energy(full, kind)
        refs[f"mh-{kind}"] = (target_law(full, kind), _law_error(-E), f"exp(-E_{kind})/Z")
    if joint is not None:
        lw = joint.log_joint()
        refs["joint"] = (np.exp(lw - lw.max()) / np.exp(lw - lw.max()).sum(), _law_error(lw), "the source's joint law")
    return refs


def decode_report(table: PartialScoreTable, sampler: str, *, k: int = 2, order: Any = None, schedule: Any = None,
                  threshold: float | None = None, gamma: float | None = None,
                  top_k: int | None = None, top_p: float | None = None, joint: Conditionals | None = None,
                  log_probs: np.ndarray | None = None, refs: dict | None = None) -> dict:
    """The decoder's exact law, its number of steps, and TV / KL(ref || law) to every reference law."""
    lp = partial_log_probs(table, top_k, top_p) if log_probs is None else log_probs
    d = decoder_law(table, sampler, k=min(k, table.space.length), order=order, schedule=schedule, log_probs=lp,
                    threshold=threshold, gamma=gamma)
    refs = references(table, joint, top_k, top_p) if refs is None else refs
    if sampler != "any-order":
        ao = decoder_law(table, "any-order", log_probs=lp)
        refs = {**refs, "any-order": (ao.law, ao.rel_error, ao.method)}
    distances = {}
    for name, (law, rel, note) in refs.items():
        if law is None:
            distances[name] = {"tv": Result.missing(f"TV to {name}", "-", note),
                               "kl": Result.missing(f"KL({name} || law)", "-", note)}
        else:
            distances[name] = tv_kl(d.law, d.rel_error, law, rel, name, d.log_law)
    return {"sampler": d.details["label"], "steps": d.steps, "states": table.space.size,
            "partial_assignments": partial_space_size(table.space), "method": d.method,
            "law_rel_error": d.rel_error, "law": d.law, "log_law": d.log_law, "distances": distances}


def run(args: argparse.Namespace) -> int:
    """Compute the law and print the table (or JSON with --json); the score file is written last, after
    every option was checked (a refused command leaves no file)."""
    if args.kl or str(args.schedule or "").startswith(OPTIMAL):
        return run_schedule_kl(args)
    check_sampler_options(args, "--sampler", args.sampler, sampler_options_table())
    if args.k is not None:
        check_int(args.k, "--k", minimum=1)
    check_int(args.law_rows, "--law-rows", minimum=0)
    if args.save_scores is not None:
        check_output_file(args.save_scores, "--save-scores", (".npz",))
    validate_partial_source_arguments(args)
    k = 1 if args.k is None else args.k
    if args.split:
        check_split_decoder(args.sampler)
    table, description, joint = build_partial_source(args)
    truncation = "" if args.top_k is None and args.top_p is None else \
        f"; top-k {args.top_k}, top-p {args.top_p} (after the temperature)"
    refs = references(table, joint, args.top_k, args.top_p)
    report = {"source": description + truncation,
              **decode_report(table, args.sampler, k=k, order=args.order, schedule=args.schedule,
                              threshold=args.threshold, gamma=args.gamma, top_k=args.top_k, top_p=args.top_p,
                              joint=joint, refs=refs)}
    if args.split:
        report["split"] = split_report(table, args, refs["glauber"])
    if args.save_scores is not None:
        save_scores(args.save_scores, table, getattr(table, "tokens", None))
    log_law = report.pop("log_law")
    if args.law:
        report["law_table"] = law_table(log_law, table.space, getattr(table, "tokens", None), args.law_rows)
    else:
        report.pop("law")
    print(dumps_json(stamp("decode", report, decode_inputs(args, table, joint))) if args.json else format_report(report))
    return 0


def split_report(table: PartialScoreTable, args: argparse.Namespace, glauber: tuple) -> dict:
    """:func:`~mlmix.theory.kernels.decoder_split.decoder_split` against the Glauber stationary law (or why not)."""
    pi, rel, note = glauber
    if pi is None:
        return {"reference": "glauber", "reason": note}
    k = min(1 if args.k is None else args.k, table.space.length)
    return {"reference": "glauber", **decoder_split(table, args.sampler, pi, rel, k=k, order=args.order,
                                                    schedule=args.schedule, top_k=args.top_k, top_p=args.top_p,
                                                    gamma=args.gamma)}


def decode_inputs(args: argparse.Namespace, table: PartialScoreTable, joint: Conditionals | None) -> dict:
    """The structured inputs of an ``mlmix decode`` report (:func:`mlmix.provenance.inputs`): the decoder as
    ``kernel`` with its own parameters, the temperature used (a score file's own unless overridden) and
    the source as ``mlmix exact`` records it."""
    own = {option: min(args.k, table.space.length) if option == "k" else getattr(args, option)
           for option in DECODERS[args.sampler].options}  # given, or their defaults (sampler_options_table)
    params = {**own, "top_k": args.top_k, "top_p": args.top_p}
    return {"kernel": args.sampler, "temperature": (joint if joint is not None else table).temperature,
            **{key: value for key, value in params.items() if value is not None},
            **source_inputs(args, joint if joint is not None else table)}


#: How a distance is shown (:meth:`Result.__format__`): the value, or its interval; a point interval (an
#: infinite KL) as one number; '-' when nothing is known.
_CELL = ".6g/.3g|-="


def format_report(report: dict) -> str:
    lines = [report["source"], "", f"  decoder          {report['sampler']}", f"  steps            {report['steps']:.6g}",
             f"  states |V|^n     {report['states']}", f"  law rel. error   {report['law_rel_error']:.1e}", "",
             f"  {'reference':<12}{'TV':>14}{'KL(ref || law)':>18}"]
    for name, d in report["distances"].items():
        lines.append(f"  {name:<12}{format(d['tv'], _CELL):>14}{format(d['kl'], _CELL):>18}")
    notes = [f"  {name}: {r.reason}" for name, d in report["distances"].items() for r in d.values() if r.reason]
    if notes:
        lines += ["", "unresolved (interval: not resolved above the floating-point floor):"] + sorted(set(notes))
    lines += ["", f"method: {report['method']}"]
    if "split" in report:
        lines += ["", *format_split(report["split"])]
    if "law_table" in report:
        lines += ["", "law (most probable states first; index: state order of mlmix exact --stationary):",
                  *format_law_table(report["law_table"])]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- schedule theory
#: ``--schedule optimal:K``: the optimal K-step block sizes.
OPTIMAL = "optimal:"


def add_schedule_kl_arguments(group: argparse._ArgumentGroup) -> None:
    """``--kl`` and ``--plot`` of the schedule theory (docs/decoding-theory.md)."""
    group.add_argument("--kl", action="store_true",
                       help="exact expected KL(p || decoder) of --schedule K1,K2,... (block sizes, positions uniform), "
                            "the entropy curve h(m) and the sharp bound ((s_max - 1)/L) sum_i I(X_i; X_-i)")
    group.add_argument("--plot", type=Path, default=None, metavar="FILE",
                       help="with --kl or --schedule optimal:K: draw h(m) and the schedule's steps (.pdf, .svg, .png)")


def _schedule_kl_checks(args: argparse.Namespace) -> int | None:
    """The options of the schedule theory, checked before anything is computed; K for optimal:K."""
    if args.schedule is None:
        raise InputValueError("--kl needs --schedule K1,K2,... (block sizes) or --schedule optimal:K")
    for flag, value in (("--law", args.law), ("--save-scores", args.save_scores), ("--top-k", args.top_k),
                        ("--top-p", args.top_p), ("--k", args.k), ("--order", args.order),
                        ("--threshold", args.threshold), ("--gamma", args.gamma),
                        ("--sampler", args.sampler != "any-order")):
        if value not in (None, False):
            raise InputValueError(f"{flag} does not apply to --kl / --schedule optimal:K")
    if args.plot is not None:
        check_output_file(args.plot, "--plot", tuple(f".{f}" for f in FORMATS))
    validate_partial_source_arguments(args)
    if args.schedule.startswith(OPTIMAL):
        text = args.schedule[len(OPTIMAL):]
        if not text.strip().isdigit():
            raise InputValueError(f"--schedule optimal:K needs a positive integer K, got {args.schedule!r}")
        return check_int(int(text), "--schedule optimal:K", minimum=1)
    return None


def schedule_kl_report(joint: Conditionals, description: str, schedule: str, steps: int | None,
                       law_rel_error: float = 0.0) -> dict:
    """The report of ``--schedule ... --kl`` / ``--schedule optimal:K`` (``docs/schema/decode-schedule.schema.json``):
    the entropy curve of ``joint``, then for block sizes their expected KL (by the identity and, when there are
    at most ORDER_AVERAGE_LIMIT ordered partitions, by averaging decoder laws), the sharp bound and the reported
    Li & Cai constant; for ``steps`` the optimal schedule and the common ones with their gaps."""
    curve = skl.entropy_curve(joint, law_rel_error=law_rel_error)
    L = curve.length
    report: dict[str, Any] = {"source": description, "entropy_curve": curve.as_result(),
                              "mutual_information_sum": curve.mutual_information_sum()}
    if steps is not None:
        if steps > L:
            raise InputValueError(f"--schedule optimal:K needs K <= n = {L}, got {steps}")
        rows = skl.schedule_gaps(curve, steps)
        report["optimal"] = {"steps": steps, "sizes": rows[0]["sizes"], "kl": rows[0]["kl"], "schedules": rows}
        return report
    sizes = skl.check_sizes(schedule, L)
    s = max(sizes)
    by_orders = skl.expected_kl_by_orders(joint, sizes) \
        if math.factorial(L) // math.prod(math.factorial(k) for k in sizes) <= ORDER_AVERAGE_LIMIT else \
        Result.missing("E KL by orders", "-", f"more than {ORDER_AVERAGE_LIMIT:,} ordered block partitions")
    report["schedule"] = {"sizes": list(sizes), "kl": skl.schedule_kl(curve, sizes), "kl_by_orders": by_orders,
                          "sharp_bound": skl.sharp_bound(curve, sizes),
                          "li_cai_reported": (2 ** math.ceil(math.log2(s)) - 1) / L
                          * float(curve.mutual_information_sum()) if s > 1 else 0.0}
    return report


def format_schedule_kl(report: dict) -> str:
    """The text of :func:`schedule_kl_report`."""
    curve = report["entropy_curve"]
    L = len(curve["h"])
    lines = [report["source"], "", "entropy curve h(m) (nats):",
             "  " + " ".join(f"{m:>9d}" for m in range(L)), "  " + " ".join(f"{v:9.6f}" for v in curve["h"]),
             f"  each entry within {curve['abs_error']:.1e}; {curve['method']}",
             f"  sum_i I(X_i; X_-i) = L (h(0) - h(L-1))   {format(report['mutual_information_sum'], _CELL)}", ""]
    if "optimal" in report:
        opt = report["optimal"]
        lines += [f"optimal {opt['steps']}-step schedule (block sizes) {opt['sizes']}: E KL = {format(opt['kl'], _CELL)}",
                  "", f"  {'schedule':<18}{'block sizes':<24}{'E KL(p || q)':>16}{'gap':>14}{'ratio':>9}"]
        for row in opt["schedules"]:
            shown = "random composition" if row["sizes"] is None else str(row["sizes"])
            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.4g}"
            lines.append(f"  {row['schedule']:<18}{shown:<24}{format(row['kl'], _CELL):>16}"
                         f"{format(row['gap'], _CELL):>14}{ratio:>9}")
    else:
        sch = report["schedule"]
        kl, bound, li_cai = sch["kl"], sch["sharp_bound"], sch["li_cai_reported"]
        lines += [f"block sizes {sch['sizes']} (positions uniform at random):",
                  f"  E KL(p || q)  by the identity   {format(kl, _CELL)}",
                  f"  E KL(p || q)  by orders         {format(sch['kl_by_orders'], _CELL)}   (decoder laws of the joint's "
                  "exact conditionals, averaged over every ordered partition)",
                  f"  sharp bound ((s_max-1)/L) sum I {format(bound, _CELL)}",
                  f"  (2^ceil(log2 s_max) - 1)/L sum I {li_cai:.6g}   (a reported reading of Li & Cai Thm 1's "
                  "constant, not confirmed from the paper)"]
        if kl.resolved and float(kl) > 0:
            lines.append(f"  looseness: sharp {float(bound) / float(kl):.4g}, reported Li & Cai reading "
                         f"{li_cai / float(kl):.4g}")
    lines += ["", "method: E KL = sum_t sum_{j<k_t} [h(r_t) - h(r_t + j)], r_t = k_1 + ... + k_(t-1) "
              "(chain rule over uniformly random blocks; docs/decoding-theory.md)"]
    return "\n".join(lines)


def run_schedule_kl(args: argparse.Namespace) -> int:
    """``--schedule K1,K2,... --kl`` and ``--schedule optimal:K``: the entropy curve of the joint (or, for
    conditionals without one, of their Glauber stationary law, named as the reference) and the exact expected
    KL of random-order blocks (:mod:`mlmix.theory.kernels.schedule_kl`); text, or JSON with --json."""
    steps = _schedule_kl_checks(args)
    table, description, joint = build_partial_source(args)
    rel, given_source = 0.0, joint if joint is not None else table
    if joint is None:
        law, rel, note = references(table, None, None, None)["glauber"]
        if law is None:
            raise InputValueError(f"the conditionals have no joint and no Glauber stationary law: {note}")
        joint = LogWeightTable.from_probabilities(table.space, law)
        description += "; reference law: the Glauber stationary law of the conditionals (they have no joint)"
    report = schedule_kl_report(joint, description, args.schedule, steps, rel)
    if args.plot is not None:
        sizes = report["optimal"]["sizes"] if steps is not None else report["schedule"]["sizes"]
        save_figure(plot_entropy_curve(report["entropy_curve"]["h"], tuple(sizes),
                                       title=f"h(m), blocks {list(sizes)}").figure, args.plot)
    if args.json:
        given = {"kernel": "random-order-schedule", "temperature": given_source.temperature,
                 "schedule": args.schedule, **source_inputs(args, given_source)}
        print(dumps_json(stamp("decode-schedule", report, given)))
    else:
        print(format_schedule_kl(report) + (f"\nfigure: {args.plot}" if args.plot is not None else ""))
    return 0


def format_split(split: dict) -> list[str]:
    """The lines of the sampler/incompatibility split (``--split``)."""
    head = "split of KL(pi || law), pi the Glauber stationary law (docs/samplers.md):"
    if "reason" in split:
        return [head, f"  not computed: {split['reason']}"]
    rows = [("KL(pi || law)", "kl"), ("sampler part", "sampler"), ("incompatibility part", "incompatibility"),
            ("mixture gain", "mixture_gain")]
    return [head, *[f"  {label:<22}{format(split[key], _CELL):>16}" for label, key in rows],
            f"  KL = sampler + incompatibility - mixture gain, over "
            f"{'one adaptive rule (its blocks along the paths of pi)' if split.get('adaptive') else str(split['schedules']) + ' schedule(s)'}; "
            f"identity residual {split['identity_residual']:.1e}"]
