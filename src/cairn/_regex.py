"""Regex checks shared by config sections of several packages (``agent.action_pattern``,
``exploration.self_search.search_pattern``). A leaf module: it imports nothing of cairn, so
any config module may use it without an import cycle."""

from __future__ import annotations

import re

__all__ = ["regex_groups"]


def regex_groups(pattern: str) -> int:
    """The number of capture groups of ``pattern``; ValueError naming it if it does not compile."""
    try:
        return re.compile(pattern).groups
    except re.error as err:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {err}") from None
