"""The critic: values per prompt, shared contexts, and the clipped value loss."""

from __future__ import annotations

import pytest
import torch

from cairn.policies.critic import Critic, value_loss


def test_value_loss_worked_example():
    v, v_old, ret = torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.0]), torch.tensor([3.0, -1.0])
    # Unclipped: 0.5 * mean((1-3)^2, (0+1)^2) = 0.5 * (4 + 1) / 2 = 1.25.
    loss, m = value_loss(v, v_old, ret, clip=None)
    assert abs(float(loss) - 1.25) < 1e-6
    # clip 0.2: row 0's v_clip = 0.5 + 0.2 = 0.7, (0.7-3)^2 = 5.29 > 4 -> 0.5 * (5.29 + 1) / 2.
    loss, m = value_loss(v, v_old, ret, clip=0.2)
    assert abs(float(loss) - 0.5 * (5.29 + 1) / 2) < 1e-5
    assert m["critic/clipfrac"] == 0.5


def test_values_share_identical_prompts_and_start_at_zero(tiny_policy):
    critic = Critic.from_config(tiny_policy.model.config, tiny_policy.pad_id, seed=0)
    v = critic.values([[5, 6, 7], [8], [5, 6, 7]])
    assert v.shape == (3,) and torch.equal(v, torch.zeros(3))  # zero-initialised head
    torch.nn.init.normal_(critic.head.weight)
    v = critic.values([[5, 6, 7], [8], [5, 6, 7]])
    assert v[0] == v[2] and v[0] != v[1]
    alone = critic.values([[8]])
    torch.testing.assert_close(alone[0], v[1], atol=1e-5, rtol=0)


def test_critic_learns_a_constant(tiny_policy):
    # Adam moves the zero-initialised head bias about lr per step: 80 x 0.03 > 2, with room.
    critic = Critic.from_config(tiny_policy.model.config, tiny_policy.pad_id, seed=0)
    opt = torch.optim.Adam(critic.parameters(), lr=3e-2)
    prompts = [[5, 6], [7, 8, 9], [10]]
    for _ in range(80):
        loss, _ = value_loss(critic.values(prompts), torch.zeros(3), torch.full((3,), 2.0), None)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.testing.assert_close(critic.values(prompts), torch.full((3,), 2.0), atol=0.05, rtol=0)


def _batch_with_values(values, reward, episode):
    from cairn.data import StepBatch

    n = len(values)
    return StepBatch.from_columns(group=[0] * n, episode=episode, t=list(range(n)),
                                  reward=reward, anchor=["a"] * n, value=values)  # fmt: skip


def test_learner_targets_the_returns_part_else_the_discounted_return(tiny_policy):
    from types import SimpleNamespace

    import numpy as np

    from cairn.policies.critic import CriticLearner

    settings = SimpleNamespace(path=None, lr=1e-3, epochs=None, value_clip=None, gamma=0.5)
    learner = CriticLearner.build(settings, tiny_policy, seed=0, ckpt=None)
    # one episode of 3 steps with rewards 1, 0, 2 and gamma 0.5: G = 1 + 0 + 0.25*2 = 1.5,
    # then 0 + 0.5*2 = 1, then 2
    batch = _batch_with_values([0.0, 0.0, 0.0], [1.0, 0.0, 2.0], [0, 0, 0])
    np.testing.assert_allclose(learner.targets(batch, {}), [1.5, 1.0, 2.0])
    terms = {"returns": np.array([3.0, 4.0, 5.0])}
    assert learner.targets(batch, terms).tolist() == [3.0, 4.0, 5.0]


def test_learner_scores_steps_and_its_loss_moves_values(tiny_policy):
    from types import SimpleNamespace

    import numpy as np

    from cairn.data.episode import Episode, Step
    from cairn.data.tokens import TokenBatch
    from cairn.policies.critic import CriticLearner

    settings = SimpleNamespace(path=None, lr=3e-2, epochs=2, value_clip=None, gamma=1.0)
    learner = CriticLearner.build(settings, tiny_policy, seed=0, ckpt=None)
    kw = {"observation": "o", "action": "a", "completion": "a", "reward": 1.0}
    steps = [
        Step(t=t, anchor=t, prompt_ids=[5, 6 + t], action_ids=[1], logprobs=[0.0], **kw)
        for t in range(2)
    ]
    episodes = [Episode(id=0, group=0, task=0, steps=steps)]
    learner.score(episodes)
    assert [s.columns["value"] for s in steps] == [0.0, 0.0]  # zero-initialised head
    with pytest.raises(ValueError, match="already sets values"):
        learner.score(episodes)
    batch = _batch_with_values([0.0, 0.0], [1.0, 1.0], [0, 0])
    tokens = TokenBatch.from_episodes(episodes, np.zeros(2))
    loss_of = learner.minibatch_loss(tokens, batch, {})  # targets G = 2, 1
    loss, metrics = loss_of(np.array([0, 1]))
    assert float(loss.detach()) == pytest.approx(0.5 * (4 + 1) / 2) and metrics["critic/loss"] > 0
    for _ in range(40):
        loss, _ = loss_of(np.array([0, 1]))
        learner.opt.zero_grad()
        loss.backward()
        learner.opt.step()
    assert float(loss_of(np.array([0, 1]))[0].detach()) < 0.1
