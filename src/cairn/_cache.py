"""cairn's user cache folder, light to import (the standard library only): converted models
(``cairn.policies.smol``) and the store of trusted runs (``cairn.train.trust``) live there."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """``$CAIRN_CACHE``, else ``~/.cache/cairn/models`` (where converted models have always
    been kept)."""
    env = os.environ.get("CAIRN_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "cairn" / "models"
