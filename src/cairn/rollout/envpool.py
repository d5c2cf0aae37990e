"""Env pools: the env instances a rollout steps, in this process or on workers.

``EnvPool`` keeps env instances in this process, reused across iterations (an env may hold
a process, e.g. a JVM). ``rollout.workers: N`` puts the envs of a pool on N workers
instead, so slow envs (ScienceWorld's JVM) step in parallel (``WorkerPool``), env slot i
on worker i mod N: Ray actors when Ray is installed (one per worker, on any node of a Ray
cluster), else local processes (``multiprocessing``, forked). Each env is reached through
a ``RemoteEnv`` proxy with the ``TextEnv`` API, so rollout code is unchanged; ``step_all``
/ ``reset_all`` send one request per env first and then collect the answers, so the N
workers step at the same time while each worker steps its own envs in order.
``rollout.workers: 0`` keeps the plain in-process ``EnvPool``.

An env in a worker is the very env the in-process path would build (same factory, same
seeds, same actions in the same order), so both paths give identical episodes (tested).

Faults cost one episode, not the run. ``step_all`` / ``reset_all`` answer an env that
raised, ran past ``timeout_s`` (``rollout.env_timeout_s``) or whose worker died with an
``EnvFault`` in place of its result; the turn loop ends that episode as an infrastructure
failure (``cairn.rollout.loop``) and the pool that owns the env rebuilds it (a dead or hung
worker process or actor is replaced, and every env it held is rebuilt). Each pool counts
what happened in ``FaultStats`` (``rollout/env_errors``, ``rollout/env_timeouts``,
``rollout/env_restarts``, ``rollout/worker_restarts``) and stops the run with one line
when the share of lost episodes passes ``rollout.max_env_error_rate``.

A timeout needs the call to run where it can be abandoned: with ``timeout_s`` set, an
in-process env runs its calls on a thread of its own (``TimedEnv``; calls still happen one
at a time, in the order of the plain path, so episodes are identical); a worker waits for
an answer at most ``timeout_s`` and is killed and replaced after that. A worker answers
its envs in order, so a call is timed from when the worker began it (the previous answer's
arrival; the parent watches every busy worker while it waits for any one); the first call
of an env also builds it (a JVM start): ``timeout_s`` must cover that. Without a timeout
the in-process path calls the env directly, as before: the only cost is a ``try``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, cast

from cairn._env_host import EnvFactory, EnvFault, EnvFaultRateError, EnvHost, Parent, serve
from cairn.envs import StepResult, TextEnv

__all__ = [
    "BACKENDS",
    "FAULT_WINDOW",
    "EnvFactory",
    "EnvFault",
    "EnvFaultRateError",
    "EnvLost",
    "EnvPool",
    "EnvTimeout",
    "FaultStats",
    "GuardedEnv",
    "RemoteEnv",
    "TimedEnv",
    "WorkerPool",
    "make_env_pool",
    "owner_of",
    "ray_available",
    "reset_all",
    "restore_guarded",
    "snapshot_guarded",
    "step_all",
]

BACKENDS = ("auto", "ray", "process")
#: Iterations over which ``FaultStats`` measures the share of episodes lost to env faults.
FAULT_WINDOW = 10


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


# -- faults ----------------------------------------------------------------------------------
class EnvTimeout(EnvFault):
    """An env call ran past the pool's ``timeout_s``."""

    kind = "timeout"


class EnvLost(EnvFault):
    """The worker holding the env died or was replaced; the env's state is gone."""


def _fault(err: BaseException) -> EnvFault:
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


_OWNERS: dict[int, EnvPool] = {}  # id(in-process env) -> the EnvPool that built it


def owner_of(env: Any) -> EnvPool | WorkerPool | None:
    """The pool that built ``env`` (looking through wrappers' ``_env``), else None."""
    while env is not None:
        pool = env.pool if isinstance(env, RemoteEnv) else _OWNERS.get(id(env))
        if pool is not None:
            return pool
        env = getattr(env, "_env", None)
    return None


def report(env: Any, fault: EnvFault) -> None:
    """Count ``fault`` in the owning pool and have it rebuild ``env`` (a no-op without one)."""
    pool = owner_of(env)
    if pool is not None:
        pool.faults.fault(fault)
        pool.rebuild(env)


