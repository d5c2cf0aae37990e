"""Untrained pass@k per difficulty level: where does a real-model preset's curriculum start?

GRPO-style estimators learn only from groups with mixed outcomes (some of the group's
episodes succeed, some fail). For a preset (``countdown_smol``, ``sokoban_smol``,
``search_qa_smol``) this samples the *untrained* model (``model.path`` with fresh LoRA
adapters, no checkpoint) ``n`` times on each of ``tasks`` held-out instances
(``eval.seed_offset + i``) at every level of the preset's ``curriculum`` (each level's env
options over ``env.options``) and at the held-out difficulty (``env.options`` themselves),
with the preset's own prompt and sampling settings and its rollout strategy ``group``.

Per level: pass@k for k = 1, 2, 4, ... up to n (the unbiased estimate 1 - C(n-c, k) /
C(n, k) per task, averaged; ``benchmarks/_lib/pass_at_k.py``), the share of tasks whose group is
mixed (0 < c < n: what an update learns from), the share of episodes the env judged
task-blind (``rollout/task_blind``'s rule) and the seconds it took. A curriculum
should start at the hardest level whose mixed share is well above 0.

    python benchmarks/real/pass_at_k_levels.py countdown_smol --tasks 4 --n 4  # small reading
    python benchmarks/real/pass_at_k_levels.py sokoban_smol --levels 0 --tasks 4 --n 2
    python benchmarks/real/pass_at_k_levels.py sokoban_smol --tasks 32 --n 8 --record
        # a quiet machine: writes section PRESET of benchmarks/results/real/pass_at_k_levels.md

``--set key=value`` overrides the preset as ``cairn train`` does (e.g.
``train.threads=2``, ``model.device=cuda``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cairn.policies.budget import context_budget  # noqa: E402
from cairn.rollout import EnvFactory, RolloutContext, make_env_pool, make_strategy  # noqa: E402
from cairn.train.config import load_config  # noqa: E402
from cairn.train.evaluate import open_checkpoint  # noqa: E402
from cairn.train.schema import Config  # noqa: E402
from cairn.train.settings import sampling_settings  # noqa: E402
from cairn.train.summary import task_blind_share  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.pass_at_k import pass_at_k  # noqa: E402
from _lib.records import write_section  # noqa: E402

RECORD = ROOT / "benchmarks" / "results" / "real" / "pass_at_k_levels.md"
HEADER = (
    "# Untrained pass@k per difficulty level\n\n"
    "Written by `python benchmarks/real/pass_at_k_levels.py PRESET --record` (one section per "
    "preset).\n"
)


def levels(cfg: Config) -> list[tuple[str, dict[str, Any]]]:
    """(label, env options) per curriculum level, then the held-out ``env.options`` (each
    over ``eval.env_options``: a test split stays the test split)."""
    base = cfg.eval_env_options()
    out = [
        (f"level {k}: {json.dumps(level) if level else 'held-out options'}", {**base, **level})
        for k, level in enumerate(cfg.curriculum.options.get("levels", []))
    ]
    if all(options != base for _, options in out):
        out.append(("held-out (env.options)", base))
    return out


def group_stats(successes: list[list[bool]], ks: list[int]) -> dict[str, float]:
    """pass@k per k and the mixed-group share over tasks (one list of successes each)."""
    wins = [(len(s), sum(s)) for s in successes]
    out = {f"pass@{k}": float(np.mean([pass_at_k(n, c, k) for n, c in wins])) for k in ks}
    out["mixed"] = float(np.mean([0 < c < n for n, c in wins]))
    return out


def measure(cfg: Config, tasks: int, n: int, only: list[int] | None = None) -> list[dict[str, Any]]:
    """One row per level (those of ``only``, indices into ``levels``, where given): pass@k,
    the mixed share, the task-blind share and the seconds (module docstring)."""
    ks = [k for k in (1, 2, 4, 8, 16, 32) if k <= n]
    seeds = [cfg.eval.seed_offset + i for i in range(tasks)]
    rows = []
    with open_checkpoint(cfg, None) as (policy, _, prompt):
        budget = context_budget(policy, cfg.model.max_context, cfg.rollout.max_new_tokens)
        settings = sampling_settings(cfg, budget)
        chosen = [x for k, x in enumerate(levels(cfg)) if only is None or k in only]
        for label, options in chosen:
            envs = make_env_pool(EnvFactory.of(cfg.env.name, **options), 0)
            generator = torch.Generator().manual_seed(cfg.seed)
            ctx = RolloutContext(policy, envs, prompt, settings, generator, 0)
            start = time.perf_counter()
            episodes = make_strategy("group").collect(ctx, seeds, n)
            blind = task_blind_share(episodes)
            groups: dict[int, list[bool]] = {}
            for e in episodes:
                groups.setdefault(e.group, []).append(bool(e.success))
            envs.close()
            rows.append({
                "level": label, "tasks": tasks, "n": n,
                **group_stats([groups[g] for g in sorted(groups)], ks),
                "task_blind": float("nan") if blind is None else blind,
                "seconds": round(time.perf_counter() - start, 1),
            })  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    keys = [k for k in rows[0] if k.startswith("pass@")] + ["mixed", "task_blind", "seconds"]
    lines = ["| level | tasks x n | " + " | ".join(keys) + " |", "|" + " --- |" * (len(keys) + 2)]
    for r in rows:
        cells = [f"{r[k]:.2f}" if k != "seconds" else f"{r[k]:.0f}" for k in keys]
        lines.append(f"| {r['level']} | {r['tasks']} x {r['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", help="a preset name (countdown_smol, ...) or a YAML file")
    parser.add_argument("--tasks", type=int, default=4, help="held-out instances per level")
    parser.add_argument("--n", type=int, default=4, help="samples per instance")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument(
        "--levels", default=None, help="comma-separated level indices to measure (default: all)"
    )
    parser.add_argument("--record", action="store_true", help=f"write a section of {RECORD}")
    args = parser.parse_args(argv)
    cfg = load_config(args.preset, args.overrides)
    torch.set_num_threads(cfg.train.threads or 1)
    only = None if args.levels is None else [int(k) for k in args.levels.split(",")]
    rows = measure(cfg, args.tasks, args.n, only)
    text = table(rows)
    print(text)
    if args.record:
        command = " ".join(argv if argv is not None else sys.argv[1:])
        body = f"`python benchmarks/real/pass_at_k_levels.py {command}`\n\n{text}"
        write_section(RECORD, args.preset, "untrained pass@k per level", body, HEADER)
    return 0


if __name__ == "__main__":
    sys.exit(main())
