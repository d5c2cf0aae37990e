"""One arm of a benchmark in a fresh process: ``python SCRIPT --arm SPEC``, which prints its
result as JSON on the last line of its standard output."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["arm_result"]


def arm_result(
    script: str | Path, spec: str, what: str, env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> Any:  # fmt: skip
    """The JSON result of ``python SCRIPT --arm SPEC`` (``env``, ``cwd``: the process's); a
    failed process is a RuntimeError naming ``what`` with the tail of its stderr."""
    proc = subprocess.run(
        [sys.executable, str(script), "--arm", spec], capture_output=True, text=True,
        env=None if env is None else dict(env), cwd=cwd,
    )  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