# -- the in-process pool --------------------------------------------------------------------
class _EnvProxy:
    """The env protocol's calls, each forwarded to ``_call(method, ...)`` (a thread, a
    worker process or a Ray actor answers it)."""

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        return self._call("reset", seed=seed, options=options)

    def step(self, action: str) -> StepResult:
        return self._call("step", action)

    def snapshot(self) -> Any:
        return self._call("snapshot")

    def restore(self, snap: Any) -> tuple[str, dict]:
        return self._call("restore", snap)


class TimedEnv(_EnvProxy):
    """An env whose calls run on a thread of their own, abandoned after ``timeout_s``.

    Calls are made one at a time (the caller waits for each), so results are those of the
    plain env. A call past the timeout raises ``EnvTimeout``; the thread (daemon) is left to
    finish or hang, and this wrapper refuses every later call: the pool builds a new one.
    """

    def __init__(self, env: TextEnv, timeout_s: float):
        self._env, self._timeout = env, timeout_s
        self._calls: queue.Queue = queue.Queue()
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

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._dead:
            raise EnvLost("this env timed out before and was abandoned")
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._calls.put((getattr(self._env, method), args, kwargs, box, done))
        if not done.wait(self._timeout):
            self._dead = True
            raise EnvTimeout(f"{method} ran past env_timeout_s={self._timeout:g}")
        ok, value = box[0]
        if not ok:
            raise value
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
        self.envs: list[Any] = []
        self.faults = FaultStats(max_error_rate)

    def _build(self) -> Any:
        plain = self.factory()
        env = plain if self.timeout_s is None else TimedEnv(plain, self.timeout_s)
        _OWNERS[id(env)] = self
        return env

    def take(self, n: int) -> list[Any]:
        while len(self.envs) < n:
            self.envs.append(self._build())
        return self.envs[:n]

    def rebuild(self, env: Any) -> None:
        """Replace ``env`` (after a fault) with a new instance in its slot."""
        slot = next((i for i, e in enumerate(self.envs) if e is env), None)
        if slot is None:
            return
        _OWNERS.pop(id(env), None)
        if not getattr(env, "_dead", False):  # an abandoned (hung) env is not waited for
            with contextlib.suppress(Exception):  # a broken env may fail to close too
                env.close()
        self.envs[slot] = self._build()
        self.faults.restarts += 1

    def close(self) -> None:
        for env in self.envs:
            _OWNERS.pop(id(env), None)
            env.close()
        self.envs = []


# -- backends: submit(worker, slot, method, args, kwargs) -> a handle with .result() ---------
class _Done:
    def __init__(self, value: Any):
        self.value = value

    def result(self) -> Any:
        return self.value


class _Failed:
    def __init__(self, fault: EnvFault):
        self.fault = fault

    def result(self) -> Any:
        raise self.fault


