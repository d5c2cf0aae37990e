"""The config sections of the rollout side: what a run samples episodes with, the env
(``env``), the policy model (``model``, its ``lora``), the prompt and the action parser
(``agent``) and the rollout itself (``rollout``), with the checks they share with other
sections (``check_model_path``, ``stop_problem``).

``cairn.train.schema.Config`` assembles these with the sections of learning and running.
Like the schema, importing this module imports no torch, transformers, env or rollout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cairn._regex import regex_groups as _regex_groups
from cairn.train.limits import (
    MAX_EPISODES,
    MAX_GROUP_SIZE,
    MAX_GROUPS,
    MAX_NEW_TOKENS,
    MAX_ROUNDS,
    MAX_TURNS,
    MAX_WORKERS,
)

__all__ = [
    "DEMO_ENV",
    "TINY_MODEL_KEYS",
    "AgentConfig",
    "EnvConfig",
    "LoraSection",
    "ModelConfig",
    "RolloutConfig",
    "check_model_path",
    "stop_problem",
]


# The base of every section here and in ``cairn.train.schema``: unknown keys are refused,
# an assignment is validated.
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
        f"{MAX_GROUPS}; B x G at most {MAX_EPISODES}, see cairn.train.limits.MAX_EPISODES)."
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
