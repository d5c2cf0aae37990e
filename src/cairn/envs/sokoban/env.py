"""The Sokoban env: rules, rewards, the step clock, snapshots (see the package docstring).

Each step costs -0.1, pushing a box onto a target gives +1, off a target -1, and putting
the last box on its target adds +10 and ends the episode (gym-sokoban, Schrader 2018).

What a trainer reads beside the reward (``cairn.rollout.turn``):
- ``info["no_progress"]``: a legal move that left the room unchanged (into a wall, or a
  box that cannot move). It is not progress: it earns no format bonus and costs
  ``agent.no_progress_penalty``, so a policy that walks into a wall is not paid for form.
- ``info["task_blind"]``: the episode so far has not solved the room and its valid moves
  ignore the room: at least two, all the same move (``right right right ...``), or at
  least half of them no-ops. ``rollout/task_blind`` is the share of such episodes.
- ``example_pool=True`` (text rendering): the made-up example episode that opens a
  language model's prompt is drawn per task instance from four corridors, one per
  direction (a step, then a push onto the target), and handed over in the reset info
  (``demonstration``); a fixed example biased SmolLM2 towards its move (14 of 16 first
  moves were the example's ``right``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cairn.envs._common import (
    MAX_EPISODE_STEPS,
    EpisodeClock,
    check_bool,
    check_choice,
    check_int,
    fresh_seed,
)
from cairn.envs.base import ReplaySnapshot, StepResult, TextEnv
from cairn.envs.sokoban.generate import (
    MAX_SIZE,
    _check_bounds,
    _check_counts,
    _generate_cached,
    _parse_size,
    _parse_walls,
)
from cairn.envs.sokoban.render import compact_vocabulary, render_compact, render_text
from cairn.envs.sokoban.solver import (
    ACTIONS,
    DELTAS,
    SYMBOLS,
    Cell,
    Room,
    parse_grid,
    render_grid,
    solve,
)

__all__ = [
    "BOX_OFF_TARGET",
    "BOX_ON_TARGET",
    "FINISHED",
    "STEP_COST",
    "Sokoban",
    "SokobanSnapshot",
    "apply_action",
]

STEP_COST = -0.1
BOX_ON_TARGET = 1.0
BOX_OFF_TARGET = -1.0
FINISHED = 10.0
_RENDERS = ("grid", "compact", "text")
# the demonstration of the text rendering: a step right, then a push right onto the target
_EXAMPLE_ROOM = "# # # # # #\n# @ _ $ . #\n# # # # # #"
# example_pool: one corridor per direction (a step, then a push onto the target)
_EXAMPLE_POOL = {
    "right": _EXAMPLE_ROOM,
    "left": "# # # # # #\n# . $ _ @ #\n# # # # # #",
    "down": "# # #\n# @ #\n# _ #\n# $ #\n# . #\n# # #",
    "up": "# # #\n# . #\n# $ #\n# _ #\n# @ #\n# # #",
}
_INSTRUCTIONS = {
    "text": (
        "Sokoban: push every box onto a target. The map is a grid, row 0 at the top and "
        "column 0 at the left. Symbols: # wall, _ floor, . target, $ box, * box on a "
        "target, @ you, + you on a target. Each action moves you one cell: up, down, left "
        "or right. Walking into a box pushes it one cell if the cell behind it is free; "
        "boxes cannot be pulled."
    ),
    "grid": (
        "Sokoban: push every box onto a target. Symbols: # wall, _ floor, . target, "
        "$ box, * box on target, @ you, + you on a target. You push a box by walking into "
        "it; you cannot pull. Answer with one action: up, down, left or right."
    ),
    "compact": "push the box onto the goal",
}


@dataclass(frozen=True)
class SokobanSnapshot:
    """A cheap copy of the env's state (the room is immutable, so it is shared)."""

    seed: int | None
    actions: tuple[str, ...]
    room: Room
    steps: int
    done: bool
    info: dict[str, Any]
    moves: tuple[str, ...] = ()  # the valid moves so far (task_blind)
    noops: int = 0  # of which left the room unchanged


