"""The critic: values per prompt, shared contexts, and the clipped value loss."""

from __future__ import annotations

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
