"""The advantage stage of an iteration, shared by both trainers (``cairn train``'s
``Trainer`` and verl's ``CairnTrainer``): the configured estimator, then the configured
batch whitening.

    adv, terms = compute(batch, cfg)   # cfg: advantage.name, .options, .whiten

Whitening (``advantage.whiten``) is ``segments.whiten`` over every row of the batch:
``(A - mean) / (std + 1e-6)`` with the unbiased std, and zeros for a single row (no
spread to scale by). One definition, so the same steps get the same advantages under
either trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from cairn.advantages._registry import Terms, estimate_terms
from cairn.advantages.segments import whiten
from cairn.data import StepBatch

__all__ = ["AdvantageSpec", "compute"]


class AdvantageSpec(Protocol):
    """What ``compute`` reads of a config's ``advantage`` section."""

    @property
    def name(self) -> str: ...

    @property
    def options(self) -> Mapping[str, object]: ...  # read-only: a config's dict fits

    @property
    def whiten(self) -> bool: ...


def compute(batch: StepBatch, cfg: AdvantageSpec) -> tuple[np.ndarray, Terms]:
    """``(advantage (N,) float64, terms)``: ``estimate_terms(cfg.name, batch,
    **cfg.options)``, whitened over the batch when ``cfg.whiten`` (module docstring)."""
    adv, terms = estimate_terms(cfg.name, batch, **cfg.options)
    return (whiten(adv) if cfg.whiten else adv), terms
