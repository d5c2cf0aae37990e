"""A critic for PPO/GAE: V(s) from a transformer backbone and a linear head.

The state of a step is its prompt (instruction, shown history, current observation); the
value is read from the backbone's hidden state at the prompt's last token. The backbone is
any ``AutoModel`` (the tiny default config, or a local model directory), separate from
the policy, as in PPO with a separate value network (Schulman et al., arXiv 1707.06347).
Each distinct prompt is evaluated once per call, like the policy's scoring.

``CriticLearner`` is the critic as a learner beside the actor: it is built from the
``critic`` config section, writes V into each step's ``value`` column before the
advantage (GAE reads it), and regresses V on the estimator's ``returns`` term (GAE's
A + V, eq. 11-12 of arXiv 1506.02438) or, when the estimator gives none, on the
discounted return. The trainer runs its minibatch losses in the same epoch loop as the
actor's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from transformers import AutoModel, PretrainedConfig, PreTrainedModel

from cairn.advantages import Terms
from cairn.advantages.episodes import Episodes
from cairn.data.episode import Episode
from cairn.data.step_batch import StepBatch
from cairn.data.tokens import TokenBatch, left_pad

__all__ = ["Critic", "CriticLearner", "value_loss"]


class Critic(torch.nn.Module):
    """``values(prompts) -> (B,)``: V of each prompt's state."""

    def __init__(self, backbone: PreTrainedModel, pad_id: int):
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(backbone.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.pad_id = pad_id

    @classmethod
    def from_config(cls, config: PretrainedConfig, pad_id: int, seed: int) -> Critic:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return cls(AutoModel.from_config(config), pad_id)

    @classmethod
    def from_pretrained(cls, path: str | Path, pad_id: int, **kwargs) -> Critic:
        from cairn.policies.remote import NO_REMOTE_CODE, check_no_remote_code

        check_no_remote_code(path)  # no folder's own code, ever
        return cls(AutoModel.from_pretrained(path, **NO_REMOTE_CODE, **kwargs), pad_id)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def values(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """V(s) for each prompt (B,) float32; identical prompts share one forward row."""
        index: dict[tuple[int, ...], int] = {}
        rows = torch.tensor([index.setdefault(tuple(p), len(index)) for p in prompts])
        ids, attn = left_pad(list(index), self.pad_id)
        ids, attn = ids.to(self.device), attn.to(self.device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        hidden = self.backbone(
            input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False
        ).last_hidden_state  # (U, L, H)
        v = self.head(hidden[:, -1].float()).squeeze(-1)  # (U,)
        return v[rows.to(self.device)]

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        save_model(self, str(folder / "critic.safetensors"))

    def load(self, folder: Path) -> None:
        load_model(self, str(folder / "critic.safetensors"))


def value_loss(
    v: torch.Tensor, v_old: torch.Tensor, returns: torch.Tensor, clip: float | None
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped value loss, all (B,): 0.5 * mean(max((v-R)^2, (v_clip-R)^2)).

    v_clip = v_old + clamp(v - v_old, -clip, clip); ``clip=None`` gives plain MSE / 2.
    """
    err = (v - returns) ** 2
    if clip is not None:
        v_clip = v_old + (v - v_old).clamp(-clip, clip)
        err_clip = (v_clip - returns) ** 2
        clipped = (err_clip > err).float().mean()
        err = torch.maximum(err, err_clip)
    else:
        clipped = torch.zeros(())
    loss = 0.5 * err.mean()
    return loss, {
        "critic/loss": float(loss.detach()),
        "critic/clipfrac": float(clipped),
        "critic/value_mean": float(v.detach().mean()),
    }


class CriticLearner:
    """The value network as a learner: ``score`` (fills values), ``minibatch_loss`` (loss),
    its optimizer, and what a checkpoint keeps of it (``save``/``load``, ``opt``).

    settings: the ``critic`` config section (path, lr, epochs, value_clip, gamma).
    """

    name = "critic"  # the checkpoint's folder and optimizer-state key prefix
    log_update = False  # its metrics come from value_loss

    def __init__(self, critic: Critic, settings: Any):
        self.module, self.settings = critic, settings
        self.opt = torch.optim.AdamW(critic.parameters(), lr=settings.lr)
        self.epochs: int | None = settings.epochs  # None: the actor's

    @classmethod
    def build(cls, settings: Any, policy: Any, seed: int, ckpt: Path | None) -> CriticLearner:
        """A tiny critic like the policy's config (seed + 1) or ``settings.path``'s model."""
        pad = policy.pad_id
        if settings.path:
            critic = Critic.from_pretrained(settings.path, pad)
        else:
            critic = Critic.from_config(policy.model.config, pad, seed=seed + 1)
        critic.to(policy.device)
        learner = cls(critic, settings)
        if ckpt is not None:
            learner.load(ckpt / cls.name)
        return learner

    @torch.no_grad()
    def score(self, episodes: Sequence[Episode]) -> None:
        """Write V(s) into every step's ``value`` column (the state before the step)."""
        steps = [s for e in episodes for s in e.steps]
        if any("value" in s.columns for s in steps):
            raise ValueError("the rollout strategy already sets values; disable critic.enabled")
        self.module.eval()
        values = self.module.values([s.prompt_ids for s in steps]).tolist()
        for s, v in zip(steps, values, strict=True):
            s.columns["value"] = v

    def targets(self, batch: StepBatch, terms: Terms) -> np.ndarray:
        """The estimator's ``returns`` term, else the discounted return (gamma) per step."""
        if "returns" in terms:
            return terms["returns"]
        return Episodes.of(batch).discounted_cumsum(batch.reward, self.settings.gamma)

    def minibatch_loss(
        self, tokens: TokenBatch, batch: StepBatch, terms: Terms
    ) -> Callable[[np.ndarray], tuple[torch.Tensor, dict[str, float]]]:
        """rows -> (clipped value loss, ``critic/`` metrics) for this iteration's steps."""
        v_old = torch.as_tensor(batch.value, dtype=torch.float32)
        target = torch.as_tensor(self.targets(batch, terms), dtype=torch.float32)

        def loss(idx: np.ndarray) -> tuple[torch.Tensor, dict[str, float]]:
            v = self.module.values([tokens.prompt_ids[i] for i in idx])
            return value_loss(v, v_old[idx], target[idx], self.settings.value_clip)

        return loss

    def save(self, folder: Path) -> None:
        self.module.save(folder)

    def load(self, folder: Path) -> None:
        self.module.load(folder)
