"""Env faults: their kinds, the pool that owns a faulted env, and the counts a pool keeps.

An env call that raised, ran past ``rollout.env_timeout_s`` or lost its worker answers with
an ``EnvFault`` (``cairn._env_host``, light to import for the CLI) in place of its result;
``EnvTimeout`` and ``EnvLost`` are its kinds here. ``report`` hands a fault to the pool that
built the env (``owner_of``), which counts it and rebuilds the env. ``FaultStats`` holds a
pool's counts for the iteration (``rollout/env_errors``, ``rollout/env_timeouts``,
``rollout/env_restarts``, ``rollout/worker_restarts``) and stops the run with one line when
the share of lost episodes passes ``rollout.max_env_error_rate``.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from cairn._env_host import EnvFault, EnvFaultRateError

__all__ = [
    "FAULT_WINDOW",
    "EnvLost",
    "EnvOwner",
    "EnvTimeout",
    "FaultStats",
    "as_fault",
    "disown",
    "own",
    "owner_of",
    "report",
]

#: Iterations over which ``FaultStats`` measures the share of episodes lost to env faults.
FAULT_WINDOW = 10


class EnvTimeout(EnvFault):
    """An env call ran past the pool's ``timeout_s``."""

    kind = "timeout"


class EnvLost(EnvFault):
    """The worker holding the env died or was replaced; the env's state is gone."""


def as_fault(err: BaseException) -> EnvFault:
    """``err`` as an ``EnvFault``: itself when it is one, else a fault caused by it."""
    if isinstance(err, EnvFault):
        return err
    fault = EnvFault(f"{type(err).__name__}: {err}")
    fault.__cause__ = err
    return fault


class FaultStats:
    """A pool's fault counts for the current iteration and the loss rate over a window.

    ``lost`` / ``episodes``: episodes ended by a fault / all episodes, counted when a
    rollout drops its faulted episodes (``cairn.rollout.loop.drop_faulted``).
    ``end_iteration`` returns the iteration's counts as metrics and raises
    ``EnvFaultRateError`` when ``lost / episodes`` over the last ``FAULT_WINDOW``
    iterations passes ``max_rate``, or when an iteration lost every episode.
    """

    def __init__(self, max_rate: float = 1.0, window: int = FAULT_WINDOW):
        self.max_rate = max_rate
        self.history: deque[tuple[int, int]] = deque(maxlen=window)
        self.last = ""
        self._reset_counts()

    def _reset_counts(self) -> None:
        self.errors = self.timeouts = self.restarts = self.worker_restarts = 0
        self.episodes = self.lost = 0

    def fault(self, fault: EnvFault) -> None:
        if fault.kind == "timeout":
            self.timeouts += 1
        else:
            self.errors += 1
        self.last = str(fault)

    def metrics(self) -> dict[str, float]:
        return {
            "rollout/env_errors": self.errors,
            "rollout/env_timeouts": self.timeouts,
            "rollout/env_restarts": self.restarts,
            "rollout/worker_restarts": self.worker_restarts,
        }

    def end_iteration(self) -> dict[str, float]:
        """This iteration's counts (then zeroed); raises past the loss-rate threshold."""
        out = self.metrics()
        episodes, lost = self.episodes, self.lost
        self.history.append((episodes, lost))
        self._reset_counts()
        total = sum(e for e, _ in self.history)
        gone = sum(x for _, x in self.history)
        if episodes and lost == episodes:
            raise EnvFaultRateError(
                f"env faults ended all {episodes} episodes of an iteration; last: {self.last}; "
                "fix the env, then resume from the last checkpoint (--resume)"
            )
        if total and gone / total > self.max_rate:
            raise EnvFaultRateError(
                f"env faults ended {gone} of {total} episodes over the last "
                f"{len(self.history)} iterations ({gone / total:.0%}), more than "
                f"rollout.max_env_error_rate={self.max_rate:g}; last: {self.last}; fix the env "
                "or raise the threshold, then resume from the last checkpoint (--resume)"
            )
        return out


class EnvOwner(Protocol):
    """A pool as a faulted env's owner: it counts the fault and rebuilds the env."""

    @property
    def faults(self) -> FaultStats: ...

    def rebuild(self, env: object) -> None: ...


_OWNERS: dict[int, EnvOwner] = {}  # id(env a pool handed out) -> that pool


def own(env: object, owner: EnvOwner) -> None:
    """Record that ``owner`` built ``env`` (until ``disown``)."""
    _OWNERS[id(env)] = owner


def disown(env: object) -> None:
    _OWNERS.pop(id(env), None)


def owner_of(env: object) -> EnvOwner | None:
    """The pool that built ``env`` (looking through wrappers' ``_env``), else None."""
    while env is not None:
        pool = _OWNERS.get(id(env))
        if pool is not None:
            return pool
        env = getattr(env, "_env", None)
    return None


def report(env: object, fault: EnvFault) -> None:
    """Count ``fault`` in the owning pool and have it rebuild ``env`` (a no-op without one)."""
    pool = owner_of(env)
    if pool is not None:
        pool.faults.fault(fault)
        pool.rebuild(env)
