"""``tree``: TreePO's segment-wise tree sampling (Li et al., arXiv 2508.17445, Sec. 3.1).

Mechanics, for agent envs (branching at turn boundaries). Per task instance (group) with a
leaf budget ``n = group_size``:

1. ``roots`` independent paths start from the reset state.
2. Every live path plays a segment of ``segment_turns`` turns (all paths of all groups in
   lock-step, one batched ``generate`` per turn).
3. At the segment's end a path that ended (success, failure, truncation: the final answer)
   is a leaf. Each live path is *split*: it continues as one child and ``width - 1`` more
   children copy its steps and restore its env state into a free env. A split adds leaves,
   so the group's paths never exceed ``n``: the free slots ``n - paths`` are dealt one at a
   time to the live paths in a random order (round robin, at most ``width - 1`` each).
4. Early stop: after ``max_depth`` splits (segment ends) no path splits any more (each
   plays to its end). A path whose segment went round in a circle (it ends in the state,
   by anchor, that it started the segment in: a repetition) is not split
   (``repeat="no_branch"``, default), is cut there (``"truncate"``: the episode ends,
   truncated, unsuccessful) or is treated like any other (``"ignore"``). Revisiting any
   earlier state would be a stricter rule, but a random policy bumps into walls so often
   that almost no path would split.
5. If every path ended while the group still holds fewer than ``n`` leaves, the missing
   leaves are filled: ``fill="branch"`` (default) branches them from the group's recorded
   segment boundaries, latest first (round robin over the paths), so they still share a
   prefix; ``"root"`` samples them as new independent episodes (new root ids); ``"none"``
   leaves the group short.

The budget goes to paths still running: a path that ends early (often a quick success)
keeps one leaf while the live ones split, so the leaves' success rate is below that of
independent samples of the same policy (``benchmarks/results/speed/tree_sampling.md``).

A child never recomputes its copied prefix (prefix sharing): only the turns after the split
cost model tokens, which ``policy.forward_tokens`` counts (``benchmarks/speed/tree_sampling.py``
compares against independent sampling). Every leaf is a complete episode whose rows carry
the ``path`` of the node that generated them (``cairn.rollout.branching``), the input of
the ``treepo`` estimator (and of ``arpo``/``elpo``, which read the same representation).

Single-turn text tasks (TreePO's own setting: 512-token segments inside one response) are
not covered: a token-segment split needs ``generate`` to continue a partial completion
under the same constraints (stop strings, restricted choices) and the env to score one
step whose action spans several segments; that waits for a text-task preset. With one
turn per episode this strategy degenerates to independent sampling: every root ends in
its first segment and the fills are further samples from the reset state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from cairn.data.episode import Episode
from cairn.rollout.branching import Forest, Path

if TYPE_CHECKING:
    from cairn.rollout import RolloutContext

__all__ = ["TreeStrategy"]

_REPEAT = ("no_branch", "truncate", "ignore")
_FILL = ("branch", "root", "none")


def _positive_int(name: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"tree option {name} must be an int >= {low}, got {value!r}")
    return value


class TreeStrategy:
    """``tree``: TreePO segment-wise tree sampling; see the module docstring.

    Options: ``width`` (children per split, >= 2), ``segment_turns`` (turns per segment),
    ``roots`` (independent paths per task at the start, <= group_size), ``max_depth``
    (most splits on a root-to-leaf path; None: only the leaf budget limits it),
    ``repeat`` (what a segment that ends where it started does: "no_branch", "truncate",
    "ignore"), ``fill`` (where missing leaves come from when paths end early: "branch",
    "root", "none").
    """

    def __init__(
        self,
        width: int = 2,
        segment_turns: int = 3,
        roots: int = 1,
        max_depth: int | None = None,
        repeat: str = "no_branch",
        fill: str = "branch",
    ):
        self.width = _positive_int("width", width, 2)
        self.segment_turns = _positive_int("segment_turns", segment_turns)
        self.roots = _positive_int("roots", roots)
        self.max_depth = None if max_depth is None else _positive_int("max_depth", max_depth)
        if repeat not in _REPEAT:
            raise ValueError(f"tree option repeat must be one of {_REPEAT}, got {repeat!r}")
        self.repeat = repeat
        if fill not in _FILL:
            raise ValueError(f"tree option fill must be one of {_FILL}, got {fill!r}")
        self.fill = fill

    def collect(self, ctx: RolloutContext, seeds: Sequence[int], group_size: int) -> list[Episode]:
        if self.roots > group_size:
            raise ValueError(f"tree: roots ({self.roots}) exceeds group_size ({group_size})")
        forest = Forest(ctx)
        groups = [
            [forest.root(g, int(seed)) for _ in range(self.roots)] for g, seed in enumerate(seeds)
        ]
        live = [p for paths in groups for p in paths]
        depth = 0
        while live:
            live = forest.record_snapshots(live)  # segment boundaries: fill branches start there
            starts = {id(p): _anchor(p) for p in live}
            forest.play(live, self.segment_turns)
            depth += 1
            looped = {id(p) for p in live if not p.done and _anchor(p) == starts[id(p)]}
            self._cut_repeats(forest, live, looped)
            if self.max_depth is None or depth <= self.max_depth:
                for paths in groups:
                    paths += self._split(forest, paths, group_size, looped, ctx.generator)
            live = [p for paths in groups for p in paths if not p.done and p.env is not None]
        extra = []
        for g, seed in enumerate(seeds):
            missing = group_size - len(groups[g])
            if self.fill == "root":
                extra += [forest.root(g, int(seed)) for _ in range(missing)]
            elif self.fill == "branch":
                extra += _fill_branches(forest, groups[g], missing)
        forest.play(extra)
        forest.close()
        return forest.episodes()

    def _cut_repeats(self, forest: Forest, live: list[Path], looped: set[int]) -> None:
        if self.repeat != "truncate":
            return
        for p in live:
            if id(p) in looped:
                p.episode.truncated = True
                forest.release(p)

    def _split(
        self,
        forest: Forest,
        paths: list[Path],
        n: int,
        looped: set[int],
        generator: torch.Generator | None,
    ) -> list[Path]:
        """New children of the group's live paths, within the leaf budget ``n``."""
        skip = looped if self.repeat != "ignore" else set()
        able = [p for p in paths if not p.done and p.env is not None and id(p) not in skip]
        free = n - len(paths)
        if not able or free <= 0:
            return []
        able = forest.record_snapshots(able)  # the split point (a failed one ends its path)
        order = [able[i] for i in torch.randperm(len(able), generator=generator).tolist()]
        counts = [0] * len(order)
        while free > 0 and any(c < self.width - 1 for c in counts):
            for i in range(len(order)):
                if free > 0 and counts[i] < self.width - 1:
                    counts[i] += 1
                    free -= 1
        return [forest.branch(p) for p, c in zip(order, counts, strict=True) for _ in range(c)]


def _fill_branches(forest: Forest, paths: list[Path], missing: int) -> list[Path]:
    """``missing`` branches from the paths' segment boundaries, latest boundary first."""
    points = sorted(
        ((t, i) for i, p in enumerate(paths) for t in p.snaps if p.t0 <= t < p.t),
        key=lambda x: (-x[0], x[1]),
    )
    if not points:
        return []
    return [
        forest.branch(paths[i], t) for t, i in (points[j % len(points)] for j in range(missing))
    ]


def _anchor(path: Path) -> object:
    """The anchor of the path's current state."""
    obs, info = path.state
    return info.get("anchor", obs)
