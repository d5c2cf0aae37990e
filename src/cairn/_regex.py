"""Regex checks shared by several packages (the config's ``agent.action_pattern``, the
``search_pattern`` option of the ``ssrl`` rollout strategy). A leaf module: it imports
nothing of cairn, so any config module may use it without an import cycle."""

from __future__ import annotations

import re

__all__ = ["regex_groups"]


def regex_groups(pattern: str) -> int:
    """The number of capture groups of ``pattern``; ValueError naming it if it does not compile."""
    try:
        return re.compile(pattern).groups
    except re.error as err:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {err}") from None
