"""benchmarks/README.md indexes every benchmark script, and the scripts sit where it says.

A script lives in the folder of its record (``benchmarks/<study>/<script>.py`` writes
``benchmarks/results/<study>/``), or at the top of benchmarks/ when it serves every record;
its row in the index names its path, what it measures, its record and how long it runs.
The modules the scripts share (``benchmarks/_lib/``) are no scripts: they have no row.
Every Markdown record under ``benchmarks/results/`` is named in the index by its path, and
every record path the index names exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
INDEX = BENCH / "README.md"
ROW = re.compile(r"^\| `([\w/.-]+\.(?:py|sh))` \|(.+)$", re.MULTILINE)


#: Folders under benchmarks/ that hold no scripts: the records and the shared modules.
NOT_SCRIPTS = ("results", "_lib")


def scripts(root: Path = BENCH) -> set[str]:
    """Every script under ``root`` but the records and the shared modules, as paths
    relative to it."""
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.suffix in (".py", ".sh") and not set(NOT_SCRIPTS) & set(p.relative_to(root).parts)
        and "__pycache__" not in p.parts
    }  # fmt: skip


def indexed(text: str) -> dict[str, list[str]]:
    """The index's table rows: script path -> its cells after the path."""
    return {m[1]: [c.strip() for c in m[2].split("|")[:-1]] for m in ROW.finditer(text)}


def missing(root: Path, text: str) -> set[str]:
    return scripts(root) - set(indexed(text))


def test_every_script_under_benchmarks_is_in_the_index():
    found = scripts()
    assert len(found) > 20, found  # the glob sees the subfolders
    assert missing(BENCH, INDEX.read_text()) == set(), "add a row to benchmarks/README.md"


def test_the_check_fails_for_a_script_missing_from_the_index(tmp_path):
    """A new script in a study folder with no row is reported by name."""
    (tmp_path / "speed").mkdir()
    (tmp_path / "speed" / "old.py").write_text('"""Old."""\n')
    (tmp_path / "speed" / "new.py").write_text('"""New."""\n')
    (tmp_path / "results" / "speed").mkdir(parents=True)
    (tmp_path / "results" / "speed" / "helper.py").write_text("")  # records are not scripts
    (tmp_path / "_lib").mkdir()
    (tmp_path / "_lib" / "records.py").write_text("")  # nor are the shared modules
    text = "| `speed/old.py` | speed | what | `results/speed/old.md` | 1 s |\n"
    assert missing(tmp_path, text) == {"speed/new.py"}


#: A record named in the index: its path under benchmarks/ (``results/<study>/<name>.md``),
#: with or without the leading ``benchmarks/``. A glob (``*``) is caught as a path that does
#: not exist: each record is named on its own.
RECORD = re.compile(r"(?<!\w)(results/[\w/*.-]+\.md)\b")


def records(root: Path = BENCH) -> set[str]:
    """Every Markdown record under ``root/results``, as a path relative to ``root``."""
    return {p.relative_to(root).as_posix() for p in (root / "results").rglob("*.md")}


def named_records(text: str) -> set[str]:
    return set(RECORD.findall(text))


def record_mismatch(root: Path, text: str) -> tuple[set[str], set[str]]:
    """(records the index does not name, paths it names that are no record)."""
    found, named = records(root), named_records(text)
    return found - named, named - found


def test_the_index_names_every_record_and_only_records_that_exist():
    found = records()
    assert len(found) > 20, found  # the glob sees the study folders
    unnamed, absent = record_mismatch(BENCH, INDEX.read_text())
    assert unnamed == set(), "name these records in benchmarks/README.md"
    assert absent == set(), "benchmarks/README.md names records that do not exist"


def test_the_record_check_reports_an_unnamed_record_and_a_missing_one(tmp_path):
    """A record nobody names and a named path with no file are both reported, and a glob
    does not stand for the records it would match."""
    (tmp_path / "results" / "speed").mkdir(parents=True)
    for name in ("old.md", "new.md", "old_rerun.md"):
        (tmp_path / "results" / "speed" / name).write_text("# A record\n")
    (tmp_path / "results" / "speed" / "old.png").write_bytes(b"")  # only .md are records
    text = (
        "| `speed/old.py` | speed | what | `results/speed/old.md`, `.png` | 1 s |\n"
        "| `speed/x.py` | speed | what | `benchmarks/results/speed/gone.md` | 1 s |\n"
        "| `speed/y.py` | speed | what | `results/speed/old*.md` | 1 s |\n"
    )
    assert record_mismatch(tmp_path, text) == (
        {"results/speed/new.md", "results/speed/old_rerun.md"},
        {"results/speed/gone.md", "results/speed/old*.md"},
    )


