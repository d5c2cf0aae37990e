"""GRPO and Dr.GRPO episode-level advantages.

GRPO (DeepSeekMath, arXiv 2402.03300, sec. 4.1.2, outcome supervision):
    A_i = (R_i - mean_{j in group}(R_j)) / (std_{j in group}(R_j) + eps)      norm="mean_std"
Dr.GRPO (arXiv 2503.20783): no std division,
    A_i = R_i - mean_{j in group}(R_j)                                         norm="mean"

R_i is the sum of episode i's step rewards; statistics are over the group's episodes, each
counted once (std unbiased, eps = 1e-6). Every step of an episode gets its episode's A;
a group of one episode gets 0.

Shapes: batch of N rows -> (N,) float64.
"""

from __future__ import annotations

import numpy as np

from cairn.advantages._registry import NORM, register
from cairn.advantages.episodes import Episodes
from cairn.advantages.segments import Norm, normalize_in_segments
from cairn.data import StepBatch

__all__ = ["grpo"]


@register("grpo", checks={"norm": NORM})
def grpo(batch: StepBatch, *, norm: Norm = "mean_std") -> np.ndarray:
    """Episode return normalised within its group, broadcast to the episode's steps, (N,)."""
    ep = Episodes.of(batch)
    R = ep.returns(batch.reward)  # (E,)
    return normalize_in_segments(R, ep.group, ep.n_groups, norm)[ep.row]
