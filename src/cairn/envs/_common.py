"""Shared option checks and episode bookkeeping for the built-in envs (private).

Every option error is a ValueError that names the option, the bad value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "MAX_EPISODE_STEPS",
    "EpisodeClock",
    "check_choice",
    "check_float",
    "check_int",
    "check_int_choices",
    "check_int_range",
    "fresh_seed",
    "next_on_path",
]


def check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (``high`` None: no upper bound); numpy ints pass."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def check_float(name: str, value: object, low: float, high: float) -> float:
    """``value`` as a float in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not low <= float(value) <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return float(value)


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is True or False (not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_int_range(name: str, value: object, low: int, high: int) -> tuple[int, int]:
    """A ``(lo, hi)`` pair of ints with ``low <= lo <= hi <= high``."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"{name} must be a pair (lo, hi), got {value!r}")
    lo = check_int(f"{name}[0]", value[0], low, high)
    hi = check_int(f"{name}[1]", value[1], low, high)
    if lo > hi:
        raise ValueError(f"{name} must have lo <= hi, got {value!r}")
    return lo, hi


def check_int_choices(name: str, value: object, allowed: Sequence[int]) -> tuple[int, ...]:
    """An int or a non-empty sequence of ints, each one of ``allowed``; returned as a tuple."""
    values = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(values, list | tuple) or not values:
        raise ValueError(f"{name} must be an int or a non-empty list of ints, got {value!r}")
    for v in values:
        if isinstance(v, bool) or v not in allowed:
            raise ValueError(f"{name} values must be in {list(allowed)}, got {v!r}")
    return tuple(values)


def next_on_path(gold: Sequence[str], taken: Sequence[str]) -> str | None:
    """The next action of the walkthrough ``gold`` while the actions ``taken`` so far are its
    prefix (compared lower-case with single spaces); None once off the path or past its end."""

    def squash(a: str) -> str:
        return " ".join(a.lower().split())

    if len(taken) >= len(gold):
        return None
    if any(squash(a) != squash(g) for a, g in zip(taken, gold[: len(taken)], strict=True)):
        return None
    return gold[len(taken)]


def fresh_seed() -> int:
    """A random seed for ``reset(seed=None)``; envs store it as the episode's seed so that
    the base class's replay fallback (``TextEnv.restore``) rebuilds the same episode."""
    return int(np.random.default_rng().integers(2**31))


#: The longest episode any built-in env allows (``max_steps``): an episode is a prompt per
#: turn, so even a long text game stays far below it, and a typo such as 1e12 is refused
#: instead of running forever.
MAX_EPISODE_STEPS = 1000


class EpisodeClock:
    """Counts the steps of one episode and refuses steps before reset or after the end;
    ``max_steps`` must lie in [1, MAX_EPISODE_STEPS]."""

    def __init__(self, env_name: str, max_steps: int) -> None:
        self.env_name = env_name
        self.max_steps = check_int("max_steps", max_steps, 1, MAX_EPISODE_STEPS)
        self.steps = 0
        self.started = False
        self.done = False

    def start(self) -> None:
        self.steps, self.started, self.done = 0, True, False

    def check(self) -> None:
        """RuntimeError unless a step may be taken now (after reset, before the end)."""
        if not self.started:
            raise RuntimeError(f"{self.env_name}: call reset() before step()")
        if self.done:
            raise RuntimeError(
                f"{self.env_name}: the episode has ended (after {self.steps} steps); "
                "call reset() first"
            )

    def tick(self) -> bool:
        """Count one step; True when the step budget is now used up (truncation)."""
        self.check()
        self.steps += 1
        return self.steps >= self.max_steps

    def state(self) -> tuple[int, bool, bool]:
        return self.steps, self.started, self.done

    def set_state(self, state: tuple[int, bool, bool]) -> None:
        self.steps, self.started, self.done = state
