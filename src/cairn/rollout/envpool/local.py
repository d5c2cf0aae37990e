"""The in-process pool: env instances in this process, reused across iterations (an env
may hold a process, e.g. a JVM), each optionally on a thread of its own for timeouts.

A timeout needs the call to run where it can be abandoned: with ``timeout_s`` set, an env
runs its calls on a thread of its own (``TimedEnv``; calls still happen one at a time, in
the order of the plain path, so episodes are identical). Without a timeout the pool hands
out the env itself: the only cost of fault handling is a ``try``.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, cast

from cairn.envs import TextEnv
from cairn.rollout.envpool.faults import EnvLost, EnvTimeout, FaultStats, disown, own
from cairn.rollout.envpool.proxy import EnvProxy

__all__ = ["EnvPool", "TimedEnv"]

# a call for the env's thread: (bound method, args, kwargs, its answer, set when answered)
_Job = tuple[
    Callable[..., object],
    tuple[object, ...],
    dict[str, object],
    list[tuple[bool, object]],
    threading.Event,
]


class TimedEnv(EnvProxy):
    """An env whose calls run on a thread of their own, abandoned after ``timeout_s``.

    Calls are made one at a time (the caller waits for each), so results are those of the
    plain env. A call past the timeout raises ``EnvTimeout``; the thread (daemon) is left to
    finish or hang, and this wrapper refuses every later call: the pool builds a new one.
    """

    def __init__(self, env: TextEnv, timeout_s: float):
        self._env, self._timeout = env, timeout_s
        self._calls: queue.Queue[_Job | None] = queue.Queue()
        self._dead = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            job = self._calls.get()
            if job is None:
                return
            fn, args, kwargs, box, done = job
            try:
                box.append((True, fn(*args, **kwargs)))
            except BaseException as err:  # handed to the caller
                box.append((False, err))
            done.set()

    def _call(self, method: str, *args: object, **kwargs: object) -> object:
        if self._dead:
            raise EnvLost("this env timed out before and was abandoned")
        box: list[tuple[bool, object]] = []
        done = threading.Event()
        self._calls.put((getattr(self._env, method), args, kwargs, box, done))
        if not done.wait(self._timeout):
            self._dead = True
            raise EnvTimeout(f"{method} ran past env_timeout_s={self._timeout:g}")
        ok, value = box[0]
        if not ok:
            raise cast(BaseException, value)
        return value

    def close(self) -> None:
        if not self._dead:
            try:
                self._call("close")
            finally:
                self._calls.put(None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


class EnvPool:
    """Env instances reused across iterations (an env may hold a process, e.g. a JVM).

    ``timeout_s``: wrap every env in a ``TimedEnv`` (None: call envs directly).
    """

    def __init__(
        self,
        factory: Callable[[], TextEnv],
        timeout_s: float | None = None,
        max_error_rate: float = 1.0,
    ):
        self.factory, self.timeout_s = factory, timeout_s
        self.envs: list[TextEnv | TimedEnv] = []
        self.faults = FaultStats(max_error_rate)

    def _build(self) -> TextEnv | TimedEnv:
        plain = self.factory()
        env = plain if self.timeout_s is None else TimedEnv(plain, self.timeout_s)
        own(env, self)
        return env

    def take(self, n: int) -> list[TextEnv]:
        """The first ``n`` envs (a ``TimedEnv`` answers every ``TextEnv`` call)."""
        while len(self.envs) < n:
            self.envs.append(self._build())
        return cast("list[TextEnv]", self.envs[:n])

    def rebuild(self, env: object) -> None:
        """Replace ``env`` (after a fault) with a new instance in its slot."""
        slot = next((i for i, e in enumerate(self.envs) if e is env), None)
        if slot is None:
            return
        disown(env)
        if not getattr(env, "_dead", False):  # an abandoned (hung) env is not waited for
            with contextlib.suppress(Exception):  # a broken env may fail to close too
                self.envs[slot].close()
        self.envs[slot] = self._build()
        self.faults.restarts += 1

    def close(self) -> None:
        for env in self.envs:
            disown(env)
            env.close()
        self.envs = []
