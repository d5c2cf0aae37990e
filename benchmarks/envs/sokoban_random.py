"""How often a uniform random policy solves each sokoban room distribution the presets use.

    python benchmarks/envs/sokoban_random.py  # 10,000 rooms each -> results/envs/sokoban_random.md

The cold-start claim needs rooms a random model (almost) never solves; this measures it:
for each preset's rooms (seeds 0..N-1), moves drawn uniformly from the four actions until
the episode ends (solved or the step limit).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from cairn.envs import make
from cairn.train.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_record

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {  # label -> (preset, overrides)
    "demo rooms (sokoban_gigpo)": ("sokoban_gigpo.yaml", []),
    "LUFFY rooms, 1 box (sokoban_luffy)": ("sokoban_luffy.yaml", []),
    "LUFFY rooms, 2 boxes": ("sokoban_luffy.yaml", ["env.options.num_boxes=2"]),
}
MOVES = ("up", "down", "left", "right")


def random_wins(env_options: dict, rooms: int, seed: int) -> int:
    env = make("sokoban", **env_options)
    rng = np.random.default_rng(seed)
    wins = 0
    for room in range(rooms):
        env.reset(seed=room)
        done, info = False, {}
        while not done:
            _, _, terminated, truncated, info = env.step(MOVES[int(rng.integers(4))])
            done = terminated or truncated
        wins += bool(info["success"])
    return wins


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rooms", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    lines = [
        "# Sokoban: success of a uniform random policy",
        "",
        f"Command: `python benchmarks/envs/sokoban_random.py --rooms {args.rooms}` (rooms of seeds "
        f"0..{args.rooms - 1}, moves uniform over the four actions, rng seed {args.seed}).",
        "",
        "| rooms | env options | random success |",
        "|---|---|---:|",
    ]
    for label, (preset, overrides) in SETTINGS.items():
        start = time.time()
        options = dict(load_config(ROOT / "configs" / preset, overrides).env.options)
        wins = random_wins(options, args.rooms, args.seed)
        print(f"{label}: {wins} of {args.rooms} ({time.time() - start:.1f} s)", flush=True)
        shown = ", ".join(f"{k}={v}" for k, v in options.items())
        rate = f"{wins / args.rooms:.4f} ({wins:,d} of {args.rooms:,d})"
        lines.append(f"| {label} | {shown} | {rate} |")
    path = ROOT / "benchmarks" / "results" / "envs" / "sokoban_random.md"
    write_record(path, "\n".join([*lines, ""]))
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
