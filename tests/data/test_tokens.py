"""Token batch collation: left-padded inputs, right-aligned actions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cairn.data.episode import Episode, Step
from cairn.data.tokens import TokenBatch, collate_scoring


def test_collate_layout():
    # Contexts are prompt + action minus its last token: [5, 6, 7] and [8, 2].
    inp = collate_scoring([[5, 6, 7], [8]], [[1], [2, 3]], pad_id=0)
    assert inp.input_ids.tolist() == [[5, 6, 7], [0, 8, 2]]
    assert inp.attention_mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert inp.context.tolist() == [0, 1]
    assert inp.actions.tolist() == [[0, 1], [2, 3]]
    assert inp.action_mask.tolist() == [[False, True], [True, True]]
    assert inp.allowed is None


def test_rows_sharing_a_context_share_one_forward_row():
    # Rows 0, 2 and 3 act from the same prompt with one-token actions: one context.
    inp = collate_scoring([[5, 6], [7], [5, 6], [5, 6]], [[1], [1], [2], [3]])
    assert inp.input_ids.shape[0] == 2
    assert inp.context.tolist() == [0, 1, 0, 0]
    assert inp.actions[:, -1].tolist() == [1, 1, 2, 3]


def test_collate_allowed_pads_with_minus_one():
    inp = collate_scoring([[5], [6]], [[1], [2, 3]], [[[1, 4]], None])
    assert inp.allowed.shape == (2, 2, 2)
    assert inp.allowed[0].tolist() == [[-1, -1], [1, 4]]
    assert (inp.allowed[1] == -1).all()  # unrestricted row


def test_minibatch_aligns_old_logprobs_and_advantages():
    steps = [
        Step(
            t=0,
            observation="o",
            anchor="o",
            action="a",
            completion="a",
            reward=0.0,
            prompt_ids=[5, 6],
            action_ids=[1, 2],
            logprobs=[-0.1, -0.2],
        ),
        Step(
            t=1,
            observation="o",
            anchor="o",
            action="b",
            completion="b",
            reward=1.0,
            prompt_ids=[5],
            action_ids=[3],
            logprobs=[-0.3],
        ),
    ]
    ep = Episode(id=0, group=0, task=0, steps=steps, source=1)
    tb = TokenBatch.from_episodes([ep], np.array([2.0, -1.0]))
    mb = tb.minibatch(np.array([1, 0]))
    torch.testing.assert_close(mb.old_logprobs, torch.tensor([[0.0, -0.3], [-0.1, -0.2]]))
    torch.testing.assert_close(mb.advantages, torch.tensor([[0.0, -1.0], [2.0, 2.0]]))
    assert mb.flags["off_policy"].tolist() == [True, True]


def test_train_prompt_and_loss_mask():
    s0 = Step(
        t=0,
        observation="o",
        anchor="o",
        action="a",
        completion="a",
        reward=0.0,
        prompt_ids=[5, 9, 6],
        train_prompt_ids=[5, 6],
        action_ids=[1, 2, 3],
        logprobs=[-0.1, -0.2, -0.3],
        loss_mask=[True, False, True],
        flags={"tips_stripped": True},  # set with train_prompt_ids (exploration.memory)
    )
    s1 = Step(
        t=1,
        observation="o",
        anchor="o",
        action="b",
        completion="b",
        reward=1.0,
        prompt_ids=[7],
        action_ids=[4],
        logprobs=[-0.4],
    )
    tb = TokenBatch.from_episodes([Episode(id=0, group=0, task=0, steps=[s0, s1])], np.ones(2))
    assert tb.prompt_ids == [[5, 6], [7]]  # scored without the tips it was sampled with
    assert tb.flags["tips_stripped"].tolist() == [True, False]
    mb = tb.minibatch(np.array([0, 1]))
    assert mb.mask.tolist() == [[True, False, True], [False, False, True]]


def _step(t: int, **kw) -> Step:
    return Step(t=t, observation="o", anchor="o", action="a", completion="a", reward=0.0,
                prompt_ids=[5], action_ids=[1], logprobs=[-0.1], **kw)  # fmt: skip


def test_step_flags_are_copied_by_name_without_knowing_it() -> None:
    # a flag no part of cairn knows arrives as a row array, False on steps that lack it
    steps = [_step(0, flags={"some_new_flag": True}), _step(1), _step(2, flags={"x": False})]
    tb = TokenBatch.from_episodes([Episode(id=0, group=0, task=0, steps=steps)], np.ones(3))
    assert tb.flags["some_new_flag"].tolist() == [True, False, False]
    assert tb.flags["x"].tolist() == [False, False, False]
    assert tb.flags["off_policy"].tolist() == [False] * 3  # source flag: always present
    mb = tb.minibatch(np.array([2, 0]))
    assert mb.flags["some_new_flag"].tolist() == [False, True]
    assert mb.flags["some_new_flag"].dtype == torch.bool


def test_prompt_labels_number_equal_prompts_in_order_of_first_appearance():
    tb = TokenBatch(
        prompt_ids=[[5, 6], [7], [5, 6], [5], [7]],
        action_ids=[[1], [1], [2], [3], [4]],
        old_logprobs=[[0.0]] * 5,
        advantages=np.zeros(5),
        allowed=[None] * 5,
    )
    # [5] is a prefix of [5, 6] but another prompt; equal actions do not matter.
    assert tb.prompt_labels().tolist() == [0, 1, 0, 2, 1]


def test_task_labels_number_rollout_groups_packed_or_not():
    # Episodes 0 and 2 play task 7, episode 1 task 3; episode 0's second prompt extends its
    # first (prompt + action + observation), so packing makes it one row.
    def step(t, prompt, action):
        logprobs = [-0.1] * len(action)
        return Step(t=t, observation="o", anchor="o", action="a", completion="a", reward=0.0,
                    prompt_ids=prompt, action_ids=action, logprobs=logprobs)  # fmt: skip

    episodes = [
        Episode(id=0, group=7, task=7, steps=[step(0, [5], [1]), step(1, [5, 1, 9], [2])]),
        Episode(id=1, group=3, task=3, steps=[step(0, [6], [1])]),
        Episode(id=2, group=7, task=7, steps=[step(0, [5], [3])]),
    ]
    rows = TokenBatch.from_episodes(episodes, np.ones(4))
    assert rows.groups.tolist() == [7, 7, 3, 7]
    assert rows.task_labels().tolist() == [1, 1, 0, 1]
    packed = TokenBatch.from_episodes(episodes, np.ones(4), pack=True)
    assert len(packed) == 3 and packed.groups.tolist() == [7, 3, 7]
    assert packed.task_labels().tolist() == [1, 0, 1]
    assert TokenBatch.from_episodes([], np.zeros(0), pack=True).task_labels().tolist() == []
    bare = TokenBatch([[5]], [[1]], [[0.0]], np.zeros(1), [None])  # not built from episodes
    with pytest.raises(ValueError, match="no groups"):
        bare.task_labels()
