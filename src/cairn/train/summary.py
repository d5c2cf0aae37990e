"""What a run reports: per-batch episode statistics and the final ``summary.json``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.data.episode import Episode
from cairn.rollout.loop import turn_stats

if TYPE_CHECKING:
    from cairn.train.schema import Config

__all__ = ["episode_stats", "summarize", "task_blind_share"]


def episode_stats(episodes: Sequence[Episode], prefix: str) -> dict[str, float]:
    """Success, return, length, invalid rate, the free-text counters and, where the env
    judges it (``info["task_blind"]``), ``prefix/task_blind``: the share of the judged
    episodes that did not use the task (``task_blind_share``)."""
    steps = sum(len(e.steps) for e in episodes)
    blind = task_blind_share(episodes)
    return {
        f"{prefix}/success": float(np.mean([e.success for e in episodes])),
        f"{prefix}/return": float(np.mean([e.ret for e in episodes])),
        f"{prefix}/length": steps / max(1, len(episodes)),
        f"{prefix}/invalid_rate": sum(e.invalid for e in episodes) / max(1, steps),
        **turn_stats(episodes, prefix),  # free text: format errors, cuts, context drops
        **({} if blind is None else {f"{prefix}/task_blind": blind}),
    }


def task_blind_share(episodes: Sequence[Episode]) -> float | None:
    """The share of ``episodes`` whose env judged them task-blind (``meta["task_blind"]``:
    a fixed move, a copied example, a target-blind expression, an answer without a search;
    each env's docstring says how it tells), among those it judged; None where none was."""
    judged = [bool(e.meta["task_blind"]) for e in episodes if "task_blind" in e.meta]
    return float(np.mean(judged)) if judged else None


def summarize(
    cfg: Config,
    run_dir: Path,
    counts: tuple[int, int, float],
    wall: float,
    evals: list[dict[str, Any]],
) -> dict[str, Any]:
    """summary.json: counts (iterations, episodes, train seconds), wall seconds, evals."""
    iteration, episodes, train_seconds = counts
    target = cfg.eval.target
    first = evals[0] if evals and evals[0]["iteration"] == 0 else None
    hit = next((e for e in evals if e["eval/success"] >= target), None)
    last = evals[-1] if evals else {}
    return {
        "name": cfg.name,
        "run_dir": str(run_dir),
        "iterations": iteration,
        "episodes": episodes,
        "train_seconds": round(train_seconds, 2),
        "wall_seconds": round(wall, 2),
        "untrained_success": first["eval/success"] if first else None,
        "eval_success": last.get("eval/success"),
        "eval_return": last.get("eval/return"),
        "best_eval_success": max((e["eval/success"] for e in evals), default=None),
        "target": target,
        "episodes_to_target": hit["episodes"] if hit else None,
        "seconds_to_target": round(hit["train_seconds"], 2) if hit else None,
        "evals": evals,
    }
