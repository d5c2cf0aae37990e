"""Rollout strategies: how episodes are sampled from the policy and the envs."""

from cairn.rollout.group import EnvPool, RolloutSettings, rollout, tasks_for_groups

__all__ = ["EnvPool", "RolloutSettings", "rollout", "tasks_for_groups"]
