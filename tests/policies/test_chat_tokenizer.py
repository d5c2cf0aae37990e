"""The local chat tokenizer: deterministic, fast, ChatML template, a real model directory."""

from __future__ import annotations

import time

import torch

from cairn.envs import make
from cairn.policies import HFPolicy, build_policy, local_tokenizer, save_model_dir
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.train.rollout_sections import ModelConfig

MESSAGES = [
    {"role": "system", "content": "push the box onto the goal"},
    {"role": "user", "content": "pu:wall pd:free r+1 c+0"},
    {"role": "assistant", "content": "<think>box r+1 c+0</think><action>down</action>"},
    {"role": "tool", "content": "[1] Lusa works for Polpol"},
]


def _env():
    return make("sokoban", size=6, num_boxes=1, max_steps=15, render="compact", max_solution=5)


def test_chat_tokenizer_is_deterministic_and_fast():
    env = _env()
    t0 = time.perf_counter()
    a = local_tokenizer(env, env.instruction, kind="chat", vocab_size=400)
    assert time.perf_counter() - t0 < 5.0  # seconds, not minutes (it is ~0.1 s)
    b = local_tokenizer(env, env.instruction, kind="chat", vocab_size=400)
    assert a.get_vocab() == b.get_vocab() and len(a) == len(b) > 100
    text = a.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert a(text)["input_ids"] == b(text)["input_ids"]


def test_chat_template_renders_chatml_and_keeps_reasoning():
    env = _env()
    tok = local_tokenizer(env, env.instruction, kind="chat")
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\npush the box onto the goal<|im_end|>\n"
        "<|im_start|>user\npu:wall pd:free r+1 c+0<|im_end|>\n"
        "<|im_start|>assistant\n<think>box r+1 c+0</think><action>down</action><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n[1] Lusa works for Polpol\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.eos_token == "<|im_end|>"
    # Markup is one token each and survives decoding; the ChatML controls are special.
    for tag in ("<think>", "</think>", "<action>", "</action>", "<tool_call>"):
        assert len(tok(tag, add_special_tokens=False)["input_ids"]) == 1
    ids = tok(text, add_special_tokens=False)["input_ids"]
    decoded = tok.decode(ids, skip_special_tokens=True)
    assert "<think>box r+1 c+0</think>" in decoded and "<|im_end|>" not in decoded
    # Env words are whole tokens (whitespace-only pre-tokenisation).
    assert tok.convert_ids_to_tokens(tok("pu:wall pd:free")["input_ids"]) == ["pu:wall", "Ġpd:free"]


def test_tiny_chat_model_is_a_real_model_directory(tmp_path):
    env = _env()
    tok = local_tokenizer(env, env.instruction, kind="chat")
    config = tiny_config(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    policy = HFPolicy(build_tiny_model(config, seed=0), tok)
    folder = save_model_dir(policy, tmp_path / "tiny-chat")
    loaded = build_policy(ModelConfig(path=str(folder)), env, env.instruction, seed=0)
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    again = loaded.tokenizer.apply_chat_template(
        MESSAGES, tokenize=False, add_generation_prompt=True
    )
    assert again == text and loaded.eos_id == policy.eos_id == tok.eos_token_id
    ids = policy.encode(text)
    assert loaded.encode(text) == ids
    x = torch.tensor([ids])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x).logits, policy.model(x).logits)


def test_tiny_default_builds_the_chat_tokenizer_from_config():
    env = _env()
    cfg = ModelConfig(tokenizer="chat", vocab_size=300)
    policy = build_policy(cfg, env, env.instruction, seed=0)
    assert policy.tokenizer.chat_template and len(policy.tokenizer) <= 300 + 16
    assert policy.model.config.eos_token_id == policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
