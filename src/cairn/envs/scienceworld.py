"""ScienceWorld (Wang et al. 2022, arXiv 2203.07540) behind the cairn env contract.

30 elementary-science tasks (boil water, find a living thing, grow a plant, ...) in a
text simulator written in Scala; each task has many *variations* (objects, rooms,
substances), which the package splits into train / dev / test sets. EMPO2
(arXiv 2602.23008) trains on a few variations and tests on unseen ones: ``variations=``
gives such an explicit list, ``split=`` uses the package's own sets. ``reset(seed)`` picks
``pool[seed % len(pool)]`` from the chosen variations, so a seed always means the same
initial state.

Fast path. ``scienceworld.ScienceWorldEnv.step`` asks the simulator for every valid
action-object combination after each move (hundreds to thousands of strings, 27-250 ms a
step). This class launches the package's jar itself and talks to its py4j
``PythonInterface`` object (what ``ScienceWorldEnv.server`` wraps), calling only ``step``,
``getScore`` and ``getCompleted`` per move (2-3 ms for simple moves on an idle core); the
admissible actions are computed only when asked for (``admissible=True`` or
:meth:`ScienceWorld.admissible_actions`). The envs of a process share one JVM (each its
own simulator object; ``share_jvm=False``: one JVM per env), started on the first reset,
reused across resets and stopped when its last env is closed (or at interpreter exit);
``jvm_heap_mb`` caps its heap.

Determinism. Loading a variation reseeds the simulator, but objects with the same name
sit in hash sets keyed by the JVM's random identity hash codes, so their listing order,
and which one "0" picks in a disambiguation question, change from load to load (three
"wood cup" lines in the art studio). ``deterministic=True`` (the default) starts the JVM
with constant identity hashes, which makes those sets iterate in insertion order: the
same seed and actions then give the same text and state, even across processes. The
price is speed: simple moves measured up to about 1.7x slower (no difference on the
heavy simulation steps of heating water); ``deterministic=False`` restores the default.

Rewards are score deltas: the simulator's score is in [-1, 1] (shown to people as
-100..100); ``raw_score=False`` gives deltas of score/100 rounded to whole points,
``raw_score=True`` the point deltas. A score of 100 is success; a negative score is the
task's failure state (e.g. focusing on the wrong object), which ends the episode.

Validity: an input the parser cannot match ("No known action matches that input.") or an
unintelligible answer to a disambiguation question ("Unknown action. ...") is
``valid=False``; the simulator leaves the world unchanged (tested). An ambiguous input is
valid: the game asks which object was meant and the next action answers with its number.
For invalid steps ``info["anchor"]`` stays the anchor of the unchanged state.

Snapshot/restore: the simulator has no state copy, so the generic replay of the action
prefix from the reset seed is used (exact with ``deterministic=True``: each load reseeds
the simulator's random generator with the variation index).

A dead JVM (killed, crashed) costs one episode (``cairn.envs._jvm``). The first env of the
shared JVM to find it dead raises ``JvmDied`` from that call: a rollout ends that episode as
an env fault, counts it and rebuilds the env; the env is usable again after ``reset`` (a
fresh JVM starts). Every other env of the dead JVM moves to a fresh one before its next
call and replays its episode there (the reset seed's variation, then its actions), so its
episode goes on unchanged; with ``deterministic=False`` a replay is not exact and these
envs raise ``JvmDied`` too.
"""

from __future__ import annotations

import functools
import random
import weakref
from collections.abc import Callable, Sequence
from numbers import Integral
from typing import Any

from py4j.java_gateway import JavaGateway
from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
from scienceworld.constants import BASEPATH, ID2TASK, JAR_PATH
from scienceworld.utils import infer_task

from cairn.envs._common import EpisodeClock, check_bool, check_choice, check_int, next_on_path
from cairn.envs._jvm import (
    JvmDied,
    acquire_jvm,
    claim_dead_jvm,
    heap_options,
    jvm_exit_code,
    let_go,
    release_jvm,
)
from cairn.envs.base import StepResult, TextEnv

__all__ = ["SIMPLIFICATIONS", "SPLITS", "TASKS", "ScienceWorld", "resolve_task"]

