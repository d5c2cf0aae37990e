"""The process backend of ``WorkerPool``: one local process per worker (``multiprocessing``,
forked where the platform has fork, else spawned), serving its envs through a pipe.

A worker answers its envs in order, so a call is timed from when the worker began it (the
previous answer's arrival; the parent watches every busy worker while it waits for any one);
the first call of an env also builds it (a JVM start): ``timeout_s`` must cover that. A
worker that dies or runs past ``timeout_s`` is killed and replaced on its next use.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Protocol, cast

from cairn._env_host import EnvFault, Parent, serve
from cairn.envs import TextEnv
from cairn.rollout.envpool.faults import EnvLost, EnvTimeout
from cairn.rollout.envpool.proxy import Failed, Pending, Reply, Request

__all__ = ["ProcessBackend"]


class _Context(Protocol):
    """What a worker needs of a multiprocessing context (fork or spawn)."""

    def Pipe(
        self, duplex: bool = True
    ) -> tuple[mp_connection.Connection, mp_connection.Connection]: ...

    def Process(
        self, *, target: Callable[..., object], args: tuple[object, ...], daemon: bool
    ) -> BaseProcess: ...


class _Pipe:
    """One worker process; answers come back in request order (FIFO of pending handles).

    ``since``: when the worker began the call it is answering now (when the request reached
    an idle worker, or when the previous answer arrived): ``timeout_s`` counts from there.
    """

    def __init__(
        self,
        factory: Callable[[], TextEnv],
        ctx: _Context,
        timeout_s: float | None,
        generation: int,
    ):
        self.conn, child = ctx.Pipe()
        # the worker exits when this process dies, even by SIGKILL (cairn._env_host)
        self.proc = ctx.Process(target=serve, args=(child, factory, Parent.here()), daemon=True)
        self.proc.start()
        child.close()
        self.timeout_s, self.generation, self.dead = timeout_s, generation, False
        self.pending: deque[Pending] = deque()
        self.since = time.monotonic()

    def submit(self, msg: tuple[object, ...], wait: Callable[[Pending], None]) -> Pending | Failed:
        try:
            self.conn.send(msg)
        except (OSError, EOFError):
            return Failed(EnvLost("env worker process died"))
        if not self.pending:
            self.since = time.monotonic()
        handle = Pending(wait)
        self.pending.append(handle)
        return handle

    def deadline(self) -> float:
        """When the call the worker is on now runs past ``timeout_s`` (inf: no timeout)."""
        return math.inf if self.timeout_s is None else self.since + self.timeout_s

    def receive(self) -> None:
        """Take the next answer (it is there), or fail the worker if it died."""
        first = self.pending[0]
        try:
            ok, value = self.conn.recv()
        except (OSError, EOFError):
            self.fail(EnvLost("env worker process died"))
            return
        if ok:
            first.answer(cast(Reply, value))
        else:
            first.fail(cast(BaseException, value))
        self.pending.popleft()
        self.since = time.monotonic()

    def fail(self, fault: EnvFault) -> None:
        """The worker is gone (or given up on): kill it; the first waiting call gets
        ``fault``, every other one ``EnvLost``."""
        self.proc.kill()
        self.proc.join(timeout=5)
        for k, h in enumerate(self.pending):
            h.fail(fault if k == 0 else EnvLost("env worker replaced"))
        self.pending.clear()
        self.dead = True


class ProcessBackend:
    """One worker process per worker; ``generation(worker)`` counts its replacements, so
    that an env can tell its state was lost. ``start_method``: fork (the default where it
    exists) or spawn."""

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
        method = start_method or ("fork" if forks else "spawn")
        self.ctx = cast(_Context, mp.get_context(method))
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

    def submit(self, worker: int, request: Request) -> Pending | Failed:
        return self._live(worker).submit(tuple(request), self.wait)

    def wait(self, handle: Pending) -> None:
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
