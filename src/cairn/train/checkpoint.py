"""Atomic checkpoints: weights (safetensors) + tokenizer + optimizer, RNG and loop state.

Layout under the run directory:
    checkpoints/iter_000012/   model.safetensors, config.json, tokenizer files, state.pt
    checkpoints/latest         the name of the newest complete checkpoint

A checkpoint is written to a temporary folder and renamed into place, then `latest` is
replaced atomically, so a run killed at any moment leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

__all__ = ["latest_checkpoint", "load_state", "save_checkpoint"]

STATE_FILE = "state.pt"


def save_checkpoint(
    run_dir: Path,
    iteration: int,
    model: torch.nn.Module,
    tokenizer,
    state: dict[str, Any],
    keep: int,
    extra: dict[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Write ``checkpoints/iter_{iteration}`` atomically and prune to the newest ``keep``.

    ``extra`` maps sub-folder names to writers (e.g. a critic's weights) run inside it.
    """
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"iter_{iteration:06d}"
    final, tmp = root / name, root / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar every iteration
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    for folder, write in (extra or {}).items():
        write(tmp / folder)
    torch.save(state, tmp / STATE_FILE)
    _fsync_dir(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer = root / ".latest.tmp"
    pointer.write_text(name)
    os.replace(pointer, root / "latest")
    _fsync_dir(root)
    for old in sorted(p for p in root.glob("iter_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint folder of ``run_dir``, or None."""
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = run_dir / "checkpoints" / pointer.read_text().strip()
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(f"checkpoint {path} named by {pointer} is incomplete")
    return path


def load_state(path: Path) -> dict[str, Any]:
    return torch.load(path / STATE_FILE, weights_only=False)


def _fsync_dir(path: Path) -> None:
    """Flush the files of ``path`` and the folder entry itself to disk."""
    for p in [*(f for f in path.iterdir() if f.is_file()), path]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
