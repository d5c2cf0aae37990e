"""The run configuration's schema: validated sections with defaults and one help string per
key, plain typed data.

The defaults are the demo: GiGPO on the demo preset's sokoban with the tiny model, the
job `cairn train` runs with no argument (`configs/sokoban_gigpo.yaml` spells it out).
The validators here check types, ranges and rules between keys, nothing that needs a
registry, an env or a model: those checks are ``cairn.train.preflight.check_config``, which
``cairn.train.config.load_config`` runs after this schema. Importing this module imports
no torch, transformers, env, rollout or exploration hook (tests/train/test_config_import.py).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_type_hints

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from cairn._regex import regex_groups as _regex_groups
from cairn.exploration.config import ExplorationConfig
from cairn.losses.config import LossConfig

__all__ = [
    "DEMO_ENV",
    "MAX_EPISODES",
    "MAX_GROUPS",
    "MAX_GROUP_SIZE",
    "MAX_NEW_TOKENS",
    "MAX_ROUNDS",
    "MAX_RUN_NAME",
    "MAX_TURNS",
    "MAX_WORKERS",
    "TINY_MODEL_KEYS",
    "AdvantageConfig",
    "AgentConfig",
    "CheckpointConfig",
    "Config",
    "CriticConfig",
    "CurriculumConfig",
    "EnvConfig",
    "EvalConfig",
    "LogConfig",
    "LoraSection",
    "LossSection",
    "ModelConfig",
    "OptimConfig",
    "RewardSpec",
    "RolloutConfig",
    "TrainConfig",
    "WarmupConfig",
    "check_model_path",
    "config_problem",
    "config_problems",
    "describe",
    "did_you_mean",
    "format_validation_error",
    "run_name_problem",
    "stop_problem",
]

# -- limits, checked before any work ------------------------------------------------------------
# Counts that size memory. A round of B x G episodes is held whole (prompt and action ids,
# log-probs, text): about 200 KB per episode of 15 turns of 512-token prompts, so 65,536
# episodes take ~13 GB, what a 24 GB machine holds beside a model and its optimizer.
MAX_EPISODES = 65_536  # rollout.groups x rollout.group_size, eval.episodes, warmup.demos
MAX_GROUPS = 4096
MAX_GROUP_SIZE = 1024
MAX_ROUNDS = 16  # DAPO sampling rounds (each up to B x G more episodes)
MAX_TURNS = 10_000
MAX_NEW_TOKENS = 32_768
MAX_WORKERS = 1024
MAX_RUN_NAME = 128


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a run folder under ``out_dir`` (None when it can): one folder
    name (no path separator, not '.' or '..', no '..'), printable (no newline or control
    character), no '[' or ']' (rich markup would print another name), at most 128 chars."""
    if not name or not name.strip():
        return "a run name must not be empty"
    if len(name) > MAX_RUN_NAME:
        return f"a run name has at most {MAX_RUN_NAME} characters, this one {len(name)}"
    if "/" in name or "\\" in name or ".." in name:
        return "a run name is one folder name: no '/' or '\\' and no '..'"
    if not name.isprintable():
        return "a run name must be printable (no newline, tab or control character)"
    if "[" in name or "]" in name:
        return "a run name must not hold '[' or ']' (console markup)"
    return None


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


#: The demo's env and its options (what ``cairn train`` with no config runs). Another env
#: named without options gets its own constructor's defaults, never these.
DEMO_ENV: tuple[str, dict[str, Any]] = (
    "sokoban",
    {"size": 6, "num_boxes": 1, "max_steps": 15, "render": "compact", "max_solution": 5},
)


class EnvConfig(_Section):
    name: str = Field(DEMO_ENV[0], description="Registered env name (cairn.envs.available()).")
    options: dict[str, Any] = Field(
        default_factory=lambda: dict(DEMO_ENV[1]),
        description="Keyword options of the env constructor; not given: the demo's for "
        f"{DEMO_ENV[0]}, the env's own defaults for any other env.",
    )

    @model_validator(mode="before")
    @classmethod
    def _options_of_the_named_env(cls, data: Any) -> Any:
        """No ``options`` given: the demo's for the demo env, else {} (the env's defaults)."""
        if isinstance(data, dict) and "options" not in data:
            name = data.get("name", DEMO_ENV[0])
            data = {**data, "options": dict(DEMO_ENV[1]) if name == DEMO_ENV[0] else {}}
        return data


