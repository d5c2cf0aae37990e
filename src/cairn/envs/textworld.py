"""TextWorld (Côté et al. 2018, arXiv 1806.11532) games generated locally, behind the env contract.

Games are made in-process with TextWorld's generator (what ``tw-make`` runs) and compiled
to Z-machine files with the bundled Inform 7 compiler:

- ``coin_collector``: walk a chain of rooms to a coin (``level`` 1-300);
- ``treasure_hunter``: find a named object among distractors, locked doors (``level`` 1-30);
- ``cooking``: the First TextWorld Problems cooking games (``recipe``, ``take``, ``go``,
  ``open``, ``cook``, ``cut``, ``drop``, ``recipe_seed``, ``split``);
- ``custom``: a random world and quest (``world_size`` rooms, ``nb_objects``,
  ``quest_length``, ``quest_breadth``).

``reset(seed)`` plays the game generated with that seed (``seed % num_games`` when
``num_games`` is set, for a fixed pool). Generating and compiling costs about 1-6 s, so
each game is cached on disk under ``cache_dir/<game>/<key>.z8`` where the key hashes the
game type, its full settings, the seed and the TextWorld version; a cached reset costs
tens of milliseconds (start the interpreter and read the game) and a reset of the game
already loaded less.

Play goes through ``textworld.start`` with ``EnvInfos(admissible_commands=True, ...)``:
the admissible commands come with every step. An action that is not one of them (after
lower-casing and collapsing spaces) is ``valid=False`` and is *not* sent to the game, so
the state cannot change. Reward is the score delta (divided by the game's maximum score
unless ``raw_score=True``), success is TextWorld's ``won`` flag; ``lost`` also ends the
episode. Observations drop the TextWorld banner, the interpreter's prompt and status line
(room, score and move counter) and runs of blank lines.

Snapshot/restore: the generic replay of the action prefix from the reset seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from numbers import Integral
from pathlib import Path
from typing import IO, Any

import textworld
import textworld.challenges
from textworld import EnvInfos, GameOptions
from textworld.generator import compile_game, make_game

from cairn.envs._common import EpisodeClock, check_bool, check_choice, check_int, next_on_path
from cairn.envs.base import StepResult, TextEnv

__all__ = [
    "DEFAULT_SETTINGS",
    "GAMES",
    "INVALID_OBSERVATION",
    "MAX_GAMES",
    "TextWorld",
    "cached_game",
    "clean_feedback",
    "game_settings",
    "normalize_action",
]

#: Game types and their default settings.
DEFAULT_SETTINGS: dict[str, dict[str, Any]] = {
    "coin_collector": {"level": 1},
    "treasure_hunter": {"level": 1},
    "cooking": {
        "recipe": 1,
        "take": 0,
        "go": 1,
        "open": False,
        "cook": False,
        "cut": False,
        "drop": False,
        "recipe_seed": 0,
        "split": None,
    },
    "custom": {"world_size": 3, "nb_objects": 5, "quest_length": 3, "quest_breadth": 1},
}
GAMES: tuple[str, ...] = tuple(DEFAULT_SETTINGS)
#: The largest fixed pool of games: each game is generated and compiled once (1-6 s) and
#: cached on disk (~0.4 MB), so 10,000 games already cost up to 17 hours and 4 GB.
MAX_GAMES = 10_000
INVALID_OBSERVATION = "Invalid action: it is not one of the admissible actions."
_CHALLENGE = {
    "coin_collector": "tw-coin_collector",
    "treasure_hunter": "tw-treasure_hunter",
    "cooking": "tw-cooking",
}
_BANNER_LINE = re.compile(r"[\s_|\\/$<>]*")
_PROMPT_LINE = re.compile(r"\n>[^\n]*\Z")
_BLANK_LINES = re.compile(r"\n{3,}")
_INFOS = EnvInfos(
    admissible_commands=True,
    objective=True,
    score=True,
    max_score=True,
    won=True,
    lost=True,
    extras=["walkthrough"],
)


# -- settings ---------------------------------------------------------------------------------
def _check_coin_level(level: Any) -> None:
    check_int("settings['level']", level, 1, 300)
    rooms = ((level - 1) // 100 + 1) * ((level - 1) % 100 + 1)
    if rooms > 100:
        raise ValueError(
            f"coin_collector level {level} needs {rooms} rooms; TextWorld allows at most 100 "
            "(levels 1-100, 101-150 and 201-233 are playable)"
        )


def _check_cooking(s: dict[str, Any]) -> None:
    check_int("settings['recipe']", s["recipe"], 1, 5)
    check_int("settings['take']", s["take"], 0, s["recipe"])
    if s["go"] not in (1, 6, 9, 12) or isinstance(s["go"], bool):
        raise ValueError(f"settings['go'] must be 1, 6, 9 or 12 rooms, got {s['go']!r}")
    for key in ("open", "cook", "cut", "drop"):
        check_bool(f"settings[{key!r}]", s[key])
    check_int("settings['recipe_seed']", s["recipe_seed"], 0, 2**32 - 1)
    if s["split"] is not None:
        check_choice("settings['split']", s["split"], ("train", "valid", "test"))


def _check_custom(s: dict[str, Any]) -> None:
    check_int("settings['world_size']", s["world_size"], 1, 100)
    check_int("settings['nb_objects']", s["nb_objects"], 0, 200)
    check_int("settings['quest_length']", s["quest_length"], 1, 50)
    check_int("settings['quest_breadth']", s["quest_breadth"], 1, 10)


def game_settings(game: str, settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The full, checked settings of ``game``: defaults updated by ``settings``."""
    check_choice("game", game, GAMES)
    if settings is not None and not isinstance(settings, Mapping):
        raise ValueError(f"settings must be a mapping or None, got {settings!r}")
    full = dict(DEFAULT_SETTINGS[game])
    unknown = sorted(set(settings or {}) - set(full))
    if unknown:
        raise ValueError(
            f"{game} has no setting {', '.join(map(repr, unknown))}; allowed: {', '.join(full)}"
        )
    full.update(settings or {})
    if game == "coin_collector":
        _check_coin_level(full["level"])
    elif game == "treasure_hunter":
        check_int("settings['level']", full["level"], 1, 30)
    elif game == "cooking":
        _check_cooking(full)
    else:
        _check_custom(full)
    return full


