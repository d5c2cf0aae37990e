"""Stand-ins with just what ``write_checkpoint`` calls (a model's and a tokenizer's
``save_pretrained``), and the smallest trainer state a checkpoint accepts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from cairn.train.checkpoint.state import TrainState


class TinyModule(torch.nn.Module):
    """One 2x3 parameter, saved as safetensors like a transformers model."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))

    def save_pretrained(self, folder: Path, safe_serialization: bool = True) -> None:
        from safetensors.torch import save_model

        folder.mkdir(parents=True, exist_ok=True)
        save_model(self, str(folder / "model.safetensors"))


class StubTokenizer:
    def save_pretrained(self, folder: Path) -> None:
        (folder / "tokenizer.json").write_text("{}")


def train_state(iteration: int) -> dict:
    """The loop's counters and random streams (the keys every trainer state holds), at
    ``iteration``."""
    loop = TrainState(
        np.random.default_rng([0, 1]), np.random.default_rng([0, 2]), torch.Generator()
    )
    loop.iteration = iteration
    return loop.state_dict(wall_seconds=0.0)
