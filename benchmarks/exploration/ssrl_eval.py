"""SSRL's claim, measured: a model trained to write its own search results answers better,
and transfers to the real engine (Sim2Real), against GRPO trained with the real engine.

Both arms are the ``search_qa_ssrl`` preset (GRPO, n 5, KL 0.001 low_var_kl, exact match);
``grpo_engine`` samples with ``group`` instead of ``ssrl``, so its searches are answered by
the env's BM25 top-3 during training. Same episode budget and seeds. Each trained model then
answers Q held-out questions greedily three ways:

- ``self_search``: it writes the ``<information>`` of each of its searches itself (SSRL's
  training-time rollout, ``cairn.exploration.self_search.SelfSearch``);
- ``engine``: the real BM25 engine answers its searches (the trainer's evaluation: Sim2Real
  for SSRL, the training condition for ``grpo_engine``);
- ``no_search``: one turn only, so only an immediate answer can score.

Both arms start from the preset's format warm-up (same seed, same settings: the identical
model); the record also gives its held-out exact match with the engine (the trainer's
at-start evaluation, before RL), so a gain over the warm-up is visible. Exact match, mean
with a 95 % t-interval over seeds; one section per ``--label`` of
benchmarks/results/exploration/ssrl_eval.md.

    python benchmarks/exploration/ssrl_eval.py --set train.threads=1  # 3 seeds x 2 arms, 2 at once
    python benchmarks/exploration/ssrl_eval.py --quick   # 1 seed, tiny budget, not recorded
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np
import torch

from cairn.exploration.self_search import SelfSearch
from cairn.rollout import RolloutContext, rollout, tasks_for_groups
from cairn.train.compare import compare, write_config
from cairn.train.config import load_config
from cairn.train.evaluate import eval_settings, newest_checkpoint, open_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import mean_ci, write_section

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "results" / "exploration" / "ssrl_eval.md"
HEADER = (
    "# SSRL: self-search, Sim2Real and no search, against GRPO with the real engine\n\n"
    "Written by `python benchmarks/exploration/ssrl_eval.py` (one section per `--label`).\n"
)
PRESET = "search_qa_ssrl.yaml"
ARMS = {"grpo_engine": ["rollout.strategy=group", "rollout.options={}"], "ssrl": []}
SHARED = ["train.time_budget_s=null", "train.iterations=1000", "log.trajectories_every=0"]
MODES = ("self_search", "engine", "no_search")


def evaluate_modes(run_dir: Path, questions: int) -> dict[str, float]:
    """Greedy exact match of the trained model under each mode, on held-out questions.
    The run is only read (its newest checkpoint's weights), never resumed."""
    cfg = load_config(run_dir / "config.yaml", ["train.threads=1", "log.progress=false"])
    seeds = cfg.eval.seed_offset + np.arange(questions)
    with open_checkpoint(cfg, newest_checkpoint(run_dir).path) as (policy, envs, prompt):
        greedy = eval_settings(cfg, policy)
        generator = torch.Generator().manual_seed(cfg.seed)
        ctx = RolloutContext(policy, envs, prompt, greedy, generator, 0)
        searcher = SelfSearch(**_self_search_options(cfg))
        one_turn = replace(greedy, max_turns=1)
        tasks = tasks_for_groups(seeds, 1)
        runs = {
            "self_search": searcher.collect(ctx, seeds, 1),
            "engine": rollout(policy, envs.take(len(tasks)), tasks, prompt, greedy),
            "no_search": rollout(policy, envs.take(len(tasks)), tasks, prompt, one_turn),
        }
    return {m: float(np.mean([bool(e.success) for e in eps])) for m, eps in runs.items()}


def _self_search_options(cfg) -> dict:
    """The run's ``ssrl`` options; the preset's for the arm trained without self-search."""
    name, options = cfg.rollout.strategy, dict(cfg.rollout.options)
    return options if name == "ssrl" else load_config(ROOT / "configs" / PRESET).rollout.options


def warmup_success(run_dir: Path) -> float:
    """The trainer's at-start evaluation (after the warm-up, before RL; engine, greedy)."""
    evals = json.loads((run_dir / "summary.json").read_text())["evals"]
    return float(evals[0]["eval/success"])


def arm_config(arm: str, extra: list[str], out: Path) -> Path:
    overrides = [*SHARED, *ARMS[arm], *extra, f"name=ss_{arm}"]
    return write_config(ROOT / "configs" / PRESET, overrides, out / "configs" / f"{arm}.yaml")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--episodes", type=int, default=4000, help="training budget per run")
    p.add_argument("--questions", type=int, default=200, help="held-out questions")
    p.add_argument("--quick", action="store_true", help="1 seed, 40 episodes, 4 questions")
    p.add_argument("--label", default="search_qa")
    p.add_argument("--out", default="runs/ssrl_eval")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    seeds, episodes, questions = (
        (1, 40, 4) if args.quick else (args.seeds, args.episodes, args.questions)
    )
    out, start = Path(args.out), time.time()
    extra = [f"train.max_episodes={episodes}", *args.overrides]
    configs = [str(arm_config(arm, extra, out)) for arm in ARMS]
    compare(configs, seeds, out, jobs=args.jobs)
    results = {
        arm: [evaluate_modes(out / f"ss_{arm}" / f"seed{s}", questions) for s in range(seeds)]
        for arm in ARMS
    }
    warm = {
        arm: [warmup_success(out / f"ss_{arm}" / f"seed{s}") for s in range(seeds)] for arm in ARMS
    }
    table = [
        "| arm (trained with) | after warm-up, engine | " + " | ".join(MODES) + " |",
        "|---|---|" + "---|" * len(MODES),
        *[
            f"| {arm} | {mean_ci(warm[arm])} | "
            + " | ".join(mean_ci([r[m] for r in rs]) for m in MODES)
            + " |"
            for arm, rs in results.items()
        ],
    ]
    print("\n".join(table))
    if args.quick:
        return 0
    command = " ".join(["python benchmarks/exploration/ssrl_eval.py", *sys.argv[1:]])
    arms = "; ".join(
        f"`{a}`: {' '.join(f'`{o}`' for o in o_) or '(the preset)'}" for a, o_ in ARMS.items()
    )
    body = [
        f"Recorded {date.today()} by `nice -n 19 {command}` (preset `configs/{PRESET}`, seeds "
        f"0..{seeds - 1} per arm, {episodes} training episodes each, {questions} held-out "
        f"questions; wall {(time.time() - start) / 60:.1f} min).",
        "",
        f"Overrides: shared {' '.join(f'`{o}`' for o in [*SHARED, *extra])}; {arms}.",
        "",
        *table,
        "",
        "Greedy exact match; mean ± 95 % t-interval over seeds. The after-warm-up column is "
        "the trainer's at-start evaluation on its 100 held-out questions (a subset of these).",
    ]
    write_section(RECORD, args.label, "SSRL vs GRPO with the engine", "\n".join(body), HEADER)
    print(f"wrote section {args.label} of {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
