"""The HF backend: sampled behaviour log-probs must equal teacher-forced scoring."""

from __future__ import annotations

import torch

from cairn.data.tokens import collate_scoring
from cairn.policies import HFPolicy

ACTIONS = ["up", "down", "left", "right"]


def _prompts(policy: HFPolicy, env, n: int) -> list[list[int]]:
    out = []
    for seed in range(n):
        obs, _ = env.reset(seed=seed)
        # Different lengths, so the batch really is left-padded.
        out.append(policy.encode(" ".join(["box"] * (seed % 4)) + f" obs: {obs} act:"))
    return out


def test_sampled_logprobs_match_scoring_free_text(tiny_policy, compact_env):
    prompts = _prompts(tiny_policy, compact_env, 8)
    gen = torch.Generator().manual_seed(1)
    outs = tiny_policy.generate(prompts, max_new_tokens=6, temperature=0.7, generator=gen)
    inputs = collate_scoring(prompts, [o.token_ids for o in outs], pad_id=tiny_policy.pad_id)
    logp, _ = tiny_policy.score(inputs, temperature=0.7)
    for i, o in enumerate(outs):
        k = len(o.token_ids)
        torch.testing.assert_close(logp[i, -k:], torch.tensor(o.logprobs), atol=1e-5, rtol=0)


def test_constrained_decoding_stays_admissible_and_scores_match(tiny_policy, compact_env):
    prompts = _prompts(tiny_policy, compact_env, 16)
    choices = [ACTIONS[: 2 + i % 3] for i in range(16)]  # 2, 3 or 4 admissible actions
    gen = torch.Generator().manual_seed(2)
    outs = tiny_policy.generate(prompts, choices=choices, generator=gen)
    for o, c in zip(outs, choices, strict=True):
        assert o.text in c and o.finish == "choice"
        assert len(o.allowed[0]) == len(c)
    inputs = collate_scoring(
        prompts, [o.token_ids for o in outs], [o.allowed for o in outs], tiny_policy.pad_id
    )
    logp, ent = tiny_policy.score(inputs)
    torch.testing.assert_close(logp[:, -1], torch.tensor([o.logprobs[0] for o in outs]))
    # The restricted policy is a distribution over the admissible actions only.
    for i, c in enumerate(choices):
        assert 0 < float(ent[i, -1]) <= torch.log(torch.tensor(float(len(c)))) + 1e-6


def test_row_numbers_do_not_depend_on_batch_padding(tiny_policy, compact_env):
    prompts = _prompts(tiny_policy, compact_env, 6)
    action = [tiny_policy.encode("up")] * 6
    together, _ = tiny_policy.score(collate_scoring(prompts, action))
    for i in range(6):
        alone, _ = tiny_policy.score(collate_scoring([prompts[i]], [action[i]]))
        torch.testing.assert_close(alone[0, -1], together[i, -1], atol=1e-5, rtol=0)


def test_greedy_picks_the_most_likely_admissible_action(tiny_policy, compact_env):
    prompts = _prompts(tiny_policy, compact_env, 5)
    outs = tiny_policy.generate(prompts, choices=[ACTIONS] * 5, greedy=True)
    ids = [tiny_policy.encode(a)[0] for a in ACTIONS]
    allowed = torch.tensor([[ids]] * 5)
    for i, o in enumerate(outs):
        scores = [
            float(tiny_policy.score(collate_scoring([prompts[i]], [[t]], [[ids]]))[0][0, -1])
            for t in ids
        ]
        assert o.text == ACTIONS[max(range(4), key=scores.__getitem__)]
    assert allowed.shape == (5, 1, 4)


def test_stop_strings_cut_the_text(tiny_policy, compact_env):
    prompts = _prompts(tiny_policy, compact_env, 4)
    gen = torch.Generator().manual_seed(3)
    free = tiny_policy.generate(prompts, max_new_tokens=8, generator=gen)
    word = free[0].text.split()[1] if len(free[0].text.split()) > 1 else free[0].text
    gen = torch.Generator().manual_seed(3)
    cut = tiny_policy.generate(prompts, max_new_tokens=8, stop=[word], generator=gen)
    assert word not in cut[0].text and cut[0].finish == "stop"


def test_mixed_restricted_and_free_rows(tiny_policy, compact_env):
    prompts = _prompts(tiny_policy, compact_env, 4)
    choices = [ACTIONS, None, ACTIONS[:2], None]
    gen = torch.Generator().manual_seed(4)
    outs = tiny_policy.generate(prompts, choices=choices, max_new_tokens=3, generator=gen)
    inputs = collate_scoring(
        prompts, [o.token_ids for o in outs], [o.allowed for o in outs], tiny_policy.pad_id
    )
    logp, _ = tiny_policy.score(inputs)
    for i, o in enumerate(outs):
        k = len(o.token_ids)
        torch.testing.assert_close(logp[i, -k:], torch.tensor(o.logprobs), atol=1e-5, rtol=0)


def test_top_p_sampling_only_draws_from_the_nucleus(tiny_policy, compact_env):
    prompts = _prompts(tiny_policy, compact_env, 1) * 64
    gen = torch.Generator().manual_seed(5)
    outs = tiny_policy.generate(prompts, max_new_tokens=1, top_p=0.05, generator=gen)
    # With a near-uniform random model, a 5% nucleus holds very few tokens.
    assert len({o.token_ids[0] for o in outs}) <= 6
