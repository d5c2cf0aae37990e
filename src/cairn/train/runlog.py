"""What a run writes as it goes: metrics.jsonl, trajectory dumps, and the live progress line
(one per iteration, and within a long one ``live_line``).

Every write is appended and flushed at the end of an iteration, so a killed run loses
at most the iteration in flight; `truncate_after` drops what a resumed run will redo.

Each metrics row also goes to the loggers of ``log.loggers`` (`cairn.train.loggers`:
TensorBoard, Weights & Biases, MLflow); a failing logger is disabled, never the run.
Trajectory dumps are gzip JSONL, one episode per line (`cairn.data.episode.to_records`),
floats rounded to ``log.trajectory_digits`` significant digits (7: float32 precision,
the precision the policy computes in; about a quarter smaller gzip files than full repr).
When the caller does not pass ``loggers`` / ``config``, they are read from the run
directory's ``config.yaml`` (the trainer writes it before it opens the log). File names and
formats belong to `cairn.data.rundir`, the one reader and writer of run directories.
"""

from __future__ import annotations

import atexit
import math
import sys
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from cairn.data import rundir
from cairn.data.rundir import read_metrics
from cairn.train.loggers import LoggerSet
from cairn.train.progress import LiveLine

__all__ = ["RunLog", "read_metrics"]

_SHOWN = [
    ("rollout/success", "succ", ".2f"),
    ("rollout/return", "ret", "+.2f"),
    ("rollout/invalid_rate", "inv", ".2f"),
    ("rollout/task_blind", "blind", ".2f"),
    ("curriculum/level", "lvl", ".0f"),
    ("actor/entropy", "ent", ".2f"),
    ("actor/kl", "kl", ".3f"),
    ("actor/clipfrac", "clip", ".2f"),
    ("time/iteration", "s/it", ".1f"),
]


class RunLog:
    def __init__(
        self,
        run_dir: Path,
        progress: bool | None = None,
        loggers: Sequence[str] | None = None,
        config: dict[str, Any] | None = None,
        digits: int | None = -1,
    ):
        """``loggers``/``config``/``digits`` default to the run directory's config.yaml.

        ``digits``: significant digits of floats in trajectory dumps (None: all; -1: from
        the config, 7 when it has none).
        """
        self.dir = run_dir = Path(run_dir)
        self.metrics_path = run_dir / rundir.METRICS
        self.traj_dir = run_dir / rundir.TRAJECTORIES
        self.traj_dir.mkdir(parents=True, exist_ok=True)
        self.live = live = sys.stdout.isatty() if progress is None else progress
        self.console = Console(highlight=False, force_terminal=live or None, soft_wrap=True)
        if config is None:
            config = rundir.read_config(run_dir)
        log_cfg = config.get("log") or {}
        if loggers is None:
            loggers = log_cfg.get("loggers") or ["jsonl"]
        self.digits = log_cfg.get("trajectory_digits", 7) if digits == -1 else digits
        self.loggers = LoggerSet(loggers, run_dir, config, say=self.say)
        # Rows logged since the last checkpoint: the trainer stores them in the next one, so
        # a row metrics.jsonl loses later is rebuilt on resume (``truncate_after``).
        self.unsaved_rows: list[dict[str, Any]] = []
        # Objects with ``on_iteration(row)`` (``cairn.train(..., callbacks=[...])``): each
        # gets every metrics row, JSON-safe, after it is written.
        self.callbacks: list[Any] = []
        if self.loggers.active:
            atexit.register(_close_at_exit, weakref.ref(self))

    def close(self) -> None:
        """Finish the external loggers (idempotent; also runs at interpreter exit)."""
        self.loggers.close()

    def truncate_after(self, iteration: int, saved_rows: Sequence[dict[str, Any]] = ()) -> None:
        """Forget metrics and trajectories of iterations after ``iteration`` (resume), and a
        half-written last metrics line (a kill mid-write); then put back, from
        ``saved_rows`` (the checkpoint's copy), each row up to ``iteration`` that the file
        lacks (e.g. that torn line, when the checkpoint covers its iteration)."""
        if rundir.keep_metrics(self.dir, iteration):
            self.say("[yellow]metrics.jsonl: dropped a half-written last line[/yellow]")
        rows = [r for r in saved_rows if r.get("iteration", iteration + 1) <= iteration]
        if rebuilt := rundir.restore_metrics(self.dir, rows):
            self.say(f"metrics.jsonl: rebuilt iteration(s) {rebuilt} from the checkpoint")
        for it, path in rundir.trajectory_files(self.dir, every=True):
            if it > iteration:
                path.unlink()

    def metrics(self, row: dict[str, Any]) -> None:
        clean = _clean(row)
        rundir.append_metrics(self.dir, clean)
        self.unsaved_rows.append(clean)
        self.loggers.log(row, step=int(row.get("iteration", 0)))
        for callback in self.callbacks:
            callback.on_iteration(dict(clean))

    def trajectories(self, iteration: int, records: Sequence[Mapping[str, object]]) -> None:
        """``trajectories/iter_XXXXXX.jsonl.gz``: one episode record per line, floats rounded."""
        path = rundir.trajectory_path(self.dir, iteration)
        rundir.write_records(path, (_clean(r, self.digits) for r in records))

    def line(self, row: dict[str, Any], budget: str) -> None:
        parts = [f"it {row['iteration']:>4}", f"ep {row['episodes']:>6}"]
        parts += [f"{short} {row[k]:{fmt}}" for k, short, fmt in _SHOWN if k in row]
        if "eval/success" in row:
            parts.append(f"[bold]eval {row['eval/success']:.2f}[/bold]")
        parts.append(budget)
        self.console.print("  ".join(parts))

    def live_line(self, iteration: int, episodes: int) -> LiveLine:
        """The line shown within an iteration that runs over 10 s (``cairn.train.progress``;
        off with the live progress): ``with log.live_line(it, n): ...``."""
        return LiveLine(self.console, self.live, iteration, episodes)

    def say(self, text: str) -> None:
        self.console.print(text)


def _clean(obj: Any, digits: int | None = None) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to None; floats to ``digits`` significant."""
    if isinstance(obj, dict):
        return {k: _clean(v, digits) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v, digits) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, str):
        obj = obj.item()
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        if digits is not None:
            return float(f"{obj:.{digits}g}")
    return obj


def _close_at_exit(ref: weakref.ref) -> None:
    log = ref()
    if log is not None:
        log.close()