class _RayBackend:
    """One Ray actor per worker; like the process backend, a call is timed from when its
    actor began it (``since``), and every busy actor is watched while any answer is awaited."""

    def __init__(self, factory: Callable[[], TextEnv], workers: int, timeout_s: float | None):
        import ray

        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.ray, self.factory, self.timeout_s = ray, factory, timeout_s
        # Ray's stubs type neither ``.remote`` on a class made remote nor on its methods.
        self.actor: Any = ray.remote(num_cpus=0)(EnvHost)  # env steps are light: no cores
        self.driver = Parent.here(child=False)  # an actor on this host dies with the driver
        self.hosts: list[Any] = [self.actor.remote(factory, self.driver) for _ in range(workers)]
        ray.get([h.ping.remote() for h in self.hosts])  # started before any call is timed
        self.generations = [0] * workers
        self.pending: list[deque[_RayHandle]] = [deque() for _ in range(workers)]
        self.since = [0.0] * workers
        self.restarts = 0

    def generation(self, worker: int) -> int:
        return self.generations[worker]

    def submit(self, worker: int, slot: int, method: str, args: tuple, kwargs: dict):
        ref = self.hosts[worker].call.remote(slot, method, args, kwargs)
        if not self.pending[worker]:
            self.since[worker] = time.monotonic()
        handle = _RayHandle(self, ref)
        self.pending[worker].append(handle)
        return handle

    def deadline(self, worker: int) -> float:
        return math.inf if self.timeout_s is None else self.since[worker] + self.timeout_s

    def wait(self, handle: _RayHandle) -> None:
        """Take answers from every busy actor until ``handle``'s has come (a timed-out or
        dead actor is replaced: its first waiting call fails, the others are lost)."""
        while not handle.done:
            now = time.monotonic()
            for w in [w for w, q in enumerate(self.pending) if q and now >= self.deadline(w)]:
                self._fail(w, EnvTimeout(f"no answer within env_timeout_s={self.timeout_s:g}"))
            busy = [w for w, q in enumerate(self.pending) if q]
            if handle.done or not busy:
                return
            firsts = {self.pending[w][0].ref: w for w in busy}
            wait_s = min(self.deadline(w) for w in busy) - now
            timeout = None if math.isinf(wait_s) else max(0.0, wait_s)
            ready, _ = self.ray.wait(list(firsts), num_returns=1, timeout=timeout)
            for ref in ready:
                self._receive(firsts[ref])

    def _receive(self, worker: int) -> None:
        from ray.exceptions import RayActorError

        first = self.pending[worker][0]
        try:
            first.value = self.ray.get(first.ref)
        except RayActorError as err:
            self._fail(worker, EnvLost(f"env worker (Ray actor) died: {type(err).__name__}"))
            return
        except Exception as err:  # the env raised: handed to the caller
            first.ok, first.value = False, err
        self.pending[worker].popleft()
        first.done = True
        self.since[worker] = time.monotonic()

    def _fail(self, worker: int, fault: EnvFault) -> None:
        handles = list(self.pending[worker])
        self.pending[worker].clear()
        for k, h in enumerate(handles):
            h.ok, h.value, h.done = False, fault if k == 0 else EnvLost("env worker replaced"), True
        self.replace(worker, self.generations[worker])

    def replace(self, worker: int, generation: int) -> None:
        """Kill worker's actor and start a new one (once per generation)."""
        if self.generations[worker] != generation:
            return
        self.ray.kill(self.hosts[worker], no_restart=True)
        self.hosts[worker] = self.actor.remote(self.factory, self.driver)
        self.ray.get(self.hosts[worker].ping.remote())
        self.generations[worker] += 1
        self.restarts += 1

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a dead actor has nothing left to close
            self.ray.get([h.close.remote() for h in self.hosts], timeout=30)
        for h in self.hosts:
            self.ray.kill(h)
        self.hosts = []


class _RayHandle:
    def __init__(self, backend: _RayBackend, ref: Any):
        self.backend, self.ref, self.done, self.ok = backend, ref, False, True
        self.value: Any = None  # the answer, or the exception to raise (ok False)

    def result(self) -> Any:
        self.backend.wait(self)
        if not self.ok:
            raise self.value
        return self.value


class _Pipe:
    """One worker process; answers come back in request order (FIFO of pending handles).

    ``since``: when the worker began the call it is answering now (when the request reached
    an idle worker, or when the previous answer arrived): ``timeout_s`` counts from there.
    """

    def __init__(
        self, factory: Callable[[], TextEnv], ctx: Any, timeout_s: float | None, generation: int
    ):
        self.conn, child = ctx.Pipe()
        # the worker exits when this process dies, even by SIGKILL (cairn._env_host)
        self.proc = ctx.Process(target=serve, args=(child, factory, Parent.here()), daemon=True)
        self.proc.start()
        child.close()
        self.timeout_s, self.generation, self.dead = timeout_s, generation, False
        self.pending: deque[_PipeHandle] = deque()
        self.since = time.monotonic()

    def submit(self, msg: tuple, backend: _ProcessBackend) -> Any:
        try:
            self.conn.send(msg)
        except (OSError, EOFError):
            return _Failed(EnvLost("env worker process died"))
        if not self.pending:
            self.since = time.monotonic()
        handle = _PipeHandle(backend)
        self.pending.append(handle)
        return handle

    def deadline(self) -> float:
        """When the call the worker is on now runs past ``timeout_s`` (inf: no timeout)."""
        return math.inf if self.timeout_s is None else self.since + self.timeout_s

    def receive(self) -> None:
        """Take the next answer (it is there), or fail the worker if it died."""
        first = self.pending[0]
        try:
            first.ok, first.value = self.conn.recv()
        except (OSError, EOFError):
            self.fail(EnvLost("env worker process died"))
            return
        self.pending.popleft()
        first.done = True
        self.since = time.monotonic()

    def fail(self, fault: EnvFault) -> None:
        """The worker is gone (or given up on): kill it; the first waiting call gets
        ``fault``, every other one ``EnvLost``."""
        self.proc.kill()
        self.proc.join(timeout=5)
        for k, h in enumerate(self.pending):
            h.ok, h.value, h.done = False, fault if k == 0 else EnvLost("env worker replaced"), True
        self.pending.clear()
        self.dead = True


