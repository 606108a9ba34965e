"""The report of a ``mlmix verify`` run: the table of verdicts, the list of catalogued results, the
per-result instance statistics and the JSON records, shared by the command and by user test suites
(:func:`mlmix.verify.user.assert_holds`)."""

from __future__ import annotations

import json
import shutil
import textwrap
from typing import Any

from mlmix.files import jsonable
from mlmix.verify.verdicts import PAPERS, Entry, NotCheckable, Theorem, TheoremReport

#: Exit status of ``mlmix verify``, in order of precedence.
EXIT_CODES = {"fails": 1, "error": 3, "blind spot": 4}

#: Keys of every record of ``mlmix verify --json`` (``examples``, ``holds``, ``tightness_median`` and
#: ``tightness_max`` are kept from the earlier format: instances, status == "holds", and the median and
#: worst of ``tightness``).
JSON_KEYS = ("id", "paper", "number", "statement", "status", "reason", "instances", "nontrivial", "regimes",
             "tightness", "weakened", "weakened_by", "weakened_parts", "min_slack", "counterexample", "stored",
             "attained", "refuted_in", "conventions", "errors", "blind_spots", "examples", "holds", "tightness_median",
             "tightness_max")


def report_record(report: TheoremReport) -> dict:
    t = report.tightness or {}
    record = {key: getattr(report, key) for key in JSON_KEYS[:21] if key != "instances"}
    record.update(instances=report.examples, examples=report.examples, holds=report.holds,
                  tightness_median=t.get("median"), tightness_max=t.get("worst"))
    return jsonable({key: record[key] for key in JSON_KEYS})


def dumps_compact(value: Any, indent: int = 1, width: int = 160) -> str:
    """Strict JSON text (non-finite floats as null, as :func:`mlmix.files.dumps_json`) that stays
    readable for instances: a list of scalars (a vector, a matrix row) is one line, a matrix one row
    per line, and a dict of scalars one line when it fits in ``width`` characters."""
    def flat(v: Any) -> bool:
        children = v.values() if isinstance(v, dict) else v
        return all(not isinstance(c, (list, dict)) or not c for c in children)

    def render(v: Any, level: int) -> str:
        if not isinstance(v, (list, dict)) or not v:
            return json.dumps(v, allow_nan=False)
        if flat(v):
            line = json.dumps(v, allow_nan=False)
            if isinstance(v, list) or len(line) + indent * level <= width:
                return line
        pad, end = " " * (indent * (level + 1)), " " * (indent * level)
        if isinstance(v, dict):
            items, brackets = [f"{json.dumps(k)}: {render(c, level + 1)}" for k, c in v.items()], "{}"
        else:
            items, brackets = [render(c, level + 1) for c in v], "[]"
        return brackets[0] + "\n" + ",\n".join(pad + i for i in items) + "\n" + end + brackets[1]

    return render(jsonable(value), 0)


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
                    dumps_compact(r.counterexample) if r.counterexample else "(none found by the "
                    "search on this budget; the stored counterexamples below fail)"]
            for s in r.stored:
                flag = "" if s["as_expected"] else "  <-- NOT AS EXPECTED"
                out.append(f"  stored: {s['description']}: conclusion fails = {s['conclusion_fails']}{flag}")
    for r in reports:
        for e in r.errors:
            notes = [f"on {e['more'] + 1} instances"] if e.get("more") else []
            notes += [] if debug else ["traceback: --debug"]
            out += ["", f"{r.id} ({r.number}) ERROR in {e['where']}: {e['error']}"
                        + (f" ({'; '.join(notes)})" if notes else "")]
            if e.get("instance") is not None:
                shown = e["instance"] if isinstance(e["instance"], str) else dumps_compact(e["instance"])
                label = "first instance: " if e.get("more") else "instance: "
                out.append("  " + label + shown.replace("\n", "\n  "))
            if debug:  # the frames; the exception's own line is the ERROR line above
                out.append("\n".join(e["traceback"].rstrip().splitlines()[:-1]))
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


def exit_code(reports: list[TheoremReport]) -> int:
    """The exit status of a run (:data:`EXIT_CODES`): fails, then error, then blind spot, else 0."""
    if any(r.unexpected for r in reports):
        return EXIT_CODES["fails"]
    if any(r.crashed for r in reports):
        return EXIT_CODES["error"]
    if any(r.blind_spots for r in reports):
        return EXIT_CODES["blind spot"]
    return 0
