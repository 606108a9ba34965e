"""The house rules that keep the package's rooms readable, checked on the source tree:

* no two modules of the package share a file name (``__init__.py`` aside), so a name says which file;
* no module of ``mlmix/``, ``theory/``, ``verify/`` or ``empirical/`` is over 900 lines;
* no Python, Markdown or TOML file refers to a numbered issue (history belongs to git and the CHANGELOG);
* every package's ``__init__.py`` says what the room offers (a docstring) and lists its public names
  (``__all__``, empty for a package that only holds modules);
* :func:`mlmix.verify.verdicts.search` stays short (its steps are helpers of their own);
* no benchmark or test changes ``sys.path`` (they import the installed package and installed peers; only
  ``mlmix verify --module`` puts the current directory first, as ``python -m`` does, to import a user's module).
"""

import ast
import inspect
import os
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("mlmix", "theory", "verify", "empirical")
MAX_LINES = 900
MAX_SEARCH_LINES = 60
#: A numbered issue: the word issue or issues, an optional '#', then digits.
ISSUE = re.compile(r"issues? ?#?[0-9]+", re.IGNORECASE)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _modules() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py"))


def _packages() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("__init__.py"))


def _text_files() -> list[Path]:
    """Every .py, .md and .toml file of the tree but the CHANGELOG, hidden folders and build outputs."""
    out = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not (d.startswith(".") or d.endswith(".egg-info") or d in ("build", "dist"))]
        out += [Path(folder) / f for f in files if f.endswith((".py", ".md", ".toml"))]
    return sorted(p for p in out if _relative(p) != "CHANGELOG.md")


def test_no_two_modules_share_a_file_name():
    by_name = defaultdict(list)
    for p in _modules():
        if p.name != "__init__.py":
            by_name[p.name].append(_relative(p))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"modules sharing a file name: {shared}"


def test_no_module_is_over_900_lines():
    long = {}
    for p in _modules():
        lines = len(p.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            long[_relative(p)] = lines
    assert not long, f"modules over {MAX_LINES} lines (split them by topic): {long}"


def test_no_file_refers_to_a_numbered_issue():
    hits = []
    for p in _text_files():
        for number, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE.search(line):
                hits.append(f"{_relative(p)}:{number}: {line.strip()[:80]}")
    assert not hits, "numbered issues mentioned (say what the code does instead):\n" + "\n".join(hits)


def test_every_package_says_what_it_offers():
    missing = []
    for p in _packages():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        if not (ast.get_docstring(tree) or "").strip():
            missing.append(f"{_relative(p)}: no docstring")
        targets = [t for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            missing.append(f"{_relative(p)}: no __all__")
    assert not missing, "packages that do not say what they offer:\n" + "\n".join(missing)


def _statements(body: list[ast.stmt]):
    """The module-level statements, those inside ``try`` and ``if`` blocks included."""
    for node in body:
        yield node
        if isinstance(node, (ast.Try, ast.If)):
            for block in (node.body, node.orelse, getattr(node, "finalbody", []),
                          *(h.body for h in getattr(node, "handlers", []))):
                yield from _statements(block)


def test_every_name_in_a_package_all_exists():
    """Each name of a literal ``__all__`` is bound in the ``__init__`` or is a module of the package (read from
    the source, so nothing is imported)."""
    for p in _packages():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        bound = {c.name for c in p.parent.iterdir() if c.suffix == ".py" or (c / "__init__.py").exists()}
        bound = {name.removesuffix(".py") for name in bound}
        listed: list[str] = []
        for node in _statements(tree.body):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    bound |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                    if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(node.value, ast.List):
                        listed = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
        absent = [name for name in listed if name not in bound]
        assert not absent, f"{_relative(p)}: __all__ names what the package does not have: {absent}"


def test_the_search_loop_is_short():
    from mlmix.verify.verdicts import search

    lines, _ = inspect.getsourcelines(search)
    assert len(lines) < MAX_SEARCH_LINES, f"verdicts.search is {len(lines)} lines (< {MAX_SEARCH_LINES})"


#: A change of the import path in code: sys.path.append / insert / extend, or an assignment to it.
SYS_PATH_CHANGE = re.compile(r"sys\.path\s*(\.\s*(append|insert|extend)\s*\(|\+?=[^=])")


def test_no_code_changes_sys_path():
    files = sorted((ROOT / "benchmarks").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    hits = [f"{_relative(p)}:{k}" for p in files
            for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if SYS_PATH_CHANGE.search(line)]
    assert not hits, f"code that changes sys.path (import the installed package instead): {hits}"
