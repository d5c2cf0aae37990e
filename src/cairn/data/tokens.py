"""The token batch a loss consumes, and its collation into padded tensors.

Rows are steps. Each row has its prompt ids, its action ids, the behaviour log-probs of
those action tokens, the step's advantage (broadcast to its action tokens), optionally
the ids each action token was restricted to (constrained decoding) and per-row flags.

Collated layout (`ScoreInputs`): each distinct context (prompt + action minus its last
token) once, left-padded so every context ends in the last column; action tokens are
right-aligned in A columns. The model then needs logits for the last A positions only,
and a step revisited by several episodes of a group costs one forward, not several.

Packed episodes (``TokenBatch.from_episodes(..., pack=True)``): when every turn's prompt
of an episode is the previous turn's prompt + its sampled ids + new text (the chat prompt
style without a history cut), the episode is one row: its first prompt, then everything
after it up to the last action as the "action" span, with the env's text between actions
masked out (``token_mask``) and each turn's advantage on its own tokens
(``token_advantages``). A T-turn episode then costs one forward over its last prompt
instead of T forwards over ever longer prompts (O(T) prompt tokens instead of O(T^2)),
with the same log-probs at every action token. Other episodes keep one row per turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import torch

from cairn.data.episode import SOURCE_FLAGS, Episode, Step

__all__ = [
    "Minibatch",
    "PackedRow",
    "ScoreInputs",
    "TokenBatch",
    "collate_scoring",
    "extends",
    "left_pad",
    "pack_episode",
    "right_align",
    "runs",
]


@dataclass
class ScoreInputs:
    """Model inputs for teacher-forced scoring of B action rows.

    The model reads U <= B distinct contexts, each a prompt followed by all but the last
    token of its action (the last token's own logits are never needed); rows that share a
    context share one forward pass. Contexts are left-padded to a common width L.

    input_ids (U, L), attention_mask (U, L): the distinct contexts;
    context (B,) long: the context row of each action row;
    actions (B, A), action_mask (B, A) bool: action ids right-aligned in A columns;
    allowed (B, A, K) long padded with -1, or None when no row is restricted; inside a
    restricted batch, a position whose ids are all -1 is unrestricted.
    The logits of context u's last A positions predict the action tokens of its rows.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    context: torch.Tensor
    actions: torch.Tensor
    action_mask: torch.Tensor
    allowed: torch.Tensor | None = None


def right_align(rows: Sequence[Sequence[float]], width: int, fill: float = 0.0) -> torch.Tensor:
    """Ragged rows -> (B, width) float tensor, each row in its last len(row) columns."""
    out = torch.full((len(rows), width), fill, dtype=torch.float32)
    for i, r in enumerate(rows):
        if len(r):
            out[i, width - len(r) :] = torch.as_tensor(r, dtype=torch.float32)
    return out


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(map(len, rows)))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if len(row):
            ids[i, width - len(row) :] = torch.as_tensor(row, dtype=torch.long)
            attn[i, width - len(row) :] = 1
    return ids, attn


def collate_scoring(
    prompts: Sequence[Sequence[int]],
    actions: Sequence[Sequence[int]],
    allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
    pad_id: int = 0,
) -> ScoreInputs:
    """Build ``ScoreInputs`` from ragged prompt / action id lists (B rows)."""
    keys = [(*p, *a[:-1]) for p, a in zip(prompts, actions, strict=True)]
    index: dict[tuple[int, ...], int] = {}
    context = torch.tensor([index.setdefault(k, len(index)) for k in keys], dtype=torch.long)
    input_ids, attn = left_pad(list(index), pad_id)
    act = right_align(actions, max(1, max(map(len, actions)))).long()
    lengths = torch.tensor([len(a) for a in actions])
    cols = torch.arange(act.shape[1])
    act_mask = cols[None, :] >= act.shape[1] - lengths[:, None]
    act = act.masked_fill(~act_mask, pad_id)
    return ScoreInputs(
        input_ids, attn, context, act, act_mask, _collate_allowed(allowed, len(keys), act.shape[1])
    )


