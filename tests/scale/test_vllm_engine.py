"""The vLLM engine: mismatch statistics, truncated importance weights, output conversion, and
the save / sample / re-score / sync cycle against a CPU stand-in (fake_vllm); real vLLM on GPU."""

from __future__ import annotations

import importlib.util
import math
from types import SimpleNamespace

import fake_vllm
import numpy as np
import pytest
import torch

from cairn._errors import ConfigError
from cairn.agent import PromptBuilder
from cairn.data.tokens import TokenBatch
from cairn.policies import HFPolicy
from cairn.policies.engines import HFEngine, make_engine, validate_engine_options
from cairn.policies.lora import LoraSpec, apply_lora
from cairn.policies.vllm_engine import (
    logprob_mismatch,
    tis_weights,
    to_generation,
)
from cairn.rollout import RolloutSettings, rollout, tasks_for_groups
from cairn.train.config import load_config

FREE = RolloutSettings(max_new_tokens=4, restrict_to_admissible=False, max_turns=3)


# -- pure functions ---------------------------------------------------------------------------
def test_mismatch_worked_example():
    # d = trainer - engine = [0, 0.5]: |d| mean 0.25, max 0.5; k3 = mean(e^d - 1 - d) =
    # (0 + e^0.5 - 1.5) / 2; |p_t - p_e| = (0 + e^-1.5 - e^-2) / 2.
    stats = logprob_mismatch([[-1.0, -2.0]], [[-1.0, -1.5]])
    assert stats["abs_diff_mean"] == pytest.approx(0.25)
    assert stats["abs_diff_max"] == pytest.approx(0.5)
    assert stats["kl_k3"] == pytest.approx((math.exp(0.5) - 1.5) / 2)
    assert stats["prob_abs_diff_mean"] == pytest.approx((math.exp(-1.5) - math.exp(-2.0)) / 2)


def _loop_mismatch(engine, trainer):
    d = [t - e for er, tr in zip(engine, trainer, strict=True) for e, t in zip(er, tr, strict=True)]
    pd = [
        abs(math.exp(t) - math.exp(e))
        for er, tr in zip(engine, trainer, strict=True)
        for e, t in zip(er, tr, strict=True)
    ]
    return {
        "abs_diff_mean": sum(abs(x) for x in d) / len(d),
        "abs_diff_max": max(abs(x) for x in d),
        "prob_abs_diff_mean": sum(pd) / len(pd),
        "kl_k3": sum(math.exp(x) - 1 - x for x in d) / len(d),
    }


def _ragged(rng, n=40):
    lens = rng.integers(1, 7, size=n)
    engine = [(-rng.exponential(size=k)).tolist() for k in lens]
    trainer = [(np.asarray(e) + rng.normal(0, 0.1, size=len(e))).tolist() for e in engine]
    return engine, trainer


def test_mismatch_equals_a_plain_loop_and_ignores_row_order():
    rng = np.random.default_rng(0)
    engine, trainer = _ragged(rng)
    stats = logprob_mismatch(engine, trainer)
    for k, v in _loop_mismatch(engine, trainer).items():
        assert stats[k] == pytest.approx(v, rel=1e-12)
    perm = rng.permutation(len(engine))
    shuffled = logprob_mismatch([engine[i] for i in perm], [trainer[i] for i in perm])
    for k in stats:
        assert shuffled[k] == pytest.approx(stats[k], rel=1e-12)


def test_mismatch_edge_cases():
    assert logprob_mismatch([], []) == {
        "abs_diff_mean": 0.0, "abs_diff_max": 0.0, "prob_abs_diff_mean": 0.0, "kl_k3": 0.0
    }  # fmt: skip
    assert logprob_mismatch([[-0.3]], [[-0.3]])["kl_k3"] == 0.0  # identical samplers
    with pytest.raises(ValueError, match="row 0"):
        logprob_mismatch([[-1.0]], [[-1.0, -2.0]])
    with pytest.raises(ValueError, match="rows"):
        logprob_mismatch([[-1.0]], [])


def test_tis_weights_truncate_at_the_cap():
    # exp(0) = 1, exp(0.5) = 1.6487..., exp(2) = 7.39 -> capped at 2; exp(-1) = 0.3679 kept.
    w = tis_weights([[0.0, 0.5], [1.0, -1.0]], [[0.0, 0.0], [-1.0, 0.0]], cap=2.0)
    assert w[0] == pytest.approx([1.0, math.exp(0.5)])
    assert w[1] == pytest.approx([2.0, math.exp(-1.0)])
    with pytest.raises(ValueError, match="cap"):
        tis_weights([[0.0]], [[0.0]], cap=0.5)


