"""The old import path of SGE, kept so that code written against it still runs: SGE is the
rollout strategy ``sge`` (``cairn.exploration.sge.SGEStrategy``), and in code "strategy"
now means a rollout strategy only. Importing this module warns (``DeprecationWarning``)."""

from __future__ import annotations

import warnings

from cairn.exploration.sge import OUTCOME_WORDS, GuidedEnv, SGEStrategy

__all__ = ["OUTCOME_WORDS", "GuidedEnv", "StrategyGuided"]

warnings.warn(
    "cairn.exploration.strategy is deprecated: import SGEStrategy from cairn.exploration.sge "
    "(or select it with rollout.strategy: sge)",
    DeprecationWarning,
    stacklevel=2,
)


class StrategyGuided(SGEStrategy):
    """``SGEStrategy`` under its old name and option names (``temperature``, ``max_tokens``:
    now ``plan_temperature``, ``plan_tokens``)."""

    def __init__(
        self,
        temperature: float = 1.5,
        max_tokens: int = 8,
        reflection: bool = True,
        reflections: int = 3,
    ):
        super().__init__(temperature, max_tokens, reflection, reflections)
