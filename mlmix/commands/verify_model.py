"""``mlmix verify --mlm MODEL --frame ...``: which of paper G's results apply to a given model's frame,
and whether their conclusions hold on its exact chain.

The frame's conditionals are tabulated exactly (:func:`mlmix.empirical.models.tabulate.source_from_args`, the
options and cache of ``mlmix exact --mlm``), the Glauber chain is analysed exactly
(:class:`mlmix.theory.chain.markov_chain.Chain`), and the local constants come from
:func:`mlmix.theory.local.constants.paper_constants` (every context, up to 2^18 states) or, above that,
rho, T* and the rectangle statistic max R from the certified brackets of
:func:`mlmix.empirical.model_constants.constants_report.model_constants` (streamed over every context of the table: exact, in the
memory of a block; R = 0 within its accuracy on every rectangle certifies compatibility). Only where the
streamed R could not be computed does R come from sampled contexts (:func:`mlmix.theory.local.constants.paper_constants`
over them: a sampled R > 0 certifies incompatibility, a sampled R = 0 establishes nothing). For each result:

* **applies** (its hypotheses hold, certified by the accuracy of the constants), **does not apply**
  (they fail, and why), or **unknown at this size** (not decidable from what can be computed here);
* where it applies, its bound next to the exact chain quantity and whether the conclusion **holds**,
  is **violated** or is **undecided** (the certified intervals overlap: :mod:`mlmix.testing`).

Results: Theorem 5 (rho < 1 => t_mix(eps) <= ceil(n log(n/eps) / (1 - rho))); Corollary 7 (T > T* =
Delta/4 => rho <= T*/T and t_mix(eps) <= ceil(n log(n/eps) / (1 - T*/T))); Theorem 8 for a basin named
by ``--basin`` (Assumption 1 with margin gamma => Phi(B) <= (|V|-1) e^{-gamma/T}, and, when
mu_T(B) <= 1/2, t_mix(1/4) >= e^{gamma/T} / (4(|V|-1))); the rectangle test (Theorem 3 / Proposition 4:
R = 0 on every rectangle <=> compatible conditionals <=> reversible chain).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from mlmix.commands.options import add_threads_argument, parse_token_basin
from mlmix.commands.source_options import add_mlm_arguments, mlm_source_from_args, source_inputs
from mlmix.empirical.model_constants.constants_report import model_constants
from mlmix.empirical.model_constants.estimated_constants import DEFAULT_RECTANGLES, DEFAULT_TOP_K, uniform_contexts
from mlmix.files import dumps_json, jsonable
from mlmix.limits import CONSTANTS_LIMIT, REPORT_MIXING_LIMIT
from mlmix.provenance import stamp
from mlmix.testing import UndecidedError, assert_at_least, assert_at_most
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.local.constants import paper_constants
from mlmix.theory.results import Result
from mlmix.validation import check_eps, check_int, check_temperature

APPLIES, NOT_APPLY, UNKNOWN = "applies", "does not apply", "unknown at this size"

#: Sampled contexts for the local constants of frames above the exact limit.
SAMPLED_CONTEXTS = 1024

#: Tolerance of "R = 0" in the rectangle test: R is a sum of four score differences / T, each rounded
#: (float32 model scores are stored as float64 without further rounding).
R_ZERO = 1e-9


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``--mlm`` options of ``mlmix verify``: those of ``mlmix exact --mlm`` (frame, alphabet, model,
    cache) plus the length, temperature, threads, t_mix level and basin they rely on."""

    group = parser.add_argument_group("a model's frame (--mlm): which of paper G's results apply to it")
    group.add_argument("--length", type=int, default=None, help="n, the free positions (with --frame: its blanks)")
    group.add_argument("--temperature", type=float, default=None, help="temperature T > 0 (default 1)")
    add_threads_argument(group)
    group.add_argument("--eps", type=float, default=0.25, help="TV level of t_mix (default 0.25)")
    group.add_argument("--basin", default=None, metavar="PATTERN",
                       help="a basin for Theorem 8: n alphabet tokens or '*' (free), e.g. \"G G * *\"")
    add_mlm_arguments(parser)


