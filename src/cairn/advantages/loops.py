"""Plain-Python estimators (the parity oracles): per-row loops over dicts, written from the
definitions. (Not the KL reference policy: that is ``cairn.policies.lora.reference_model``.)

These are the parity references for the vectorised estimators in cairn.advantages (checked
against them in tests/advantages/test_equivalence.py) and the "plain loop" timed by
benchmarks/speed/advantages.py. They avoid numpy on purpose except to read the columns and to
return the result. Not registered: ``estimate`` never reaches them.
"""

from __future__ import annotations

import difflib
import math
from collections import defaultdict
from collections.abc import Hashable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cairn.data.step_batch import StepBatch

EPS = 1e-6


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _std(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _norm(x: float, xs: list[float], norm: str) -> float:
    if len(xs) < 2:
        return 0.0
    if norm == "mean":
        return x - _mean(xs)
    return (x - _mean(xs)) / (_std(xs) + EPS)


class Table:
    """The batch as Python lists plus per-episode row lists sorted by t."""

    def __init__(self, batch: StepBatch) -> None:
        self.n = len(batch)
        self.cols = {k: batch[k].tolist() for k in batch}
        self.rows_of: dict[int, list[int]] = defaultdict(list)
        self.group_of: dict[int, int] = {}
        for i in range(self.n):
            e = self.cols["episode"][i]
            self.rows_of[e].append(i)
            self.group_of[e] = self.cols["group"][i]
        for rows in self.rows_of.values():
            rows.sort(key=lambda i: self.cols["t"][i])
        self.episodes_of: dict[int, list[int]] = defaultdict(list)
        for e, g in self.group_of.items():
            self.episodes_of[g].append(e)
        self.R = {e: sum(self.cols["reward"][i] for i in rows) for e, rows in self.rows_of.items()}

    def col(self, name: str, i: int) -> Any:
        return self.cols[name][i]

    def discounted(self, x: list[float], gamma: float) -> list[float]:
        out = [0.0] * self.n
        for rows in self.rows_of.values():
            running = 0.0
            for i in reversed(rows):
                running = x[i] + gamma * running
                out[i] = running
        return out

    def episode_adv(self, norm: str) -> dict[int, float]:
        adv = {}
        for members in self.episodes_of.values():
            Rs = [self.R[e] for e in members]
            for e in members:
                adv[e] = _norm(self.R[e], Rs, norm)
        return adv


def _whiten(xs: list[float]) -> list[float]:
    if len(xs) < 2:
        return [0.0] * len(xs)
    m, s = _mean(xs), _std(xs)
    return [(x - m) / (s + EPS) for x in xs]


def _per_row(tab: Table, per_episode: dict[int, float]) -> np.ndarray:
    return np.array([per_episode[tab.col("episode", i)] for i in range(tab.n)], dtype=np.float64)


def grpo(batch: StepBatch, norm: str = "mean_std") -> np.ndarray:
    tab = Table(batch)
    return _per_row(tab, tab.episode_adv(norm))


def rloo(batch: StepBatch) -> np.ndarray:
    tab = Table(batch)
    adv = {}
    for members in tab.episodes_of.values():
        for e in members:
            others = [tab.R[x] for x in members if x != e]
            adv[e] = tab.R[e] - _mean(others) if others else 0.0
    return _per_row(tab, adv)


def reinforce_pp(batch: StepBatch) -> np.ndarray:
    tab = Table(batch)
    centred = tab.episode_adv("mean")
    keys = list(centred)
    white = dict(zip(keys, _whiten([centred[e] for e in keys]), strict=True))
    return _per_row(tab, white)


# ------------------------------------------------------------------ GiGPO


def _similar_clusters(tab: Table, ratio: float) -> dict[tuple[int, Hashable], int]:
    """(group, anchor) -> cluster index, greedy over texts ordered by (first t, text)."""
    first_t: dict[tuple[int, Hashable], int] = {}
    for i in range(tab.n):
        key = (tab.col("group", i), tab.col("anchor", i))
        first_t[key] = min(first_t.get(key, 10**9), tab.col("t", i))
    by_group: dict[int, list[Hashable]] = defaultdict(list)
    for g, a in first_t:
        by_group[g].append(a)
    cluster = {}
    for g, anchors in by_group.items():
        reps: list[str] = []
        for a in sorted(anchors, key=lambda a: (first_t[(g, a)], str(a))):
            text = str(a)
            found = next(
                (
                    k
                    for k, rep in enumerate(reps)
                    if difflib.SequenceMatcher(None, text, rep).ratio() >= ratio
                ),
                None,
            )
            if found is None:
                reps.append(text)
                found = len(reps) - 1
            cluster[(g, a)] = found
    return cluster


def gigpo_terms(
    batch: StepBatch,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    norm: str = "mean",
    episode_norm: str | None = None,
    episode_stats: str = "episodes",
    similarity: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    tab = Table(batch)
    episode_norm = norm if episode_norm is None else episode_norm  # the reference's one mode
    if episode_stats == "episodes":
        A_E = _per_row(tab, tab.episode_adv(episode_norm))
    else:
        A_E = np.zeros(tab.n)
        for members in tab.episodes_of.values():
            values = [tab.R[e] for e in members for _ in tab.rows_of[e]]
            for e in members:
                for i in tab.rows_of[e]:
                    A_E[i] = _norm(tab.R[e], values, episode_norm) if len(members) > 1 else 0.0
    G = tab.discounted(tab.cols["reward"], gamma)
    clusters = _similar_clusters(tab, similarity) if similarity is not None else None
    step_rows: dict[tuple[int, Hashable], list[int]] = defaultdict(list)
    for i in range(tab.n):
        key = (tab.col("group", i), tab.col("anchor", i))
        step_rows[(key[0], clusters[key]) if clusters is not None else key].append(i)
    A_S = np.zeros(tab.n)
    for rows in step_rows.values():
        Gs = [G[i] for i in rows]
        for i in rows:
            A_S[i] = _norm(G[i], Gs, norm)
    return A_E + step_weight * A_S, A_E, A_S, np.array(G)


def gigpo(batch: StepBatch, **options: Any) -> np.ndarray:
    return gigpo_terms(batch, **options)[0]


# ------------------------------------------------------------------ ProxMO


def _sparse_rows(batch: StepBatch, features: ArrayLike | None) -> list[dict[int, float]]:
    """Each row's L2-normalised vector as {feature index: value}."""
    if features is not None:
        rows = []
        for vec in np.asarray(features, dtype=float).tolist():
            norm = math.sqrt(sum(v * v for v in vec))
            rows.append({k: v / norm for k, v in enumerate(vec) if v != 0.0} if norm else {})
        return rows
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = [str(a) for a in batch["anchor"].tolist()]
    vec = TfidfVectorizer(token_pattern=r"(?u)\b\w+\b", max_features=1024)
    vec.fit(sorted(set(texts)))
    X = vec.transform(texts).tocsr()
    return [
        dict(zip(X[i].indices.tolist(), X[i].data.tolist(), strict=True)) for i in range(len(texts))
    ]


def _dot(a: dict[int, float], b: dict[int, float]) -> float:
    return sum(v * b[k] for k, v in a.items() if k in b)


def proxmo_terms(
    batch: StepBatch,
    tau: float = 0.1,
    alpha: float = 4.0,
    beta: float = 0.1,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    episode_norm: str = "mean_std",
    features: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    tab = Table(batch)
    A_E = tab.episode_adv(episode_norm)
    win = {
        e: (bool(tab.col("success", rows[0])) if "success" in tab.cols else tab.R[e] > 0.5)
        for e, rows in tab.rows_of.items()
    }
    w = {}
    for members in tab.episodes_of.values():
        p = sum(win[e] for e in members) / len(members)
        for e in members:
            x = (1 - p) ** alpha if win[e] else -(p**alpha)
            w[e] = 1 + beta * (1 / (1 + math.exp(-x)) - 0.5)
    G = tab.discounted(tab.cols["reward"], gamma)
    vecs = _sparse_rows(batch, features)
    rows_of_group: dict[int, list[int]] = defaultdict(list)
    for i in range(tab.n):
        rows_of_group[tab.col("group", i)].append(i)
    A_S = np.zeros(tab.n)
    for rows in rows_of_group.values():
        for i in rows:
            logits = [_dot(vecs[i], vecs[j]) / tau for j in rows]
            top = max(logits)
            weights = [math.exp(z - top) for z in logits]
            b = sum(wj * G[j] for wj, j in zip(weights, rows, strict=True)) / sum(weights)
            A_S[i] = G[i] - b
    ww = _per_row(tab, w)
    adv = ww * _per_row(tab, A_E) + step_weight * A_S
    return adv, _per_row(tab, A_E), A_S, ww


def proxmo(batch: StepBatch, **options: Any) -> np.ndarray:
    return proxmo_terms(batch, **options)[0]


# ------------------------------------------------------------------ value-based


def vineppo(batch: StepBatch, gamma: float = 1.0, whiten: bool = True) -> np.ndarray:
    tab = Table(batch)
    A = [0.0] * tab.n
    for rows in tab.rows_of.values():
        for k, i in enumerate(rows):
            v_next = tab.col("value", rows[k + 1]) if k + 1 < len(rows) else 0.0
            A[i] = tab.col("reward", i) + gamma * v_next - tab.col("value", i)
    return np.array(_whiten(A) if whiten else A)


def gae_terms(
    batch: StepBatch, gamma: float = 1.0, lam: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    tab = Table(batch)
    A = [0.0] * tab.n
    for rows in tab.rows_of.values():
        running = 0.0
        for k in reversed(range(len(rows))):
            i = rows[k]
            v_next = tab.col("value", rows[k + 1]) if k + 1 < len(rows) else 0.0
            delta = tab.col("reward", i) + gamma * v_next - tab.col("value", i)
            running = delta + gamma * lam * running
            A[i] = running
    returns = [A[i] + tab.col("value", i) for i in range(tab.n)]
    return np.array(A), np.array(returns)


def gae(batch: StepBatch, **options: Any) -> np.ndarray:
    return gae_terms(batch, **options)[0]


def igpo(batch: StepBatch, gamma: float = 1.0) -> np.ndarray:
    tab = Table(batch)
    r = [0.0] * tab.n
    for rows in tab.rows_of.values():
        for k, i in enumerate(rows):
            r[i] = tab.col("reward", i) if k == len(rows) - 1 else tab.col("info_gain", i)
    rows_of_group: dict[int, list[int]] = defaultdict(list)
    for i in range(tab.n):
        rows_of_group[tab.col("group", i)].append(i)
    z = [0.0] * tab.n
    for rows in rows_of_group.values():
        values = [r[i] for i in rows]
        for i in rows:
            z[i] = _norm(r[i], values, "mean_std")
    return np.array(tab.discounted(z, gamma))


# ------------------------------------------------------------------ trees


def _leaf(tab: Table, e: int) -> tuple:
    return tab.col("path", tab.rows_of[e][-1])


def treepo(batch: StepBatch, whiten: bool = True) -> np.ndarray:
    tab = Table(batch)
    adv = {}
    for members in tab.episodes_of.values():
        for e in members:
            path, advs = _leaf(tab, e), []
            for d in range(len(path) + 1):
                sub = [
                    x for x in members if _leaf(tab, x)[:d] == path[:d] and len(_leaf(tab, x)) >= d
                ]
                if d == 0 or len(sub) >= 2:
                    advs.append(tab.R[e] - _mean([tab.R[x] for x in sub]))
            adv[e] = _mean(advs)
    if whiten:
        keys = list(adv)
        adv = dict(zip(keys, _whiten([adv[e] for e in keys]), strict=True))
    return _per_row(tab, adv)


def arpo(batch: StepBatch, attribution: str = "soft") -> np.ndarray:
    tab = Table(batch)
    A = _per_row(tab, tab.episode_adv("mean_std"))
    if attribution == "soft":
        return A
    copies: dict[tuple, list[float]] = defaultdict(list)
    keys = [(tab.col("group", i), tab.col("path", i), tab.col("t", i)) for i in range(tab.n)]
    for i, key in enumerate(keys):
        copies[key].append(A[i])
    return np.array([_mean(copies[key]) for key in keys])


def elpo_terms(
    batch: StepBatch, branch_weight: float = 0.5, traj_weight: float = 0.5
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tab = Table(batch)
    z = tab.episode_adv("mean_std")
    A_b, A_t = np.zeros(tab.n), np.zeros(tab.n)
    for members in tab.episodes_of.values():
        leaves = {_leaf(tab, e): e for e in members}
        nodes = {p[:d] for p in leaves for d in range(len(p) + 1)}
        children = {
            n: [c for c in nodes if len(c) == len(n) + 1 and c[: len(n)] == n] for n in nodes
        }
        memo: dict[tuple, float] = {}

        def value(node: tuple, children=children, leaves=leaves, memo=memo) -> float:
            if node not in memo:
                kids = children[node]
                memo[node] = _mean([value(c) for c in kids]) if kids else tab.R[leaves[node]]
            return memo[node]

        for e in members:
            for i in tab.rows_of[e]:
                node = tab.col("path", i)
                if node:
                    sibs = [value(c) for c in children[node[:-1]]]
                    A_b[i] = _norm(value(node), sibs, "mean_std")
                below = [z[leaves[p]] for p in leaves if p[: len(node)] == node]
                A_t[i] = _mean(below)
    return branch_weight * A_b + traj_weight * A_t, A_b, A_t


def elpo(batch: StepBatch, **options: Any) -> np.ndarray:
    return elpo_terms(batch, **options)[0]


REFERENCES = {
    "grpo": grpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "gigpo": gigpo,
    "proxmo": proxmo,
    "vineppo": vineppo,
    "gae": gae,
    "igpo": igpo,
    "treepo": treepo,
    "arpo": arpo,
    "elpo": elpo,
}
