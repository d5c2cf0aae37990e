"""Free text under the vLLM engine (CPU stand-in): chat prompts go to vLLM as token ids and
the ids vLLM sampled are the ids trained on and shown in every later prompt."""

from __future__ import annotations

import importlib.util

import fake_vllm
import pytest
import torch

from cairn.agent import PromptBuilder
from cairn.envs import make
from cairn.policies import HFPolicy, local_tokenizer
from cairn.policies.engines import make_engine
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.rollout import RolloutSettings, rollout, tasks_for_groups

_GPU = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()
DEMO = {"size": 6, "num_boxes": 1, "max_steps": 15, "render": "compact", "max_solution": 5}


def _chat_policy() -> HFPolicy:
    env = make("sokoban", **DEMO)
    tok = local_tokenizer(env, env.instruction, kind="chat", vocab_size=400)
    config = tiny_config(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return HFPolicy(build_tiny_model(config, seed=0), tok)


def test_vllm_chat_rollout_is_token_in_token_out(monkeypatch, tmp_path):
    fake_vllm.install(monkeypatch)
    engine = make_engine("vllm", _chat_policy(), {}, tmp_path)
    stats = _check_token_in_token_out(engine, tmp_path)
    assert stats["rollout/logprob_abs_diff_max"] < 1e-4  # the same kernels: equal log-probs


@pytest.mark.gpu
@pytest.mark.skipif(not _GPU, reason="needs vLLM and an NVIDIA GPU (benchmarks/scale/gpu_check.sh)")
def test_real_vllm_chat_rollout_is_token_in_token_out(tmp_path):
    base = _chat_policy()
    policy = HFPolicy(base.model, base.tokenizer, device=torch.device("cuda"))
    engine = make_engine("vllm", policy, {"gpu_memory_utilization": 0.2}, tmp_path)
    stats = _check_token_in_token_out(engine, tmp_path)
    assert stats["rollout/logprob_abs_diff_mean"] < 1e-2  # other kernels: close log-probs


def _check_token_in_token_out(engine, tmp_path) -> dict[str, float]:
    assert (tmp_path / "vllm_model" / "chat_template.jinja").exists()  # vLLM's copy has it
    llm, seen = engine.policy.llm, []
    generate = llm.generate

    def recording(inputs, params, **kw):  # what vLLM received and what it sampled
        out = generate(inputs, params, **kw)
        for prompt, res in zip(inputs, out, strict=True):
            seen.append((list(prompt["prompt_token_ids"]), list(res.outputs[0].token_ids)))
        return out

    llm.generate = recording
    tasks = tasks_for_groups([0, 1], 2)
    envs = [make("sokoban", **DEMO) for _ in tasks]
    prompt = PromptBuilder(history=10, chat_template=engine.policy.tokenizer, style="chat")
    settings = RolloutSettings(
        max_new_tokens=8, restrict_to_admissible=False, max_turns=4, action_format="tagged"
    )
    episodes = rollout(
        engine.policy, envs, tasks, prompt, settings, torch.Generator().manual_seed(0)
    )
    steps = [s for e in episodes for s in e.steps]
    assert len(steps) == len(seen) == 16
    # vLLM got these very prompt ids and sampled these very action ids (group members share
    # a first prompt, so compare the (prompt, completion) pairs as multisets).
    recorded = sorted((tuple(s.prompt_ids), tuple(s.action_ids)) for s in steps)
    assert recorded == sorted((tuple(p), tuple(ids)) for p, ids in seen)
    for e in episodes:
        for prev, step in zip(e.steps, e.steps[1:], strict=False):
            head = prev.prompt_ids + prev.action_ids
            assert step.prompt_ids[: len(head)] == head  # sampled ids reused, not re-encoded
    return engine.after_rollout(episodes)  # the trainer scores exactly what was sampled
