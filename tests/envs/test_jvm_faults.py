"""A dead JVM costs one episode (``cairn.envs._jvm``, ScienceWorld's module notes).

The JVM is faked (no Java needed): a ``sh`` process stands for the java process and a
``FakeSimulator`` for ScienceWorld's py4j ``PythonInterface``; its calls raise
``Py4JNetworkError`` once the process is dead, as py4j does. An observation lists every
move since the last load (``seen``), so an observation after a replay shows whether the
episode was rebuilt exactly. The real JVM is killed in ``test_scienceworld.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from functools import partial
from typing import Any

import pytest

pytest.importorskip("scienceworld", reason="scienceworld env needs the 'scienceworld' extra")

from py4j.protocol import Py4JError, Py4JNetworkError

from cairn._env_host import EnvFault
from cairn.envs import _jvm, scienceworld
from cairn.envs._jvm import JvmDied, live_shared_jvms
from cairn.envs.scienceworld import ScienceWorld
from cairn.rollout.envpool.calls import reset_all, step_all
from cairn.rollout.envpool.local import EnvPool
from cairn.rollout.envpool.workers import WorkerPool

CRASH = "crash the jvm"  # a move during which the fake JVM is SIGKILLed
HANG_UP = "hang up"  # a move whose connection breaks while the fake JVM runs on
NO_METHOD = "no such method"  # a py4j error of a live JVM and a working connection


class FakeSimulator:
    """What ScienceWorld's fast path calls on ``PythonInterface``."""

    def __init__(self, process: subprocess.Popen):
        self.process, self.moves, self.variation = process, [], -1

    def _live(self) -> None:
        if self.process.poll() is not None:
            raise Py4JNetworkError("An error occurred while trying to connect to the Java server")

    def load(self, task: str, variation: int, simplifications: str, gold: bool) -> str:
        self._live()
        self.variation, self.moves = variation, []
        return ""

    def step(self, action: str) -> str:
        if action == CRASH:  # py4j's error when the JVM dies in the middle of its answer
            os.kill(self.process.pid, signal.SIGKILL)
            raise Py4JError("An error occurred while calling o0.step")
        self._live()
        if action == HANG_UP:
            raise Py4JNetworkError("Error while receiving")
        if action == NO_METHOD:
            raise Py4JError("Method step([class java.lang.Integer]) does not exist")
        self.moves.append(action)
        return f"variation {self.variation}: " + " | ".join(self.moves)

    def getTaskDescription(self) -> str:
        self._live()
        return "Your task is to melt ice."

    def getScore(self) -> float:
        self._live()
        return 0.0

    def getCompleted(self) -> bool:
        self._live()
        return False

    def getVariationsTrain(self) -> list[int]:
        self._live()
        return [0, 1, 2]


class FakeGateway:
    """A ``JavaGateway`` whose "JVM" is a shell that exits when its stdin gets a line."""

    def __init__(self):
        self.java_process = subprocess.Popen(["sh", "-c", "read x"], stdin=subprocess.PIPE)
        self.jvm = self  # gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        self.scienceworld = self.runtime = self.pythonapi = self

    def PythonInterface(self) -> FakeSimulator:
        return FakeSimulator(self.java_process)

    def shutdown(self) -> None: ...

    def close(self, **_: Any) -> None: ...

    def detach(self, _: Any) -> None: ...


@pytest.fixture
def fake_jvm(monkeypatch):
    monkeypatch.setattr(_jvm, "start_jvm", lambda *a, **k: FakeGateway())


OPTS = {"task": "melt", "split": "train", "jvm_heap_mb": 256}


def seen(variation: int, *moves: str) -> str:
    """The fake's observation after ``moves`` (the first move is the package's own)."""
    return f"variation {variation}: " + " | ".join(["look around", *moves])


def _episode(env: ScienceWorld, seed: int, moves: list[str]) -> str:
    env.reset(seed=seed)
    obs = ""
    for move in moves:
        obs = env.step(move)[0]
    return obs


def test_the_first_env_to_find_its_jvm_dead_pays_the_others_replay(fake_jvm):
    a, b, c = ScienceWorld(**OPTS), ScienceWorld(**OPTS), ScienceWorld(**OPTS)
    _episode(a, 0, ["look"])
    _episode(b, 1, ["open door", "go hall"])
    _episode(c, 2, [])
    dead = a._gateway
    assert b._gateway is c._gateway is dead
    with pytest.raises(JvmDied, match=r"exited with code -9 during step\(\); this episode is lost"):
        a.step(CRASH)
    # b's episode goes on, rebuilt on a fresh JVM from its seed's variation and its moves
    assert b.step("look")[0] == seen(1, "open door", "go hall", "look")
    assert b._gateway is not dead and c.step("wait")[0] == seen(2, "wait")
    with pytest.raises(RuntimeError, match="call reset"):  # a's episode is over
        a.step("look")
    assert _episode(a, 0, ["look"]) == seen(0, "look") and a._gateway is b._gateway
    assert live_shared_jvms() == 1
    for env in (a, b, c):
        env.close()
    assert live_shared_jvms() == 0


