"""Config is plain data: loading and checking its schema imports no torch, transformers,
env module, rollout package or exploration hook, so the CLI answers at once."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "cairn.rollout", "cairn.exploration.hooks", "cairn.envs.sokoban")


def _loaded_after(code: str) -> list[str]:
    """The HEAVY modules imported once ``code`` has run in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return eval(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import cairn.train.config",
        "import cairn.cli",
        # the schema, the YAML loader and --set, no preflight: a resolved config as data
        "from cairn.train.config import load_config; load_config('sokoban_grpo', "
        "['rollout.group_size=4'], check=False)",
        "from cairn.train.schema import describe; describe()",
    ],
)
def test_config_as_data_imports_nothing_heavy(code):
    assert _loaded_after(code) == []


def test_importing_the_config_loader_leaves_torch_unloaded():
    code = "import cairn.train.config, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
