"""Seconds the command line takes to answer what needs no run: ``cairn --version``,
``cairn presets``, a one-line config error (a misspelled key), and for context ``cairn
train --help``, ``cairn config PRESET`` and an env option error (the preflight builds the
env). Each under 0.5 s is the aim; they took 4-8 s when importing the config pulled in
torch and transformers.

    python benchmarks/speed/cli_speed.py [--repeats 7] [--src PATH]   # PATH: another source tree
    python benchmarks/speed/cli_speed.py --dry                        # 2 repeats, no file

Every command runs ``--repeats`` times, each in a fresh interpreter (``python -m
cairn.cli``), commands interleaved so that a change in the machine's load hits all alike.
Per command: the median and the minimum wall seconds, and the median CPU seconds of the
child (user + system), which a loaded machine inflates far less than wall time. The load
average before and after is recorded. Writes ``benchmarks/results/speed/cli_speed.md``
(with ``cli_speed.json``) unless --dry; ``--src`` times another checkout's ``src`` (e.g.
the code before a change) and adds it to the record as the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "results" / "speed"
SRC = Path(__file__).resolve().parents[2] / "src"
LIMIT_S = 0.5

#: (what, argv after ``cairn``, expected exit status)
COMMANDS = [
    ("cairn --version", ["--version"], 0),
    ("cairn presets", ["presets"], 0),
    ("config error (misspelled key)", ["train", "--set", "rollout.grup_size=4"], 2),
    ("cairn train --help", ["train", "--help"], 0),
    ("cairn config sokoban_grpo", ["config", "sokoban_grpo"], 0),
    ("env option error (preflight)", ["train", "--set", "env.options.size=2"], 2),
]
TRACKED = COMMANDS[:3]  # the three the aim is about


def once(argv: list[str], expect: int, src: Path) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one ``python -m cairn.cli ARGV``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cairn.cli", *argv], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        raise SystemExit(f"cairn {' '.join(argv)} exited {done.returncode}: {done.stdout}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(src: Path, repeats: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[tuple[float, float]]] = {what: [] for what, _, _ in COMMANDS}
    for _ in range(repeats):
        for what, argv, expect in COMMANDS:
            samples[what].append(once(argv, expect, src))
    return {
        what: {
            "wall_median_s": statistics.median(w for w, _ in runs),
            "wall_min_s": min(w for w, _ in runs),
            "cpu_median_s": statistics.median(c for _, c in runs),
        }
        for what, runs in samples.items()
    }


def table(result: dict[str, dict[str, float]], baseline: dict | None) -> str:
    head = "| command | wall s (median, min) | CPU s (median) |"
    rule = "|---|---|---|"
    if baseline is not None:
        head += " baseline wall s (median, min) | baseline CPU s |"
        rule += "---|---|"
    rows = [head, rule]
    for what, r in result.items():
        mark = " **" if what in {t[0] for t in TRACKED} else " "
        row = f"|{mark}{what}{mark.strip()} | {r['wall_median_s']:.2f} ({r['wall_min_s']:.2f}) |"
        row += f" {r['cpu_median_s']:.2f} |"
        if baseline is not None:
            b = baseline[what]
            row += f" {b['wall_median_s']:.2f} ({b['wall_min_s']:.2f}) | {b['cpu_median_s']:.2f} |"
        rows.append(row)
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--src", type=Path, default=None, help="a baseline source tree to time too")
    p.add_argument("--dry", action="store_true", help="2 repeats, print, write nothing")
    args = p.parse_args()
    repeats = 2 if args.dry else args.repeats
    load_before = os.getloadavg()[0]
    result = measure(SRC, repeats)
    baseline = measure(args.src.resolve(), repeats) if args.src else None
    load_after = os.getloadavg()[0]
    tracked = [result[what]["cpu_median_s"] for what, _, _ in TRACKED]
    verdict = "under" if max(tracked) < LIMIT_S else "NOT under"
    text = (
        "# Command-line start-up: answers that need no run\n\n"
        f"Measured {date.today()} on {platform.machine()} ({os.cpu_count()} cores, Python "
        f"{platform.python_version()}), load average {load_before:.1f} before and "
        f"{load_after:.1f} after, by `python benchmarks/speed/cli_speed.py --repeats {repeats}"
        f"{' --src BASELINE/src' if args.src else ''}`: each command {repeats} times in "
        "a fresh interpreter, interleaved. Wall time grows with the machine's load; the "
        "child's CPU time much less. The three commands in bold are the aim "
        f"(< {LIMIT_S} s): their CPU medians are {verdict} it.\n\n"
        f"{table(result, baseline)}\n"
    )
    print(text)
    if args.dry:
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
    from _lib.records import write_record

    write_record(OUT / "cli_speed.md", text)
    record = {"result": result, "baseline": baseline, "load": [load_before, load_after]}
    (OUT / "cli_speed.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