def _collate_allowed(allowed, n: int, a_width: int) -> torch.Tensor | None:
    if allowed is None or all(x is None for x in allowed):
        return None
    k = max((len(ids) for rows in allowed if rows for ids in rows), default=1)
    out = torch.full((n, a_width, k), -1, dtype=torch.long)
    for i, rows in enumerate(allowed):
        if rows is None:  # unrestricted row: all -1
            continue
        off = a_width - len(rows)
        for j, ids in enumerate(rows):
            out[i, off + j, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    return out


@dataclass
class Minibatch:
    """A collated slice: model inputs plus per-token old log-probs and advantages (B, A)."""

    inputs: ScoreInputs
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    flags: dict[str, torch.Tensor] = field(default_factory=dict)
    ref_logprobs: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None  # (B, A) bool; False drops a token from the loss

    @property
    def mask(self) -> torch.Tensor:
        """Action tokens that count in the loss (B, A) bool."""
        m = self.inputs.action_mask
        return m if self.loss_mask is None else m & self.loss_mask


@dataclass
class TokenBatch:
    """N steps ready for the loss. ``flags`` hold per-row bool arrays (N,): the steps'
    ``flags`` and ``SOURCE_FLAGS``, whose effects ``LossConfig.flag_effects`` defines.

    ``prompt_ids`` are the prompts the loss scores actions on: a step's ``train_prompt_ids``
    where it has one (EMPO2's off-policy mode trains without the tips it sampled with),
    else the prompt it was sampled from. ``loss_mask`` keeps
    per-token masks (SSRL masks self-written information out of the loss).
    """

    prompt_ids: list[list[int]]
    action_ids: list[list[int]]
    old_logprobs: list[list[float]]
    advantages: np.ndarray
    allowed: list[list[list[int]] | None]
    flags: dict[str, np.ndarray] = field(default_factory=dict)
    ref_logprobs: list[list[float]] | None = None
    loss_mask: list[list[bool]] | None = None
    pad_id: int = 0
    token_advantages: list[list[float]] | None = None  # per token; replaces ``advantages``
    token_mask: list[list[bool]] | None = None  # per token; False: not an action token
    groups: np.ndarray | None = None  # (N,) int64: the rollout group (task) of each row

    @classmethod
    def from_episodes(
        cls,
        episodes: Sequence[Episode],
        advantages: np.ndarray,
        pad_id: int = 0,
        pack: bool = False,
    ) -> TokenBatch:
        """Rows in episode order (the order of `to_step_batch`); advantages (N,).

        With ``pack``, each run of an episode's turns whose prompts extend each other is
        one row (``runs``, ``pack_episode``); the other steps keep one row each."""
        steps = [s for e in episodes for s in e.steps]
        if len(steps) != len(advantages):
            raise ValueError(f"{len(advantages)} advantages for {len(steps)} steps")
        if pack:
            return _packed(episodes, np.asarray(advantages, dtype=np.float64), pad_id)
        loss_mask = None
        if any(s.loss_mask is not None for s in steps):
            loss_mask = [s.loss_mask or [True] * len(s.action_ids) for s in steps]
        return cls(
            prompt_ids=[
                s.prompt_ids if s.train_prompt_ids is None else s.train_prompt_ids for s in steps
            ],
            action_ids=[s.action_ids for s in steps],
            old_logprobs=[s.logprobs for s in steps],
            advantages=np.asarray(advantages, dtype=np.float64),
            allowed=[s.allowed for s in steps],
            flags=_flags(episodes, steps),
            loss_mask=loss_mask,
            pad_id=pad_id,
            groups=np.fromiter((e.group for e in episodes for _ in e.steps), np.int64, len(steps)),
        )

    def __len__(self) -> int:
        return len(self.action_ids)

    def prompt_labels(self) -> np.ndarray:
        """(N,) int: rows with equal ``prompt_ids`` get equal labels, 0, 1, ... in order of
        first appearance."""
        index: dict[tuple[int, ...], int] = {}
        return np.array(
            [index.setdefault(tuple(p), len(index)) for p in self.prompt_ids], dtype=np.int64
        )

    def task_labels(self) -> np.ndarray:
        """(N,) int in 0..K-1: rows of one rollout group (every turn of the episodes of one
        task, a demonstration's included) get equal labels."""
        if self.groups is None:
            raise ValueError("this token batch was not built from episodes: it has no groups")
        return np.unique(self.groups, return_inverse=True)[1].astype(np.int64).reshape(-1)

    def minibatch(self, idx: np.ndarray) -> Minibatch:
        """Collate rows ``idx`` into tensors."""
        inputs = collate_scoring(
            [self.prompt_ids[i] for i in idx],
            [self.action_ids[i] for i in idx],
            [self.allowed[i] for i in idx],
            pad_id=self.pad_id,
        )
        width = inputs.actions.shape[1]
        if self.token_mask is not None:  # packed rows: only action tokens are scored
            keep = right_align([[float(x) for x in self.token_mask[i]] for i in idx], width)
            inputs.action_mask = inputs.action_mask & keep.bool()
        mask = inputs.action_mask
        if self.token_advantages is not None:
            adv = right_align([self.token_advantages[i] for i in idx], width) * mask
        else:
            adv = torch.as_tensor(self.advantages[idx], dtype=torch.float32)[:, None] * mask
        ref = None
        if self.ref_logprobs is not None:
            ref = right_align([self.ref_logprobs[i] for i in idx], width)
        loss_mask = None
        if self.loss_mask is not None:
            rows = [[float(x) for x in self.loss_mask[i]] for i in idx]
            loss_mask = right_align(rows, width).bool()
        return Minibatch(
            inputs=inputs,
            old_logprobs=right_align([self.old_logprobs[i] for i in idx], width),
            advantages=adv,
            flags={k: torch.as_tensor(v[idx]) for k, v in self.flags.items()},
            ref_logprobs=ref,
            loss_mask=loss_mask,
        )


@dataclass
class PackedRow:
    """One episode as one row: ``prompt`` (the first turn's), ``span`` (everything after it
    to the end of the last action) and per-span-token lists: ``is_action``, behaviour
    ``logprobs`` (0 off actions), ``turn`` (the step index within the episode, -1 off
    actions), ``allowed`` (None when no step is restricted; [] off actions) and
    ``loss_mask``."""

    prompt: list[int]
    span: list[int]
    is_action: list[bool]
    logprobs: list[float]
    turn: list[int]
    allowed: list[list[int]] | None
    loss_mask: list[bool]


def pack_episode(steps: Sequence[Step]) -> PackedRow | None:
    """The packed row of ``steps`` (an episode's, or a run of its turns), or None when
    they cannot be packed: fewer than 2 steps, or two successive steps that do not extend
    each other (``extends``)."""
    if len(steps) < 2 or not all(extends(a, b) for a, b in pairwise(steps)):
        return None
    first = len(steps[0].prompt_ids)
    last = steps[-1]
    span = [*last.prompt_ids[first:], *last.action_ids]
    is_action, logprobs, turn = [False] * len(span), [0.0] * len(span), [-1] * len(span)
    restricted = any(s.allowed is not None for s in steps)
    allowed: list[list[int]] | None = [[] for _ in span] if restricted else None
    loss_mask = [False] * len(span)
    for t, s in enumerate(steps):
        start = len(s.prompt_ids) - first
        for j in range(len(s.action_ids)):
            k = start + j
            is_action[k], logprobs[k], turn[k] = True, s.logprobs[j], t
            loss_mask[k] = True if s.loss_mask is None else bool(s.loss_mask[j])
            if allowed is not None and s.allowed is not None:
                allowed[k] = list(s.allowed[j])
    return PackedRow(steps[0].prompt_ids, span, is_action, logprobs, turn, allowed, loss_mask)


def _step_row(s: Step, adv: float, index: int) -> tuple:
    """One step's row of ``_packed``: its tokens all actions, its advantage on each."""
    k = len(s.action_ids)
    prompt = s.prompt_ids if s.train_prompt_ids is None else s.train_prompt_ids
    loss = [True] * k if s.loss_mask is None else [bool(x) for x in s.loss_mask]
    return (prompt, s.action_ids, s.logprobs, s.allowed, [adv] * k, loss, [True] * k, index)


def extends(a: Step, b: Step) -> bool:
    """Whether step ``b``'s prompt starts with step ``a``'s prompt + action ids (no history
    window cut it, nothing re-rendered it), both are trained on the prompts they were
    sampled from (no ``train_prompt_ids``) and they carry the same flags."""
    if a.train_prompt_ids is not None or b.train_prompt_ids is not None or a.flags != b.flags:
        return False
    head = len(a.prompt_ids) + len(a.action_ids)
    return b.prompt_ids[: len(a.prompt_ids)] == a.prompt_ids and (
        b.prompt_ids[len(a.prompt_ids) : head] == a.action_ids
    )


def runs(steps: Sequence[Step]) -> list[range]:
    """The episode's turns cut into maximal runs of steps that extend each other
    (``extends``): a whole episode on the chat path without a history cut; where a
    context limit drops old turns, a new run starts at each cut."""
    out, start = [], 0
    for i in range(1, len(steps) + 1):
        if i == len(steps) or not extends(steps[i - 1], steps[i]):
            out.append(range(start, i))
            start = i
    return out


def _packed(episodes: Sequence[Episode], adv: np.ndarray, pad_id: int) -> TokenBatch:
    """The token batch with every run of turns that extend each other (``runs``) as one
    row (``pack_episode``) and every other step as its own row; per-token advantages and
    masks for both kinds of row."""
    if not any(e.steps for e in episodes):
        return TokenBatch([], [], [], np.zeros(0), [], pad_id=pad_id, groups=np.zeros(0, np.int64))
    rows: list[tuple] = []  # (prompt, span, logprobs, allowed, advantages, loss, action, step)
    groups: list[int] = []  # each row's episode's group
    offset = 0
    for e in episodes:
        for run in runs(e.steps):
            packed = pack_episode([e.steps[i] for i in run])
            if packed is not None:
                a = [float(adv[offset + run[t]]) if t >= 0 else 0.0 for t in packed.turn]
                rows.append((packed.prompt, packed.span, packed.logprobs, packed.allowed, a,
                             packed.loss_mask, packed.is_action, offset + run[0]))  # fmt: skip
                groups.append(e.group)
                continue
            for t in run:
                rows.append(_step_row(e.steps[t], float(adv[offset + t]), offset + t))
                groups.append(e.group)
        offset += len(e.steps)
    cols = [list(c) for c in zip(*rows, strict=True)]
    prompt, span, logprobs, allowed, token_adv, loss, action, step = cols
    flags = _flags(episodes, [s for e in episodes for s in e.steps])
    pick = np.asarray(step, dtype=np.int64)  # a packed row's steps all have equal flags
    return TokenBatch(
        prompt_ids=prompt, action_ids=span, old_logprobs=logprobs,
        advantages=np.array([r[0] if r else 0.0 for r in token_adv]), allowed=allowed,
        flags={k: v[pick] for k, v in flags.items()},
        loss_mask=None if all(all(m) for m in loss) else loss,
        pad_id=pad_id, token_advantages=token_adv, token_mask=action,
        groups=np.asarray(groups, dtype=np.int64),
    )  # fmt: skip


def _flags(episodes: Sequence[Episode], steps: Sequence[Step]) -> dict[str, np.ndarray]:
    """Per-row flags (N,) bool: the source flags (always), then every flag any step sets
    (False on the steps that do not), copied by name without reading it."""
    source = np.fromiter((e.source for e in episodes for _ in e.steps), np.int64, len(steps))
    flags = {name: source == src for src, name in SOURCE_FLAGS.items()}
    for name in dict.fromkeys(k for s in steps for k in s.flags):
        flags[name] = np.fromiter((bool(s.flags.get(name, False)) for s in steps), bool, len(steps))
    return flags
