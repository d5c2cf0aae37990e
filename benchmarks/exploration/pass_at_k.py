"""SGE's claim, measured: pass@k and distinct solutions of the trained model, SGE vs GRPO.

SGE (arXiv 2603.02045) samples a short strategy before acting, at a higher temperature
than the actions, so that parallel rollouts differ in plan; the claim is more diverse
exploration and a better pass@k at the same number of samples. Both arms are the
``sokoban_sge`` preset (GRPO, sparse outcome reward), one sampling with ``group``, trained on
the same episode budget and seeds. Each trained run is then only read (its newest
checkpoint's weights and saved sampler state, ``benchmarks/_lib/pass_at_k.py``; never resumed)
and samples n = 16 episodes on each of R held-out rooms, with:

- ``grpo``: its own training-time sampler (plain rollout at the action temperature);
- ``sge``: its own training-time sampler (a strategy sampled at 1.5 first, with the
  reflection history the run ended with, actions at 1.0): SGE's claim is about diverse
  exploration when sampling, so each arm samples as it was trained to;
- ``sge, no strategy``: the SGE-trained weights with the plain sampler, which tells whether
  a difference is in the weights or in the strategy prompt.

Per row: the greedy success of the trainer's own evaluation (200 held-out rooms, plain
prompt), and over the sampled episodes

- pass@k for k = 1, 2, 4, 8, 16: the unbiased estimate 1 - C(n - c, k) / C(n, k) per room
  (c successes of n), averaged over rooms;
- distinct solutions: per room, the number of different move sequences among the
  successful episodes (the strategy is not a move), averaged over rooms.

Means with a 95 % t-interval over seeds. One section per ``--label`` of
benchmarks/results/exploration/pass_at_k.md.

    python benchmarks/exploration/pass_at_k.py --set train.threads=1  # 3 seeds x 2 arms, 2 at once
    python benchmarks/exploration/pass_at_k.py --quick   # 1 seed, tiny budget, not recorded
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import date
from pathlib import Path

from cairn.train.compare import compare, write_config
from cairn.train.config import load_config
from cairn.train.evaluate import newest_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.pass_at_k import sample_held_out, sampling_stats
from _lib.records import mean_ci, write_section

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "results" / "exploration" / "pass_at_k.md"
HEADER = (
    "# SGE: pass@k and distinct solutions of the trained model\n\n"
    "Written by `python benchmarks/exploration/pass_at_k.py` (one section per `--label`).\n"
)
KS = (1, 2, 4, 8, 16)
PRESET = "sokoban_sge.yaml"
ARMS = {"grpo": ["rollout.strategy=group", "rollout.options={}"], "sge": []}
SHARED = [
    "train.time_budget_s=null",
    "log.trajectories_every=0",
    "optim.lr_schedule=linear",
    "optim.lr_final=0.1",
]


#: Table rows: (arm trained, sampler at pass@k time).
ROWS = {"grpo": ("grpo", "plain"), "sge": ("sge", "strategy"), "sge, no strategy": ("sge", "plain")}
COLS = ("greedy", *(f"pass@{k}" for k in KS), "distinct")


def measure(run_dir: Path, rooms: int, samplers: list[str]) -> dict[str, dict[str, float]]:
    """Per sampler: pass@k, distinct solutions and the greedy success of one trained run."""
    cfg = load_config(run_dir / "config.yaml", ["train.threads=1", "log.progress=false"])
    groups, greedy = sample_held_out(cfg, newest_checkpoint(run_dir), rooms, max(KS), samplers)
    return {s: {"greedy": greedy, **sampling_stats(groups[s], KS)} for s in samplers}


def arm_config(arm: str, extra: list[str], out: Path) -> Path:
    overrides = [*SHARED, *ARMS[arm], *extra, f"name=pk_{arm}"]
    return write_config(ROOT / "configs" / PRESET, overrides, out / "configs" / f"{arm}.yaml")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--episodes", type=int, default=5120, help="training budget per run")
    p.add_argument("--rooms", type=int, default=100, help="held-out rooms sampled")
    p.add_argument("--quick", action="store_true", help="1 seed, 64 episodes, 4 rooms")
    p.add_argument("--label", default="sokoban_demo")
    p.add_argument("--out", default="runs/pass_at_k")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    seeds, episodes, rooms = (1, 64, 4) if args.quick else (args.seeds, args.episodes, args.rooms)
    out, start = Path(args.out), time.time()
    extra = [f"train.max_episodes={episodes}", *args.overrides]
    configs = [str(arm_config(arm, extra, out)) for arm in ARMS]
    compare(configs, seeds, out, jobs=args.jobs)
    samplers = {arm: [sm for a, sm in ROWS.values() if a == arm] for arm in ARMS}
    runs = {
        arm: [measure(out / f"pk_{arm}" / f"seed{s}", rooms, samplers[arm]) for s in range(seeds)]
        for arm in ARMS
    }
    table = [
        "| arm (sampler) | " + " | ".join(COLS) + " |",
        "|---|" + "---|" * len(COLS),
        *[
            f"| {row} | " + " | ".join(mean_ci([r[sm][c] for r in runs[arm]]) for c in COLS) + " |"
            for row, (arm, sm) in ROWS.items()
        ],
    ]
    print("\n".join(table))
    if args.quick:
        return 0
    command = " ".join(["python benchmarks/exploration/pass_at_k.py", *sys.argv[1:]])
    body = [
        f"Recorded {date.today()} by `nice -n 19 {command}` (preset `configs/{PRESET}`, seeds "
        f"0..{seeds - 1} per arm, {episodes} training episodes each; {max(KS)} samples on each "
        f"of {rooms} held-out rooms; wall {(time.time() - start) / 60:.1f} min).",
        "",
        f"Overrides: shared {' '.join(f'`{o}`' for o in [*SHARED, *extra])}; "
        + "; ".join(
            f"`{a}`: {' '.join(f'`{o}`' for o in o_) or '(the preset)'}" for a, o_ in ARMS.items()
        )
        + ".",
        "",
        *table,
        "",
        "greedy: the trainer's greedy evaluation (200 held-out rooms, plain prompt, so SGE "
        "without its strategy). pass@k: mean over rooms of 1 - C(n-c, k)/C(n, k), n = 16 "
        "samples per room at the arm's sampler (`sge`: strategy at 1.5 with the run's final "
        "reflection history, actions at 1.0; `grpo` and `sge, no strategy`: plain sampling "
        "at 1.0); distinct: different successful move sequences per room. Mean ± 95 % "
        "t-interval over seeds.",
    ]
    write_section(RECORD, args.label, "SGE vs GRPO on the demo rooms", "\n".join(body), HEADER)
    print(f"wrote section {args.label} of {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
