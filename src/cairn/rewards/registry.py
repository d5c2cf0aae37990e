"""The reward registry: names -> reward classes by import path, and what a reward is.

A reward is a callable ``fn(episodes, ctx)`` (``RewardFn``) that adds its term to each
step; ``ctx`` (``RewardContext``) gives it the policy and the prompt builder.
``cairn.rewards`` re-exports the names below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cairn._registry import ImportRegistry
from cairn.data.episode import Episode

__all__ = [
    "REWARDS",
    "RewardContext",
    "RewardFn",
    "available_rewards",
    "make_reward",
    "register_reward",
    "validate_reward_options",
]


@dataclass
class RewardContext:
    """What a reward may use: the policy (for model-based rewards) and the prompt builder."""

    policy: Any = None
    prompt: Any = None


class RewardFn(Protocol):
    name: str

    def __call__(self, episodes: Sequence[Episode], ctx: RewardContext) -> None: ...


REWARDS = ImportRegistry(
    "reward",
    {
        "overlong": "cairn.rewards.shaped:OverlongPenalty",
        "step_accuracy": "cairn.rewards.step_grpo:StepAccuracy",
        "step_validity": "cairn.rewards.step_grpo:StepValidity",
        "info_gain": "cairn.rewards.info_gain:InfoGain",
        "novelty": "cairn.rewards.intrinsic:Novelty",
    },
)
register_reward = REWARDS.register  # register_reward(name, "package.module:Class")
available_rewards = REWARDS.available
validate_reward_options = REWARDS.validate


def make_reward(name: str, **options: object) -> RewardFn:
    return REWARDS.make(name, **options)
