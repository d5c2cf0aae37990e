"""``entropy_branch`` (ARPO): the branching rule, budget, leaf paths, real-model runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
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
from cairn.data.episode import Episode, Step, to_step_batch
from cairn.envs import make
from cairn.rollout import make_strategy
from cairn.rollout.branching import Path
from cairn.rollout.entropy_branch import EntropyBranchStrategy


def _enclosed(policy):
    return context(policy, room_factory(ENCLOSED, 4, render="grid"))


def test_always_branching_spends_the_budget_at_the_earliest_points():
    """tau 1, beta 0: every decision branches (u < 1). One root, budget 4: after turn 1 it
    branches before step 1, after turn 2 before step 2, after turn 3 before step 3 (a
    branch is not re-decided at its own first turn; then the budget is spent). Calls:
    1, 1, then root + 1 branch, then root + 2 branches, then the 3 branches finish."""
    policy = OraclePolicy()
    strategy = EntropyBranchStrategy(initial=1, beta=0.0, tau=1.0)
    episodes = strategy.collect(_enclosed(policy), [0], 4)
    assert policy.calls == [1, 1, 2, 3, 3]
    assert sorted(e.path for e in episodes) == [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1), (0, 1)]
    root = next(e for e in episodes if e.path == (0, 0, 0, 0))
    assert [s.columns["path"] for s in root.steps] == [(0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)]


def test_never_branching_is_group_sampling_plus_fills():
    policy = OraclePolicy()
    strategy = EntropyBranchStrategy(initial=2, beta=0.0, tau=-1.0)
    episodes = strategy.collect(_enclosed(policy), [0], 4)
    assert policy.calls == [2] * 8  # two roots play 4 turns, then two fills do
    assert sorted(e.path for e in episodes) == [(0,), (1,), (2,), (3,)]


def _path(entropies: list[float], t0: int = 0) -> Path:
    steps = [Step(t, "o", "o", "up", "up", 0.0) for t in range(len(entropies))]
    episode = Episode(id=0, group=0, task=0, steps=steps, meta={"entropy": entropies})
    return Path(episode, None, ("", {}), t0=t0)


def test_the_rule_equals_u_minus_beta_dH_at_most_tau_with_the_same_draws():
    rng = np.random.default_rng(0)
    strategy = EntropyBranchStrategy(beta=0.2, tau=0.5)
    ours, ref = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(300):
        h = rng.uniform(0, 1, size=int(rng.integers(2, 6))).tolist()
        decided = strategy._decide(_path(h), ours)
        u = float(torch.rand((), generator=ref))
        assert decided == (u - 0.2 * (h[-1] - h[0]) <= 0.5)


@pytest.mark.parametrize(("dH", "rate"), [(0.0, 0.5), (1.0, 0.7), (-1.0, 0.3)])
def test_branch_rate_is_tau_plus_beta_dH(dH, rate):
    """P(u - 0.2 dH <= 0.5) = 0.5 + 0.2 dH for u ~ U[0, 1): 0.5, 0.7, 0.3."""
    strategy = EntropyBranchStrategy()
    gen = torch.Generator().manual_seed(1)
    h = [0.5, 0.5 + dH]
    hits = sum(strategy._decide(_path(h), gen) for _ in range(4000))
    assert abs(hits / 4000 - rate) < 0.03  # 4 sigma of a 4000-draw binomial is < 0.032


def test_no_decision_at_turn_0_or_at_a_branch_first_turn():
    strategy = EntropyBranchStrategy(beta=0.0, tau=1.0)  # would branch whenever asked
    gen = torch.Generator().manual_seed(0)
    assert not strategy._decide(_path([0.3]), gen)  # turn 0 answers the prompt
    assert not strategy._decide(_path([0.3, 0.4, 0.2], t0=2), gen)  # its own first turn
    assert strategy._decide(_path([0.3, 0.4, 0.2, 0.9], t0=2), gen)


def test_real_model_fills_the_budget_with_valid_trees(demo_policy):
    strategy = make_strategy("entropy_branch", initial=4)
    episodes = strategy.collect(demo_context(demo_policy), [21, 22, 23], 8)
    assert sorted(np.bincount([e.group for e in episodes])) == [8, 8, 8]
    factory = lambda: make("sokoban", **DEMO)  # noqa: E731
    assert all(replays_exactly(e, factory) for e in episodes)
    assert any(len(e.path) > 1 for e in episodes)  # some entropy-triggered branch happened
    for e in episodes:
        assert len(e.meta["entropy"]) == len(e.steps)
        assert all(0.0 <= h <= 1.0 + 1e-9 for h in e.meta["entropy"])
    batch = to_step_batch(episodes)
    soft = estimate("arpo", batch)
    hard = estimate("arpo", batch, attribution="hard")
    assert np.isfinite(soft).all() and np.isfinite(hard).all()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"initial": 0}, "initial must be an int >= 1"),
        ({"entropy_tokens": 0}, "entropy_tokens must be an int >= 1"),
        ({"beta": "high"}, "beta must be a number"),
        ({"tau": None}, "tau must be a number"),
    ],
)
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(ValueError, match=message):
        EntropyBranchStrategy(**options)


def test_more_initial_samples_than_budget_is_an_error():
    with pytest.raises(ValueError, match=r"initial \(5\) exceeds group_size \(4\)"):
        EntropyBranchStrategy(initial=5).collect(_enclosed(OraclePolicy()), [0], 4)