def test_every_row_names_an_existing_script_and_fills_every_column():
    rows = indexed(INDEX.read_text())
    assert {path for path in rows if not (BENCH / path).is_file()} == set()
    for path, cells in rows.items():
        kind, what, record, time = cells
        assert kind in {"speed", "claim", "env", "external", "ops"}, (path, kind)
        assert what and record and time, path


def test_every_script_sits_in_the_folder_of_its_records_or_at_the_top():
    studies = {p.name for p in (BENCH / "results").iterdir() if p.is_dir()}
    folders = {Path(s).parent.as_posix() for s in scripts()}
    assert folders - studies - {"."} == set()


def test_every_indexed_command_is_a_script_path_that_exists():
    text = INDEX.read_text()
    commands = re.findall(r"(?:python|bash) (benchmarks/[\w/.-]+\.(?:py|sh))", text)
    assert commands and {c for c in commands if not (ROOT / c).is_file()} == set()


@pytest.mark.parametrize("path", sorted(p for p in scripts() if p.endswith(".py")))
def test_docstrings_speak_of_the_project_not_of_issue_numbers(path):
    """A docstring is read by someone who has no issue tracker: name the work, not a number."""
    tree = ast.parse((BENCH / path).read_text())
    docs = [
        ast.get_docstring(node) or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    cited = [d for d in docs if re.search(r"\bissues? \d+", d, re.IGNORECASE)]
    assert cited == [], f"{path}: {cited[0][:80]!r}"


def _sibling_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from M import N`` in ``path`` whose M is a script of the
    same folder or of benchmarks/ (scripts import each other through ``sys.path``)."""
    names = {Path(s).stem for s in scripts()}
    return [
        (node.module, alias.name)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module in names
        for alias in node.names
    ]


@pytest.mark.parametrize("path", sorted(p for p in scripts() if p.endswith(".py")))
def test_what_a_script_imports_from_another_is_beside_it_and_defined_there(path):
    """`python benchmarks/<study>/<script>.py` puts its own folder on sys.path: a sibling it
    imports must be in that folder and define the name (a split script once left
    gpu_check_verl.py importing OVERRIDES from gpu_check.py, which no longer had it)."""
    for module, name in _sibling_imports(BENCH / path):
        sibling = (BENCH / path).parent / f"{module}.py"
        assert sibling.is_file(), f"{path} imports {module}, which is not beside it"
        tree = ast.parse(sibling.read_text())
        defined = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                   if isinstance(t, ast.Name)}  # fmt: skip
        defined |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert name in defined, f"{path} imports {name} from {module}, which does not define it"


def test_every_benchmark_path_the_docs_and_code_name_exists():
    """README, docs/, src/ and the scripts' own docstrings name scripts by their path: after
    a move each must follow (the records' history and the CHANGELOG may name old ones)."""
    texts = [ROOT / "README.md", INDEX, *(ROOT / "docs").rglob("*.md")]
    texts += [*(ROOT / "src" / "cairn").rglob("*.py"), *(BENCH / s for s in scripts())]
    named = {
        (p.relative_to(ROOT).as_posix(), m)
        for p in texts
        for m in re.findall(r"benchmarks/[\w/]+\.(?:py|sh)\b", p.read_text())
    }
    assert len(named) > 20
    assert {(where, m) for where, m in named if not (ROOT / m).is_file()} == set()


CLIMB = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?((?:\.parent(?!s))+|\.parents\[(\d)\])(.*)")


@pytest.mark.parametrize("path", sorted(p for p in scripts() if p.endswith(".py")))
def test_a_script_finds_the_repository_from_its_own_folder(path):
    """A script one folder down reaches the repository as ``parents[2]`` and benchmarks/ as
    ``parents[1]`` (a script moved without this writes its record into the wrong folder)."""
    depth = len(Path(path).parts)  # 1: benchmarks/x.py, 2: benchmarks/<study>/x.py
    for m in CLIMB.finditer((BENCH / path).read_text()):
        up = int(m[2]) + 1 if m[2] else m[1].count(".parent")  # folders climbed
        if m[3].startswith(' / "results"'):  # benchmarks/results
            assert up == depth, f"{path}: {m[0]}"
        else:  # the repository root, or its own folder (sys.path)
            assert up in (depth + 1, 1), f"{path}: {m[0]}"
