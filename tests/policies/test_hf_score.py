"""Scoring through the decoder and the head on response positions only equals scoring
through the whole model's logits (the path before), values and gradients, on batches with
varied prompt and response lengths, constrained rows, gradient checkpointing and LoRA."""

from __future__ import annotations

import pytest
import torch

from cairn.data.tokens import collate_scoring
from cairn.policies import GenerationOptions, HFPolicy, local_tokenizer
from cairn.policies.lora import LoraSpec, apply_lora
from cairn.policies.modelio import decoder_and_head
from cairn.policies.tiny import build_tiny_model, tiny_config


def _policy(env, arch: str, score_chunk: int = 1024) -> HFPolicy:
    tok = local_tokenizer(env, env.instruction)
    config = tiny_config(len(tok), arch=arch, pad_token_id=0, eos_token_id=2)
    options = GenerationOptions(score_chunk=score_chunk)
    return HFPolicy(build_tiny_model(config, seed=0), tok, options=options)


def _batch(policy: HFPolicy, env, restricted: bool = False):
    """7 rows: prompts of 3 lengths, responses of 1 to 6 tokens, two rows sharing a context;
    with ``restricted`` rows 0-2 restricted to admissible ids, the rest free."""
    prompts, actions, allowed = [], [], []
    words = ["up", "down", "left", "right", "box", "wall"]
    for i in range(7):
        obs, _ = env.reset(seed=i % 5)
        prompts.append(policy.encode(" ".join(["box"] * (i % 3)) + f" obs: {obs} act:"))
        actions.append(policy.encode(" ".join(words[: 1 + (i * 5) % 6])))
        ids = sorted({actions[-1][0], *policy.encode("up down left")})
        allowed.append([ids] + [[t] for t in actions[-1][1:]] if restricted and i < 3 else None)
    prompts[6], actions[6], allowed[6] = prompts[5], actions[5], allowed[5]  # shared context
    return collate_scoring(prompts, actions, allowed, policy.pad_id)


def _scores_and_grads(policy: HFPolicy, batch, whole_model: bool):
    policy.model.zero_grad(set_to_none=True)
    score = policy._score_logits if whole_model else policy.score
    logp, ent = score(batch, 0.8, True)
    m = batch.action_mask
    w = torch.linspace(0.5, 1.5, m.numel()).view(m.shape)  # a loss that weighs every token
    ((logp * w)[m].sum() + 0.1 * (ent * w)[m].sum()).backward()
    grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
    return logp.detach() * m, ent.detach() * m, grads


def _assert_same(policy: HFPolicy, batch):
    new_lp, new_ent, new_g = _scores_and_grads(policy, batch, whole_model=False)
    old_lp, old_ent, old_g = _scores_and_grads(policy, batch, whole_model=True)
    torch.testing.assert_close(new_lp, old_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(new_ent, old_ent, atol=1e-5, rtol=0)
    assert new_g.keys() == old_g.keys() and new_g
    for name, g in new_g.items():
        torch.testing.assert_close(g, old_g[name], atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("restricted", [False, True])
def test_response_only_scoring_equals_whole_model_scoring(compact_env, arch, restricted):
    policy = _policy(compact_env, arch, score_chunk=5)  # several chunks: 23 response tokens
    batch = _batch(policy, compact_env, restricted)
    assert int(batch.action_mask.sum()) == 23 and batch.actions.shape[1] == 6
    _assert_same(policy, batch)


def test_with_gradient_checkpointing(compact_env):
    policy = _policy(compact_env, "llama", score_chunk=4)
    policy.model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    policy.model.train()
    _assert_same(policy, _batch(policy, compact_env))


def test_with_lora_adapters(compact_env):
    base = _policy(compact_env, "llama")
    torch.manual_seed(0)
    policy = base.with_model(apply_lora(base.model, LoraSpec(r=4)))
    with torch.no_grad():  # adapters start at B = 0: move them so they count
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    assert decoder_and_head(policy.model) is not None
    _assert_same(policy, _batch(policy, compact_env))


def test_the_head_runs_on_response_tokens_only(compact_env):
    policy = _policy(compact_env, "llama", score_chunk=8)
    batch = _batch(policy, compact_env)
    rows = []
    head = policy.model.get_output_embeddings()
    head.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[-2]))
    with torch.no_grad():
        policy.score(batch)
    # 23 response tokens (1+6+5+4+3+2+2) in chunks of 8, not 6 contexts x 6 columns.
    assert rows == [8, 8, 7]


def test_models_with_a_logit_transform_take_the_whole_model_path(compact_env):
    policy = _policy(compact_env, "llama")
    assert decoder_and_head(policy.model) is not None
    policy.model.config.final_logit_softcapping = 30.0
    assert decoder_and_head(policy.model) is None
    logp, _ = policy.score(_batch(policy, compact_env))  # still scores, the old way
    assert logp.shape == (7, 6)
