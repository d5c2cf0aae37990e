"""Vectorised grouping primitives shared by every advantage estimator.

Group ids are data, not layout: nothing here reshapes to ``(-1, G)``. Keys (integer
columns, hashable object columns such as anchors, composite keys such as (group, anchor))
are factorised into dense ids ``0..n-1``; segment statistics are ``np.bincount`` reductions
over those ids and are broadcast back to rows by indexing. Rows may come in any order.

Shapes: ``N`` rows (steps), ``E`` episodes, ``n`` segments of whatever key is grouped.

Object keys are factorised exactly with a dict in one C-level pass (a ``defaultdict``
lookup per row); composite keys combine the columns' dense ids exactly. Keys equal under
Python ``==``/``hash`` (e.g. ``1`` and ``1.0``) are one key. ``benchmarks/advantages.py``
compares this with hashing + sorting and with ``np.unique`` on fixed-width strings.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import count
from typing import Literal

import numpy as np

from cairn.data import StepBatch

__all__ = [
    "EPS",
    "Episodes",
    "PathTable",
    "check_tree",
    "combine_ids",
    "factorize",
    "factorize_keys",
    "leaf_paths",
    "normalize_in_segments",
    "segment_count",
    "segment_mean",
    "segment_std",
    "segment_sum",
    "whiten",
]

EPS = 1e-6
Norm = Literal["mean", "mean_std"]


# ---------------------------------------------------------------- factorisation


def _factorize_sorted(keys: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Dense ids by sorting: (codes (N,), n, one row index per id (n,))."""
    order = np.argsort(keys)
    sorted_keys = keys[order]
    new = np.empty(len(keys), dtype=bool)
    new[:1] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=new[1:])
    ids_sorted = np.cumsum(new) - 1
    codes = np.empty(len(keys), dtype=np.int64)
    codes[order] = ids_sorted
    return codes, int(ids_sorted[-1]) + 1 if len(keys) else 0, order[new]


def _factorize_int(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Integers -> dense ids in increasing value order (O(N) when the value range is small)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 8 * len(values) + 1024:
        codes, n, _ = _factorize_sorted(values.astype(np.int64, copy=False))
        return codes, n
    shifted = np.subtract(values, lo, dtype=np.int64)  # (N,) a new array in one pass
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[shifted] = True
    if present.all():  # already dense up to an offset
        return shifted, hi - lo + 1
    remap = np.cumsum(present, dtype=np.int32 if hi - lo < 2**31 - 1 else np.int64)
    return remap[shifted].astype(np.int64) - 1, int(remap[-1])


def _factorize_object(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Hashable objects -> dense ids in first-occurrence order, exactly (a dict).

    One C-level pass: a ``defaultdict`` whose factory is ``count().__next__`` hands each new
    key the next id, so ``map(ids.__getitem__, items)`` is one hash and one probe per row and
    no Python-level call (an object's cached hash, e.g. an interned anchor string's, is not
    recomputed). Faster here than ``dict.setdefault`` with row indices made dense afterwards,
    than hashing + sorting + verifying, and than ``np.unique`` on fixed-width strings
    (benchmarks/advantages.py).
    """
    items = values.tolist()
    ids: defaultdict[object, int] = defaultdict(count().__next__)
    try:
        codes = np.fromiter(map(ids.__getitem__, items), np.int64, len(items))
    except TypeError as err:
        raise ValueError(f"cannot group by unhashable values: {err}") from err
    return codes, len(ids)


def factorize(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids of a 1-D key column: ``(codes (N,) int64 in [0, n), n)``.

    Equal keys get equal ids. Integer/bool keys get ids in increasing value order; other
    keys get ids in an unspecified order (results never depend on the labels).
    """
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"factorize needs a 1-D column, got shape {values.shape}")
    if values.dtype.kind in "biu":
        return _factorize_int(values)
    if values.dtype.kind == "O":
        return _factorize_object(values)
    uniq, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.int64).reshape(-1), len(uniq)


