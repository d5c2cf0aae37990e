"""Can the tiny model imitate the sokoban solver at all? Behaviour cloning on demonstrations.

LUFFY's cold start was reached with one box and not with two (the cold_start sections of
benchmarks/results/exploration/exploration_compare.md). This separates "the model cannot
learn the task from demonstrations" from "the mixed-policy loss transfers them too slowly": teacher
forcing (``cairn.train.warmup.supervised_passes``, the format warm-up's loop) on the
solver's plans for ``--demos`` rooms of the LUFFY preset's distribution, one example per
step (replayed by LUFFY's ``demo_episode``: the prompt and action ids its loss trains on),
then greedy success on the preset's held-out evaluation rooms every two epochs.

    python benchmarks/envs/sokoban_bc.py --seeds 2 --tag 1box   # the preset (7x7, 1 box, 8-14)
    python benchmarks/envs/sokoban_bc.py --seeds 2 --set env.options.num_boxes=2 --tag 2box

Results: section TAG of benchmarks/results/envs/sokoban_bc.md (other tags' sections kept).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from cairn.envs import make
from cairn.exploration.demos import demo_episode
from cairn.train.config import load_config
from cairn.train.trainer import Trainer
from cairn.train.warmup import supervised_passes

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_section

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "sokoban_luffy.yaml"
RECORD = ROOT / "benchmarks" / "results" / "envs" / "sokoban_bc.md"
HEADER = (
    "# Behaviour cloning of the sokoban solver\n\n"
    "Written by `python benchmarks/envs/sokoban_bc.py --tag TAG`: one section per tag.\n"
)
DEMO_SEEDS = 10_000_000  # apart from the training and evaluation seeds of the RL runs


def demonstrations(trainer: Trainer, n: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, action ids) of every step of the solver's plan in n rooms, replayed by
    LUFFY's ``demo_episode``: the very ids its off-policy loss trains on."""
    cfg = trainer.cfg
    env = make(cfg.env.name, **cfg.env.options)
    data = []
    for seed in range(DEMO_SEEDS, DEMO_SEEDS + n):
        env.reset(seed=seed)
        plan = env.solve() or []
        episode = demo_episode(
            env, seed, plan, policy=trainer.policy, prompt=trainer.prompt,
            settings=trainer.sampling, episode_id=seed, group=0,
        )  # fmt: skip
        data += [(step.prompt_ids, step.action_ids) for step in episode.steps]
    return data


def run(seed: int, args: argparse.Namespace, out: Path) -> list[dict[str, float]]:
    cfg = load_config(
        PRESET, ["log.progress=false", "train.threads=1", f"seed={seed}", *args.overrides]
    )
    torch.manual_seed(seed)
    trainer = Trainer(cfg, out / f"seed{seed}")
    policy = trainer.policy
    data = demonstrations(trainer, args.demos)
    curve = [{"epochs": 0, "examples": len(data), **trainer.evaluate()}]
    for chunk in range(args.epochs // 2):
        losses = supervised_passes(
            policy, data, epochs=2, lr=args.lr, minibatch_size=64, time_budget_s=None,
            seed=seed * 1000 + chunk,
        ).epoch_losses  # fmt: skip
        policy.model.eval()
        curve.append({"epochs": 2 * (chunk + 1), "loss": losses[-1], **trainer.evaluate()})
        policy.model.train()
        print(json.dumps({"seed": seed, **curve[-1]}), flush=True)
    return curve


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--demos", type=int, default=1000, help="rooms whose solutions are cloned")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--tag", default="")
    p.add_argument("--out", default="runs/sokoban_bc")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    start = time.time()
    curves = {seed: run(seed, args, Path(args.out)) for seed in range(args.seeds)}
    command = "python benchmarks/envs/sokoban_bc.py " + " ".join(sys.argv[1:])
    lines = [
        f"Command: `{command}` (preset `configs/sokoban_luffy.yaml`"
        + (f" with {', '.join(args.overrides)}" if args.overrides else "")
        + f"; {args.demos} rooms' solver plans, one example per step, teacher forcing with "
        f"AdamW lr {args.lr}, minibatches of ~64, gradient norm clipped at 1; "
        f"{time.time() - start:.0f} s wall, one torch thread).",
        "",
        "Greedy success on the preset's held-out evaluation rooms after each two epochs:",
        "",
        "| seed | (state, action) examples | "
        + " | ".join(f"epoch {c['epochs']}" for c in curves[0])
        + " |",
        "|---|---:|" + "---:|" * len(curves[0]),
    ]
    for seed, curve in curves.items():
        cells = " | ".join(f"{c['eval/success']:.2f}" for c in curve)
        lines.append(f"| {seed} | {curve[0]['examples']:,d} | {cells} |")
    lines += [
        "",
        "Teacher-forced loss (nats per action token) at the last epoch: "
        + ", ".join(f"seed {s} {c[-1]['loss']:.3f}" for s, c in curves.items())
        + ".",
        "",
    ]
    title = "Behaviour cloning of the sokoban solver (is the task learnable from demonstrations?)"
    write_section(RECORD, args.tag or "default", title, "\n".join(lines), HEADER)
    print(f"wrote section {args.tag or 'default'} of {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