class LoraSection(_Section):
    r: int = Field(8, gt=0, description="LoRA rank.")
    alpha: float = Field(16.0, gt=0, description="LoRA scale numerator (update * alpha / r).")
    target_modules: str | list[str] = Field(
        "all-linear", description="Modules to adapt: 'all-linear' or names like [q_proj, v_proj]."
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input.")


class ModelConfig(_Section):
    path: str | None = Field(
        None,
        description="Local Hugging Face model directory, hub name or embedded model "
        "(smollm2-135m-instruct, converted once into ~/.cache/cairn/models); null builds "
        "the tiny default.",
    )
    arch: Literal["llama", "qwen2"] = Field("llama", description="Tiny default architecture.")
    hidden_size: int = Field(64, gt=0, description="Tiny default: hidden width.")
    layers: int = Field(2, gt=0, description="Tiny default: decoder layers.")
    heads: int = Field(4, gt=0, description="Tiny default: attention heads.")
    intermediate_size: int = Field(128, gt=0, description="Tiny default: MLP width.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Parameter dtype."
    )
    autocast: Literal["auto", "bf16", "off"] = Field(
        "auto", description="bfloat16 autocast of the forward passes (weights, adapters and "
        "optimizer state stay float32); auto: on for a model.path model with float32 weights "
        "on a CPU with AMX or AVX512-BF16 where a product timed at start runs >= 1.2x faster, "
        "off for the tiny default and elsewhere."
    )  # fmt: skip
    device: str = Field("cpu", description="torch device for the policy.")
    attn_implementation: str | None = Field(
        None, description="eager / sdpa / flash_attention_2; null: eager for the tiny default."
    )
    lora: LoraSection | None = Field(
        None, description="Train LoRA adapters (peft) instead of all weights; null: full."
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (less memory)."
    )
    tokenizer: Literal["auto", "word", "bpe", "chat"] = Field(
        "auto", description="Tiny default's local tokenizer: word-level, byte-level BPE, or "
        "BPE with ChatML chat template (chat); auto: word-level where the env has a vocabulary."
    )  # fmt: skip
    vocab_size: int = Field(512, ge=64, description="Tiny default: BPE / chat vocabulary size.")
    max_context: int | None = Field(
        None, gt=0, description="Context length in tokens (prompt + new tokens); null: the "
        "model config's max_position_embeddings. Old turns are dropped to fit."
    )  # fmt: skip

    @field_validator("autocast", mode="before")
    @classmethod
    def _autocast_off(cls, v: Any) -> Any:
        return "off" if v is False else v  # YAML reads a bare ``off`` as false


#: Keys of ``model`` that only the tiny default reads (its architecture, local tokenizer and
#: vocabulary): ignored with ``model.path`` (``cairn config`` leaves them out there).
TINY_MODEL_KEYS = (
    "tokenizer", "vocab_size", "arch", "hidden_size", "layers", "heads", "intermediate_size"
)  # fmt: skip


class AgentConfig(_Section):
    instruction: str | None = Field(
        None, description="Task instruction at the top of the prompt; null uses the env's."
    )
    history: int = Field(0, ge=0, description="Earlier turns (observation, action) shown.")
    invalid_penalty: float = Field(
        0.1, ge=0, description="Subtracted from the reward of an invalid action."
    )
    action_pattern: str | None = Field(
        None, description="Regex with one group extracting the action from the completion."
    )
    prompt_style: Literal["flat", "chat"] = Field(
        "flat", description="flat: one text prompt; chat: multi-turn chat template, "
        "token-in/token-out (needs a chat template: model.tokenizer chat or the model's own)."
    )  # fmt: skip
    action_format: Literal["line", "tagged", "tool_call"] = Field(
        "line", description="line: <action> tag or first line; tagged: <action> tag only; "
        "tool_call: <tool_call> JSON. No parsable action: invalid, rollout/format_errors."
    )  # fmt: skip
    format_reward: float = Field(
        0.0,
        ge=0,
        description="Reward added to each step whose action parsed and the env "
        "accepted (format bonus; a well-formed action the env rejects earns none).",
    )
    no_progress_penalty: float = Field(
        0.0, ge=0, description="Subtracted from a valid action the env says made no progress "
        "(info no_progress: a move into a wall, an answer without a search); such an action "
        "never earns format_reward."
    )  # fmt: skip
    describe_format: bool | None = Field(
        None, description="Append the answer format of action_format, with an example, to "
        "the instruction; null: on for a pretrained model (model.path), off for the tiny one."
    )  # fmt: skip

    response_prefix: str = Field(
        "", max_length=200, description="Text that opens every reply, written into the prompt "
        "after the generation prompt: the model continues it and the parser reads it with the "
        "reply (e.g. '<tool_call>' for tool_call: a small model then writes the call)."
    )  # fmt: skip
    show_admissible: bool = Field(
        False, description="List the env's admissible actions (info admissible), one a line, "
        "after the current observation, as verl-agent's ALFWorld prompts do; a model writing "
        "free text then picks one. Envs that list none show no list."
    )  # fmt: skip

    @field_validator("action_pattern")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None and _regex_groups(v) != 1:
            raise ValueError(f"action_pattern {v!r} must have exactly one group")
        return v


class RolloutConfig(_Section):
    strategy: str = Field("group", description="Rollout strategy (cairn.rollout).")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword options of the rollout strategy."
    )
    groups: int = Field(
        32, gt=0, le=MAX_GROUPS, description=f"B: task instances per iteration (at most "
        f"{MAX_GROUPS}; B x G at most {MAX_EPISODES}, see cairn.train.schema.MAX_EPISODES)."
    )  # fmt: skip
    group_size: int = Field(
        8, gt=0, le=MAX_GROUP_SIZE,
        description=f"G: episodes per task instance (at most {MAX_GROUP_SIZE}).",
    )  # fmt: skip
    max_turns: int | None = Field(
        None, gt=0, le=MAX_TURNS,
        description=f"Turn cap; null leaves it to the env (at most {MAX_TURNS}).",
    )  # fmt: skip
    temperature: float = Field(1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(
        16, gt=0, le=MAX_NEW_TOKENS, description=f"Token cap per action (at most {MAX_NEW_TOKENS})."
    )
    stop: list[str] = Field(default_factory=list, description="Stop strings.")
    restrict_to_admissible: bool = Field(
        True, description="Decode only the env's admissible actions (where it lists them)."
    )
    dynamic_sampling: bool = Field(
        False, description="DAPO: drop groups whose returns are all equal and sample more."
    )
    max_sampling_rounds: int = Field(
        3, gt=0, le=MAX_ROUNDS,
        description=f"DAPO: cap on sampling rounds to fill the batch (at most {MAX_ROUNDS}).",
    )  # fmt: skip
    workers: int = Field(
        0, ge=0, le=MAX_WORKERS, description="Env worker processes (Ray actors); 0 steps envs "
        f"in this process (at most {MAX_WORKERS})."
    )  # fmt: skip
    worker_backend: Literal["auto", "ray", "process"] = Field(
        "auto", description="Env workers: Ray actors, or local processes (auto: Ray if installed)."
    )
    env_timeout_s: float | None = Field(
        None, gt=0, description="Seconds an env reset/step may take; past it the episode is "
        "dropped and the env rebuilt (null: no limit)."
    )  # fmt: skip
    max_env_error_rate: float = Field(
        0.1, ge=0, le=1, description="Stop when env faults end more than this share of the "
        "episodes of the last 10 iterations."
    )  # fmt: skip
    engine: str = Field(
        "hf", description="Generation engine: transformers (any device) or vLLM (GPU)."
    )
    engine_options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword options of the engine (cairn.policies.engines)."
    )

    @model_validator(mode="after")
    def _episodes_fit(self) -> RolloutConfig:
        if self.groups * self.group_size > MAX_EPISODES:
            raise ValueError(
                f"rollout.groups x rollout.group_size = {self.groups} x {self.group_size} = "
                f"{self.groups * self.group_size} episodes per round; at most {MAX_EPISODES}"
            )
        return self


