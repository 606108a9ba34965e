"""``mlmix estimate``: bound constants of a masked language model (paper G), estimated from sampled
contexts and, when |V|^n is small (the shipped default model), computed exactly next to them.

    mlmix estimate                                  # the shipped default model, table
    mlmix estimate --json --convergence             # + exact values and convergence with N
    mlmix estimate --model bert-base-uncased --length 16 --contexts 64 --device cuda:0 --json
    mlmix estimate --model ./my-model --candidates "the a of ! ." --length 8
    mlmix estimate --model sceptr:tiny --frame "C A S S _ _ _ E Q F F"    # SCEPTR from its PyPI wheel
    mlmix estimate --model ./my-model --length 5 --certify --budget 2h --json   # + brackets over every context

A hub id is only looked up offline when HF_HUB_OFFLINE is set; give a local folder (config,
tokenizer files, *.safetensors) otherwise.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from mlmix.commands.constants_view import certified_lines
from mlmix.commands.options import add_frame_arguments, add_model_arguments, add_threads_argument
from mlmix.commands.source_options import masked_lm_class
from mlmix.empirical.model_constants import estimated_constants as est
from mlmix.files import atomic_write_text, dumps_json
from mlmix.limits import CONSTANTS_LIMIT
from mlmix.progress import say as progress_say
from mlmix.provenance import stamp
from mlmix.theory.results import Result
from mlmix.theory.sources.contexts import TopK
from mlmix.validation import check_int, parse_duration

DEFAULT_LENGTH = 16


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``mlmix estimate``."""
    model = parser.add_argument_group("model")
    model.add_argument("--model", default=None, metavar="ID_OR_PATH",
                       help="Hugging Face id or local folder of a masked LM, or sceptr[:VARIANT] (SCEPTR from "
                            "its PyPI wheel; default: the shipped model)")
    model.add_argument("--causal", action="store_true",
                       help="the model is an autoregressive LM: use the compatible causal control (R = 0)")
    model.add_argument("--temperature", type=float, default=1.0, help="T > 0 (default 1)")
    add_model_arguments(model)
    add_threads_argument(model)
    model.add_argument("--compile", action="store_true", help="torch.compile the model")
    frame = parser.add_argument_group("frame (fixed context, free positions, alphabet)")
    add_frame_arguments(frame)
    sample = parser.add_argument_group("contexts and statistics")
    sample.add_argument("--contexts", type=int, default=None,
                        help=f"number of sampled contexts (default: as many as the --budget allows, at most "
                             f"{est.DEFAULT_CONTEXTS})")
    sample.add_argument("--budget", default="10m", metavar="DURATION",
                        help="time budget for the forward passes (e.g. 90s, 10m, 1.5h; default 10m): chooses the "
                             "number of contexts and whether to tabulate the exact values")
    sample.add_argument("--text", type=Path, default=None,
                        help="draw contexts as windows of this text file instead of uniformly from V^n")
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--rectangles", type=int, default=est.DEFAULT_RECTANGLES)
    sample.add_argument("--top-k", type=int, default=est.DEFAULT_TOP_K,
                        help="rectangle replacements from the model's own top-k (0: uniform)")
    sample.add_argument("--replacements", type=int, default=None,
                        help="replacements b per site for rho/Delta: the model's top-k (0: all symbols; "
                             f"default: all when |V| <= {est.ALL_REPLACEMENTS_UP_TO}, else "
                             f"top-{est.DEFAULT_REPLACEMENT_TOP_K})")
    sample.add_argument("--drift-token", action="append", default=None, metavar="TOKEN",
                        help="token(s) counted by the drift statistic (default: '!' when in the support)")
    sample.add_argument("--drift-k", type=int, default=None, help="states with exactly k such tokens (default n // 2)")
    sample.add_argument("--drift-states", type=int, default=est.DEFAULT_DRIFT_STATES)
    sample.add_argument("--state", default=None, metavar="TEXT", help="report the local margins of this state")
    out = parser.add_argument_group("exact values and output")
    out.add_argument("--exact", choices=("auto", "yes", "no"), default="auto",
                     help="exact values over all contexts (auto: when |V|^n <= --exact-limit and the exact table is "
                          "cached or fits in the budget); a masked LM's table is cached and then also gives the "
                          "sampled estimates, without forward passes")
    out.add_argument("--exact-limit", type=int, default=CONSTANTS_LIMIT)
    out.add_argument("--max-passes", type=int, default=None,
                     help="a hard cap on every forward pass the command makes (rate measurement, exact table, "
                          "sampled contexts and --certify: with --certify the estimate takes at most half)")
    out.add_argument("--certify", action="store_true",
                     help="add certified brackets [lower, upper] of rho, alpha, Delta and T* over every context and "
                          "Theorem 5's verdict: exact by streamed enumeration when its passes fit --max-passes and "
                          "--budget (checkpointed in the cache, resumable), else sampled lower and trivial upper ends")
    out.add_argument("--convergence", action="store_true", help="estimates against the number of contexts")
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument("--output", type=Path, default=None, help="also write the JSON report to this file")
    out.add_argument("--no-records", action="store_true", help="leave the per-rectangle records out of the JSON")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")


