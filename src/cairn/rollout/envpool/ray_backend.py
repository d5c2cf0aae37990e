"""The Ray backend of ``WorkerPool``: one Ray actor per worker, on any node of a cluster.

Imported only when Ray runs the workers (``rollout.worker_backend``), so that importing
cairn never imports Ray. Like the process backend, a call is timed from when its actor
began it (``since``), and every busy actor is watched while any answer is awaited.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol, TypeVar, cast

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayActorError

from cairn._env_host import EnvFault, EnvHost, Parent
from cairn.envs import TextEnv
from cairn.rollout.envpool.faults import EnvLost, EnvTimeout
from cairn.rollout.envpool.proxy import Pending, Reply, Request

__all__ = ["RayBackend"]

T = TypeVar("T")
_Call = tuple["ray.ObjectRef[Reply]", Pending]  # a call in flight: its Ray reference, its handle


class _Remote(Protocol[T]):
    """An actor's method as Ray reaches it: ``.remote(...)`` sends the call."""

    def remote(self, *args: object) -> ray.ObjectRef[T]: ...


class _HostActor(Protocol):
    """An ``EnvHost`` actor's methods as Ray reaches them (Ray's own types give them the
    signatures of the class's methods, without ``.remote``)."""

    @property
    def ping(self) -> _Remote[bool]: ...

    @property
    def call(self) -> _Remote[Reply]: ...

    @property
    def close(self) -> _Remote[None]: ...


class _HostClass(Protocol):
    """``EnvHost`` made remote: ``.remote(...)`` starts an actor."""

    def remote(self, factory: Callable[[], TextEnv], parent: Parent) -> _HostActor: ...


class RayBackend:
    """One Ray actor per worker (``EnvHost``); ``generation(worker)`` counts its actor's
    replacements, so that an env can tell its state was lost."""

    def __init__(self, factory: Callable[[], TextEnv], workers: int, timeout_s: float | None):
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.factory, self.timeout_s = factory, timeout_s
        self.actor = cast(_HostClass, ray.remote(num_cpus=0)(EnvHost))  # light steps: no cores
        self.driver = Parent.here(child=False)  # an actor on this host dies with the driver
        self.hosts = [self.actor.remote(factory, self.driver) for _ in range(workers)]
        ray.get([h.ping.remote() for h in self.hosts])  # started before any call is timed
        self.generations = [0] * workers
        self.pending: list[deque[_Call]] = [deque() for _ in range(workers)]
        self.since = [0.0] * workers
        self.restarts = 0

    def generation(self, worker: int) -> int:
        return self.generations[worker]

    def submit(self, worker: int, request: Request) -> Pending:
        ref = self.hosts[worker].call.remote(*request)
        if not self.pending[worker]:
            self.since[worker] = time.monotonic()
        handle = Pending(self.wait)
        self.pending[worker].append((ref, handle))
        return handle

    def deadline(self, worker: int) -> float:
        return math.inf if self.timeout_s is None else self.since[worker] + self.timeout_s

    def wait(self, handle: Pending) -> None:
        """Take answers from every busy actor until ``handle``'s has come (a timed-out or
        dead actor is replaced: its first waiting call fails, the others are lost)."""
        while not handle.done:
            now = time.monotonic()
            for w in [w for w, q in enumerate(self.pending) if q and now >= self.deadline(w)]:
                self._fail(w, EnvTimeout(f"no answer within env_timeout_s={self.timeout_s:g}"))
            busy = [w for w, q in enumerate(self.pending) if q]
            if handle.done or not busy:
                return
            firsts = {self.pending[w][0][0]: w for w in busy}
            wait_s = min(self.deadline(w) for w in busy) - now
            timeout = None if math.isinf(wait_s) else max(0.0, wait_s)
            ready, _ = ray.wait(list(firsts), num_returns=1, timeout=timeout)
            for ref in ready:
                self._receive(firsts[ref])

    def _receive(self, worker: int) -> None:
        ref, first = self.pending[worker][0]
        try:
            first.answer(ray.get(ref))
        except RayActorError as err:
            self._fail(worker, EnvLost(f"env worker (Ray actor) died: {type(err).__name__}"))
            return
        except Exception as err:  # the env raised: handed to the caller
            first.fail(err)
        self.pending[worker].popleft()
        self.since[worker] = time.monotonic()

    def _fail(self, worker: int, fault: EnvFault) -> None:
        calls = list(self.pending[worker])
        self.pending[worker].clear()
        for k, (_, h) in enumerate(calls):
            h.fail(fault if k == 0 else EnvLost("env worker replaced"))
        self.replace(worker, self.generations[worker])

    def replace(self, worker: int, generation: int) -> None:
        """Kill worker's actor and start a new one (once per generation)."""
        if self.generations[worker] != generation:
            return
        ray.kill(_handle(self.hosts[worker]), no_restart=True)
        self.hosts[worker] = self.actor.remote(self.factory, self.driver)
        ray.get(self.hosts[worker].ping.remote())
        self.generations[worker] += 1
        self.restarts += 1

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a dead actor has nothing left to close
            ray.get([h.close.remote() for h in self.hosts], timeout=30)
        for h in self.hosts:
            ray.kill(_handle(h))
        self.hosts = []


def _handle(actor: _HostActor) -> ActorHandle[EnvHost]:
    """The actor as Ray's own type (what ``ray.kill`` takes)."""
    return cast("ActorHandle[EnvHost]", actor)
