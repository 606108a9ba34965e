"""``mlmix verify``: search every catalogued result for counterexamples and print what was found.

Each theorem of :mod:`mlmix.verify.theorems` is checked on Hypothesis instances that satisfy its
hypotheses (``--examples`` per theorem times its budget; ``--thorough`` searches five times more and
also searches every declared hypothesis violation); a violation is shrunk to the smallest
counterexample found. Results that are not checkable numerically are listed with the reason.

Per result: **status** ("holds", "fails", "known false", "error", "not checkable"), **instances** tried and how
many were **non-trivial** (the two sides not equal by construction), **weakened** ("caught" when the
bound scaled by 1/2 (upper) or 2 (lower, identities) is violated on some instance, or when a stored
counterexample breaking a hypothesis makes the conclusion fail; "missed" otherwise), and
**tightness** (bound / exact for upper bounds, exact / bound for lower bounds, >= 1, 1 = tight) over
the instances where both sides are resolved above their accuracy; the others are counted "at the
floating-point floor". ``--stats`` adds the range of the instances (n, |V|, T, states), how many
chains were non-reversible, and the share of the instances in each regime (n >= 4 and |V| >= 3, state
counts, and the flags of the strategies such as edgeless graphs or k = n). ``--list`` prints every result
with its full statement without running anything.

Exit status (:data:`EXIT_CODES`): 0 when everything holds; 1 when a result fails unexpectedly (a
documented refutation does not count, but a stored counterexample that stops failing does); 3 when a
check crashed (status "error": a crash is never a counterexample nor a verdict; ``--debug`` (the common
option) prints the tracebacks); 4 when the check has a blind spot: a weakened bound was violated on no instance, or an
attaining instance is looser than its recorded looseness factor (a constant of the check became
looser). The first that applies in this order wins; 2 is bad input.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap

from tqdm import tqdm

from mlmix.files import dumps_json, jsonable
from mlmix.verify.core import PAPERS, Entry, NotCheckable, Theorem, TheoremReport
from mlmix.verify.runner import PROFILES, run_one, select

#: Exit status of ``mlmix verify``, in order of precedence.
EXIT_CODES = {"fails": 1, "error": 3, "blind spot": 4}

#: Keys of every record of ``mlmix verify --json`` (``examples``, ``holds``, ``tightness_median`` and
#: ``tightness_max`` are kept from the earlier format: instances, status == "holds", and the median and
#: worst of ``tightness``).
JSON_KEYS = ("id", "paper", "number", "statement", "status", "reason", "instances", "nontrivial", "regimes",
             "tightness", "weakened", "weakened_by", "weakened_parts", "min_slack", "counterexample", "stored",
             "attained", "refuted_in", "conventions", "errors", "blind_spots", "examples", "holds", "tightness_median",
             "tightness_max")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--examples", type=int, default=None,
                        help="instances per theorem before its budget (default 100; 500 with --thorough)")
    parser.add_argument("--thorough", action="store_true",
                        help="five times more instances, and search every hypothesis violation")
    parser.add_argument("--theorem", action="append", metavar="ID",
                        help="result id or id prefix such as 'glauber.' or 'glauber.thm8' (repeatable; default all)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of the table")
    parser.add_argument("--list", action="store_true", help="list the results (ids, numbers, statements) without running")
    parser.add_argument("--stats", action="store_true",
                        help="also print, per result, the instances tried, their range (n, |V|, T, states) and the "
                             "share of each regime")


def report_record(report: TheoremReport) -> dict:
    t = report.tightness or {}
    record = {key: getattr(report, key) for key in JSON_KEYS[:21] if key != "instances"}
    record.update(instances=report.examples, examples=report.examples, holds=report.holds,
                  tightness_median=t.get("median"), tightness_max=t.get("worst"))
    return jsonable({key: record[key] for key in JSON_KEYS})


def list_record(entry: Entry) -> dict:
    """What ``--list --json`` prints for one result (nothing is run)."""
    out = {"id": entry.id, "paper": entry.paper, "number": entry.number, "statement": entry.statement,
           "checkable": entry.checkable, "conventions": entry.conventions}
    if isinstance(entry, NotCheckable):
        out.update(reason=entry.reason, covered_by=list(entry.covered_by))
    if isinstance(entry, Theorem):
        out.update(known_false=entry.refuted_in is not None, refuted_in=entry.refuted_in,
                   stored_counterexamples=[{"description": c.description, "dropped": c.dropped}
                                           for c in entry.counterexamples],
                   attained_by=[a.description for a in entry.attaining])
    return out


def _width() -> int:
    return max(80, shutil.get_terminal_size((120, 24)).columns)


def format_list(entries: list[Entry]) -> str:
    """Every result with its full statement, wrapped (never truncated)."""
    width = _width()
    out, paper = [], None
    for e in entries:
        if e.paper != paper:
            paper = e.paper
            out += ["", f"== {PAPERS[paper]} ({paper}) =="]
        status = "not checkable" if not e.checkable else ("known false" if e.refuted_in else "checked")
        out += ["", f"{e.id}  [{e.number}]  ({status})"]
        out += textwrap.wrap(e.statement, width, initial_indent="    ", subsequent_indent="    ")
        if isinstance(e, NotCheckable):
            out += textwrap.wrap("why not checked: " + e.reason, width, initial_indent="    ",
                                 subsequent_indent="      ")
            if e.covered_by:
                out.append(f"      covered by: {', '.join(e.covered_by)}")
        if e.conventions:
            out += textwrap.wrap("convention: " + e.conventions, width, initial_indent="    ",
                                 subsequent_indent="      ")
        for a in getattr(e, "attaining", ()):
            out += textwrap.wrap("attained by: " + a.description, width, initial_indent="    ",
                                 subsequent_indent="      ")
    return "\n".join(out[1:])


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _tightness(report: TheoremReport) -> str:
    t = report.tightness
    if not t:
        return "-"
    floor = f", {t['at_floor']} at floor" if t["at_floor"] else ""
    if not t["resolved"]:
        return f"at the floating-point floor ({t['at_floor']})"
    return f"{t['median']:.3g} (best {t['best']:.3g}){floor}"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(h), *(len(row[k]) for row in rows)) if rows else len(h) for k, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return [line(header), line(["-" * w for w in widths])] + [line(row) for row in rows]


def format_table(reports: list[TheoremReport], debug: bool = False) -> str:
    header = ("id", "result", "status", "instances", "non-trivial", "weakened", "tightness median (best)")
    rows = [(r.id, r.number, r.status, str(r.examples) if r.status != "not checkable" else "-",
             str(r.nontrivial) if r.status != "not checkable" else "-", r.weakened or "-", _tightness(r))
            for r in reports]
    out = _table(header, rows)
    for r in reports:
        if r.status in ("fails", "known false"):
            known = f" as documented in {r.refuted_in}" if r.status == "known false" else " UNEXPECTEDLY"
            out += ["", f"{r.id} ({r.number}) FAILS{known}; smallest counterexample found:",
                    dumps_json(r.counterexample, indent=1) if r.counterexample else "(none found by the "
                    "search on this budget; the stored counterexamples below fail)"]
            for s in r.stored:
                flag = "" if s["as_expected"] else "  <-- NOT AS EXPECTED"
                out.append(f"  stored: {s['description']}: conclusion fails = {s['conclusion_fails']}{flag}")
    for r in reports:
        for e in r.errors:
            out += ["", f"{r.id} ({r.number}) ERROR in {e['where']}: {e['error']}"
                        + (f" (and {e['more']} more)" if e.get("more") else "")
                        + ("" if debug else " (traceback: --debug)")]
            if debug:
                out.append(e["traceback"].rstrip())
        for b in r.blind_spots:
            out.append(f"{r.id} ({r.number}) BLIND SPOT: {b}")
    counts = {s: sum(r.status == s for r in reports)
              for s in ("holds", "fails", "known false", "error", "not checkable")}
    blind = [r.id for r in reports if r.blind_spots]
    out += ["", f"{counts['holds']} hold, {counts['known false']} known false, {counts['not checkable']} not "
                f"checkable (reasons: --list), {counts['fails']} unexpected failures, {counts['error']} errors "
                f"(crashes); blind spots (weakened bound missed or attaining instance looser than recorded): "
                f"{', '.join(blind) if blind else 'none'}.",
            "Full statements: mlmix verify --list; per-result ranges: --stats; everything: --json."]
    return "\n".join(out)


def _range(r: list | None, fmt: str = "{}") -> str:
    if r is None:
        return "-"
    lo, hi = (fmt.format(v) for v in r)
    return lo if lo == hi else f"{lo}..{hi}"


def format_stats(reports: list[TheoremReport]) -> str:
    header = ("id", "instances", "non-trivial", "n", "|V|", "T", "states", "non-reversible", "spectral gap")
    rows = []
    for r in reports:
        if r.status == "not checkable":
            continue
        g = r.regimes
        nonrev = "-" if g.get("nonreversible") is None else str(g["nonreversible"])
        rows.append((r.id, str(r.examples), str(r.nontrivial), _range(g.get("n")), _range(g.get("vocab")),
                     _range(g.get("temperature"), "{:.3g}"), _range(g.get("states")), nonrev,
                     _range(g.get("gap"), "{:.2g}")))
    out = _table(header, rows)
    out += ["", "Share of the instances per regime (%):"]
    for r in reports:
        shares = r.regimes.get("shares") if r.status != "not checkable" else None
        if shares:
            out.append(f"  {r.id}: " + ", ".join(f"{k} {v:g}" for k, v in shares.items()))
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    profile = PROFILES["thorough" if args.thorough else "default"]
    examples = profile["examples"] if args.examples is None else args.examples
    if examples < 1:
        raise ValueError(f"--examples must be >= 1, got {examples}")
    entries = select(args.theorem)
    if args.list:
        if args.json:
            print(dumps_json([jsonable(list_record(e)) for e in entries], indent=1))
        else:
            print(format_list(entries))
        return 0
    reports = []
    for entry in tqdm(entries, desc="verify", unit="result", file=sys.stderr, disable=None):
        reports.append(run_one(entry, examples, args.seed, violations=profile["violations"]))
    if args.json:
        print(dumps_json([report_record(r) for r in reports], indent=1))
    else:
        print(format_table(reports, debug=getattr(args, "debug", False)))
        if args.stats:
            print("\n" + format_stats(reports))
    return exit_code(reports)


def exit_code(reports: list[TheoremReport]) -> int:
    """The exit status of a run (:data:`EXIT_CODES`): fails, then error, then blind spot, else 0."""
    if any(r.unexpected for r in reports):
        return EXIT_CODES["fails"]
    if any(r.crashed for r in reports):
        return EXIT_CODES["error"]
    if any(r.blind_spots for r in reports):
        return EXIT_CODES["blind spot"]
    return 0