class _PipeHandle:
    def __init__(self, backend: _ProcessBackend):
        self.backend, self.done, self.ok = backend, False, True
        self.value: Any = None  # the answer, or the exception to raise (ok False)

    def result(self) -> Any:
        self.backend.wait(self)
        if not self.ok:
            raise self.value
        return self.value


class _ProcessBackend:
    def __init__(
        self,
        factory: Callable[[], TextEnv],
        workers: int,
        timeout_s: float | None,
        start_method: str | None = None,
    ):
        # fork starts a worker in milliseconds; envs never touch torch, so the parent's
        # torch threads and CUDA state are never used in the child. spawn where fork is absent.
        forks = "fork" in mp.get_all_start_methods()
        self.ctx = mp.get_context(start_method or ("fork" if forks else "spawn"))
        self.factory, self.timeout_s = factory, timeout_s
        self.pipes = [self._start(0) for _ in range(workers)]
        self.restarts = 0

    def _start(self, generation: int) -> _Pipe:
        return _Pipe(self.factory, self.ctx, self.timeout_s, generation)

    def generation(self, worker: int) -> int:
        return self._live(worker).generation

    def _live(self, worker: int) -> _Pipe:
        """The worker's pipe, replacing a dead one first."""
        pipe = self.pipes[worker]
        if pipe.dead:
            pipe = self.pipes[worker] = self._start(pipe.generation + 1)
            self.restarts += 1
        return pipe

    def submit(self, worker: int, slot: int, method: str, args: tuple, kwargs: dict):
        return self._live(worker).submit((slot, method, args, kwargs), self)

    def wait(self, handle: _PipeHandle) -> None:
        """Receive answers from every busy worker until ``handle``'s has come: all workers
        are watched at once, so each call is timed from when its worker began it, not from
        when the caller got round to waiting for it."""
        while not handle.done:
            busy = [p for p in self.pipes if p.pending]
            now = time.monotonic()
            for p in busy:
                if now >= p.deadline():
                    p.fail(EnvTimeout(f"no answer within env_timeout_s={p.timeout_s:g}"))
            busy = [p for p in busy if p.pending]
            if handle.done or not busy:
                return
            wait_s = min(p.deadline() for p in busy) - now
            ready = mp_connection.wait(
                [p.conn for p in busy], timeout=None if math.isinf(wait_s) else max(0.0, wait_s)
            )
            for p in busy:
                if p.conn in ready:
                    p.receive()

    def close(self) -> None:
        for p in self.pipes:
            if not p.dead:
                try:
                    p.conn.send(None)
                except OSError:
                    p.dead = True
        for p in self.pipes:
            p.proc.join(timeout=30)
            if p.proc.is_alive():
                p.proc.kill()
        self.pipes = []