def load_source(args: argparse.Namespace):
    """The conditionals object described by the model and frame arguments."""
    # deferred: torch and transformers load only when the command runs
    from mlmix.empirical.models.causal import CausalLMConditionals
    from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR

    model = args.model if args.model is not None else str(DEFAULT_MODEL_DIR)
    length = args.length
    if length is None and args.frame is None:
        # deferred: torch and transformers load only when the command runs
        from mlmix.empirical.models.shipped_model import law_spec

        length = law_spec(model)["length"] if (Path(model) / "law.json").is_file() else DEFAULT_LENGTH
    cls = CausalLMConditionals if args.causal else masked_lm_class(model)
    return cls.from_pretrained(model, length, trust_remote_code=args.trust_remote_code,
                               allow_pickle=args.allow_pickle, frame=args.frame, candidates=args.candidates,
                               prefix=args.prefix, suffix=args.suffix, temperature=args.temperature,
                               device=args.device, dtype=args.dtype, batch_size=args.batch_size, compile=args.compile)


def _contexts(source, args: argparse.Namespace) -> int | np.ndarray:
    if args.text is None:
        return args.contexts
    symbols = source.encode(args.text.read_text(), skip_outside=True)
    return est.windows(symbols, source.space.length, args.contexts, np.random.default_rng(args.seed))


def _drift_symbols(source, args: argparse.Namespace) -> list[int] | None:
    if args.drift_token is not None:
        return source.encode(args.drift_token).tolist()
    try:
        return source.encode(["!"]).tolist()
    except ValueError:  # no '!' in the support: no default drift statistic
        return None


def _recorded_law(args: argparse.Namespace, source):
    """The true law of a model trained by :func:`mlmix.empirical.models.shipped_model.train` (its folder has law.json)."""
    # deferred: torch and transformers load only when the command runs
    from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR
    from mlmix.empirical.models.shipped_model import load_law

    folder = Path(args.model) if args.model is not None else DEFAULT_MODEL_DIR
    if args.causal or args.candidates or args.prefix or args.suffix or args.frame \
            or not (folder / "law.json").is_file():
        return None
    law = load_law(folder)
    return law.at_temperature(source.temperature) if law.space == source.space else None


