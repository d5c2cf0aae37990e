"""Do two runs give the same numbers, timings aside? The behaviour check of a refactor: the
demo at 40 iterations on the code before and after it must give identical non-time metrics.

    python tests/train/same_metrics.py RUN_A RUN_B

Compares the two run folders' ``metrics.jsonl`` row by row and their ``summary.json``,
leaving out every key whose name holds a timing word (``time``, ``seconds``, ``per_s``,
``throughput``, ``memory``), at any depth (the summary's evaluations hold
``train_seconds``), and the summary's ``run_dir``. Prints how much it compared and each
difference (the first 50); exits 1 when there is any. Run both arms with
``train.threads=1`` (the same numbers on every run) and ``train.time_budget_s=null`` (the
same number of iterations however loaded the machine is).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TIMING_WORDS = ("time", "seconds", "per_s", "throughput", "memory")
_MISSING = "<missing>"

__all__ = ["TIMING_WORDS", "differences", "main", "untimed"]


def untimed(obj: Any) -> Any:
    """``obj`` without the keys whose names hold a timing word, at any depth."""
    if isinstance(obj, dict):
        return {k: untimed(v) for k, v in obj.items() if not any(w in k for w in TIMING_WORDS)}
    if isinstance(obj, list):
        return [untimed(v) for v in obj]
    return obj


def _rows(run: Path) -> list[dict[str, Any]]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [untimed(json.loads(line)) for line in lines if line.strip()]


def _summary(run: Path) -> dict[str, Any]:
    summary = untimed(json.loads((run / "summary.json").read_text()))
    summary.pop("run_dir", None)
    return summary


def _diff(where: str, a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [
        f"{where} {k}: {a.get(k, _MISSING)} vs {b.get(k, _MISSING)}"
        for k in sorted(set(a) | set(b))
        if a.get(k, _MISSING) != b.get(k, _MISSING)
    ]


def differences(a: Path, b: Path) -> tuple[list[str], str]:
    """(every difference between runs ``a`` and ``b``, timings aside; what was compared)."""
    rows_a, rows_b = _rows(a), _rows(b)
    out = [] if len(rows_a) == len(rows_b) else [f"rows: {len(rows_a)} vs {len(rows_b)}"]
    for i, (x, y) in enumerate(zip(rows_a, rows_b, strict=False)):  # count: above
        out += _diff(f"row {i + 1}", x, y)
    summary_a, summary_b = _summary(a), _summary(b)
    out += _diff("summary", summary_a, summary_b)
    keys = {k for row in rows_a for k in row}
    return out, f"{len(rows_a)} rows x {len(keys)} keys, summary {len(summary_a)} keys"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tests/train/same_metrics.py RUN_A RUN_B")
        return 2
    diffs, compared = differences(Path(argv[0]), Path(argv[1]))
    print(f"compared {compared} (timings left out)")
    print("\n".join(diffs[:50]) if diffs else "identical")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