def clean_feedback(text: str) -> str:
    """The game's text without the ASCII-art banner, the prompt and status line, extra blanks.

    The interpreter ends every output with ``>`` and a status line (room, score/moves); the
    move counter would make every anchor unique, so it goes.
    """
    lines = text.split("\n")
    start = 0
    while start < len(lines) and _BANNER_LINE.fullmatch(lines[start]):
        start += 1
    body = _PROMPT_LINE.sub("", "\n".join(lines[start:]))
    return _BLANK_LINES.sub("\n\n", body).strip()


def normalize_action(action: str) -> str:
    """Lower-case with single spaces: the form TextWorld's admissible commands take."""
    return " ".join(action.lower().split())


@contextmanager
def _quiet_jericho() -> Iterator[None]:
    """Silence Jericho's note that it cannot detect score and moves itself in TextWorld
    games (TextWorld tracks both through its own Inform 7 hooks)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not fully supported", category=UserWarning)
        yield


# -- generation -----------------------------------------------------------------------------------
def _build(game: str, settings: dict[str, Any], seed: int, path: Path) -> None:
    """Generate and compile one game to ``path`` (``.z8``, with its ``.json`` beside it)."""
    options = GameOptions()
    options.seeds = seed
    options.path = str(path)
    options.file_ext = ".z8"
    if game == "custom":
        options.nb_rooms = settings["world_size"]
        options.nb_objects = settings["nb_objects"]
        options.quest_length = settings["quest_length"]
        options.quest_breadth = settings["quest_breadth"]
        made = make_game(options)
    else:
        made = textworld.challenges.CHALLENGES[_CHALLENGE[game]][1](dict(settings), options)
    compile_game(made, options)


def cached_game(game: str, settings: dict[str, Any], seed: int, cache_dir: Path) -> Path:
    """Path of the compiled game for (game, settings, seed); generated on the first call.

    Files are built in a private temporary folder and moved into place (``.json`` first,
    then ``.z8``), so readers never see half-written games; a lock file per game makes
    concurrent processes wait for one build instead of repeating it.
    """
    blob = json.dumps([game, settings, seed, textworld.__version__], sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:20]
    folder = cache_dir / game
    target = folder / f"{key}.z8"
    if _complete(target):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{key}.lock", "w") as lock:
        _lock(lock)
        if not _complete(target):  # another process may have built it meanwhile
            _build_into(game, settings, seed, target)
    return target


def _complete(target: Path) -> bool:
    return target.is_file() and target.with_suffix(".json").is_file()


def _lock(handle: IO[str]) -> None:
    """Block until this process holds an exclusive lock on ``handle`` (POSIX only)."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; the atomic moves still keep games whole
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)


