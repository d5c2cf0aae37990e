"""LoRA through peft: only adapters train, the adapters-off reference is the base model,
merged weights reproduce the adapted model, and sampled log-probs equal scoring."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("peft")

from cairn._errors import ConfigError
from cairn.data.tokens import TokenBatch, collate_scoring
from cairn.policies import HFPolicy
from cairn.policies.lora import (
    AdapterDisabled,
    LoraSpec,
    apply_lora,
    has_adapters,
    load_adapters,
    merged_state_dict,
    plain_model,
    reference_logprobs,
    reference_model,
    trainable_parameters,
)
from cairn.train.config import load_config


def _prompts(policy: HFPolicy, env, n: int) -> list[list[int]]:
    return [policy.encode(f"obs: {env.reset(seed=s)[0]} act:") for s in range(n)]


def _lora_policy(tiny_policy: HFPolicy, r: int = 4) -> HFPolicy:
    model = apply_lora(tiny_policy.model, LoraSpec(r=r, alpha=2.0 * r))
    return HFPolicy(model, tiny_policy.tokenizer)


def _train_steps(policy: HFPolicy, env, steps: int = 3) -> None:
    """A few AdamW steps of a REINFORCE-like loss on sampled actions."""
    opt = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=1e-2)
    prompts = _prompts(policy, env, 6)
    outs = policy.generate(prompts, max_new_tokens=4, generator=torch.Generator().manual_seed(0))
    inputs = collate_scoring(prompts, [o.token_ids for o in outs], pad_id=policy.pad_id)
    adv = torch.linspace(-1, 1, len(prompts))[:, None]
    for _ in range(steps):
        policy.model.train()
        logp, _ = policy.score(inputs)
        loss = -(logp * adv * inputs.action_mask).sum() / inputs.action_mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_lora_training_changes_only_adapter_weights(tiny_policy, compact_env):
    policy = _lora_policy(tiny_policy)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    trainable = set(trainable_parameters(policy.model))
    assert trainable and all("lora_" in n for n in trainable)
    _train_steps(policy, compact_env)
    after = dict(policy.model.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert changed == trainable  # every adapter moved (A needs B != 0: 2+ steps), nothing else


def test_adapters_off_reference_is_the_untouched_base(tiny_policy, compact_env):
    base = copy.deepcopy(tiny_policy.model).eval()
    policy = _lora_policy(tiny_policy)
    _train_steps(policy, compact_env)
    ref = reference_model(policy.model)
    assert isinstance(ref, AdapterDisabled) and ref.state_dict() == {}  # no copy of weights
    ids = torch.tensor([_prompts(policy, compact_env, 1)[0]])
    policy.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(ref(input_ids=ids).logits, base(input_ids=ids).logits)
        adapted = policy.model(input_ids=ids).logits
    assert not torch.allclose(adapted, base(input_ids=ids).logits, atol=1e-4)
    assert policy.model.training is False  # the reference restores the mode it found


def test_adapters_off_reference_logprobs_take_the_fast_scoring_path(
    tiny_policy, compact_env, monkeypatch
):
    """The KL reference's log-probs of a LoRA run equal the untouched base model's, and are
    scored through the decoder + head path (shared prefixes, head on actions only), never
    the whole-model fallback that the wrapper alone would get."""
    base = HFPolicy(copy.deepcopy(tiny_policy.model).eval(), tiny_policy.tokenizer)
    policy = _lora_policy(tiny_policy)
    _train_steps(policy, compact_env)  # adapters non-zero: switching them off matters
    prompts = _prompts(policy, compact_env, 4)
    prompts = [prompts[0], prompts[0], prompts[1], prompts[2]]  # a shared prompt, too
    actions = [[5, 6, 7], [5, 8], [9], [10, 11, 12, 13]]
    tokens = TokenBatch(
        prompt_ids=prompts, action_ids=actions, old_logprobs=[[0.0] * len(a) for a in actions],
        advantages=np.zeros(4), allowed=[None] * 4, pad_id=policy.pad_id,
    )  # fmt: skip
    policy.model.train()

    def no_fallback(*args, **kwargs):
        raise AssertionError("the reference took the whole-model scoring path")

    monkeypatch.setattr(HFPolicy, "_score_logits", no_fallback)
    ref = reference_logprobs(policy, reference_model(policy.model), tokens, 0.8)
    expected = reference_logprobs(base, base.model, tokens, 0.8)  # a plain model: no adapters
    assert [len(r) for r in ref] == [3, 2, 1, 4]
    for got, want in zip(ref, expected, strict=True):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-5, rtol=0)
    adapted = reference_logprobs(policy, policy.model, tokens, 0.8)  # adapters on: differs
    flat = [torch.tensor([x for row in rows for x in row]) for rows in (adapted, expected)]
    assert (flat[0] - flat[1]).abs().max() > 1e-4
    assert policy.model.training  # the mode it found


def test_full_finetune_reference_is_a_frozen_copy(tiny_policy):
    ref = reference_model(tiny_policy.model)
    assert ref is not tiny_policy.model and not ref.training
    assert not any(p.requires_grad for p in ref.parameters())


def test_merged_weights_fold_in_alpha_over_r_times_BA(tiny_policy):
    """Worked example: r=2, alpha=4 -> scale 2. A picks input dims 0 and 1, B writes 3 to
    output 0 from rank 0 and -1 to output 1 from rank 1, so W - W0 is 6 at (0, 0), -2 at
    (1, 1) and 0 elsewhere."""
    w0 = tiny_policy.model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    model = apply_lora(tiny_policy.model, LoraSpec(r=2, alpha=4.0, target_modules=("q_proj",)))
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        layer.lora_A["default"].weight.zero_()
        layer.lora_A["default"].weight[0, 0] = 1.0
        layer.lora_A["default"].weight[1, 1] = 1.0
        layer.lora_B["default"].weight.zero_()
        layer.lora_B["default"].weight[0, 0] = 3.0
        layer.lora_B["default"].weight[1, 1] = -1.0
    delta = merged_state_dict(model)["model.layers.0.self_attn.q_proj.weight"] - w0
    expected = torch.zeros_like(w0)
    expected[0, 0], expected[1, 1] = 6.0, -2.0
    torch.testing.assert_close(delta, expected)


def test_merged_state_dict_reproduces_the_adapted_model(tiny_policy, compact_env):
    policy = _lora_policy(tiny_policy)
    _train_steps(policy, compact_env)
    merged = merged_state_dict(policy.model)
    plain = plain_model(policy.model, merge=False)  # the base alone, plain names
    assert set(merged) == set(plain.state_dict())
    plain.load_state_dict(merged)
    ids = torch.tensor([_prompts(policy, compact_env, 1)[0]])
    policy.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            plain(input_ids=ids).logits, policy.model(input_ids=ids).logits, atol=1e-5, rtol=0
        )


def test_lora_sampled_logprobs_match_teacher_forced_scoring(tiny_policy, compact_env):
    policy = _lora_policy(tiny_policy)
    _train_steps(policy, compact_env)  # adapters non-zero, so they take part
    prompts = _prompts(policy, compact_env, 6)
    outs = policy.generate(prompts, max_new_tokens=5, temperature=0.8,
                           generator=torch.Generator().manual_seed(3))  # fmt: skip
    inputs = collate_scoring(prompts, [o.token_ids for o in outs], pad_id=policy.pad_id)
    with torch.no_grad():
        logp, _ = policy.score(inputs, temperature=0.8)
    for i, o in enumerate(outs):
        k = len(o.token_ids)
        torch.testing.assert_close(logp[i, -k:], torch.tensor(o.logprobs), atol=1e-5, rtol=0)


def test_bf16_sampled_logprobs_match_scoring_within_bf16_precision(tiny_policy, compact_env):
    # bf16 keeps 8 mantissa bits: the KV-cached decode and the one-pass score round
    # differently, so they agree to ~1e-2 nats, not to float32's 1e-5.
    policy = HFPolicy(tiny_policy.model.to(torch.bfloat16), tiny_policy.tokenizer)
    prompts = _prompts(policy, compact_env, 6)
    outs = policy.generate(prompts, max_new_tokens=4, generator=torch.Generator().manual_seed(4))
    inputs = collate_scoring(prompts, [o.token_ids for o in outs], pad_id=policy.pad_id)
    with torch.no_grad():
        logp, _ = policy.score(inputs)
    for i, o in enumerate(outs):
        k = len(o.token_ids)
        torch.testing.assert_close(logp[i, -k:], torch.tensor(o.logprobs), atol=5e-2, rtol=0)


def test_bf16_base_keeps_float32_adapters_that_train(tiny_policy, compact_env):
    # model.dtype bfloat16 with LoRA: the frozen base is bfloat16, the adapters (and so
    # AdamW's moments) float32, so small updates are not rounded away.
    base = tiny_policy.model.to(torch.bfloat16)
    policy = _lora_policy(HFPolicy(base, tiny_policy.tokenizer))
    params = dict(policy.model.named_parameters())
    trainable = set(trainable_parameters(policy.model))
    assert {params[n].dtype for n in trainable} == {torch.float32}
    assert {p.dtype for n, p in params.items() if n not in trainable} == {torch.bfloat16}
    before = {n: params[n].detach().clone() for n in trainable}
    _train_steps(policy, compact_env)
    assert all(not torch.equal(before[n], params[n].detach()) for n in trainable)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"r": 0}, "positive integer"),
        ({"alpha": 0.0}, "alpha"),
        ({"dropout": 1.0}, "dropout"),
        ({"target_modules": "q_proj"}, "all-linear"),
        ({"target_modules": ()}, "non-empty"),
    ],
)
def test_bad_lora_specs_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LoraSpec(**kwargs)


def test_adapters_are_added_and_loaded_without_transformers_deprecation_warning(
    tiny_policy, tmp_path
):
    """peft reads the model's deprecated ``is_gradient_checkpointing`` when it wraps it; the
    FutureWarning is not shown at every run's start."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = apply_lora(copy.deepcopy(tiny_policy.model), LoraSpec(r=2, alpha=4.0))
        model.save_pretrained(tmp_path)
        load_adapters(copy.deepcopy(tiny_policy.model), tmp_path)
    assert has_adapters(model)
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]


def test_targets_matching_nothing_are_a_clear_error(tiny_policy):
    with pytest.raises(ValueError, match="match no module"):
        apply_lora(tiny_policy.model, LoraSpec(target_modules=("no_such_proj",)))


def test_config_lora_block_validates():
    cfg = load_config(None, ["model.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj]}"])
    assert cfg.model.lora.r == 4 and cfg.model.lora.target_modules == ["q_proj", "v_proj"]
    with pytest.raises(ConfigError, match=r"model\.lora\.r"):
        load_config(None, ["model.lora={r: 0}"])
