"""Reading a run directory for a report, with the sampling rule that keeps a report small.

A run directory (`cairn.data.rundir`, which reads its files) holds ``config.yaml``,
``metrics.jsonl``, ``summary.json`` and ``trajectories/iter_XXXXXX.jsonl.gz`` (one episode
record per line, `cairn.data.episode.to_records`). Everything is read defensively: a missing
file gives an empty section, a truncated gzip (a killed run), a bad line or a line longer than
``MAX_LINE_CHARS`` (16 Mi characters, skipped without being read whole) is skipped and
counted, and so is a dump that is a symbolic link (a run reads only its own files);
unreadable metrics lines (a half-written last line) also raise a `UserWarning`. Reading is
bounded in total, not only per line: a dump is read as a stream for at most
``MAX_DUMP_CHARS`` decompressed characters (a gzip bomb stops there), and a report holds at
most ``MAX_KEPT_BYTES`` of episode lines over all its dumps (lines past that are skipped and
counted). config.yaml, metrics.jsonl and summary.json are read by `cairn.data.rundir`:
regular files of the run only (a FIFO, a device or a link out of the run is refused).

Sampling rule (`Sampling`), stated in every report:
    iterations  of the n iterations that have a dump, at most M at evenly spaced positions
                ``floor(i*(n-1)/(M-1) + 1/2)``, i = 0..M-1: the first and the last are
                always in (M = 1: the last only);
    groups      in each of those, at most K groups, evenly spaced in the same way over the
                dump's groups in file order;
    episodes    in each group, at most E episodes: the first E in file order.
Only the sampled lines are parsed as JSON (a group id is found with a regex), so the time
to read a dump grows with its bytes, not with JSON work on episodes that are not shown.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from cairn._files import UnsafeFile, open_regular
from cairn.data.rundir import (
    METRICS,
    TRAJECTORIES,
    read_config_text,
    read_jsonl,
    read_summary,
    trajectory_files,
)

__all__ = [
    "MAX_DUMP_CHARS",
    "MAX_KEPT_BYTES",
    "MAX_LINE_CHARS",
    "Dump",
    "RunData",
    "Sampling",
    "evenly_spaced",
    "load_run",
    "read_dump",
    "read_jsonl",
    "trajectory_files",
]

_GROUP = re.compile(r'"group"\s*:\s*(-?\d+)')
MAX_LINE_CHARS = 16 * 2**20  # one episode record; a longer line is skipped, never read whole
MAX_DUMP_CHARS = 2**30  # decompressed characters read of one dump at most (a gzip bomb)
MAX_KEPT_BYTES = 64 * 2**20  # characters of episode lines one report holds, over all dumps


@dataclass(frozen=True)
class Sampling:
    """At most ``iterations`` iterations, ``groups`` groups each, ``episodes`` per group."""

    iterations: int = 24
    groups: int = 4
    episodes: int = 32

    def __post_init__(self) -> None:
        for name in ("iterations", "groups", "episodes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"Sampling.{name} must be an integer >= 1, got {v!r}")

    def describe(self) -> str:
        return (
            f"at most {self.iterations} of the dumped iterations, evenly spaced (the first and "
            f"last always included); in each, at most {self.groups} groups, evenly spaced over "
            f"the dump's groups in file order; in each group, the first {self.episodes} episodes."
        )


def evenly_spaced(n: int, k: int) -> list[int]:
    """Sorted distinct indices of at most ``k`` of ``n`` items, evenly spaced.

    ``k >= n``: all of them; ``k = 1``: the last; otherwise ``floor(i*(n-1)/(k-1) + 1/2)``
    for i = 0..k-1, which starts at 0, ends at n-1 and never repeats (the step is >= 1).
    """
    if n < 0 or k < 1:
        raise ValueError(f"evenly_spaced needs n >= 0 and k >= 1, got n={n}, k={k}")
    if k >= n:
        return list(range(n))
    if k == 1:
        return [n - 1]
    return [math.floor(i * (n - 1) / (k - 1) + 0.5) for i in range(k)]


@dataclass
class Dump:
    """The sampled part of one iteration's dump.

    ``groups``: (group id, [episode records]) in file order; ``n_groups`` / ``n_episodes``:
    how many the whole dump holds; ``skipped``: unreadable lines (or a truncated tail).
    """

    iteration: int
    groups: list[tuple[int, list[dict[str, Any]]]]
    n_groups: int
    n_episodes: int
    skipped: int = 0


class _Budget:
    """Bytes of episode lines a report may still hold (``MAX_KEPT_BYTES`` over all dumps)."""

    def __init__(self) -> None:
        self.left = MAX_KEPT_BYTES


class _Lines:
    """The text lines of a dump (gzip or plain), read as a stream: a line longer than
    ``MAX_LINE_CHARS`` is skipped and counted without being held whole (read in pieces of
    that size); reading stops after ``MAX_DUMP_CHARS`` decompressed characters (a gzip bomb)
    and a truncated gzip keeps what was readable, each counting one line more in
    ``skipped``; a dump that is not a regular file of ``root`` is not read (one skipped)."""

    def __init__(self, path: Path, root: Path | None = None):
        self.path, self.root, self.skipped = path, root, 0

    def __iter__(self) -> Iterator[str]:
        read = 0
        try:
            with open_regular(self.path, root=self.root) as raw, self._text(raw) as f:
                while line := f.readline(MAX_LINE_CHARS):
                    read += len(line)
                    if read > MAX_DUMP_CHARS:
                        self.skipped += 1  # the rest of a dump larger than any run writes
                        return
                    if len(line) < MAX_LINE_CHARS or line.endswith("\n"):
                        yield line
                        continue
                    self.skipped += 1
                    while (rest := f.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                        read += len(rest)  # the rest of the over-long line, a piece at a time
                        if read > MAX_DUMP_CHARS:
                            return
        except (EOFError, OSError, zlib.error, UnsafeFile):
            self.skipped += 1

    def _text(self, raw: BinaryIO) -> io.TextIOWrapper:
        """``raw`` as text, gunzipped for a ``.gz`` dump (closing it leaves ``raw`` open)."""
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if self.path.suffix == ".gz" else raw
        return io.TextIOWrapper(stream, encoding="utf-8", errors="replace")


def _inside(path: Path, run_dir: Path) -> bool:
    """Whether ``path`` is a plain file of ``run_dir``'s trajectories (no link leaving it)."""
    folder = (run_dir / TRAJECTORIES).resolve()
    return not path.is_symlink() and path.resolve().parent == folder


