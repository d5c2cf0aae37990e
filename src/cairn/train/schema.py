"""The run configuration's schema: ``Config``, the whole run's validated, plain typed data,
with the sections of learning and running (advantage, rewards, loss, critic, optim,
warm-up, train, eval, log, checkpoint, curriculum), defaults and one help string per key.
The rollout side's sections are ``cairn.train.rollout_sections``; the limits that bound
counts are ``cairn.train.limits``; ``describe`` lists every key for ``cairn config``.

The defaults are the demo: GiGPO on the demo preset's sokoban with the tiny model, the
job `cairn train` runs with no argument (`configs/sokoban_gigpo.yaml` spells it out).
The validators here check types, ranges and rules between keys, nothing that needs a
registry, an env or a model: those checks are ``cairn.train.preflight.check_config``, which
``cairn.train.config.load_config`` runs after this schema. Importing this module imports
no torch, transformers, env, rollout or exploration hook (tests/train/test_config_import.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal, get_type_hints

from pydantic import BaseModel, Field, create_model, field_validator, model_validator

from cairn.exploration.config import ExplorationConfig
from cairn.losses.config import LossConfig
from cairn.train.limits import MAX_EPISODES, MAX_GROUPS, run_name_problem
from cairn.train.rollout_sections import (
    AgentConfig,
    EnvConfig,
    ModelConfig,
    RolloutConfig,
    _Section,
    check_model_path,
    stop_problem,
)

__all__ = [
    "AdvantageConfig",
    "CheckpointConfig",
    "Config",
    "CriticConfig",
    "CurriculumConfig",
    "EvalConfig",
    "LogConfig",
    "LossSection",
    "OptimConfig",
    "RewardSpec",
    "TrainConfig",
    "WarmupConfig",
    "describe",
]


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
    group_tasks: bool = Field(
        False,
        description=(
            "Cut minibatches so that the rows of one task stay together (a rollout group: "
            "every turn of its episodes, demonstrations included), ordered as group_prompts "
            "orders prompts: a task's turns share its instruction and question, which "
            "shared-prefix scoring then reads once per minibatch. Not with group_prompts."
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

    @model_validator(mode="after")
    def _one_grouping(self) -> OptimConfig:
        if self.group_prompts and self.group_tasks:
            raise ValueError(
                "optim.group_prompts and optim.group_tasks are both true: set one (a task's "
                "rows hold its equal prompts already)"
            )
        return self


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
