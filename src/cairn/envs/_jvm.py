"""Starting and stopping the JVM behind a py4j-backed env (ScienceWorld, TextWorld-Express).

Each env owns one JVM: started lazily on first use, reused across resets, stopped by
``close()`` or, at the latest, when the env is garbage-collected or the interpreter exits.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence

from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

__all__ = ["start_jvm", "stop_jvm"]


def start_jvm(jar: str, cwd: str, java_opts: Sequence[str] = ()) -> JavaGateway:
    """Launch ``jar``'s JVM (it exits when this process does) and connect to it."""
    port, process = launch_gateway(
        classpath=jar, javaopts=list(java_opts), die_on_exit=True, cwd=cwd, return_proc=True
    )
    params = GatewayParameters(port=port, auto_field=True)
    return JavaGateway(gateway_parameters=params, java_process=process)


def stop_jvm(gateway: JavaGateway) -> None:
    """Shut the py4j gateway down and make sure the java process has exited."""
    process = gateway.java_process
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
