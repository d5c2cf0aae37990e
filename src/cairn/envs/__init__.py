"""Environment registry: ``make(name, **options)`` and ``available()``.

Entries are import paths, so an env whose optional extra is not installed costs nothing
until it is asked for, and then fails with the name of the extra to install.
"""

from __future__ import annotations

import importlib
from typing import Any

from cairn._options import check_options
from cairn.envs.base import ReplaySnapshot, StepResult, TextEnv

__all__ = [
    "ReplaySnapshot",
    "StepResult",
    "TextEnv",
    "available",
    "env_class",
    "make",
    "register",
    "validate_options",
]

# name -> (import path "module:Class", pip extra that provides its dependencies or None)
_REGISTRY: dict[str, tuple[str, str | None]] = {
    "sokoban": ("cairn.envs.sokoban:Sokoban", None),
    "frozenlake": ("cairn.envs.frozenlake:FrozenLake", "gymnasium"),
    "countdown": ("cairn.envs.countdown:Countdown", None),
    "integration": ("cairn.envs.integration:Integration", None),
    "search_qa": ("cairn.envs.search_qa:SearchQA", "search"),
    "scienceworld": ("cairn.envs.scienceworld:ScienceWorld", "scienceworld"),
    "textworld": ("cairn.envs.textworld:TextWorld", "textworld"),
    "twx": ("cairn.envs.twx:TextWorldExpress", "twx"),
}


def register(name: str, target: str, extra: str | None = None) -> None:
    """Register an env class by import path ``"package.module:ClassName"``."""
    if name in _REGISTRY and _REGISTRY[name][0] != target:
        raise ValueError(f"env {name!r} is already registered as {_REGISTRY[name][0]}")
    _REGISTRY[name] = (target, extra)


def available() -> list[str]:
    """Names accepted by ``make``."""
    return sorted(_REGISTRY)


def env_class(name: str) -> type[TextEnv]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown env {name!r}; available: {', '.join(available())}")
    target, extra = _REGISTRY[name]
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        hint = f" (pip install 'cairn-rl[{extra}]')" if extra else ""
        raise ImportError(f"env {name!r} needs a missing dependency{hint}: {err}") from err
    return getattr(module, class_name)


def validate_options(name: str, options: dict[str, Any]) -> None:
    """Raise ValueError naming any option that ``name``'s constructor does not take."""
    check_options(env_class(name).__init__, options, f"env {name!r}")


def make(name: str, **options: Any) -> TextEnv:
    """Build the env registered as ``name``; unknown names or options raise ValueError."""
    validate_options(name, options)
    return env_class(name)(**options)