class AdvantageConfig(_Section):
    name: str = Field("gigpo", description="Advantage estimator (cairn.advantages.available()).")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword options of the estimator (else its defaults)."
    )
    whiten: bool = Field(
        False, description="Subtract the batch mean and divide by the std after estimating."
    )


class RewardSpec(_Section):
    name: str = Field(description="Reward added to the env's (cairn.rewards.available_rewards()).")
    options: dict[str, Any] = Field(default_factory=dict, description="Its keyword options.")


def _section_of(dc: type, name: str) -> type[_Section]:
    """A config section with one key per dataclass field: the field's default, its help
    (``metadata["help"]``), its pydantic constraints and optional ``type`` (the rest of
    the metadata). The dataclass stays the one place the keys are written."""
    hints = get_type_hints(dc)
    keys: dict[str, Any] = {}
    for f in dataclasses.fields(dc):
        meta = dict(f.metadata)
        ann = meta.pop("type", hints[f.name])
        keys[f.name] = (ann, Field(f.default, description=meta.pop("help"), **meta))
    return create_model(name, __base__=_Section, **keys)


if TYPE_CHECKING:  # the type checker reads the section as the dataclass it is built from
    LossSection = LossConfig
else:
    LossSection = _section_of(LossConfig, "LossSection")


def stop_problem(agent: AgentConfig, stop: Sequence[str]) -> str | None:
    """Why ``stop`` (rollout stop strings) leaves no tagged action parsable, else None. A
    completion's text ends before its first stop string, and the tagged format needs its
    closing tag in the text (a tool call may stay unclosed: ``parse_tool_call``)."""
    if agent.action_format != "tagged" or agent.action_pattern is not None:
        return None
    for s in stop:
        if s and s in "</action>":
            return (
                f"rollout.stop {s!r} cuts every completion before its closing </action> "
                "(a completion's text ends before its first stop string), so no tagged "
                "action would parse: drop it, or stop after the tag (the model's end of "
                "turn ends a reply already)"
            )
    return None


