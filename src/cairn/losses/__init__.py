"""Policy losses: clipped surrogate (asymmetric, dual, per-token clip), LUFFY shaping,
EMPO2 turn mask, KL to a reference, entropy bonus, and loss aggregation.

    from cairn.losses import LossConfig, policy_loss
    loss, metrics = policy_loss(logp, old_logp, adv, mask, LossConfig(clip_high=0.28))

Every function takes per-token (B, T) tensors (B sequences = steps, T action positions)
and a (B, T) mask of valid action tokens; see each module for the paper it implements.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.losses.aggregation import aggregate
    from cairn.losses.config import FlagEffect, LossConfig
    from cairn.losses.kl import kl_penalty
    from cairn.losses.logprobs import entropy_from_logits, logprobs_from_logits
    from cairn.losses.policy import policy_loss, ppo_clip, shaped_offpolicy, turn_mask

from cairn.losses._names import AGG_MODES, KL_KINDS

__all__ = [
    "AGG_MODES",
    "KL_KINDS",
    "FlagEffect",
    "LossConfig",
    "aggregate",
    "entropy_from_logits",
    "kl_penalty",
    "logprobs_from_logits",
    "policy_loss",
    "ppo_clip",
    "shaped_offpolicy",
    "turn_mask",
]

#: Public name -> the module that defines it. Imported on first use: ``cairn.losses.config``
#: (what config loading reads) needs no torch, the loss functions do.
_WHERE = {
    "aggregate": "aggregation",
    "FlagEffect": "config",
    "LossConfig": "config",
    "kl_penalty": "kl",
    "entropy_from_logits": "logprobs",
    "logprobs_from_logits": "logprobs",
    "policy_loss": "policy",
    "ppo_clip": "policy",
    "shaped_offpolicy": "policy",
    "turn_mask": "policy",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
