"""The run directory on disk: the one place that names its files and reads or writes them.

    config.yaml                          the fully resolved config (`write_config`)
    metrics.jsonl                        one JSON object per iteration, appended and fsynced
    summary.json                         final metrics (`write_summary`)
    trajectories/iter_XXXXXX.jsonl.gz    one episode record per line (`trajectory_path`)

The trainer and its log (`cairn.train.runlog`) write these; resume, plots and reports
(`cairn.report.rundata`) read them. A run killed while appending to metrics.jsonl can leave
a half-written last line (no newline, not JSON): readers leave it out, and `keep_metrics`
(what a resumed run calls) rewrites the file without it, so the next append starts on a line
of its own.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CONFIG",
    "METRICS",
    "SUMMARY",
    "TRAJECTORIES",
    "append_metrics",
    "keep_metrics",
    "read_config",
    "read_config_text",
    "read_jsonl",
    "read_metrics",
    "read_summary",
    "restore_metrics",
    "trajectory_files",
    "trajectory_path",
    "write_config",
    "write_summary",
]

CONFIG, METRICS, SUMMARY, TRAJECTORIES = (
    "config.yaml",
    "metrics.jsonl",
    "summary.json",
    "trajectories",
)
_ITER = re.compile(r"^iter_(\d+)\.jsonl(\.gz)?$")


# -- config.yaml --------------------------------------------------------------------------------
def write_config(run_dir: Path, config: dict[str, Any]) -> Path:
    path = Path(run_dir) / CONFIG
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def read_config_text(run_dir: Path) -> tuple[dict[str, Any], str]:
    """(config as a dict, its text): ({}, "") when absent, ({}, text) when not a YAML mapping."""
    path = Path(run_dir) / CONFIG
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}, ""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}, text
    return (data if isinstance(data, dict) else {}), text


def read_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.yaml as a dict ({} when absent or unreadable)."""
    return read_config_text(run_dir)[0]


# -- metrics.jsonl ------------------------------------------------------------------------------
def read_jsonl(path: Path, *, strict: bool = False) -> tuple[list[dict[str, Any]], int]:
    """(objects, lines left out) of a JSONL file; ([], 0) when it is missing.

    A last line with no newline that is not a JSON object is a write cut short (a run killed
    mid-append): always left out and counted. Any other line that is not a JSON object is
    left out and counted, or with ``strict`` a ValueError naming the file and line number.
    """
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return [], 0
    lines = text.split("\n")  # the last item is "" when the file ends with a newline
    rows, bad = [], 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        obj = _json_object(line)
        if obj is not None:
            rows.append(obj)
            continue
        bad += 1
        torn = number == len(lines)  # the unterminated last line
        if strict and not torn:
            raise ValueError(
                f"{str(path)!r} line {number} is not a JSON object: {line[:60]!r} "
                "(fix or delete that line; nothing was changed)"
            )
    return rows, bad


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The iterations' metrics rows, without a half-written last line (ValueError on any
    other unreadable line: `read_jsonl` with ``strict``)."""
    return read_jsonl(Path(run_dir) / METRICS, strict=True)[0]


def append_metrics(run_dir: Path, row: dict[str, Any]) -> None:
    """Append one row as a line, flushed and fsynced (a kill loses at most this line)."""
    with (Path(run_dir) / METRICS).open("a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def keep_metrics(run_dir: Path, iteration: int) -> int:
    """Rewrite metrics.jsonl with the rows of iterations <= ``iteration`` (resume), without a
    half-written last line; atomic (a temporary file replaces it). Returns how many
    half-written lines it dropped (0 or 1)."""
    path = Path(run_dir) / METRICS
    rows, torn = read_jsonl(path, strict=True)
    kept = [m for m in rows if m["iteration"] <= iteration]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(m) + "\n" for m in kept))
    os.replace(tmp, path)
    return torn


def restore_metrics(run_dir: Path, rows: list[dict[str, Any]]) -> list[int]:
    """Add to metrics.jsonl each of ``rows`` whose iteration it has no row for, keeping the
    rows in iteration order; atomic. Returns the iterations added (a checkpoint's copy of
    rows the file lost, e.g. a torn last line)."""
    path = Path(run_dir) / METRICS
    kept, _ = read_jsonl(path, strict=True)
    have = {m.get("iteration") for m in kept}
    added = [r for r in rows if r.get("iteration") not in have]
    if not added:
        return []
    merged = sorted([*kept, *added], key=lambda m: m.get("iteration", 0))
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(m) + "\n" for m in merged))
    os.replace(tmp, path)
    return [r["iteration"] for r in added]


# -- summary.json -------------------------------------------------------------------------------
def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    path = Path(run_dir) / SUMMARY
    path.write_text(json.dumps(summary, indent=2))
    return path


def read_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json as a dict ({} when absent, unreadable or not a mapping)."""
    try:
        data = json.loads((Path(run_dir) / SUMMARY).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


# -- trajectories/ ------------------------------------------------------------------------------
def trajectory_path(run_dir: Path, iteration: int) -> Path:
    """Where iteration ``iteration``'s dump goes: ``trajectories/iter_XXXXXX.jsonl.gz``."""
    return Path(run_dir) / TRAJECTORIES / f"iter_{iteration:06d}.jsonl.gz"


def trajectory_files(run_dir: Path, *, every: bool = False) -> list[tuple[int, Path]]:
    """(iteration, path) of the dumps in ``run_dir/trajectories``, by iteration.

    A dump may be gzip (``.jsonl.gz``, what runs write) or plain (``.jsonl``); where an
    iteration has both, one is listed, unless ``every`` (all files, e.g. to delete them).
    """
    folder = Path(run_dir) / TRAJECTORIES
    if not folder.is_dir():
        return []
    found: list[tuple[int, Path]] = []
    seen: set[int] = set()
    for p in sorted(folder.iterdir()):
        m = _ITER.match(p.name)
        if m and p.is_file() and (every or int(m.group(1)) not in seen):
            seen.add(int(m.group(1)))
            found.append((int(m.group(1)), p))
    return sorted(found)
