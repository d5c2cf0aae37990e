"""Envs on workers: ``rollout.workers: N`` puts the envs of a pool on N workers, so slow
envs (ScienceWorld's JVM) step in parallel (``WorkerPool``), env slot i on worker i mod N:
Ray actors when Ray is installed (one per worker, on any node of a Ray cluster,
``ray_backend``), else local processes (``process_backend``). Each env is reached through
a ``RemoteEnv`` proxy with the ``TextEnv`` API, so rollout code is unchanged.

An env in a worker is the very env the in-process path would build (same factory, same
seeds, same actions in the same order), so both paths give identical episodes (tested).
A dead or hung worker is replaced, and every env it held is rebuilt on its next reset.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any, Protocol, cast

from cairn.envs import TextEnv
from cairn.rollout.envpool.faults import EnvLost, FaultStats, disown, own
from cairn.rollout.envpool.local import EnvPool
from cairn.rollout.envpool.proxy import EnvProxy, Failed, Handle, Reply, Request

__all__ = ["BACKENDS", "RemoteEnv", "WorkerPool", "make_env_pool", "ray_available"]

BACKENDS = ("auto", "ray", "process")


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


class Backend(Protocol):
    """Where the workers run (``ray_backend.RayBackend``, ``process_backend.ProcessBackend``):
    ``submit`` sends a call to a worker's env slot and returns its handle at once."""

    restarts: int  # workers replaced so far

    def generation(self, worker: int) -> int:
        """How many times ``worker`` was replaced (its envs' state is lost each time)."""
        ...

    def submit(self, worker: int, request: Request) -> Handle[Reply]: ...

    def close(self) -> None: ...


class RemoteEnv(EnvProxy):
    """A ``TextEnv`` living in a worker. ``instruction`` is refreshed by every answer;
    ``example_action`` and ``tools`` (constant per env) by every ``reset``'s, so prompts
    read them as they read a local env's (their class defaults before the first reset).

    An env whose worker was replaced since its last ``reset``/``restore`` has lost its state:
    every other call raises ``EnvLost`` until it is reset.
    """

    def __init__(self, pool: WorkerPool, worker: int, slot: int):
        self.pool, self._worker, self._slot = pool, worker, slot
        self._generation = 0
        self.instruction = ""
        self.example_action: str = TextEnv.example_action
        self.tools: tuple[dict[str, Any], ...] = TextEnv.tools

    def submit(self, method: str, *args: object, **kwargs: object) -> Handle[object]:
        """Send a call now; ``.result()`` on the returned handle waits for its answer."""
        backend = self.pool.backend
        generation = backend.generation(self._worker)
        if method in ("reset", "restore"):
            self._generation = generation
        elif generation != self._generation:
            return Failed(EnvLost("its env worker was replaced; reset it"))
        request = Request(self._slot, method, args, kwargs)
        return _Answer(self, backend.submit(self._worker, request))

    def _call(self, method: str, *args: object, **kwargs: object) -> object:
        return self.submit(method, *args, **kwargs).result()

    def vocabulary(self) -> list[str]:
        return cast("list[str]", self._call("vocabulary"))

    def close(self) -> None:
        """Envs are closed with their worker (``WorkerPool.close``)."""


class _Answer:
    """A remote call's handle: its value, once the env's proxy took the attributes the
    answer carries (the instruction; after a reset, the env's constants)."""

    def __init__(self, env: RemoteEnv, handle: Handle[Reply]):
        self.env, self.handle = env, handle

    def result(self) -> object:
        value, instruction, *constants = self.handle.result()
        self.env.instruction = cast(str, instruction)
        for attrs in constants:  # a reset's answer: the env's CONSTANTS
            self.env.__dict__.update(cast("dict[str, object]", attrs))
        return value


class WorkerPool:
    """``EnvPool`` with its envs on ``workers`` Ray actors or local processes."""

    def __init__(
        self,
        factory: Callable[[], TextEnv],
        workers: int,
        backend: str = "auto",
        timeout_s: float | None = None,
        max_error_rate: float = 1.0,
        start_method: str | None = None,
    ):
        """``start_method``: of the process backend's workers (default fork, else spawn)."""
        self.factory = factory  # what each worker builds its envs with
        if not (isinstance(workers, int) and workers > 0):
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        if backend not in BACKENDS:
            raise ValueError(f"worker backend {backend!r}; allowed: {', '.join(BACKENDS)}")
        if backend == "ray" and not ray_available():
            raise ImportError("worker backend 'ray' needs Ray: pip install 'cairn-rl[ray]'")
        use_ray = backend == "ray" or (backend == "auto" and ray_available())
        self.backend_name = "ray" if use_ray else "process"
        self.workers = workers
        self._backend: Backend | None = _start_backend(
            use_ray, factory, workers, timeout_s, start_method
        )
        self.envs: list[RemoteEnv] = []
        self.faults = FaultStats(max_error_rate)
        self._worker_restarts = 0

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            raise RuntimeError("this worker pool is closed")
        return self._backend

    def take(self, n: int) -> list[TextEnv]:
        """The first ``n`` envs (``RemoteEnv`` proxies: they answer every ``TextEnv`` call)."""
        self._count_worker_restarts()
        while len(self.envs) < n:
            slot = len(self.envs)
            env = RemoteEnv(self, slot % self.workers, slot)
            own(env, self)
            self.envs.append(env)
        return cast("list[TextEnv]", self.envs[:n])

    def rebuild(self, env: object) -> None:
        """After a fault: the env's worker builds a new env in its slot (a replaced worker
        builds all of them anew, on first use). ``env``: a ``RemoteEnv``, or a wrapper that
        passes its attributes through."""
        remote = cast(RemoteEnv, env)
        if remote._generation == self.backend.generation(remote._worker):  # else replaced
            self.backend.submit(remote._worker, Request(remote._slot, "__rebuild__", (), {}))
        self.faults.restarts += 1
        self._count_worker_restarts()

    def _count_worker_restarts(self) -> None:
        new = self.backend.restarts - self._worker_restarts
        self.faults.worker_restarts += new
        self._worker_restarts += new

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
        for env in self.envs:
            disown(env)
        self.envs = []


def _start_backend(
    use_ray: bool,
    factory: Callable[[], TextEnv],
    workers: int,
    timeout_s: float | None,
    start_method: str | None,
) -> Backend:
    """The workers, started: Ray actors (Ray imported only here) or local processes."""
    if use_ray:
        from cairn.rollout.envpool.ray_backend import RayBackend

        return RayBackend(factory, workers, timeout_s)
    from cairn.rollout.envpool.process_backend import ProcessBackend

    return ProcessBackend(factory, workers, timeout_s, start_method)


def make_env_pool(
    factory: Callable[[], TextEnv],
    workers: int = 0,
    backend: str = "auto",
    timeout_s: float | None = None,
    max_error_rate: float = 1.0,
) -> EnvPool | WorkerPool:
    """The in-process ``EnvPool`` for ``workers=0``, else a ``WorkerPool``."""
    if workers == 0:
        return EnvPool(factory, timeout_s, max_error_rate)
    return WorkerPool(factory, workers, backend, timeout_s, max_error_rate)
