"""TextWorld-Express (Jansen & Côté 2022, arXiv 2208.01174) behind the cairn env contract.

A fast re-implementation of TextWorld-style games in Scala: cooking (``cookingworld``),
coin collection (``coin``), map reading (``mapreader``), arithmetic, sorting, TextWorld
Commonsense (``twc``) and two memory games. Each game takes a parameter string
(``"numLocations=5,includeDoors=0"``) and a seed; the package splits seeds into train /
dev / test sets and ``reset(seed)`` plays ``split_seeds[seed % len(split_seeds)]``.

Every step returns the valid actions for free (``validActions``), so ``info["admissible"]``
is always filled (sorted: the simulator's order varies). An action that is not one of them
(after lower-casing and collapsing spaces) is ``valid=False`` and is *not* sent to the
game, so the state cannot change. Reward is the score delta (score in [0, 1], or the raw
points with ``raw_score=True``); success is the game's ``tasksuccess`` flag.

Speed: this class launches the package's jar itself and calls ``stepJSON`` on its py4j
``PythonInterface`` once per step (the package's wrapper adds a second round trip for the
task description and a history copy). Snapshot/restore is the generic replay from the
seed: a new game costs about a millisecond and a step a fraction of one.

Memory: the envs of a process share one JVM, each with its own ``PythonInterface``
(``share_jvm=False``: one JVM per env, about 60 MB each). A rollout of 16 envs beside 64
evaluation envs ran 80 JVMs per run otherwise. A dead JVM costs one episode
(``cairn.envs._jvm``): the first env to find it dead raises ``JvmDied``; every other env on
it moves to a fresh JVM and replays its episode there (the games are deterministic).
"""

from __future__ import annotations

import json
import random
import re
import weakref
from collections.abc import Mapping
from numbers import Integral
from typing import Any

from py4j.java_gateway import JavaGateway
from textworld_express.constants import BASEPATH, GAME_NAMES, JAR_PATH

from cairn.envs._common import EpisodeClock, check_bool, check_choice, check_int, next_on_path
from cairn.envs._jvm import (
    JvmDied,
    acquire_jvm,
    claim_dead_jvm,
    jvm_exit_code,
    let_go,
    release_jvm,
)
from cairn.envs.base import StepResult, TextEnv

__all__ = [
    "GAMES",
    "INVALID_OBSERVATION",
    "MAX_PARAM",
    "SPLITS",
    "TextWorldExpress",
    "format_game_params",
    "normalize_action",
]

#: Game names the package knows.
GAMES: tuple[str, ...] = tuple(GAME_NAMES)
#: Seed sets of the package.
SPLITS: tuple[str, ...] = ("train", "dev", "test")
INVALID_OBSERVATION = "Invalid action: it is not one of the admissible actions."
_PARAM = re.compile(r"^([A-Za-z][A-Za-z0-9]*)=(-?\d+)$")
#: The range of a game parameter: counts and 0/1 switches, the largest the simulator takes
#: being 1000 (simonsays' gameLength). It checks only some parameters itself, at the first
#: reset in the JVM; a world sized by an unchecked one costs time and memory in proportion.
MAX_PARAM = 1000
_SEED_GETTERS = {"train": "getSeedsTrain", "dev": "getSeedsDev", "test": "getSeedsTest"}


def format_game_params(params: str | Mapping[str, int]) -> str:
    """``"k=v,k=v"`` from a string of that form or a ``{name: int}`` mapping, each value
    in [0, ``MAX_PARAM``] (checked)."""
    if isinstance(params, Mapping):
        for key, value in params.items():
            check_int(f"game_params[{key!r}]", value, -(2**31))
        items = [f"{key}={value}" for key, value in params.items()]
    elif isinstance(params, str):
        items = [p.strip() for p in params.split(",") if p.strip()]
    else:
        raise ValueError(f"game_params must be a str or a mapping, got {params!r}")
    for item in items:
        match = _PARAM.match(item)
        if not match:
            raise ValueError(
                f"game_params item {item!r} must look like name=integer, e.g. 'numLocations=5'"
            )
        _check_param(match[1], int(match[2]))
    return ",".join(items)


