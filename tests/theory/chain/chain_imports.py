"""The import graph of ``theory/chain/`` read from the source tree (:func:`room_graph`), one cycle of a
graph (:func:`cycle`) and the modules the Chain rests on (:func:`below_chain`), for the tests of the room's
layering (test_chain_contract.py, test_quantity_dispatch.py)."""

import ast
from pathlib import Path

ROOM = Path(__file__).resolve().parents[3] / "theory" / "chain"
PACKAGE = "mlmix.theory.chain"


def imports(source: str) -> list[tuple[str, bool]]:
    """The room's modules a source imports, each with whether the import is under ``if TYPE_CHECKING:``
    (imports inside functions count as run-time imports)."""
    tree = ast.parse(source)
    typing_only = {id(n) for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == PACKAGE:
                names = [a.name for a in node.names]
            elif node.module.startswith(PACKAGE + "."):
                names = [node.module.split(".")[3]]
            else:
                continue
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[3] for a in node.names if a.name.startswith(PACKAGE + ".")]
        else:
            continue
        found += [(name, id(node) in typing_only) for name in names]
    return found


def graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the room's modules it imports, less the type-checking imports of markov_chain."""
    return {m: {t for t, typing_only in imports(src) if t in sources and not (typing_only and t == "markov_chain")}
            for m, src in sources.items()}


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (depth-first search), or [] when it has none."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        path.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state and (found := visit(t)):
                return found
        state[m] = 2
        path.pop()
        return []

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return []


def room_graph() -> dict[str, set[str]]:
    """:func:`graph` of every module of the room (``__init__`` aside)."""
    return graph({p.stem: p.read_text() for p in ROOM.glob("*.py") if p.stem != "__init__"})


def below_chain(g: dict[str, set[str]]) -> set[str]:
    """The modules ``markov_chain`` imports, directly or through others: the quantity modules the Chain rests
    on, which must not import it back."""
    seen: set[str] = set()
    todo = list(g["markov_chain"])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += g.get(m, ())
    return seen
