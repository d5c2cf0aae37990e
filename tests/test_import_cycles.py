"""No import cycle anywhere in cairn, counting every import statement: module level,
function bodies and ``if TYPE_CHECKING:`` blocks alike (a cycle that only the type checker
or a late import sees still ties two modules into one).

The graph is read from the source with ``ast`` (nothing is imported). Its edges:

- ``import a.b.c`` and ``from a.b.c import name`` (``name`` not a submodule): an edge to
  ``a.b.c``; ``from a.b import c`` where ``a.b.c`` is a module: an edge to ``a.b.c``.
  Relative imports are resolved from the importing module's package first.
- Importing ``a.b.c`` runs the packages ``a`` and ``a.b`` first: an edge to each, except
  to the importer's own enclosing packages, which are already running when it is imported.
  So a package ``__init__`` that imports its own submodules is not a cycle by itself.
- A module that names its own enclosing package explicitly (``from cairn.rollout import
  X`` inside ``cairn/rollout/turn.py``, ``X`` not a submodule) reads that package's
  ``__init__``: an edge to the package, and a cycle when that ``__init__`` imports the
  module back (directly or through others).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import cairn

SRC = Path(cairn.__file__).parents[1]


def modules(root: Path = SRC, top: str = "cairn") -> dict[str, Path]:
    """Dotted module name -> file, for every module of package ``top`` under ``root``."""
    out = {}
    for path in sorted((root / top).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of the module, wherever it stands."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` reads from."""
    if not node.level:
        return node.module or ""
    package = (module if is_package else module.rpartition(".")[0]).split(".")
    kept = package[: len(package) - node.level + 1]
    return ".".join(kept + ([node.module] if node.module else []))


def _explicit(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]
) -> set[str]:
    """The modules an import statement names (rule 1 of the module docstring)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    base = _base(node, module, is_package)
    out = set()
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.add(sub if sub in known else base)
    return out


def import_graph(root: Path = SRC, top: str = "cairn") -> dict[str, set[str]]:
    """Module -> the modules of ``top`` it imports (the module docstring's rules)."""
    mods = modules(root, top)
    known = set(mods)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for node in _imports(tree):
            for target in _explicit(node, mod, is_package, known):
                parts = target.split(".")
                for k in range(1, len(parts)):  # the packages run first
                    name = ".".join(parts[:k])
                    if name in known and not (mod == name or mod.startswith(name + ".")):
                        graph[mod].add(name)
                if target in known and target != mod:
                    graph[mod].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as its modules in import order (first repeated at the end),
    or None; deterministic (nodes and edges visited in sorted order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return [*path[path.index(w) :], w]
            if w not in state and (found := visit(w)) is not None:
                return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)) is not None:
            return found
    return None


def all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with a cycle, for the failure message."""
    out, remaining = [], {k: set(v) for k, v in graph.items()}
    while (cycle := find_cycle(remaining)) is not None:
        out.append(cycle)
        a, b = cycle[0], cycle[1]
        remaining[a].discard(b)  # break this edge, look for the next cycle
    return out


def _package(root: Path, files: dict[str, str]) -> Path:
    """A package ``pkg`` under ``root`` with ``files`` (relative path -> source)."""
    for rel, text in {"pkg/__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_cycle_finder_names_a_cycle_in_import_order() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"b"}}) is None
    graph = {"a": {"b"}, "b": {"a"}, "e": {"f"}, "f": {"e"}}
    assert all_cycles(graph) == [["a", "b", "a"], ["e", "f", "e"]]


def test_every_kind_of_import_statement_is_an_edge(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "pkg/a.py": "import pkg.b\n",
        "pkg/b.py": "import typing\nif typing.TYPE_CHECKING:\n    from pkg.c import C\n",
        "pkg/c.py": "def f():\n    from . import d\n",  # function-local, relative, a module
        "pkg/d.py": "from .sub.e import E\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/e.py": "from ..a import x\n",  # two levels up
    })  # fmt: skip
    graph = import_graph(root, "pkg")
    assert graph["pkg.a"] == {"pkg.b"}  # the package itself is the importer's own: running
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.d"}
    assert graph["pkg.d"] == {"pkg.sub", "pkg.sub.e"}  # pkg.sub's __init__ runs first
    assert graph["pkg.sub.e"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.d", "pkg.sub.e", "pkg.a"]


def test_an_init_importing_its_submodules_is_no_cycle_until_one_reads_it_back(
    tmp_path: Path,
) -> None:
    files = {
        "pkg/__init__.py": "from pkg.loop import Settings\nfrom pkg import turn\n",
        "pkg/loop.py": "class Settings: ...\n",
        "pkg/turn.py": "from pkg.loop import Settings\n",
    }
    assert find_cycle(import_graph(_package(tmp_path / "ok", files), "pkg")) is None
    # a submodule reading a name from its package's __init__, which imports it back
    files["pkg/turn.py"] = "from pkg import Settings\n"
    cycle = find_cycle(import_graph(_package(tmp_path / "bad", files), "pkg"))
    assert cycle == ["pkg", "pkg.turn", "pkg"]


def test_no_import_cycle_anywhere_in_cairn() -> None:
    graph = import_graph()
    assert len(graph) > 80 and "cairn.train.checkpoint" in graph["cairn.train.trainer"]
    found = all_cycles(graph)
    assert not found, "import cycles in src/cairn: " + "; ".join(" -> ".join(c) for c in found)


if __name__ == "__main__":
    for c in all_cycles(import_graph()):
        print(" -> ".join(c))
