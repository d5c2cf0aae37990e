"""Environment registry: ``make(name, **options)`` and ``available()``.

Entries are import paths (``cairn._registry.ImportRegistry``), so an env whose optional
extra is not installed costs nothing until it is asked for, and then fails with the name
of the extra to install.
"""

from __future__ import annotations

from typing import Any

from cairn._registry import ImportRegistry
from cairn.envs.base import ReplaySnapshot, StepResult, TextEnv

__all__ = [
    "ENVS",
    "ReplaySnapshot",
    "StepResult",
    "TextEnv",
    "available",
    "env_class",
    "make",
    "register",
    "validate_options",
]

#: name -> (import path "module:Class", pip extra that provides its dependencies or None)
ENVS = ImportRegistry(
    "env",
    {
        "sokoban": "cairn.envs.sokoban:Sokoban",
        "frozenlake": ("cairn.envs.frozenlake:FrozenLake", "gymnasium"),
        "countdown": "cairn.envs.countdown:Countdown",
        "integration": "cairn.envs.integration:Integration",
        "search_qa": ("cairn.envs.search_qa:SearchQA", "search"),
        "scienceworld": ("cairn.envs.scienceworld:ScienceWorld", "scienceworld"),
        "textworld": ("cairn.envs.textworld:TextWorld", "textworld"),
        "twx": ("cairn.envs.twx:TextWorldExpress", "twx"),
    },
)
register = ENVS.register  # register(name, "package.module:Class", extra=None)
available = ENVS.available  # names accepted by make
env_class = ENVS.get
validate_options = ENVS.validate  # ValueError naming options the constructor does not take


def make(name: str, **options: Any) -> TextEnv:
    """Build the env registered as ``name``; unknown names or options raise ValueError."""
    return ENVS.make(name, **options)
