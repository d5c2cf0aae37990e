"""The built-in Sokoban env: procedurally generated, always solvable rooms as text.

Rules and rewards follow gym-sokoban (Schrader 2018), the Sokoban setting of GiGPO
(arXiv 2505.10978, Sec. 5: "6x6 rooms with walls, 1 box, 15 steps"): each step costs
-0.1, pushing a box onto a target gives +1, off a target -1, and putting the last box on
its target adds +10 and ends the episode. Moving into a wall or pushing a box into a wall
or another box is a valid move that changes nothing.

Rooms come from the seed alone: a random walk carves the floor out of solid wall (so the
floor is connected, with irregular interior walls), targets, boxes and the player are
dropped on random floor cells, and the draw is kept only when the breadth-first solver
(``cairn.envs.sokoban.solver``) finds an optimal solution whose length in moves lies in
``[min_solution, max_solution]``. Generated rooms are cached by (options, seed).

Three renderings (``render=``):
- ``"grid"``: rows of space-separated symbols, ``# _ . $ * @ +`` (wall, floor, target,
  box, box on target, player, player on target);
- ``"text"``: for language models, the grid with numbered rows, with the legend and the
  coordinates in the instruction (see ``render_text``);
- ``"compact"``: a short fixed-length sentence of closed-vocabulary words for tiny models
  (see ``render_compact``). ``info["anchor"]`` is always the grid text.

Modules: ``generate`` (rooms from seeds, option checks), ``render`` (the compact sentence),
``env`` (rules, rewards, the ``Sokoban`` env), ``solver`` (rooms as data, the grid text,
the optimal solver).
"""

from cairn.envs.sokoban.env import (
    BOX_OFF_TARGET,
    BOX_ON_TARGET,
    FINISHED,
    STEP_COST,
    Sokoban,
    SokobanSnapshot,
    apply_action,
)
from cairn.envs.sokoban.generate import DEFAULT_WALL_DENSITY, generate_room
from cairn.envs.sokoban.render import compact_vocabulary, render_compact, render_text

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
    "render_text",
]
