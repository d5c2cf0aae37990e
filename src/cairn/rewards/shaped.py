"""Shaped rewards that depend on the action text only.

DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13), per step with |y| the number
of action tokens, L_max = ``max_len`` and L_cache = ``cache``:

    R_length(y) = 0                               |y| <= L_max - L_cache
                = ((L_max - L_cache) - |y|) / L_cache   L_max - L_cache < |y| <= L_max
                = -1                              |y| > L_max
"""

from __future__ import annotations

from collections.abc import Sequence

from cairn.data.episode import Episode

__all__ = ["OverlongPenalty", "overlong_penalty"]


def overlong_penalty(length: int, max_len: int, cache: int) -> float:
    """R_length for an action of ``length`` tokens (0, a linear ramp, or -1)."""
    start = max_len - cache
    if length <= start:
        return 0.0
    if length <= max_len:
        return (start - length) / cache
    return -1.0


class OverlongPenalty:
    """``overlong``: DAPO's length penalty on every step's action."""

    name = "overlong"

    def __init__(self, max_len: int, cache: int, weight: float = 1.0):
        if not 0 < cache <= max_len:
            raise ValueError(f"overlong needs 0 < cache <= max_len, got {cache=} {max_len=}")
        self.max_len, self.cache, self.weight = max_len, cache, weight

    def __call__(self, episodes: Sequence[Episode], ctx=None) -> None:
        for e in episodes:
            for s in e.steps:
                r = overlong_penalty(len(s.action_ids), self.max_len, self.cache)
                s.shaped[self.name] = self.weight * r
