"""bfloat16 autocast (``model.autocast``, ``GenerationOptions.autocast``): off, the
numbers are today's bit for bit; on, sampling and scoring run under the same autocast, so
the importance ratio of a rollout's tokens is 1 at the first epoch, and the weights, LoRA
adapters and their gradients stay float32."""

from __future__ import annotations

import pytest
import torch

import cairn.policies.options as options_mod
from cairn.data.tokens import collate_scoring
from cairn.policies import GenerationOptions, HFPolicy, autocast_on, build_policy
from cairn.policies.lora import LoraSpec, apply_lora
from cairn.train.rollout_sections import ModelConfig


def _prompts(policy: HFPolicy, env) -> list[list[int]]:
    rows = []
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        rows.append(policy.encode(" ".join(["box"] * seed) + f" obs: {obs} act:"))
    return rows


def _rollout_and_score(policy: HFPolicy, env):
    """Sample 6 rows of 8 tokens, then score them as the first epoch does: (behaviour
    log-probs, scored log-probs, their action mask, the sum the loss would take)."""
    prompts = _prompts(policy, env)
    gens = policy.generate(
        prompts, max_new_tokens=8, temperature=1.0, generator=torch.Generator().manual_seed(1)
    )
    batch = collate_scoring(prompts, [g.token_ids for g in gens], None, policy.pad_id)
    logp, entropy = policy.score(batch, 1.0)
    old = torch.zeros_like(logp)
    for i, g in enumerate(gens):
        old[i, logp.shape[1] - len(g.logprobs) :] = torch.tensor(g.logprobs)
    return gens, old, logp, batch.action_mask, logp[batch.action_mask].sum() + entropy.sum()


def test_autocast_off_is_the_float32_path_bit_for_bit(tiny_policy, compact_env):
    explicit = HFPolicy(
        tiny_policy.model, tiny_policy.tokenizer, options=GenerationOptions(autocast=False)
    )
    a, old_a, lp_a, _, _ = _rollout_and_score(tiny_policy, compact_env)
    b, old_b, lp_b, _, _ = _rollout_and_score(explicit, compact_env)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert torch.equal(old_a, old_b) and torch.equal(lp_a, lp_b)


def test_autocast_gives_ratio_one_at_the_first_epoch_and_float32_gradients(
    tiny_policy, compact_env
):
    base = tiny_policy.with_model(tiny_policy.model)
    bf16 = HFPolicy(
        tiny_policy.model, tiny_policy.tokenizer, options=GenerationOptions(autocast=True)
    )
    _, _, lp32, mask, _ = _rollout_and_score(base, compact_env)
    _, old, logp, mask16, loss = _rollout_and_score(bf16, compact_env)
    loss.backward()  # the backward runs through the autocast forward
    ratio = torch.exp(logp.detach() - old)[mask16]
    # Sampling and scoring share the regime: the ratio is 1 up to float rounding (measured
    # 5e-7 on this model); float32 against bf16 would differ by far more.
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-4, rtol=0)
    assert (logp.detach() - lp32)[mask & mask16].abs().max() > 1e-5  # autocast did run
    grads = [p.grad for p in tiny_policy.model.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)
    assert all(p.dtype == torch.float32 for p in tiny_policy.model.parameters())


def test_lora_adapters_stay_float32_under_autocast(tiny_policy, compact_env):
    torch.manual_seed(0)
    model = apply_lora(tiny_policy.model, LoraSpec(r=4))
    policy = HFPolicy(model, tiny_policy.tokenizer, options=GenerationOptions(autocast=True))
    _, old, logp, mask, loss = _rollout_and_score(policy, compact_env)
    loss.backward()
    adapters = [(n, p) for n, p in model.named_parameters() if "lora_" in n]
    assert adapters and all(p.dtype == torch.float32 for _, p in adapters)
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for _, p in adapters)
    torch.testing.assert_close(logp.detach()[mask], old[mask], atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("sets", "bf16_cpu", "want"),
    [
        ({}, True, False),  # the tiny default stays float32: its records are bit-identical
        ({"path": "."}, True, True),  # a real model on an AMX / AVX512-BF16 CPU
        ({"path": "."}, False, False),  # no native bf16: float32
        ({"path": ".", "dtype": "bfloat16"}, True, False),  # bf16 weights already
        ({"path": ".", "device": "cuda"}, True, False),  # not measured off the CPU
        ({"autocast": "bf16"}, False, True),  # asked for: always
        ({"path": ".", "autocast": "off"}, True, False),
    ],
)
def test_auto_turns_autocast_on_for_real_models_on_bf16_cpus(monkeypatch, sets, bf16_cpu, want):
    monkeypatch.setattr(options_mod, "cpu_has_bf16", lambda: bf16_cpu)
    cfg = ModelConfig.model_construct(**{**ModelConfig().model_dump(), **sets})
    assert autocast_on(cfg) is want


def test_the_tiny_default_is_built_without_autocast(compact_env):
    policy = build_policy(ModelConfig(), compact_env, compact_env.instruction, seed=0)
    assert policy.options.autocast is False and ModelConfig().autocast == "auto"
    forced = build_policy(
        ModelConfig(autocast="bf16"), compact_env, compact_env.instruction, seed=0
    )
    assert forced.options.autocast is True


def test_autocast_defaults_to_auto_and_off_is_read_as_off(tmp_path):
    from cairn.train.config import load_config

    default = load_config(None, check=False)
    assert default.model.autocast == "auto" == default.model_dump()["model"]["autocast"]
    off = load_config(None, ["model.autocast=off"], check=False)  # YAML's bare off is false
    assert off.model.autocast == "off" and off.model_dump()["model"]["autocast"] == "off"
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  autocast: off\n")
    assert load_config(str(path), check=False).model.autocast == "off"


@pytest.fixture
def fresh_detection():
    options_mod.cpu_has_bf16.cache_clear()
    yield
    options_mod.cpu_has_bf16.cache_clear()


def _no_timing() -> float:
    raise AssertionError("the product is timed only where the CPU reports bfloat16")


@pytest.mark.parametrize(
    ("flags", "speedup", "want"),
    [
        (False, _no_timing, False),  # no flag: float32, nothing timed
        (True, lambda: 0.3, False),  # the flag, but emulated: autocast 3x slower
        (True, lambda: 1.1, False),  # the flag, not enough faster
        (True, lambda: 2.4, True),  # AMX: 2.4x on one thread
    ],
)
def test_autocast_pays_only_where_the_flag_and_the_timing_agree(
    monkeypatch, fresh_detection, flags, speedup, want
):
    monkeypatch.setattr(options_mod, "bf16_flags", lambda: flags)
    monkeypatch.setattr(options_mod, "bf16_speedup", speedup)
    assert options_mod.cpu_has_bf16() is want


def test_the_timing_is_a_ratio_on_one_thread_and_restores_the_threads():
    before = torch.get_num_threads()
    ratio = options_mod.bf16_speedup(rows=8, width=16, hidden=32, repeats=2)
    assert 0 < ratio < float("inf")
    assert torch.get_num_threads() == before