# -- the proxy and the pool ----------------------------------------------------------------
class RemoteEnv(_EnvProxy):
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

    @property
    def _backend(self) -> Any:
        return self.pool._backend

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Send a call now; ``.result()`` on the returned handle waits for its answer."""
        generation = self._backend.generation(self._worker)
        if method in ("reset", "restore"):
            self._generation = generation
        elif generation != self._generation:
            return _Failed(EnvLost("its env worker was replaced; reset it"))
        handle = self._backend.submit(self._worker, self._slot, method, args, kwargs)
        return _Answer(self, handle)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.submit(method, *args, **kwargs).result()

    def vocabulary(self) -> list[str]:
        return self._call("vocabulary")

    def close(self) -> None:
        """Envs are closed with their worker (``WorkerPool.close``)."""


class _Answer:
    def __init__(self, env: RemoteEnv, handle: Any):
        self.env, self.handle = env, handle

    def result(self) -> Any:
        value, instruction, *constants = self.handle.result()
        self.env.instruction = instruction
        for attrs in constants:  # a reset's answer: the env's CONSTANTS
            self.env.__dict__.update(attrs)
        return value


def _guarded(env: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """A handle on ``env.method(...)`` whose ``result()`` is an ``EnvFault`` where it failed."""
    if isinstance(env, RemoteEnv):
        return _Caught(env, env.submit(method, *args, **kwargs))
    try:
        return _Done(getattr(env, method)(*args, **kwargs))
    except Exception as err:
        fault = _fault(err)
        report(env, fault)
        return _Done(fault)


class _Caught:
    def __init__(self, env: RemoteEnv, handle: Any):
        self.env, self.handle = env, handle

    def result(self) -> Any:
        try:
            return self.handle.result()
        except Exception as err:
            fault = _fault(err)
            report(self.env, fault)
            return fault


def step_all(envs: Sequence[Any], actions: Sequence[str]) -> list[StepResult | EnvFault]:
    """``envs[i].step(actions[i])`` for all i; remote envs step concurrently.

    A failed call answers with its ``EnvFault`` (the owning pool rebuilds the env).
    """
    if len(envs) != len(actions):
        raise ValueError(f"{len(envs)} envs but {len(actions)} actions")
    pending = [_guarded(e, "step", a) for e, a in zip(envs, actions, strict=True)]
    return [p.result() for p in pending]


def reset_all(
    envs: Sequence[Any], seeds: Sequence[int | None]
) -> list[tuple[str, dict] | EnvFault]:
    """``envs[i].reset(seed=seeds[i])`` for all i; remote envs reset concurrently.

    A failed call answers with its ``EnvFault`` (the owning pool rebuilds the env).
    """
    if len(envs) < len(seeds):
        raise ValueError(f"{len(seeds)} seeds but only {len(envs)} envs")
    pending = [_guarded(e, "reset", seed=s) for e, s in zip(envs, seeds, strict=False)]
    return [p.result() for p in pending]


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
        if use_ray:
            self._backend: Any = _RayBackend(factory, workers, timeout_s)
        else:
            self._backend = _ProcessBackend(factory, workers, timeout_s, start_method)
        self.envs: list[RemoteEnv] = []
        self.faults = FaultStats(max_error_rate)
        self._worker_restarts = 0

    def take(self, n: int) -> list[TextEnv]:
        """The first ``n`` envs (``RemoteEnv`` proxies: they answer every ``TextEnv`` call)."""
        self._count_worker_restarts()
        while len(self.envs) < n:
            slot = len(self.envs)
            self.envs.append(RemoteEnv(self, slot % self.workers, slot))
        return cast("list[TextEnv]", self.envs[:n])

    def rebuild(self, env: RemoteEnv) -> None:
        """After a fault: the env's worker builds a new env in its slot (a replaced worker
        builds all of them anew, on first use)."""
        if env._generation == self._backend.generation(env._worker):  # replaces a dead one
            self._backend.submit(env._worker, env._slot, "__rebuild__", (), {})
        self.faults.restarts += 1
        self._count_worker_restarts()

    def _count_worker_restarts(self) -> None:
        new = self._backend.restarts - self._worker_restarts
        self.faults.worker_restarts += new
        self._worker_restarts += new

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
        self.envs = []


def make_env_pool(
    factory: Callable[[], TextEnv],
    workers: int = 0,
    backend: str = "auto",
    timeout_s: float | None = None,
    max_error_rate: float = 1.0,
):
    """The in-process ``EnvPool`` for ``workers=0``, else a ``WorkerPool``."""
    if workers == 0:
        return EnvPool(factory, timeout_s, max_error_rate)
    return WorkerPool(factory, workers, backend, timeout_s, max_error_rate)


def restore_guarded(env: Any, snap: Any) -> tuple[str, dict] | EnvFault:
    """``env.restore(snap)``, or the ``EnvFault`` it ended in (the pool rebuilds the env)."""
    return _guarded(env, "restore", snap).result()


class GuardedEnv(_EnvProxy):
    """``env`` for code outside the turn loop (demonstrations, setup): a failed ``reset``,
    ``step``, ``snapshot`` or ``restore`` raises an ``EnvFault`` naming the env and the call
    (counted by ``env``'s pool, which rebuilds it) instead of the env's own exception, so
    the caller can tell an env fault from its own errors; ``vocabulary`` too. Other
    attributes pass through."""

    def __init__(self, env: Any, name: str = ""):
        self._env, self._name = env, name or type(env).__name__

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        answer = _guarded(self._env, method, *args, **kwargs).result()
        if isinstance(answer, EnvFault):
            fault = type(answer)(f"env {self._name!r} failed in {method}(): {answer}")
            raise fault from answer
        return answer

    def vocabulary(self) -> list[str]:
        return self._call("vocabulary")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def snapshot_guarded(env: Any) -> Any:
    """``env.snapshot()``, or the ``EnvFault`` it ended in (the pool rebuilds the env)."""
    return _guarded(env, "snapshot").result()