def test_a_jvm_dead_before_any_call_costs_the_first_caller_only(fake_jvm):
    a, b = ScienceWorld(**OPTS), ScienceWorld(**OPTS)
    _episode(a, 0, ["x"]), _episode(b, 1, ["y"])
    a._gateway.java_process.kill()
    a._gateway.java_process.wait()
    with pytest.raises(JvmDied, match=r"exited with code -9 before reset\(\)"):
        a.reset(seed=0)  # even a reset: the JVM's death is counted once
    assert b.step("z")[0] == seen(1, "y", "z")
    assert a.reset(seed=0)[0] == seen(0) and a.step("x")[0] == seen(0, "x")
    a.close(), b.close()


def test_a_live_jvm_that_broke_its_connection_is_killed_and_costs_one_episode(
    fake_jvm, monkeypatch
):
    monkeypatch.setattr(scienceworld, "EXIT_WAIT_S", 0.2)  # it will not exit by itself
    a, b = ScienceWorld(**OPTS), ScienceWorld(**OPTS)
    _episode(a, 0, ["x"]), _episode(b, 1, ["y"])
    process = a._gateway.java_process
    with pytest.raises(JvmDied, match=r"exited with code -9 during step\(\)"):
        a.step(HANG_UP)
    assert process.poll() == -9  # no env can trust it: killed
    assert b.step("z")[0] == seen(1, "y", "z")
    a.close(), b.close()


def test_a_py4j_error_of_a_live_jvm_is_the_envs_own_and_kills_nothing(fake_jvm, monkeypatch):
    monkeypatch.setattr(scienceworld, "EXIT_WAIT_S", 0.2)
    a, b = ScienceWorld(**OPTS), ScienceWorld(**OPTS)
    _episode(a, 0, ["x"]), _episode(b, 1, ["y"])
    with pytest.raises(Py4JError, match="does not exist"):
        a.step(NO_METHOD)
    assert a._gateway.java_process.poll() is None and a._gateway is b._gateway
    assert a.step("z")[0] == seen(0, "x", "z")
    a.close(), b.close()


def test_without_deterministic_replay_every_env_of_the_dead_jvm_pays(fake_jvm):
    a, b = ScienceWorld(**OPTS, deterministic=False), ScienceWorld(**OPTS, deterministic=False)
    _episode(a, 0, ["x"]), _episode(b, 1, ["y"])
    with pytest.raises(JvmDied):
        a.step(CRASH)
    with pytest.raises(JvmDied, match="before step"):  # a replay would not be exact
        b.step("z")
    assert b.reset(seed=1)[0] == seen(1) and b.step("z")[0] == seen(1, "z")
    a.close(), b.close()


def test_a_jvm_kill_in_a_worker_costs_one_episode_not_its_workers_envs(fake_jvm):
    # 2 worker processes, 4 envs: worker 0 holds slots 0 and 2 on one (fake) JVM, which
    # dies while slot 0 steps. Only slot 0's call fails; slot 2 replays on a new JVM.
    factory = partial(ScienceWorld, **OPTS)
    pool = WorkerPool(factory, 2, backend="process", start_method="fork")
    try:
        envs = pool.take(4)
        assert not any(isinstance(r, EnvFault) for r in reset_all(envs, [0, 1, 2, 0]))
        step_all(envs, ["a", "b", "c", "d"])
        results = step_all(envs, [CRASH, "b2", "c2", "d2"])
        assert isinstance(results[0], EnvFault) and "JvmDied" in str(results[0])
        assert [r[0] for r in results[1:]] == [
            seen(1, "b", "b2"),
            seen(2, "c", "c2"),  # on worker 0, after its JVM died: replayed
            seen(0, "d", "d2"),
        ]
        assert pool.faults.metrics() == {
            "rollout/env_errors": 1,
            "rollout/env_timeouts": 0,
            "rollout/env_restarts": 1,
            "rollout/worker_restarts": 0,
        }
        assert reset_all(envs[:1], [0])[0][0] == seen(0)  # the rebuilt env starts again
        assert step_all(envs, ["a", "b3", "c3", "d3"])[2][0] == seen(2, "c", "c2", "c3")
    finally:
        pool.close()


def test_in_process_envs_of_one_jvm_lose_only_the_failed_call(fake_jvm):
    pool = EnvPool(partial(ScienceWorld, **OPTS))
    envs = pool.take(3)
    reset_all(envs, [0, 1, 2])
    results = step_all(envs, ["a", CRASH, "c"])
    assert [isinstance(r, EnvFault) for r in results] == [False, True, False]
    assert results[2][0] == seen(2, "c")
    assert (pool.faults.errors, pool.faults.restarts) == (1, 1)
    pool.close()


def test_a_machine_without_java_is_told_so_in_one_line(monkeypatch):
    monkeypatch.setattr(_jvm.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="`java` is not on PATH: install a Java runtime"):
        _jvm.start_jvm("/nowhere/textworld-express.jar", "/nowhere")