def _check_param(name: str, value: int) -> None:
    if not 0 <= value <= MAX_PARAM:
        raise ValueError(
            f"game_params[{name!r}] must be [0, {MAX_PARAM}], got {value} (counts and 0/1 "
            f"switches; the simulator's largest is {MAX_PARAM}, simonsays' gameLength: a "
            "larger world costs the JVM time and memory in proportion)"
        )


def normalize_action(action: str) -> str:
    """Lower-case with single spaces: the form the game's valid actions take."""
    return " ".join(action.lower().split())


class TextWorldExpress(TextEnv):
    """One TextWorld-Express game; each reset generates the game of one split seed.

    Options:
        game: one of :data:`GAMES`.
        game_params: the game's parameter string (``"numLocations=5,includeDoors=0"``) or a
            mapping, each value in [0, ``MAX_PARAM``]; names are checked by the simulator
            at the first reset.
        split: ``"train"``, ``"dev"`` or ``"test"`` seed set.
        raw_score: rewards in the game's points instead of score fractions (0-1).
        max_steps: steps (valid or not) before truncation.
        share_jvm: envs of one process share one JVM, each with its own simulator (True),
            instead of one JVM per env (False).
    """

    example_action = "look around"

    def __init__(
        self,
        game: str = "coin",
        game_params: str | Mapping[str, int] = "",
        split: str = "train",
        raw_score: bool = False,
        max_steps: int = 50,
        share_jvm: bool = True,
    ) -> None:
        super().__init__()
        self.game = check_choice("game", game, GAMES)
        self.game_params = format_game_params(game_params)
        self.split = check_choice("split", split, SPLITS)
        self.raw_score = check_bool("raw_score", raw_score)
        self.share_jvm = check_bool("share_jvm", share_jvm)
        self._clock = EpisodeClock("twx", max_steps)
        self._gateway: JavaGateway | None = None
        self._entry: Any = None
        self._stop: weakref.finalize | None = None
        self._seeds: tuple[int, ...] | None = None
        self.game_seed: int | None = None
        self._state: dict[str, Any] = {}
        self._anchor = ""
        self._gold: dict[int, tuple[str, ...]] = {}

    # -- episode -------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict[str, object]) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed = self._seed = random.randrange(2**31)
        elif isinstance(seed, bool) or not isinstance(seed, Integral):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        self._leave_dead_jvm("reset")
        seeds = self._split_seeds()
        self.game_seed = seeds[int(seed) % len(seeds)]
        self._state = self._new_game(gold=False)
        self.instruction = self._server().getTaskDescription()
        self._clock.start()
        self._anchor = self._state["observation"]
        return self._anchor, self._info(valid=True)

    def _step(self, action: str) -> StepResult:
        truncated = self._clock.tick()
        command = normalize_action(action)
        if command not in self._state["validActions"]:
            self._clock.done = truncated
            return INVALID_OBSERVATION, 0.0, False, truncated, self._info(valid=False)
        self._leave_dead_jvm("step")
        before = self._points(self._state)
        self._state = json.loads(self._server().stepJSON(command))
        reward = float(self._points(self._state) - before)
        terminated = bool(self._state["tasksuccess"] or self._state["taskfailure"])
        self._clock.done = terminated or truncated
        self._anchor = self._state["observation"]
        return self._anchor, reward, terminated, truncated and not terminated, self._info(True)

    def _info(self, valid: bool) -> dict[str, Any]:
        return {
            "anchor": self._anchor,
            "valid": valid,
            "success": self._clock.done and bool(self._state["tasksuccess"]),
            "admissible": sorted(self._state["validActions"]),
            "score": self._points(self._state),
            "game_seed": self.game_seed,
            "steps": self._clock.steps,
        }

    def _points(self, state: dict[str, Any]) -> float:
        return float(state["scoreRaw"] if self.raw_score else state["score"])

    # -- extra queries ---------------------------------------------------------------------
    def gold_action(self) -> str | None:
        """The walkthrough's next action while this episode has followed it (None once off
        it or at its end)."""
        if not self._clock.started or self._clock.done:
            return None
        return next_on_path(self.gold_actions(), self._actions)

    def gold_actions(self) -> list[str]:
        """A winning action sequence from this episode's initial state (the game's solver).

        The solver explores at random, so two calls may give different (equally valid)
        paths; the first one is cached per game seed. The current state is rebuilt by
        replaying this episode's actions.
        """
        if not self._clock.started or self.game_seed is None:
            raise RuntimeError("twx: call reset() first")
        if self.game_seed not in self._gold:
            self._leave_dead_jvm("gold_actions")
            self._new_game(gold=True)
            self._gold[self.game_seed] = tuple(self._server().getGoldActionSequence())
            self._replay()
        return list(self._gold[self.game_seed])

    def split_seeds(self) -> tuple[int, ...]:
        """The game seeds of ``split`` that ``reset`` draws from."""
        return self._split_seeds()

    # -- JVM -----------------------------------------------------------------------------------
    def _server(self) -> Any:
        """The py4j proxy of this env's ``PythonInterface``; loads the game once."""
        if self._gateway is None:
            self._gateway = acquire_jvm(JAR_PATH, BASEPATH, shared=self.share_jvm)
            # runs at close() or, at the latest, at interpreter exit (before module teardown)
            self._stop = weakref.finalize(self, release_jvm, self._gateway, self.share_jvm)
            self._entry = self._gateway.jvm.textworldexpress.runtime.PythonInterface()
            error = self._entry.load(self.game, self.game_params)
            if error:
                self.close()
                raise ValueError(f"twx game {self.game!r}, game_params: {error.strip()}")
        return self._entry

    def _new_game(self, gold: bool) -> dict[str, Any]:
        return json.loads(self._server().generateNewGameJSON(self.game_seed, self.split, gold))

    def _replay(self) -> None:
        """Rebuild this episode's state: a new game of its seed, then its valid actions."""
        self._state = self._new_game(gold=False)
        for action in self._actions:
            command = normalize_action(action)
            if command in self._state["validActions"]:
                self._state = json.loads(self._server().stepJSON(command))

    def _leave_dead_jvm(self, call: str) -> None:
        """If this env's JVM has exited: raise ``JvmDied`` as the first env to find it dead
        (its episode pays), else move to a fresh JVM and replay the episode there."""
        gateway = self._gateway
        code = None if gateway is None else jvm_exit_code(gateway)
        if gateway is None or code is None:
            return
        self._drop_jvm()
        if claim_dead_jvm(gateway):
            self._clock.started = False
            raise JvmDied(
                f"twx: its JVM (pid {gateway.java_process.pid}) exited with code {code} before "
                f"{call}(); this episode is lost, the next reset starts a new JVM"
            )
        if call != "reset":
            self._replay()

    def _split_seeds(self) -> tuple[int, ...]:
        if self._seeds is None:
            getter = getattr(self._server(), _SEED_GETTERS[self.split])
            self._seeds = tuple(int(s) for s in getter())
        return self._seeds

    def close(self) -> None:
        """Release the JVM: stopped once no env uses it (waits for it to exit; kills it
        after 5 s). Safe to call twice."""
        self._drop_jvm()
        self._clock.started = False

    def _drop_jvm(self) -> None:
        """Let go of this env's JVM (its simulator first, where the JVM still runs)."""
        let_go(self._gateway, self._entry, self._stop)
        self._gateway, self._entry, self._stop = None, None, None
