"""Pieces a trainer is built from: its run directory name, the env factory, the sampling
settings, and the policy with its generation engine and prompt builder.

Two checks guard a pretrained model (``model.path``): ``check_token_budget`` encodes the
env's gold action, written in ``agent.action_format``, with the model's own tokenizer and
fails when ``rollout.max_new_tokens`` cannot hold it (a cap sized for the tiny tokenizer
cuts correct answers into format errors); ``tiny_key_problems`` names the tiny-model-only
keys a config gives it, which the preflight reports (``cairn.train.preflight``, re-exported
here): an error or a ``TinyKeyWarning``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cairn.agent import PromptBuilder, example_completion
from cairn.envs import make
from cairn.policies import build_policy, context_budget
from cairn.policies.engines import make_engine
from cairn.rollout import STRATEGIES, EnvFactory, RolloutSettings
from cairn.rollout.envpool.calls import GuardedEnv
from cairn.train.preflight import TinyKeyWarning, tiny_key_problems, warn_tiny_keys

if TYPE_CHECKING:
    from cairn.envs import TextEnv
    from cairn.policies.engines import Engine
    from cairn.policies.hf import HFPolicy
    from cairn.train.distributed import Dist
    from cairn.train.rollout_sections import RolloutConfig
    from cairn.train.schema import Config

__all__ = [
    "TinyKeyWarning",
    "budget_check",
    "build_policy_engine",
    "check_token_budget",
    "config_env_factory",
    "describe_format",
    "new_run_dir",
    "prompt_words",
    "sampling_settings",
    "tiny_key_problems",
    "turns_extend",
    "warn_tiny_keys",
]

BUDGET_SEEDS = 4  # tasks whose gold action the token cap must hold


def new_run_dir(cfg: Config) -> Path:
    """``out_dir/<name>-s<seed>-<time stamp>``, with a ``-k`` suffix when it exists."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(cfg.out_dir) / f"{cfg.name}-s{cfg.seed}-{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


def config_env_factory(cfg: Config, held_out: bool = False) -> EnvFactory:
    """The factory of the env ``cfg`` names, carrying ``cfg.imports``: an env worker in a
    fresh interpreter loads those plugins before it builds the env (``cairn._env_host``).
    ``held_out``: at the options of held-out evaluation (``eval.env_options`` over them)."""
    options = cfg.eval_env_options() if held_out else cfg.env.options
    return replace(EnvFactory.of(cfg.env.name, **options), imports=tuple(cfg.imports))


def sampling_settings(cfg: Config, policy: HFPolicy | None = None) -> RolloutSettings:
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
        no_progress_penalty=cfg.agent.no_progress_penalty,
        instruction=cfg.agent.instruction, describe_format=describe_format(cfg),
        response_prefix=cfg.agent.response_prefix, show_admissible=cfg.agent.show_admissible,
    )  # fmt: skip


def describe_format(cfg: Config) -> bool:
    """``agent.describe_format``; unset, on for a pretrained model and off for the tiny
    default (whose prompts are word lists it learns, not instructions it reads)."""
    explicit = cfg.agent.describe_format
    return cfg.model.path is not None if explicit is None else bool(explicit)


def prompt_builder(cfg: Config, tokenizer: Any, env: TextEnv | None = None) -> PromptBuilder:
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
        response_prefix=cfg.agent.response_prefix,
    )  # fmt: skip


def build_policy_engine(
    cfg: Config, probe: TextEnv, run_dir: Path, dist: Dist, ckpt: Path | None
) -> tuple[HFPolicy, Engine, PromptBuilder]:
    """(policy, engine, prompt builder). ``probe``: an env whose instruction and vocabulary
    the tiny default model is built for; the weights are rank 0's on every rank. A probe
    env that fails raises an ``EnvFault`` naming the env and the call (no rollout to drop
    it from)."""
    probe = cast("TextEnv", GuardedEnv(probe, cfg.env.name))  # a proxy: faults named
    probe.reset(seed=0)
    instruction = cfg.agent.instruction or probe.instruction
    words = prompt_words(cfg)
    # Where a turn's prompt extends the last turn's prompt and reply (the chat prompt shows
    # every earlier turn), a pretrained model's generation continues each episode's KV cache.
    policy = build_policy(
        cfg.model, probe, instruction, cfg.seed, ckpt, words, extend_turns=turns_extend(cfg)
    )
    if cfg.model.path is not None:
        budget_check(cfg, policy.tokenizer)
    dist.broadcast_params(policy.model)
    engine_dir = run_dir / "engine" / f"rank{dist.rank}"
    engine = make_engine(
        cfg.rollout.engine, policy, cfg.rollout.engine_options, engine_dir, cfg.rollout.temperature
    )
    policy = engine.policy  # vllm: samples on vLLM, scores on the HF model
    return policy, engine, prompt_builder(cfg, policy.tokenizer, probe)


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


def prompt_words(cfg: Config) -> tuple[str, ...]:
    """Words the rollout strategy writes into prompts beyond the env's and the template's
    (its class's ``prompt_words(options)``, where it has one: SGE's reflection outcomes); the
    tiny default's word-level tokenizer must know them, or the model reads ``<unk>``."""
    name, options = cfg.rollout.strategy, cfg.rollout.options
    words = getattr(STRATEGIES.get(name), "prompt_words", None)
    return tuple(words(options)) if words is not None else ()


def budget_check(cfg: Config, tokenizer: Any) -> None:
    """``check_token_budget`` on an env of its own (the probe may live in a worker), its
    calls guarded like the probe's."""
    env = GuardedEnv(make(cfg.env.name, **cfg.env.options), cfg.env.name)
    try:
        a = cfg.agent
        check_token_budget(env, tokenizer, a.action_format, cfg.rollout, a.response_prefix)
    finally:
        env.close()


def check_token_budget(
    env: TextEnv | GuardedEnv, tokenizer: Any, fmt: str, rollout: RolloutConfig, prefix: str = ""
) -> None:
    """Fail in one line when ``rollout.max_new_tokens`` cannot hold the gold action of
    one of the first ``BUDGET_SEEDS`` tasks written in ``fmt`` after the response ``prefix``
    the prompt already holds (envs without a gold action are not checked)."""
    longest, worst = 0, ""
    for seed in range(BUDGET_SEEDS):
        env.reset(seed=seed)
        gold = env.gold_action()
        if gold is None:
            continue
        text = example_completion(fmt, gold, getattr(env, "tools", ())).removeprefix(prefix)
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        if n > longest:
            longest, worst = n, text
    if longest > rollout.max_new_tokens:
        raise ValueError(
            f"rollout.max_new_tokens {rollout.max_new_tokens} cannot hold a correct answer: "
            f"{worst!r} is {longest} tokens with this model's tokenizer; set it to at least "
            f"{longest}"
        )
