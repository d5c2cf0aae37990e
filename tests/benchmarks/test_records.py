"""Markdown records: one section per label, rewritten in place, others kept in order."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from _lib.records import (
    commit_of,
    mean_ci,
    read_sections,
    section_label,
    write_record,
    write_section,
)

HEADER = "# Study\n\nIntro line.\n"


def test_new_record_gets_the_header_and_the_section(tmp_path: Path) -> None:
    path = tmp_path / "study" / "script.md"
    write_section(path, "demo", "GRPO vs GiGPO", "| a | b |\n|---|---|\n| 1 | 2 |", HEADER)
    assert path.read_text() == (
        "# Study\n\nIntro line.\n\n## demo: GRPO vs GiGPO\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    )


def test_rewriting_a_label_keeps_the_other_sections_and_their_order(tmp_path: Path) -> None:
    path = tmp_path / "r.md"
    write_section(path, "first", "", "one", HEADER)
    write_section(path, "second", "t", "two\n\n### sub\n\nmore", HEADER)
    write_section(path, "first", "again", "uno", "# ignored once the file exists\n")
    head, sections = read_sections(path.read_text())
    assert head.startswith("# Study")  # the header of the existing file is kept
    assert list(sections) == ["first", "second"]
    assert sections["first"].rstrip() == "## first: again\n\nuno"
    assert "### sub\n\nmore" in sections["second"]


def test_label_is_the_heading_up_to_the_first_colon() -> None:
    assert section_label("## ladder_poly_try4: Exploration benchmark: ladder") == "ladder_poly_try4"
    assert section_label("## default") == "default"
    with pytest.raises(ValueError, match="starts with '## '"):
        section_label("### nested")


@pytest.mark.parametrize("label", ["", "a:b", "two\nlines"])
def test_bad_labels_are_refused(tmp_path: Path, label: str) -> None:
    with pytest.raises(ValueError, match="section label"):
        write_section(tmp_path / "r.md", label, "", "body", HEADER)


def test_a_top_level_heading_inside_a_body_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="start at '###'"):
        write_section(tmp_path / "r.md", "x", "", "text\n## not a subsection", HEADER)
    assert not (tmp_path / "r.md").exists()  # nothing written


def test_duplicate_labels_in_a_file_are_reported() -> None:
    with pytest.raises(ValueError, match="two sections labelled 'a'"):
        read_sections("# h\n\n## a: x\n\none\n## a: y\n\ntwo\n")


def test_the_repository_records_parse() -> None:
    """Every record under benchmarks/results has unique section labels (scripts rely on it)."""
    root = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    records = sorted(root.glob("*/*.md"))
    assert records, "no records found under benchmarks/results/<study>/"
    assert not list(root.glob("*.md")), "records live in a study folder, not at the top"
    for path in records:
        read_sections(path.read_text())


def test_mean_ci_is_the_95_percent_t_interval() -> None:
    # 0.1, 0.2, 0.3: mean 0.2, sd 0.1, 2 dof: t = 4.303, half = 4.303 * 0.1 / sqrt(3) = 0.2484
    assert mean_ci([0.1, 0.2, 0.3]) == "0.200 ± 0.248"
    assert mean_ci([0.5]) == "0.500"  # one seed: no interval
    # 12 seeds fall back to the normal quantile: sd of 0/1 alternating = 0.5222, /sqrt(12)
    assert mean_ci([0.0, 1.0] * 6) == f"0.500 ± {1.96 * 0.52223 / 12**0.5:.3f}"


def _repo(tmp_path: Path) -> Path:
    """A git checkout with one commit holding src/a.py."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=tmp_path, check=True)
    return tmp_path


def _head(repo: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_section_names_the_commit_it_ran_on(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    path = repo / "benchmarks" / "results" / "s" / "r.md"
    write_section(path, "a", "", "numbers", HEADER)
    section = read_sections(path.read_text())[1]["a"]
    assert section == f"## a\n\nCommit: `{_head(repo)}`\n\nnumbers\n"
    assert commit_of(section) == _head(repo)


def test_uncommitted_source_is_named_and_an_explicit_line_is_kept(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "src" / "a.py").write_text("x = 2\n")  # the measured code is not HEAD's
    path = repo / "r.md"
    write_section(path, "a", "", "numbers", HEADER)
    assert f"Commit: `{_head(repo)}` with uncommitted changes to src/" in path.read_text()
    write_section(path, "b", "", f"Commit: `{'0' * 40}`\n\nold run", HEADER)
    assert read_sections(path.read_text())[1]["b"].count("Commit:") == 1


def test_every_repository_record_section_names_its_commit() -> None:
    """Each section of each record has a ``Commit:`` line (a hash, or ``not recorded`` for
    sections older than the rule); ``benchmarks/stale_records.py`` reads them."""
    root = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    missing = []
    for path in sorted(root.glob("*/*.md")):
        head, sections = read_sections(path.read_text())
        parts = sections.values() if sections else [head]
        missing += [f"{path.name}: {p.splitlines()[0]}" for p in parts if "Commit: " not in p]
    assert not missing, f"record sections without a Commit: line: {missing}"


def test_a_whole_file_record_gets_its_commit_after_the_title(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    path = repo / "results" / "speed.md"
    write_record(path, "# Speed\n\n| a |\n|---|\n| 1 |\n")
    assert path.read_text() == f"# Speed\n\nCommit: `{_head(repo)}`\n\n| a |\n|---|\n| 1 |\n"