class OptimConfig(_Section):
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate.")
    epochs: int = Field(4, gt=0, description="PPO epochs over each iteration's batch.")
    minibatch_size: int = Field(512, gt=0, description="Steps per gradient update.")
    group_prompts: bool = Field(
        False,
        description=(
            "Cut minibatches so that rows with the same prompt stay together (the prompts "
            "in random order, each prompt's rows in random order): shared-prefix scoring "
            "(on for a model.path model) then reads each prompt once per minibatch. "
            "False: rows shuffled one by one."
        ),
    )
    max_grad_norm: float | None = Field(1.0, gt=0, description="Gradient clipping norm.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "linear", description="Learning rate over the training budget (see lr_final)."
    )
    lr_final: float = Field(
        0.1, ge=0, le=1, description="lr at the end of the budget, as a fraction of optim.lr."
    )


class CriticConfig(_Section):
    enabled: bool = Field(False, description="Train a value network (PPO with GAE).")
    path: str | None = Field(
        None, description="Local model directory for the critic backbone; null: tiny default."
    )
    lr: float = Field(1e-3, gt=0, description="Critic AdamW learning rate.")
    epochs: int | None = Field(None, gt=0, description="Critic epochs; null: optim.epochs.")
    value_clip: float | None = Field(
        0.5, gt=0, description="PPO value clipping around the old value; null: plain MSE."
    )
    gamma: float = Field(
        1.0, ge=0, le=1, description="Discount of the return target when the estimator gives none."
    )

    @field_validator("path")
    @classmethod
    def _model_dir(cls, v: str | None) -> str | None:
        return check_model_path(v)


class WarmupConfig(_Section):
    enabled: bool = Field(
        False, description="Supervised format warm-up on solver demonstrations before RL."
    )
    demos: int = Field(
        128, gt=0, le=MAX_EPISODES,
        description=f"Task instances solved by the env's solver (at most {MAX_EPISODES}).",
    )  # fmt: skip
    epochs: int = Field(4, gt=0, description="Passes over the demonstration steps.")
    lr: float = Field(3e-3, gt=0, description="AdamW learning rate of the warm-up.")
    minibatch_size: int = Field(64, gt=0, description="Demonstration steps per update.")
    time_budget_s: float | None = Field(
        120.0, gt=0, description="Stop the warm-up after this many seconds."
    )
    think: Literal["offsets", "none"] = Field(
        "offsets", description="Reasoning written in <think>: the observation's offset words "
        "(sokoban compact: box and goal offsets), or none (no <think> block)."
    )  # fmt: skip


class TrainConfig(_Section):
    iterations: int = Field(1000, gt=0, description="Maximum training iterations.")
    time_budget_s: float | None = Field(
        300.0, gt=0, description="Stop after this many seconds of training (eval excluded)."
    )
    max_episodes: int | None = Field(None, gt=0, description="Stop after this many episodes.")
    threads: int | None = Field(
        1, gt=0, description="torch CPU threads. 1: the same numbers on every run, and no "
        "slow-down when another job takes a core; null = all cores (faster on a quiet "
        "machine, not bit-reproducible). benchmarks/results/speed/threads.md."
    )  # fmt: skip
    pack_episodes: bool = Field(
        False, description="Train an episode whose turn prompts extend each other as one "
        "sequence (per-turn advantages on its action tokens); others per turn (docs/scale.md)."
    )  # fmt: skip


