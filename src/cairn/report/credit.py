"""Credit structure of one group of episode records, for the viewer.

- Step groups (GiGPO, arXiv 2505.10978, Sec. 3.2 anchor state grouping): the turns of a
  group whose anchor (the raw observation) is equal form one step group, across episodes
  and time steps; `step_groups` counts them.
- Nearest neighbours (ProxMO, arXiv 2602.19225, PSA): the dump holds no similarity
  weights, so `anchor_neighbours` recomputes them: TF-IDF rows of the group's distinct
  anchor texts with the estimator's own vectoriser and ``tokens`` option
  (``cairn.advantages.proxmo.anchor_tfidf``), cosine similarity ``s``, and the softmax
  weight over the group's steps ``w(a -> b) = exp(s_ab/tau) / sum_c n_c exp(s_ac/tau)``
  that one step at anchor b gets in the baseline of a step at anchor a (``n_c`` = steps
  at anchor c). The trainer fits its IDF on the whole batch, the report on the group,
  so the weights are an approximation of the ones used in training; the report says so.
- Trees (TreePO, ARPO, ELPO, VinePPO probes): episodes with a non-empty ``path`` are the
  leaves of their group's rollout tree; nodes are the prefixes of the leaf paths. A node's
  value ``V`` is the mean return of its children (a leaf: its episode's return), as in
  ELPO's hierarchical values. The steps a node generated come from each step's own
  ``path`` where the records carry one; otherwise they are inferred as the steps its
  leaves share beyond what its parent's leaves share (longest common prefix of
  (anchor, action) pairs). The first step with ``crit`` true (ELPO's localised first
  irrecoverable step) marks its node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["anchor_neighbours", "build_tree", "first_crit", "step_groups"]


def step_groups(episodes: Sequence[Mapping[str, object]]) -> Counter[str]:
    """Turns per anchor text over a group's episode records (GiGPO's step groups)."""
    return Counter(
        str(s.get("anchor", s.get("observation", ""))) for e in episodes for s in _steps(e)
    )


def _steps(episode: Mapping[str, object]) -> list[dict[str, Any]]:
    steps = episode.get("steps")
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def anchor_neighbours(
    anchors: Sequence[str],
    counts: Sequence[int],
    tau: float = 0.1,
    top: int = 6,
    tokens: str = "words",
) -> tuple[list[list[tuple[int, float]]], str]:
    """For each distinct anchor a, its ``top`` anchors b by per-step softmax weight.

    ``anchors`` (n,) distinct texts of one group, ``counts`` (n,) steps at each. Returns
    ``(rows, method)``: ``rows[a]`` = [(b, w(a -> b))] by decreasing weight, a itself
    included; over all b, ``sum_b counts[b] * w(a -> b) = 1``.
    """
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    n = len(anchors)
    if n != len(counts):
        raise ValueError(f"anchors ({n}) and counts ({len(counts)}) differ in length")
    if n == 0:
        return [], "none"
    if n == 1:
        return [[(0, 1.0 / counts[0])]], "single anchor"
    from cairn.advantages.proxmo import anchor_tfidf

    try:
        X = anchor_tfidf([str(a) for a in anchors], tokens)
    except ValueError:  # the run's tokens found nothing here: show no neighbours
        return [[(a, 1.0 / counts[a])] for a in range(n)], "none (no tokens)"
    method = f"TF-IDF of {'position-tagged cells' if tokens == 'cells' else 'word tokens'}"
    S = np.asarray((X @ X.T).toarray()) / tau  # (n, n)
    n_c = np.asarray(counts, dtype=np.float64)
    E = np.exp(S - S.max(axis=1, keepdims=True))
    W = E / (E @ n_c)[:, None]  # (n, n) per-step weight
    rows = []
    for a in range(n):
        order = np.argsort(-W[a], kind="stable")[:top]
        rows.append([(int(b), float(W[a, b])) for b in order])
    return rows, method


def first_crit(episode: Mapping[str, object]) -> int | None:
    """t of the first step whose ``after_error`` (or ``crit``, its published name) is true
    (ELPO's localised error step), else None."""
    for s in _steps(episode):
        if s.get("after_error", s.get("crit")):
            return int(s.get("t", 0))
    return None


def _path(value: object) -> tuple | None:
    return tuple(value) if isinstance(value, list | tuple) else None


def _common(seqs: list[list[tuple[str, str]]]) -> int:
    """Length of the longest common prefix of several sequences."""
    n = min(len(s) for s in seqs)
    for i in range(n):
        if any(s[i] != seqs[0][i] for s in seqs[1:]):
            return i
    return n


def build_tree(episodes: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The group's rollout tree, or None when no episode has a path.

    Returns ``{"nodes": [...], "depth": D, "exact": bool}``; a node is ``{"id", "parent"
    (-1 at the root), "depth", "path", "V", "leaves", "wins", "episode" (leaf's id or
    None), "steps": [[t, episode index, step index]], "crit", "y"}`` with ``y`` the
    drawing row (leaves 0, 1, ... in depth-first order, inner nodes at their children's mean).
    """
    found = [(i, _path(e.get("path"))) for i, e in enumerate(episodes)]
    leaves = [(i, p) for i, p in found if p]
    if not leaves:
        return None
    keys = sorted({p[:d] for _, p in leaves for d in range(len(p) + 1)}, key=lambda p: (len(p), p))
    index = {p: k for k, p in enumerate(keys)}
    below: dict[tuple, list[int]] = {p: [] for p in keys}
    for i, p in leaves:
        for d in range(len(p) + 1):
            below[p[:d]].append(i)
    nodes = [_node(k, p, index, below[p], episodes) for k, p in enumerate(keys)]
    for node in sorted(nodes, key=lambda n: -n["depth"]):  # values bottom-up
        kids = [c for c in nodes if c["parent"] == node["id"]]
        if kids:
            node["V"] = float(np.mean([c["V"] for c in kids]))
    exact = _assign_steps(nodes, keys, episodes)
    _layout(nodes)
    return {"nodes": nodes, "depth": max(len(p) for p in keys), "exact": exact}


def _node(k: int, p: tuple, index: dict, below: list[int], episodes) -> dict[str, Any]:
    own = [i for i in below if _path(episodes[i].get("path")) == p]
    rets = [float(episodes[i].get("return") or 0.0) for i in own]
    return {
        "id": k,
        "parent": index[p[:-1]] if p else -1,
        "depth": len(p),
        "path": list(p),
        "V": float(np.mean(rets)) if rets else 0.0,
        "leaves": len(below),
        "wins": sum(bool(episodes[i].get("success")) for i in below),
        "episode": episodes[own[0]].get("id") if own else None,
        "below": below,
        "steps": [],
        "crit": False,
    }


def _assign_steps(nodes: list[dict], keys: list[tuple], episodes) -> bool:
    """Fill each node's steps; True when every step carried its own path (exact)."""
    exact = all(
        _path(s.get("path")) is not None for i in nodes[0]["below"] for s in _steps(episodes[i])
    )
    seen: set[tuple[int, int]] = set()
    if exact:
        index = {p: k for k, p in enumerate(keys)}
        for i in nodes[0]["below"]:
            for j, s in enumerate(_steps(episodes[i])):
                path = _path(s.get("path"))
                k = index.get(path) if path is not None else None
                t = int(s.get("t", j))
                if k is not None and (k, t) not in seen:
                    seen.add((k, t))
                    nodes[k]["steps"].append([t, i, j])
    else:
        seq = {
            i: [(str(s.get("anchor")), str(s.get("action"))) for s in _steps(episodes[i])]
            for i in nodes[0]["below"]
        }
        common = [_common([seq[i] for i in n["below"]]) for n in nodes]
        for n in nodes:
            start = common[n["parent"]] if n["parent"] >= 0 else 0
            first = n["below"][0]
            n["steps"] = [
                [int(s.get("t", j)), first, j]
                for j, s in enumerate(_steps(episodes[first]))
                if start <= j < common[n["id"]]
            ]
    _mark_crit(nodes, keys, episodes)
    return exact


def _mark_crit(nodes: list[dict], keys: list[tuple], episodes) -> None:
    """Mark the node holding each episode's first crit step (deepest node on its path)."""
    index = {p: k for k, p in enumerate(keys)}
    for i in nodes[0]["below"]:
        t_crit, leaf = first_crit(episodes[i]), _path(episodes[i].get("path")) or ()
        if t_crit is None:
            continue
        for d in range(len(leaf), -1, -1):
            node = nodes[index[leaf[:d]]]
            if any(t == t_crit for t, _, _ in node["steps"]):
                node["crit"] = True
                break


def _layout(nodes: list[dict]) -> None:
    children: dict[int, list[int]] = {}
    for n in nodes:
        children.setdefault(n["parent"], []).append(n["id"])
    row = 0

    def place(k: int) -> float:
        nonlocal row
        kids = children.get(k, [])
        if not kids:
            nodes[k]["y"] = float(row)
            row += 1
        else:
            nodes[k]["y"] = float(np.mean([place(c) for c in kids]))
        return nodes[k]["y"]

    place(0)
    for n in nodes:
        del n["below"]
