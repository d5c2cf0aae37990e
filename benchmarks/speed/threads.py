"""Seconds per training iteration of the demo (``cairn train`` with no argument: GiGPO,
the tiny model, sokoban) with ``train.threads`` 1 vs 2, for choosing the default on a
quiet machine and a loaded one (the default, 1, was chosen from it; on a shared 2-core
machine 1 thread generated 4-10x faster than 2, which a loaded machine can fake).

    python benchmarks/speed/threads.py [--threads 1,2] [--repeats 3] [--iterations 6]
    python benchmarks/speed/threads.py --dry        # seconds: 1 repeat, 2 small iterations, no file

Arms alternate (1, 2, 1, 2, ...), each a fresh process (torch's thread pools are set once
per process), so a change in the machine's load hits both arms alike. In each process the
first iteration warms up and is left out; the others give the median seconds of the
rollout (``time/rollout``: generation and env steps), the update (``time/update``) and the
whole iteration. The table reports, per arm, the median over repeats and the spread (min to
max), plus the load average before and after, and is written to
``benchmarks/results/speed/threads.md`` (with ``threads.json``) unless --dry. Run it on a
quiet machine: the numbers mean nothing while other jobs share the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.arms import arm_result
from _lib.records import write_record

OUT = Path(__file__).resolve().parents[1] / "results" / "speed"
KEYS = ("time/rollout", "time/update", "time/iteration")
DRY = ["rollout.groups=2", "rollout.group_size=2", "rollout.max_turns=3"]


def arm(threads: int, iterations: int, extra: list[str]) -> dict[str, float]:
    """One process's medians (seconds) over iterations 2..N of the demo config."""
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            f"train.threads={threads}", f"train.iterations={iterations}",
            "train.time_budget_s=null", "eval.at_start=false", "eval.every=0",
            "checkpoint.every=100000", "log.progress=false", f"out_dir={tmp}", *extra,
        ]  # fmt: skip
        trainer = Trainer(load_config(None, overrides), Path(tmp) / "run")
        rows = []
        for it in range(1, iterations + 1):
            trainer.iteration = it
            rows.append(trainer.train_iteration())
    warm = rows[1:] or rows
    return {k: statistics.median(r[k] for r in warm) for k in KEYS}


def run(threads: list[int], repeats: int, iterations: int, extra: list[str]) -> list[dict]:
    out = []
    for rep in range(repeats):
        for t in threads:
            spec = json.dumps({"threads": t, "iterations": iterations, "extra": extra})
            result = arm_result(__file__, spec, f"the {t}-thread arm")
            row = {"threads": t, "repeat": rep, **result}
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def table(rows: list[dict], args: argparse.Namespace, load: tuple[float, float]) -> str:
    lines = [
        "# Demo iteration time by torch threads",
        "",
        f"Measured {date.today()} on {platform.machine()} ({os.cpu_count()} cores, Python "
        f"{platform.python_version()}), load average {load[0]:.1f} before and {load[1]:.1f} "
        f"after, by `python benchmarks/speed/threads.py`: the demo config, {args.iterations} "
        f"iterations per process (the first left out), {args.repeats} alternating repeats.",
        "",
        "| threads | rollout s (median, spread) | update s | iteration s | vs 1 thread |",
        "|---:|---|---|---|---:|",
    ]
    med = {}
    for t in args.threads:
        mine = [r for r in rows if r["threads"] == t]
        cells = []
        for k in KEYS:
            v = [r[k] for r in mine]
            cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
        med[t] = statistics.median(r["time/iteration"] for r in mine)
        base = med.get(args.threads[0], med[t])
        lines.append(f"| {t} | {' | '.join(cells)} | {med[t] / base:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--dry", action="store_true", help="seconds, small iterations, no file")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.arm:
        spec = json.loads(args.arm)
        print(json.dumps(arm(spec["threads"], spec["iterations"], spec["extra"])))
        return 0
    extra = DRY if args.dry else []
    if args.dry:
        args.repeats, args.iterations = 1, 2
    before = os.getloadavg()[0]
    rows = run(args.threads, args.repeats, args.iterations, extra)
    text = table(rows, args, (before, os.getloadavg()[0]))
    print(text)
    if not args.dry:
        args.out.mkdir(parents=True, exist_ok=True)
        write_record(args.out / "threads.md", text)
        (args.out / "threads.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