#: Task names in the package's order (index i of ``task=i``).
TASKS: tuple[str, ...] = tuple(ID2TASK.values())
#: Variation sets of the package.
SPLITS: tuple[str, ...] = ("train", "dev", "test")
#: Simplifications the simulator accepts ("easy" turns on the first five).
SIMPLIFICATIONS: tuple[str, ...] = (
    "teleportAction",
    "selfWateringFlowerPots",
    "openContainers",
    "openDoors",
    "noElectricalAction",
    "easy",
)
_INVALID_PREFIXES = ("No known action matches that input.", "Unknown action.")
_FIRST_ACTION = "look around"  # the package's own reset ends with this move
# Identity hash codes all 1: the simulator's hash sets then iterate in insertion order, so
# same-named objects are listed (and numbered in disambiguation questions) the same way
# after every load; with the JVM's default random hashes "0" can pick a different cup.
_DETERMINISTIC_JAVA_OPTS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")
#: Seconds a JVM whose connection broke gets to exit before it is killed (a SIGKILL can
#: break the socket before the process is gone).
EXIT_WAIT_S = 5.0


def _on_live_jvm(replay: bool) -> Callable:
    """Run the decorated method on a live JVM (module notes: a dead JVM costs one episode).

    A JVM found dead before the call, or that dies during it, is claimed (this env raises
    ``JvmDied``) or left for a fresh one, the episode replayed there when ``replay``, and
    the call made again. A JVM that stops answering but still runs is killed first: no env
    can trust it any more.
    """

    def wrap(method: Callable) -> Callable:
        name = method.__name__.lstrip("_")

        @functools.wraps(method)
        def call(self: ScienceWorld, *args: Any, **kwargs: Any) -> Any:
            self._leave_dead_jvm(name, replay, "before")
            clock = self._clock.state()
            try:
                return method(self, *args, **kwargs)
            except Py4JJavaError:  # the simulator's own exception: the JVM is fine
                raise
            except Py4JError as err:  # a lost connection: a Py4JNetworkError, or a Py4JError
                if self._gateway is None:  # when it broke in the middle of an answer
                    raise
                if jvm_exit_code(self._gateway, wait_s=EXIT_WAIT_S) is None:
                    if not isinstance(err, Py4JNetworkError):
                        raise  # a live JVM and a working connection: not a JVM fault
                    self._gateway.java_process.kill()
                    self._gateway.java_process.wait()
            self._clock.set_state(clock)  # the failed call's step never happened
            self._leave_dead_jvm(name, replay, "during")
            return method(self, *args, **kwargs)

        return call

    return wrap


def resolve_task(task: str | int) -> str:
    """Canonical task name from a name, a paper id like ``"1-1"``, or an index into TASKS."""
    if isinstance(task, Integral) and not isinstance(task, bool):
        return TASKS[check_int("task", int(task), 0, len(TASKS) - 1)]
    if not isinstance(task, str):
        raise ValueError(f"task must be a task name or an index, got {task!r}")
    name = infer_task(task)
    if name not in TASKS:
        raise ValueError(f"unknown task {task!r}; allowed: indices 0-29 or {', '.join(TASKS)}")
    return name


def _check_simplifications(value: str | Sequence[str], task: str) -> str:
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
    elif isinstance(value, list | tuple) and all(isinstance(p, str) for p in value):
        parts = [p.strip() for p in value]
    else:
        raise ValueError(
            f"simplifications must be a comma-separated str or a list of str, got {value!r}"
        )
    for part in parts:
        check_choice("simplifications", part, SIMPLIFICATIONS)
    if "noElectricalAction" in parts and ("power-component" in task or "conductivity" in task):
        raise ValueError(
            f"simplification 'noElectricalAction' is not allowed for task {task!r}, "
            "which needs electrical actions"
        )
    return ",".join(parts)