def _compare(exact: Result, relation: str, bound: float) -> str:
    """'holds' / 'violated' / 'undecided' for exact relation bound, from the certified interval."""
    try:
        (assert_at_most if relation == "<=" else assert_at_least)(exact, bound)
        return "holds"
    except UndecidedError:
        return "undecided"
    except AssertionError:
        return "violated"


def _entry(id: str, number: str, status: str, why: str, **fields: Any) -> dict:
    return {"id": id, "number": number, "status": status, "why": why, **fields}


def _thm5(c: dict, exact: bool, n: int, eps: float, t_mix: Result) -> dict:
    rho = c["rho"]
    if exact:
        if rho.upper < 1:
            bound = math.ceil(n / (1 - rho.value) * math.log(n / eps))
            return _entry("glauber.thm5", "Theorem 5", APPLIES, f"rho = {rho:.6g} < 1 (all contexts)",
                          rho=rho, bound=bound, exact=t_mix, conclusion=_compare(t_mix, "<=", bound),
                          conclusion_statement=f"exact t_mix({eps:g}) = {_fmt(t_mix)} <= ceil(n log(n/eps)/(1 - rho)) "
                                               f"= {bound}")
        if rho.lower >= 1:
            return _entry("glauber.thm5", "Theorem 5", NOT_APPLY, f"rho = {rho:.6g} >= 1 (all contexts): "
                          "no contraction certificate at this temperature", rho=rho, exact=t_mix)
        return _entry("glauber.thm5", "Theorem 5", UNKNOWN, f"rho = {rho:.6g} is within its accuracy of 1",
                      rho=rho, exact=t_mix)
    if rho.lower >= 1:
        return _entry("glauber.thm5", "Theorem 5", NOT_APPLY, f"sampled rho >= {rho.lower:.6g} >= 1, a lower "
                      "bound of rho: the hypothesis rho < 1 fails", rho=rho, exact=t_mix)
    return _entry("glauber.thm5", "Theorem 5", UNKNOWN, f"sampled rho >= {rho.lower:.6g} < 1 is only a lower "
                  "bound of rho (the frame is too large for every context)", rho=rho, exact=t_mix)


def _cor7(c: dict, exact: bool, n: int, eps: float, T: float, t_mix: Result) -> dict:
    t_star = c["t_star"]
    base = {"temperature": T, "t_star": t_star}
    if T <= t_star.lower:
        return _entry("glauber.cor7", "Corollary 7", NOT_APPLY, f"T = {T:g} <= T* = Delta/4 = {t_star.lower:.6g}"
                      + ("" if exact else " (a sampled lower bound of T*)"), **base, exact=t_mix)
    if not exact:
        return _entry("glauber.cor7", "Corollary 7", UNKNOWN, f"T = {T:g} > sampled T*_hat = {t_star.lower:.6g}, "
                      "only a lower bound of T* (the frame is too large for every context)", **base, exact=t_mix)
    if T <= t_star.upper:
        return _entry("glauber.cor7", "Corollary 7", UNKNOWN, "T is within the accuracy of T*", **base, exact=t_mix)
    ratio = t_star.value / T
    bound = math.ceil(n * math.log(n / eps) / (1 - ratio))
    rho_ok = _compare(c["rho"], "<=", ratio * (1 + 1e-12))
    mix = _compare(t_mix, "<=", bound)
    conclusion = "holds" if rho_ok == mix == "holds" else ("violated" if "violated" in (rho_ok, mix) else "undecided")
    return _entry("glauber.cor7", "Corollary 7", APPLIES, f"T = {T:g} > T* = Delta/4 = {t_star:.6g}", **base,
                  rho=c["rho"], rho_bound=ratio, bound=bound, exact=t_mix, conclusion=conclusion,
                  conclusion_statement=f"rho = {_fmt(c['rho'])} <= T*/T = {ratio:.6g} ({rho_ok}) and exact "
                                       f"t_mix({eps:g}) = {_fmt(t_mix)} <= ceil(n log(n/eps)/(1 - T*/T)) = {bound} ({mix})")