class Sokoban(TextEnv):
    """Sokoban with text observations; see the module docstring for rules and options.

    Options: ``size`` (int or (height, width), outer wall included), ``num_boxes``,
    ``max_steps`` (turns before truncation), ``render`` ("grid", "compact" or "text":
    numbered rows and positions in words, for language models), ``walls``
    (True: irregular rooms with interior walls, False: open rectangles, or a float
    density in [0, 1)), ``min_solution`` / ``max_solution`` (bounds on the optimal
    solution length in moves, default 1 and ``max_steps``), ``instruction`` (prompt text;
    default depends on ``render``), ``room`` (a fixed room as grid text, e.g. for tests;
    then the seed and the generation options are ignored), ``example_pool`` (text
    rendering: the example episode drawn per task instance from one corridor per
    direction, module docstring; default False: always the step and push ``right``).
    """

    example_action = "right"

    def __init__(
        self,
        size: int | tuple[int, int] = 6,
        num_boxes: int = 1,
        max_steps: int = 15,
        render: str = "grid",
        walls: bool | float = True,
        min_solution: int = 1,
        max_solution: int | None = None,
        instruction: str | None = None,
        room: str | None = None,
        example_pool: bool = False,
    ) -> None:
        super().__init__()
        self.example_pool = check_bool("example_pool", example_pool)
        self._moves: list[str] = []
        self._noops = 0
        self.max_steps = check_int("max_steps", max_steps, 1, MAX_EPISODE_STEPS)
        self.render = check_choice("render", render, _RENDERS)
        self.fixed_room = self._parse_fixed_room(room)
        if self.fixed_room is None:
            self.height, self.width = _parse_size(size)
            self.wall_density = _parse_walls(walls)
            _check_counts(self.height, self.width, num_boxes, self.wall_density)
            self.num_boxes = num_boxes
        else:
            self.height, self.width = self.fixed_room.height, self.fixed_room.width
            self.wall_density, self.num_boxes = 0.0, len(self.fixed_room.boxes)
        self.min_solution = min_solution
        self.max_solution = max_steps if max_solution is None else max_solution
        _check_bounds(self.min_solution, self.max_solution, max_steps)
        if instruction is not None and not isinstance(instruction, str):
            raise ValueError(f"instruction must be a str or None, got {instruction!r}")
        self.instruction = _INSTRUCTIONS[render] if instruction is None else instruction
        if self.render == "text":
            self.example_observation = render_text(parse_grid(_EXAMPLE_ROOM))
        self._room: Room | None = None
        self._clock = EpisodeClock("sokoban", self.max_steps)
        self._info: dict[str, Any] = {}

    @staticmethod
    def _parse_fixed_room(room: str | None) -> Room | None:
        if room is None:
            return None
        if not isinstance(room, str):
            raise ValueError(f"room must be grid text or None, got {type(room).__name__}")
        lines = room.strip("\n").splitlines()
        if len(lines) > MAX_SIZE or max(map(len, lines), default=0) > MAX_SIZE:
            raise ValueError(f"room must be at most {MAX_SIZE}x{MAX_SIZE} cells")
        parsed = parse_grid(room)
        if parsed.solved:
            raise ValueError("room is already solved: every box is on a target")
        return parsed

    # -- state access --------------------------------------------------------------------
    @property
    def room(self) -> Room:
        """The current state (layout, player, boxes) as an immutable ``Room``."""
        if self._room is None:
            raise RuntimeError("call reset() before using the env")
        return self._room

    @property
    def steps(self) -> int:
        """Turns taken in this episode (invalid actions included)."""
        return self._clock.steps

    @property
    def remaining_steps(self) -> int:
        return self.max_steps - self._clock.steps

    def solve(self, max_moves: int | None = None) -> list[str] | None:
        """An optimal action sequence from the current state, or None if there is none
        within ``max_moves`` moves (pass ``env.remaining_steps`` to ask "still winnable?")."""
        return solve(self.room, max_moves)

    def demonstration(self) -> list[tuple[str, str]]:
        """The text rendering's made-up episode: in a corridor room, a step right and a push
        right that puts the box on its target (two turns: a small model follows the format
        far more often after two exchanges than after one)."""
        if self.render != "text":
            return []
        move = "right"
        if self.example_pool and self._seed is not None:  # per task instance (module docstring)
            rng = np.random.default_rng([int(self._seed), 0x5E])
            move = sorted(_EXAMPLE_POOL)[int(rng.integers(len(_EXAMPLE_POOL)))]
        room = parse_grid(_EXAMPLE_POOL[move])
        return [(render_text(room), move), (render_text(apply_action(room, move)), move)]

    def gold_action(self) -> str | None:
        """The optimal solver's next move from the current state (None when the episode
        is over or the room cannot be solved in the steps left)."""
        if self._room is None or self._clock.done:
            return None
        plan = self.solve(self.remaining_steps)
        return plan[0] if plan else None

    # -- TextEnv ------------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict[str, object]) -> tuple[str, dict[str, Any]]:
        if options:
            raise ValueError(f"Sokoban.reset takes no options, got {sorted(options)}")
        if seed is None:  # draw one and record it, so the replay fallback is exact too
            seed = self._seed = fresh_seed()
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        if self.fixed_room is not None:
            self._room = self.fixed_room
        else:
            shape = (self.height, self.width, self.num_boxes, self.wall_density)
            bounds = (self.min_solution, self.max_solution)
            self._room = _generate_cached(*shape, *bounds, int(seed))
        self._clock.start()
        self._moves, self._noops = [], 0
        obs, info = self._observe(valid=True, moved=False)
        if self.example_pool and self.render == "text":
            info["demonstration"] = self.demonstration()
        return obs, info

    def step(self, action: str) -> StepResult:
        self._clock.check()  # before the base class records the action
        return super().step(action)

    def _step(self, action: str) -> StepResult:
        key = action.strip().lower()
        room = self.room
        reward = STEP_COST
        valid, moved = key in DELTAS, False
        if valid:
            new = apply_action(room, key)
            moved = new is not room
            change = new.boxes_on_target - room.boxes_on_target
            reward += BOX_ON_TARGET if change > 0 else BOX_OFF_TARGET if change < 0 else 0.0
            if new.solved:
                reward += FINISHED
            self._room = new
            self._moves.append(key)
            self._noops += not moved
        at_limit = self._clock.tick()
        terminated = self.room.solved
        truncated = not terminated and at_limit
        self._clock.done = terminated or truncated
        obs, info = self._observe(valid=valid, moved=moved, no_progress=valid and not moved)
        return obs, reward, terminated, truncated, info

    def _task_blind(self) -> bool:
        """The room is unsolved and the valid moves ignore it (module docstring)."""
        moves = self._moves
        if self.room.solved or not moves:
            return False
        return (len(moves) >= 2 and len(set(moves)) == 1) or 2 * self._noops >= len(moves)

    def _observe(
        self, valid: bool, moved: bool, no_progress: bool = False
    ) -> tuple[str, dict[str, Any]]:
        room = self.room
        anchor = render_grid(room)
        self._info = {
            "anchor": anchor,
            "valid": valid,
            "success": room.solved,
            "admissible": list(ACTIONS),
            "boxes_on_target": room.boxes_on_target,
            "num_boxes": len(room.boxes),
            "steps": self._clock.steps,
            "moved": moved,
            "no_progress": no_progress,
            "task_blind": self._task_blind(),
        }
        return self._render(room), dict(self._info, admissible=list(ACTIONS))

    # -- branching ----------------------------------------------------------------------------
    def snapshot(self) -> SokobanSnapshot:
        info = dict(self._info, admissible=list(ACTIONS))
        actions = tuple(self._actions)
        steps, done = self._clock.steps, self._clock.done
        return SokobanSnapshot(
            self._seed, actions, self.room, steps, done, info, tuple(self._moves), self._noops
        )

    def restore(self, snap: object) -> tuple[str, dict[str, Any]]:
        if isinstance(snap, ReplaySnapshot):
            return super().restore(snap)
        if not isinstance(snap, SokobanSnapshot):
            raise TypeError(f"Sokoban cannot restore a {type(snap).__name__}")
        self._seed, self._actions = snap.seed, list(snap.actions)
        self._room = snap.room
        self._clock.set_state((snap.steps, True, snap.done))
        self._info = dict(snap.info)
        self._moves, self._noops = list(snap.moves), snap.noops
        return self._render(snap.room), dict(self._info, admissible=list(ACTIONS))

    def _render(self, room: Room) -> str:
        if self.render == "grid":
            return render_grid(room)
        return render_compact(room) if self.render == "compact" else render_text(room)

    # -- tokenizer ------------------------------------------------------------------------------
    def vocabulary(self) -> list[str]:
        """Grid symbols, compact words for this room size, the actions, the instruction.

        Empty (open vocabulary: a subword tokenizer) for the ``text`` rendering."""
        if self.render == "text":
            return []
        words = set(SYMBOLS.values()) | set(ACTIONS) | set(self.instruction.split())
        words |= set(compact_vocabulary(self.height, self.width))
        return sorted(words)


def apply_action(room: Room, action: str) -> Room:
    """The room after ``action`` (one of ``ACTIONS``); the same object when it is blocked."""
    dr, dc = DELTAS[action]
    pr, pc = room.player
    ahead, beyond = (pr + dr, pc + dc), (pr + 2 * dr, pc + 2 * dc)
    if _blocked(room, ahead):
        return room
    if ahead not in room.boxes:
        return room.with_state(ahead, room.boxes)
    if _blocked(room, beyond) or beyond in room.boxes:
        return room
    return room.with_state(ahead, (room.boxes - {ahead}) | {beyond})


def _blocked(room: Room, cell: Cell) -> bool:
    return cell in room.walls or not room.inside(cell)