def _check_variations(value: Sequence[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple | range) or len(value) == 0:
        raise ValueError(f"variations must be None or a non-empty list of ints, got {value!r}")
    return tuple(check_int("variations[i]", v, 0) for v in value)


class ScienceWorld(TextEnv):
    """One ScienceWorld task; each reset loads one of its variations.

    Options:
        task: task name (``"boil"``, ``"1-1"``, ``"Matter Changes of State (Boiling)"``) or
            index into :data:`TASKS` (0-29).
        split: ``"train"``, ``"dev"`` or ``"test"``: the package's variation sets.
        variations: explicit variation indices (EMPO2 style, e.g. ``[0, 1, 2, 3, 4]``);
            when given, ``split`` is not used.
        simplifications: comma-separated names from :data:`SIMPLIFICATIONS`, or a list.
        admissible: put the admissible actions in every ``info`` (about 0.1 s a step).
        raw_score: rewards in points (0-100) instead of score fractions (0-1).
        deterministic: run the JVM with constant identity hashes so that a seed and an action
            sequence always give the same text and the same state (see the module notes;
            costs some speed). False: the package's default JVM.
        max_steps: steps (valid or not) before truncation.
        share_jvm: envs of one process with the same JVM options share one JVM, each with
            its own simulator (True), instead of one JVM per env (False).
        jvm_heap_mb: cap on each JVM's heap in MiB (``-Xmx``); None: the JVM's default
            (up to a quarter of the machine's memory).
    """

    example_action = "look around"

    def __init__(
        self,
        task: str | int = "boil",
        split: str = "train",
        variations: Sequence[int] | None = None,
        simplifications: str | Sequence[str] = "",
        admissible: bool = False,
        raw_score: bool = False,
        deterministic: bool = True,
        max_steps: int = 100,
        share_jvm: bool = True,
        jvm_heap_mb: int | None = None,
    ) -> None:
        super().__init__()
        self.task = resolve_task(task)
        self.split = check_choice("split", split, SPLITS)
        self.variations = _check_variations(variations)
        self.simplifications = _check_simplifications(simplifications, self.task)
        flags = {
            "admissible": admissible, "raw_score": raw_score, "deterministic": deterministic,
            "share_jvm": share_jvm,
        }  # fmt: skip
        for name, flag in flags.items():
            check_bool(name, flag)
        self.admissible, self.raw_score = admissible, raw_score
        self.deterministic, self.share_jvm = deterministic, share_jvm
        self._java_opts = (
            *(_DETERMINISTIC_JAVA_OPTS if deterministic else ()),
            *heap_options(jvm_heap_mb),
        )
        self._clock = EpisodeClock("scienceworld", max_steps)
        self._gateway: JavaGateway | None = None
        self._entry: Any = None
        self._stop: weakref.finalize | None = None
        self._pool: tuple[int, ...] | None = None
        self._gold: dict[tuple[str, int, str], tuple[str, ...]] = {}
        self.variation: int | None = None
        self._points = 0  # current score in points, -100..100
        self._anchor = ""
        self._admissible: list[str] | None = None

    # -- episode -------------------------------------------------------------------------
    @_on_live_jvm(replay=False)
    def _reset(self, seed: int | None, options: dict[str, object]) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed = self._seed = random.randrange(2**31)
        elif isinstance(seed, bool) or not isinstance(seed, Integral):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        pool = self._variation_pool()
        self.variation = pool[int(seed) % len(pool)]
        obs = self._load(self.variation, gold=False)
        self.instruction = self._server().getTaskDescription()
        self._points = self._read_points()
        self._clock.start()
        self._anchor, self._admissible = obs, None
        return obs, self._info(valid=True)

    @_on_live_jvm(replay=True)
    def _step(self, action: str) -> StepResult:
        truncated = self._clock.tick()
        server = self._server()
        obs = self._send(action)
        valid = not obs.startswith(_INVALID_PREFIXES)
        points = self._read_points()
        reward = float(points - self._points) * (1.0 if self.raw_score else 0.01)
        self._points = points
        terminated = bool(server.getCompleted()) or points < 0
        self._clock.done = terminated or truncated
        if valid:
            self._anchor, self._admissible = obs, None
        return obs, reward, terminated, truncated and not terminated, self._info(valid=valid)

    def _info(self, valid: bool) -> dict[str, Any]:
        return {
            "anchor": self._anchor,
            "valid": valid,
            "success": self._clock.done and self._points >= 100,
            "admissible": self.admissible_actions() if self.admissible else None,
            "score": self._points if self.raw_score else self._points / 100,
            "variation": self.variation,
            "steps": self._clock.steps,
        }

    # -- extra queries ---------------------------------------------------------------------
    @_on_live_jvm(replay=True)
    def admissible_actions(self) -> list[str]:
        """The valid action strings in the current state, sorted (about 0.1 s; cached)."""
        if self._admissible is None:
            self._require_episode()
            self._admissible = sorted(set(self._server().getValidActionObjectCombinations()))
        return list(self._admissible)

    def gold_action(self) -> str | None:
        """The walkthrough's next action while this episode has followed it (None once off
        it or at its end)."""
        if not self._clock.started or self._clock.done:
            return None
        return next_on_path(self.gold_actions(), self._actions)

    @_on_live_jvm(replay=True)
    def gold_actions(self) -> list[str]:
        """The simulator's gold action sequence from this episode's initial state.

        Generating it reloads the task; the current state is then rebuilt by replaying this
        episode's actions, so the episode continues unchanged.
        """
        self._require_episode()
        assert self.variation is not None
        key = (self.task, self.variation, self.simplifications)
        if key not in self._gold:
            self._load(self.variation, gold=True)
            self._gold[key] = tuple(self._server().getGoldActionSequence())
            self._replay()
        return list(self._gold[key])

    @_on_live_jvm(replay=True)
    def task_variations(self) -> tuple[int, ...]:
        """The variation indices that ``reset`` draws from (``variations`` or ``split``)."""
        return self._variation_pool()

    # -- JVM -----------------------------------------------------------------------------------
    def _server(self) -> Any:
        """The py4j proxy of the simulator's ``PythonInterface`` (starts the JVM once)."""
        if self._gateway is None:
            self._gateway = acquire_jvm(JAR_PATH, BASEPATH, self._java_opts, self.share_jvm)
            # runs at close() or, at the latest, at interpreter exit (before module teardown)
            self._stop = weakref.finalize(self, release_jvm, self._gateway, self.share_jvm)
            self._entry = self._gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        return self._entry

    def _send(self, action: str) -> str:
        """One move; Py4J sends UTF-8, so a lone surrogate becomes '?' (then invalid)."""
        return self._server().step(action.strip().encode("utf-8", "replace").decode("utf-8"))

    def _replay(self) -> None:
        """Rebuild this episode's state: load its variation, then repeat its actions."""
        assert self.variation is not None
        self._load(self.variation, gold=False)
        for action in self._actions:
            self._send(action)
        self._admissible = None

    def _leave_dead_jvm(self, call: str, replay: bool, when: str) -> None:
        """If this env's JVM has exited: raise ``JvmDied`` as the first env to find it (or
        when a replay would not be exact), else move to a fresh JVM and replay the episode."""
        gateway = self._gateway
        if gateway is None:
            return
        code = jvm_exit_code(gateway)
        if code is None:
            return
        if claim_dead_jvm(gateway) or (replay and self._clock.started and not self.deterministic):
            pid = gateway.java_process.pid
            self._drop_jvm()  # the next reset starts a fresh JVM
            self._clock.started = False
            raise JvmDied(
                f"scienceworld: its JVM (pid {pid}) exited with code {code} {when} {call}(); "
                "this episode is lost, the next reset starts a new JVM"
            )
        self._drop_jvm()
        if replay and self._clock.started:
            self._replay()

    def _load(self, variation: int, gold: bool) -> str:
        error = self._server().load(self.task, variation, self.simplifications, gold)
        if error:
            raise ValueError(f"scienceworld could not load {self.task!r} #{variation}: {error}")
        return self._server().step(_FIRST_ACTION)

    def _read_points(self) -> int:
        return round(100 * self._server().getScore())

    def _variation_pool(self) -> tuple[int, ...]:
        if self._pool is None:
            server = self._server()
            self._load(0, gold=False)  # the split getters need a loaded task
            if self.variations is None:
                getter = {"train": "getVariationsTrain", "dev": "getVariationsDev"}.get(
                    self.split, "getVariationsTest"
                )
                self._pool = tuple(int(v) for v in getattr(server, getter)())
            else:
                total = int(server.getTaskMaxVariations(self.task))
                bad = [v for v in self.variations if v >= total]
                if bad:
                    raise ValueError(
                        f"variations {bad} out of range for task {self.task!r}: "
                        f"it has variations 0-{total - 1}"
                    )
                self._pool = self.variations
        return self._pool

    def _require_episode(self) -> None:
        if not self._clock.started:
            raise RuntimeError("scienceworld: call reset() first")

    def close(self) -> None:
        """Release the JVM: stopped once no env uses it (waits for it to exit; kills it
        after 5 s). Safe to call twice."""
        self._drop_jvm()
        self._clock.started = False

    def _drop_jvm(self) -> None:
        """Let go of this env's JVM (its simulator first, where the JVM still runs)."""
        let_go(self._gateway, self._entry, self._stop)
        self._gateway, self._entry, self._stop = None, None, None