def _thm8(basin_report: dict | None, exact: bool, t_mix_quarter: Result | None) -> dict:
    if basin_report is None:
        return _entry("glauber.thm8", "Theorem 8", UNKNOWN, "the basin margin needs every context of the frame "
                      "(too large here)")
    b = basin_report
    if not b["assumption_1"]:
        return _entry("glauber.thm8", "Theorem 8", NOT_APPLY, f"Assumption 1 fails on the basin (margin gamma = "
                      f"{b['gamma']:.6g}; exit-causing sites must hold an argmax with gamma > 0)",
                      basin_states=b["states"], gamma=b["gamma"], phi_exact=b["phi_exact"])
    phi, escape = b["phi_exact"], b["thm8_escape_bound"]
    out = _entry("glauber.thm8", "Theorem 8", APPLIES, f"Assumption 1 holds with margin gamma = {b['gamma']:.6g}",
                 basin_states=b["states"], mass=b["mass"], gamma=b["gamma"], bound=escape, exact=phi,
                 conclusion=_compare(phi, "<=", escape),
                 conclusion_statement=f"exact Phi(B) = {_fmt(phi)} <= (|V|-1) e^(-gamma/T) = {escape:.6g}")
    lower = b.get("thm8_t_mix_lower_bound")
    if lower is not None and t_mix_quarter is not None:
        mix = _compare(t_mix_quarter, ">=", lower)
        out.update(mixing_bound=lower, t_mix_quarter=t_mix_quarter,
                   conclusion_statement=out["conclusion_statement"] + f" ({out['conclusion']}); mu(B) = "
                   f"{b['mass']:.4g} <= 1/2 so exact t_mix(1/4) = {_fmt(t_mix_quarter)} >= e^(gamma/T)/(4(|V|-1)) "
                   f"= {lower:.6g} ({mix})",
                   conclusion="holds" if out["conclusion"] == mix == "holds"
                   else ("violated" if "violated" in (out["conclusion"], mix) else "undecided"))
    elif lower is None:
        out["conclusion_statement"] += f"; mu(B) = {b['mass']:.4g} > 1/2: the mixing bound does not apply"
    return out


def _rectangle(rect: dict, exact: bool, reversible: bool | None) -> dict:
    R = float(rect["max"]) if rect.get("max") is not None else None
    if R is None:
        return _entry("glauber.rectangle", "Theorem 3 / Proposition 4 (rectangle test)", UNKNOWN, "no rectangle")
    compatible = R <= max(R_ZERO, rect.get("accuracy", 0.0))
    if not exact and compatible:
        return _entry("glauber.rectangle", "Theorem 3 / Proposition 4 (rectangle test)", UNKNOWN,
                      f"R = 0 on the {rect.get('count')} sampled rectangles does not make every rectangle 0",
                      r_max=R, reversible=reversible)
    verdict = "compatible: the chain is reversible" if compatible else \
        f"R max = {R:.6g} > 0 {'(all rectangles)' if exact else '(sampled)'}: incompatible, the chain is not reversible"
    consistent = None if reversible is None else (reversible == compatible)
    return _entry("glauber.rectangle", "Theorem 3 / Proposition 4 (rectangle test)", APPLIES, verdict,
                  r_max=R, r_mean=rect.get("mean"), exact=reversible,
                  conclusion=None if consistent is None else ("holds" if consistent else "violated"),
                  conclusion_statement=f"R = 0 on every rectangle <=> the exact chain is reversible (exact chain: "
                                       f"{'reversible' if reversible else 'not reversible'})")