def _build_into(game: str, settings: dict[str, Any], seed: int, target: Path) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        with _quiet_jericho():  # cooking games are played once to record their walkthrough
            _build(game, settings, seed, scratch / "game.z8")
        os.replace(scratch / "game.json", target.with_suffix(".json"))
        os.replace(scratch / "game.z8", target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_num_games(num_games: object) -> int:
    """``num_games`` in [1, MAX_GAMES], the error saying what a larger pool would cost."""
    try:
        return check_int("num_games", num_games, 1, MAX_GAMES)
    except ValueError as err:
        raise ValueError(
            f"{err} (each game of the pool is generated once, 1-6 s, and cached, ~0.4 MB: "
            f"{MAX_GAMES} games are up to 17 hours and 4 GB; null: a new game per seed)"
        ) from None


# -- env ---------------------------------------------------------------------------------------
class TextWorld(TextEnv):
    """A TextWorld game per reset seed, generated locally and cached on disk.

    Options:
        game: one of :data:`GAMES`.
        settings: the game's settings (see :data:`DEFAULT_SETTINGS`); missing keys keep
            their defaults, unknown keys raise.
        num_games: None (every seed is its own game) or the size of a fixed pool of games
            (``seed % num_games``), e.g. to pre-generate a training set; at most
            ``MAX_GAMES``.
        cache_dir: where compiled games are kept (default ``~/.cache/cairn/textworld``).
        raw_score: rewards in the game's points instead of fractions of its maximum score.
        max_steps: steps (valid or not) before truncation.
    """

    example_action = "go north"

    def __init__(
        self,
        game: str = "coin_collector",
        settings: Mapping[str, Any] | None = None,
        num_games: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        raw_score: bool = False,
        max_steps: int = 50,
    ) -> None:
        super().__init__()
        self.game = check_choice("game", game, GAMES)
        self.settings = game_settings(game, settings)
        self.num_games = None if num_games is None else _check_num_games(num_games)
        if cache_dir is not None and not isinstance(cache_dir, str | os.PathLike):
            raise ValueError(f"cache_dir must be a path or None, got {cache_dir!r}")
        default = Path.home() / ".cache" / "cairn" / "textworld"
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default
        self.raw_score = check_bool("raw_score", raw_score)
        self._clock = EpisodeClock("textworld", max_steps)
        self._env: Any = None
        self._path: Path | None = None
        self._state: Any = None
        self._anchor = ""
        self.game_seed: int | None = None

    # -- episode -------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict[str, object]) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed = self._seed = random.randrange(2**31)
        elif isinstance(seed, bool) or not isinstance(seed, Integral):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        self.game_seed = int(seed) % (self.num_games or 2**31)
        path = self.game_file(self.game_seed)
        if path != self._path:
            self._close_game()
            with _quiet_jericho():
                self._env, self._path = textworld.start(str(path), _INFOS), path
        self._state = self._env.reset()
        self.instruction = self._state.objective
        self._clock.start()
        self._anchor = clean_feedback(self._state.feedback)
        return self._anchor, self._info(valid=True)

    def _step(self, action: str) -> StepResult:
        truncated = self._clock.tick()
        command = normalize_action(action)
        if command not in self._state.admissible_commands:
            self._clock.done = truncated
            return INVALID_OBSERVATION, 0.0, False, truncated, self._info(valid=False)
        before = self._state.score
        self._state, _, _ = self._env.step(command)
        reward = float(self._state.score - before) / self._scale()
        terminated = bool(self._state.won or self._state.lost)
        self._clock.done = terminated or truncated
        self._anchor = clean_feedback(self._state.feedback)
        return self._anchor, reward, terminated, truncated and not terminated, self._info(True)

    def _info(self, valid: bool) -> dict[str, Any]:
        return {
            "anchor": self._anchor,
            "valid": valid,
            "success": self._clock.done and bool(self._state.won),
            "admissible": list(self._state.admissible_commands),
            "score": self._state.score / self._scale(),
            "game_seed": self.game_seed,
            "steps": self._clock.steps,
        }

    def _scale(self) -> float:
        return 1.0 if self.raw_score else float(max(self._state.max_score, 1))

    # -- extra queries ---------------------------------------------------------------------
    def game_file(self, game_seed: int) -> Path:
        """The compiled game of ``game_seed`` (generates and caches it when missing)."""
        return cached_game(self.game, self.settings, game_seed, self.cache_dir)

    def gold_action(self) -> str | None:
        """The walkthrough's next action while this episode has followed it (None once off
        it or at its end)."""
        if not self._clock.started or self._clock.done:
            return None
        return next_on_path(self.gold_actions(), self._actions)

    def gold_actions(self) -> list[str]:
        """The walkthrough TextWorld stored with the game (from the initial state)."""
        if not self._clock.started:
            raise RuntimeError("textworld: call reset() first")
        return list(self._state["extra.walkthrough"])

    # -- resources ---------------------------------------------------------------------------
    def _close_game(self) -> None:
        if self._env is not None:
            self._env.close()
        self._env, self._path = None, None

    def close(self) -> None:
        """Close the game interpreter. Safe to call twice."""
        self._close_game()
        self._clock.started = False
