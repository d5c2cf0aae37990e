"""Generation keeps the shared prefix's whole blocks between calls (``prefix_block``):
a later call whose prompts begin with kept blocks feeds only what follows them, and its
numbers equal a fresh policy's bit for bit; a weight change or another model drops them."""

from __future__ import annotations

import pytest
import torch

from cairn.envs import make
from cairn.policies import GenerationOptions, HFPolicy, local_tokenizer
from cairn.policies import sharing as sharing_mod
from cairn.policies.tiny import build_tiny_model, tiny_config

WORDS = ["box", "wall", "goal", "push"]


def _policy(attn: str = "eager", block: int = 8) -> HFPolicy:
    env = make("sokoban", render="compact", max_solution=5)
    tok = local_tokenizer(env, env.instruction)
    config = tiny_config(len(tok), pad_token_id=0, eos_token_id=2, attn_implementation=attn)
    options = GenerationOptions(share_prefix=True, min_shared_prefix=4, prefix_block=block)
    return HFPolicy(build_tiny_model(config, seed=0), tok, options=options)


def _prompts(policy: HFPolicy, turn: int) -> list[list[int]]:
    """4 prompts: the same 21-token instruction, then one word per row and turn."""
    head = policy.encode(" ".join(["push the box onto the goal"] * 3) + " box wall goal")
    assert len(head) == 21
    return [[*head, *policy.encode(f"{WORDS[(r + turn) % 4]} {WORDS[r]} act:")] for r in range(4)]


def _call(policy: HFPolicy, prompts, seed: int = 5):
    before = policy.forward_tokens
    gen = torch.Generator().manual_seed(seed)
    out = policy.generate(prompts, max_new_tokens=4, temperature=0.9, generator=gen)
    return out, policy.forward_tokens - before


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_a_later_call_feeds_only_what_follows_the_kept_blocks_with_the_same_numbers(attn):
    warm = _policy(attn)
    _call(warm, _prompts(warm, 0))  # turn 0 keeps the instruction's whole blocks
    # The 4 prompts share the 21-token instruction: blocks of 8 end at 8 and 16.
    assert sorted(map(len, warm.sharing.blocks.rows)) == [8, 16]
    second, fed = _call(warm, _prompts(warm, 1))
    fresh = _policy(attn)
    want, fed_fresh = _call(fresh, _prompts(fresh, 1))
    assert fed == fed_fresh - 16  # the two kept blocks are not fed again
    for got, ref in zip(second, want, strict=True):
        assert got.token_ids == ref.token_ids
        assert torch.equal(torch.tensor(got.logprobs), torch.tensor(ref.logprobs))  # bit for bit
        assert torch.equal(torch.tensor(got.entropies), torch.tensor(ref.entropies))


def test_blocks_agree_with_the_unblocked_shared_prefix():
    blocked, plain = _policy(block=8), _policy(block=0)
    for turn in range(2):
        got, _ = _call(blocked, _prompts(blocked, turn))
        want, _ = _call(plain, _prompts(plain, turn))
        for g, w in zip(got, want, strict=True):
            assert g.token_ids == w.token_ids
            torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs))
    assert not plain.sharing.blocks.rows  # off: nothing kept


def test_a_single_prompt_uses_the_kept_blocks_too():
    policy = _policy()
    _call(policy, _prompts(policy, 0))
    one = _prompts(policy, 1)[:1]
    _, fed = _call(policy, one)
    fresh = _policy(block=0)
    _, fed_fresh = _call(fresh, one)
    assert fed == fed_fresh - 16


def test_changed_weights_or_another_model_drop_the_kept_blocks():
    policy = _policy()
    _call(policy, _prompts(policy, 0))
    _, fed_kept = _call(policy, _prompts(policy, 1))
    with torch.no_grad():  # an optimizer step changes the parameters in place
        next(policy.model.parameters()).add_(0.01)
    _, fed_after = _call(policy, _prompts(policy, 1))
    assert fed_after == fed_kept + 16  # recomputed (and kept again)
    other = policy.with_model(build_tiny_model(policy.model.config, seed=1))  # a reference
    _, fed_other = _call(other, _prompts(other, 1))
    assert fed_other == fed_after  # the first policy's blocks were not used
    # The component's blocks are those of one model: asked for another's, it drops them.
    assert policy.sharing.blocks.rows
    with torch.no_grad():
        assert not policy.sharing.kept_blocks(other.model).rows
    with torch.enable_grad():
        assert (
            policy.sharing.kept_blocks(policy.model) is None
        )  # never while gradients are recorded


def test_kept_blocks_are_bounded(monkeypatch):
    monkeypatch.setattr(sharing_mod, "KEPT_BLOCK_TOKENS", 30)
    policy = _policy()
    _call(policy, _prompts(policy, 0))
    # Kept 8 then 16 tokens of rows: 24 <= 30. A second instruction's blocks start over.
    assert sum(map(len, policy.sharing.blocks.rows)) == 24
    other = [[*policy.encode("goal " * 21), *p[21:]] for p in _prompts(policy, 0)]
    _call(policy, other)
    assert sum(map(len, policy.sharing.blocks.rows)) <= 30
