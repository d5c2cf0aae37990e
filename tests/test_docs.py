"""The documentation cites code by name, links only inside the repository, and no page
names a machine path: checks that fail when an edit leaves a page behind the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    + [p for d in ("docs", "benchmarks", "examples", "src") for p in (ROOT / d).rglob("*.md")]
)
# `path/file.py: name` (name: function, class, Class.method or module constant), optionally
# the label of a link [`...`](target).
CODE_REF = re.compile(
    r"(\[)?`((?:[\w-]+/)*[\w-]+\.py): ([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)`(\]\(([^)]*)\))?"
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
LINE_ANCHOR = re.compile(r"\.py#L\d|\w\.py:\d")
MACHINE_PATH = re.compile(r"(?:^|[\s`'\"(])(/work/|/home/|/tmp/|/root/|/Users/|/mnt/|[A-Z]:\\)")
#: History where a reader wants the present: an issue number, or a promise about earlier
#: runs instead of the reason a path is kept. CHANGELOG.md is the place for history.
HISTORY = re.compile(r"\bissues? #?\d+|\brecorded runs\b", re.IGNORECASE)


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _names(path: Path) -> set[str]:
    """Top-level functions, classes and assigned names, and Class.member for class bodies."""
    names: set[str] = set()

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(prefix + node.name)
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            names.add(prefix + n.id)

    visit(ast.parse(path.read_text()).body, "")
    return names


def _source(page: Path, label: str, target: str | None) -> Path:
    """The file a reference names: its link target, else the one repository file whose
    path ends with the label (searched under src/cairn, then benchmarks and tests)."""
    if target:
        path = (page.parent / target.split("#")[0]).resolve()
        assert str(path).endswith(label), f"{_rel(page)}: link {target} is not {label}"
        return path
    for base in ("src/cairn", "benchmarks", "tests"):
        found = [p for p in (ROOT / base).rglob(Path(label).name) if str(p).endswith(label)]
        if found:
            assert len(found) == 1, f"{_rel(page)}: `{label}` is ambiguous: {found}"
            return found[0]
    raise AssertionError(f"{_rel(page)}: no file {label} in the repository")


def _code_refs() -> list[tuple[Path, str, str, str | None]]:
    return [
        (page, m[2], m[3], m[5] if m[1] and m[4] else None)
        for page in PAGES
        for m in CODE_REF.finditer(page.read_text())
    ]


def test_pages_were_found():
    assert {"README.md", "docs/algorithms/gigpo.md", "docs/scale.md"} <= {_rel(p) for p in PAGES}
    assert len(_code_refs()) > 80  # the algorithm pages' equation -> code tables


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_code_reference_names_something_in_that_file(page):
    missing = []
    for _, label, name, target in [r for r in _code_refs() if r[0] == page]:
        path = _source(page, label, target)
        if name not in _names(path):
            missing.append(f"`{label}: {name}`")
    assert not missing, f"{_rel(page)} cites names its files no longer define: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_line_number_anchors(page):
    """Line numbers drift with every edit: cite `file.py: function` instead."""
    bad = [m.group(0) for m in LINE_ANCHOR.finditer(page.read_text())]
    assert not bad, f"{_rel(page)}: line anchors {bad}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_links_stay_inside_the_repository_and_exist(page):
    bad = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor on the page
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            bad.append(target)
    assert not bad, f"{_rel(page)}: links outside the repository or to nothing: {bad}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_machine_paths(page):
    bad = [m.group(1) for m in MACHINE_PATH.finditer(page.read_text())]
    assert not bad, f"{_rel(page)} names paths outside the repository: {bad}"


def test_code_and_docs_say_what_and_why_not_when():
    """A reader of the code or the docs has no issue tracker: name the work and the reason."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "src").rglob("*.py")]
    files += [*(ROOT / "src").rglob("*.md")]
    bad = [
        f"{_rel(path)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert bad == []


def test_the_checks_catch_what_they_check(tmp_path):
    """Each pattern flags a known bad example (so a green run means something)."""
    assert CODE_REF.search("[`gigpo.py: step_groups`](../../src/cairn/advantages/gigpo.py)")
    assert "step_groups" in _names(ROOT / "src/cairn/advantages/gigpo.py")
    assert "no_such_function" not in _names(ROOT / "src/cairn/advantages/gigpo.py")
    assert LINE_ANCHOR.search("[`grouping.py:161-177`](grouping.py#L161-L177)")
    assert MACHINE_PATH.search("see `/work/shared/ALGORITHMS.md`")
    assert HISTORY.search("(issue 26: aliases)") and HISTORY.search("as Issue #7 asked")
    assert HISTORY.search("so its recorded runs stay bit-identical")
    assert not HISTORY.search("every other weight stays bit-identical; 3 issues found")


def test_readme_lists_every_package_and_points_to_the_benchmark_index():
    """Every benchmark script is indexed in benchmarks/README.md (test_benchmarks_index.py)."""
    readme = (ROOT / "README.md").read_text()
    assert "[benchmarks/README.md](benchmarks/README.md)" in readme
    layout = readme[readme.index("Layout: ") :].split("\n\n")[0]
    packages = {p.name for p in (ROOT / "src" / "cairn").iterdir() if (p / "__init__.py").exists()}
    assert {p for p in packages if f"`{p}`" not in layout and f"cairn/{p}" not in layout} == set()
