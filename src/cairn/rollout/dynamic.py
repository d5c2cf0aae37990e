"""Dynamic sampling as a strategy wrapper (DAPO, arXiv 2503.14476, Sec. 3.2, eq. 11).

DAPO over-samples and drops the groups whose episodes all earn the same return: their
group-relative advantage is zero, so they carry no gradient and only shrink the batch.
``DynamicSampling`` wraps any rollout strategy: it samples the B groups it is asked for,
keeps the groups with signal, and samples the missing ones from fresh task seeds, for at
most ``max_rounds`` rounds. When every group of every round is flat it returns the last
round (all advantages zero). Switched off, it is one pass-through round; either way it
counts what was sampled (dropped groups included) and the groups it dropped.

Each round's episodes get their rewards (``score``) before the signal is judged, so
shaped rewards count. Group ids of round r are shifted by ``r * group_stride`` so they
stay unique across rounds; episode ids continue from the previous round's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from cairn.data.episode import Episode

__all__ = ["DynamicSampling", "groups_with_signal"]


def groups_with_signal(episodes: Sequence[Episode]) -> set[int]:
    """Groups whose episode returns are not all equal (compared at 9 decimals)."""
    returns: dict[int, set[float]] = defaultdict(set)
    for e in episodes:
        returns[e.group].add(round(e.ret, 9))
    return {g for g, r in returns.items() if len(r) > 1}


class DynamicSampling:
    """``collect(ctx, seeds, group_size)`` like the strategy it wraps, over several rounds.

    inner         the rollout strategy
    enabled       False: one round, every group kept
    max_rounds    cap on sampling rounds (>= 1)
    draw_seeds    n -> n fresh task seeds (the trainer's task generator), for later rounds
    group_stride  shift of group ids per round (the configured number of groups)
    score         applied to each round's episodes before judging signal (rewards)
    After a call, ``sampled`` is the number of episodes sampled and ``dropped`` the
    number of groups dropped.
    """

    def __init__(
        self,
        inner: Any,
        *,
        enabled: bool,
        max_rounds: int,
        draw_seeds: Callable[[int], np.ndarray],
        group_stride: int,
        score: Callable[[list[Episode]], None] = lambda episodes: None,
    ):
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
        self.inner, self.enabled, self.max_rounds = inner, enabled, max_rounds
        self.draw_seeds, self.group_stride, self.score = draw_seeds, group_stride, score
        self.sampled = self.dropped = 0

    def collect(self, ctx: Any, seeds: Sequence[int], group_size: int) -> list[Episode]:
        self.sampled = self.dropped = 0
        want, kept = len(seeds), list[Episode]()
        for r in range(self.max_rounds if self.enabled else 1):
            if r:
                seeds = list(self.draw_seeds(want - len({e.group for e in kept})))
            start = ctx.first_episode_id + self.sampled
            new = self.inner.collect(replace(ctx, first_episode_id=start), seeds, group_size)
            for e in new:  # group ids unique across rounds
                e.group += r * self.group_stride
            self.score(new)
            self.sampled += len(new)
            if not self.enabled:
                return new
            informative = groups_with_signal(new)
            self.dropped += len({e.group for e in new}) - len(informative)
            kept += [e for e in new if e.group in informative]
            if len({e.group for e in kept}) >= want:
                break
        return kept or new  # all flat: train on the last round (A = 0)
