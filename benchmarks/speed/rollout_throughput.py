"""Env steps per second with envs in this process (0 workers) or on 1, 2 and 4 env workers.

    python benchmarks/speed/rollout_throughput.py [--envs 4] [--seconds 5] [--backend process]
    python benchmarks/speed/rollout_throughput.py --only sokoban --workers 0 2

E envs step in lock-step like a rollout turn (``cairn.rollout.envpool.calls.step_all``): one
action per env, all sent, then all answers collected; an env whose episode ends is reset
(counted in the time). No model runs: this isolates what parallel env workers buy. Actions
are random admissible ones where the env lists them, else drawn from a fixed list. Writes
a markdown table to benchmarks/results/speed/rollout_throughput.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from datetime import date
from functools import partial
from pathlib import Path

from cairn.envs import make
from cairn.rollout import EnvPool
from cairn.rollout.envpool.calls import reset_all, step_all
from cairn.rollout.envpool.workers import make_env_pool

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_record

ENVS = {
    "sokoban": {"render": "compact", "max_solution": 5},
    "scienceworld": {"task": "boil", "max_steps": 30},
}
FALLBACK_ACTIONS = {
    "sokoban": ["up", "down", "left", "right"],
    "scienceworld": [
        "look around",
        "inventory",
        "open door to kitchen",
        "go to kitchen",
        "go to hallway",
        "look at stove",
        "pick up thermometer",
    ],
}
OUT = Path(__file__).resolve().parents[1] / "results" / "speed" / "rollout_throughput.md"


def measure(name: str, workers: int, n_envs: int, seconds: float, backend: str) -> dict:
    factory = partial(make, name, **ENVS[name])
    start = time.perf_counter()
    pool = EnvPool(factory) if workers == 0 else make_env_pool(factory, workers, backend)
    rng = random.Random(0)
    try:
        envs = pool.take(n_envs)
        states = reset_all(envs, list(range(n_envs)))
        ready = time.perf_counter() - start
        steps, resets, seed = 0, 0, n_envs
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            actions = [rng.choice(info.get("admissible") or FALLBACK_ACTIONS[name])
                       for _, info in states]  # fmt: skip
            results = step_all(envs, actions)
            steps += n_envs
            done = [i for i, r in enumerate(results) if r[2] or r[3]]
            states = [(r[0], r[4]) for r in results]
            if done:
                fresh = reset_all([envs[i] for i in done], list(range(seed, seed + len(done))))
                for i, s in zip(done, fresh, strict=True):
                    states[i] = s
                seed, resets = seed + len(done), resets + len(done)
        elapsed = time.perf_counter() - t0
    finally:
        pool.close()
    return {"env": name, "workers": workers, "envs": n_envs, "steps": steps, "resets": resets,
            "seconds": elapsed, "steps_per_s": steps / elapsed, "startup_s": ready}  # fmt: skip


def table(rows: list[dict], backend: str, n_envs: int, seconds: float) -> str:
    base = {r["env"]: r["steps_per_s"] for r in rows if r["workers"] == 0}
    lines = [
        "# Rollout throughput: env steps/s with env workers",
        "",
        f"Measured {date.today()} on {os.cpu_count()} CPU cores shared with other jobs "
        f"({platform.machine()}, {platform.system()}, Python {platform.python_version()}); "
        f"backend `{backend}`; {n_envs} envs stepping in lock-step for about {seconds:g} s per "
        "row (`python benchmarks/speed/rollout_throughput.py`). Workers 0: envs in the driver "
        "process. Startup: building the pool and the first reset of every env.",
        "",
        "| env | workers | steps/s | speed-up vs 0 | steps | resets | startup (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        speed = r["steps_per_s"] / base[r["env"]] if r["env"] in base else float("nan")
        lines.append(
            f"| {r['env']} | {r['workers']} | {r['steps_per_s']:,.1f} | {speed:.2f}x | "
            f"{r['steps']} | {r['resets']} | {r['startup_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=4, help="envs stepping together")
    ap.add_argument("--seconds", type=float, default=5.0, help="stepping time per row")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    ap.add_argument("--only", nargs="+", choices=sorted(ENVS), default=sorted(ENVS))
    ap.add_argument("--backend", choices=["auto", "ray", "process"], default="process")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rows = []
    for name in args.only:
        for w in args.workers:
            row = measure(name, w, args.envs, args.seconds, args.backend)
            print(f"{name:13s} workers={w}  {row['steps_per_s']:10.1f} steps/s  "
                  f"(startup {row['startup_s']:.1f} s)", flush=True)  # fmt: skip
            rows.append(row)
    text = table(rows, args.backend, args.envs, args.seconds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_record(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
