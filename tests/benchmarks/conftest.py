"""Tests of benchmarks/_lib, the helpers the benchmark scripts share: benchmarks/ goes on the
path as a script puts it there (``from _lib.records import ...``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
