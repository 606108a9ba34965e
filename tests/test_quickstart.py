"""docs/quickstart.md runs as written: its Python blocks in order in one namespace, and every
`mlmix ...` line of its bash blocks through the CLI (exit status 0), in a fresh folder."""

import re
import shlex
from pathlib import Path

from mlmix.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "quickstart.md"


def blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"```(python|bash)\n(.*?)```", text, flags=re.S)


def test_quickstart_snippets_run(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))  # tables and Hypothesis files
    found = blocks(DOC.read_text(encoding="utf-8"))
    assert sum(kind == "python" for kind, _ in found) >= 5 and sum(kind == "bash" for kind, _ in found) >= 3
    namespace: dict = {}
    commands = 0
    for kind, code in found:
        if kind == "python":
            exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
            continue
        for line in code.splitlines():
            if line.startswith("mlmix "):
                assert main(shlex.split(line)[1:]) == 0, line
                commands += 1
    assert commands >= 5
    assert (work / "two_state.npz").is_file()
    assert (work / "small.svg").read_bytes().lstrip().startswith(b"<?xml")
    assert (work / "scores.pdf").read_bytes().startswith(b"%PDF-")
    assert not (work / ".hypothesis").exists()  # Hypothesis's files go to the user cache
    out = capsys.readouterr().out
    assert "spectral gap = " in out and "holds caught" in out and "is not decided" in out