class EvalConfig(_Section):
    every: int = Field(5, ge=0, description="Greedy evaluation every N iterations (0: only end).")
    episodes: int = Field(
        200, gt=0, le=MAX_EPISODES,
        description=f"Held-out task instances per evaluation (at most {MAX_EPISODES}).",
    )  # fmt: skip
    seed_offset: int = Field(
        1_000_000_000, ge=0, description="Held-out seeds are seed_offset + i (train seeds lower)."
    )
    at_start: bool = Field(True, description="Evaluate the untrained policy first.")
    target: float = Field(0.8, ge=0, le=1, description="Success target for episodes-to-target.")
    env_options: dict[str, Any] = Field(
        default_factory=dict, description="Env options of held-out evaluation over env.options, "
        "e.g. {split: test} for an env with its own test games (twx, textworld)."
    )  # fmt: skip


class LogConfig(_Section):
    trajectories_every: int = Field(1, ge=0, description="Dump trajectories every N iterations.")
    trajectory_groups: int = Field(
        4, ge=0, le=MAX_GROUPS, description=f"Groups dumped per iteration (at most {MAX_GROUPS})."
    )
    trajectory_digits: int | None = Field(
        7, ge=1, le=17, description="Significant digits of floats in dumps; null keeps all."
    )
    progress: bool | None = Field(None, description="Live progress; null = when a terminal.")
    loggers: list[str] = Field(
        default_factory=lambda: ["jsonl"],
        description="Metric loggers: jsonl (always on), tensorboard, wandb, mlflow.",
    )
    wandb_project: str = Field("cairn", description="Weights & Biases project name.")
    wandb_mode: Literal["offline", "online", "disabled"] = Field(
        "offline", description="Weights & Biases mode; the WANDB_MODE variable overrides it."
    )
    report_iterations: int = Field(
        24, gt=0, description="cairn inspect: at most this many iterations, evenly spaced."
    )
    report_groups: int = Field(4, gt=0, description="cairn inspect: at most this many groups each.")
    report_episodes: int = Field(
        32, gt=0, description="cairn inspect: at most this many episodes per group."
    )


class CheckpointConfig(_Section):
    every: int = Field(1, gt=0, description="Checkpoint every N iterations.")
    keep: int = Field(2, gt=0, description="Checkpoints kept on disk (the newest).")


class CurriculumConfig(_Section):
    name: str | None = Field(
        None, description="Automatic curriculum (cairn.train.curriculum: success_rate); "
        "null: off, training uses env.options throughout."
    )  # fmt: skip
    options: dict[str, Any] = Field(
        default_factory=dict, description="Its options: levels (env option overrides, "
        "easiest first), start, raise_at, lower_at, window. Evaluation keeps env.options."
    )  # fmt: skip


