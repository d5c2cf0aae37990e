"""What the config hands down to each lower layer, read from it in one place.

``cairn.train.parts.build_parts`` reads these first, before it builds anything, and then
passes plain values down: the env factory and the env pools' settings (rollout), the
prompt words and whether a turn's prompt extends the last (policies), the prompt
builder's keys (agent) and the sampling settings (rollout; the context budget joins once
the policy exists). Nothing here imports torch, builds a model or opens an env.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cairn.agent import PromptBuilder, prompt_for_env
from cairn.rollout import STRATEGIES, EnvFactory, RolloutSettings

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from cairn.envs import TextEnv
    from cairn.train.schema import Config

__all__ = [
    "config_env_factory",
    "describe_format",
    "pool_settings",
    "prompt_builder",
    "prompt_settings",
    "prompt_words",
    "sampling_settings",
    "turns_extend",
]


def config_env_factory(cfg: Config, held_out: bool = False) -> EnvFactory:
    """The factory of the env ``cfg`` names, carrying ``cfg.imports``: an env worker in a
    fresh interpreter loads those plugins before it builds the env (``cairn._env_host``).
    ``held_out``: at the options of held-out evaluation (``eval.env_options`` over them)."""
    options = cfg.eval_env_options() if held_out else cfg.env.options
    return replace(EnvFactory.of(cfg.env.name, **options), imports=tuple(cfg.imports))


def pool_settings(cfg: Config) -> tuple[Any, ...]:
    """The env pools' settings after the factory (``cairn.rollout.make_env_pool``): workers
    (0: envs in this process), backend, timeout and the error rate a run tolerates
    (``cairn.rollout.envpool.faults``)."""
    r = cfg.rollout
    return (r.workers, r.worker_backend, r.env_timeout_s, r.max_env_error_rate)


def prompt_words(cfg: Config) -> tuple[str, ...]:
    """Words the rollout strategy writes into prompts beyond the env's and the template's
    (its class's ``prompt_words(options)``, where it has one: SGE's reflection outcomes); the
    tiny default's word-level tokenizer must know them, or the model reads ``<unk>``."""
    name, options = cfg.rollout.strategy, cfg.rollout.options
    words = getattr(STRATEGIES.get(name), "prompt_words", None)
    return tuple(words(options)) if words is not None else ()


def turns_extend(cfg: Config) -> bool:
    """Whether each turn's prompt is the last turn's prompt and sampled reply followed by
    new tokens: a chat prompt (sampled ids spliced back) showing every earlier turn."""
    max_turns = cfg.rollout.max_turns
    return (
        cfg.agent.prompt_style == "chat"
        and max_turns is not None
        and max_turns > 1
        and cfg.agent.history >= max_turns - 1
    )


def describe_format(cfg: Config) -> bool:
    """``agent.describe_format``; unset, on for a pretrained model and off for the tiny
    default (whose prompts are word lists it learns, not instructions it reads)."""
    explicit = cfg.agent.describe_format
    return cfg.model.path is not None if explicit is None else bool(explicit)


def prompt_settings(cfg: Config) -> dict[str, Any]:
    """The prompt builder's keys (``cairn.agent.prompt_for_env``): ``agent.history``,
    ``agent.prompt_style``, ``agent.action_format``, ``agent.response_prefix`` and whether
    the env's demonstration opens the prompt (``describe_format``)."""
    a = cfg.agent
    return {
        "history": a.history, "style": a.prompt_style, "action_format": a.action_format,
        "demonstrate": describe_format(cfg), "response_prefix": a.response_prefix,
    }  # fmt: skip


def prompt_builder(
    cfg: Config, tokenizer: PreTrainedTokenizerBase, env: TextEnv | None = None
) -> PromptBuilder:
    """The prompt builder of ``cfg`` over ``tokenizer`` for an episode of ``env``
    (``cairn.agent.prompt_for_env`` with ``prompt_settings``)."""
    return prompt_for_env(tokenizer, env, **prompt_settings(cfg))


def sampling_settings(cfg: Config, context_budget: int | None = None) -> RolloutSettings:
    """The rollout's sampling settings; ``context_budget``: the prompt tokens the policy
    allows (``cairn.policies.budget.context_budget``), None for no limit."""
    r = cfg.rollout
    return RolloutSettings(
        temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
        stop=tuple(r.stop), restrict_to_admissible=r.restrict_to_admissible,
        max_turns=r.max_turns, invalid_penalty=cfg.agent.invalid_penalty,
        action_pattern=cfg.agent.action_pattern, action_format=cfg.agent.action_format,
        format_reward=cfg.agent.format_reward, context_budget=context_budget,
        no_progress_penalty=cfg.agent.no_progress_penalty,
        instruction=cfg.agent.instruction, describe_format=describe_format(cfg),
        response_prefix=cfg.agent.response_prefix, show_admissible=cfg.agent.show_admissible,
    )  # fmt: skip
