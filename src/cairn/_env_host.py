"""The worker side of ``cairn.rollout.envpool.workers``: envs by slot, served in another
process.

Kept outside ``cairn.rollout`` (whose package imports torch and transformers) so that a
worker process starts by importing only the env it runs.

``EnvFactory`` builds the env a config names and carries the env's registry entry and the
config's ``imports`` with it: a worker in a fresh interpreter (a Ray actor, a spawned
process) loads the plugins (those modules, and the installed packages' entry points:
``cairn.plugins``) and registers the entry before building, so what the driver knows (an
env registered by a plugin, a reward it registers, ``cairn.envs.register``) is known there
too. Those modules must be importable on the worker (installed, or on its ``PYTHONPATH``).

A worker dies with the process it serves (`watch_parent`): a trainer killed with SIGKILL
(or by the out-of-memory killer) leaves no worker behind. A forked or spawned worker asks
Linux for a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``) and also runs a
watchdog thread that exits once it has been re-parented (the portable fallback, and the
guard for a parent that died before the signal was set); a Ray actor on the driver's
machine runs the same watchdog on the driver's pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from cairn.envs import TextEnv

__all__ = ["EnvFactory", "EnvFault", "EnvFaultRateError", "EnvHost", "Parent", "serve"]

WATCH_INTERVAL_S = 0.5  # how often a worker's watchdog looks for its parent
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True)
class Parent:
    """The process a worker serves: its pid and host; ``child``: the worker is its child
    (forked or spawned: watched through re-parenting), else a Ray actor (watched by pid,
    only on the same host); ``signal``: ask for the parent-death signal (only when the
    worker was started from the parent's main thread, as Linux sends it when the starting
    thread ends)."""

    pid: int
    host: str
    child: bool = True
    signal: bool = True

    @classmethod
    def here(cls, child: bool = True) -> Parent:
        main = threading.current_thread() is threading.main_thread()
        return cls(os.getpid(), socket.gethostname(), child, child and main)


def _death_signal() -> None:
    """Linux: SIGKILL this process when its parent (thread) dies; elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _alive(parent: Parent) -> bool:
    if parent.child:
        return os.getppid() == parent.pid
    try:
        os.kill(parent.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch_parent(parent: Parent | None) -> None:
    """Exit this worker (status 0, no clean-up: there is no one to answer) once ``parent``
    is gone; see the module docstring. Nothing for a Ray actor on another host."""
    if parent is None or (not parent.child and parent.host != socket.gethostname()):
        return
    if parent.child and os.getppid() != parent.pid:  # a fork server's child (or orphaned)
        parent = Parent(parent.pid, parent.host, child=False, signal=False)  # watch the pid
    if parent.signal:
        _death_signal()
    if not _alive(parent):  # it died before the signal was asked for
        os._exit(0)

    def watch() -> None:
        while _alive(parent):
            time.sleep(WATCH_INTERVAL_S)
        os._exit(0)

    threading.Thread(target=watch, name="cairn-parent-watchdog", daemon=True).start()


class EnvFault(Exception):
    """An env call that did not answer: the env raised (``__cause__``), hung or was lost.
    Here, light to import, so the CLI can name one that reaches it (its kinds:
    ``cairn.rollout.envpool.faults``)."""

    kind = "error"


class EnvFaultRateError(RuntimeError):
    """Too many episodes lost to env faults (``cairn.rollout.envpool.faults.FaultStats``):
    the env, not bad luck, is the problem. Here, light to import, so the CLI can name it."""


@dataclass
class EnvFactory:
    """``make(name, **options)`` that also works where ``name`` was never registered."""

    name: str
    options: dict[str, object] = field(default_factory=dict)
    target: str = ""  # "package.module:Class", from the registry of the process that built it
    extra: str | None = None
    imports: tuple[str, ...] = ()  # the config's ``imports``: loaded before the env is built

    @classmethod
    def of(cls, name: str, **options: object) -> EnvFactory:
        from cairn.envs import ENVS

        ENVS.get(name)  # an unknown name fails here, listing the available ones
        target, extra = ENVS.entries[name]
        return cls(name, dict(options), target, extra)

    def __call__(self) -> TextEnv:
        from cairn.envs import ENVS, make

        _load_plugins(self.imports)
        if self.target and self.name not in ENVS.entries:
            ENVS.register(self.name, self.target, self.extra)
        return make(self.name, **self.options)


_LOADED: set[tuple[str, ...]] = set()  # the imports whose plugins this process has loaded


def _load_plugins(imports: tuple[str, ...]) -> None:
    """``cairn.plugins.load_plugins(imports)`` once per process (a forked worker inherits
    what its parent loaded; each env build would otherwise rescan the entry points)."""
    if imports in _LOADED:
        return
    from cairn.plugins import load_plugins

    load_plugins(imports)
    _LOADED.add(imports)


#: Env attributes that are constant per env, sent to its proxy with every ``reset`` answer.
CONSTANTS = ("example_action", "tools")


class EnvHost:
    """The envs of one worker, by slot; every call answers with the env's current
    instruction, a ``reset`` also with the env's ``CONSTANTS`` (a dict)."""

    def __init__(self, factory: Callable[[], TextEnv], parent: Parent | None = None):
        self.factory = factory
        self.envs: dict[int, TextEnv] = {}
        watch_parent(parent)  # a Ray actor: dies with the driver (same host)

    def call(
        self, slot: int, method: str, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> tuple[object, ...]:
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


def serve(conn: Connection, factory: Callable[[], TextEnv], parent: Parent | None = None) -> None:
    """Worker process loop: answer (slot, method, args, kwargs) requests in order; exits
    when ``parent`` dies (`watch_parent`)."""
    host = EnvHost(factory, parent)
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