def model_report(source: Any, eps: float = 0.25, basin: np.ndarray | None = None, seed: int = 0,
                 mixing_limit: int | None = None) -> dict:
    """The per-result report of the module docstring for a tabulated source (an MLMTable or any
    source of conditionals), with the exact chain quantities beside each bound."""

    space = source.space
    n, T = space.length, source.temperature
    chain = Chain.from_source(source)
    summary = chain.summary(eps, mixing_limit=REPORT_MIXING_LIMIT if mixing_limit is None else mixing_limit)
    t_mix = summary["t_mix"]
    exact = space.size <= CONSTANTS_LIMIT
    if exact:
        g = paper_constants(source, chain, eps, basin)
        method = "every context of V^n (exact local constants)"
        c = {"rho": g["rho"], "t_star": g["contraction_temperature"], "rectangle": g["rectangle"]}
        sampled, rect_exact = False, True
    else:
        # rho, T* and R: certified brackets, streamed over every context (memory of a block, not of V^n);
        # R from sampled contexts only where the streamed R is not computed (a sampled R > 0 still
        # certifies incompatibility)
        cert = model_constants(source, seed=seed, budget=None, folder=None)  # the report of estimate --certify
        rng = np.random.default_rng(seed)
        g = paper_constants(source, chain, eps, basin, contexts=uniform_contexts(space, SAMPLED_CONTEXTS, rng),
                            rng=rng, rectangles=DEFAULT_RECTANGLES, top_k=DEFAULT_TOP_K)
        exact = cert.method == "enumeration"  # rho and T*: the basin stays sampled
        R = cert.rectangle
        rect_exact = exact and R is not None and "accuracy" in R.details  # every rectangle, streamed
        rect = ({"max": R.details["R"], "accuracy": R.details["accuracy"], "count": R.details["count"]}
                if rect_exact else g["rectangle"])
        c = {"rho": cert.rho, "t_star": cert.contraction_temperature, "rectangle": rect}
        sampled = True
        method = (f"every context of V^n, streamed (rho, T*: {cert.method}); "
                  + ("every rectangle, streamed, for the rectangle statistic; " if rect_exact else
                     f"{SAMPLED_CONTEXTS} sampled contexts for the rectangle statistic, ") + f"seed {seed}")
    basin_report = g.get("basin")
    quarter = t_mix if eps == 0.25 else chain.mixing_time(0.25) if chain.n_states <= REPORT_MIXING_LIMIT else None
    results = [_thm5(c, exact, n, eps, t_mix), _cor7(c, exact, n, eps, T, t_mix)]
    if basin is not None:
        results.append(_thm8(basin_report, exact and not sampled, quarter))
    results.append(_rectangle(c["rectangle"], rect_exact, summary.get("reversible")))
    chain_facts = {k: summary.get(k) for k in ("n_states", "irreducible", "reversible", "absolute_spectral_gap",
                                               "additive_gap", "t_mix")}
    return {"constants": method, "eps": eps, "temperature": T, "chain": chain_facts, "results": results}


def _fmt(v: Any) -> str:
    """A Result's value, or its certified interval when unresolved ('?' for an unknown side):
    :meth:`Result.__format__`."""
    if isinstance(v, Result):
        return format(v, ".6g/.4g")
    if isinstance(v, float):
        return f"{v:.6g}"
    return "-" if v is None else str(v)


def format_model_report(title: str, report: dict) -> str:
    lines = [title, f"local constants from {report['constants']}; t_mix at eps = {report['eps']:g}", ""]
    c = report["chain"]
    lines.append("exact chain: " + ", ".join(f"{k} = {_fmt(c[k])}" for k in c))
    lines.append("")
    for r in report["results"]:
        lines.append(f"{r['id']:<19} {r['number']:<45} {r['status'].upper()}: {r['why']}")
        if r.get("conclusion") is not None:
            lines.append(f"{'':19} conclusion {r['conclusion'].upper()}: {r['conclusion_statement']}")
        elif "conclusion_statement" in r:
            lines.append(f"{'':19} {r['conclusion_statement']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """``mlmix verify --mlm``: exit 1 when a result that applies has a conclusion violated on the exact chain."""

    check_eps(args.eps, "--eps")
    if args.temperature is not None:
        check_temperature(args.temperature, "--temperature")
    if args.threads is not None:
        check_int(args.threads, "--threads", minimum=1)
    if args.length is not None:
        check_int(args.length, "--length", minimum=1)
    table, title = mlm_source_from_args(args)
    basin = None
    if args.basin is not None:
        basin = parse_token_basin(args.basin, list(table.tokens), table.space.length)
    report = model_report(table, args.eps, basin, args.seed)
    if args.json:
        given = {"kernel": "glauber", "temperature": table.temperature, "seed": args.seed, "eps": args.eps,
                 "basin": args.basin, **source_inputs(args, table)}
        print(dumps_json(stamp("verify-mlm", jsonable({"frame": title, **report}), given), indent=1))
    else:
        print(format_model_report(title, report))
    return 1 if any(r.get("conclusion") == "violated" for r in report["results"]) else 0
