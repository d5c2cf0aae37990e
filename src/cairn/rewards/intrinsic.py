"""EMPO2's intrinsic exploration reward: novelty of the visited state (arXiv 2602.23008).

The reward keeps a table of distinct states seen so far, each with a visit count. A state
is *similar* to a table entry when it is the same anchor (``similarity="exact"``, a
count-based bonus) or when the cosine similarity of their embeddings reaches
``threshold`` (``similarity="embedding"``, EMPO2's rule; TF-IDF or MiniLM, see
``cairn.exploration.embed``). Then, for step t acting on state s_t,

    n(s_t) = visits to s_t's entry so far, this iteration's visits included
    r_int  = weight / n(s_t)                  (step.shaped["novelty"])

All visits of one iteration are counted before any reward is given, so the rewards do
not depend on the order of episodes or steps (a state seen by 8 episodes of this batch
and never before gets weight/8 on each). New states of a batch are clustered greedily in
sorted text order (embedding mode), which is order-free too.

The table is part of the run's state: ``state_dict`` / ``load_state_dict`` let the
trainer checkpoint it, so a resumed run gives the same rewards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.data.episode import Episode

if TYPE_CHECKING:
    from cairn.exploration.embed import Embedder
    from cairn.rewards.registry import RewardContext

__all__ = ["Novelty"]

_SIMILARITY = ("exact", "embedding")


class Novelty:
    """``novelty``: ``weight / n`` with n the count of similar past states (step.shaped)."""

    name = "novelty"

    def __init__(
        self,
        weight: float = 1.0,
        similarity: str = "exact",
        threshold: float = 0.95,
        embedder: str = "tfidf",
    ):
        if not np.isfinite(weight) or weight < 0:
            raise ValueError(f"novelty weight must be a finite number >= 0, got {weight!r}")
        if similarity not in _SIMILARITY:
            raise ValueError(f"novelty similarity must be one of {_SIMILARITY}, got {similarity!r}")
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"novelty threshold is a cosine in [-1, 1], got {threshold!r}")
        self.weight, self.similarity, self.threshold = float(weight), similarity, threshold
        self.embedder_name = embedder
        self._embedder: Embedder | None = None
        self.states: list[str] = []  # distinct states (entry texts)
        self.counts: list[int] = []  # visits per entry

    def __call__(self, episodes: Sequence[Episode], ctx: RewardContext | None = None) -> None:
        steps = [s for e in episodes for s in e.steps]
        keys = [str(s.anchor) for s in steps]
        entry = self._entries(sorted(set(keys)))  # state text -> entry index
        visits = Counter(entry[k] for k in keys)
        for j, c in visits.items():
            self.counts[j] += c
        for s, k in zip(steps, keys, strict=True):
            s.shaped[self.name] = self.weight / self.counts[entry[k]]

    def _entries(self, new_keys: list[str]) -> dict[str, int]:
        """Map each distinct state of the batch to a table entry, adding entries as needed."""
        if self.similarity == "exact":
            index = {s: j for j, s in enumerate(self.states)}
            for k in new_keys:
                if k not in index:
                    index[k] = self._add(k)
            return {k: index[k] for k in new_keys}
        return self._embedding_entries(new_keys)

    def _embedding_entries(self, keys: list[str]) -> dict[str, int]:
        from cairn.exploration.embed import make_embedder

        if self._embedder is None:
            self._embedder = make_embedder(self.embedder_name)
        embedder = self._embedder
        n_old = len(self.states)
        corpus = self.states + keys
        emb = embedder.encode(corpus, corpus)  # (n_old + K, d), unit rows
        rows = list(range(n_old))  # rows[j]: the embedding row of table entry j
        out: dict[str, int] = {}
        for i, k in enumerate(keys):
            row = emb[n_old + i]
            if rows:
                sims = emb[rows] @ row  # (entries,)
                best = int(np.argmax(sims))
                if sims[best] >= self.threshold:
                    out[k] = best
                    continue
            out[k] = self._add(k)
            rows.append(n_old + i)
        return out

    def _add(self, text: str) -> int:
        self.states.append(text)
        self.counts.append(0)
        return len(self.states) - 1

    # -- checkpointing ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"states": list(self.states), "counts": list(self.counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.states, self.counts = list(state["states"]), list(state["counts"])