def plan(source, args: argparse.Namespace, replacements, drift: list[int] | None, say, budget: float) -> dict:
    """Where the numbers come from and how many contexts, within ``--budget``.

    A masked LM whose chain is enumerable (|V|^n <= --exact-limit) is read from its cached exact
    table, or tabulated when the exact values are asked for and its n |V|^(n-1) passes fit in the
    budget (always with ``--exact yes``); the table then gives the exact values and the sampled
    estimates alike, without further passes.
    Otherwise the model is queried: the number of contexts is the largest (at most the default)
    whose passes (:func:`mlmix.empirical.model_constants.estimated_constants.query_rows`) fit in the budget at the rate measured
    on a first small batch, and the cost is printed before starting. Under ``--max-passes`` (the source's
    ledger cap, :class:`~mlmix.empirical.models.mlm.PassLedger`) they also fit its share of the passes left:
    all of them, or half with ``--certify`` (the rest is the certificate's).
    """
    # deferred: torch and transformers load only when the command runs
    from mlmix.empirical.models.tabulate import (
        cached_table,
        cost_line,
        format_duration,
        passes_needed,
        tabulate,
    )

    space = source.space
    ledger = source.ledger
    enumerable = space.size <= args.exact_limit
    want_exact = {"auto": enumerable, "yes": True, "no": False}[args.exact]
    if want_exact and not enumerable:
        raise ValueError(f"|V|^n = {space.vocab_size}^{space.length} = {space.size} states exceeds the exact "
                         f"limit of {args.exact_limit}; raise the limit (--exact-limit) or skip the exact values")
    out = {"budget_s": budget, "exact": want_exact, "source": "model", "note": None}
    rule = est.default_replacements(source) if replacements == "auto" else replacements
    is_mlm = source.masked_lm
    table = cached_table(source) if is_mlm and enumerable else None
    rate = None
    if want_exact and table is None and is_mlm:
        rate = _measured_rate(source)
        passes = passes_needed(space)
        if args.exact == "yes" or (passes / rate <= budget and passes <= ledger.left()):
            table = tabulate(source, max_passes=None if args.max_passes is None else int(ledger.left()),
                             progress=not args.no_progress, log=say)
        else:
            out["exact"] = False
            over = (f"the budget of {format_duration(budget)}" if passes / rate > budget else
                    f"the {int(ledger.left()):,} passes --max-passes leaves")
            out["note"] = (f"exact values skipped: the table needs {cost_line(passes, rate, source.device)}, over "
                           f"{over} (--exact yes tabulates it once, cached)")
            say(out["note"])
    if table is not None:
        out.update(source="exact table", table=table.describe()["table"], passes=0,
                   contexts=args.contexts or est.DEFAULT_CONTEXTS)
        say("estimates" + (" and exact values" if out["exact"] else "") +
            " read from the exact table: no further forward pass")
        return {**out, "conditionals": table.at_temperature(source.temperature)}
    rate = rate if rate is not None else _measured_rate(source)
    share = ledger.left() / 2 if args.certify else ledger.left()

    def rows(contexts: int) -> int:
        sampled = est.query_rows(space, contexts, rectangles=args.rectangles, top_k=args.top_k or None,
                                 replacements=rule, drift_states=None if drift is None else args.drift_states,
                                 state=args.state is not None,
                                 with_convergence=args.convergence)
        return sampled + (passes_needed(space) if out["exact"] else 0)

    contexts = args.contexts
    if contexts is None:
        if rows(1) / rate > budget:
            raise ValueError(f"one context already needs {cost_line(rows(1), rate, source.device)}, over the "
                             f"budget of {format_duration(budget)}: raise --budget, shorten --length or restrict "
                             f"--candidates")
        contexts = max(c for c in range(1, est.DEFAULT_CONTEXTS + 1) if rows(c) / rate <= budget
                       and rows(c) <= share or c == 1)
    if rows(contexts) > share:
        raise ValueError(f"{contexts} context(s) need {rows(contexts):,} forward passes, over the "
                         f"{int(share):,} that --max-passes leaves the estimate"
                         f"{' (half the passes left: the rest is --certify' + chr(39) + 's)' if args.certify else ''}"
                         ": raise --max-passes or lower --contexts / --rectangles")
    if args.batch_size is None and source.device.type == "cpu":  # about one batch per second: a live ETA
        source.batch_size = int(min(source.batch_size, max(8, rate)))
    out.update(contexts=contexts, passes=rows(contexts), passes_per_second=rate)
    return {**out, "conditionals": source}


