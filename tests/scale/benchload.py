"""A benchmark script under benchmarks/ loaded as a module, for the tests of its logic."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def load_bench(path: str | Path, name: str) -> ModuleType:
    """``benchmarks/<path>`` (or an absolute ``path``) imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
