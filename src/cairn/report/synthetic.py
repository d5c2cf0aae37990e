"""A synthetic run directory, written through the real code paths: the report tests'
fixture and benchmarks/report/report_size.py's runs (one builder for both).

Nothing is trained: a toy grid walk (agent, goal, walls at the border) stands in for the
env and a policy whose pull toward the goal grows with the iteration stands in for
learning. The episodes go through `to_step_batch`, the registered advantage estimator
(`estimate_terms`), `to_records` and `RunLog.trajectories`, so the dumps have exactly the
form a real run writes. Options add what the trainer does not write yet: rollout trees
(``trees``: per-step ``path`` and ELPO's ``crit``), demonstrations (``demos``: one
``source = 1`` episode per group) and memory tips (``tips``: ``source = 2`` episodes whose
steps carry a ``tips`` list).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cairn.advantages import estimate_terms
from cairn.data.episode import Episode, Step, to_records, to_step_batch
from cairn.train.runlog import RunLog
from cairn.train.schema import Config

__all__ = ["write_synthetic_run"]

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
SIZE, MAX_TURNS = 5, 12


@dataclass
class _Task:
    start: tuple[int, int]
    goal: tuple[int, int]

    def render(self, pos: tuple[int, int]) -> str:
        rows = []
        for r in range(-1, SIZE + 1):
            cells = []
            for c in range(-1, SIZE + 1):
                inside = 0 <= r < SIZE and 0 <= c < SIZE
                cells.append(
                    "#"
                    if not inside
                    else "@"
                    if (r, c) == pos
                    else "."
                    if (r, c) == self.goal
                    else "_"
                )
            rows.append(" ".join(cells))
        return "\n".join(rows)

    def describe(self, pos: tuple[int, int]) -> str:
        dr, dc = self.goal[0] - pos[0], self.goal[1] - pos[1]
        return f"agent at row {pos[0]} col {pos[1]}; goal {dr:+d} rows {dc:+d} cols away"


def _move(pos: tuple[int, int], action: str) -> tuple[int, int]:
    dr, dc = MOVES[action]
    return (min(SIZE - 1, max(0, pos[0] + dr)), min(SIZE - 1, max(0, pos[1] + dc)))


def _choose(rng: np.random.Generator, task: _Task, pos: tuple[int, int], pull: float) -> str:
    good = [
        a
        for a, (dr, dc) in MOVES.items()
        if _dist(_move(pos, a), task.goal) < _dist(pos, task.goal)
    ]
    if good and rng.random() < pull:
        return str(rng.choice(good))
    return str(rng.choice(list(MOVES)))


def _dist(a: tuple[int, int], b: tuple[int, int]) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _walk(rng, task: _Task, pos, t0: int, pull: float, path=None, steps=None) -> list[Step]:
    """Continue from ``pos`` at turn ``t0`` until the goal or MAX_TURNS; per-step ``path``."""
    steps = list(steps or [])
    for t in range(t0, MAX_TURNS):
        action = _choose(rng, task, pos, pull)
        nxt = _move(pos, action)
        done = nxt == task.goal
        cols = {} if path is None else {"path": tuple(path)}
        steps.append(
            Step(
                t,
                task.describe(pos),
                task.render(pos),
                action,
                action,
                10.0 if done else -0.1,
                columns=cols,
            )
        )
        steps[-1].logprobs = [float(np.log(0.25 + 0.5 * pull * rng.random()))]
        pos = nxt
        if done:
            break
    return steps


def _positions(task: _Task, steps: list[Step]) -> list[tuple[int, int]]:
    pos, out = task.start, []
    for s in steps:
        out.append(pos)
        pos = _move(pos, s.action)
    return [*out, pos]


def _episode(eid: int, group: int, seed: int, task: _Task, steps: list[Step], **kw) -> Episode:
    success = bool(steps) and _positions(task, steps)[-1] == task.goal
    return Episode(eid, group, seed, steps, success, success, not success, **kw)


def _tree_group(rng, task: _Task, gid: int, seed: int, first: int, size: int, pull: float):
    """Up to ``size`` leaves of a random branching tree; rows carry their node's path.

    A leaf with path p branches at a turn b inside its own node (rows of path p): its rows
    from b on move to p + (0,), and a new leaf p + (1,) copies the rows before b and
    continues from the state at b.
    """
    leaves: list[tuple[tuple[int, ...], list[Step]]] = [
        ((), _walk(rng, task, task.start, 0, pull, path=()))
    ]
    for _ in range(8 * size):
        if len(leaves) >= size:
            break
        k = int(rng.integers(len(leaves)))
        path, steps = leaves[k]
        own = [s.t for s in steps if s.columns["path"] == path]
        if len(own) < 2:
            continue
        b = int(rng.integers(own[0] + 1, own[-1] + 1))
        moved = lambda s, b=b, p=path: (*p, 0) if s.t >= b else s.columns["path"]  # noqa: E731
        kept = [_copy(s, moved(s)) for s in steps]
        prefix = [_copy(s, s.columns["path"]) for s in steps if s.t < b]
        pos = _positions(task, steps)[b]
        leaves[k] = ((*path, 0), kept)
        leaves.append(((*path, 1), _walk(rng, task, pos, b, pull, (*path, 1), prefix)))
    eps = []
    for i, (path, steps) in enumerate(leaves):
        e = _episode(first + i, gid, seed, task, steps, path=path)
        t_err = None if e.success else int(rng.integers(len(steps)))
        for s in steps:
            s.columns["crit"] = t_err is not None and s.t >= t_err
        eps.append(e)
    return eps


def _copy(step: Step, path: tuple) -> Step:
    return Step(**{**step.__dict__, "columns": {"path": path}})


def _demo(task: _Task) -> list[Step]:
    pos, steps = task.start, list[Step]()
    while pos != task.goal and len(steps) < MAX_TURNS:
        a = next(a for a in MOVES if _dist(_move(pos, a), task.goal) < _dist(pos, task.goal))
        nxt = _move(pos, a)
        steps.append(
            Step(
                len(steps),
                task.describe(pos),
                task.render(pos),
                a,
                a,
                10.0 if nxt == task.goal else -0.1,
            )
        )
        pos = nxt
    return steps


def _groups(rng, it: int, n_iter: int, n_groups: int, size: int, first: int, opts) -> list[Episode]:
    pull = 0.2 + 0.7 / (1 + math.exp(-(it - 0.4 * n_iter) / max(1.0, 0.1 * n_iter)))
    episodes: list[Episode] = []
    for g in range(n_groups):
        seed = int(rng.integers(1_000_000_000))
        cells = rng.choice(SIZE * SIZE, size=2, replace=False)
        task = _Task(divmod(int(cells[0]), SIZE), divmod(int(cells[1]), SIZE))
        gid = (it - 1) * n_groups + g
        nxt = first + len(episodes)
        if opts["trees"]:
            episodes += _tree_group(rng, task, gid, seed, nxt, size, pull)
            continue
        for k in range(size):
            demo = opts["demos"] and k == size - 1
            steps = _demo(task) if demo else _walk(rng, task, task.start, 0, pull)
            source = 1 if demo else 2 if opts["tips"] and k % 4 == 1 else 0
            episodes.append(_episode(nxt + k, gid, seed, task, steps, source=source))
    return episodes


def _metrics(it: int, episodes: list[Episode], rng) -> dict[str, Any]:
    steps = sum(len(e.steps) for e in episodes)
    return {
        "iteration": it,
        "rollout/success": float(np.mean([e.success for e in episodes])),
        "rollout/return": float(np.mean([e.ret for e in episodes])),
        "rollout/length": steps / len(episodes),
        "rollout/invalid_rate": 0.0,
        "actor/entropy": 1.38 - 0.5 * it / (it + 50) + 0.01 * rng.standard_normal(),
        "actor/approx_kl": abs(0.01 + 0.003 * rng.standard_normal()),
        "actor/clipfrac": abs(0.12 + 0.02 * rng.standard_normal()),
        "time/rollout": 20 + rng.random(),
        "time/advantage": 0.01,
        "time/update": 30 + rng.random(),
    }


def _records(episodes: list[Episode], estimator: str, tips: bool) -> list[dict[str, Any]]:
    adv, terms = estimate_terms(estimator, to_step_batch(episodes))
    recs = to_records(episodes, None, advantage=adv, **terms)  # no decode: ids dropped
    if tips:
        for r in recs:
            if r["source"] == 2:
                for s in r["steps"]:
                    s["tips"] = ["move toward the goal first along rows", "walls stop you"]
    return recs


def write_synthetic_run(
    run_dir: Path,
    *,
    iterations: int = 200,
    groups: int = 32,
    group_size: int = 8,
    dumped_groups: int = 4,
    estimator: str = "gigpo",
    trees: bool = False,
    demos: bool = False,
    tips: bool = False,
    seed: int = 0,
) -> Path:
    """Write config.yaml, metrics.jsonl, dumps of ``dumped_groups`` groups each iteration and
    summary.json (evaluations every 5 iterations) for a run of ``iterations`` x ``groups``
    x ``group_size`` episodes. ``trees`` needs a tree estimator (elpo, treepo, arpo)."""
    if min(iterations, groups, group_size) < 1 or not 0 <= dumped_groups <= groups:
        raise ValueError("iterations, groups, group_size >= 1 and 0 <= dumped_groups <= groups")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = Config().model_dump()
    cfg["name"] = f"synthetic_{estimator}"
    cfg["advantage"] = {"name": estimator, "options": {}}
    cfg["rollout"].update(groups=groups, group_size=group_size)
    cfg["log"].update(trajectory_groups=dumped_groups)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    log, rng = (
        RunLog(run_dir, progress=False, loggers=["jsonl"], config=cfg),
        np.random.default_rng(seed),
    )
    evals, total, opts = [], 0, {"trees": trees, "demos": demos, "tips": tips}
    for it in range(1, iterations + 1):
        episodes = _groups(rng, it, iterations, dumped_groups, group_size, total, opts)
        total += groups * group_size
        if episodes:
            log.trajectories(it, _records(episodes, estimator, tips))
        row = {"episodes": total, **_metrics(it, episodes or [Episode(0, 0, 0)], rng)}
        if it % 5 == 0 or it == iterations:
            ev = {
                "eval/success": min(1.0, row["rollout/success"] + 0.05),
                "eval/return": row["rollout/return"],
            }
            row.update(ev)
            evals.append({"iteration": it, "episodes": total, "train_seconds": 50.0 * it, **ev})
        log.metrics(row)
    summary = {
        "name": cfg["name"],
        "iterations": iterations,
        "episodes": total,
        "evals": evals,
        "eval_success": evals[-1]["eval/success"],
        "target": 0.8,
        "synthetic": True,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return run_dir
