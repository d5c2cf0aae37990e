"""The ``cairn:`` block of verl's config: what the agent loop and the trainer read.

Given as Hydra overrides (new keys take a ``+``), with cairn's own names:

    +cairn.agent.history=2  +cairn.agent.invalid_penalty=0.1  +cairn.agent.action_pattern=...
    +cairn.rollout.max_turns=15  +cairn.rollout.max_new_tokens=64  +cairn.rollout.stop=[...]
    +cairn.advantage.name=gigpo  +cairn.advantage.options.gamma=0.95

``agent`` and ``advantage`` are cairn's ``AgentConfig`` and ``AdvantageConfig`` (same
fields, defaults, checks and meaning as ``cairn train``: every ``agent`` key, the
instruction, ``prompt_style``, ``action_format``, ``format_reward`` and
``describe_format`` included, reaches the agent loop's turn). Sampling (temperature,
top-p) and lengths stay verl's (``actor_rollout_ref.rollout.*``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cairn._errors import ConfigError
from cairn.advantages import validate_options
from cairn.rollout import RolloutSettings
from cairn.train.rollout_sections import AgentConfig, stop_problem
from cairn.train.schema import AdvantageConfig, Config

if TYPE_CHECKING:
    from cairn.agent import PromptBuilder
    from cairn.envs import TextEnv

__all__ = ["BRANCHING", "CairnVerlConfig", "RolloutSection", "cairn_config", "check_estimator"]

#: Estimators whose inputs only cairn's branching rollouts produce, and why.
BRANCHING = {
    "treepo": "segment-tree rollouts (the path column)",
    "elpo": "error-localisation probes on a rollout tree (path and crit columns)",
}
#: Estimators that read the value column (from verl's critic, critic.enable=true).
NEEDS_VALUES = ("gae", "vineppo")
#: What ``settings`` tells cairn's setup the model is: verl trains pretrained models.
PRETRAINED = "verl: actor_rollout_ref.model.path"


class RolloutSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_turns: int | None = Field(None, gt=0, description="Turn cap; null leaves it to the env.")
    max_new_tokens: int | None = Field(
        None, gt=0, description="Token cap per action; null: rollout.response_length."
    )
    stop: list[str] = Field(default_factory=list, description="Stop strings.")
    env_in_thread: bool = Field(
        True,
        description="Step envs in a worker thread so that a slow env does not stall the other "
        "episodes of the event loop (costs ~1 ms a turn: "
        "benchmarks/results/scale/verl_overhead.md).",
    )


class CairnVerlConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: AgentConfig = Field(default_factory=AgentConfig)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)

    @model_validator(mode="after")
    def _stop_keeps_the_closing_tag(self) -> CairnVerlConfig:
        if (problem := stop_problem(self.agent, self.rollout.stop)) is not None:
            raise ValueError(problem)
        return self

    def settings(
        self,
        response_length: int,
        temperature: float,
        top_p: float,
        prompt_length: int | None = None,
    ) -> RolloutSettings:
        """cairn's rollout settings for the agent loop: ``cairn train``'s own mapping
        (``cairn.train.settings.sampling_settings``), so every ``agent`` key passes through
        with its meaning there; free text (no admissible-action restriction); a pretrained
        model, so ``agent.describe_format`` unset means on; the context budget is verl's
        ``rollout.prompt_length`` (old turns are dropped to fit it, not left-truncated)."""
        from cairn.train.settings import sampling_settings  # torch: only where verl runs

        cap = self.rollout.max_new_tokens or response_length
        view = self._view(
            SimpleNamespace(
                temperature=temperature, top_p=top_p,
                max_new_tokens=min(cap, response_length), stop=list(self.rollout.stop),
                restrict_to_admissible=False, max_turns=self.rollout.max_turns,
            )
        )  # fmt: skip
        return replace(sampling_settings(view), context_budget=prompt_length)

    def prompt(self, tokenizer: Any, env: TextEnv | None = None) -> PromptBuilder:
        """The ``PromptBuilder`` of an episode of ``env``: ``cairn train``'s own
        (``cairn.train.settings.prompt_builder``: style, history, and from the env its tools
        and, with ``agent.describe_format``, its demonstration)."""
        from cairn.train.settings import prompt_builder

        return prompt_builder(self._view(), tokenizer, env)

    def _view(self, rollout: object = None) -> Config:
        """This block as the parts of a cairn Config the turn step reads; the model is
        verl's, a pretrained one."""
        model = SimpleNamespace(path=PRETRAINED, max_context=None)
        view = SimpleNamespace(rollout=rollout, agent=self.agent, model=model)
        return cast("Config", view)  # duck-typed: the sections those functions read


def _plain(node: Any) -> Any:
    """An OmegaConf node (or anything) as plain dicts and lists."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(node):
            return OmegaConf.to_container(node, resolve=True)
    except ImportError:
        pass
    return node


def cairn_config(trainer_config: Any) -> CairnVerlConfig:
    """The validated ``cairn:`` block of a verl config (defaults where it is absent)."""
    block = _plain(trainer_config.get("cairn") if trainer_config is not None else None) or {}
    if not isinstance(block, Mapping):
        raise ConfigError(f"verl config key 'cairn' must be a mapping, got {block!r}")
    try:
        cfg = CairnVerlConfig(**block)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in ("cairn", *first["loc"]))
        allowed = ""
        if first["type"] == "extra_forbidden":
            allowed = f"; allowed: {', '.join(_fields_at(first['loc'][:-1]))}"
        raise ConfigError(
            f"{where}: {first['msg']} (got {first.get('input')!r}){allowed}"
        ) from None
    try:  # the estimator's options: the registry's check (cairn.train.preflight's too)
        validate_options(cfg.advantage.name, cfg.advantage.options)
    except ValueError as err:
        raise ConfigError(f"cairn.advantage: {err}") from None
    return cfg


def _fields_at(loc: tuple) -> list[str]:
    """The field names of the section at ``loc`` inside CairnVerlConfig."""
    model: Any = CairnVerlConfig
    for key in loc:
        model = model.model_fields[key].annotation
    return list(model.model_fields)


def check_estimator(cfg: CairnVerlConfig, has_values: bool) -> None:
    """Config-time check that the estimator can run on verl's per-turn samples."""
    name, options = cfg.advantage.name, cfg.advantage.options
    why = BRANCHING.get(name)
    if name == "arpo" and options.get("attribution", "soft") == "hard":
        why = "branching rollouts that share prefixes (the path column)"
    if why is not None:
        raise ConfigError(
            f"cairn.advantage.name={name!r} needs cairn's branching rollouts ({why}); verl's "
            "agent loop samples independent episodes. Train it with `cairn train`, or pick "
            "one of grpo, rloo, reinforce_pp, gigpo, proxmo, igpo, arpo (soft), gae, vineppo"
        )
    if name in NEEDS_VALUES and not has_values:
        raise ConfigError(
            f"cairn.advantage.name={name!r} reads per-step values: enable verl's critic "
            "(critic.enable=true) so that they arrive"
        )
