"""IGPO: information-gain-based turn rewards (Wang et al., arXiv 2510.14967).

    r_t  = info_gain_t          for every turn but the episode's last
         = reward_t             on the episode's last turn (the outcome reward)
    r~_t = (r_t - mean_group(r)) / (std_group(r) + eps)    over all rows of the group
    A_t  = sum_{k >= t} gamma^(k-t) r~_k                    within the episode

``info_gain_t = p_t - p_{t-1}`` (probability of the ground-truth answer after turn t minus
before it) comes from the rewards layer. eps = 1e-6, std unbiased; a group of one row gets
r~ = 0. The paper's code uses gamma = 1 and no std; this follows the paper.

Shapes: batch of N rows with ``info_gain`` -> (N,) float64. Terms: ``r_tilde`` (N,).
"""

from __future__ import annotations

import numpy as np

from cairn.advantages._registry import DISCOUNT, register_terms
from cairn.advantages.episodes import Episodes
from cairn.advantages.segments import normalize_in_segments
from cairn.data import StepBatch

__all__ = ["igpo"]


@register_terms("igpo", checks={"gamma": DISCOUNT}, term_names=("r_tilde",))
def igpo(batch: StepBatch, *, gamma: float = 1.0) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Discounted sum of group-normalised turn rewards, (N,) float64.

    Registered with its terms: ``estimate_terms`` returns ``(A, {"r_tilde"})``, both (N,);
    ``estimate("igpo", ...)`` returns ``A`` alone.
    """
    batch.require("info_gain", estimator="igpo")
    ep = Episodes.of(batch)
    turn_reward = np.where(ep.is_last, batch.reward, batch.info_gain)  # (N,)
    r_tilde = normalize_in_segments(turn_reward, ep.row_group, ep.n_groups, "mean_std")
    return ep.discounted_cumsum(r_tilde, gamma), {"r_tilde": r_tilde}
