"""Episodes and steps as the rollout produces them, and their conversion to the step table.

A `Step` is one prompt -> action sample with what the env answered; an `Episode` is one
multi-turn trajectory, with its typed events (``Episode.events``, ``cairn.data.events``),
shown under their saved keys next to free-form payload in ``Episode.meta``.
`to_step_batch` flattens episodes into the `StepBatch` every advantage estimator reads;
`to_records` gives the JSON form stored in the run directory.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any

import numpy as np

from cairn.data.events import EpisodeEvents, EpisodeMeta
from cairn.data.step_batch import StepBatch

__all__ = [
    "SOURCE_FLAGS",
    "Episode",
    "Source",
    "Step",
    "prompt_texts",
    "to_records",
    "to_step_batch",
]


class Source(IntEnum):
    """Where an episode's actions came from: the ``source`` column of the step table."""

    ON_POLICY = 0  # sampled from the current policy
    DEMO = 1  # an off-policy demonstration (LUFFY)
    MEMORY = 2  # sampled with tips from memory (EMPO2)

    @property
    def from_policy(self) -> bool:
        """Sampled from the policy being trained (rollout statistics count only these)."""
        return self is not Source.DEMO


# Per-token loss flags that follow from an episode's source: every token batch carries
# them, True on the steps of the episodes from that source (LossConfig says what they do).
SOURCE_FLAGS: dict[Source, str] = {Source.DEMO: "off_policy"}


@dataclass
class Step:
    """One turn. ``reward`` is the env's reward; ``penalty`` what the agent subtracted."""

    t: int
    observation: str
    anchor: Hashable
    action: str
    completion: str
    reward: float
    valid: bool = True
    penalty: float = 0.0
    prompt_ids: list[int] = field(default_factory=list)
    action_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    allowed: list[list[int]] | None = None
    train_prompt_ids: list[int] | None = None  # scored on instead of prompt_ids (EMPO2)
    loss_mask: list[bool] | None = None  # per action token; False: not trained (SSRL)
    columns: dict[str, Any] = field(default_factory=dict)  # optional StepBatch columns
    shaped: dict[str, float] = field(default_factory=dict)  # named reward terms (cairn.rewards)
    flags: dict[str, bool] = field(default_factory=dict)  # per-token loss flags (LossConfig)

    def __post_init__(self) -> None:
        # Equal observation texts become one object with its hash computed once, here at
        # rollout time: anchor grouping then probes cached hashes and compares by identity
        # (benchmarks/speed/advantages.py), and a batch holds each distinct observation once.
        if type(self.anchor) is str:
            self.anchor = sys.intern(self.anchor)

    @property
    def total_reward(self) -> float:
        """The reward the learner sees: env reward - invalid penalty + shaped terms."""
        return self.reward - self.penalty + sum(self.shaped.values())


@dataclass
class Episode:
    """One trajectory of a task instance; episodes of one instance share ``group``.

    ``meta``: an ``EpisodeMeta`` (a dict given is wrapped in one): free-form payload and the
    typed ``events`` under their saved keys (``cairn.data.events``).
    """

    id: int
    group: int
    task: int  # the env seed of the task instance
    steps: list[Step] = field(default_factory=list)
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    source: int = Source.ON_POLICY  # a Source
    path: tuple[int, ...] = ()
    meta: EpisodeMeta = field(default_factory=EpisodeMeta)

    def __post_init__(self) -> None:
        if not isinstance(self.meta, EpisodeMeta):
            self.meta = EpisodeMeta(self.meta)

    @property
    def events(self) -> EpisodeEvents:
        """What happened to the episode besides its steps (end, fault, format errors, ...)."""
        return self.meta.events

    @property
    def ret(self) -> float:
        return float(sum(s.total_reward for s in self.steps))

    @property
    def invalid(self) -> int:
        return sum(not s.valid for s in self.steps)


def to_step_batch(episodes: Sequence[Episode], **extra: np.ndarray) -> StepBatch:
    """One row per step, in episode order.

    Optional columns come from the steps' ``columns`` dicts (a key must be on every step),
    ``path`` from the episodes when any has one, and ``extra`` arrays (length N).
    """
    rows = [(e, s) for e in episodes for s in e.steps]
    # arrays, and lists that from_columns converts
    columns: dict[str, Iterable[object]] = dict(extra)
    keys = {k for _, s in rows for k in s.columns}
    for k in keys:
        missing = sum(k not in s.columns for _, s in rows)
        if missing:
            raise ValueError(f"step column {k!r} is missing on {missing} of {len(rows)} steps")
        columns.setdefault(k, [s.columns[k] for _, s in rows])
    if any(e.path for e in episodes):
        columns.setdefault("path", [e.path for e, _ in rows])
    return StepBatch.from_columns(
        group=np.fromiter((e.group for e, _ in rows), np.int64, len(rows)),
        episode=np.fromiter((e.id for e, _ in rows), np.int64, len(rows)),
        t=np.fromiter((s.t for _, s in rows), np.int64, len(rows)),
        reward=np.fromiter((s.total_reward for _, s in rows), np.float64, len(rows)),
        anchor=[s.anchor for _, s in rows],
        success=np.fromiter((e.success for e, _ in rows), np.bool_, len(rows)),
        source=np.fromiter((e.source for e, _ in rows), np.int64, len(rows)),
        **columns,
    )


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (character by character)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid)
    return lo


