"""EMPO2's memory of tips: a durable store, similarity retrieval, tips in the prompt, modes.

EMPO2 (Exploratory Memory-augmented Policy Optimisation, arXiv 2602.23008, Sec. 3):
after every episode a *tip* (what was learned, how far the episode got) is written to a
memory; memory-guided rollouts show retrieved tips in a delimited ``<tip> ... </tip>``
block of the prompt. Each iteration draws one of three modes (paper: memory rollout with
p = 0.25, off-policy given memory with q = 2/3; code: 0.75 / 0.08 / 0.17):

    on_policy   no tips: plain GRPO-style rollout and update
    tips        sample with tips, train on that same prompt (memory-guided exploration)
    off_policy  sample with tips, train on the prompt *without* them: the current
                log-prob is log pi(a | s) while the behaviour log-prob is
                log pi_old(a | s, tips) (``Step.train_prompt_ids``; the loss clips the
                ratio and drops a whole turn whose min old log-prob is below -5)

Store (``MemoryStore``): SQLite, one partition per task (here: per instruction text, the
env's task description), exact-string dedup of (context, tip), at most ``capacity`` tips
per partition with the oldest evicted first, one transaction per episode (a killed run
keeps every tip committed before the kill; ``--resume`` reopens the same file and puts it
back to the checkpoint's contents, ``state_dict``, so a resumed run repeats an uninterrupted
one exactly).

Retrieval (``TipMemory.retrieve``): the tips whose context has cosine similarity above
``threshold`` (0.5) with the current observation, then the ``top_k`` (10) with the highest
stored episode score (ties: more similar, then newer).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cairn.agent import PromptBuilder, tagged
from cairn.data.episode import Episode, Source
from cairn.exploration.config import MODES, check_mode_probs
from cairn.exploration.embed import Embedder

__all__ = [
    "MODES",
    "MemoryStore",
    "Tip",
    "TipMemory",
    "TipPromptBuilder",
    "apply_mode",
    "check_mode_probs",
    "draw_mode",
]

SOURCE_MEMORY = Source.MEMORY  # Episode.source of memory-guided rollouts


@dataclass(frozen=True)
class Tip:
    """One memory entry: ``text`` shown in the prompt, retrieved by similarity of ``context``
    to the current observation, ranked by ``score`` (the return of the episode that wrote it)."""

    context: str
    text: str
    score: float


def partition_key(instruction: str) -> str:
    """The partition a task's tips live in: a digest of its instruction text."""
    return hashlib.sha1(instruction.encode()).hexdigest()[:16]


