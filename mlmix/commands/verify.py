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
looser). The first that applies in this order wins; 2 is bad input (an unknown id, a ``--module``
that cannot be imported, whatever it raises, or registers no theorem: one line); 130 is Ctrl-C.

A crash is whatever a check raises, ``BaseException`` included (``sys.exit(0)``, ``pytest.skip()``,
``GeneratorExit``), and a side that evaluates to NaN; each distinct error is printed once, with the
first instance that raised it. Only :class:`KeyboardInterrupt` stops the run, so one raised by a
check itself reads as Ctrl-C (exit 130). ``--json`` with ``--module`` names each module and its
file in ``inputs.modules``.
"""

from __future__ import annotations

import argparse

from mlmix.files import dumps_json, jsonable
from mlmix.progress import steps
from mlmix.provenance import stamp
from mlmix.verify.report import (
    dumps_compact,
    exit_code,
    format_list,
    format_stats,
    format_table,
    list_record,
    report_record,
)
from mlmix.verify.runner import PROFILES, run_one, select
from mlmix.verify.verdicts import Entry

#: Rough seconds per Hypothesis instance (the default run: 100 instances of each result, one to two
#: minutes on 2 cores), for the expected time printed before a run.
SECONDS_PER_EXAMPLE = 0.02


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--examples", type=int, default=None,
                        help="instances per theorem before its budget (default 100; 500 with --thorough)")
    parser.add_argument("--thorough", action="store_true",
                        help="five times more instances, and search every hypothesis violation")
    parser.add_argument("--theorem", action="append", metavar="ID",
                        help="result id or id prefix such as 'glauber.' or 'glauber.thm8' (repeatable; default all)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="no cost estimate and no progress bar or lines")
    parser.add_argument("--json", action="store_true", help="print JSON (the provenance header, then the list of results) instead of the table")
    parser.add_argument("--list", action="store_true", help="list the results (ids, numbers, statements) without running")
    parser.add_argument("--stats", action="store_true",
                        help="also print, per result, the instances tried, their range (n, |V|, T, states) and the "
                             "share of each regime")
    parser.add_argument("--module", action="append", metavar="MODULE",
                        help="run the user theorems a module registers (mlmix.theorem; repeatable) instead of the "
                             "papers' results, e.g. mypkg.bounds (the current directory is importable)")
    from mlmix.commands.verify_model import configure as configure_mlm  # --mlm MODEL --frame ...: no torch until used

    configure_mlm(parser)


def _user_catalogue(modules: list[str]) -> dict[str, Entry]:
    # deferred: importing a user module runs its code; only with --module
    from mlmix.verify.user import load

    return {t.id: t for t in load(modules)}


def _module_records(modules: list[str]) -> list[dict]:
    """``--module`` in the JSON inputs: each module's name and the file it was imported from."""
    # deferred: imported with --module only
    from mlmix.verify.user import module_file

    return [{"name": m, "file": module_file(m)} for m in modules]


def run(args: argparse.Namespace) -> int:
    if args.mlm is not None:
        # deferred: torch and transformers load only with --mlm
        from mlmix.commands.verify_model import run as run_mlm

        return run_mlm(args)
    profile = PROFILES["thorough" if args.thorough else "default"]
    examples = profile["examples"] if args.examples is None else args.examples
    if examples < 1:
        raise ValueError(f"--examples must be >= 1, got {examples}")
    entries = select(args.theorem, _user_catalogue(args.module) if args.module else None)
    if args.list:
        if args.json:
            print(dumps_json(stamp("verify-list", {"results": [jsonable(list_record(e)) for e in entries]},
                                   {"theorems": args.theorem}), indent=1))
        else:
            print(format_list(entries))
        return 0
    reports = []
    expected = SECONDS_PER_EXAMPLE * examples * len(entries)
    for entry in steps(entries, "verify", total=len(entries), expected=expected, enabled=not args.no_progress,
                       cost=f"{len(entries)} results, {examples} instances each", name=lambda e: e.id):
        reports.append(run_one(entry, examples, args.seed, violations=profile["violations"]))
    if args.json:
        given = {"source": "Hypothesis-generated instances of each result's hypotheses", "seed": args.seed,
                 "examples": examples, "theorems": args.theorem, "thorough": args.thorough}
        if args.module:
            given["modules"] = _module_records(args.module)
        print(dumps_compact(stamp("verify", {"results": [report_record(r) for r in reports]}, given)))
    else:
        print(format_table(reports, debug=args.debug))
        if args.stats:
            print("\n" + format_stats(reports))
    return exit_code(reports)
