"""FrozenLake as text: Gymnasium's ``FrozenLakeEnv`` behind the cairn env contract.

The agent walks from S to G on a grid of frozen cells (F) and holes (H); stepping into a
hole ends the episode with failure. Dynamics, slipperiness and map generation are
Gymnasium's (``gymnasium.envs.toy_text.frozen_lake``; Gymnasium: arXiv 2407.17032); this
module renders the state as text and parses the four action words ``left down right up``.

Renderings (``render=``):
- ``"grid"``: one line per map row, cells separated by spaces, the agent shown as ``A``::

      A F F F
      F H F H
      F F F H
      H F F G

- ``"compact"`` (for tiny models): position, the four neighbouring cells (``wall`` past the
  edge) and the goal offset, e.g. ``pos 0 0 left wall down F right F up wall goal 3 down
  3 right``.

``info["anchor"]`` is always the grid text (map + position), so two states share an anchor
exactly when they are the same state, whatever the rendering.

Branching: ``snapshot`` copies the position, the map and Gymnasium's RNG state, so slippery
futures after ``restore`` are the same as after the base class's replay of the actions
from the reset seed (``reset(seed=None)`` draws a seed and records it for that replay).
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import MAPS, FrozenLakeEnv, generate_random_map

from cairn.envs._common import (
    EpisodeClock,
    check_bool,
    check_choice,
    check_float,
    check_int,
    fresh_seed,
)
from cairn.envs.base import ReplaySnapshot, StepResult, TextEnv

__all__ = ["ACTIONS", "FrozenLake", "FrozenLakeSnapshot"]

#: Action words in Gymnasium's action-index order (0 left, 1 down, 2 right, 3 up).
ACTIONS: tuple[str, ...] = ("left", "down", "right", "up")
_MOVES = {"left": (0, -1), "down": (1, 0), "right": (0, 1), "up": (-1, 0)}
_MAP_NAMES = ("4x4", "8x8", "random")
_RENDERS = ("grid", "compact")

_INSTRUCTION = (
    "You are on a frozen lake drawn as a grid: S is the start, F is frozen ice (safe), "
    "H is a hole (stepping into it ends the episode), G is the goal and A is you. "
    "Reach G without stepping into a hole. Answer with one action: left, down, right or up."
)
_COMPACT_NOTE = (
    " The observation gives your position (row, column), the cell on each side of you "
    "(wall past the edge of the map) and how many rows and columns away the goal is."
)
_SLIPPERY_NOTE = " The ice is slippery: you may slide sideways instead of where you chose."


@dataclass(frozen=True)
class FrozenLakeSnapshot:
    """A cheap copy of the full state: map, position, Gymnasium's RNG and the step count."""

    base: ReplaySnapshot
    desc: tuple[str, ...]
    position: int
    last_action: int | None
    rng_state: dict[str, Any]
    clock: tuple[int, bool, bool]
    obs: str
    info: dict[str, Any]


