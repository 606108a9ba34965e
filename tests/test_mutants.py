"""The mutation audit's lists stay true to the code (benchmarks/mutation_audit.py runs them; not pytest)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _audit():
    spec = importlib.util.spec_from_file_location("mutation_audit", REPO / "benchmarks" / "mutation_audit.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_mutant_still_applies_once():
    mutants = _audit().load_mutants()
    assert len(mutants) >= 20
    assert {m.kind for m in mutants} <= {"wrong number", "looser bound"}


def test_a_stale_mutant_is_refused(tmp_path):
    audit = _audit()
    (tmp_path / "theory").mkdir()
    (tmp_path / "theory" / "x.py").write_text("a = 1\na = 1\n")
    (tmp_path / "theory" / "mutants.toml").write_text(
        '[[mutant]]\nid = "m"\nfile = "x.py"\nkind = "wrong number"\nfind = "a = 1"\nreplace = "a = 2"\n')
    with pytest.raises(ValueError, match="occurs 2 times"):
        audit.load_mutants(tmp_path)


def test_the_copy_with_the_mutant_is_what_python_imports(tmp_path):
    audit = _audit()
    audit._lay_out(REPO, tmp_path)
    target = tmp_path / "mlmix" / "theory" / "results.py"
    target.write_text(target.read_text() + "\nPLANTED = 1\n")
    out = subprocess.run([sys.executable, "-c", "import mlmix.theory.results as r; print(r.PLANTED, r.__file__)"],
                         cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": ""}, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[0] == "1" and out[1].startswith(str(tmp_path))


def test_a_crash_is_not_detection():
    """Exit 1 (a result fails) and 4 (a blind spot) catch a mutant; exit 3 (a check crashed) and 0 do not."""
    audit = _audit()
    assert set(audit.CAUGHT) == {1, 4}
    assert audit.OTHER[3] == "crash only (not detection)" and audit.OTHER[0] == "ESCAPED"
    ids = {m.id for m in audit.load_mutants()}
    assert {"operator-stationary-certificate-applies-p-not-its-transpose", "distance-upper-end-without-the-pi-min-factor",
            "top-p-drops-the-last-symbol-of-the-nucleus"} <= ids