class MemoryStore:
    """SQLite table of tips: partitions, dedup, capacity, oldest-first eviction.

    ``add(partition, tips)`` is one transaction (call it once per episode).
    """

    def __init__(self, path: str | Path, capacity: int = 1000):
        if capacity < 1:
            raise ValueError(f"memory capacity must be >= 1, got {capacity}")
        self.path, self.capacity = Path(path), capacity
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across a kill
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS tips (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "partition TEXT NOT NULL, context TEXT NOT NULL, text TEXT NOT NULL, "
            "score REAL NOT NULL, UNIQUE(partition, context, text))"
        )
        self.db.commit()
        self.version = 0  # bumped on every change, so readers know to refresh

    def add(self, partition: str, tips: Sequence[Tip]) -> int:
        """Insert ``tips`` (a duplicate keeps its age and the higher score); returns how many
        rows the partition holds afterwards. Evicts the oldest beyond ``capacity``."""
        with self.db:  # one transaction, committed on exit
            self.db.executemany(
                "INSERT INTO tips (partition, context, text, score) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(partition, context, text) DO UPDATE SET "
                "score = max(score, excluded.score)",
                [(partition, t.context, t.text, float(t.score)) for t in tips],
            )
            self.db.execute(
                "DELETE FROM tips WHERE partition = ? AND id NOT IN "
                "(SELECT id FROM tips WHERE partition = ? ORDER BY id DESC LIMIT ?)",
                (partition, partition, self.capacity),
            )
        self.version += 1
        return self.count(partition)

    def rows(self, partition: str) -> list[tuple[int, str, str, float]]:
        """(id, context, text, score) of a partition, oldest first."""
        cur = self.db.execute(
            "SELECT id, context, text, score FROM tips WHERE partition = ? ORDER BY id",
            (partition,),
        )
        return cur.fetchall()

    def count(self, partition: str | None = None) -> int:
        if partition is None:
            return self.db.execute("SELECT count(*) FROM tips").fetchone()[0]
        return self.db.execute(
            "SELECT count(*) FROM tips WHERE partition = ?", (partition,)
        ).fetchone()[0]

    # -- checkpointing: the store goes back to a checkpoint's contents on --resume -------------
    def state_dict(self) -> dict[str, Any]:
        """Every row (id, partition, context, text, score) and the id counter, so that a
        resumed run holds exactly the tips of its checkpoint and numbers new ones alike."""
        rows = self.db.execute(
            "SELECT id, partition, context, text, score FROM tips ORDER BY id"
        ).fetchall()
        seq = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'tips'").fetchone()
        return {"rows": [list(r) for r in rows], "next_id": (seq[0] if seq else 0) + 1}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the contents with ``state`` (one transaction): tips written after the
        checkpoint, e.g. by an iteration a kill interrupted, are dropped."""
        with self.db:
            self.db.execute("DELETE FROM tips")
            self.db.executemany(
                "INSERT INTO tips (id, partition, context, text, score) VALUES (?, ?, ?, ?, ?)",
                [tuple(r) for r in state["rows"]],
            )
            self.db.execute("DELETE FROM sqlite_sequence WHERE name = 'tips'")
            self.db.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('tips', ?)",
                (int(state["next_id"]) - 1,),
            )
        self.version += 1

    def close(self) -> None:
        self.db.close()


class TipMemory:
    """Retrieval over a ``MemoryStore``: threshold on similarity, then top-k by score."""

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        threshold: float = 0.5,
        top_k: int = 10,
    ):
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"memory threshold is a cosine similarity in [-1, 1], got {threshold}")
        if top_k < 1:
            raise ValueError(f"memory top_k must be >= 1, got {top_k}")
        self.store, self.embedder = store, embedder
        self.threshold, self.top_k = threshold, top_k
        self._tables: dict[str, tuple[int, list, np.ndarray]] = {}
        self._hits: dict[tuple[str, str], list[str]] = {}
        self._version = -1

    def add(self, instruction: str, tips: Sequence[Tip]) -> None:
        if tips:
            self.store.add(partition_key(instruction), tips)

    def retrieve(self, instruction: str, observation: str) -> list[str]:
        """Tip texts for the current ``observation`` of a task (best first)."""
        if self._version != self.store.version:
            self._tables.clear()
            self._hits.clear()
            self._version = self.store.version
        key = (instruction, observation)
        if key not in self._hits:
            self._hits[key] = self._search(partition_key(instruction), observation)
        return self._hits[key]

    def _search(self, partition: str, observation: str) -> list[str]:
        if partition not in self._tables:
            rows = self.store.rows(partition)
            contexts = [r[1] for r in rows]
            emb = self.embedder.encode(contexts, contexts) if rows else np.zeros((0, 1))
            self._tables[partition] = (self.store.version, rows, emb)
        _, rows, emb = self._tables[partition]
        if not rows:
            return []
        q = self.embedder.encode([observation], [r[1] for r in rows])[0]  # (d,)
        sims = emb @ q  # (M,)
        return rank_tips(rows, sims, self.threshold, self.top_k)


def rank_tips(
    rows: Sequence[tuple[int, str, str, float]], sims: np.ndarray, threshold: float, top_k: int
) -> list[str]:
    """Texts of rows with ``sims > threshold``, best ``top_k`` by (score, similarity, id)."""
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    scores = np.array([r[3] for r in rows], dtype=np.float64)
    keep = np.flatnonzero(sims > threshold)
    order = np.lexsort((-ids[keep], -sims[keep], -scores[keep]))  # last key is primary
    return [rows[i][2] for i in keep[order][:top_k]]


class TipPromptBuilder:
    """A ``PromptBuilder`` that inserts retrieved tips after the instruction.

    Records, for every prompt it built with tips, the same prompt without them and the
    tips shown, so that the off-policy mode can train on the plain prompt: ``shown`` maps
    a flat prompt's text to (plain text, tips), ``shown_ids`` a chat prompt's ids (built
    token-in/token-out by ``chat_ids``) to (plain ids, tips).
    """

    def __init__(self, base: PromptBuilder, memory: TipMemory):
        self.base, self.memory = base, memory
        self.shown: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.shown_ids: dict[tuple[int, ...], tuple[list[int], tuple[str, ...]]] = {}

    def __getattr__(self, name: str) -> Any:  # history, chat_template, ...
        return getattr(self.base, name)

    def with_example(self, example: tuple[tuple[str, str], ...]) -> TipPromptBuilder:
        """This builder over a base showing ``example`` (a per-episode demonstration); the
        memory and the records of prompts shown are shared with this one."""
        view = TipPromptBuilder(self.base.with_example(example), self.memory)
        view.shown, view.shown_ids = self.shown, self.shown_ids
        return view

    def _block(self, extra: str, tips: Sequence[str]) -> str:
        return "\n".join(x for x in (extra, tagged("tip", tips)) if x)

    def build(
        self, instruction: str, past: Sequence[tuple[str, str]], observation: str, extra: str = ""
    ) -> str:
        plain = self.base.build(instruction, past, observation, extra)
        tips = self.memory.retrieve(instruction, observation)
        if not tips:
            return plain
        text = self.base.build(instruction, past, observation, self._block(extra, tips))
        self.shown[text] = (plain, tuple(tips))
        return text

    def chat_ids(
        self,
        encode: Callable[[str], list[int]],
        eos_id: int | None,
        instruction: str,
        shown: Sequence[tuple[str, Sequence[int]]],
        observation: str,
        extra: str = "",
        turn: int | None = None,
    ) -> list[int]:
        """``PromptBuilder.chat_ids`` with the tips block after the instruction (system message)."""
        args = (encode, eos_id, instruction, shown, observation)
        plain = self.base.chat_ids(*args, extra, turn)
        tips = self.memory.retrieve(instruction, observation)
        if not tips:
            return plain
        ids = self.base.chat_ids(*args, self._block(extra, tips), turn)
        self.shown_ids[tuple(ids)] = (plain, tuple(tips))
        return ids


def draw_mode(rng: np.random.Generator, probs: dict[str, float]) -> str:
    """One mode drawn with ``probs`` (validated by ``check_mode_probs``; missing: 0)."""
    return MODES[int(rng.choice(len(MODES), p=[probs.get(m, 0.0) for m in MODES]))]


def apply_mode(
    episodes: Sequence[Episode],
    mode: str,
    shown: dict[str, tuple[str, tuple[str, ...]]],
    encode: Callable[[str], list[int]],
    shown_ids: dict[tuple[int, ...], tuple[list[int], tuple[str, ...]]] | None = None,
) -> int:
    """Mark memory-guided episodes after a rollout with ``TipPromptBuilder``.

    Every episode of a ``tips`` / ``off_policy`` iteration gets ``source = 2`` and
    ``events.memory_mode``; an episode that was shown tips lists them in
    ``events.tips``; in ``off_policy`` mode each step sampled with tips trains on the
    prompt without them (``train_prompt_ids``). ``shown`` / ``shown_ids``: the builder's
    records of flat and chat prompts. Returns the number of steps shown tips.
    """
    if mode not in MODES:
        raise ValueError(f"unknown memory mode {mode!r}; allowed: {', '.join(MODES)}")
    if mode == "on_policy":
        return 0
    tipped = 0
    by_ids: dict[tuple[int, ...], tuple[str | list[int], tuple[str, ...]]] = {
        tuple(encode(text)): hit for text, hit in shown.items()
    }
    by_ids.update(shown_ids or {})
    for e in episodes:
        e.source, e.events.memory_mode = SOURCE_MEMORY, mode
        seen: list[str] = []
        for s in e.steps:
            hit = by_ids.get(tuple(s.prompt_ids))
            if hit is None:
                continue
            tipped += 1
            seen += [t for t in hit[1] if t not in seen]
            if mode == "off_policy":
                plain = hit[0]
                s.train_prompt_ids = encode(plain) if isinstance(plain, str) else list(plain)
                s.flags["tips_stripped"] = True  # the loss's turn mask (LossConfig)
        if seen:
            e.events.tips = seen
    return tipped
