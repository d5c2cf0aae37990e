"""Stand-ins with just what ``save_checkpoint`` calls: a model's and a tokenizer's
``save_pretrained``."""

from __future__ import annotations

from pathlib import Path

import torch


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
