"""What a rollout strategy samples with (``RolloutContext``) and what a strategy is
(``Strategy``: task seeds -> groups of episodes). Re-exported by ``cairn.rollout``; the
strategies inside the package import them from here, so that none of them reads the
package's ``__init__`` (which imports them back)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from cairn.agent import PromptBuilder
from cairn.data.episode import Episode
from cairn.policies.hf import HFPolicy
from cairn.rollout.envpool.local import EnvPool
from cairn.rollout.envpool.workers import WorkerPool
from cairn.rollout.settings import RolloutSettings

__all__ = ["RolloutContext", "Strategy"]


@dataclass
class RolloutContext:
    """What a strategy samples with. Episode ids start at ``first_episode_id``."""

    policy: HFPolicy
    envs: EnvPool | WorkerPool
    prompt: PromptBuilder
    settings: RolloutSettings
    generator: torch.Generator | None = None
    first_episode_id: int = 0


class Strategy(Protocol):
    def collect(
        self, ctx: RolloutContext, seeds: Sequence[int], group_size: int
    ) -> list[Episode]: ...
