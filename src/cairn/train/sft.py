"""Supervised fine-tuning by teacher forcing: the warm-ups and behaviour-cloning checks.

``sft(policy, data, ...)`` trains ``policy.model`` on ``(prompt ids, answer ids)`` pairs with
the negative log-likelihood of the answer tokens (mean over answer tokens of a minibatch),
AdamW, shuffled each epoch by ``seed``. The same scoring path as the RL loss
(``policy.score`` on a left-padded prompt + answer, answers right-aligned), so what it
teaches is exactly what the policy loss later sees. Used by LADDER's warm-up
(benchmarks/exploration/integration_warmup.py) and by the sokoban behaviour-cloning check.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from cairn.data.tokens import ScoreInputs, left_pad, right_align

__all__ = ["sft"]

Example = tuple[Sequence[int], Sequence[int]]


def sft(
    policy: Any, data: list[Example], epochs: int, batch: int, lr: float, seed: int
) -> list[float]:
    """Teacher-forced NLL of the answers; returns the mean loss per epoch (nats per token).

    ``data`` is shuffled in place. ``policy`` needs ``model``, ``pad_id`` and ``score``.
    """
    if not data:
        raise ValueError("sft needs at least one (prompt ids, answer ids) example, got none")
    if any(len(a) == 0 for _, a in data):
        raise ValueError("sft: every answer needs at least one token; got an empty answer")
    opt = torch.optim.AdamW(policy.model.parameters(), lr=lr)
    rng, losses = random.Random(seed), []
    policy.model.train()
    for _ in range(epochs):
        rng.shuffle(data)
        total = 0.0
        for i in range(0, len(data), batch):
            loss = _nll(policy, data[i : i + batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(data[i : i + batch])
        losses.append(total / len(data))
    return losses


def _nll(policy: Any, rows: list[Example]) -> torch.Tensor:
    """Mean NLL over the answer tokens of one minibatch (a scalar with a graph)."""
    ids, attn = left_pad([list(p) + list(a[:-1]) for p, a in rows], policy.pad_id)
    width = max(len(a) for _, a in rows)
    actions = right_align([a for _, a in rows], width).long()
    mask = right_align([[1.0] * len(a) for _, a in rows], width).bool()
    inputs = ScoreInputs(ids, attn, torch.arange(len(rows)), actions, mask)
    logp, _ = policy.score(inputs, with_entropy=False)
    return -(logp * mask).sum() / mask.sum()
