"""A critic for PPO/GAE: V(s) from a transformer backbone and a linear head.

The state of a step is its prompt (instruction, shown history, current observation); the
value is read from the backbone's hidden state at the prompt's last token. The backbone is
any ``AutoModel`` (the tiny default config, or a local model directory), separate from
the policy, as in PPO with a separate value network (Schulman et al., arXiv 1707.06347).
Each distinct prompt is evaluated once per call, like the policy's scoring.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model
from transformers import AutoModel, PretrainedConfig

from cairn.data.tokens import left_pad

__all__ = ["Critic", "value_loss"]


class Critic(torch.nn.Module):
    """``values(prompts) -> (B,)``: V of each prompt's state."""

    def __init__(self, backbone: torch.nn.Module, pad_id: int):
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
        return cls(AutoModel.from_pretrained(path, **kwargs), pad_id)

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
