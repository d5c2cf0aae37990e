"""Training: configuration, the trainer loop, checkpoints and run logs.

The package is also the one-call API: ``cairn.train(config, callbacks=[...])`` trains one
run (``cairn.train.api.train``; ``cairn.train.run`` is the same function, for type
checkers). Importing it stays light: the names below are imported on first use (``cairn
presets`` reads ``cairn.train.presets`` without building the config schema), and the
trainer and torch load when a run starts."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from cairn._errors import ConfigError
    from cairn.train.api import Callback, TrainResult
    from cairn.train.config import load_config
    from cairn.train.schema import Config

__all__ = ["Callback", "Config", "ConfigError", "TrainResult", "load_config", "run"]

_LAZY = {
    "Callback": "cairn.train.api",
    "TrainResult": "cairn.train.api",
    "Config": "cairn.train.schema",
    "ConfigError": "cairn._errors",
    "load_config": "cairn.train.config",
}


def run(
    config: Config | Mapping[str, object] | str | Path, *args: Any, **kwargs: Any
) -> TrainResult:
    """``cairn.train.api.train``: train one run; returns a ``TrainResult``."""
    from cairn.train.api import train

    return train(config, *args, **kwargs)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


class _CallableModule(types.ModuleType):
    """``cairn.train(...)`` calls ``run``: the package is the API's name."""

    def __call__(
        self, config: Config | Mapping[str, object] | str | Path, *args: Any, **kwargs: Any
    ) -> TrainResult:
        return run(config, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
