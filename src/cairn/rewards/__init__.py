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

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cairn._options import check_options
from cairn.data.episode import Episode

__all__ = [
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


_REWARDS: dict[str, str] = {
    "overlong": "cairn.rewards.shaped:OverlongPenalty",
    "step_accuracy": "cairn.rewards.step_grpo:StepAccuracy",
    "step_validity": "cairn.rewards.step_grpo:StepValidity",
    "info_gain": "cairn.rewards.info_gain:InfoGain",
    "novelty": "cairn.rewards.intrinsic:Novelty",
}


def register_reward(name: str, target: str) -> None:
    """Register a reward class by import path ``"package.module:ClassName"``."""
    if name in _REWARDS and _REWARDS[name] != target:
        raise ValueError(f"reward {name!r} is already registered as {_REWARDS[name]}")
    _REWARDS[name] = target


def available_rewards() -> list[str]:
    return sorted(_REWARDS)


def _reward_class(name: str) -> type:
    if name not in _REWARDS:
        raise ValueError(f"unknown reward {name!r}; available: {', '.join(available_rewards())}")
    module, _, cls = _REWARDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def validate_reward_options(name: str, options: dict[str, Any]) -> None:
    check_options(_reward_class(name).__init__, options, f"reward {name!r}")


def make_reward(name: str, **options: Any) -> RewardFn:
    validate_reward_options(name, options)
    return _reward_class(name)(**options)
