"""GiGPO: Group-in-Group Policy Optimization (Feng et al., arXiv 2505.10978, NeurIPS 2025).

Two levels of relative advantage (equation numbers of the paper):
    eq. 3  A_E(i)   = (R_i - mean_group(R)) / (std_group(R) + eps)     episode level (GRPO)
    eq. 5  G_t      = sum_k gamma^k r_{t+k}                            inside the episode
    eq. 6  step group of a row: the rows of its group whose ``anchor`` is equal (any t, any
           episode); or, with ``similarity=r``, a greedy cluster of anchor texts
    eq. 7  A_S(t)   = G_t - mean_step_group(G)                         norm="mean"
                    = (G_t - mean)/(std + eps)                         norm="mean_std"
    eq. 8  A        = A_E + step_weight * A_S

eps = 1e-6, std unbiased. A group of one episode gets A_E = 0; a step group of one row gets
A_S = 0. ``episode_norm`` picks eq. 3's form ("mean_std" as in the paper, "mean" drops the
std); its default None takes the value of ``norm``, as the reference's single ``mode`` sets
both levels (``mean_norm``: no std at either level, ``mean_std_norm``: std at both). With
the default ``norm="mean"`` that is A_E = R - mean; set ``episode_norm="mean_std"`` for eq. 3
as printed. ``episode_stats="rows"`` reproduces the reference code (verl-agent,
``gigpo/core_gigpo.py``), which takes the episode-level mean/std of R over all step rows of
the group, so long episodes weigh more; "episodes" (default) counts each episode once.
(The reference gives a group holding a single row A_E = R; here a one-episode group gets 0.)

Similarity grouping (``similarity=r`` in (0, 1]): inside a group, the distinct anchor texts
(``str(anchor)``) are visited in order of (first turn t at which they occur, text) and each
joins the first existing cluster whose representative text ``rep`` has
``difflib.SequenceMatcher(None, text, rep).ratio() >= r``, else founds a new cluster. The
reference visits rows in batch order; this order is its order-independent counterpart
(earlier turns first). ``None`` means exact equality.

Shapes: batch of N rows -> (N,) float64. Terms (``estimate_terms``): ``A_E``, ``A_S``, ``G``,
each (N,).
"""

from __future__ import annotations

import difflib

import numpy as np

from cairn.advantages._registry import DISCOUNT, NORM, WEIGHT, choice, real, register_terms
from cairn.advantages.episodes import Episodes
from cairn.advantages.segments import (
    Norm,
    combine_ids,
    factorize,
    factorize_keys,
    normalize_in_segments,
    segment_count,
)
from cairn.data import StepBatch

__all__ = ["episode_advantage", "gigpo", "step_groups"]

CHECKS = {
    "gamma": DISCOUNT,
    "step_weight": WEIGHT,
    "norm": NORM,
    "episode_norm": choice(None, "mean", "mean_std"),
    "episode_stats": choice("episodes", "rows"),
    "similarity": real(0.0, 1.0, lo_open=True, none_ok=True),
}


def episode_advantage(
    batch: StepBatch, ep: Episodes, norm: Norm = "mean_std", stats: str = "episodes"
) -> np.ndarray:
    """A_E per row (N,): GRPO over episode returns; ``stats="rows"`` weighs R by episode length."""
    R = ep.returns(batch.reward)  # (E,)
    if stats == "episodes":
        return normalize_in_segments(R, ep.group, ep.n_groups, norm)[ep.row]
    if stats != "rows":
        raise ValueError(f"episode_stats must be 'episodes' or 'rows', got {stats!r}")
    per_row = normalize_in_segments(R[ep.row], ep.row_group, ep.n_groups, norm)
    episodes_in_group = segment_count(ep.group, ep.n_groups)[ep.row_group]
    return np.where(episodes_in_group > 1, per_row, 0.0)


def step_groups(
    batch: StepBatch, ep: Episodes, similarity: float | None = None
) -> tuple[np.ndarray, int]:
    """Anchor-state step groups: ``(ids (N,), n)``, rows of one group with an equal anchor
    (or, with ``similarity``, anchor texts in one greedy cluster)."""
    ids, n = combine_ids(ep.row_group, ep.n_groups, *factorize(batch.anchor))
    if similarity is None:
        return ids, n
    return _similar_clusters(batch, ep, ids, n, similarity)


def _similar_clusters(
    batch: StepBatch, ep: Episodes, ids: np.ndarray, n: int, ratio: float
) -> tuple[np.ndarray, int]:
    """Merge exact step groups whose anchor texts are similar (loops over distinct anchors)."""
    rep = np.empty(n, dtype=np.int64)
    rep[ids] = np.arange(len(ids))  # (n,) one row of each exact step group
    first_t = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first_t, ids, batch.t)
    texts = [str(a) for a in batch.anchor[rep]]
    group = ep.row_group[rep]
    visit = sorted(range(n), key=lambda k: (group[k], first_t[k], texts[k]))
    cluster = np.empty(n, dtype=np.int64)
    reps: list[difflib.SequenceMatcher[str]] = []
    current_group = -1
    for k in visit:
        if group[k] != current_group:
            current_group, reps = group[k], []
        cluster[k] = _join(texts[k], reps, ratio)
    return _relabel(group, cluster, ids)


def _join(text: str, reps: list[difflib.SequenceMatcher[str]], ratio: float) -> int:
    """Index of the first cluster whose representative is similar to ``text`` (or a new one)."""
    for index, matcher in enumerate(reps):
        matcher.set_seq1(text)
        if (
            matcher.real_quick_ratio() >= ratio
            and matcher.quick_ratio() >= ratio
            and matcher.ratio() >= ratio
        ):
            return index
    reps.append(difflib.SequenceMatcher(None, "", text))  # seq2 = the representative
    return len(reps) - 1


def _relabel(group: np.ndarray, cluster: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, int]:
    merged, m = factorize_keys(group, cluster)  # cluster index is local to its group
    return merged[ids], m


@register_terms("gigpo", checks=CHECKS, term_names=("A_E", "A_S", "G"))
def gigpo(
    batch: StepBatch,
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    norm: Norm = "mean",
    episode_norm: Norm | None = None,
    episode_stats: str = "episodes",
    similarity: float | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """GiGPO advantage ``A = A_E + step_weight * A_S`` per step, (N,) float64.

    Registered with its terms: ``estimate_terms`` returns ``(A, {"A_E", "A_S", "G"})``, all
    (N,); ``gigpo(batch, ...)`` and ``estimate("gigpo", ...)`` return ``A`` alone.
    """
    ep = Episodes.of(batch)
    A_E = episode_advantage(batch, ep, episode_norm or norm, episode_stats)  # (N,)
    G = ep.discounted_cumsum(batch.reward, gamma)  # (N,)
    ids, n = step_groups(batch, ep, similarity)
    A_S = normalize_in_segments(G, ids, n, norm)  # (N,)
    return A_E + step_weight * A_S, {"A_E": A_E, "A_S": A_S, "G": G}
