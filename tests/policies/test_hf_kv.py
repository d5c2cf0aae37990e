"""Generation continues an episode's KV cache from the last call (``HFPolicy.reuse_cache``,
``cairn.policies.kv``): a prompt that extends a kept row (prompt + reply) feeds only its new
tokens, samples the same tokens with log-probs within float rounding, and nothing stale is
ever reused (weights changed, an update's scoring)."""

from __future__ import annotations

import pytest
import torch

from cairn.envs import make
from cairn.policies import GenerationOptions, HFPolicy, local_tokenizer
from cairn.policies.kv import KeptCaches, weights_version
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.train.config import load_config
from cairn.train.settings import turns_extend


def _policy(attn: str = "eager", **options) -> tuple[HFPolicy, list[list[int]]]:
    env = make("sokoban", render="compact", max_solution=5)
    tok = local_tokenizer(env, env.instruction)
    config = tiny_config(len(tok), pad_token_id=0, eos_token_id=2, attn_implementation=attn)
    policy = HFPolicy(build_tiny_model(config, seed=0), tok, options=GenerationOptions(**options))
    prompts = []
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        prompts.append(policy.encode(" ".join(["box"] * seed) + f" obs: {obs} act:"))
    return policy, prompts + prompts[:2]  # 6 rows, 4 distinct prompts


_CHOICES = [["up"], ["down left"], ["left up right"], ["right"], ["up down"], ["left"]]


def _two_turns(policy: HFPolicy, prompts, reuse: bool, drop: bool):
    """Turn 1 on ``prompts`` (choices of 1-3 words, so rows end at different steps), then
    turn 2 on each prompt + its reply + a new observation, sampled freely (a fresh policy
    over ``policy``'s model: nothing kept, its token count at 0)."""
    options = GenerationOptions(reuse_cache=reuse, drop_finished=drop)
    policy = HFPolicy(policy.model, policy.tokenizer, options=options)
    gen = torch.Generator().manual_seed(3)
    first = policy.generate(prompts, max_new_tokens=6, choices=_CHOICES, generator=gen)
    turn1_tokens = policy.forward_tokens
    obs = policy.encode("obs: wall box goal act:")
    nxt = [[*p, *g.token_ids, *obs] for p, g in zip(prompts, first, strict=True)]
    second = policy.generate(nxt, max_new_tokens=5, temperature=0.9, generator=gen)
    return first, second, turn1_tokens, policy.forward_tokens - turn1_tokens


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("drop", [False, True])
def test_the_next_turn_continues_the_kept_cache(attn, drop):
    policy, prompts = _policy(attn)
    a1, a2, t1_off, t2_off = _two_turns(policy, prompts, reuse=False, drop=drop)
    b1, b2, t1_on, t2_on = _two_turns(policy, prompts, reuse=True, drop=drop)
    assert [g.token_ids for g in b1] == [g.token_ids for g in a1] and t1_on == t1_off
    assert [g.token_ids for g in b2] == [g.token_ids for g in a2]
    for x, y in zip(b2, a2, strict=True):
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs))
        torch.testing.assert_close(torch.tensor(x.entropies), torch.tensor(y.entropies))
    # Each turn-2 prompt skips the longest kept row it extends: a turn-1 prompt and all its
    # reply but the last token (never fed), its own or another's with the same tokens.
    kept = [(*p, *g.token_ids[:-1]) for p, g in zip(prompts, b1, strict=True)]
    nxt = [(*p, *g.token_ids) for p, g in zip(prompts, b1, strict=True)]
    skipped = [max(len(k) for k in kept if n[: len(k)] == k) for n in nxt]
    assert t2_off - t2_on == sum(skipped) > sum(map(len, prompts))


def test_changed_weights_or_an_update_drop_the_kept_rows():
    policy, prompts = _policy(reuse_cache=True)
    gen = torch.Generator().manual_seed(0)
    first = policy.generate(prompts, max_new_tokens=4, generator=gen)
    assert len(policy.sharing.kept.rows) == len(
        {(*p, *g.token_ids[:-1]) for p, g in zip(prompts, first, strict=True)}
    )
    nxt = [[*p, *g.token_ids, 5] for p, g in zip(prompts, first, strict=True)]
    version = weights_version(policy.model)
    with torch.no_grad():
        next(policy.model.parameters()).add_(0.0)  # in place: the version moves
    assert weights_version(policy.model) != version
    before = policy.forward_tokens
    policy.generate(nxt, max_new_tokens=1, generator=gen)
    assert policy.forward_tokens - before == sum(map(len, {tuple(r) for r in nxt}))  # all prefilled
    # A score with gradients (an update's) drops what generation kept.
    assert policy.sharing.kept.rows
    from cairn.data.tokens import collate_scoring

    policy.score(collate_scoring(nxt[:1], [[4, 5]], pad_id=policy.pad_id))
    assert not policy.sharing.kept.rows


def test_longest_kept_prefix_leaves_a_token_to_feed():
    kept = KeptCaches()
    kept.rows = {(1, 2): [], (1, 2, 3): [], (7,): []}
    assert kept.longest([1, 2, 3, 4]) == (1, 2, 3)
    assert kept.longest([1, 2, 3]) == (1, 2)  # (1, 2, 3) would leave nothing to feed
    assert kept.longest([1, 5]) is None and kept.longest([7, 7]) == (7,)


@pytest.mark.parametrize(
    ("sets", "extends"),
    [
        ([], False),  # sokoban_smol: history 1 of 6 turns
        (["agent.history=5"], True),
        (["agent.history=5", "agent.prompt_style=flat"], False),
        (["agent.history=5", "rollout.max_turns=7"], False),
    ],
)
def test_cache_reuse_needs_chat_prompts_showing_every_turn(sets, extends):
    assert turns_extend(load_config("sokoban_smol", sets)) is extends