def _completion(ids, lps, finish, stop_reason=None, logprobs=True):
    entries = (
        [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(ids, lps, strict=True)]
        if logprobs
        else None
    )
    return SimpleNamespace(
        token_ids=ids, logprobs=entries, finish_reason=finish, stop_reason=stop_reason
    )


@pytest.mark.parametrize(
    ("finish", "stop_reason", "expected"),
    [("length", None, "length"), ("stop", None, "eos"), ("stop", "]", "stop")],
)
def test_to_generation_maps_vllm_finish_reasons(tiny_policy, finish, stop_reason, expected):
    ids = tiny_policy.encode("push up")
    gen = to_generation(_completion(ids, [-0.5] * len(ids), finish, stop_reason), tiny_policy, ())
    assert gen.finish == expected and gen.token_ids == ids and gen.text == "push up"
    assert gen.logprobs == [-0.5] * len(ids)


def test_to_generation_without_logprobs_is_a_clear_error(tiny_policy):
    with pytest.raises(ValueError, match="logprobs=0"):
        to_generation(_completion([5], [0.0], "length", logprobs=False), tiny_policy, ())


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"nope": 1}, "no option 'nope'"),
        ({"sync": "weights"}, "sync"),
        ({"tis_cap": 0.5}, "tis_cap"),
        ({"tis_cap": 2.0, "behaviour_logprobs": "engine"}, "behaviour_logprobs"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ],
)
def test_bad_engine_options_are_clear_errors(options, match):
    with pytest.raises(ValueError, match=match):
        validate_engine_options("vllm", options)


def test_engine_config_validates_without_vllm_installed():
    cfg = load_config(None, ["rollout.engine=vllm", "rollout.engine_options={tis_cap: 2.0}"])
    assert cfg.rollout.engine_options == {"tis_cap": 2.0}
    with pytest.raises(ConfigError, match="no option 'bogus'"):
        load_config(None, ["rollout.engine=vllm", "rollout.engine_options={bogus: 1}"])
    with pytest.raises(ConfigError, match="takes no options"):
        load_config(None, ["rollout.engine_options={tis_cap: 2.0}"])


# -- the engine cycle against the stand-in ------------------------------------------------------
def _episodes(policy, env, seed=0):
    tasks = tasks_for_groups([seed, seed + 1], 3)
    envs = [type(env)(render="compact", max_solution=5) for _ in tasks]
    gen = torch.Generator().manual_seed(seed)
    return rollout(policy, envs, tasks, PromptBuilder(), FREE, gen)


def _perturb(model):
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))


@pytest.mark.parametrize("lora", [False, True])
def test_engine_agrees_with_trainer_until_an_update_and_again_after_sync(
    monkeypatch, tmp_path, tiny_policy, compact_env, lora
):
    fake_vllm.install(monkeypatch)
    if lora:
        tiny_policy = tiny_policy.with_model(apply_lora(tiny_policy.model, LoraSpec(r=4)))
    sync = "merged" if lora else "auto"  # LoRA merged into full weights, as without vLLM LoRA
    engine = make_engine("vllm", tiny_policy, {"sync": sync}, tmp_path)
    stats = engine.after_rollout(_episodes(engine.policy, compact_env))
    assert stats["rollout/logprob_abs_diff_max"] < 1e-4 and stats["rollout/engine_tokens"] > 0
    torch.manual_seed(0)
    _perturb(engine.policy.model)  # the trainer updates; vLLM still has the old weights
    stale = engine.after_rollout(_episodes(engine.policy, compact_env, seed=5))
    assert stale["rollout/logprob_abs_diff_mean"] > 1e-3
    engine.sync()
    assert engine.policy.llm.calls[-2:] == ["load_weights", "reset_prefix_cache"]
    fresh = engine.after_rollout(_episodes(engine.policy, compact_env, seed=9))
    assert fresh["rollout/logprob_abs_diff_max"] < 1e-4


def test_lora_adapter_sync_sends_a_new_adapter_version(monkeypatch, tmp_path, tiny_policy,
                                                       compact_env):  # fmt: skip
    fake_vllm.install(monkeypatch)
    tiny_policy = tiny_policy.with_model(apply_lora(tiny_policy.model, LoraSpec(r=4)))
    engine = make_engine("vllm", tiny_policy, {}, tmp_path)  # auto -> adapter with LoRA
    assert engine.sync_mode == "adapter" and engine.policy.lora_request.version == 1
    torch.manual_seed(0)
    _perturb(engine.policy.model)
    engine.sync()
    assert engine.policy.lora_request.version == 2
    stats = engine.after_rollout(_episodes(engine.policy, compact_env))
    assert stats["rollout/logprob_abs_diff_max"] < 1e-4  # vLLM samples with the new adapters


