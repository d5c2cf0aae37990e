"""The trainer's own state: its counters and its random streams, with their state dict.

    state = TrainState.start(seed, rank)       # a fresh run
    saved = state.state_dict(wall_seconds)     # the checkpoint's counters and streams
    state.load_state_dict(saved)               # a resume: the same numbers go on

The counters say how far the run is (``iteration``, ``episodes``, ``train_seconds``, the
``wall_seconds`` of earlier sessions, the evaluations and the warm-up's stats); the streams
draw everything random the trainer draws itself: ``task_rng`` the task seeds, ``shuffle_rng``
the minibatch order, ``sample_gen`` the sampled tokens, and torch's global generator (model
init, dropout). Checkpointing all of them is what makes a resumed run repeat the
uninterrupted one exactly.

The keys are the checkpoint's (``schema.REQUIRED``, checked when a checkpoint is read):
``iteration``, ``episodes``, ``train_seconds``, ``wall_seconds``, ``evals``, ``warmup``,
``task_rng``, ``shuffle_rng``, ``sample_gen``, ``torch_rng``. What the trainer keeps beside
them (optimizers, the KL reference, exploration, rewards, unsaved metrics rows) is
``resume``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from cairn.train.checkpoint.layout import CheckpointError

__all__ = ["TrainState", "put"]


@dataclass
class TrainState:
    """Counters and random streams of one training run (module docstring).

    task_rng       task seeds of the rollouts (per rank)
    shuffle_rng    minibatch order of the updates (the same on every rank)
    sample_gen     token sampling of the rollouts (per rank)
    iteration      iterations done
    episodes       episodes sampled, all ranks together (dropped groups included)
    train_seconds  seconds spent in training iterations (evaluations excluded)
    wall_seconds   wall seconds of the sessions before this one (a resumed run's)
    evals          one row per greedy evaluation: iteration, counts, ``eval/`` metrics
    warmup_stats   the format warm-up's stats (``cairn.train.warmup``; {} when it did not run)
    """

    task_rng: np.random.Generator
    shuffle_rng: np.random.Generator
    sample_gen: torch.Generator
    iteration: int = 0
    episodes: int = 0
    train_seconds: float = 0.0
    wall_seconds: float = 0.0
    evals: list[dict[str, Any]] = field(default_factory=list)
    warmup_stats: dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(cls, seed: int, rank: int = 0) -> TrainState:
        """A fresh run's state: zero counters, streams seeded from ``seed`` (rank 0 keeps
        the single-process streams; other ranks draw their own tasks and tokens). Seeds
        torch's global generator too: a process starts it from a random seed, so two
        identical runs would otherwise checkpoint different ``torch_rng`` states."""
        torch.manual_seed(seed * 7919 + 5 + 104729 * rank)
        return cls(
            task_rng=np.random.default_rng([seed, 1, rank] if rank else [seed, 1]),
            shuffle_rng=np.random.default_rng([seed, 2]),
            sample_gen=torch.Generator().manual_seed(seed * 7919 + 3 + 104729 * rank),
        )

    def state_dict(self, wall_seconds: float) -> dict[str, Any]:
        """The counters and the streams' states; ``wall_seconds``: the run's wall time so
        far, this session's included (only the trainer's clock knows it)."""
        return {
            "iteration": self.iteration,
            "episodes": self.episodes,
            "train_seconds": self.train_seconds,
            "wall_seconds": wall_seconds,
            "evals": self.evals,
            "warmup": self.warmup_stats,
            "task_rng": self.task_rng.bit_generator.state,
            "shuffle_rng": self.shuffle_rng.bit_generator.state,
            "sample_gen": self.sample_gen.get_state(),
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put the counters and the streams of ``state`` (``state_dict``'s keys, checked by
        the schema) back, the streams in place; a part that does not fit is a
        CheckpointError naming its key."""
        self.iteration, self.episodes = state["iteration"], state["episodes"]
        self.train_seconds, self.evals = state["train_seconds"], state["evals"]
        self.wall_seconds, self.warmup_stats = state["wall_seconds"], state["warmup"]
        put("task_rng", setattr, self.task_rng.bit_generator, "state", state["task_rng"])
        put("shuffle_rng", setattr, self.shuffle_rng.bit_generator, "state", state["shuffle_rng"])
        put("sample_gen", self.sample_gen.set_state, state["sample_gen"])
        put("torch_rng", torch.set_rng_state, state["torch_rng"])


def put(key: str, load: Callable[..., object], *args: object) -> None:
    """``load(*args)``, an error in it a one-line CheckpointError naming ``key``."""
    try:
        load(*args)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError, AttributeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise CheckpointError(f"checkpoint state {key} does not fit this run: {first}") from None
