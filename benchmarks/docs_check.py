"""Re-run documented commands and compare the figures they print with the figures the docs quote.

Each entry of :data:`CHECKS` names a doc file, the command the doc shows (run as
``python -m mlmix ...`` with this interpreter, one torch/BLAS thread, from ``cwd``), a regular
expression whose first group is the printed figure, the figure as the doc quotes it (which must
occur verbatim in the doc file: an entry cannot drift away from its doc) and a tolerance. Each
command runs once however many figures are taken from it; only commands that take under 30 s are
listed. Not part of pytest (each command is a real run):

    python benchmarks/docs_check.py            # a table; exit status 1 on any mismatch
    python benchmarks/docs_check.py --only exact.md

Exit status: 0 when every printed figure is within its tolerance of the quoted one, 1 on a
mismatch (or a figure the command no longer prints, or a quoted figure missing from its doc).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Check:
    """One quoted figure: ``doc`` quotes ``quoted`` as the output of ``command``; the command's
    output matched by ``pattern`` (first group) must be within ``rel`` relative or ``abs_`` absolute
    of it."""

    doc: str
    command: str
    pattern: str
    quoted: str
    rel: float = 0.0
    abs_: float = 0.0
    cwd: str = "."


#: docs/diagnostics.md's first command: an Ising clique started in its minus mode (about 7 s of CPU).
TRAP = ('diagnose --model ising --graph complete:8 --beta 0.5 --field 0.3 --chains 4 --steps 2000 '
        '--start "0 0 0 0 0 0 0 0" --function magnetization --function logpi')

#: docs/decoding-theory.md's commands (about 3 s each).
OPTIMAL = "decode --model ising --graph cycle:8 --beta 1.0 --schedule optimal:3"
SCHEDULE_KL = "decode --model ising --graph cycle:6 --beta 0.8 --schedule 3,2,1 --kl"

CHECKS = [
    Check("docs/decoding-theory.md", OPTIMAL, r"optimal 3-step schedule \(block sizes\) \[1, 3, 4\]: E KL = (\S+)",
          "0.355959", rel=1e-6),
    Check("docs/decoding-theory.md", OPTIMAL, r"^\s*geometric\s+\[4, 2, 2\]\s+(\S+)", "1.08497", rel=1e-5),
    Check("docs/decoding-theory.md", SCHEDULE_KL, r"by the identity\s+(\S+)", "0.559911", rel=1e-6),
    Check("docs/decoding-theory.md", SCHEDULE_KL, r"by orders\s+(\S+)", "0.559911", rel=1e-6),
    Check("docs/decoding-theory.md", SCHEDULE_KL, r"sharp bound \(\(s_max-1\)/L\) sum I (\S+)", "0.836772", rel=1e-6),
    Check("docs/quickstart.md", "exact", r"t_mix\(0\.25\), worst-start TV\s+(\d+)\s+\(exact\)", "24"),
    Check("docs/exact.md", "exact --beta 10", r"^\s*spectral gap\s+(\S+)", "1.41612e-18", rel=1e-5),
    Check("docs/exact.md", "exact --beta 10", r"t_mix\(0\.25\), worst-start TV\s+\[(\S+),", "4.895e+17", rel=1e-3),
    Check("docs/exact.md", "exact --beta 10", r"t_mix\(0\.25\), worst-start TV\s+\[\S+, (\S+)\]", "8.621e+19",
          rel=1e-3),
    Check("docs/theorems.md", "verify --theorem glauber.drift.boundary",
          r"n = 10, k = 5, .*mean exit time (\S+) ", "24.8", abs_=0.05),
    Check("README.md", "verify --theorem glauber.drift.boundary",
          r"n = 20, k = 10, .*mean exit time (\S+) ", "25.5", abs_=0.05),
    Check("README.md", "verify --theorem pitfalls.at_rate", r"KL\(p_1, q\)/KL\(p_0, q\) = (\S+) > e", "0.4498",
          abs_=5e-5),
    Check("docs/testing-your-bounds.md", "verify --module mybounds.bounds --examples 20",
          r"mybounds\.bounds\.gap_from_contraction .* caught\s+(\S+) \(best", "1.88", abs_=0.005,
          cwd="tests/verify/user_package"),
    Check("docs/testing-your-bounds.md", "verify --module mybounds.bounds --examples 20",
          r"mybounds\.bounds\.gap_without_n .* caught\s+(\S+) \(best", "1.13", abs_=0.005,
          cwd="tests/verify/user_package"),
    Check("README.md", TRAP, r"magnetization   sample\s+\S+\s+(\S+)", "1.005", abs_=5e-4),
    Check("README.md", TRAP, r"d\(N\) = (\S+);", "0.911", abs_=5e-4),
    Check("README.md", TRAP, r"magnetization   sample\s+\S+\s+\S+\s+(\S+)", "1,090", abs_=5),
    Check("README.md", TRAP, r"magnetization   sample.*\n\s+exact\s+\S+\s+(\S+)", "0.013", abs_=5e-4),
    Check("docs/diagnostics.md", TRAP, r"mean exit time (\S+), e\.g\. 1 1 1", "2.79e+06", rel=2e-3),
    Check("docs/diagnostics.md", TRAP, r"from the paths .*?: (\S+) vs exact", "0.125", abs_=5e-4),
]


def run(command: str, cwd: str) -> tuple[str, float]:
    """Output (stdout and stderr) of ``python -m mlmix COMMAND`` in ``cwd`` and its wall time."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mlmix", *shlex.split(command)], cwd=ROOT / cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    return proc.stdout + proc.stderr, time.perf_counter() - start


def compare(check: Check, output: str) -> tuple[str, str]:
    """The printed figure (or what went wrong) and the verdict: ok or MISMATCH."""
    if check.quoted not in (ROOT / check.doc).read_text(encoding="utf-8"):
        return "-", f"MISMATCH ({check.quoted} is no longer quoted in {check.doc})"
    found = re.search(check.pattern, output, re.M)
    if found is None:
        return "not printed", "MISMATCH (the command no longer prints this figure)"
    printed = found.group(1)
    try:
        value, quoted = float(printed), float(check.quoted.replace(",", ""))
    except ValueError:
        return printed, "ok" if printed == check.quoted else "MISMATCH"
    ok = abs(value - quoted) <= max(check.abs_, check.rel * abs(quoted))
    return printed, "ok" if ok else "MISMATCH"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="only the entries whose doc path contains this text")
    args = parser.parse_args(argv)
    checks = [c for c in CHECKS if args.only in c.doc]
    outputs: dict[tuple[str, str], tuple[str, float]] = {}
    rows, failures = [], 0
    for check in checks:
        key = (check.command, check.cwd)
        if key not in outputs:
            outputs[key] = run(*key)
        printed, verdict = compare(check, outputs[key][0])
        failures += verdict != "ok"
        tol = f"+-{check.abs_:g}" if check.abs_ else f"rel {check.rel:g}" if check.rel else "exact"
        shown = "mlmix " + check.command
        rows.append((check.doc, shown if len(shown) <= 60 else shown[:57] + "...", check.quoted, printed, tol, f"{outputs[key][1]:.1f}",
                     verdict))
    head = ("doc", "command", "quoted", "printed", "tolerance", "s", "verdict")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
    print(f"{len(rows) - failures} of {len(rows)} quoted figures match what their commands print now")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