def _delta(prev: str, text: str) -> dict[str, int | str]:
    """``text`` as an edit of ``prev``: ``prev[:keep] + prev[from:from + len] + add``. After
    the common prefix (the instruction), a prompt whose history window slid by a turn goes
    on with a stretch of the previous prompt (the turns both show); that stretch is stored
    as a range, so only the new turn is stored as text."""
    keep = _common_prefix(prev, text)
    best = (keep, 0, 0)  # (keep, from, len)
    # the prefix may end inside a word ("o0" vs "o1"): also try from the word's start
    cut = max(text.rfind(" ", 0, keep), text.rfind("\n", 0, keep)) + 1
    for k in {keep, cut}:
        rest = text[k:]
        start = prev.find(rest[:8], k) if len(rest) >= 8 else -1
        for _ in range(16):  # the longest run among the first places the probe matches
            if start < 0:
                break
            n = _common_prefix(prev[start:], rest)
            if k + n > best[0] + best[2]:
                best = (k, start, n)
            start = prev.find(rest[:8], start + 1)
    keep, start, n = best
    out: dict[str, int | str] = {"keep": keep}
    if n:
        out["from"], out["len"] = start, n
    out["add"] = text[keep + n :]
    return out


def _prompt_deltas(steps: Sequence[Step], decode: Callable[[list[int]], str]) -> list[dict]:
    """Each step's prompt text as an edit of the previous step's (``_delta``; the first
    step's is all ``add``). A multi-turn prompt repeats the instruction and the turns before
    it, so each turn stores only what is new: an episode's prompts cost about one prompt
    and its turns, not one prompt per turn."""
    out, prev = [], ""
    for s in steps:
        text = decode(s.prompt_ids) if s.prompt_ids else ""
        out.append(_delta(prev, text))
        prev = text
    return out


def _apply(prev: str, delta: Mapping[str, int | str]) -> str:
    start, n = int(delta.get("from", 0)), int(delta.get("len", 0))
    return prev[: int(delta.get("keep", 0))] + prev[start : start + n] + str(delta.get("add", ""))


def prompt_texts(record: dict[str, Any]) -> list[str | None]:
    """The full prompt text of each step of an episode record (``to_records``' output, as
    read back from a trajectory file); None for a step stored without its prompt."""
    out: list[str | None] = []
    prev = ""
    for step in record.get("steps", []):
        delta = step.get("prompt")
        if not isinstance(delta, dict):
            out.append(None)
            prev = ""
            continue
        prev = _apply(prev, delta)
        out.append(prev)
    return out


def to_records(
    episodes: Sequence[Episode],
    decode: Callable[[list[int]], str] | None = None,
    **per_step: np.ndarray,
) -> list[dict[str, Any]]:
    """JSON-ready dicts (token ids dropped); ``per_step`` arrays (N,) are attached per step.

    Each step keeps its anchor as text, so a viewer can regroup GiGPO's step groups. With
    ``decode`` (the policy tokenizer's ids -> text), each step also keeps the prompt the
    model saw (``prompt``: ``{"keep", "from", "len", "add"}``, an edit of the step before's
    prompt, ``_delta``; ``prompt_texts`` rebuilds the full texts).
    """
    out, row = [], 0
    for e in episodes:
        prompts = _prompt_deltas(e.steps, decode) if decode is not None else None
        rec = {f.name: getattr(e, f.name) for f in fields(e) if f.name != "steps"}
        rec["meta"] = e.meta.to_dict()  # the events under their saved keys (JSON-ready)
        rec["return"] = e.ret
        steps: list[dict[str, Any]] = []
        for s in e.steps:
            d = {
                "t": s.t,
                "observation": s.observation,
                "anchor": str(s.anchor),
                "action": s.action,
                "completion": s.completion,
                "reward": s.reward,
                "penalty": s.penalty,
                "valid": s.valid,
                "logprob": float(sum(s.logprobs)),
                **({"shaped": s.shaped} if s.shaped else {}),
                **s.columns,
            }
            d.update({k: float(v[row]) for k, v in per_step.items()})
            if prompts is not None:
                d["prompt"] = prompts[len(steps)]
            steps.append(d)
            row += 1
        rec["steps"] = steps
        out.append(rec)
    return out