class FrozenLake(TextEnv):
    """Gymnasium FrozenLake with text observations.

    Options:
        map_name: ``"4x4"`` or ``"8x8"`` (Gymnasium's fixed maps) or ``"random"`` (a new
            solvable map per reset seed, ``generate_random_map(map_size, frozen_prob, seed)``).
        map_size: side of random maps, 2..32.
        frozen_prob: probability that a random-map cell is frozen, (0, 1].
        is_slippery: Gymnasium's slippery dynamics (intended move with probability 1/3).
        render: ``"grid"`` or ``"compact"``.
        step_cost: subtracted from the reward of every valid step (reward 1 at the goal).
        max_steps: steps before truncation.
    """

    example_action = "down"

    def __init__(
        self,
        map_name: str = "4x4",
        map_size: int = 8,
        frozen_prob: float = 0.8,
        is_slippery: bool = False,
        render: str = "grid",
        step_cost: float = 0.0,
        max_steps: int = 100,
    ) -> None:
        super().__init__()
        self.map_name = check_choice("map_name", map_name, _MAP_NAMES)
        self.map_size = check_int("map_size", map_size, 2, 32)
        self.frozen_prob = check_float("frozen_prob", frozen_prob, 1e-9, 1.0)
        self.is_slippery = check_bool("is_slippery", is_slippery)
        self.render = check_choice("render", render, _RENDERS)
        self.step_cost = check_float("step_cost", step_cost, 0.0, 1.0)
        self._clock = EpisodeClock("frozenlake", max_steps)
        self.instruction = (
            _INSTRUCTION
            + (_COMPACT_NOTE if render == "compact" else "")
            + (_SLIPPERY_NOTE if is_slippery else "")
        )
        self._gym: FrozenLakeEnv | None = None
        self._desc: tuple[str, ...] = ()
        self._last: tuple[str, dict[str, Any]] = ("", {})

    # -- episode -----------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict[str, object]) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed = self._seed = fresh_seed()
        if self.map_name == "random":
            desc = generate_random_map(size=self.map_size, p=self.frozen_prob, seed=seed)
        else:
            desc = MAPS[self.map_name]
        self._load_map(tuple(desc))
        assert self._gym is not None
        self._gym.reset(seed=seed)
        self._clock.start()
        self._last = (self._observe(), self._info(valid=True))
        return self._last[0], dict(self._last[1])

    def _step(self, action: str) -> StepResult:
        truncated = self._clock.tick()
        word = action.strip().lower()
        if word not in _MOVES:
            return self._end_step(0.0, False, truncated, valid=False)
        assert self._gym is not None
        _, _, terminated, _, _ = self._gym.step(ACTIONS.index(word))
        reached = self._cell(self._gym.s) == "G"
        reward = (1.0 if reached else 0.0) - self.step_cost
        return self._end_step(reward, bool(terminated), truncated and not terminated, valid=True)

    def _end_step(self, reward: float, term: bool, trunc: bool, valid: bool) -> StepResult:
        self._clock.done = term or trunc
        self._last = (self._observe(), self._info(valid=valid))
        return self._last[0], reward, term, trunc, dict(self._last[1])

    def gold_action(self) -> str | None:
        """The first move of a shortest hole-free path to G (ties: ``ACTIONS`` order), or
        None when the episode is over or no such path exists. On slippery ice it is the
        move to intend, not a promise of where the agent lands."""
        if self._gym is None or not self._clock.started or self._clock.done:
            return None
        path = _shortest_path(self._desc, divmod(int(self._gym.s), len(self._desc[0])))
        return path[0] if path else None

    # -- branching: copy the Gymnasium state instead of replaying ------------------------
    def snapshot(self) -> FrozenLakeSnapshot:
        gym = self._require_gym()
        return FrozenLakeSnapshot(
            base=super().snapshot(),
            desc=self._desc,
            position=int(gym.s),
            last_action=gym.lastaction,
            rng_state=copy.deepcopy(dict(gym.np_random.bit_generator.state)),
            clock=self._clock.state(),
            obs=self._last[0],
            info=copy.deepcopy(self._last[1]),
        )

    def restore(self, snap: object) -> tuple[str, dict[str, Any]]:
        if isinstance(snap, ReplaySnapshot):
            return super().restore(snap)
        if not isinstance(snap, FrozenLakeSnapshot):
            raise TypeError(f"FrozenLake cannot restore a {type(snap).__name__}")
        self._load_map(snap.desc)
        gym = self._require_gym()
        gym.s, gym.lastaction = snap.position, snap.last_action
        gym.np_random.bit_generator.state = copy.deepcopy(snap.rng_state)
        self._clock.set_state(snap.clock)
        self._seed, self._actions = snap.base.seed, list(snap.base.actions)
        self._last = (snap.obs, copy.deepcopy(snap.info))
        return snap.obs, copy.deepcopy(snap.info)

    # -- text -------------------------------------------------------------------------------
    def vocabulary(self) -> list[str]:
        side = self.map_size if self.map_name == "random" else int(self.map_name[0])
        words = {"S", "F", "H", "G", "A", "pos", "goal", "here", "wall", *ACTIONS}
        words.update(str(i) for i in range(side))
        return sorted(words)

    def grid_text(self) -> str:
        """The map with the agent as ``A``, one line per row (the anchor)."""
        gym = self._require_gym()
        rows = [list(row) for row in self._desc]
        row, col = divmod(int(gym.s), gym.ncol)
        rows[row][col] = "A"
        return "\n".join(" ".join(cells) for cells in rows)

    def compact_text(self) -> str:
        """Position, neighbouring cells and goal offset as a few words."""
        gym = self._require_gym()
        row, col = divmod(int(gym.s), gym.ncol)
        words = ["pos", str(row), str(col)]
        for name, (dr, dc) in _MOVES.items():
            r, c = row + dr, col + dc
            inside = 0 <= r < gym.nrow and 0 <= c < gym.ncol
            words += [name, self._desc[r][c] if inside else "wall"]
        goal_row, goal_col = self._goal
        return " ".join([*words, "goal", _offset_words(goal_row - row, goal_col - col)])

    # -- helpers ------------------------------------------------------------------------------
    def _load_map(self, desc: tuple[str, ...]) -> None:
        if self._gym is None or desc != self._desc:
            self._gym = FrozenLakeEnv(desc=list(desc), is_slippery=self.is_slippery)
            self._desc = desc
            flat = "".join(desc)
            self._goal = divmod(flat.index("G"), len(desc[0]))

    def _require_gym(self) -> FrozenLakeEnv:
        if self._gym is None or not self._clock.started:
            raise RuntimeError("frozenlake: call reset() first")
        return self._gym

    def _cell(self, state: int) -> str:
        row, col = divmod(int(state), len(self._desc[0]))
        return self._desc[row][col]

    def _observe(self) -> str:
        return self.grid_text() if self.render == "grid" else self.compact_text()

    def _info(self, valid: bool) -> dict[str, Any]:
        gym = self._require_gym()
        row, col = divmod(int(gym.s), gym.ncol)
        return {
            "anchor": self.grid_text(),
            "valid": valid,
            "success": self._clock.done and self._cell(gym.s) == "G",
            "admissible": list(ACTIONS),
            "position": (row, col),
            "steps": self._clock.steps,
        }


def _shortest_path(desc: tuple[str, ...], start: tuple[int, int]) -> list[str] | None:
    """Breadth-first moves from ``start`` to G over cells that are not holes."""
    rows, cols = len(desc), len(desc[0])
    parent: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if desc[cell[0]][cell[1]] == "G":
            moves: list[str] = []
            while (step := parent[cell]) is not None:
                cell, move = step[0], step[1]
                moves.append(move)
            return moves[::-1]
        for move in ACTIONS:
            dr, dc = _MOVES[move]
            nxt = (cell[0] + dr, cell[1] + dc)
            inside = 0 <= nxt[0] < rows and 0 <= nxt[1] < cols
            if inside and nxt not in parent and desc[nxt[0]][nxt[1]] != "H":
                parent[nxt] = (cell, move)
                queue.append(nxt)
    return None


def _offset_words(d_row: int, d_col: int) -> str:
    """``'2 down 1 right'``-style words for a (row, column) offset; ``'here'`` when zero."""
    parts = []
    if d_row:
        parts += [str(abs(d_row)), "down" if d_row > 0 else "up"]
    if d_col:
        parts += [str(abs(d_col)), "right" if d_col > 0 else "left"]
    return " ".join(parts) if parts else "here"
