"""Reading a run directory for a report, with the sampling rule that keeps a report small.

A run directory (`cairn.data.rundir`, which reads its files) holds ``config.yaml``,
``metrics.jsonl``, ``summary.json`` and ``trajectories/iter_XXXXXX.jsonl.gz`` (one episode
record per line, `cairn.data.episode.to_records`). Everything is read defensively: a missing
file gives an empty section, a truncated gzip (a killed run), a bad line or a line longer than
``MAX_LINE_CHARS`` (16 Mi characters, skipped without being read whole) is skipped and
counted, and so is a dump that is a symbolic link (a run reads only its own files);
unreadable metrics lines (a half-written last line) also raise a `UserWarning`.

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
import json
import math
import re
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.data.rundir import (
    METRICS,
    TRAJECTORIES,
    read_config_text,
    read_jsonl,
    read_summary,
    trajectory_files,
)

__all__ = [
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


def _lines(path: Path) -> tuple[list[str], int]:
    """(text lines of a dump (gzip or plain), lines left out): a line longer than
    ``MAX_LINE_CHARS`` is skipped and counted without being held whole (read in pieces of
    that size); a truncated gzip keeps what was readable and counts one more."""
    opener = gzip.open if path.suffix == ".gz" else open
    lines: list[str] = []
    skipped = 0
    try:
        with opener(path, "rt", errors="replace") as f:
            while line := f.readline(MAX_LINE_CHARS):
                if len(line) < MAX_LINE_CHARS or line.endswith("\n"):
                    lines.append(line)
                    continue
                skipped += 1
                while (rest := f.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                    pass  # the rest of the over-long line, a piece at a time
    except (EOFError, OSError, zlib.error):
        return lines, skipped + 1
    return lines, skipped


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


def read_dump(path: Path, iteration: int, sampling: Sampling) -> Dump:
    """Read one dump, parsing only the lines of the sampled groups and episodes."""
    lines, skipped = _lines(Path(path))
    by_group: dict[int, list[str]] = {}
    n_episodes = 0
    for line in lines:
        if not line.strip():
            continue
        g = _group_of(line)
        if g is None:
            skipped += 1
            continue
        by_group.setdefault(g, []).append(line)
        n_episodes += 1
    order = list(by_group)
    groups = []
    for i in evenly_spaced(len(order), sampling.groups):
        records = []
        for line in by_group[order[i]][: sampling.episodes]:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            if isinstance(rec, dict):
                records.append(rec)
        if records:
            groups.append((order[i], records))
    return Dump(iteration, groups, len(order), n_episodes, skipped)


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
    for i in evenly_spaced(len(files), sampling.iterations):
        it, path = files[i]
        dump = read_dump(path, it, sampling)
        data.skipped += dump.skipped
        data.dumps.append(dump)
    data.skipped += bad + len(listed) - len(files)  # dumps that are links out of the run
    return data
