"""``mlmix decode``: the exact law of a masked-diffusion / parallel decoder and its distances to the
laws of the other samplers (docs/samplers.md).

Examples::

    mlmix decode --model ising --graph cycle:4 --sampler parallel --k 2      # KL to the joint = sum of TCs
    mlmix decode --model scores --vocab 3 --length 3 --sampler confidence --k 2 --law --json
    mlmix decode --model potts --q 3 --graph path:3 --sampler left-to-right --order "2 1 0"
    mlmix decode --scores table.npz --sampler any-order --top-k 5 --temperature 0.7
    mlmix decode --mlm Exscientia/IgBert --frame "E V Q _ _ S G" --candidates @aa.txt --sampler parallel --k 2

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
from mlmix.errors import MemoryLimitError, ReducibleChainError, UnderflowError
from mlmix.files import dumps_json
from mlmix.provenance import stamp
from mlmix.theory.chain.markov_chain import Chain
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
from mlmix.theory.sources.conditionals import Conditionals
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
    dec.add_argument("--schedule", default=None, help='blocks of the schedule sampler, e.g. "0 1 | 2"')
    dec.add_argument("--threshold", type=float, default=None,
                     help="tau of the threshold sampler: keep every draw of probability >= tau (default 0.9)")
    out = parser.add_argument_group("output")
    out.add_argument("--law", action="store_true",
                     help="print the law on V^n: its most probable states in the alphabet's tokens, with their "
                          "probabilities, and the number and mass of the others (JSON: law_table, and law, the "
                          "whole vector in the state order of mlmix exact --stationary)")
    out.add_argument("--law-rows", type=int, default=20, metavar="N",
                     help="states shown by --law (default 20; 0: all)")
    out.add_argument("--split", action="store_true",
                     help="split KL(pi || law), pi the Glauber stationary law, exactly into a sampler part and an "
                          "incompatibility part (any-order, left-to-right, parallel, schedule; docs/samplers.md)")
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument("--save-scores", type=Path, default=None, metavar="FILE",
                     help="also write the partial score table of the source (.npz, read back by --scores)")
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
                  threshold: float | None = None,
                  top_k: int | None = None, top_p: float | None = None, joint: Conditionals | None = None,
                  log_probs: np.ndarray | None = None, refs: dict | None = None) -> dict:
    """The decoder's exact law, its number of steps, and TV / KL(ref || law) to every reference law."""
    lp = partial_log_probs(table, top_k, top_p) if log_probs is None else log_probs
    d = decoder_law(table, sampler, k=min(k, table.space.length), order=order, schedule=schedule, log_probs=lp,
                    threshold=threshold)
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
                              threshold=args.threshold, top_k=args.top_k, top_p=args.top_p, joint=joint, refs=refs)}
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
                                                    schedule=args.schedule, top_k=args.top_k, top_p=args.top_p)}


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


def format_split(split: dict) -> list[str]:
    """The lines of the sampler/incompatibility split (``--split``)."""
    head = "split of KL(pi || law), pi the Glauber stationary law (docs/samplers.md):"
    if "reason" in split:
        return [head, f"  not computed: {split['reason']}"]
    rows = [("KL(pi || law)", "kl"), ("sampler part", "sampler"), ("incompatibility part", "incompatibility"),
            ("mixture gain", "mixture_gain")]
    return [head, *[f"  {label:<22}{format(split[key], _CELL):>16}" for label, key in rows],
            f"  KL = sampler + incompatibility - mixture gain, over {split['schedules']:,} schedule(s); "
            f"identity residual {split['identity_residual']:.1e}"]
