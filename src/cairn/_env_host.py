"""The worker side of ``cairn.rollout.envpool``: envs by slot, served in another process.

Kept outside ``cairn.rollout`` (whose package imports torch and transformers) so that a
worker process starts by importing only the env it runs.

``EnvFactory`` builds the env a config names and carries the env's registry entry with it:
a worker in a fresh interpreter (a Ray actor, a spawned process) registers it before
building, so an env registered in the driver (``cairn.envs.register``) is known there too.
Its module must be importable on the worker (installed, or on its ``PYTHONPATH``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EnvFactory", "EnvFault", "EnvFaultRateError", "EnvHost", "serve"]


class EnvFault(Exception):
    """An env call that did not answer: the env raised (``__cause__``), hung or was lost.
    Here, light to import, so the CLI can name one that reaches it (``cairn.rollout.envpool``
    re-exports it with its kinds)."""

    kind = "error"


class EnvFaultRateError(RuntimeError):
    """Too many episodes lost to env faults (``cairn.rollout.envpool.FaultStats``): the env,
    not bad luck, is the problem. Here, light to import, so the CLI can name it."""


@dataclass
class EnvFactory:
    """``make(name, **options)`` that also works where ``name`` was never registered."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    target: str = ""  # "package.module:Class", from the registry of the process that built it
    extra: str | None = None

    @classmethod
    def of(cls, name: str, **options: Any) -> EnvFactory:
        from cairn.envs import ENVS

        ENVS.get(name)  # an unknown name fails here, listing the available ones
        target, extra = ENVS.entries[name]
        return cls(name, dict(options), target, extra)

    def __call__(self) -> Any:
        from cairn.envs import ENVS, make

        if self.target and self.name not in ENVS.entries:
            ENVS.register(self.name, self.target, self.extra)
        return make(self.name, **self.options)


#: Env attributes that are constant per env, sent to its proxy with every ``reset`` answer.
CONSTANTS = ("example_action", "tools")


class EnvHost:
    """The envs of one worker, by slot; every call answers with the env's current
    instruction, a ``reset`` also with the env's ``CONSTANTS`` (a dict)."""

    def __init__(self, factory: Callable[[], Any]):
        self.factory = factory
        self.envs: dict[int, Any] = {}

    def call(self, slot: int, method: str, args: tuple, kwargs: dict) -> tuple[Any, ...]:
        if method == "__rebuild__":  # after a fault: the next call builds a new env
            self.drop(slot)
            return None, ""
        env = self.envs.get(slot)
        if env is None:
            env = self.envs[slot] = self.factory()
        value = getattr(env, method)(*args, **kwargs)
        if method == "reset":
            return (
                value,
                env.instruction,
                {k: getattr(env, k) for k in CONSTANTS if hasattr(env, k)},
            )
        return value, env.instruction

    def ping(self) -> bool:
        """Answers once the worker is up (a Ray actor's start is not an env call's time)."""
        return True

    def drop(self, slot: int) -> None:
        env = self.envs.pop(slot, None)
        if env is not None:
            with contextlib.suppress(Exception):  # a broken env may fail to close too
                env.close()

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs = {}


def serve(conn: Any, factory: Callable[[], Any]) -> None:
    """Worker process loop: answer (slot, method, args, kwargs) requests in order."""
    host = EnvHost(factory)
    while True:
        msg = conn.recv()
        if msg is None:
            host.close()
            conn.close()
            return
        try:
            conn.send((True, host.call(*msg)))
        except Exception as err:  # the caller re-raises it
            conn.send((False, err))
