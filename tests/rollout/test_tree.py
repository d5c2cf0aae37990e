"""``tree`` (TreePO): split schedule, leaf paths, fills, prefix sharing, real-model runs."""

from __future__ import annotations

import numpy as np
import pytest
from rollout_helpers import (
    DEMO,
    ENCLOSED,
    OraclePolicy,
    context,
    demo_context,
    replays_exactly,
    room_factory,
)

from cairn.advantages import estimate
from cairn.data.episode import to_step_batch
from cairn.envs import make
from cairn.rollout import make_strategy
from cairn.rollout.tree import TreeStrategy


def _enclosed(policy, steps: int = 4):
    """The walled-in player: every action leaves the state unchanged, every episode lasts
    exactly ``steps`` turns (truncated), so the split schedule is known in advance."""
    return context(policy, room_factory(ENCLOSED, steps, render="grid"))


def _paths(episodes):
    return sorted(e.path for e in episodes)


def test_complete_binary_tree_when_nothing_stops_a_split():
    """width 2, one-turn segments, 4 leaves: 1 path plays turn 0, splits into 2 which play
    turn 1, split into 4 which play turns 2 and 3. Sampled turns 1 + 2 + 4 + 4 = 11 (not
    4 x 4 = 16); the leaves are the four paths of a complete binary tree of depth 2."""
    policy = OraclePolicy()
    episodes = TreeStrategy(segment_turns=1, repeat="ignore").collect(_enclosed(policy), [3], 4)
    assert policy.calls == [1, 2, 4, 4]
    assert _paths(episodes) == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    root = next(e for e in episodes if e.path == (0, 0, 0))
    assert [s.columns["path"] for s in root.steps] == [(0,), (0, 0), (0, 0, 0), (0, 0, 0)]
    assert all(len(e.steps) == 4 and e.truncated for e in episodes)
    assert [e.id for e in episodes] == [0, 1, 2, 3]


def test_a_looping_path_is_not_split_and_the_budget_is_filled_from_its_boundaries():
    """Every segment ends where it started (a repetition), so the root never splits and
    plays its 4 turns; the 3 missing leaves branch from its latest segment boundaries,
    before steps 3, 2 and 1, and play 1, 2 and 3 turns (calls of 3, 2 and 1 rows)."""
    policy = OraclePolicy()
    episodes = TreeStrategy(segment_turns=1).collect(_enclosed(policy), [3], 4)
    assert policy.calls == [1, 1, 1, 1, 3, 2, 1]
    assert _paths(episodes) == [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1), (0, 1)]


@pytest.mark.parametrize(
    ("repeat", "fill", "paths", "calls"),
    [
        # cut after its first (looping) segment; fills branch from the root state
        ("truncate", "branch", [(0, 0), (0, 1), (0, 2), (0, 3)], [1, 3, 3, 3, 3]),
        ("truncate", "root", [(0,), (1,), (2,), (3,)], [1, 3, 3, 3, 3]),
        ("truncate", "none", [(0,)], [1]),
        ("no_branch", "root", [(0,), (1,), (2,), (3,)], [1, 1, 1, 1, 3, 3, 3, 3]),
    ],
)
def test_repeat_and_fill_options(repeat, fill, paths, calls):
    policy = OraclePolicy()
    episodes = TreeStrategy(segment_turns=1, repeat=repeat, fill=fill).collect(
        _enclosed(policy), [3], 4
    )
    assert _paths(episodes) == paths and policy.calls == calls
    cut = [e for e in episodes if len(e.steps) == 1]
    assert all(e.truncated and not e.success for e in cut)


def test_max_depth_and_width():
    """max_depth 1: only the first segment end splits (into width 3), then the three
    paths play to the end and the 4th leaf is a fill from the latest boundary."""
    policy = OraclePolicy()
    strategy = TreeStrategy(width=3, segment_turns=2, repeat="ignore", max_depth=1)
    episodes = strategy.collect(_enclosed(policy, steps=6), [3], 4)
    assert policy.calls == [1, 1, 3, 3, 3, 3, 1, 1]
    assert _paths(episodes) == [(0, 0, 0), (0, 0, 1), (0, 1), (0, 2)]


def test_a_single_leaf_budget_never_splits():
    policy = OraclePolicy()
    episodes = TreeStrategy(segment_turns=1, repeat="ignore").collect(_enclosed(policy), [3, 4], 1)
    assert policy.calls == [2, 2, 2, 2] and _paths(episodes) == [(0,), (0,)]


def test_episodes_that_end_in_the_first_segment_are_filled():
    """A room solved by one push: the oracle wins at turn 0, before any split."""
    policy = OraclePolicy()
    ctx = context(policy, room_factory("#####\n#@$.#\n#####", 3, render="grid"))
    episodes = TreeStrategy().collect(ctx, [0], 3)
    assert all(e.success and len(e.steps) == 1 for e in episodes)
    assert _paths(episodes) == [(0, 0), (0, 1), (0, 2)]  # fills branch from the reset state


def test_real_model_trees_are_valid_replayable_and_cheaper(demo_policy):
    seeds = [11, 12, 13, 14, 15, 16]
    before = demo_policy.forward_tokens
    episodes = make_strategy("tree").collect(
        demo_context(demo_policy, first_episode_id=7), seeds, 8
    )
    tree_tokens = demo_policy.forward_tokens - before
    assert [e.id for e in episodes] == list(range(7, 7 + 48))
    assert sorted(np.bincount([e.group for e in episodes])) == [8] * 6
    factory = lambda: make("sokoban", **DEMO)  # noqa: E731
    assert all(replays_exactly(e, factory) for e in episodes)  # restored states are exact
    batch = to_step_batch(episodes)
    for name in ("treepo", "elpo"):  # one valid tree per group
        assert np.isfinite(estimate(name, batch)).all()
    shared = [(e, f) for e in episodes for f in episodes if e is not f and e.group == f.group]
    assert any(e.steps[0].action_ids is f.steps[0].action_ids for e, f in shared)  # copied
    before = demo_policy.forward_tokens
    make_strategy("group").collect(demo_context(demo_policy), seeds, 8)
    assert tree_tokens < demo_policy.forward_tokens - before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"width": 1}, "width must be an int >= 2"),
        ({"segment_turns": 0}, "segment_turns must be an int >= 1"),
        ({"max_depth": 0}, "max_depth must be an int >= 1"),
        ({"repeat": "stop"}, "repeat must be one of"),
        ({"fill": True}, "fill must be one of"),
    ],
)
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(ValueError, match=message):
        TreeStrategy(**options)


def test_more_roots_than_leaves_is_an_error():
    with pytest.raises(ValueError, match=r"roots \(3\) exceeds group_size \(2\)"):
        TreeStrategy(roots=3).collect(_enclosed(OraclePolicy()), [0], 2)
