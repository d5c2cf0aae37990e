"""GRPO vs GiGPO sample efficiency on sokoban: a thin wrapper over `cairn compare`.

Two settings, each config on N seeds with the same episode budget:
- demo:  the demo preset's rooms (6x6 with walls, 1 box, 15 steps, optimal <= 5 moves);
- paper: GiGPO's setting (6x6 with walls, 1 box, 15 steps, any solvable room), longer.
Records the curves (PNG) and episodes to the success target per seed as one section of
benchmarks/results/credit/sample_efficiency.md (labelled by --record; other sections are
kept). GiGPO's claim is that it needs fewer episodes.
Other sokoban presets join with --configs; runs of the same preset and setting are shared
between records (compare reuses a run directory that has a summary).

    python benchmarks/credit/sample_efficiency.py            # full: 3 seeds, both settings
    python benchmarks/credit/sample_efficiency.py --quick    # smoke run: 1 seed, tiny budget
    python benchmarks/credit/sample_efficiency.py --configs grpo gigpo proxmo ppo \
        --settings demo --record credit_compare     # the credit-assignment comparison
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from datetime import date
from pathlib import Path

from cairn.report.plots import plot_compare_dir
from cairn.train.compare import compare

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_section

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "credit"
RECORD = RESULTS / "sample_efficiency.md"
HEADER = (
    "# Credit assignment on sokoban: sample efficiency\n\n"
    "Written by `python benchmarks/credit/sample_efficiency.py` (each `--record LABEL` is one "
    "section below;\nre-running a label rewrites its section and keeps the others).\n"
)

SETTINGS = {
    "demo": {"episodes": 20480, "set": []},
    "paper": {"episodes": 40960, "set": ["env.options.max_solution=15"]},
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each")
    p.add_argument("--quick", action="store_true", help="1 seed, 2 iterations, not recorded")
    p.add_argument("--out", default="runs/sample_efficiency")
    p.add_argument("--configs", nargs="+", default=["grpo", "gigpo"], help="sokoban presets")
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--record", default="sample_efficiency", help="section label in the record")
    p.add_argument("--episodes", type=int, default=None, help="override the settings' budget")
    args = p.parse_args()
    configs = [str(ROOT / "configs" / f"sokoban_{a}.yaml") for a in args.configs]
    command = " ".join(["python benchmarks/credit/sample_efficiency.py", *sys.argv[1:]])
    title = f"Sample efficiency on sokoban: {', '.join(args.configs)}"
    report = [
        f"Recorded {date.today()} by `{command}` "
        f"({args.seeds} seeds per config, greedy success on 200 held-out rooms every 5 "
        "iterations; budgets in episodes, so the machine's speed does not change the "
        "comparison). An iteration of the group presets samples 32 rooms x 8 episodes; "
        "branching presets count every episode they sample and train on (tree leaves, "
        "ELPO's probe continuations), while VinePPO's value rollouts are not counted.",
        "",
    ]
    for name in args.settings:
        setting = SETTINGS[name]
        episodes = 512 if args.quick else args.episodes or setting["episodes"]
        overrides = [
            *setting["set"],
            f"train.max_episodes={episodes}",
            "train.time_budget_s=null",
            "log.trajectories_every=0",
        ]
        out = Path(args.out) / name
        summary = compare(configs, 1 if args.quick else args.seeds, out, overrides, jobs=args.jobs)
        plot_compare_dir(summary, out)  # curves.png, as `cairn compare` draws them
        if args.quick:
            print(json.dumps({k: v["final_success"] for k, v in summary["configs"].items()}))
            continue
        png = RESULTS / f"{args.record}_{name}.png"
        shutil.copy(out / "curves.png", png)
        report += [
            f"### {name}: {episodes} episodes, overrides {setting['set'] or 'none'}",
            "",
            (out / "compare.md").read_text(),
            f"![{name}]({png.name})",
            "",
        ]
    if not args.quick:
        write_section(RECORD, args.record, title, "\n".join(report), HEADER)
        print(f"wrote section {args.record} of {RECORD}")


if __name__ == "__main__":
    main()