def factorize_keys(*columns: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids of a composite key (tuples of the columns' values), e.g. (group, anchor).

    Each column is factorised on its own, then the dense ids are combined exactly
    (``ids_a * n_b + ids_b``, re-densified in O(N)).
    """
    if not columns or any(len(c) != len(columns[0]) for c in columns):
        raise ValueError("factorize_keys needs one or more columns of one length")
    codes, n = factorize(columns[0])
    for col in columns[1:]:
        codes, n = combine_ids(codes, n, *factorize(col))
    return codes, n


def combine_ids(a: np.ndarray, n_a: int, b: np.ndarray, n_b: int) -> tuple[np.ndarray, int]:
    """Dense ids of the pairs (a, b) of two dense id columns (N,), e.g. (group, anchor)."""
    if n_a * max(n_b, 1) >= 2**62:  # cannot happen for a batch that fits in memory
        raise ValueError(f"composite key too large: {n_a} x {n_b} ids")
    return _factorize_int(a * n_b + b)


# ---------------------------------------------------------------- segment statistics


def segment_count(ids: np.ndarray, n: int) -> np.ndarray:
    """Rows per segment, (n,) int64."""
    return np.bincount(ids, minlength=n)


def segment_sum(values: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """Sum of ``values`` (N,) per segment, (n,) float64."""
    return np.bincount(ids, weights=values, minlength=n).astype(np.float64, copy=False)


def segment_mean(values: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """Mean per segment, (n,) float64 (0 for an empty segment)."""
    return segment_sum(values, ids, n) / np.maximum(segment_count(ids, n), 1)


def segment_std(
    values: np.ndarray, ids: np.ndarray, n: int, mean: np.ndarray | None = None
) -> np.ndarray:
    """Unbiased sample std per segment (two-pass), (n,) float64; 0 where a segment has < 2 rows."""
    mean = segment_mean(values, ids, n) if mean is None else mean
    count = segment_count(ids, n)
    sq = segment_sum(np.square(values - mean[ids]), ids, n)
    return np.sqrt(sq / np.maximum(count - 1, 1)) * (count > 1)


def normalize_in_segments(
    values: np.ndarray, ids: np.ndarray, n: int, norm: Norm, eps: float = EPS
) -> np.ndarray:
    """Per-row ``x - mean`` (norm="mean") or ``(x - mean)/(std + eps)`` (norm="mean_std").

    Statistics are over the rows of each segment; a segment of one row gives 0. (N,) float64.
    """
    if norm not in ("mean", "mean_std"):
        raise ValueError(f"norm must be 'mean' or 'mean_std', got {norm!r}")
    count = segment_count(ids, n)
    mean = segment_sum(values, ids, n) / np.maximum(count, 1)
    out = values - mean[ids]
    if norm == "mean_std":
        sq = segment_sum(np.square(out), ids, n)
        std = np.sqrt(sq / np.maximum(count - 1, 1))
        out = out / (std[ids] + eps)
    return np.where(count[ids] > 1, out, 0.0)


def whiten(values: np.ndarray, eps: float = EPS) -> np.ndarray:
    """``(x - mean)/(std + eps)`` over all of ``values`` (unbiased std); zeros if fewer than 2."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return np.zeros_like(values)
    return (values - values.mean()) / (values.std(ddof=1) + eps)


# ---------------------------------------------------------------- episodes


@dataclass(frozen=True)
class Episodes:
    """Validated episode structure of a StepBatch, built by ``Episodes.of(batch)``.

    Attributes (``E`` episodes, ``n_groups`` groups, ``N`` rows):
        row:       (N,) dense episode id of each row
        row_group: (N,) dense group id of each row
        group:     (E,) dense group id of each episode
        length:    (E,) number of steps T of each episode
        start:     (E,) offset of each episode in the (episode, t)-sorted layout
        order:     (N,) row indices sorted by (episode, t); ``order[start[e] + t]`` is the row
        ids:       (E,) the batch's episode id of each dense episode id (for messages)
    """

    row: np.ndarray
    row_group: np.ndarray
    group: np.ndarray
    length: np.ndarray
    start: np.ndarray
    order: np.ndarray
    ids: np.ndarray
    n: int
    n_groups: int

    @classmethod
    def of(cls, batch: StepBatch) -> Episodes:
        """Index ``batch`` by episode; ValueError if an episode spans two groups or its t
        values are not exactly 0..T-1."""
        ep, n_ep = factorize(batch.episode)
        grp, n_grp = factorize(batch.group)
        group = np.zeros(n_ep, dtype=np.int64)
        group[ep] = grp
        bad = np.flatnonzero(group[ep] != grp)
        if len(bad):
            e = batch.episode[bad[0]]
            groups = sorted(set(batch.group[batch.episode == e].tolist()))
            raise ValueError(f"episode {e} has rows in several groups {groups}; one allowed")
        length = np.bincount(ep, minlength=n_ep)
        start = np.cumsum(length) - length
        _check_turns(batch, ep, length)
        pos = start[ep] + batch.t
        seen = np.zeros(len(pos), dtype=bool)
        seen[pos] = True
        if not np.all(seen):
            _raise_duplicate_turn(batch, pos)
        order = np.empty(len(pos), dtype=np.int64)
        order[pos] = np.arange(len(pos))
        ids = batch.episode[order[start]]
        return cls(ep, grp, group, length, start, order, ids, n_ep, n_grp)

    def returns(self, reward: np.ndarray) -> np.ndarray:
        """Episode returns R = sum of the episode's rewards, (E,)."""
        return segment_sum(reward, self.row, self.n)

    @property
    def last_row(self) -> np.ndarray:
        """(E,) row index of each episode's final step."""
        return self.order[self.start + self.length - 1]

    @property
    def is_last(self) -> np.ndarray:
        """(N,) bool, True on each episode's final step."""
        out = np.zeros(len(self.row), dtype=bool)
        out[self.last_row] = True
        return out

    def next_in_episode(self, values: np.ndarray, fill: float = 0.0) -> np.ndarray:
        """(N,) the value at step t+1 of the same episode, ``fill`` after the last step."""
        v = values[self.order]
        nxt = np.full(len(v), fill, dtype=np.float64)
        nxt[:-1] = v[1:]
        nxt[self.start + self.length - 1] = fill
        out = np.empty_like(nxt)
        out[self.order] = nxt
        return out

    def discounted_cumsum(self, values: np.ndarray, gamma: float) -> np.ndarray:
        """(N,) ``G_t = sum_k gamma^k x_{t+k}`` within each episode (a reverse scan).

        Loops over time steps, vectorised across episodes: at step k every episode longer
        than k+1 adds gamma times its t=k+1 value. No gamma^t scaling, so no underflow.
        """
        acc = values[self.order].astype(np.float64, copy=True)  # (N,) sorted by (episode, t)
        if len(acc) == 0:
            return acc
        by_length = np.argsort(-self.length, kind="stable")
        starts = self.start[by_length]  # (E,) episodes, longest first
        neg_len = -self.length[by_length]  # ascending, for searchsorted
        for k in range(int(self.length.max()) - 2, -1, -1):
            longer = int(np.searchsorted(neg_len, -(k + 1), "left"))  # episodes with T > k+1
            pos = starts[:longer] + k
            acc[pos] += gamma * acc[pos + 1]
        out = np.empty_like(acc)
        out[self.order] = acc
        return out


def _check_turns(batch: StepBatch, ep: np.ndarray, length: np.ndarray) -> None:
    bad = np.flatnonzero(batch.t >= length[ep])
    if len(bad):
        i = bad[0]
        raise ValueError(
            f"episode {batch.episode[i]} has t={batch.t[i]} but only {length[ep[i]]} rows; "
            "t must run 0..T-1 without gaps or duplicates"
        )


def _raise_duplicate_turn(batch: StepBatch, pos: np.ndarray) -> None:
    counts = np.bincount(pos, minlength=len(pos))
    i = int(np.flatnonzero(counts[pos] > 1)[0])
    raise ValueError(
        f"episode {batch.episode[i]} has t={batch.t[i]} more than once; "
        "t must run 0..T-1 without gaps or duplicates"
    )


# ---------------------------------------------------------------- tree paths


@dataclass(frozen=True)
class PathTable:
    """Factorised ``path`` column (tuples of branch ids from a group's root).

    Attributes (``U`` distinct paths, ``D`` the longest path's length):
        code:   (N,) dense id of each row's path
        length: (U,) length of each distinct path
        prefix: (U, D+1) globally unique id of ``path[:d]`` at column d (d <= length), else -1;
                ``prefix[u, length[u]]`` is the id of the whole path
        n_prefix: number of distinct prefix ids
    """

    code: np.ndarray
    length: np.ndarray
    prefix: np.ndarray
    n_prefix: int

    @classmethod
    def of(cls, paths: np.ndarray) -> PathTable:
        try:
            code, n = factorize(paths)
        except ValueError as err:
            raise ValueError(f"column 'path' must hold tuples of branch ids: {err}") from err
        reps = np.empty(n, dtype=object)
        reps[code] = paths
        bad = [p for p in reps if not isinstance(p, tuple)]
        if bad:
            raise ValueError(f"column 'path' must hold tuples of branch ids, got {bad[0]!r}")
        length = np.fromiter(map(len, reps), np.int64, n)
        depth = int(length.max()) if n else 0
        elements = np.fromiter((b for p in reps for b in p), object, int(length.sum()))
        elem_codes, n_elem = factorize(elements)  # one pass over distinct paths only
        table = np.full((n, depth), -1, dtype=np.int64)
        table[np.arange(depth)[None, :] < length[:, None]] = elem_codes
        prefix = np.full((n, depth + 1), -1, dtype=np.int64)
        prefix[:, 0] = 0
        next_id = 1
        for d in range(1, depth + 1):
            deep = length >= d
            ids, m = _factorize_int(prefix[deep, d - 1] * n_elem + table[deep, d - 1])
            prefix[deep, d] = ids + next_id
            next_id += m
        return cls(code, length, prefix, next_id)

    def is_prefix(self, short: np.ndarray, long: np.ndarray) -> np.ndarray:
        """(K,) bool: path ``short[k]`` is a prefix of path ``long[k]`` (codes, equal allowed)."""
        depth = self.length[short]
        fits = depth <= self.length[long]
        at = np.minimum(depth, self.length[long])
        return fits & (self.prefix[long, at] == self.prefix[short, depth])


def leaf_paths(episodes: Episodes, paths: PathTable) -> np.ndarray:
    """(E,) path code of each episode's leaf: the path on its final step.

    Every row's path must be a prefix of its episode's leaf path (rows of a shared prefix
    may carry the shorter path of the tree node they were generated in); else ValueError.
    """
    leaf = paths.code[episodes.last_row]
    bad = np.flatnonzero(~paths.is_prefix(paths.code, leaf[episodes.row]))
    if len(bad):
        i = bad[0]
        raise ValueError(
            f"row {i} (episode {episodes.ids[episodes.row[i]]}) has a path that is not a prefix "
            "of the path on its episode's final step; an episode follows one root-to-leaf path"
        )
    return leaf


def check_tree(episodes: Episodes, paths: PathTable, leaf: np.ndarray) -> None:
    """ValueError unless each group's episodes are the leaves of one rollout tree.

    Required: leaf paths distinct within a group; no leaf path a strict prefix of another
    (a trajectory that continues past a branch point takes its own branch id, e.g. (0,)
    beside the new (1,)); row paths never get shorter as t grows within an episode.
    """
    n_pre = paths.n_prefix
    full = episodes.group * n_pre + paths.prefix[leaf, paths.length[leaf]]  # (E,)
    ids, n = _factorize_int(full)
    twins = np.flatnonzero(segment_count(ids, n)[ids] > 1)
    if len(twins):
        same = episodes.ids[ids == ids[twins[0]]].tolist()
        raise ValueError(
            f"episodes {same} of one group end at the same tree path; leaf paths must differ "
            "(give independent samples their own branch id)"
        )
    depth = paths.length[leaf]
    ep = np.repeat(np.arange(episodes.n), depth)  # (episode, d < depth) pairs
    d = np.arange(len(ep)) - np.repeat(np.cumsum(depth) - depth, depth)
    inner = episodes.group[ep] * n_pre + paths.prefix[leaf[ep], d]
    inside = np.flatnonzero(np.isin(full, inner))
    if len(inside):
        raise ValueError(
            f"episode {episodes.ids[inside[0]]} ends at an inner node of its group's tree (its "
            "leaf path is a prefix of another's); a trajectory that continues past a branch "
            "point needs its own branch id"
        )
    row_len = paths.length[paths.code[episodes.order]]  # (N,) sorted by (episode, t)
    shrinks = np.flatnonzero(np.diff(row_len) < 0) + 1  # sorted positions
    shrinks = shrinks[np.isin(shrinks, episodes.start, invert=True)]  # not a new episode
    if len(shrinks):
        e = episodes.ids[episodes.row[episodes.order[shrinks[0]]]]
        raise ValueError(f"in episode {e} a row's path is shorter than the path of the step before")
