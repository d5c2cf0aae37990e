"""How much of cairn's typing says ``Any``: the share of annotations (function arguments and
returns, annotated assignments) whose source text contains ``Any`` stays under 8 % (issue 44,
typed wiring). Read with ``ast``, nothing imported; a new ``Any`` where the real type is
known (a Protocol, a dataclass, a tensor, ``Mapping[str, object]``) pushes it up."""

from __future__ import annotations

import ast
from pathlib import Path

import cairn

SRC = Path(cairn.__file__).parent
LIMIT = 0.08


def _annotations(tree: ast.AST) -> list[ast.expr]:
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            args = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            found += [x.annotation for x in args if x is not None and x.annotation is not None]
            if node.returns is not None:
                found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return found


def any_share(root: Path = SRC) -> tuple[int, int]:
    """(annotations containing ``Any``, all annotations) over the modules under ``root``."""
    with_any = total = 0
    for path in sorted(root.rglob("*.py")):
        for ann in _annotations(ast.parse(path.read_text(encoding="utf-8"))):
            total += 1
            with_any += "Any" in ast.unparse(ann)
    return with_any, total


def test_share_of_annotations_with_any_stays_under_the_limit() -> None:
    with_any, total = any_share()
    assert total > 1000  # the walk found the package
    assert with_any / total < LIMIT, (
        f"{with_any} of {total} annotations ({with_any / total:.1%}) contain Any; the limit "
        f"is {LIMIT:.0%}: write the real type where it is known"
    )


def test_the_count_reads_arguments_returns_and_assignments(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from typing import Any\n"
        "def f(a: int, *args: Any, b: dict[str, Any] = {}, **kw: object) -> Any: ...\n"
        "x: list[int] = []\n"
        "y = 1\n"
    )
    assert any_share(tmp_path) == (3, 6)
