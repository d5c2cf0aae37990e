"""Sokoban room generation: always solvable rooms from the seed alone, and option checks.

A random walk carves the floor out of solid wall (so the floor is connected, with
irregular interior walls), targets, boxes and the player are dropped on random floor
cells, and the draw is kept only when the breadth-first solver (``solver.solve``) finds an
optimal solution whose length in moves lies in ``[min_solution, max_solution]``. Generated
rooms are cached by (options, seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from cairn.envs._common import check_int
from cairn.envs.sokoban.solver import ACTIONS, DELTAS, Cell, Room, solve

__all__ = ["DEFAULT_WALL_DENSITY", "MAX_ATTEMPTS", "generate_room"]

#: Fraction of the interior left as wall when ``walls=True``.
DEFAULT_WALL_DENSITY = 0.25
#: Draws tried before generation gives up with a ValueError.
MAX_ATTEMPTS = 2000
_TURN_PROBABILITY = 0.35  # the carving walk changes direction with this probability


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


MAX_SIZE = 32  # rows and columns of a generated room at most (frozenlake's map_size too)


def _parse_size(size: int | Sequence[int]) -> tuple[int, int]:
    dims = (size, size) if isinstance(size, int | np.integer) else tuple(size)
    ok = (
        len(dims) == 2
        and all(isinstance(d, int | np.integer) and not isinstance(d, bool) for d in dims)
        and all(3 <= d <= MAX_SIZE for d in dims)
    )
    if not ok:
        raise ValueError(
            f"size must be an int >= 3 (at most {MAX_SIZE}) or (height, width) of such ints, "
            f"got {size!r}"
        )
    return int(dims[0]), int(dims[1])


def _parse_walls(walls: bool | float) -> float:
    if isinstance(walls, bool):
        return DEFAULT_WALL_DENSITY if walls else 0.0
    if isinstance(walls, int | float) and 0.0 <= walls < 1.0:
        return float(walls)
    raise ValueError(
        f"walls must be a bool (True: density {DEFAULT_WALL_DENSITY}) or the fraction of the "
        f"interior left as wall, a float in [0, 1), got {walls!r}"
    )


def _check_counts(height: int, width: int, num_boxes: int, density: float) -> None:
    check_int("num_boxes", num_boxes, 1)
    n_floor = _floor_count(height, width, density)
    if n_floor < num_boxes + 2:
        raise ValueError(
            f"a {height}x{width} room with wall density {density} has {n_floor} floor cells, "
            f"too few for {num_boxes} box(es) and a player to move (needs >= {num_boxes + 2})"
        )


def _check_bounds(min_solution: int, max_solution: int, max_steps: int | None) -> None:
    check_int("min_solution", min_solution, 1)
    check_int("max_solution", max_solution, 1)
    if max_solution < min_solution:
        raise ValueError(
            f"max_solution must be an int >= min_solution ({min_solution}), got {max_solution}"
        )
    if max_steps is not None and max_solution > max_steps:
        raise ValueError(
            f"max_solution ({max_solution}) exceeds max_steps ({max_steps}): such rooms could "
            "not be solved within an episode"
        )
