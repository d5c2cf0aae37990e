"""The plans over token rows that the shared-prefix component follows, pure functions of
token ids and lengths (no model): the prefix all rows share (``common_prefix``), the first
row of each group (``representatives``), the prefix stages run so far (``Staged``) and
their rows by batch (``by_past``), the buckets of similar length that feed the fewest
tokens (``partition``), a score batch's scored tails (``scored_tails``) and left-padded
rows without their padding (``unpadded``). ``cairn.policies.sharing`` runs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from cairn.data.tokens import ScoreInputs

__all__ = [
    "Staged",
    "by_past",
    "common_prefix",
    "partition",
    "representatives",
    "scored_tails",
    "shared_runs",
    "unpadded",
]

Past = tuple[Any, torch.Tensor]  # a KV cache and the attention mask of its columns


def representatives(group: Sequence[int]) -> list[int]:
    """The first row of each group 0..K-1 of ``group`` (row -> group)."""
    first: dict[int, int] = {}
    for row, g in enumerate(group):
        first.setdefault(g, row)
    return [first[g] for g in range(len(first))]


@dataclass
class Staged:
    """The prefix stages run so far (``SharedPath._staged``, ``cairn.policies.sharing``):
    ``pasts``, the (cache, mask) of each batch the last stage ran (``[None]`` before any);
    ``where``, per group of that stage, its batch in ``pasts`` and its row there; ``group``
    (row -> group) and ``cut`` (per group: its tokens fed, from position 0)."""

    pasts: list[Past | None]
    where: list[tuple[int, int]]
    group: list[int]
    cut: list[int]

    def tails(self, rows: Sequence[Sequence[int]]) -> list[Sequence[int]]:
        """Each row's tokens after its group's stages."""
        return [r[self.cut[g] :] for r, g in zip(rows, self.group, strict=True)]


def by_past(where: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """The indices of ``where`` ((batch, row) pairs) by batch, batches in order."""
    out: dict[int, list[int]] = {}
    for i, (p, _) in enumerate(where):
        out.setdefault(p, []).append(i)
    return dict(sorted(out.items()))


def partition(lengths: Sequence[int], cost: int) -> list[list[int]]:
    """The indices of ``lengths`` in buckets, longest rows first, that minimise the tokens
    fed when each bucket is left-padded to its longest row, plus ``cost`` tokens per bucket
    (what one more forward call is worth). Optimal among all partitions: some optimal one
    cuts the longest-first order into runs (swapping a shorter row into a bucket with a
    longer head never adds padding), and dynamic programming finds the best runs."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    best = [0] + [0] * len(order)  # best[k]: the cost of the first k rows of ``order``
    start = [0] * (len(order) + 1)  # where the last run of that best partition starts
    for end in range(1, len(order) + 1):
        costs = [best[k] + (end - k) * lengths[order[k]] + cost for k in range(end)]
        start[end] = min(range(end), key=costs.__getitem__)
        best[end] = costs[start[end]]
    runs: list[list[int]] = []
    end = len(order)
    while end:
        runs.insert(0, order[start[end] : end])
        end = start[end]
    return runs


def shared_runs(parts: Sequence[Sequence[int]], floor: int) -> tuple[list[int], list[int]]:
    """(row -> group, per group the tokens its rows share) that saves the most tokens when
    each group's shared tokens after the first ``floor`` go through the model once: a
    group of m rows sharing c tokens saves (m - 1)(c - floor). ``parts`` are the rows'
    shareable tokens; a row alone shares all of its own. Groups are numbered by their first
    row.

    Rows that share more are neighbours in lexicographic order, so the groups are runs of
    that order, a run sharing the least common prefix of its neighbours (a turn's prompts
    of one task: its instruction, question and example, then different histories), and
    dynamic programming finds the best runs. A run that saves nothing is split into rows
    alone, so no group feeds an empty run of tokens after ``floor``."""
    order = sorted(range(len(parts)), key=lambda i: tuple(parts[i]))
    keys = [parts[i] for i in order]
    lcp = [0] + [common_prefix(keys[k - 1 : k + 1]) for k in range(1, len(keys))]
    best = [0] * (len(keys) + 1)  # best[k]: the most the first k rows of ``order`` save
    start = list(range(len(keys) + 1))  # where the last run of that best partition starts
    for end in range(1, len(keys) + 1):
        best[end], start[end] = best[end - 1], end - 1  # the row alone
        shared = len(keys[end - 1])
        for k in range(end - 2, -1, -1):  # the run keys[k:end]
            shared = min(shared, lcp[k + 1])
            if shared <= floor:  # a longer run shares no more
                break
            saved = best[k] + (end - 1 - k) * (shared - floor)
            if saved > best[end]:
                best[end], start[end] = saved, k
    run_of, cut_of = [0] * len(keys), [0] * len(keys)
    end = len(keys)
    while end:
        k = start[end]
        shared = min([len(keys[k]), *lcp[k + 1 : end]])
        for j in range(k, end):
            run_of[order[j]], cut_of[order[j]] = k, shared
        end = k
    index: dict[int, int] = {}
    group = [index.setdefault(run_of[r], len(index)) for r in range(len(parts))]
    cut = [0] * len(index)
    for r, g in enumerate(group):
        cut[g] = cut_of[r]
    return group, cut


def scored_tails(batch: ScoreInputs) -> list[int]:
    """Per context of ``batch``, how many of its last positions give scored log-probs: the
    widest of its rows' spans from the first scored action column to the end (at least 1)."""
    mask = batch.action_mask
    width = mask.shape[1]
    first = torch.where(mask.any(1), mask.int().argmax(1), width)  # (B,) first scored column
    tails = torch.ones(batch.input_ids.shape[0], dtype=torch.long)
    tails.scatter_reduce_(0, batch.context.cpu(), (width - first).cpu(), reduce="amax")
    return tails.tolist()


def common_prefix(rows: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all ``rows`` share: that of the lexicographically
    smallest and largest (rows between them share at least as much)."""
    keys = [tuple(r) for r in rows]
    low, high = min(keys), max(keys)
    for k, (a, b) in enumerate(zip(low, high, strict=False)):
        if a != b:
            return k
    return min(len(low), len(high))


def unpadded(ids: torch.Tensor, attn: torch.Tensor) -> list[list[int]]:
    """The token rows of left-padded ``ids`` (U, L), without their padding."""
    lengths = attn.sum(-1).tolist()
    return [row[len(row) - n :] for row, n in zip(ids.tolist(), lengths, strict=True)]
