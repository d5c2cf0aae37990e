"""Action parsing: from a model's completion to the action string the env receives."""

from __future__ import annotations

import re

__all__ = ["parse_action"]

_TAGGED = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def parse_action(completion: str, pattern: str | None = None) -> str | None:
    """The action in ``completion``, or None when it has none.

    With ``pattern`` (a regex with one group), the first match's group is the action.
    Otherwise an ``<action>...</action>`` tag is used when present, else the first
    non-empty line. The env decides whether the string is a valid action.
    """
    if pattern is not None:
        m = re.search(pattern, completion, re.DOTALL)
        return m.group(1).strip() if m else None
    m = _TAGGED.search(completion)
    if m:
        return m.group(1).strip()
    for line in completion.splitlines():
        if line.strip():
            return line.strip()
    return None
