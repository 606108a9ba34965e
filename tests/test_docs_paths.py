"""Every repository path that README.md and docs/*.md name exists.

A path is any word under one of the repository's folders (``tests/``, ``docs/``, ``benchmarks/``,
``mlmix/``, ``theory/``, ``verify/``, ``empirical/``, ``.ci/``) in inline code, a fenced code block
or a link target, and every relative link target; ``file.py::test_name`` must name a test defined in
that file. Globs (``*``) must match at least one file; placeholders are allowed only when listed in
:data:`PLACEHOLDERS`. Paths that commands write (outputs) are listed in :data:`OUTPUTS`.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FOLDERS = ("tests", "docs", "benchmarks", "mlmix", "theory", "verify", "empirical", ".ci")
PATH = re.compile(r"(?<![\w./-])(?:\.\./)?((?:" + "|".join(re.escape(f) for f in FOLDERS)
                  + r")/[\w./*<>{}\-]*(?:::[\w\[\]-]+)?)")
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")

#: Paths with a placeholder (``<name>``, ``{a,b}``), named in the docs as patterns, not as files: none
#: today; add one here only with the page that needs it.
PLACEHOLDERS: set[str] = set()
#: Paths the documented commands write (not in the repository): none today.
OUTPUTS: set[str] = set()


def _clean(path: str) -> str:
    return path.rstrip(".,:;")


def cited_paths(text: str) -> set[str]:
    """The repository paths that one Markdown text names (inline code, fenced blocks, link targets)."""
    spans = [m.group(1) for m in FENCED.finditer(text)]
    prose = FENCED.sub("", text)
    spans += INLINE.findall(prose) + LINK.findall(prose)
    return {_clean(m.group(1)) for span in spans for m in PATH.finditer(span)} - {""}


def relative_links(doc: Path) -> set[str]:
    """Link targets of ``doc`` that are files of the repository, relative to ``doc``'s folder."""
    text = FENCED.sub("", doc.read_text())
    out = set()
    for target in LINK.findall(text):
        target = target.split("#", 1)[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue
        out.add(target)
    return out


def missing(doc: Path) -> list[str]:
    """The paths ``doc`` cites that do not exist (or name a test that the file does not define)."""
    bad = []
    for cited in sorted(cited_paths(doc.read_text())):
        if cited in PLACEHOLDERS or cited in OUTPUTS:
            continue
        path, _, test = cited.partition("::")
        path = path.rstrip("/")
        if re.search(r"[<>{}]", path):
            bad.append(f"{cited} (a placeholder not listed in PLACEHOLDERS)")
        elif "*" in path:
            if not list(ROOT.glob(path)):
                bad.append(f"{cited} (the glob matches nothing)")
        elif not (ROOT / path).exists():
            bad.append(cited)
        elif test and not re.search(rf"^\s*(?:async\s+)?def {re.escape(test.split('[')[0])}\(",
                                    (ROOT / path).read_text(), re.M):
            bad.append(f"{cited} (no such test in {path})")
    for target in sorted(relative_links(doc)):
        if not (doc.parent / target).resolve().exists():
            bad.append(f"{target} (link)")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_cited_path_exists(doc):
    assert missing(doc) == []


def test_the_parser_finds_paths_and_rejects_stale_ones(tmp_path):
    text = ("Run `pytest tests/test_plots.py::test_each_plot_returns_its_axes_titled_and_drawn` and "
            "[the file](../mlmix/plots.py).\n```bash\ncd tests/verify/user_package\n```\n"
            "not a path: `mlmix verify --theorem G.T5`, `mlmix.theory`, tests are good.\n")
    assert cited_paths(text) == {"tests/test_plots.py::test_each_plot_returns_its_axes_titled_and_drawn",
                                 "mlmix/plots.py", "tests/verify/user_package"}
    doc = tmp_path / "docs" / "x.md"
    doc.parent.mkdir()
    doc.write_text(text.replace("verify/user_package", "user_package").replace("titled_and_drawn", "gone")
                   .replace("../mlmix/plots.py", "https://example.org") + "[gone](nowhere.md)\n")
    assert missing(doc) == ["tests/test_plots.py::test_each_plot_returns_its_axes_gone (no such test in "
                            "tests/test_plots.py)", "tests/user_package", "nowhere.md (link)"]


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_no_doc_installs_mlmix_from_a_package_index(doc):
    """mlmix is not on a package index: ``pip install mlmix`` fails; it installs from a clone."""
    assert re.findall(r"pip install\s+(?:-U\s+)?['\"]?mlmix\b[^`\n]*", doc.read_text()) == []


def test_globs_must_match_and_placeholders_must_be_listed(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("`tests/verify/*.py`, `tests/nowhere/*.py` and `docs/<page>.md`\n")
    assert missing(doc) == ["docs/<page>.md (a placeholder not listed in PLACEHOLDERS)",
                            "tests/nowhere/*.py (the glob matches nothing)"]
