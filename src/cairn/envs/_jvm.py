"""Starting, sharing and stopping the JVMs behind py4j-backed envs (ScienceWorld,
TextWorld-Express).

``acquire_jvm`` hands out a JVM for one env. Shared (the default for ScienceWorld), every
env of a process with the same jar and JVM options uses one JVM, each through its own
simulator object, so a rollout with B x G envs plus evaluation envs runs one JVM per
process (per env worker) instead of one per env; the JVM is stopped when its last env
releases it. A JVM whose process died (killed, crashed) is never handed out again: the next
``acquire_jvm`` starts a fresh one. ``heap_mb`` caps each JVM's heap (``-Xmx``); without it
a JVM may grow to a quarter of the machine's memory.

A dead shared JVM costs one episode, not one per env that used it: the first env that finds
it dead (``claim_dead_jvm`` answers True once per JVM) raises ``JvmDied``, so its episode
ends as an env fault and is counted; every other env on it moves to a fresh JVM and
replays its episode there (exact where the env is deterministic), so its calls succeed.

JVMs are started lazily (on an env's first use), exit with this process at the latest, and
are never shared across processes (a forked worker starts its own).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

__all__ = [
    "JvmDied",
    "acquire_jvm",
    "claim_dead_jvm",
    "heap_options",
    "jvm_exit_code",
    "let_go",
    "live_shared_jvms",
    "release_jvm",
    "start_jvm",
    "stop_jvm",
]


def start_jvm(jar: str, cwd: str, java_opts: Sequence[str] = ()) -> JavaGateway:
    """Launch ``jar``'s JVM (it exits when this process does) and connect to it."""
    if shutil.which("java") is None:
        raise FileNotFoundError(
            f"{Path(jar).name} runs in a JVM and `java` is not on PATH: install a Java runtime "
            "(e.g. apt install default-jre-headless) or put its bin folder on PATH"
        )
    port, process = launch_gateway(
        classpath=jar, javaopts=list(java_opts), die_on_exit=True, cwd=cwd, return_proc=True
    )
    params = GatewayParameters(port=port, auto_field=True)
    return JavaGateway(gateway_parameters=params, java_process=process)


def stop_jvm(gateway: JavaGateway) -> None:
    """Shut the py4j gateway down and make sure the java process has exited."""
    process = gateway.java_process
    if process.poll() is not None:  # dead: a shutdown command would only log a traceback
        with contextlib.suppress(Exception):
            gateway.close(keep_callback_server=True)  # only the sockets (none is served)
        return
    with contextlib.suppress(Exception):
        gateway.shutdown()
    if process.poll() is None:  # die_on_exit: the JVM quits when its stdin gets a line
        with contextlib.suppress(OSError):
            process.stdin.write(b"\n")
            process.stdin.flush()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class JvmDied(RuntimeError):
    """The JVM behind an env exited (killed, crashed): the env's current episode is lost."""


def jvm_exit_code(gateway: JavaGateway, wait_s: float = 0.0) -> int | None:
    """The exit code of ``gateway``'s java process, or None while it runs (waiting up to
    ``wait_s`` seconds for it to exit: a socket error can arrive before the kill completes)."""
    try:
        return gateway.java_process.wait(timeout=wait_s) if wait_s else gateway.java_process.poll()
    except subprocess.TimeoutExpired:
        return None


_DEAD_CLAIMED: weakref.WeakSet[JavaGateway] = weakref.WeakSet()


def claim_dead_jvm(gateway: JavaGateway) -> bool:
    """True for the first env that reports ``gateway``'s JVM dead (its episode pays for the
    JVM), False for every later one (they move to a fresh JVM and replay)."""
    with _LOCK:
        if gateway in _DEAD_CLAIMED:
            return False
        _DEAD_CLAIMED.add(gateway)
        return True


def heap_options(heap_mb: int | None) -> tuple[str, ...]:
    """JVM options capping the heap at ``heap_mb`` MiB (none for None)."""
    if heap_mb is None:
        return ()
    if isinstance(heap_mb, bool) or not isinstance(heap_mb, int) or heap_mb < 64:
        raise ValueError(f"jvm_heap_mb must be None or an int >= 64 (MiB), got {heap_mb!r}")
    return (f"-Xmx{heap_mb}m",)


@dataclass
class _Shared:
    gateway: JavaGateway
    users: int = 0


_KEY = tuple[int, str, str, tuple[str, ...]]  # (pid, jar, cwd, java options)
_SHARED: dict[_KEY, _Shared] = {}
_LOCK = threading.Lock()


def acquire_jvm(
    jar: str, cwd: str, java_opts: Sequence[str] = (), shared: bool = True
) -> JavaGateway:
    """A JVM for one env: this process's shared one for these options (started when there
    is none alive), or a private one (``shared=False``). Pair with ``release_jvm``."""
    if not shared:
        return start_jvm(jar, cwd, java_opts)
    key = (os.getpid(), jar, cwd, tuple(java_opts))
    with _LOCK:
        entry = _SHARED.get(key)
        if entry is None or entry.gateway.java_process.poll() is not None:
            entry = _SHARED[key] = _Shared(start_jvm(jar, cwd, java_opts))
        entry.users += 1
        return entry.gateway


def release_jvm(gateway: JavaGateway, shared: bool = True) -> None:
    """An env is done with ``gateway``: stop it once no env uses it."""
    if shared:
        with _LOCK:
            key = next((k for k, e in _SHARED.items() if e.gateway is gateway), None)
            if key is not None:
                _SHARED[key].users -= 1
                if _SHARED[key].users > 0:
                    return
                del _SHARED[key]
    stop_jvm(gateway)


def let_go(
    gateway: JavaGateway | None, simulator: object, release: Callable[[], object] | None
) -> None:
    """An env lets go of its JVM: ``simulator`` is detached where the JVM still runs (a
    shared JVM keeps serving the other envs), then ``release`` (the env's finalizer of
    ``release_jvm``) runs."""
    if simulator is not None and gateway is not None and jvm_exit_code(gateway) is None:
        with contextlib.suppress(Exception):
            gateway.detach(simulator)
    if release is not None:
        release()


def live_shared_jvms() -> int:
    """How many shared JVMs this process holds (for tests and diagnostics)."""
    with _LOCK:
        return sum(k[0] == os.getpid() for k in _SHARED)