def _measured_rate(source) -> float:
    """Passes per second (:func:`~mlmix.empirical.models.tabulate.measure_rate`), or unlimited when the pass cap
    leaves too few passes for the measurement to matter (the cap then binds before the budget)."""
    # deferred: torch loads only when the command runs
    from mlmix.empirical.model_constants.streamed_constants import RATE_QUERIES
    from mlmix.empirical.models.tabulate import measure_rate

    return measure_rate(source) if source.ledger.left() >= 4 * RATE_QUERIES else float("inf")


def run(args: argparse.Namespace) -> int:
    """Load the model, plan within the budget, estimate, print a table or JSON; returns the exit status."""
    # deferred: transformers loads only when the command runs
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    start = time.perf_counter()
    if args.contexts is not None:
        check_int(args.contexts, "--contexts", minimum=1)
    if args.max_passes is not None:
        check_int(args.max_passes, "--max-passes", minimum=1)
    budget = parse_duration(args.budget)
    source = load_source(args)
    source.ledger.cap = args.max_passes  # every forward pass of the command counts against it
    replacements = "auto" if args.replacements is None else (None if args.replacements == 0 else
                                                           TopK(args.replacements))
    state = source.encode(args.state) if args.state is not None else None
    say = (lambda text: None) if args.no_progress else progress_say
    drift = _drift_symbols(source, args)
    route = plan(source, args, replacements, drift, say, budget)
    args.contexts = route["contexts"]
    report = est.estimate(
        route.pop("conditionals"), contexts=_contexts(source, args), seed=args.seed, rectangles=args.rectangles,
        top_k=args.top_k or None, replacements=replacements, drift_symbols=drift,
        drift_k=args.drift_k, drift_states=args.drift_states, state=state, exact=route["exact"],
        exact_limit=args.exact_limit, with_convergence=args.convergence, records=not args.no_records,
        progress=not args.no_progress, rate=route.get("passes_per_second"))
    # deferred: torch and transformers load only when the command runs
    from mlmix.empirical.models.tabulate import weights_hash

    d = source.describe()
    given = {"source": {"kind": "causal-lm" if args.causal else "mlm", "model": source.name,
                        "architecture": d.get("architecture"), "text": None if args.text is None else str(args.text)},
             "kernel": "glauber", "temperature": source.temperature, "seed": args.seed, "frame": d.get("frame"),
             "model_hash": weights_hash(source.model)}
    report = stamp("estimate", {"model": source.name, **d, **report, "plan": route}, given)
    law = _recorded_law(args, source) if report["exact"] is not None else None
    if law is not None:  # the shipped model: the exact constants of the law it was trained on
        report["true_law"] = est.constants(law, None, np.random.default_rng(args.seed), records=False,
                                           drift_symbols=drift, drift_k=args.drift_k)
    if args.certify:
        report["certified"] = _certified(source, args, say, budget, report if route["source"] == "model" else None)
    report["forward_passes"] = {"used": source.ledger.used, "cap": args.max_passes}
    report["seconds"] = time.perf_counter() - start  # loading included
    text = dumps_json(report)
    if args.output is not None:
        atomic_write_text(args.output, text + "\n")
    print(text if args.json else format_table(report))
    return 0