def _group_of(line: str) -> int | None:
    m = _GROUP.search(line)
    if m is not None:
        return int(m.group(1))
    try:
        g = json.loads(line).get("group")
    except (json.JSONDecodeError, AttributeError):
        return None
    return g if isinstance(g, int) else None


def read_dump(
    path: Path,
    iteration: int,
    sampling: Sampling,
    budget: _Budget | None = None,
    root: Path | None = None,
) -> Dump:
    """Read one dump as a stream, holding at most ``sampling.episodes`` lines of each group
    (and no more bytes of lines than ``budget`` has left: a line past it is skipped and
    counted), then parse only the lines of the sampled groups. ``root``: the folder the
    dump must lie in once links are resolved."""
    budget = budget if budget is not None else _Budget()
    lines = _Lines(Path(path), root)
    by_group: dict[int, list[str]] = {}
    n_episodes = skipped = 0
    for line in lines:
        if not line.strip():
            continue
        g = _group_of(line)
        if g is None:
            skipped += 1
            continue
        kept = by_group.setdefault(g, [])
        n_episodes += 1
        if len(kept) >= sampling.episodes:
            continue
        if len(line) > budget.left:  # the report holds enough already
            skipped += 1
            continue
        budget.left -= len(line)
        kept.append(line)
    order = list(by_group)
    chosen = set(evenly_spaced(len(order), sampling.groups))
    budget.left += sum(len(x) for i, g in enumerate(order) if i not in chosen for x in by_group[g])
    groups = []
    for i in sorted(chosen):
        records = []
        for line in by_group[order[i]]:
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                skipped += 1
                continue
            if isinstance(rec, dict):
                records.append(rec)
        if records:
            groups.append((order[i], records))
    return Dump(iteration, groups, len(order), n_episodes, skipped + lines.skipped)


@dataclass
class RunData:
    """Everything a run report shows, as read from disk."""

    run_dir: Path
    config: dict[str, Any]
    config_text: str
    metrics: list[dict[str, Any]]
    summary: dict[str, Any]
    evals: list[dict[str, Any]]
    dumped: list[int]  # iterations that have a dump
    dumps: list[Dump] = field(default_factory=list)
    skipped: int = 0  # unreadable lines over metrics and the sampled dumps


def _evals(summary: dict[str, Any], metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Evaluations from summary.json, else from the eval/ keys of the metrics rows."""
    evals = summary.get("evals")
    if isinstance(evals, list) and evals:
        return [e for e in evals if isinstance(e, dict)]
    out = []
    for m in metrics:
        ev = {k: v for k, v in m.items() if k.startswith("eval/")}
        if ev:
            out.append({"iteration": m.get("iteration"), "episodes": m.get("episodes"), **ev})
    return out


def load_run(run_dir: Path, sampling: Sampling | None = None) -> RunData:
    """Read a run directory; ValueError when it is not one (no config, metrics or dumps)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{str(run_dir)!r} is not a directory (expected a run directory)")
    sampling = sampling or Sampling()
    config, config_text = read_config_text(run_dir)
    metrics, bad = read_jsonl(run_dir / METRICS)
    if bad:
        warnings.warn(
            f"{str(run_dir / METRICS)!r}: {bad} unreadable line(s) skipped "
            "(a half-written last line is what a run killed mid-write leaves)",
            stacklevel=2,
        )
    listed = trajectory_files(run_dir)
    files = [(it, path) for it, path in listed if _inside(path, run_dir)]
    if not (config or metrics or listed):
        raise ValueError(
            f"{str(run_dir)!r} has no config.yaml, metrics.jsonl or trajectories/: "
            "not a cairn run directory"
        )
    summary = read_summary(run_dir)
    data = RunData(run_dir, config, config_text, metrics, summary, _evals(summary, metrics), [])
    data.dumped = [it for it, _ in files]
    budget = _Budget()
    for i in evenly_spaced(len(files), sampling.iterations):
        it, path = files[i]
        dump = read_dump(path, it, sampling, budget, root=run_dir)
        data.skipped += dump.skipped
        data.dumps.append(dump)
    data.skipped += bad + len(listed) - len(files)  # dumps that are links out of the run
    return data
