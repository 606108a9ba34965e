"""``mlmix verify``: search every registered theorem for counterexamples and print the table.

Each theorem of :mod:`mlmix.verify.theorems` is checked on ``--examples`` Hypothesis instances that
satisfy its hypotheses; a violation is shrunk to the smallest counterexample found. Columns: id,
statement, examples tried, holds, minimum slack (how far the tightest instance was from failing),
median and worst tightness (bound / exact for upper bounds, exact / bound for lower bounds: the
looseness factor, >= 1), and the smallest counterexample. Exit status 1 when any theorem fails,
except a theorem whose published statement is documented as refuted (``Theorem.refuted_in``): its
counterexample is still searched for and printed, marked "NO (known)".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import numpy as np
from tqdm import tqdm

from mlmix.verify.core import TheoremReport
from mlmix.verify.runner import run_one, select

JSON_KEYS = ("id", "paper", "examples", "holds", "min_slack", "tightness_median", "tightness_max", "counterexample",
             "refuted_in")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--examples", type=int, default=100, help="instances per theorem (default 100)")
    parser.add_argument("--theorem", action="append", metavar="ID",
                        help="theorem id or id prefix such as 'glauber.' or 'glauber.thm8' (repeatable; default all)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of the table")


def jsonable(value: Any) -> Any:
    """Plain JSON values: numpy scalars and arrays unwrapped, non-finite floats as strings."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else str(v)
    if value is None or isinstance(value, str):
        return value
    return repr(value)


def report_record(report: TheoremReport) -> dict:
    record = {key: getattr(report, key) for key in JSON_KEYS}
    record.update(number=report.number, statement=report.statement)
    return jsonable(record)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _holds(report: TheoremReport) -> str:
    if report.holds:
        return "yes" if report.refuted_in is None else "yes (known false)"
    return "NO" if report.refuted_in is None else "NO (known)"


def format_table(reports: list[TheoremReport]) -> str:
    header = ("id", "statement", "examples", "holds", "min slack", "tight med", "tight worst", "counterexample")
    rows = [(r.id, _short(r.statement, 44), str(r.examples), _holds(r), _num(r.min_slack),
             _num(r.tightness_median), _num(r.tightness_max),
             "-" if r.counterexample is None else _short(json.dumps(jsonable(r.counterexample.get("instance",
                                                                                                   r.counterexample))), 40))
            for r in reports]
    widths = [max(len(h), *(len(row[k]) for row in rows)) for k, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(header), line(["-" * w for w in widths])] + [line(row) for row in rows]
    failed = [r for r in reports if not r.holds]
    for r in failed:
        known = f" as documented in {r.refuted_in}" if r.refuted_in else ""
        out += ["", f"{r.id} ({r.number}) FAILS{known}; smallest counterexample:",
                json.dumps(jsonable(r.counterexample), indent=1)]
    out += ["", f"{len(reports) - len(failed)} of {len(reports)} theorems hold on every instance tried"
                f"; {sum(r.unexpected for r in reports)} unexpected failures."]
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    if args.examples < 1:
        raise ValueError(f"--examples must be >= 1, got {args.examples}")
    theorems = select(args.theorem)
    reports = []
    for theorem in tqdm(theorems, desc="verify", unit="theorem", file=sys.stderr, disable=None):
        reports.append(run_one(theorem, args.examples, args.seed))
    if args.json:
        print(json.dumps([report_record(r) for r in reports], indent=1))
    else:
        print(format_table(reports))
    return 1 if any(r.unexpected for r in reports) else 0
