"""Does ``mlmix verify`` catch realistic one-line bugs? Plant each mutant in a copy of the package and look.

Each room of the package that has mutants keeps them beside its code, in a ``mutants.toml``::

    [[mutant]]
    id = "systematic-order-reversed"            # unique over the repository
    file = "scan_and_mh.py"                     # relative to the folder of this mutants.toml
    kind = "wrong number"                       # or "looser bound"
    find = "for i in order:"                    # occurs exactly once in the file
    replace = "for i in reversed(order):"

so a restructure that moves a module moves its mutants with it (``tests/test_mutants.py`` checks that every
``find`` still occurs exactly once). For each mutant this script copies the package into a temporary folder
laid out as the installed package (``mlmix/``, ``mlmix/theory``, ``mlmix/verify``, ``mlmix/empirical``),
applies the one change, runs ``python -m mlmix verify --json --no-progress`` against that copy, and prints
one row: the mutant, its kind, verify's exit status and the results that flagged it.

A mutant is **caught** when verify exits 1 (a result fails: a wrong number) or 4 (a blind spot: a bound
became looser than a check allows). Exit 3 (a check crashed) is *not* detection: a bug that only crashes
verify would, fixed halfway, pass it. Exit 0 is an escape.

Usage (from the repository root, after ``pip install -e .``)::

    python benchmarks/mutation_audit.py                 # every mutant, the default verify run
    python benchmarks/mutation_audit.py --jobs 2        # two mutants at a time
    python benchmarks/mutation_audit.py --only ID --only ID2
    python benchmarks/mutation_audit.py --list          # the mutants, nothing run

Exit status: 0 when every mutant is caught (and the unmutated copy passes), 1 otherwise, 2 on a stale or
malformed mutant list.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Repository folder -> where it sits in the installed package (pyproject.toml's package-dir).
LAYOUT = {"mlmix": "mlmix", "theory": "mlmix/theory", "verify": "mlmix/verify", "empirical": "mlmix/empirical"}
KINDS = ("wrong number", "looser bound")
CAUGHT = {1: "caught (a result fails)", 4: "caught (blind spot)"}
OTHER = {0: "ESCAPED", 2: "verify refused its arguments", 3: "crash only (not detection)", -1: "timed out"}


@dataclass(frozen=True)
class Mutant:
    id: str
    path: Path  # relative to the repository root
    kind: str
    find: str
    replace: str


def load_mutants(repo: Path = REPO) -> list[Mutant]:
    """Every ``mutants.toml`` under the package folders, validated: known kind, unique id, and a ``find``
    that occurs exactly once in its file. Raises ValueError naming the first stale or malformed entry."""
    mutants: list[Mutant] = []
    for top in LAYOUT:
        for listing in sorted((repo / top).rglob("mutants.toml")):
            with open(listing, "rb") as fh:
                entries = tomllib.load(fh).get("mutant", [])
            for k, entry in enumerate(entries):
                where = f"{listing.relative_to(repo)}, mutant {k + 1}"
                missing = {"id", "file", "kind", "find", "replace"} - set(entry)
                if missing:
                    raise ValueError(f"{where}: missing {sorted(missing)}")
                if entry["kind"] not in KINDS:
                    raise ValueError(f"{where}: kind must be one of {KINDS}, got {entry['kind']!r}")
                path = (listing.parent / entry["file"]).relative_to(repo)
                text = (repo / path).read_text()
                count = text.count(entry["find"])
                if count != 1:
                    raise ValueError(f"{where} ({entry['id']}): 'find' occurs {count} times in {path}, not once")
                if entry["find"] == entry["replace"]:
                    raise ValueError(f"{where} ({entry['id']}): 'replace' equals 'find'")
                mutants.append(Mutant(entry["id"], path, entry["kind"], entry["find"], entry["replace"]))
    ids = [m.id for m in mutants]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"mutant ids used twice: {duplicated}")
    return mutants


def _installed_path(path: Path) -> Path:
    top, *rest = path.parts
    return Path(LAYOUT[top], *rest)


def _lay_out(repo: Path, dest: Path) -> None:
    """Copy the package's folders into ``dest`` as the installed package."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "mutants.toml")
    shutil.copytree(repo / "mlmix", dest / "mlmix", ignore=ignore)
    for top in ("theory", "verify", "empirical"):
        shutil.copytree(repo / top, dest / LAYOUT[top], ignore=ignore)


