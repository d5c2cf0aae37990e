"""Vectorised segment maths shared by every advantage estimator.

Group ids are data, not layout: nothing here reshapes to ``(-1, G)``. Keys (integer
columns, hashable object columns such as anchors, composite keys such as (group, anchor))
are factorised into dense ids ``0..n-1``; segment statistics are ``np.bincount`` reductions
over those ids and are broadcast back to rows by indexing. Rows may come in any order.

Shapes: ``N`` rows (steps), ``n`` segments of whatever key is grouped.

Object keys are factorised exactly with a dict in one C-level pass (a ``defaultdict``
lookup per row); composite keys combine the columns' dense ids exactly. Keys equal under
Python ``==``/``hash`` (e.g. ``1`` and ``1.0``) are one key. ``benchmarks/speed/advantages.py``
compares this with hashing + sorting and with ``np.unique`` on fixed-width strings.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import count
from typing import Literal

import numpy as np

__all__ = [
    "EPS",
    "Norm",
    "combine_ids",
    "factorize",
    "factorize_keys",
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
    (benchmarks/speed/advantages.py).
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
