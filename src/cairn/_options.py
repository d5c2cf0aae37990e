"""Keyword-option checking shared by the registries of envs and rollout strategies."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["check_options"]


def check_options(fn: Callable[..., Any], options: dict[str, Any], what: str) -> None:
    """Raise ValueError naming each key of ``options`` that ``fn`` does not accept.

    ``what`` names the thing configured, e.g. ``"env 'sokoban'"``.
    """
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    allowed = [n for n, p in params.items() if n != "self" and p.kind is not p.VAR_POSITIONAL]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"{what} has no option {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(allowed) or '(none)'}"
        )
