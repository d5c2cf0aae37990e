"""What a run writes as it goes: metrics.jsonl, trajectory dumps, and the live progress line.

Every write is appended and flushed at the end of an iteration, so a killed run loses
at most the iteration in flight; `truncate_after` drops what a resumed run will redo.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

__all__ = ["RunLog", "read_metrics"]

_SHOWN = [
    ("rollout/success", "succ", ".2f"),
    ("rollout/return", "ret", "+.2f"),
    ("rollout/invalid_rate", "inv", ".2f"),
    ("actor/entropy", "ent", ".2f"),
    ("actor/kl", "kl", ".3f"),
    ("actor/clipfrac", "clip", ".2f"),
    ("time/iteration", "s/it", ".1f"),
]


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RunLog:
    def __init__(self, run_dir: Path, progress: bool | None = None):
        self.dir = run_dir
        self.metrics_path = run_dir / "metrics.jsonl"
        self.traj_dir = run_dir / "trajectories"
        self.traj_dir.mkdir(parents=True, exist_ok=True)
        live = sys.stdout.isatty() if progress is None else progress
        self.console = Console(highlight=False, force_terminal=live or None, soft_wrap=True)

    def truncate_after(self, iteration: int) -> None:
        """Forget metrics and trajectories of iterations after ``iteration`` (resume)."""
        kept = [m for m in read_metrics(self.dir) if m["iteration"] <= iteration]
        tmp = self.metrics_path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(m) + "\n" for m in kept))
        os.replace(tmp, self.metrics_path)
        for p in self.traj_dir.glob("iter_*.jsonl.gz"):
            if int(p.name[5:11]) > iteration:
                p.unlink()

    def metrics(self, row: dict[str, Any]) -> None:
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(_clean(row)) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def trajectories(self, iteration: int, records: list[dict[str, Any]]) -> None:
        path = self.traj_dir / f"iter_{iteration:06d}.jsonl.gz"
        tmp = path.with_suffix(".tmp")
        with gzip.open(tmp, "wt") as f:
            for r in records:
                f.write(json.dumps(_clean(r)) + "\n")
        os.replace(tmp, path)

    def line(self, row: dict[str, Any], budget: str) -> None:
        parts = [f"it {row['iteration']:>4}", f"ep {row['episodes']:>6}"]
        parts += [f"{short} {row[k]:{fmt}}" for k, short, fmt in _SHOWN if k in row]
        if "eval/success" in row:
            parts.append(f"[bold]eval {row['eval/success']:.2f}[/bold]")
        parts.append(budget)
        self.console.print("  ".join(parts))

    def say(self, text: str) -> None:
        self.console.print(text)


def _clean(obj: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, str):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
