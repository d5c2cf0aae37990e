"""Shared branching machinery: env state restore, prefix clones, tree labels, entropies."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from rollout_helpers import ConstantPolicy, context, demo_context

from cairn.advantages import estimate
from cairn.data.episode import Episode, Step, to_step_batch
from cairn.data.tokens import collate_scoring
from cairn.envs import TextEnv, available, env_class, env_traits, make
from cairn.policies.hf import Generation
from cairn.rollout.branching import Forest, Path, clone_prefix, label_paths, response_entropy

# -- env state: snapshot / restore vs the replay fallback --------------------------------------


def _random_action(env_name: str, env: TextEnv, info: dict, rng: random.Random) -> str:
    if info.get("admissible"):
        return rng.choice([*info["admissible"], "fly"])  # "fly": an invalid action
    if env_name == "countdown":  # a well-formed wrong answer keeps a multi-try episode on
        nums = rng.sample(list(info["numbers"]), rng.randint(1, 3))
        return rng.choice([" + ".join(map(str, nums)), "bad", env.solution()])
    gold = getattr(env, "gold_actions", lambda: [env.gold_action()])()
    plain = ["search[capital]", "answer[nobody]", env.example_action, "bad"]
    return rng.choice([a for a in [*gold, *plain] if a])


#: Every registered env (from the registry; ``slow=True`` ones are slow tests), with option
#: overrides that make the random walks reach interesting states quickly.
OPTIONS = {
    "sokoban": {"render": "compact", "max_solution": 5},
    "frozenlake": {"map_name": "random", "map_size": 5, "is_slippery": True, "max_steps": 30},
    "countdown": {"max_steps": 4},
    "dataset": {"max_turns": 4},
    "integration": {"max_steps": 4},
    "search_qa": {"max_steps": 6},
    "scienceworld": {"max_steps": 12},
    "textworld": {"num_games": 2, "max_steps": 12},  # two generated games, not forty
}
REGISTERED = [
    pytest.param(n, marks=[pytest.mark.slow] if env_traits(n).get("slow") else [])
    for n in available()
]


def _make(name: str) -> TextEnv:
    try:
        env_class(name)
    except ImportError as err:
        pytest.skip(f"{name}: optional extra not installed ({err})")
    return make(name, **OPTIONS.get(name, {}))


@pytest.mark.parametrize("name", REGISTERED)
def test_snapshot_and_replay_give_identical_futures_in_another_env(name):
    """Many random prefixes: restoring the env's snapshot or the replay fallback into a
    *different* instance (as a branch does) gives the same observation, and the same
    random future gives identical observations, rewards, flags and anchors."""
    rng = random.Random(7)
    source, cheap_env, replay_env = (_make(name) for _ in range(3))
    cheap_env.reset(seed=1000)  # frozenlake cannot restore before its first reset;
    replay_env.reset(seed=1001)  # Forest resets a fresh env once before it restores
    checked = 0
    for seed in range(40):
        obs, info = source.reset(seed=seed)
        for _ in range(rng.randint(0, 5)):
            obs, _, term, trunc, info = source.step(_random_action(name, source, info, rng))
            if term or trunc:
                break
        else:
            cheap, replay = source.snapshot(), TextEnv.snapshot(source)
            a, b = cheap_env.restore(cheap), replay_env.restore(replay)
            assert a[0] == b[0] == obs and a[1]["anchor"] == b[1]["anchor"] == info["anchor"]
            for _ in range(6):
                action = _random_action(name, cheap_env, a[1], rng)
                ra, rb = cheap_env.step(action), replay_env.step(action)
                assert ra[:4] == rb[:4] and ra[4]["anchor"] == rb[4]["anchor"]
                a = (ra[0], ra[4])
                if ra[2] or ra[3]:
                    break
            checked += 1
    assert checked >= 15  # enough prefixes survived to mean something


# -- prefix clones -------------------------------------------------------------------------------


def _episode(n: int, group: int = 3) -> Episode:
    steps = [
        Step(t, f"o{t}", f"o{t}", "up", "up", -0.1, columns={"value": float(t)}) for t in range(n)
    ]
    return Episode(
        id=5, group=group, task=11, steps=steps, meta={"entropy": [0.1 * t for t in range(n)]}
    )


def test_clone_prefix_copies_steps_and_keeps_the_parent_intact():
    parent = _episode(4)
    child = clone_prefix(parent, 2)
    assert [s.t for s in child.steps] == [0, 1] and child.meta["entropy"] == [0.0, 0.1]
    assert (child.id, child.group, child.task, child.terminated) == (-1, 3, 11, False)
    child.steps[0].columns["value"] = 9.0  # a copy: the parent's column is untouched
    assert parent.steps[0].columns["value"] == 0.0 and len(parent.steps) == 4
    assert len(clone_prefix(parent, 0).steps) == 0 and len(clone_prefix(parent, 4).steps) == 4
    with pytest.raises(ValueError, match="branch point t=5"):
        clone_prefix(parent, 5)


def test_a_branch_of_a_path_an_env_fault_ended_later_does_not_inherit_the_fault():
    parent = _episode(4)
    parent.meta.update({"fault": "error", "fault_error": "RuntimeError: boom"})  # at step 4
    child = clone_prefix(parent, 2)  # a fill branch from a state recorded before the fault
    assert "fault" not in child.meta and "fault_error" not in child.meta
    assert parent.meta["fault"] == "error"


# -- tree labels ---------------------------------------------------------------------------------


def _path(n: int, parent: Path | None = None, t0: int = 0, k: int = 0) -> Path:
    p = Path(_episode(n), None, ("", {}), parent=parent, t0=t0, k=k)
    if parent is not None:
        parent.children.append(p)
    return p


def test_labels_of_a_hand_built_tree():
    """A has 6 steps; B and D branch from A before step 4, C before step 2, E from C before
    step 3 (created in the order A, B, C, D, E: a late branch point before an early one).
    A's branch points {2, 4} put (0,) on its rows 0-1, (0,0) on 2-3, (0,0,0) on 4-5; a
    branch takes the next id at its point: C (0,1), B (0,0,1), D (0,0,2); E splits C at 3,
    so C continues as (0,1,0) and E is (0,1,1). Copied rows keep the parent's labels."""
    A = _path(6)
    B = _path(6, A, 4, 1)
    C = _path(5, A, 2, 1)
    D = _path(5, A, 4, 2)
    E = _path(4, C, 3, 1)
    label_paths([A, B, C, D, E])
    rows = {
        name: [s.columns["path"] for s in p.episode.steps]
        for name, p in zip("ABCDE", [A, B, C, D, E], strict=True)
    }
    z, z0, z00, z01 = (0,), (0, 0), (0, 0, 0), (0, 1)
    assert rows["A"] == [z, z, z0, z0, z00, z00]
    assert rows["B"] == [z, z, z0, z0, (0, 0, 1), (0, 0, 1)]
    assert rows["C"] == [z, z, z01, (0, 1, 0), (0, 1, 0)]
    assert rows["D"] == [z, z, z0, z0, (0, 0, 2)]
    assert rows["E"] == [z, z, z01, (0, 1, 1)]
    assert [p.episode.path for p in (A, B, C, D, E)] == [
        z00,
        (0, 0, 1),
        (0, 1, 0),
        (0, 0, 2),
        (0, 1, 1),
    ]


