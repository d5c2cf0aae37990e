"""Markdown records of measurements: one file per study, one ``## label`` section per trial.

A benchmark script owns one record (``benchmarks/results/<study>/<script>.md``) and writes
each of its runs (a setting, a budget, an ablation) as a section keyed by a label:

    write_section(path, "credit_compare", "Sample efficiency: grpo, gigpo", body, header)

replaces the section whose heading is ``## credit_compare`` or ``## credit_compare: ...``
and keeps every other section and their order (a new label is appended). ``header`` is
the file's text above the first section, used only when the file does not exist yet.
Inside a section, headings start at ``###``.

Every section names the commit it ran on (a ``Commit:`` line, ``provenance``; written by
``write_section`` unless the body has one): a record is only as good as the code it ran
on, and ``benchmarks/stale_records.py`` lists the sections whose source has changed since.
``mean_ci`` writes a mean over seeds with its 95 % interval (``cairn.train.compare.ci95_half``,
the interval ``cairn compare`` reports).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cairn.train.compare import ci95_half

__all__ = [
    "check_label",
    "commit_of",
    "mean_ci",
    "provenance",
    "read_sections",
    "section_label",
    "write_record",
    "write_section",
]

_SECTION = re.compile(r"(?m)^(?=## )")
#: The provenance line of a section: ``Commit: `<40 hex>```, optionally followed by a note
#: (uncommitted changes), or ``Commit: not recorded`` for sections older than the rule.
COMMIT_LINE = re.compile(r"(?m)^Commit: (?:`([0-9a-f]{40})`|not recorded)")


def _git(folder: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def provenance(folder: Path) -> str | None:
    """The ``Commit:`` line for a record written from the checkout holding ``folder``:
    HEAD's hash, and whether tracked source files had uncommitted changes (None outside
    a git checkout: there is no commit to name)."""
    folder = Path(folder)
    while not folder.exists():
        folder = folder.parent
    head = _git(folder, "rev-parse", "HEAD")
    if not head:
        return None
    dirty = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", "src")
    return f"Commit: `{head}`" + (" with uncommitted changes to src/" if dirty else "")


def commit_of(section: str) -> str | None:
    """The commit hash a section names (None: not recorded or unknown)."""
    m = COMMIT_LINE.search(section)
    return m.group(1) if m else None


def section_label(heading: str) -> str:
    """The label of a ``## label[: title]`` heading line."""
    if not heading.startswith("## "):
        raise ValueError(f"a section heading starts with '## ', got {heading[:40]!r}")
    return heading[3:].split(":", 1)[0].strip()


def read_sections(text: str) -> tuple[str, dict[str, str]]:
    """``(head, {label: section text})`` of a record, sections in file order."""
    head, *parts = _SECTION.split(text)
    sections: dict[str, str] = {}
    for part in parts:
        label = section_label(part.splitlines()[0])
        if label in sections:
            raise ValueError(f"record has two sections labelled {label!r}")
        sections[label] = part
    return head, sections


def check_label(label: str) -> str:
    """``label`` if it can name a section (one line without ':'), else a ValueError: a
    benchmark checks its label before it runs, not after."""
    if not label or ":" in label or "\n" in label:
        raise ValueError(f"section label must be one line without ':', got {label!r}")
    return label


def write_section(path: Path, label: str, title: str, body: str, header: str) -> None:
    """Write section ``label`` of the record at ``path`` (created with ``header`` if absent)."""
    check_label(label)
    if re.search(r"(?m)^## ", body):
        raise ValueError(f"section {label!r}: headings inside a section start at '###'")
    heading = f"## {label}: {title}" if title else f"## {label}"
    line = None if COMMIT_LINE.search(body) else provenance(path.parent)
    if line is not None:
        body = f"{line}\n\n{body.strip()}"
    head, sections = read_sections(path.read_text() if path.exists() else header)
    sections[label] = f"{heading}\n\n{body.strip()}\n"
    text = head.rstrip() + "\n\n" + "\n".join(s.rstrip() + "\n" for s in sections.values())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def mean_ci(values: Sequence[float]) -> str:
    """``"mean ± h"``, h the half-width of the 95 % t-interval over seeds (3 decimals); the
    mean alone for fewer than two values."""
    mean, half = float(np.mean(values)), ci95_half(values)
    return f"{mean:.3f}" if half is None else f"{mean:.3f} ± {half:.3f}"


def write_record(path: Path, text: str) -> None:
    """Write a whole record (a script that owns its file without sections), with the
    ``Commit:`` line after its title unless ``text`` has one."""
    line = None if COMMIT_LINE.search(text) else provenance(path.parent)
    if line is not None:
        title, _, rest = text.partition("\n")
        text = f"{title}\n\n{line}\n\n{rest.lstrip(chr(10))}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
