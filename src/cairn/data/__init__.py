"""Data contracts: the step table (StepBatch), episodes and the token batch a loss consumes.

The step table's names are imported on first use (they need numpy): ``cairn.data.rundir``,
which the command line reads before any run, does not."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.data.step_batch import (
        OPTIONAL_COLUMNS,
        REQUIRED_COLUMNS,
        StepBatch,
        register_column,
    )

__all__ = ["OPTIONAL_COLUMNS", "REQUIRED_COLUMNS", "StepBatch", "register_column"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("cairn.data.step_batch"), name)
