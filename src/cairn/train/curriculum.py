"""Automatic curricula: the training tasks' difficulty follows the policy's success.

GRPO-style estimators learn only from groups with mixed outcomes: a group that all fail
(or all succeed) has zero advantage. A curriculum keeps training where groups are mixed:
it trains on env options easier than the held-out ones while the policy fails them, and
raises the difficulty as the rolling success rate passes a threshold.

    curriculum: {name: success_rate, options: {levels: [...], raise_at: 0.5, window: 64}}

``levels`` is a list of env option overrides, easiest first; level k trains on
``{**env.options, **levels[k]}`` (countdown: ``count``, ``target_range``; sokoban: ``size``,
``max_solution``; search_qa: ``hops``). Held-out evaluation always uses ``env.options``
themselves: a fixed, stated difficulty that the curriculum never changes.

``success_rate`` (``SuccessRateCurriculum``): after each iteration the success of its
on-policy episodes enters a window of the last ``window`` episodes at the current level;
once the window is full, a rate >= ``raise_at`` moves one level up and a rate <=
``lower_at`` (when set) one level down, and the window starts again empty. The level and
the window are checkpointed (``state_dict``), so a resumed run continues exactly.

Worked example (``tests/test_curriculum.py``): window 4, raise_at 0.5, lower_at 0.25,
levels [a, b, c], start 0. Iteration 1: successes [1, 0, 0] (window not full: level 0).
Iteration 2: [1, 1]: the window keeps the last 4, [0, 0, 1, 1], rate 0.5 >= 0.5: level 1,
window emptied. Iteration 3: [0, 0, 0, 1]: rate 0.25 <= 0.25: back to level 0.

Registered like the other pieces a config names (``CURRICULA``); a user's class taking
``levels`` and its own options, with ``level``, ``observe``, ``metrics``, ``state_dict``
and ``load_state_dict``, can be registered under a new name.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload

from cairn._registry import ImportRegistry

__all__ = [
    "CURRICULA",
    "Curriculum",
    "SuccessRateCurriculum",
    "check_curriculum",
    "make_curriculum",
]

if TYPE_CHECKING:
    from cairn.train.schema import Config

CURRICULA = ImportRegistry(
    "curriculum", {"success_rate": "cairn.train.curriculum:SuccessRateCurriculum"}
)


class Curriculum(Protocol):
    """What the trainer reads of a curriculum: its level, the env options of a level, and
    the success rates it steps on (``SuccessRateCurriculum`` is the built-in one)."""

    level: int
    last_rate: float

    def env_options(
        self, base: Mapping[str, object], level: int | None = None
    ) -> dict[str, object]: ...

    def observe(self, successes: Sequence[bool]) -> bool: ...

    def metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class SuccessRateCurriculum:
    """Raise (and optionally lower) the difficulty level by the rolling success rate
    (module docstring)."""

    def __init__(
        self,
        levels: Sequence[Mapping[str, object]],
        start: int = 0,
        raise_at: float = 0.5,
        lower_at: float | None = None,
        window: int = 64,
    ) -> None:
        if not isinstance(levels, list | tuple) or not levels:
            raise ValueError("curriculum levels must be a non-empty list of env option dicts")
        for k, level in enumerate(levels):
            if not isinstance(level, dict):
                raise ValueError(f"curriculum levels[{k}] must be a dict of env options")
        if not isinstance(start, int) or not 0 <= start < len(levels):
            raise ValueError(f"curriculum start must be in 0..{len(levels) - 1}, got {start!r}")
        if not 0.0 < float(raise_at) <= 1.0:
            raise ValueError(f"curriculum raise_at must be in (0, 1], got {raise_at!r}")
        if lower_at is not None and not 0.0 <= float(lower_at) < float(raise_at):
            raise ValueError(
                f"curriculum lower_at must be in [0, raise_at={raise_at}), got {lower_at!r}"
            )
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"curriculum window must be an int >= 1, got {window!r}")
        self.levels = [dict(level) for level in levels]
        self.raise_at, self.lower_at = float(raise_at), lower_at
        self.level = start
        self.recent: deque[bool] = deque(maxlen=window)
        self.last_rate = float("nan")  # the window's success rate at the last observe

    def env_options(
        self, base: Mapping[str, object], level: int | None = None
    ) -> dict[str, object]:
        """The env options of ``level`` (default: the current one) over ``base``."""
        return {**base, **self.levels[self.level if level is None else level]}

    def observe(self, successes: Sequence[bool]) -> bool:
        """Take one iteration's episode successes; True when the level changed."""
        self.recent.extend(bool(s) for s in successes)
        rate = self.last_rate = self._rate()
        if len(self.recent) < (self.recent.maxlen or 0):
            return False
        if rate >= self.raise_at and self.level < len(self.levels) - 1:
            self.level += 1
        elif self.lower_at is not None and rate <= self.lower_at and self.level > 0:
            self.level -= 1
        else:
            return False
        self.recent.clear()
        return True

    def metrics(self) -> dict[str, float]:
        """``curriculum/level`` and the rolling success ``curriculum/success`` (NaN while
        the window is empty)."""
        return {"curriculum/level": float(self.level), "curriculum/success": self._rate()}

    def _rate(self) -> float:
        """The success rate over the window (NaN while it is empty)."""
        return sum(self.recent) / len(self.recent) if self.recent else float("nan")

    def state_dict(self) -> dict[str, Any]:
        return {"level": self.level, "recent": [bool(s) for s in self.recent]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        level = state["level"]
        if not isinstance(level, int) or not 0 <= level < len(self.levels):
            raise ValueError(f"curriculum level {level!r} is not one of this run's levels")
        self.level = level
        self.recent.clear()
        self.recent.extend(bool(s) for s in state["recent"])


@overload
def make_curriculum(name: str, options: Mapping[str, object]) -> Curriculum: ...
@overload
def make_curriculum(name: None, options: Mapping[str, object]) -> None: ...
def make_curriculum(name: str | None, options: Mapping[str, object]) -> Curriculum | None:
    """The curriculum ``name`` built from ``options``; None when ``name`` is None (off)."""
    return None if name is None else CURRICULA.make(name, **options)


def check_curriculum(cfg: Config) -> None:
    """The registry checks of ``cfg.curriculum`` (a preflight step): the name, its
    options, and every level's env options probed on ``cfg.env.name`` (ValueError naming
    the level)."""
    c = cfg.curriculum
    if c.name is None:
        if c.options:
            raise ValueError("curriculum.options given without curriculum.name")
        return
    from cairn.envs import ENVS

    built = make_curriculum(c.name, c.options)
    for k in range(len(getattr(built, "levels", ()))):
        try:
            ENVS.probe(cfg.env.name, built.env_options(cfg.env.options, k))
        except ValueError as err:
            raise ValueError(f"curriculum level {k}: {err}") from None
