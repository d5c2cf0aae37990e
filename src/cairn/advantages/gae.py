"""Generalised Advantage Estimation (Schulman et al., arXiv 1506.02438).

    delta_t = r_t + gamma * V_{t+1} - V_t                    V_T = 0 after the last step
    A_t     = sum_{k >= 0} (gamma * lam)^k delta_{t+k}       within the episode (eq. 16)
    return_t = A_t + V_t                                     the value-loss target

V is the ``value`` column (the critic's estimate of the state before step t). Every episode
is treated as terminated (no bootstrap after its last step).

Shapes: batch of N rows with ``value`` -> (N,) float64. Terms: ``returns`` (N,).
"""

from __future__ import annotations

import numpy as np

from cairn.advantages._registry import DISCOUNT, register_terms
from cairn.advantages.episodes import Episodes
from cairn.data import StepBatch

__all__ = ["gae"]


@register_terms("gae", checks={"gamma": DISCOUNT, "lam": DISCOUNT}, term_names=("returns",))
def gae(
    batch: StepBatch, *, gamma: float = 1.0, lam: float = 0.95
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """GAE(gamma, lambda) advantages per step, (N,) float64.

    Registered with its terms: ``estimate_terms`` returns ``(A, {"returns": A + V})`` (the
    value-loss target), both (N,); ``estimate("gae", ...)`` returns ``A`` alone.
    """
    batch.require("value", estimator="gae")
    ep = Episodes.of(batch)
    V = batch.value  # (N,)
    delta = batch.reward + gamma * ep.next_in_episode(V, 0.0) - V
    A = ep.discounted_cumsum(delta, gamma * lam)
    return A, {"returns": A + V}
