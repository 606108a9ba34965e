"""The part of ``mlmix exact --json``'s schema (``docs/schema/exact.schema.json``) that lists the report's
figures, derived from :data:`mlmix.theory.results.REPORT` as the summary, the saved figures and the table are.

The published file keeps the rest by hand (the provenance header, the chain's structure, ``eps``, ``reason``,
paper G's constants, ``--basins``); its ``$defs`` entries ``report`` (a property per figure of the summary, a
``Result`` or a ``VectorResult``) and ``complete_report`` (the figures a report without a ``reason`` holds)
are this module's output, and a test keeps the file equal to it. After adding a figure to ``REPORT``,
regenerate the file with

    python -m mlmix.commands.exact_schema docs/schema/exact.schema.json
"""

from __future__ import annotations

import sys
from typing import Any

from mlmix.files import atomic_write_json, read_json
from mlmix.theory.results import REPORT

#: The ``$defs`` entries of the exact schema that :func:`report_schema` writes.
GENERATED = ("report", "complete_report")


def report_schema() -> dict[str, dict[str, Any]]:
    """The ``$defs`` entries ``report`` and ``complete_report`` of the exact schema: each figure of
    :data:`~mlmix.theory.results.REPORT` that the summary gives (a phase), in its order, as a property whose
    value follows the definition ``q.schema``, and the list of them a complete report requires."""
    figures = [q for q in REPORT if q.phase is not None]
    return {
        "report": {
            "description": "the report's figures (Chain.summary), generated from mlmix.theory.results.REPORT by "
                           "mlmix.commands.exact_schema: do not edit by hand",
            "properties": {q.key: {"description": f"{q.name} (Chain.{q.member})", "$ref": f"#/$defs/{q.schema}"}
                           for q in figures}},
        "complete_report": {
            "description": "the figures of a report without a reason (generated from REPORT, as 'report')",
            "required": [q.key for q in figures]}}


def exact_schema(published: dict[str, Any]) -> dict[str, Any]:
    """The exact schema ``published`` (the parsed file) with its generated ``$defs`` entries replaced by
    :func:`report_schema`'s, the rest unchanged: the file as it must be committed."""
    if not isinstance(published.get("$defs"), dict):
        raise ValueError("the exact schema has no $defs object to hold the report's figures")
    return {**published, "$defs": {**published["$defs"], **report_schema()}}


def main(argv: list[str] | None = None) -> int:
    """Rewrite the exact schema file named by the one argument with the figures of ``REPORT``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m mlmix.commands.exact_schema docs/schema/exact.schema.json", file=sys.stderr)
        return 2
    try:
        atomic_write_json(argv[0], exact_schema(read_json(argv[0], "the exact schema")))
    except (ValueError, OSError) as err:
        print(f"mlmix.commands.exact_schema: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