def test_behaviour_logprobs_become_the_trainers_and_tis_scales_advantages(
    monkeypatch, tmp_path, tiny_policy, compact_env
):
    fake_vllm.install(monkeypatch)
    engine = make_engine("vllm", tiny_policy, {"tis_cap": 2.0}, tmp_path)
    torch.manual_seed(1)
    _perturb(engine.policy.model)  # make the two samplers differ
    episodes = _episodes(engine.policy, compact_env)
    sampled = [list(s.logprobs) for e in episodes for s in e.steps]
    engine.after_rollout(episodes)
    steps = [s for e in episodes for s in e.steps]
    trainer = [s.logprobs for s in steps]
    assert any(a != b for a, b in zip(sampled, trainer, strict=True))
    tokens = TokenBatch.from_episodes(episodes, np.ones(len(steps)), pad_id=engine.policy.pad_id)
    idx = np.arange(len(steps))
    mb = engine.reweight(tokens.minibatch(idx), idx)
    for row, (t, e) in enumerate(zip(trainer, sampled, strict=True)):
        w = np.minimum(np.exp(np.asarray(t) - np.asarray(e)), 2.0)  # advantage 1 -> weight
        np.testing.assert_allclose(mb.advantages[row, -len(t) :].numpy(), w, rtol=1e-5)


def test_restricted_rows_are_sampled_by_the_hf_backend(monkeypatch, tmp_path, tiny_policy,
                                                       compact_env):  # fmt: skip
    fake_vllm.install(monkeypatch)
    engine = make_engine("vllm", tiny_policy, {}, tmp_path)
    prompts = [engine.policy.encode(f"obs: {compact_env.reset(seed=s)[0]} act:") for s in range(4)]
    choices = [["up", "down"], None, ["left"], None]
    gens = engine.policy.generate(prompts, choices=choices, max_new_tokens=3,
                                  generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert gens[0].text in ("up", "down") and gens[2].text == "left"
    assert gens[0].allowed is not None and gens[1].allowed is None and gens[3].allowed is None
    assert engine.policy.llm.calls.count("generate") == 1  # one batched call for rows 1 and 3
    assert engine.policy.generated_tokens == len(gens[1].token_ids) + len(gens[3].token_ids)


def test_hf_engine_hooks_change_nothing(tiny_policy, compact_env):
    engine = make_engine("hf", tiny_policy)
    assert isinstance(engine, HFEngine) and engine.policy is tiny_policy
    episodes = _episodes(tiny_policy, compact_env)
    before = [list(s.logprobs) for e in episodes for s in e.steps]
    assert engine.after_rollout(episodes) == {}
    assert [list(s.logprobs) for e in episodes for s in e.steps] == before


def test_a_training_iteration_on_the_vllm_engine(monkeypatch, tmp_path):
    from cairn.train.trainer import Trainer

    fake_vllm.install(monkeypatch)
    cfg = load_config(None, [
        "rollout.groups=2", "rollout.group_size=2", "rollout.engine=vllm",
        "rollout.restrict_to_admissible=false", "rollout.max_new_tokens=3",
        "rollout.engine_options={tis_cap: 2.0}", "rollout.max_turns=4", "eval.episodes=2",
        "eval.at_start=false", "train.iterations=1", "train.time_budget_s=null",
        "train.threads=1", "log.progress=false", f"out_dir={tmp_path}",
    ])  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    row = trainer.train_iteration()
    assert row["rollout/logprob_abs_diff_max"] < 1e-4  # vLLM (stand-in) had the same weights
    assert trainer.policy.llm.calls[-2:] == ["load_weights", "reset_prefix_cache"]  # synced
    trainer._finish(trainer._summary(0.0))


_GPU = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _GPU, reason="needs vLLM and an NVIDIA GPU (benchmarks/scale/gpu_check.sh)")
def test_real_vllm_agrees_with_the_trainer_and_syncs(tmp_path, tiny_policy, compact_env):
    tiny_policy = HFPolicy(tiny_policy.model, tiny_policy.tokenizer, device=torch.device("cuda"))
    engine = make_engine("vllm", tiny_policy, {"gpu_memory_utilization": 0.2}, tmp_path)
    stats = engine.after_rollout(_episodes(engine.policy, compact_env))
    assert stats["rollout/logprob_abs_diff_mean"] < 1e-2
    _perturb(engine.policy.model)
    engine.sync()
    fresh = engine.after_rollout(_episodes(engine.policy, compact_env, seed=3))
    assert fresh["rollout/logprob_abs_diff_mean"] < 1e-2