def test_branches_left_out_do_not_count_as_branch_points():
    A = _path(3)
    probe = _path(3, A, 1, 1)
    label_paths([A])  # e.g. value probes that are not returned
    assert [s.columns["path"] for s in A.episode.steps] == [(0,), (0,), (0,)]
    label_paths([A, probe])
    assert [s.columns["path"] for s in A.episode.steps] == [(0,), (0, 0), (0, 0)]


def _random_forest(rng: random.Random) -> list[Path]:
    """1-3 roots, then up to 12 branches at random points of random paths, in random order."""
    paths = [_path(rng.randint(1, 7), k=k) for k in range(rng.randint(1, 3))]
    for _ in range(rng.randint(0, 12)):
        parent = rng.choice(paths)
        first = parent.t0 + (parent.parent is not None)  # not at a branch's own first step
        last = len(parent.episode.steps) - 1  # the parent keeps a step after the point
        if first > last:
            continue
        t0 = rng.randint(first, last)
        k = 1 + sum(c.t0 == t0 for c in parent.children)
        paths.append(_path(t0 + rng.randint(1, 4), parent, t0, k))
    return paths


def _reference_labels(paths: list[Path]) -> dict[int, list[tuple[int, ...] | None]]:
    """Plain recursion over explicit nodes: a node is a stretch of one path between two
    branch points; its children are the path's next stretch (id 0) and the branches taken
    at that point (their ids)."""
    out: dict[int, list[tuple[int, ...] | None]] = {}

    def walk(p: Path, start: int, label: tuple[int, ...], strict: bool) -> None:
        after = {c.t0 for c in p.children if c.t0 > start or (c.t0 == start and not strict)}
        end = min(after | {len(p.episode.steps)})
        for s in range(start, end):
            out[id(p)][s] = label
        if end == len(p.episode.steps):
            return
        walk(p, end, (*label, 0), True)
        for c in sorted((c for c in p.children if c.t0 == end), key=lambda c: c.k):
            out[id(c)] = out[id(p)][:end] + [None] * (len(c.episode.steps) - end)
            walk(c, end, (*label, c.k), True)

    for p in paths:
        if p.parent is None:
            out[id(p)] = [None] * len(p.episode.steps)
            walk(p, 0, (p.k,), False)
    return out


