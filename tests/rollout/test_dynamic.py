"""DAPO dynamic sampling as the rounds' bookkeeping the trainer's collect calls: the same
episodes and seed draws as a plain resampling loop, groups without signal dropped, counts
kept."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pytest

from cairn.data.episode import Episode, Step
from cairn.rollout.dynamic import SamplingRounds, groups_with_signal


@dataclass
class _Ctx:
    first_episode_id: int = 0


class _Strategy:
    """Group i of a call is seed i's task; seeds divisible by 3 give flat groups."""

    def __init__(self):
        self.calls: list[tuple[int, list[int]]] = []

    def collect(self, ctx, seeds, group_size):
        self.calls.append((ctx.first_episode_id, [int(s) for s in seeds]))
        out, k = [], ctx.first_episode_id
        for g, seed in enumerate(seeds):
            for j in range(group_size):
                r = 0.0 if seed % 3 == 0 else float(j % 2)
                step = Step(t=0, observation="o", anchor="o", action="a", completion="a", reward=r)
                out.append(Episode(id=k, group=g, task=int(seed), steps=[step]))
                k += 1
        return out


def _plain_loop(strategy, rng, groups, group_size, max_rounds, stride):
    """Resampling written as one plain loop (sample, shift group ids, keep groups with
    signal), the reference."""
    kept, sampled, dropped = [], 0, 0
    for r in range(max_rounds):
        need = groups - len({e.group for e in kept})
        seeds = rng.integers(0, 100, size=need)
        new = strategy.collect(_Ctx(sampled), seeds, group_size)
        for e in new:
            e.group += r * stride
        sampled += len(new)
        returns = defaultdict(set)
        for e in new:
            returns[e.group].add(round(e.ret, 9))
        informative = {g for g, x in returns.items() if len(x) > 1}
        dropped += len({e.group for e in new}) - len(informative)
        kept += [e for e in new if e.group in informative]
        if len({e.group for e in kept}) >= groups:
            break
    return kept or new, sampled, dropped


def _collect(strategy, draw, want, group_size, *, max_rounds, stride, enabled=True,
             first=0, score=lambda episodes: None):  # fmt: skip
    """``Trainer.collect``'s loop around ``SamplingRounds`` (sample, renumber, score, keep)."""
    rounds = SamplingRounds(want, first_episode_id=first, enabled=enabled,
                            max_rounds=max_rounds, group_stride=stride)  # fmt: skip
    missing = want
    while missing:
        new = strategy.collect(_Ctx(rounds.next_episode_id), draw(missing), group_size)
        rounds.renumber(new)
        score(new)
        missing = rounds.keep(new)
    return rounds


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_rounds", [1, 2, 3, 5])
def test_rounds_equal_a_plain_resampling_loop(seed, max_rounds) -> None:
    ref_strategy, new_strategy = _Strategy(), _Strategy()
    ref = _plain_loop(ref_strategy, np.random.default_rng(seed), 4, 3, max_rounds, 4)
    rng = np.random.default_rng(seed)
    draw = lambda n: rng.integers(0, 100, size=n)  # noqa: E731
    scored = []
    dyn = _collect(new_strategy, draw, 4, 3, max_rounds=max_rounds, stride=4, score=scored.append)
    got = dyn.episodes
    key = lambda es: [(e.id, e.group, e.task, e.ret) for e in es]  # noqa: E731
    assert key(got) == key(ref[0]) and (dyn.sampled, dyn.dropped) == ref[1:]
    assert new_strategy.calls == ref_strategy.calls  # same seeds, same first episode ids
    assert len(scored) == len(new_strategy.calls)  # rewards applied to every round


def test_kept_groups_carry_signal_and_flat_groups_are_counted() -> None:
    # seeds 3 and 6 are flat: round 0 keeps groups 1 and 3; round 1 draws 2 more seeds
    seeds = iter([[3, 1, 6, 2], [1, 4], [7, 8]])
    dyn = _collect(_Strategy(), lambda n: next(seeds)[:n], 4, 2, max_rounds=3, stride=10,
                   first=5)  # fmt: skip
    got = dyn.episodes
    assert sorted({e.group for e in got}) == [1, 3, 10, 11]  # round 1 shifted by 10
    assert groups_with_signal(got) == {e.group for e in got}
    assert (dyn.sampled, dyn.dropped) == (12, 2)
    assert [e.id for e in got][-4:] == [13, 14, 15, 16]  # ids continue after round 0's 8


def test_disabled_is_one_round_keeping_every_group() -> None:
    seeds = iter([[3, 6]])  # a second draw would raise StopIteration
    dyn = _collect(_Strategy(), lambda n: next(seeds), 2, 2, max_rounds=3, stride=1,
                   enabled=False)  # fmt: skip
    got = dyn.episodes  # both flat, kept anyway
    assert len(got) == 4 and (dyn.sampled, dyn.dropped) == (4, 0)


def _episodes(group_returns: dict[int, list[float]], first_id: int = 0) -> list[Episode]:
    """One one-step episode per return, in its group."""
    out = []
    for g, returns in group_returns.items():
        for r in returns:
            step = Step(t=0, observation="o", anchor="o", action="a", completion="a", reward=r)
            out.append(Episode(id=first_id + len(out), group=g, task=g, steps=[step]))
    return out


def test_keep_says_how_many_groups_the_next_round_samples() -> None:
    rounds = SamplingRounds(3, first_episode_id=100, enabled=True, max_rounds=3, group_stride=3)
    # round 0: group 1 flat (1, 1); groups 0 and 2 differ -> keep 2 of 3, sample 1 more
    first = _episodes({0: [0.0, 1.0], 1: [1.0, 1.0], 2: [0.5, 0.0]})
    assert rounds.keep(first) == 1 and (rounds.sampled, rounds.dropped) == (6, 1)
    assert rounds.next_episode_id == 106  # 100 + the 6 sampled
    # round 1: its one group is renumbered 0 + 1 * 3 = 3; flat again -> 1 more, round 2
    second = _episodes({0: [0.0, 0.0]})
    rounds.renumber(second)
    assert [e.group for e in second] == [3, 3]
    assert rounds.keep(second) == 1 and (rounds.sampled, rounds.dropped) == (8, 2)
    # round 2 (the last of 3): flat once more -> 0, the rounds are used up, 2 groups kept
    third = _episodes({0: [2.0, 2.0]})
    rounds.renumber(third)
    assert [e.group for e in third] == [6, 6]
    assert rounds.keep(third) == 0 and (rounds.sampled, rounds.dropped) == (10, 3)
    assert sorted({e.group for e in rounds.episodes}) == [0, 2]


def test_all_flat_rounds_train_on_the_last_round() -> None:
    rounds = SamplingRounds(2, enabled=True, max_rounds=2, group_stride=2)
    assert rounds.keep(_episodes({0: [1.0, 1.0], 1: [0.0, 0.0]})) == 2
    last = _episodes({0: [3.0, 3.0], 1: [4.0, 4.0]})
    rounds.renumber(last)
    assert rounds.keep(last) == 0 and rounds.episodes is last  # A = 0 everywhere
    assert (rounds.sampled, rounds.dropped) == (8, 4)


def test_max_rounds_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_rounds"):
        SamplingRounds(4, enabled=True, max_rounds=0, group_stride=1)
