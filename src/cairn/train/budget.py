"""The training budget: how much of it the finished iterations used, when a run stops,
when it evaluates, and the learning rate over it (``train`` and ``optim`` sections).

``seconds`` (``train.time_budget_s``) are the trainer's training seconds: the monotonic
wall clock (``time.perf_counter``) over each iteration's rollout, advantage and update;
evaluation and checkpoint writes are not counted. Time the process spends stopped
(SIGSTOP, Ctrl-Z) inside an iteration counts, as any wall-clock time does."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn.train.schema import OptimConfig, TrainConfig

__all__ = ["budget_text", "done", "eval_due", "lr_factor", "progress"]


def progress(train: TrainConfig, iteration: int, episodes: int, seconds: float) -> float:
    """Fraction of the budget used by the iterations before ``iteration``: the largest over
    iterations, episodes and (when ``train.time_budget_s`` is set) training seconds."""
    used = [(iteration - 1) / train.iterations]
    if train.time_budget_s is not None:
        used.append(seconds / train.time_budget_s)
    if train.max_episodes is not None:
        used.append(episodes / train.max_episodes)
    return min(1.0, max(used))


def lr_factor(optim: OptimConfig, x: float) -> float:
    """``optim.lr_schedule`` at progress x in [0, 1], as a fraction of ``optim.lr``."""
    if optim.lr_schedule == "linear":
        return 1.0 - (1.0 - optim.lr_final) * x
    if optim.lr_schedule == "cosine":
        return optim.lr_final + (1.0 - optim.lr_final) * 0.5 * (1.0 + math.cos(math.pi * x))
    return 1.0


def done(train: TrainConfig, iteration: int, episodes: int, seconds: float) -> bool:
    return (
        iteration >= train.iterations
        or (train.time_budget_s is not None and seconds >= train.time_budget_s)
        or (train.max_episodes is not None and episodes >= train.max_episodes)
    )


def eval_due(every: int, iteration: int, finished: bool) -> bool:
    return finished or (every > 0 and iteration % every == 0)


def budget_text(train: TrainConfig, iteration: int, seconds: float) -> str:
    if train.time_budget_s is not None:
        return f"{seconds:.0f}/{train.time_budget_s:.0f}s"
    return f"{iteration}/{train.iterations} it"
