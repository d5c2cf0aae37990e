"""Pieces a trainer is built from: its run directory name, the sampling settings, and the
policy with its generation engine and prompt builder."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from cairn.agent import PromptBuilder, example_completion
from cairn.policies import build_policy, context_budget
from cairn.policies.engines import make_engine
from cairn.rollout import RolloutSettings
from cairn.rollout.envpool import GuardedEnv

__all__ = ["build_policy_engine", "describe_format", "new_run_dir", "sampling_settings"]


def new_run_dir(cfg: Any) -> Path:
    """``out_dir/<name>-s<seed>-<time stamp>``, with a ``-k`` suffix when it exists."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(cfg.out_dir) / f"{cfg.name}-s{cfg.seed}-{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


def sampling_settings(cfg: Any, policy: Any = None) -> RolloutSettings:
    """The rollout's sampling settings; with ``policy``, its context budget too."""
    r = cfg.rollout
    budget = (
        None if policy is None else context_budget(policy, cfg.model.max_context, r.max_new_tokens)
    )
    return RolloutSettings(
        temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
        stop=tuple(r.stop), restrict_to_admissible=r.restrict_to_admissible,
        max_turns=r.max_turns, invalid_penalty=cfg.agent.invalid_penalty,
        action_pattern=cfg.agent.action_pattern, action_format=cfg.agent.action_format,
        format_reward=cfg.agent.format_reward, context_budget=budget,
        instruction=cfg.agent.instruction, describe_format=describe_format(cfg),
    )  # fmt: skip


def describe_format(cfg: Any) -> bool:
    """``agent.describe_format``; unset, on for a pretrained model and off for the tiny
    default (whose prompts are word lists it learns, not instructions it reads)."""
    explicit = cfg.agent.describe_format
    return cfg.model.path is not None if explicit is None else bool(explicit)


def prompt_builder(cfg: Any, tokenizer: Any, env: Any = None) -> PromptBuilder:
    """``agent.history`` and ``agent.prompt_style`` over ``tokenizer``'s chat template. From
    ``env``: with the ``tool_call`` format its ``tools`` (for a template that renders them);
    with ``agent.describe_format`` on, its ``demonstration()`` as finished exchanges."""
    chat = tokenizer if getattr(tokenizer, "chat_template", None) else None
    fmt, calls = cfg.agent.action_format, cfg.agent.action_format == "tool_call"
    tools = tuple(getattr(env, "tools", ())) if calls else ()
    demonstrate = getattr(env, "demonstration", None) if describe_format(cfg) else None
    demo = demonstrate() if demonstrate is not None else []
    example = tuple((obs, example_completion(fmt, a, getattr(env, "tools", ()))) for obs, a in demo)
    return PromptBuilder(
        history=cfg.agent.history, chat_template=chat, style=cfg.agent.prompt_style,
        tool_observations=calls, tools=tools, example=example,
    )  # fmt: skip


def build_policy_engine(
    cfg: Any, probe: Any, run_dir: Path, dist: Any, ckpt: Path | None
) -> tuple[Any, Any, PromptBuilder]:
    """(policy, engine, prompt builder). ``probe``: an env whose instruction and vocabulary
    the tiny default model is built for; the weights are rank 0's on every rank. A probe
    env that fails raises an ``EnvFault`` naming the env and the call (no rollout to drop
    it from)."""
    probe = GuardedEnv(probe, cfg.env.name)
    probe.reset(seed=0)
    instruction = cfg.agent.instruction or probe.instruction
    words = cfg.exploration.prompt_words()
    policy = build_policy(cfg.model, probe, instruction, cfg.seed, ckpt, words)
    dist.broadcast_params(policy.model)
    engine_dir = run_dir / "engine" / f"rank{dist.rank}"
    engine = make_engine(
        cfg.rollout.engine, policy, cfg.rollout.engine_options, engine_dir, cfg.rollout.temperature
    )
    policy = engine.policy  # vllm: samples on vLLM, scores on the HF model
    return policy, engine, prompt_builder(cfg, policy.tokenizer, probe)