class Config(_Section):
    name: str = Field(
        "sokoban_gigpo", description="Run name prefix: one folder name (no '/', '\\' or "
        "'..'), printable, no '[' or ']', at most 128 characters."
    )  # fmt: skip
    seed: int = Field(0, ge=0, description="Master seed (model init, tasks, sampling).")
    out_dir: str = Field("runs", description="Parent directory of run directories.")
    imports: list[str] = Field(
        default_factory=list, description="Python modules imported before the config is "
        "checked (e.g. [my_pkg.tasks]): what they register (envs, rewards, estimators) can "
        "be named here. Installed packages may register through entry points too."
    )  # fmt: skip
    env: EnvConfig = Field(default_factory=EnvConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    advantage: AdvantageConfig = Field(
        default_factory=lambda: AdvantageConfig(options={"episode_norm": "mean_std"})
    )  # the demo's: eq. 3 with the std (as recorded); a given section starts from {}
    rewards: list[RewardSpec] = Field(
        default_factory=list, description="Shaped / intrinsic rewards added after the rollout."
    )
    loss: LossSection = Field(default_factory=LossSection)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    exploration: ExplorationConfig = Field(default_factory=ExplorationConfig)
    warmup: WarmupConfig = Field(default_factory=WarmupConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)

    def eval_env_options(self) -> dict[str, Any]:
        """The env options of held-out evaluation: ``eval.env_options`` over ``env.options``."""
        return {**self.env.options, **self.eval.env_options}

    @field_validator("imports")
    @classmethod
    def _module_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not all(part.isidentifier() for part in name.split(".")):
                raise ValueError(f"{name!r} is not a module name (dotted identifiers)")
        return v

    @field_validator("name")
    @classmethod
    def _run_name(cls, v: str) -> str:
        if (problem := run_name_problem(v)) is not None:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _chat_needs_template(self) -> Config:
        tiny = self.model.path is None
        if self.agent.prompt_style == "chat" and tiny and self.model.tokenizer != "chat":
            raise ValueError(
                "agent.prompt_style 'chat' with the tiny default needs model.tokenizer "
                f"'chat' (a tokenizer with a chat template), got {self.model.tokenizer!r}"
            )
        return self

    @model_validator(mode="after")
    def _stop_keeps_the_closing_tag(self) -> Config:
        if (problem := stop_problem(self.agent, self.rollout.stop)) is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _packing_needs_token_rows(self) -> Config:
        if not self.train.pack_episodes:
            return self
        if self.loss.agg != "token-mean" or self.critic.enabled or self.rollout.engine != "hf":
            raise ValueError(
                "train.pack_episodes needs loss.agg 'token-mean' (a packed episode is one "
                "sequence), critic.enabled false and rollout.engine 'hf' (they read rows as "
                f"steps); got {self.loss.agg!r}, {self.critic.enabled}, {self.rollout.engine!r}"
            )
        return self


# -- checks shared by several sections --------------------------------------------------------
def check_model_path(path: str | None) -> str | None:
    """A local Hugging Face model folder (config.json or adapter_config.json that parses), a
    hub name 'org/name', or None."""
    if path is None:
        return None
    local = Path(path).expanduser()
    if not local.exists():
        if path.count("/") == 1 and not path.startswith((".", "/", "~")):
            return path  # a hub name
        raise ValueError("no such folder (nor is it a hub name 'org/name')")
    found = [local / n for n in ("config.json", "adapter_config.json") if (local / n).is_file()]
    if not local.is_dir() or not found:
        raise ValueError("not a Hugging Face model folder (it needs a config.json)")
    try:
        if not isinstance(json.loads(found[0].read_text()), dict):
            raise ValueError("not a JSON object")
    except ValueError as err:
        raise ValueError(f"{found[0].name} there is broken ({err})") from None
    return path


# -- error messages -----------------------------------------------------------------------------
def config_problem(loc: str, value: Any, message: str) -> str:
    """One problem as a line: ``key = value: message`` (a section's value is not shown;
    an empty ``loc`` is the whole config, ``(top level)``)."""
    shown = "" if isinstance(value, dict | BaseModel) else f" = {_short(value)}"
    return f"{loc or '(top level)'}{shown}: {message}"


def config_problems(lines: Sequence[str]) -> str:
    """The message of a ConfigError holding ``lines`` (one line when there is one)."""
    if len(lines) == 1:
        return f"invalid config: {lines[0]}"
    return "invalid config:\n  " + "\n  ".join(lines)


def format_validation_error(err: ValidationError) -> str:
    """pydantic's errors as ``config_problems`` lines; an unknown key lists the known ones."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            section = _section_at(e["loc"][:-1])
            allowed = ", ".join(section.model_fields) if section else "?"
            shown = _short(e["input"])
            hint = did_you_mean(str(e["loc"][-1]), section.model_fields if section else [])
            lines.append(f"unknown key {loc!r} (value {shown}); allowed here: {allowed}{hint}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(config_problem(loc, e.get("input"), msg))
    return config_problems(lines)


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` naming the known word closest to a misspelled ``word``, or
    "" when none is close (difflib's ratio of at least 0.6)."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (a bad value may be long)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _section_at(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] = Config
    for p in loc:
        field = model.model_fields.get(str(p))
        ann = field.annotation if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        model = ann
    return model


def describe(model: type[BaseModel] = Config, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(key, default, help) for every leaf key, for `cairn train --help-config`."""
    rows = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows += describe(ann, f"{prefix}{name}.")
        else:
            default = field.get_default(call_default_factory=True)
            rows.append((f"{prefix}{name}", default, field.description or ""))
    return rows
