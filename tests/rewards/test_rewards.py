"""Shaped rewards: DAPO's overlong penalty, Step-GRPO's step rewards, IGPO's information gain."""

from __future__ import annotations

import pytest
import torch

from cairn.data.episode import Episode, Step
from cairn.rewards import RewardContext, available_rewards, make_reward
from cairn.rewards.shaped import overlong_penalty
from cairn.rewards.step_grpo import key_step_matches, valid_structure


def _step(t=0, completion="", action_ids=(), prompt_ids=(5,)):
    return Step(
        t=t,
        observation="o",
        anchor="o",
        action=completion,
        completion=completion,
        reward=0.0,
        action_ids=list(action_ids),
        prompt_ids=list(prompt_ids),
    )


def test_overlong_penalty_worked_numbers():
    # L_max 16, L_cache 4: free up to 12 tokens, then a ramp to -1 at 16, -1 beyond.
    assert [overlong_penalty(n, 16, 4) for n in (12, 13, 14, 16, 17)] == [0, -0.25, -0.5, -1, -1]
    ep = Episode(id=0, group=0, task=0, steps=[_step(action_ids=range(14))])
    make_reward("overlong", max_len=16, cache=4)([ep], RewardContext())
    assert ep.steps[0].shaped == {"overlong": -0.5}
    assert ep.ret == -0.5  # shaped terms count in the return estimators read


def test_reward_registry_errors():
    assert {"overlong", "step_accuracy", "step_validity", "info_gain"} <= set(available_rewards())
    with pytest.raises(ValueError, match="unknown reward 'bonus'"):
        make_reward("bonus")
    with pytest.raises(ValueError, match="no option 'scale'"):
        make_reward("overlong", max_len=4, cache=2, scale=1)
    with pytest.raises(ValueError, match="cache <= max_len"):
        make_reward("overlong", max_len=4, cache=5)


def test_step_accuracy_soft_matches_key_steps():
    keys = [["25*4=100", "4*25=100"], "100-3 = 97", ["answer 97"]]
    text = "First 4*25=100. Then  100-3   =  97.\nAnswer: 97"
    assert key_step_matches(text, keys) == 2  # third alternative 'answer 97' is absent
    ep = Episode(id=0, group=0, task=0, steps=[_step(completion=text)], meta={"key_steps": keys})
    make_reward("step_accuracy")([ep], RewardContext())
    assert ep.steps[0].shaped["step_accuracy"] == pytest.approx(0.1 * 2 / 3)


def test_step_accuracy_needs_key_steps():
    ep = Episode(id=0, group=0, task=0, steps=[_step()])
    with pytest.raises(ValueError, match="key_steps"):
        make_reward("step_accuracy")([ep], RewardContext())


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("Description: a\nRationale: b\nStep 1: x\nStep 2: y\nAnswer: 3", True),
        ("Rationale: b\nDescription: a\nStep 1: x\nAnswer: 3", False),  # sections out of order
        ("Description: a\nRationale: b\nStep 1: x\nStep 3: y\nAnswer: 3", False),  # gap
        ("Description: a\nRationale: b\nStep 1: x\nAnswer: 3\nStep 2: y", False),  # answer not last
        ("Description: a\nRationale: b\nAnswer: 3", False),  # no steps
    ],
)
def test_step_validity(text, ok):
    assert valid_structure(text, (r"description\s*:", r"rationale\s*:"), r"answer\s*:") is ok
    ep = Episode(id=0, group=0, task=0, steps=[_step(completion=text)])
    make_reward("step_validity")([ep], RewardContext())
    assert ep.steps[0].shaped["step_validity"] == float(ok)


def test_info_gain_is_the_change_in_answer_probability(tiny_policy):
    # Three turns with prompts a, b, c: info_gain = q(b) - q(a), q(c) - q(b), then 0.
    prompts = [tiny_policy.encode(w) for w in ("box r+1", "box r+2 c+1", "goal tr+0")]
    steps = [_step(t=i, prompt_ids=p) for i, p in enumerate(prompts)]
    ep = Episode(id=0, group=0, task=0, steps=steps, meta={"answer": "up"})
    fn = make_reward("info_gain", template="{answer}")
    fn([ep], RewardContext(policy=tiny_policy))
    ans = tiny_policy.encode("up")
    q = []
    for p in prompts:
        from cairn.data.tokens import collate_scoring

        logp, _ = tiny_policy.score(collate_scoring([p], [ans]))
        q.append(float(torch.exp(logp[0, -1])))
    gains = [s.columns["info_gain"] for s in ep.steps]
    assert gains == pytest.approx([q[1] - q[0], q[2] - q[1], 0.0], abs=1e-6)


def test_info_gain_scores_only_the_answer_after_the_templates_tool_words(tiny_policy):
    # template "box {answer}": q = p("up" | prompt + "box") (span answer, the paper's p of
    # the answer); span action scores both words: exp(mean logprob of "box", "up")
    from cairn.data.tokens import collate_scoring

    prompts = [tiny_policy.encode(w) for w in ("box r+1", "goal tr+0")]
    box, up = tiny_policy.encode("box"), tiny_policy.encode("up")

    def gain(span: str) -> float:
        ep = Episode(id=0, group=0, task=0, meta={"answer": "up"},
                     steps=[_step(t=i, prompt_ids=p) for i, p in enumerate(prompts)])  # fmt: skip
        make_reward("info_gain", template="box {answer}", span=span)(
            [ep], RewardContext(policy=tiny_policy)
        )
        return ep.steps[0].columns["info_gain"]

    def q(prompt, ctx, scored):
        logp, _ = tiny_policy.score(collate_scoring([prompt + ctx], [scored]))
        return float(torch.exp(logp[0, -len(scored) :].mean()))

    answer = q(prompts[1], box, up) - q(prompts[0], box, up)
    action = q(prompts[1], [], box + up) - q(prompts[0], [], box + up)
    assert gain("answer") == pytest.approx(answer, abs=1e-6)
    assert gain("action") == pytest.approx(action, abs=1e-6)
    assert abs(answer - action) > 1e-5  # so each equality above pins its own span
    with pytest.raises(ValueError, match="span 'tokens' is not one of answer, action"):
        make_reward("info_gain", span="tokens")


def test_info_gain_answer_the_tokenizer_cannot_write_fails_clearly(tiny_policy):
    # "up]" is no word of the word-level vocabulary: p(answer) would score <unk>, not "up"
    ep = Episode(id=0, group=0, task=0, steps=[_step(t=0)], meta={"answer": "up"})
    fn = make_reward("info_gain", template="{answer}]")
    with pytest.raises(ValueError, match="cannot write the answer action 'up]'"):
        fn([ep], RewardContext(policy=tiny_policy))
