"""Rollout strategies: how episodes are sampled from the policy and the envs.

A strategy is selected by name (``rollout.strategy``) with keyword options
(``rollout.options``) and turns task seeds into episodes:

    strategy = make_strategy("group")
    episodes = strategy.collect(ctx, seeds, group_size)

Entries are import paths, like the env registry, so a strategy's module loads only when
it is used. Strategies that branch mid-episode restart from ``env.snapshot()`` states and
continue a copied prefix with ``play``; their episodes carry ``path`` (and per-step
columns such as ``value`` or ``crit``) for the estimators that read them.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from cairn._options import check_options
from cairn.agent import PromptBuilder
from cairn.data.episode import Episode
from cairn.policies.hf import HFPolicy
from cairn.rollout.group import (
    EnvPool,
    GroupStrategy,
    RolloutSettings,
    play,
    rollout,
    tasks_for_groups,
)

__all__ = [
    "EnvPool",
    "GroupStrategy",
    "RolloutContext",
    "RolloutSettings",
    "Strategy",
    "available_strategies",
    "make_strategy",
    "play",
    "register_strategy",
    "rollout",
    "tasks_for_groups",
    "validate_strategy_options",
]


@dataclass
class RolloutContext:
    """What a strategy samples with. Episode ids start at ``first_episode_id``."""

    policy: HFPolicy
    envs: EnvPool
    prompt: PromptBuilder
    settings: RolloutSettings
    generator: torch.Generator | None = None
    first_episode_id: int = 0


class Strategy(Protocol):
    def collect(
        self, ctx: RolloutContext, seeds: Sequence[int], group_size: int
    ) -> list[Episode]: ...


_STRATEGIES: dict[str, str] = {
    "group": "cairn.rollout.group:GroupStrategy",
    "tree": "cairn.rollout.tree:TreeStrategy",
    "entropy_branch": "cairn.rollout.entropy_branch:EntropyBranchStrategy",
    "mc_values": "cairn.rollout.mc_values:MCValueStrategy",
    "error_search": "cairn.rollout.error_search:ErrorSearchStrategy",
}


def register_strategy(name: str, target: str) -> None:
    """Register a strategy class by import path ``"package.module:ClassName"``."""
    if name in _STRATEGIES and _STRATEGIES[name] != target:
        raise ValueError(f"rollout strategy {name!r} is already registered as {_STRATEGIES[name]}")
    _STRATEGIES[name] = target


def available_strategies() -> list[str]:
    return sorted(_STRATEGIES)


def _strategy_class(name: str) -> type:
    if name not in _STRATEGIES:
        raise ValueError(
            f"unknown rollout strategy {name!r}; available: {', '.join(available_strategies())}"
        )
    module, _, cls = _STRATEGIES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def validate_strategy_options(name: str, options: dict[str, Any]) -> None:
    check_options(_strategy_class(name).__init__, options, f"rollout strategy {name!r}")


def make_strategy(name: str, **options: Any) -> Strategy:
    validate_strategy_options(name, options)
    return _strategy_class(name)(**options)
