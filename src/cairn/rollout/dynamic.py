"""Dynamic sampling (DAPO, arXiv 2503.14476, Sec. 3.2, eq. 11): the bookkeeping of the
sampling rounds of one iteration.

DAPO over-samples and drops the groups whose episodes all earn the same return: their
group-relative advantage is zero, so they carry no gradient and only shrink the batch.
The trainer samples the B groups it wants, scores them (rewards, observers), and hands
them to ``SamplingRounds.keep``, which keeps the groups with signal and says how many
groups are still missing; the trainer samples that many from fresh task seeds, for at most
``max_rounds`` rounds (``cairn.train.trainer.Trainer.collect``):

    rounds = SamplingRounds(B, first_episode_id=..., enabled=..., max_rounds=..., group_stride=B)
    missing = B
    while missing:
        episodes = sample(draw_seeds(missing), rounds.next_episode_id)
        rounds.renumber(episodes)            # group ids unique across rounds
        score(episodes)                      # rewards first: shaped rewards count
        missing = rounds.keep(episodes)
    episodes = rounds.episodes

When every group of every round is flat the last round is trained on (all advantages zero).
Switched off, it is one round with every group kept. Either way it counts what was sampled
(dropped groups included) and the groups it dropped. Group ids of round r are shifted by
``r * group_stride``; episode ids continue from the previous round's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from cairn.data.episode import Episode

__all__ = ["SamplingRounds", "groups_with_signal"]


def groups_with_signal(episodes: Sequence[Episode]) -> set[int]:
    """Groups whose episode returns are not all equal (compared at 9 decimals)."""
    returns: dict[int, set[float]] = defaultdict(set)
    for e in episodes:
        returns[e.group].add(round(e.ret, 9))
    return {g for g, r in returns.items() if len(r) > 1}


class SamplingRounds:
    """The rounds of one iteration's sampling (module docstring).

    want              groups wanted (this rank's share of ``rollout.groups``)
    first_episode_id  the id of the first episode sampled (the run's episode count)
    enabled           False: one round, every group kept
    max_rounds        cap on sampling rounds (>= 1)
    group_stride      shift of group ids per round (the configured number of groups)
    ``sampled`` counts the episodes sampled so far, ``dropped`` the groups dropped.
    """

    def __init__(
        self,
        want: int,
        *,
        first_episode_id: int = 0,
        enabled: bool,
        max_rounds: int,
        group_stride: int,
    ):
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
        self.want, self.first_episode_id = want, first_episode_id
        self.enabled, self.max_rounds, self.group_stride = enabled, max_rounds, group_stride
        self.round = self.sampled = self.dropped = 0
        self.kept: list[Episode] = []
        self.last: list[Episode] = []

    @property
    def next_episode_id(self) -> int:
        """The id the next round's first episode gets."""
        return self.first_episode_id + self.sampled

    def renumber(self, episodes: Sequence[Episode]) -> None:
        """Shift the group ids of this round's episodes past the earlier rounds' (in place)."""
        for e in episodes:
            e.group += self.round * self.group_stride

    def keep(self, episodes: list[Episode]) -> int:
        """Count this round's scored ``episodes`` and keep its groups with signal; returns
        how many groups the next round samples (0: done, rounds used up or switched off)."""
        self.round += 1
        self.sampled += len(episodes)
        self.last = episodes
        if not self.enabled:
            self.kept = episodes
            return 0
        informative = groups_with_signal(episodes)
        self.dropped += len({e.group for e in episodes}) - len(informative)
        self.kept += [e for e in episodes if e.group in informative]
        missing = self.want - len({e.group for e in self.kept})
        return missing if missing > 0 and self.round < self.max_rounds else 0

    @property
    def episodes(self) -> list[Episode]:
        """The episodes to train on: the kept groups, or the last round when none was kept."""
        return self.kept or self.last
