"""Rewards added to the env's: shaped, intrinsic and information-gain rewards.

A reward is configured by name with options (``rewards: [{name: ..., options: {...}}]``)
and runs after the rollout, before the step table is built:

    fn = make_reward("overlong", max_len=16, cache=4)
    fn(episodes, ctx)          # adds step.shaped["overlong"] (or a step column)

Shaped terms land in ``Step.shaped`` (named, kept in the trajectory dumps) and count in
``Step.total_reward``, the reward every estimator reads. A reward that feeds an estimator
a column instead (IGPO's ``info_gain``) writes ``Step.columns``.
"""

from cairn.rewards.registry import (
    REWARDS,
    RewardContext,
    RewardFn,
    available_rewards,
    make_reward,
    register_reward,
    validate_reward_options,
)

__all__ = [
    "REWARDS",
    "RewardContext",
    "RewardFn",
    "available_rewards",
    "make_reward",
    "register_reward",
    "validate_reward_options",
]
