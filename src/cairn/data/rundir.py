"""The run directory on disk: the one place that names its files and reads or writes them.

    config.yaml                          the fully resolved config, written once when the
                                         run is created (`write_config`, atomic); a resume
                                         never rewrites it
    amendments.jsonl                     keys changed with --set on a resume: time,
                                         iteration, key/old/new (`append_amendment`)
    run.lock                             held (flock) by the process writing the run, which
                                         wrote its pid there (`RunLock`)
    metrics.jsonl                        one JSON object per iteration, appended and fsynced
    summary.json                         final metrics (`write_summary`)
    trajectories/iter_XXXXXX.jsonl.gz    one episode record per line (`trajectory_path`)
    eval/<checkpoint>-<n>.json           `cairn eval`'s result, and the held-out episodes it
    eval/<checkpoint>-<n>.episodes.jsonl.gz   played, one record per line (`episodes_path`)

The trainer and its log (`cairn.train.runlog`) write these; resume, plots and reports
(`cairn.report.rundata`) read them, every file through `cairn._files` (regular files only,
none reached through a link out of the run, each bounded in total: ``LIMITS``); a file that
breaks that is refused with `UnsafeFile` (a ValueError: one line), never read. A run
killed while appending to metrics.jsonl can leave a half-written last line (no newline, not
JSON): readers leave it out, and `keep_metrics` (what a resumed run calls) rewrites the file
without it, so the next append starts on a line of its own.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import re
from collections.abc import Iterable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

import yaml

from cairn._files import read_text

__all__ = [
    "AMENDMENTS",
    "CONFIG",
    "LOCK",
    "METRICS",
    "SUMMARY",
    "TRAJECTORIES",
    "RunLock",
    "RunLocked",
    "append_amendment",
    "append_metrics",
    "episodes_path",
    "keep_amendments",
    "keep_metrics",
    "read_amendments",
    "read_config",
    "read_config_text",
    "read_jsonl",
    "read_metrics",
    "read_summary",
    "restore_metrics",
    "trajectory_files",
    "trajectory_path",
    "write_config",
    "write_records",
    "write_summary",
]

CONFIG, METRICS, SUMMARY, TRAJECTORIES = (
    "config.yaml",
    "metrics.jsonl",
    "summary.json",
    "trajectories",
)
AMENDMENTS, LOCK = "amendments.jsonl", "run.lock"
#: Bytes read at most of each file (a larger one is refused: no run writes one that large;
#: metrics.jsonl holds about 2 KB an iteration, so 128 MiB is some 60,000 iterations).
LIMITS = {CONFIG: 1 << 20, METRICS: 128 << 20, SUMMARY: 16 << 20, AMENDMENTS: 16 << 20}
_ITER = re.compile(r"^iter_(\d+)\.jsonl(\.gz)?$")


def _write_atomic(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file, fsynced, renamed, folder fsynced: a
    reader sees the old file or the new one, never a part (ENOSPC leaves the old one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- config.yaml --------------------------------------------------------------------------------
def write_config(run_dir: Path, config: Mapping[str, object]) -> Path:
    """config.yaml, atomically (the trainer writes it once, when it creates the run)."""
    path = Path(run_dir) / CONFIG
    _write_atomic(path, yaml.safe_dump(config, sort_keys=False))
    return path


def read_config_text(run_dir: Path) -> tuple[dict[str, Any], str]:
    """(config as a dict, its text): ({}, "") when absent, ({}, text) when not a YAML mapping."""
    path = Path(run_dir) / CONFIG
    try:
        text = read_text(path, LIMITS[CONFIG], root=run_dir, errors="replace")
    except OSError:  # missing or unreadable (UnsafeFile, a ValueError, goes through)
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
def read_jsonl(
    path: Path, *, strict: bool = False, limit: int | None = None
) -> tuple[list[dict[str, Any]], int]:
    """(objects, lines left out) of a JSONL file; ([], 0) when it is missing. UnsafeFile
    when it is not a regular file of its folder or holds more than ``limit`` bytes (default
    ``LIMITS`` of its name, else metrics.jsonl's).

    A last line with no newline that is not a JSON object is a write cut short (a run killed
    mid-append): always left out and counted. Any other line that is not a JSON object is
    left out and counted, or with ``strict`` a ValueError naming the file and line number.
    """
    path = Path(path)
    cap = limit if limit is not None else LIMITS.get(path.name, LIMITS[METRICS])
    try:
        text = read_text(path, cap, root=path.parent, errors="replace")
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


def append_metrics(run_dir: Path, row: Mapping[str, object]) -> None:
    """Append one row as a line, flushed and fsynced (a kill loses at most this line)."""
    _append_line(Path(run_dir) / METRICS, row)


def _append_line(path: Path, row: Mapping[str, object]) -> None:
    """``row`` as one JSON line at the end of ``path``, flushed and fsynced."""
    with path.open("a") as f:
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
    _write_atomic(path, "".join(json.dumps(m) + "\n" for m in merged))
    return [r["iteration"] for r in added]


# -- amendments.jsonl ---------------------------------------------------------------------------
def read_amendments(run_dir: Path) -> list[dict[str, Any]]:
    """The amendment rows, oldest first (ValueError on a line that is not a JSON object,
    except a half-written last one)."""
    return read_jsonl(Path(run_dir) / AMENDMENTS, strict=True)[0]


def append_amendment(run_dir: Path, row: Mapping[str, object]) -> None:
    """Append one amendment (``time``, ``iteration``, ``changes``: key/old/new), fsynced."""
    _append_line(Path(run_dir) / AMENDMENTS, row)


def keep_amendments(run_dir: Path, iteration: int) -> None:
    """Keep the amendments made at iterations <= ``iteration`` (a resume from that
    checkpoint; later ones belonged to checkpoints it goes back past), atomically."""
    path = Path(run_dir) / AMENDMENTS
    rows = read_amendments(run_dir)
    kept = [r for r in rows if r.get("iteration", 0) <= iteration]
    if path.exists() and len(kept) < len(rows):
        _write_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))


# -- run.lock -----------------------------------------------------------------------------------
class RunLocked(RuntimeError):
    """Another process writes this run (it holds run.lock); ``holder``: its pid, or "?"."""

    def __init__(self, message: str, holder: str = "?"):
        super().__init__(message)
        self.holder = holder


_HELD: dict[str, list[Any]] = {}  # lock path -> [open file, holds], this process's locks


class RunLock:
    """An exclusive ``fcntl.flock`` on ``run_dir/run.lock`` for the life of a writer (train,
    resume), with the holder's pid in the file; readers (eval, inspect) never take it.
    Re-entrant within a process (the CLI and the Trainer it builds hold it together).
    ``acquire`` raises RunLocked naming the holder's pid when another process has it."""

    def __init__(self, run_dir: Path, name: str = LOCK):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / name
        self.key = os.path.realpath(self.path)
        self.held = False

    def acquire(self) -> RunLock:
        if self.held:
            return self
        if self.key not in _HELD:
            _HELD[self.key] = [self._take(), 0]
        _HELD[self.key][1] += 1
        self.held = True
        return self

    def _take(self) -> IO[str]:
        f = self.path.open("a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read(32).strip()
            f.close()
            pid = holder if holder.isdigit() else "?"
            raise RunLocked(
                f"{self.run_dir} is in use: process {pid} holds {self.path} (a cairn train or "
                "resume writing it); wait for it to end or stop it",
                pid,
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        return f

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        entry = _HELD.get(self.key)
        if entry is None:  # a forked child's copy: the lock stays with the parent
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD[self.key]
            f = entry[0]
            with suppress(OSError):
                f.truncate(0)  # no stale pid
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _drop_inherited_locks() -> None:
    """In a forked child (an env worker): close the run.lock files inherited from the
    parent without unlocking them. An flock belongs to the open file, which a fork shares,
    so a worker outliving its trainer would otherwise keep the run locked."""
    for f, _ in _HELD.values():
        with suppress(OSError):
            f.close()  # closes this process's descriptor only; no LOCK_UN
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


# -- summary.json -------------------------------------------------------------------------------
def write_summary(run_dir: Path, summary: Mapping[str, object]) -> Path:
    path = Path(run_dir) / SUMMARY
    path.write_text(json.dumps(summary, indent=2))
    return path


def read_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json as a dict ({} when absent, unreadable or not a mapping; UnsafeFile when
    it is not a regular file of the run or too large)."""
    try:
        data = json.loads(read_text(Path(run_dir) / SUMMARY, LIMITS[SUMMARY], root=run_dir))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


# -- trajectories/ ------------------------------------------------------------------------------
def trajectory_path(run_dir: Path, iteration: int) -> Path:
    """Where iteration ``iteration``'s dump goes: ``trajectories/iter_XXXXXX.jsonl.gz``."""
    return Path(run_dir) / TRAJECTORIES / f"iter_{iteration:06d}.jsonl.gz"


def episodes_path(result: Path) -> Path:
    """Where the episodes behind the result file ``result`` (``X.json``) go:
    ``X.episodes.jsonl.gz`` beside it."""
    return result.with_name(f"{result.stem}.episodes.jsonl.gz")


def write_records(path: Path, records: Iterable[Mapping[str, object]]) -> None:
    """``records`` as gzip JSON lines at ``path``, replaced atomically (a dump, or the
    episodes of an evaluation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with gzip.open(tmp, "wt", compresslevel=6) as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


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
