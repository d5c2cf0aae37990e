"""Rewards added to the env's: shaped, intrinsic and information-gain rewards.

A reward is configured by name with options (``rewards: [{name: ..., options: {...}}]``)
and runs after the rollout, before the step table is built:

    fn = make_reward("overlong", max_len=16, cache=4)
    fn(episodes, ctx)          # adds step.shaped["overlong"] (or a step column)

Shaped terms land in ``Step.shaped`` (named, kept in the trajectory dumps) and count in
``Step.total_reward``, the reward every estimator reads. A reward that feeds an estimator
a column instead (IGPO's ``info_gain``) writes ``Step.columns``.
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


def make_reward(name: str, **options: Any) -> RewardFn:
    return REWARDS.make(name, **options)
