"""Rollout tests: helpers live in rollout_helpers.py (importable by the test modules)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from rollout_helpers import DEMO, tiny_policy

from cairn.envs import make


@pytest.fixture(scope="session")
def demo_policy():
    """The tiny random-init model on the demo preset's sokoban vocabulary."""
    return tiny_policy(make("sokoban", **DEMO))
