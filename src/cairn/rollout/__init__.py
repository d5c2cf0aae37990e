"""Rollout strategies: how episodes are sampled from the policy and the envs.

A strategy is selected by name (``rollout.strategy``) with keyword options
(``rollout.options``) and turns task seeds into episodes:

    strategy = make_strategy("group")
    episodes = strategy.collect(ctx, seeds, group_size)

Entries are import paths, like the env registry, so a strategy's module loads only when
it is used. Strategies that branch mid-episode restart from ``env.snapshot()`` states and
continue a copied prefix with ``play`` (the turn loop, ``cairn.rollout.loop``; env pools
and workers are in ``cairn.rollout.envpool``); their episodes carry ``path`` (and per-step
columns such as ``value`` or ``after_error``) for the estimators that read them.
"""

from __future__ import annotations

from cairn._env_host import EnvFactory
from cairn._registry import ImportRegistry
from cairn.rollout.context import RolloutContext, Strategy
from cairn.rollout.envpool.local import EnvPool
from cairn.rollout.envpool.workers import WorkerPool, make_env_pool
from cairn.rollout.group import GroupStrategy
from cairn.rollout.loop import (
    Policy,
    RolloutSettings,
    TurnHook,
    play,
    rollout,
    tasks_for_groups,
    turn_stats,
)

__all__ = [
    "STRATEGIES",
    "EnvFactory",
    "EnvPool",
    "GroupStrategy",
    "Policy",
    "RolloutContext",
    "RolloutSettings",
    "Strategy",
    "TurnHook",
    "WorkerPool",
    "available_strategies",
    "make_env_pool",
    "make_strategy",
    "play",
    "register_strategy",
    "rollout",
    "tasks_for_groups",
    "turn_stats",
    "validate_strategy_options",
]


STRATEGIES = ImportRegistry(
    "rollout strategy",
    {
        "group": "cairn.rollout.group:GroupStrategy",
        "tree": "cairn.rollout.tree:TreeStrategy",
        "entropy_branch": "cairn.rollout.entropy_branch:EntropyBranchStrategy",
        "mc_values": "cairn.rollout.mc_values:MCValueStrategy",
        "error_search": "cairn.rollout.error_search:ErrorSearchStrategy",
        "sge": "cairn.exploration.sge:SGEStrategy",  # SGE: a plan first, then act on it
        "ssrl": "cairn.exploration.self_search:SelfSearch",  # SSRL: self-written search results
    },
)
register_strategy = STRATEGIES.register  # register_strategy(name, "package.module:Class")
available_strategies = STRATEGIES.available
validate_strategy_options = STRATEGIES.validate


def make_strategy(name: str, **options: object) -> Strategy:
    return STRATEGIES.make(name, **options)
