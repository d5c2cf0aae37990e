"""Training: configuration, the trainer loop, checkpoints and run logs.

The names below are imported on first use: ``cairn presets`` reads ``cairn.train.presets``
without building the config schema."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.train.config import Config, ConfigError, load_config

__all__ = ["Config", "ConfigError", "load_config"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("cairn.train.config"), name)
