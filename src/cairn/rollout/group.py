"""``group``: G episodes per task instance (same seed, same initial state), B instances.

GRPO's sampling: the episodes of all groups advance together in the turn loop
(``cairn.rollout.loop``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cairn.data.episode import Episode
from cairn.rollout.loop import rollout, tasks_for_groups

if TYPE_CHECKING:
    from cairn.rollout.context import RolloutContext

__all__ = ["GroupStrategy"]


class GroupStrategy:
    """``group``: G independent episodes per task instance (GRPO's sampling)."""

    def collect(self, ctx: RolloutContext, seeds: Sequence[int], group_size: int) -> list[Episode]:
        tasks = tasks_for_groups(seeds, group_size)
        return rollout(
            ctx.policy,
            ctx.envs.take(len(tasks)),
            tasks,
            ctx.prompt,
            ctx.settings,
            ctx.generator,
            ctx.first_episode_id,
        )
