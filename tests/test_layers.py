"""cairn's import structure: no import cycle among its modules, and each package imports only
packages of a lower layer (the picture in docs/architecture.md).

Imports are read from the source with ``ast``, not by importing: a cycle that Python happens
to survive (an attribute looked up late) is still reported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import cairn

SRC = Path(cairn.__file__).parents[1]

#: Layer of each top-level part of cairn: a package imports only parts of lower layers
#: (function-local imports count; imports under ``if TYPE_CHECKING:`` do not).
LAYERS: dict[str, int] = {
    "cairn._errors": 0,
    "cairn._files": -1,  # a leaf of the standard library only, read by data and above
    "cairn._cache": -1,  # the user cache folder (standard library only): models, trust store
    "cairn._progress": 0,  # counts of an iteration in flight: the turn loop and learners report
    "cairn._regex": 0,
    "cairn._registry": 0,
    "cairn.agent": 0,
    "cairn.data": 0,
    "cairn.losses": 0,
    "cairn.advantages": 1,
    "cairn.plugins": 1,
    "cairn.envs": 1,
    "cairn._env_host": 2,
    "cairn.policies": 2,
    "cairn.rollout": 3,
    "cairn.exploration": 4,
    "cairn.rewards": 5,
    "cairn.train": 6,
    "cairn.integrations": 7,
    "cairn.report": 7,
    "cairn.cli": 8,
}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the cairn package."""
    out = {}
    for path in sorted((SRC / "cairn").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported: in its body, ``if``/``try``/``with`` blocks
    included, ``if TYPE_CHECKING:`` blocks, functions and classes excluded."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse):
                yield from _top_level(block)
            yield from _top_level(node.finalbody)
        elif isinstance(node, ast.With):
            yield from _top_level(node.body)


def _all_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import of the module, function-local ones too, less ``if TYPE_CHECKING:``."""
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            typing_only |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in typing_only:
            yield node


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Dotted names an import may load: the module named, and ``from m import x`` also m.x."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative: from the importing module's package
        package = (module if is_package else module.rpartition(".")[0]).split(".")
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    return [base, *(f"{base}.{a.name}" for a in node.names)]


def import_graph(local: bool) -> dict[str, set[str]]:
    """Module -> the cairn modules it imports (``local``: function-local imports too).

    Importing ``a.b.c`` also runs the packages ``a.b`` and ``a`` first, so those are edges
    too, except the importer's own packages (already running when it is imported).
    """
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        nodes = _all_imports(tree) if local else _top_level(tree.body)
        for node in nodes:
            for target in _targets(node, mod, path.name == "__init__.py"):
                parts = target.split(".")
                for k in range(1, len(parts) + 1):
                    name = ".".join(parts[:k])
                    if name in mods and name != mod and not mod.startswith(name + "."):
                        graph[mod].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _part(module: str) -> str:
    """The top-level part of cairn a module belongs to, e.g. cairn.rollout.loop -> cairn.rollout."""
    return ".".join(module.split(".")[:2])


def test_the_cycle_finder_finds_cycles_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}, "g": set()}
    assert cycles(graph) == [["a", "b", "c"], ["e", "f"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_imports_as_python_runs_them() -> None:
    graph = import_graph(local=False)
    # module level, and the package a module is imported from
    assert {"cairn.rollout.loop", "cairn.rollout"} <= graph["cairn.exploration.sge"]
    # a function-local import counts only in the local graph
    assert "cairn.exploration.embed" not in graph["cairn.rewards.intrinsic"]
    assert "cairn.exploration.embed" in import_graph(local=True)["cairn.rewards.intrinsic"]
    assert len(graph) > 80  # the walk did read the package


def test_no_import_cycle_among_modules() -> None:
    assert cycles(import_graph(local=False)) == []


def test_every_part_of_cairn_has_a_layer() -> None:
    parts = {_part(m) for m in _modules()} - {"cairn"}
    assert sorted(parts - set(LAYERS)) == []


@pytest.mark.parametrize("part", sorted(LAYERS))
def test_a_package_imports_only_lower_layers(part: str) -> None:
    graph = import_graph(local=True)
    wrong = sorted(
        f"{mod} -> {dep}"
        for mod, deps in graph.items()
        if _part(mod) == part
        for dep in deps
        if _part(dep) != part and dep != "cairn" and LAYERS.get(_part(dep), 99) >= LAYERS[part]
    )
    assert wrong == []


def package_graph(local: bool = True) -> dict[str, set[str]]:
    """Part of cairn -> the other parts it imports (docs/architecture.md's layer picture)."""
    out: dict[str, set[str]] = {p: set() for p in LAYERS}
    for mod, deps in import_graph(local).items():
        if mod == "cairn":  # the package's face, which imports nothing
            continue
        out.setdefault(_part(mod), set()).update(
            _part(d) for d in deps if _part(d) != _part(mod) and d != "cairn"
        )
    return out


if __name__ == "__main__":  # python tests/test_layers.py: the picture, from the code
    graph = package_graph()
    for part in sorted(graph, key=lambda p: (-LAYERS.get(p, 99), p)):
        names = ", ".join(d.removeprefix("cairn.") for d in sorted(graph[part]))
        print(f"{LAYERS.get(part, '?')}  {part.removeprefix('cairn.'):<13} -> {names or '-'}")