def run_verify(root: Path, verify_args: list[str], timeout: float) -> tuple[int, list[str], float]:
    """``mlmix verify --json`` on the package copy under ``root``: exit status, flagged results, seconds."""
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    probe = subprocess.run([sys.executable, "-c", "import mlmix.theory as t; print(t.__file__)"],
                           cwd=root, env=env, capture_output=True, text=True, check=True)
    if not probe.stdout.strip().startswith(str(root)):
        raise RuntimeError(f"the copy is not what Python imports: {probe.stdout.strip()}")
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "mlmix", "verify", "--json", "--no-progress", *verify_args],
                              cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, ["(timed out)"], time.perf_counter() - start
    seconds = time.perf_counter() - start
    flagged: list[str] = []
    try:
        for r in json.loads(done.stdout)["results"]:
            if r["status"] in ("fails", "error") or r.get("blind_spots"):
                flagged.append(f"{r['id']} ({r['status'] if r['status'] != 'holds' else 'blind spot'})")
    except (json.JSONDecodeError, KeyError, TypeError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        flagged.append(f"(no JSON: {tail[:120]})")
    return done.returncode, flagged, seconds


def audit_one(mutant: Mutant | None, verify_args: list[str], timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="mlmix-mutant-") as tmp:
        root = Path(tmp)
        _lay_out(REPO, root)
        if mutant is not None:
            target = root / _installed_path(mutant.path)
            target.write_text(target.read_text().replace(mutant.find, mutant.replace, 1))
        code, flagged, seconds = run_verify(root, verify_args, timeout)
    return {"id": mutant.id if mutant else "(none: the unmutated package)",
            "file": str(mutant.path) if mutant else "", "kind": mutant.kind if mutant else "",
            "exit": code, "caught": code in CAUGHT, "flagged": flagged, "seconds": round(seconds, 1)}


def _table(rows: list[dict]) -> str:
    lines = ["| mutant | file | kind | exit | verdict | flagged by |", "|---|---|---|---|---|---|"]
    for r in rows:
        verdict = CAUGHT.get(r["exit"], OTHER.get(r["exit"], f"exit {r['exit']}"))
        if not r["kind"]:
            verdict = "passes" if r["exit"] == 0 else f"FAILS (exit {r['exit']})"
        flagged = "; ".join(r["flagged"][:3]) + (f"; +{len(r['flagged']) - 3} more" if len(r["flagged"]) > 3 else "")
        lines.append(f"| {r['id']} | {r['file']} | {r['kind']} | {r['exit']} | {verdict} | {flagged or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="ID", help="run only these mutants (repeatable)")
    parser.add_argument("--list", action="store_true", help="print the mutants and exit")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at a time (default 1)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run on the unmutated package")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per verify run (default 900)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    parser.add_argument("verify_args", nargs="*", help="extra arguments for mlmix verify (after --)")
    args = parser.parse_args(argv)
    try:
        mutants = load_mutants()
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.only:
        unknown = set(args.only) - {m.id for m in mutants}
        if unknown:
            print(f"error: unknown mutant ids {sorted(unknown)}", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m.id in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.id:40s} {m.kind:13s} {m.path}: {m.find.strip()!r} -> {m.replace.strip()!r}")
        return 0
    if args.jobs < 1:
        print("error: --jobs must be >= 1", file=sys.stderr)
        return 2
    todo: list[Mutant | None] = ([] if args.no_baseline else [None]) + list(mutants)
    start = time.perf_counter()
    rows: list[dict] = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for k, row in enumerate(pool.map(lambda m: audit_one(m, args.verify_args, args.timeout), todo), 1):
            rows.append(row)
            print(f"[{k}/{len(todo)}] {row['id']}: exit {row['exit']} in {row['seconds']} s", file=sys.stderr)
    print(_table(rows))
    caught = sum(r["caught"] for r in rows if r["kind"])
    print(f"\n{caught} of {len(mutants)} mutants caught; {time.perf_counter() - start:.0f} s "
          f"(python benchmarks/mutation_audit.py --jobs {args.jobs})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    baseline_ok = args.no_baseline or rows[0]["exit"] == 0
    return 0 if baseline_ok and caught == len(mutants) else 1


if __name__ == "__main__":
    sys.exit(main())