@pytest.mark.parametrize("seed", range(30))
def test_labels_equal_a_plain_recursive_reference_on_random_trees(seed):
    rng = random.Random(seed)
    paths = _random_forest(rng)
    label_paths(paths)
    ref = _reference_labels(paths)
    for p in paths:
        assert [s.columns["path"] for s in p.episode.steps] == ref[id(p)]
    # and the estimators accept the result as one valid tree per group
    episodes = [p.episode for p in paths]
    for i, e in enumerate(episodes):
        e.id = i
    batch = to_step_batch(episodes)
    for name in ("treepo", "elpo"):
        assert np.isfinite(estimate(name, batch)).all()
    hard = estimate("arpo", batch, attribution="hard")
    keys = [(int(t), p) for t, p in zip(batch.t, batch.path, strict=True)]
    for key in set(keys):  # copies of one step get one advantage
        rows = [i for i, k in enumerate(keys) if k == key]
        assert np.ptp(hard[rows]) < 1e-12


# -- per-token entropies -------------------------------------------------------------------------


def test_response_entropy_worked_example():
    """Entropies ln 2 (2 options), 0.5 ln 4 (4 options), 0 (forced: skipped), ln 3 (3):
    normalised 1, 0.5 and 1, mean 2.5/3; only the first 2 tokens: 0.75."""
    gen = Generation(
        [1, 2, 3, 4],
        [0.0] * 4,
        "x",
        "choice",
        [[1, 9], [1, 2, 3, 4], [3], [4, 5, 6]],
        [math.log(2), 0.5 * math.log(4), 0.0, math.log(3)],
    )
    assert response_entropy(gen, 20, vocab=100) == pytest.approx(2.5 / 3)
    assert response_entropy(gen, 2, vocab=100) == pytest.approx(0.75)
    free = Generation([1], [0.0], "x", "eos", None, [math.log(10)])
    assert response_entropy(free, 20, vocab=100) == pytest.approx(0.5)  # ln 10 / ln 100
    assert response_entropy(Generation([], [], "", "eos", None, []), 20, vocab=100) == 0.0


@pytest.mark.parametrize("restricted", [False, True])
def test_generation_entropies_equal_the_scored_entropies(demo_policy, restricted):
    """Generation.entropies (added to HFPolicy.generate) is the entropy of the very
    distribution sampled from: it equals teacher-forced scoring's entropy per token."""
    env = make("sokoban", render="compact", max_solution=5)
    prompts = [demo_policy.encode(f"obs: {env.reset(seed=s)[0]} act:") for s in range(6)]
    choices = (
        [["up", "down", "left", "right"][: 2 + s % 3] for s in range(6)] if restricted else None
    )
    gens = demo_policy.generate(
        prompts,
        temperature=0.8,
        max_new_tokens=3,
        choices=choices,
        generator=torch.Generator().manual_seed(0),
    )
    allowed = [g.allowed for g in gens] if restricted else None
    inputs = collate_scoring(prompts, [g.token_ids for g in gens], allowed, demo_policy.pad_id)
    _, ent = demo_policy.score(inputs, temperature=0.8)
    for i, g in enumerate(gens):
        k = len(g.token_ids)
        assert len(g.entropies) == k
        torch.testing.assert_close(ent[i, -k:], torch.tensor(g.entropies), atol=1e-5, rtol=0)


# -- the forest ----------------------------------------------------------------------------------


def test_forest_branch_restores_the_parent_state_and_reuses_envs(demo_policy):
    ctx = demo_context(demo_policy)
    forest = Forest(ctx, record=True)
    root = forest.root(0, 6)
    forest.play([root], turns=3)
    assert not root.done
    child = forest.branch(root, 2)  # from the recorded state before step 2
    assert child.state[1]["anchor"] == root.episode.steps[2].anchor
    assert [s.action for s in child.episode.steps] == [s.action for s in root.episode.steps[:2]]
    now = forest.branch(root)  # from the parent's current state
    assert now.state[0] == root.state[0] and now.t == 3
    with pytest.raises(ValueError, match="can branch within its own steps"):
        forest.branch(child, 1)
    forest.play([root, child, now])
    with pytest.raises(ValueError, match="the episode ended there"):
        forest.branch(root)
    used = forest.slots.used
    assert used == 3 and len(forest.slots.free) == 3  # every env went back to the pool
    assert len(ctx.envs.envs) == 3
    episodes = forest.episodes()
    assert [e.id for e in episodes] == [0, 1, 2]
    assert all(len(e.meta["entropy"]) == len(e.steps) for e in episodes)


def test_a_fresh_env_is_reset_before_it_restores_a_branch_state():
    """frozenlake cannot restore a snapshot before its first reset; Forest resets a new
    pool env once (with the task seed) before restoring into it."""
    ctx = context(ConstantPolicy("right"), lambda: make("frozenlake", **OPTIONS["frozenlake"]))
    forest = Forest(ctx, record=True)
    root = forest.root(0, 3)
    forest.play([root], turns=2)
    assert root.t == 2 and len(ctx.envs.envs) == 1
    child = forest.branch(root, 1)  # acquires a brand-new env
    assert len(ctx.envs.envs) == 2
    assert child.state[1]["anchor"] == root.episode.steps[1].anchor
