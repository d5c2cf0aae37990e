"""Random StepBatches for the advantage tests (and the benchmark).

``random_batch`` builds flat groups (independent episodes); ``random_tree_batch`` builds
groups whose episodes are the leaves of a rollout tree, with shared prefix rows duplicated
in every leaf and each row's ``path`` the tree node that generated it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from cairn.data import StepBatch

WORDS = ["red", "blue", "box", "wall", "goal", "key", "door", "lamp", "north", "south"]


def _anchor_pool(rng: np.random.Generator, size: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=3)) + f" s{k}" for k in range(size)]


def random_batch(
    rng: np.random.Generator,
    n_groups: int = 4,
    max_episodes: int = 5,
    max_len: int = 6,
    pool: int = 4,
    shuffle: bool = True,
) -> StepBatch:
    """Flat groups; anchors drawn from a small per-group pool so step groups collide.

    Columns: required ones plus ``value``, ``info_gain``, ``success``, ``path`` (``()``).
    """
    cols: dict[str, list[Any]] = {k: [] for k in ["group", "episode", "t", "reward", "anchor"]}
    cols.update(value=[], info_gain=[], success=[], path=[])
    episode_ids = rng.choice(10**6, size=n_groups * max_episodes, replace=False)
    group_ids = rng.choice(10**6, size=n_groups, replace=False) - 500_000
    e = 0
    for g in group_ids:
        anchors = _anchor_pool(rng, pool)
        for _ in range(int(rng.integers(1, max_episodes + 1))):
            T = int(rng.integers(1, max_len + 1))
            win = bool(rng.random() < 0.5)
            for t in range(T):
                cols["group"].append(int(g))
                cols["episode"].append(int(episode_ids[e]))
                cols["t"].append(t)
                sparse = rng.random() < 0.5
                cols["reward"].append(0.0 if sparse else float(rng.normal()))
                cols["anchor"].append(anchors[int(rng.integers(pool))] if t else anchors[0])
                cols["value"].append(float(rng.normal()))
                cols["info_gain"].append(float(rng.normal(scale=0.3)))
                cols["success"].append(win)
                cols["path"].append(())
            e += 1
    return _finish(cols, rng, shuffle)


def _finish(cols: dict[str, list[Any]], rng: np.random.Generator, shuffle: bool) -> StepBatch:
    arrays = {}
    for k, v in cols.items():
        arr = np.empty(len(v), dtype=object) if k in ("anchor", "path") else None
        if arr is not None:
            arr[:] = v
        arrays[k] = arr if arr is not None else np.asarray(v)
    batch = StepBatch.from_columns(**arrays)
    if shuffle:
        batch = batch.take(rng.permutation(len(batch)))
    return batch


def _grow(rng: np.random.Generator, path: tuple[int, ...], depth: int) -> list[list[tuple]]:
    """Leaves below a node as lists of (path, reward, anchor) segments, root first."""
    branch = depth < 3 and rng.random() < (0.9 if depth == 0 else 0.5)
    seg_len = int(rng.integers(0 if branch else 1, 3))
    segment = [
        (path, 0.0 if rng.random() < 0.4 else float(rng.normal()), f"node {path} turn {k}")
        for k in range(seg_len)
    ]
    if not branch:
        return [segment]
    ids = rng.choice(10, size=int(rng.integers(2, 4)), replace=False)
    return [segment + rest for b in ids for rest in _grow(rng, (*path, int(b)), depth + 1)]


def random_tree_batch(
    rng: np.random.Generator, n_groups: int = 4, shuffle: bool = True, leaf_path_rows: bool = False
) -> StepBatch:
    """Tree groups: each leaf a complete episode; ``leaf_path_rows`` puts the leaf's path on
    every row of the episode instead of the row's own node path."""
    cols: dict[str, list[Any]] = {k: [] for k in ["group", "episode", "t", "reward", "anchor"]}
    cols.update(value=[], info_gain=[], success=[], path=[])
    e = 0
    for g in range(n_groups):
        for leaf in _grow(rng, (), 0):
            leaf_path = leaf[-1][0]
            for t, (path, reward, anchor) in enumerate(leaf):
                cols["group"].append(7 * g + 3)
                cols["episode"].append(e)
                cols["t"].append(t)
                cols["reward"].append(reward)
                cols["anchor"].append(anchor)
                cols["value"].append(float(rng.normal()))
                cols["info_gain"].append(0.0)
                cols["success"].append(False)
                cols["path"].append(leaf_path if leaf_path_rows else path)
            e += 1
    return _finish(cols, rng, shuffle)


def relabel(batch: StepBatch, offset: int) -> StepBatch:
    """The same batch with group and episode ids shifted (to concatenate disjoint batches)."""
    cols = dict(batch.columns)
    cols["group"] = cols["group"] + offset
    cols["episode"] = cols["episode"] + offset
    return StepBatch(cols)


def from_episodes(*episodes: dict[str, Any], shuffle_seed: int | None = 0) -> StepBatch:
    """A batch from per-episode specs: ``dict(group=g, reward=[...], anchor=[...], ...)``.

    Episode ids are 100, 101, ... in the given order; list-valued keys are per step; other
    keys (e.g. ``success``, a leaf ``path`` given as a tuple) repeat on every step. Rows are
    shuffled (seeded) unless ``shuffle_seed`` is None, so the worked examples also exercise
    order independence.
    """
    cols: dict[str, list[Any]] = defaultdict(list)
    for e, spec in enumerate(episodes):
        T = len(spec["reward"])
        cols["group"] += [spec["group"]] * T
        cols["episode"] += [100 + e] * T
        cols["t"] += list(range(T))
        cols["anchor"] += spec.get("anchor", [f"e{e} t{t}" for t in range(T)])
        for key, value in spec.items():
            if key not in ("group", "anchor"):
                cols[key] += value if isinstance(value, list) else [value] * T
    rng = np.random.default_rng(shuffle_seed)
    return _finish(dict(cols), rng, shuffle_seed is not None)
