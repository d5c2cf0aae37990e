"""The built-in Sokoban env: procedurally generated, always solvable rooms as text.

Rules and rewards follow gym-sokoban (Schrader 2018), the Sokoban setting of GiGPO
(arXiv 2505.10978, Sec. 5: "6x6 rooms with walls, 1 box, 15 steps"): each step costs
-0.1, pushing a box onto a target gives +1, off a target -1, and putting the last box on
its target adds +10 and ends the episode. Moving into a wall or pushing a box into a wall
or another box is a valid move that changes nothing.

Rooms come from the seed alone: a random walk carves the floor out of solid wall (so the
floor is connected, with irregular interior walls), targets, boxes and the player are
dropped on random floor cells, and the draw is kept only when the breadth-first solver
(``cairn.envs.sokoban_solver``) finds an optimal solution whose length in moves lies in
``[min_solution, max_solution]``. Generated rooms are cached by (options, seed).

Two renderings (``render=``):
- ``"grid"``: rows of space-separated symbols, ``# _ . $ * @ +`` (wall, floor, target,
  box, box on target, player, player on target), for real LLMs;
- ``"compact"``: a short fixed-length sentence of closed-vocabulary words for tiny models
  (see ``render_compact``). ``info["anchor"]`` is always the grid text.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from cairn.envs.base import ReplaySnapshot, StepResult, TextEnv
from cairn.envs.sokoban_solver import (
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
    "DEFAULT_WALL_DENSITY",
    "FINISHED",
    "STEP_COST",
    "Sokoban",
    "SokobanSnapshot",
    "apply_action",
    "compact_vocabulary",
    "generate_room",
    "render_compact",
]

STEP_COST = -0.1
BOX_ON_TARGET = 1.0
BOX_OFF_TARGET = -1.0
FINISHED = 10.0
#: Fraction of the interior left as wall when ``walls=True``.
DEFAULT_WALL_DENSITY = 0.25
#: Draws tried before generation gives up with a ValueError.
MAX_ATTEMPTS = 2000
_TURN_PROBABILITY = 0.35  # the carving walk changes direction with this probability
_RENDERS = ("grid", "compact")
_INSTRUCTIONS = {
    "grid": (
        "Sokoban: push every box onto a target. Symbols: # wall, _ floor, . target, "
        "$ box, * box on target, @ you, + you on a target. You push a box by walking into "
        "it; you cannot pull. Answer with one action: up, down, left or right."
    ),
    "compact": "push the box onto the goal",
}
_KINDS = ("wall", "box", "free")
# the compact render's neighbour cells: name -> (row, column) offset
_NEIGHBOURS: dict[str, Cell] = {
    **{action[0]: delta for action, delta in DELTAS.items()},
    "ul": (-1, -1),
    "ur": (-1, 1),
    "dl": (1, -1),
    "dr": (1, 1),
}


# -- generation ------------------------------------------------------------------------------


def generate_room(
    size: int | tuple[int, int] = 6,
    num_boxes: int = 1,
    walls: bool | float = True,
    min_solution: int = 1,
    max_solution: int = 15,
    seed: int = 0,
) -> Room:
    """The room of ``seed``: solvable, optimal length in ``[min_solution, max_solution]``.

    Deterministic in (options, seed) and cached. Raises ValueError when ``MAX_ATTEMPTS``
    draws produce no such room (options that make generation impossible or very rare).
    """
    height, width = _parse_size(size)
    density = _parse_walls(walls)
    _check_counts(height, width, num_boxes, density)
    _check_bounds(min_solution, max_solution, None)
    return _generate_cached(height, width, num_boxes, density, min_solution, max_solution, seed)


@lru_cache(maxsize=65536)
def _generate_cached(
    height: int, width: int, num_boxes: int, density: float, lo: int, hi: int, seed: int
) -> Room:
    rng = np.random.default_rng(seed)
    n_floor = _floor_count(height, width, density)
    for _ in range(MAX_ATTEMPTS):
        floor = _carve(rng, height, width, n_floor)
        room = _place(rng, height, width, floor, num_boxes)
        if room is None:
            continue
        plan = solve(room, max_moves=hi)
        if plan is not None and len(plan) >= lo:
            return room
    raise ValueError(
        f"no {height}x{width} room with {num_boxes} box(es), wall density {density} and an "
        f"optimal solution of {lo}..{hi} moves after {MAX_ATTEMPTS} draws (seed {seed}); "
        "widen min_solution/max_solution, use fewer boxes or a larger room"
    )


def _floor_count(height: int, width: int, density: float) -> int:
    interior = (height - 2) * (width - 2)
    return interior - round(density * interior)


def _carve(rng: np.random.Generator, height: int, width: int, n_floor: int) -> list[Cell]:
    """Floor cells dug by a direction-persistent random walk inside the outer wall."""
    interior = (height - 2) * (width - 2)
    if n_floor >= interior:
        return [(r, c) for r in range(1, height - 1) for c in range(1, width - 1)]
    pos = (int(rng.integers(1, height - 1)), int(rng.integers(1, width - 1)))
    dug, d = {pos}, int(rng.integers(4))
    for _ in range(64):  # chunks of draws; the walk almost surely ends in the first
        turns, dirs = rng.random(4 * interior).tolist(), rng.integers(4, size=4 * interior)
        for turn, new_d in zip(turns, dirs.tolist(), strict=True):
            if len(dug) >= n_floor:
                return sorted(dug)
            if turn < _TURN_PROBABILITY:
                d = new_d
            dr, dc = DELTAS[ACTIONS[d]]
            nxt = (pos[0] + dr, pos[1] + dc)
            if 1 <= nxt[0] < height - 1 and 1 <= nxt[1] < width - 1:
                pos = nxt
                dug.add(pos)
            else:
                d = new_d  # bounce off the outer wall
    return sorted(dug)


def _place(
    rng: np.random.Generator, height: int, width: int, floor: list[Cell], num_boxes: int
) -> Room | None:
    """Targets, boxes and player on random floor cells (a box may start on a target)."""
    if len(floor) < num_boxes + 2:
        return None
    targets = [floor[i] for i in rng.permutation(len(floor))[:num_boxes].tolist()]
    picks = rng.permutation(len(floor))[: num_boxes + 1].tolist()
    boxes, player = [floor[i] for i in picks[:-1]], floor[picks[-1]]
    if set(boxes) == set(targets):
        return None
    walls = frozenset((r, c) for r in range(height) for c in range(width)) - set(floor)
    return Room(height, width, walls, frozenset(targets), frozenset(boxes), player)


# -- option checks ------------------------------------------------------------------------------


def _parse_size(size: Any) -> tuple[int, int]:
    dims = (size, size) if isinstance(size, int | np.integer) else tuple(size)
    if len(dims) != 2 or not all(isinstance(d, int | np.integer) and d >= 3 for d in dims):
        raise ValueError(f"size must be an int >= 3 or (height, width) of ints >= 3, got {size!r}")
    return int(dims[0]), int(dims[1])


def _parse_walls(walls: Any) -> float:
    if isinstance(walls, bool):
        return DEFAULT_WALL_DENSITY if walls else 0.0
    if isinstance(walls, int | float) and 0.0 <= walls < 1.0:
        return float(walls)
    raise ValueError(
        f"walls must be a bool (True: density {DEFAULT_WALL_DENSITY}) or the fraction of the "
        f"interior left as wall, a float in [0, 1), got {walls!r}"
    )


def _check_counts(height: int, width: int, num_boxes: int, density: float) -> None:
    _check_int("num_boxes", num_boxes, 1)
    n_floor = _floor_count(height, width, density)
    if n_floor < num_boxes + 2:
        raise ValueError(
            f"a {height}x{width} room with wall density {density} has {n_floor} floor cells, "
            f"too few for {num_boxes} box(es) and a player to move (needs >= {num_boxes + 2})"
        )


def _check_int(name: str, value: Any, low: int, low_name: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name} must be an int >= {low_name or low}, got {value!r}")


def _check_bounds(min_solution: Any, max_solution: Any, max_steps: int | None) -> None:
    _check_int("min_solution", min_solution, 1)
    _check_int("max_solution", max_solution, min_solution, f"min_solution ({min_solution})")
    if max_steps is not None and max_solution > max_steps:
        raise ValueError(
            f"max_solution ({max_solution}) exceeds max_steps ({max_steps}): such rooms could "
            "not be solved within an episode"
        )


# -- compact rendering ---------------------------------------------------------------------------


def render_compact(room: Room) -> str:
    """A fixed-length sentence of ``8 + 12 * num_boxes`` words for tiny models.

    ``pu:K pd:K pl:K pr:K pul:K pur:K pdl:K pdr:K`` say what lies in the player's eight
    neighbour cells (up, down, left, right, then the diagonals; K in wall, box, free);
    then per box, in row-major order of the boxes: ``r+1 c-2`` the box's offset from the
    player, ``tr-1 tc+0`` the offset from the box to the nearest target not holding another
    box (``tr+0 tc+0``: the box is on a target), and ``bu:K ... bdr:K`` the box's eight
    neighbours (the player's cell counts as free).

    Example, player at (2, 2), box at (2, 3), target at (1, 3)::

        # # # # # #
        # # _ . # #
        # _ @ $ _ #     pu:free pd:free pl:free pr:box pul:wall pur:free pdl:wall pdr:free
        # # _ _ # #     r+0 c+1 tr-1 tc+0 bu:free bd:free bl:free br:free bul:free bur:wall
        # _ _ _ _ #     bdl:free bdr:wall
        # # # # # #
    """
    words = _neighbour_words(room, room.player, "p")
    occupied = room.boxes & room.targets
    for box in sorted(room.boxes):
        words += [_offset("r", box[0] - room.player[0]), _offset("c", box[1] - room.player[1])]
        target = _nearest_target(box, room.targets - (occupied - {box}))
        words += [_offset("tr", target[0] - box[0]), _offset("tc", target[1] - box[1])]
        words += _neighbour_words(room, box, "b")
    return " ".join(words)


def _neighbour_words(room: Room, cell: Cell, prefix: str) -> list[str]:
    words = []
    for side, (dr, dc) in _NEIGHBOURS.items():
        n = (cell[0] + dr, cell[1] + dc)
        blocked = n in room.walls or not room.inside(n)
        kind = "wall" if blocked else "box" if n in room.boxes else "free"
        words.append(f"{prefix}{side}:{kind}")
    return words


def _nearest_target(box: Cell, targets: frozenset[Cell]) -> Cell:
    return min(targets, key=lambda t: (abs(t[0] - box[0]) + abs(t[1] - box[1]), t))


def _offset(name: str, k: int) -> str:
    return f"{name}{k:+d}"


def compact_vocabulary(height: int, width: int) -> list[str]:
    """Every word ``render_compact`` can produce for a room of this size."""
    words = [f"{p}{side}:{k}" for p in "pb" for side in _NEIGHBOURS for k in _KINDS]
    for name, span in (("r", height), ("c", width), ("tr", height), ("tc", width)):
        words += [_offset(name, k) for k in range(-(span - 1), span)]
    return words


# -- the env ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SokobanSnapshot:
    """A cheap copy of the env's state (the room is immutable, so it is shared)."""

    seed: int | None
    actions: tuple[str, ...]
    room: Room
    steps: int
    done: bool
    info: dict[str, Any]


class Sokoban(TextEnv):
    """Sokoban with text observations; see the module docstring for rules and options.

    Options: ``size`` (int or (height, width), outer wall included), ``num_boxes``,
    ``max_steps`` (turns before truncation), ``render`` ("grid" or "compact"), ``walls``
    (True: irregular rooms with interior walls, False: open rectangles, or a float
    density in [0, 1)), ``min_solution`` / ``max_solution`` (bounds on the optimal
    solution length in moves, default 1 and ``max_steps``), ``instruction`` (prompt text;
    default depends on ``render``), ``room`` (a fixed room as grid text, e.g. for tests;
    then the seed and the generation options are ignored).
    """

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
    ) -> None:
        super().__init__()
        _check_int("max_steps", max_steps, 1)
        if render not in _RENDERS:
            raise ValueError(f"render must be one of {', '.join(_RENDERS)}, got {render!r}")
        self.max_steps, self.render = max_steps, render
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
        self._room: Room | None = None
        self._steps, self._done = 0, False
        self._info: dict[str, Any] = {}
        self._seeds = np.random.default_rng()

    @staticmethod
    def _parse_fixed_room(room: str | None) -> Room | None:
        if room is None:
            return None
        if not isinstance(room, str):
            raise ValueError(f"room must be grid text or None, got {type(room).__name__}")
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
        return self._steps

    @property
    def remaining_steps(self) -> int:
        return self.max_steps - self._steps

    def solve(self, max_moves: int | None = None) -> list[str] | None:
        """An optimal action sequence from the current state, or None if there is none
        within ``max_moves`` moves (pass ``env.remaining_steps`` to ask "still winnable?")."""
        return solve(self.room, max_moves)

    # -- TextEnv ------------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if options:
            raise ValueError(f"Sokoban.reset takes no options, got {sorted(options)}")
        if seed is None:  # draw one and record it, so the replay fallback is exact too
            seed = int(self._seeds.integers(2**63 - 1))
            self._seed = seed
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        if self.fixed_room is not None:
            self._room = self.fixed_room
        else:
            options = (self.height, self.width, self.num_boxes, self.wall_density)
            bounds = (self.min_solution, self.max_solution)
            self._room = _generate_cached(*options, *bounds, int(seed))
        self._steps, self._done = 0, False
        return self._observe(valid=True, moved=False)

    def step(self, action: str) -> StepResult:
        if self._room is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError(
                f"the episode has ended (after {self._steps} steps); call reset() to start again"
            )
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
        self._steps += 1
        terminated = self.room.solved
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        obs, info = self._observe(valid=valid, moved=moved)
        return obs, reward, terminated, truncated, info

    def _observe(self, valid: bool, moved: bool) -> tuple[str, dict[str, Any]]:
        room = self.room
        anchor = render_grid(room)
        self._info = {
            "anchor": anchor,
            "valid": valid,
            "success": room.solved,
            "admissible": list(ACTIONS),
            "boxes_on_target": room.boxes_on_target,
            "num_boxes": len(room.boxes),
            "steps": self._steps,
            "moved": moved,
        }
        obs = anchor if self.render == "grid" else render_compact(room)
        return obs, dict(self._info, admissible=list(ACTIONS))

    # -- branching ----------------------------------------------------------------------------
    def snapshot(self) -> SokobanSnapshot:
        info = dict(self._info, admissible=list(ACTIONS))
        actions = tuple(self._actions)
        return SokobanSnapshot(self._seed, actions, self.room, self._steps, self._done, info)

    def restore(self, snap: Any) -> tuple[str, dict[str, Any]]:
        if isinstance(snap, ReplaySnapshot):
            return super().restore(snap)
        if not isinstance(snap, SokobanSnapshot):
            raise TypeError(f"Sokoban cannot restore a {type(snap).__name__}")
        self._seed, self._actions = snap.seed, list(snap.actions)
        self._room, self._steps, self._done = snap.room, snap.steps, snap.done
        self._info = dict(snap.info)
        obs = self._info["anchor"] if self.render == "grid" else render_compact(snap.room)
        return obs, dict(self._info, admissible=list(ACTIONS))

    # -- tokenizer ------------------------------------------------------------------------------
    def vocabulary(self) -> list[str]:
        """Grid symbols, compact words for this room size, the actions, the instruction."""
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
