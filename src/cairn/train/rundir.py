"""The name of a new run's folder (``cairn train``, ``cairn.train.api.train``)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn.train.schema import Config

__all__ = ["new_run_dir"]


def new_run_dir(cfg: Config) -> Path:
    """``out_dir/<name>-s<seed>-<time stamp>``, with a ``-k`` suffix when it exists."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(cfg.out_dir) / f"{cfg.name}-s{cfg.seed}-{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path
