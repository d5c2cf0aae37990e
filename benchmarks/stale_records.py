"""Which recorded numbers still describe today's code: every section of every record under
benchmarks/results names the commit it ran on (``Commit:``, benchmarks/_lib/records.py); a
section is current when nothing under src/ changed between that commit and HEAD, else
stale (to be re-run, or read as a result of the older code).

    python benchmarks/stale_records.py            # one line per section
    python benchmarks/stale_records.py --stale    # only the stale ones
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # benchmarks/_lib
from _lib.records import commit_of, read_sections

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def changed_since(commit: str) -> int | None:
    """Files under src/ that differ between ``commit`` and HEAD (None: unknown commit)."""
    out = subprocess.run(
        ["git", "diff", "--name-only", commit, "HEAD", "--", "src"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    return None if out.returncode else len(out.stdout.split())


def status(section: str) -> str:
    commit = commit_of(section)
    if commit is None:
        return "stale: commit not recorded"
    n = changed_since(commit)
    if n is None:
        return f"stale: commit {commit[:10]} is not in this repository"
    return (
        f"current ({commit[:10]})"
        if n == 0
        else f"stale: {n} src files changed since {commit[:10]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stale", action="store_true", help="list only stale sections")
    args = ap.parse_args()
    for path in sorted(RESULTS.glob("*/*.md")):
        head, sections = read_sections(path.read_text())
        parts = sections or {"(whole file)": head}
        for label, text in parts.items():
            line = status(text)
            if not args.stale or line.startswith("stale"):
                print(f"{path.relative_to(RESULTS)} [{label}]: {line}")


if __name__ == "__main__":
    main()