def _certified(source, args: argparse.Namespace, say, budget: float, sampled: dict | None) -> dict:
    """``--certify``: the brackets of :func:`mlmix.empirical.model_constants.certify.certify` within the passes
    --max-passes leaves and --budget, checkpointed in the cache when the source is a masked LM; the lower ends
    the larger of the certificate's and the estimate's ``sampled`` maxima (both evaluated pairs: lower bounds)."""
    # deferred: the model stack loads only when the command runs
    from mlmix.empirical.model_constants.constants_report import model_constants

    known = None if sampled is None else {
        "rho_lower": sampled["rho_ij"], "delta_lower": sampled["delta_ij"],
        "max_abs_score": source.ledger.max_abs_score, "method": f"the estimate's {sampled['n_contexts']} sampled contexts",
        "rectangle": {"max": (sampled.get("rectangle") or {}).get("max") or 0.0,
                      "rectangles": (sampled.get("rectangle") or {}).get("count") or 0,
                      "max_abs_score": source.ledger.max_abs_score}}
    left = source.ledger.left()
    result = model_constants(source, budget=budget, max_passes=None if args.max_passes is None else int(left),
                             seed=args.seed, progress=not args.no_progress, log=say, known_lower=known)
    return result.as_dict()


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, Result):  # exact: the value; sampled supremum: its lower end, marked ">="
        return format(value, ".4g|>")
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_table(report: dict) -> str:
    """Estimate and exact value side by side for the main constants."""
    ex = report.get("exact") or {}
    law = report.get("true_law") or {}
    rows = [
        ("rho (Thm 5 aggregate)", "rho"), ("alpha (Dobrushin row sum)", "alpha"),
        ("Delta aggregate", "delta"), ("T* (Cor 7)", "contraction_temperature"),
        ("R mean", ("rectangle", "mean")), ("R median", ("rectangle", "median")), ("R q90", ("rectangle", "q90")),
        ("R max", ("rectangle", "max")), ("R count", ("rectangle", "count")),
        ("drift min", ("drift", "min")), ("drift median", ("drift", "median")),
        ("trap gamma (best margin)", ("trap", "gamma")), ("local modes", ("trap", "local_modes")),
        ("contexts", "n_contexts"),
    ]

    def get(d: dict, key):
        if isinstance(key, tuple):
            inner = d.get(key[0]) or {}
            return inner.get(key[1])
        return d.get(key)

    lines = [f"model {report['model']} ({report['architecture']}), |V| = {report['vocab_size']}, "
             f"n = {report['length']}, T = {report['temperature']:g}, device {report['device']}, "
             f"{report['seconds']:.1f} s",
             f"{'quantity':<28}{'estimate':>14}{'exact' if ex else '':>14}{'true law' if law else '':>14}"]
    lines += [f"{name:<28}{_fmt(get(report, key)):>14}{_fmt(get(ex, key)) if ex else '':>14}"
              f"{_fmt(get(law, key)) if law else '':>14}" for name, key in rows]
    for name, part in (("R mean", report.get("rectangle")), ("drift mean", report.get("drift"))):
        ci = (part or {}).get("mean_ci") or {}
        if ci.get("lower") is not None:
            lines.append(f"{name} {ci['level']:.0%} confidence interval [{ci['lower']:.4g}, {ci['upper']:.4g}] "
                         f"({ci['method']})")
    lines.append(f"contraction: {report['contraction']}" + (f"; exact: {ex['contraction']}" if ex else ""))
    lines.append(f"note: {report['lower_bounds']}")
    route = report.get("plan") or {}
    if route.get("source") == "exact table":
        lines.append("source: the exact table of the model's conditionals "
                     f"({'read from the cache' if route['table'].get('from_cache') else 'tabulated now'}); "
                     "no forward pass for the estimates")
    elif route:
        lines.append(f"source: {route['passes']:,} forward passes of the model")
    if route.get("note"):
        lines.append(route["note"])
    cert = report.get("certified")
    if cert is not None:
        lines += certified_lines(cert)
    passes = report.get("forward_passes")
    if passes is not None:
        cap = passes["cap"]
        lines.append(f"forward passes: {passes['used']:,}" + ("" if cap is None else f" of the cap {cap:,}"))
    if "margins" in report:
        m = report["margins"]
        lines.append(f"state {' '.join(m.get('tokens', map(str, m['state'])))}: gamma {m['gamma']:.4g}, "
                     f"all argmax {m['all_argmax']}, escape bound {_fmt(m['escape_bound'])}")
    for row in report.get("convergence", []):
        lines.append(f"N = {row['n_contexts']:>6}: rho >= {row['rho']:.4f}, T* {row['contraction_temperature']:.4f}, "
                     f"R mean {row['rectangle_mean']:.4f}")
    return "\n".join(lines)
