"""The demo (`cairn train`, configs/sokoban_gigpo.yaml) on several seeds, one after another.

The demo stops on a time budget (300 s of training), so its runs must not share the CPU
with anything else: seeds run sequentially with the demo's own thread count. A seed whose
run directory already has a summary is reused. Each label (a set of overrides) is one
section of benchmarks/results/demo/demo_seeds.md; other labels' sections are kept.

    python benchmarks/demo/demo_seeds.py                              # label "default", seeds 0 1 2
    python benchmarks/demo/demo_seeds.py --label constant-lr --seeds 1 \\
        --set optim.lr_schedule=constant
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_section

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "demo" / "demo_seeds.md"
HEADER = """# The demo on several seeds

`make demo` runs `cairn train` with no argument: GiGPO, the tiny Llama-style model from a
random initialisation, 6x6 sokoban rooms with walls, 1 box, 15 steps, optimal solutions up
to 5 moves, 300 s of training on 2 CPU cores. Greedy success on 200 held-out rooms every 5
iterations. Each section below is one label (a set of overrides), written by
`python benchmarks/demo/demo_seeds.py`.
"""


def _summary(run_parent: Path) -> dict | None:
    found = sorted(run_parent.glob("*/summary.json"))
    return json.loads(found[-1].read_text()) if found else None


def _row(seed: int, s: dict) -> str:
    evals = [e["eval/success"] for e in s["evals"]]
    late = evals[len(evals) * 3 // 4 :]
    return (
        f"| {seed} | {s['untrained_success']:.3f} | {s['eval_success']:.3f} | "
        f"{s['best_eval_success']:.3f} | {min(late):.3f} | "
        f"{s['seconds_to_target'] if s['seconds_to_target'] is not None else '-'} | "
        f"{s['episodes_to_target'] if s['episodes_to_target'] is not None else '-'} | "
        f"{s['iterations']} | {s['train_seconds']:.0f} | {s['wall_seconds']:.0f} |"
    )


def section(label: str, overrides: list[str], runs: dict[int, dict]) -> str:
    finals = np.array([s["eval_success"] for s in runs.values()])
    sd = finals.std(ddof=1) if len(finals) > 1 else 0.0
    lines = [
        f"Overrides: {' '.join(f'`{o}`' for o in overrides) or 'none'}. Recorded "
        f"{date.today()} on {platform.machine()}, {platform.python_version()}.",
        "",
        "| seed | untrained | final | best | lowest in the last quarter | s to 0.8 "
        "| episodes to 0.8 | iterations | train s | wall s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(_row(seed, s) for seed, s in sorted(runs.items())),
        "",
        f"Final greedy success: mean {finals.mean():.3f}, sd {sd:.3f}, min {finals.min():.3f} "
        f"over {len(finals)} seed(s).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--label", default="default")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default="runs/demo_seeds")
    args = p.parse_args()
    runs: dict[int, dict] = {}
    for seed in args.seeds:
        parent = Path(args.out) / args.label / f"seed{seed}"
        if (s := _summary(parent)) is None:
            sets = [*args.overrides, f"seed={seed}", f"out_dir={parent}"]
            cmd = [sys.executable, "-m", "cairn.cli", "train", *(f"--set={o}" for o in sets)]
            subprocess.run(cmd, check=True)
            s = _summary(parent)
        runs[seed] = s
    text = section(args.label, args.overrides, runs)
    write_section(RESULTS, args.label, "", text, HEADER)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
