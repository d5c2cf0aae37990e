"""Tests of the sokoban env: rules, rewards, generation, renders, branching, vocabulary."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cairn.envs import TextEnv, make
from cairn.envs.sokoban import (
    Sokoban,
    SokobanSnapshot,
    apply_action,
    compact_vocabulary,
    generate_room,
    render_compact,
)
from cairn.envs.sokoban.generate import _generate_cached
from cairn.envs.sokoban.solver import (
    ACTIONS,
    dead_squares,
    parse_grid,
    render_grid,
    solution_length,
    solve,
)

# Two boxes, targets at (1, 3) and (1, 5): pushing right moves the top box onto a target,
# off it, then onto the other target, while the second box stays off target.
ROW_ROOM = """
# # # # # # #
# @ $ . _ . #
# _ _ _ $ _ #
# # # # # # #
"""
ONE_PUSH_ROOM = "#####\n#@$.#\n#####"
# A box already on a target next to a free target: pushing it keeps the count at one.
TARGET_TO_TARGET_ROOM = """
# # # # # # #
# @ * . _ _ #
# _ _ _ $ _ #
# # # # # # #
"""


def play(env: Sokoban, actions: list[str]) -> list[tuple]:
    return [env.step(a) for a in actions]


# -- rewards and dynamics on hand-built rooms ------------------------------------------------------


def test_rewards_on_off_and_onto_target_worked_example():
    env = Sokoban(room=ROW_ROOM)
    env.reset(seed=0)
    results = play(env, ["right", "right", "right"])
    # onto (1,3): -0.1 + 1 ; off (1,3) to (1,4): -0.1 - 1 ; onto (1,5): -0.1 + 1
    assert [r[1] for r in results] == pytest.approx([0.9, -1.1, 0.9], abs=1e-12)
    assert [r[4]["boxes_on_target"] for r in results] == [1, 0, 1]
    assert not any(r[2] or r[3] for r in results)


def test_solving_push_gets_finish_bonus_and_terminates():
    env = Sokoban(room=ONE_PUSH_ROOM)
    obs, info = env.reset(seed=0)
    assert obs == "# # # # #\n# @ $ . #\n# # # # #"
    obs, reward, terminated, truncated, info = env.step("right")
    # step cost -0.1, box on target +1, all boxes on target +10
    assert reward == pytest.approx(10.9, abs=1e-12)
    assert terminated and not truncated and info["success"]
    assert obs == "# # # # #\n# _ @ * #\n# # # # #"
    with pytest.raises(RuntimeError, match="episode has ended"):
        env.step("left")


def test_push_from_target_to_target_is_neutral():
    env = Sokoban(room=TARGET_TO_TARGET_ROOM)
    env.reset(seed=0)
    _, reward, *_ = env.step("right")
    assert reward == pytest.approx(-0.1, abs=1e-12)  # one box off a target, one on: no change


@pytest.mark.parametrize(
    ("grid", "action"),
    [
        ("#####\n#@$.#\n#####", "up"),  # walk into a wall
        ("#####\n#@..#\n#$__#\n#$__#\n#####", "down"),  # push a box into a box
        ("######\n#@$$.#\n#___.#\n######", "right"),  # push a box into a box
        ("#####\n#.$@#\n#####", "right"),  # walk into the outer wall
        ("#####\n#@$##\n#__.#\n#####", "right"),  # push a box into a wall
    ],
)
def test_blocked_moves_are_valid_and_change_nothing(grid, action):
    env = Sokoban(room=grid)
    obs0, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs == obs0
    assert reward == pytest.approx(-0.1, abs=1e-12)
    assert info["valid"] and not info["moved"] and not terminated and not truncated


@pytest.mark.parametrize("action", ["jump", "", "up up", "u", "left!", "UP LEFT"])
def test_invalid_action_keeps_state_counts_turn(action):
    env = Sokoban(room=ROW_ROOM, max_steps=5)
    obs0, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs == obs0 and reward == pytest.approx(-0.1, abs=1e-12)
    assert info["valid"] is False and info["steps"] == 1 and env.remaining_steps == 4
    assert not terminated and not truncated


@pytest.mark.parametrize("action", ["right", " Right ", "RIGHT\n", "\tright"])
def test_actions_are_case_and_space_insensitive(action):
    env = Sokoban(room=ONE_PUSH_ROOM)
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(action)
    assert info["valid"] and terminated


def test_truncation_at_max_steps_then_error():
    env = Sokoban(room=ROW_ROOM, max_steps=3)
    env.reset(seed=0)
    flags = [(r[2], r[3]) for r in play(env, ["up", "nonsense", "left"])]
    assert flags == [(False, False), (False, False), (False, True)]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("right")
    env.reset(seed=0)  # a reset starts over
    assert env.steps == 0


def test_info_keys_on_reset_and_step():
    env = Sokoban(room=ROW_ROOM)
    _, info = env.reset(seed=0)
    expected = {"anchor", "valid", "success", "admissible", "boxes_on_target", "steps"}
    assert expected <= set(info)
    assert info["admissible"] == ["up", "down", "left", "right"]
    assert info["anchor"] == render_grid(parse_grid(ROW_ROOM))
    _, _, _, _, info = env.step("down")
    assert expected <= set(info) and info["steps"] == 1 and info["success"] is False


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        Sokoban().step("up")


# -- independent reference: plain BFS with its own move rule ---------------------------------------


def _plain_move(room, action):
    """Sokoban's move rule written again on (row, col) sets, for cross-checking."""
    dr, dc = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}[action]
    (pr, pc), boxes = room.player, set(room.boxes)
    a, b = (pr + dr, pc + dc), (pr + 2 * dr, pc + 2 * dc)

    def free(cell):
        return room.inside(cell) and cell not in room.walls and cell not in boxes

    if a in boxes and free(b):
        boxes = (boxes - {a}) | {b}
    elif not free(a):
        return room.player, frozenset(boxes)
    return a, frozenset(boxes)


def plain_distance(room, limit=40):
    """Fewest moves to solve by exhaustive BFS without pruning; None if unsolvable."""
    start = (room.player, room.boxes)
    seen, frontier = {start}, [start]
    for depth in range(limit + 1):
        if any(b == room.targets for _, b in frontier):
            return depth
        nxt = []
        for player, boxes in frontier:
            for a in ACTIONS:
                s = _plain_move(room.with_state(player, boxes), a)
                if s not in seen:
                    seen.add(s)
                    nxt.append(s)
        if not nxt:
            return None
        frontier = nxt
    return None


# -- solver ----------------------------------------------------------------------------------------


def test_solver_solutions_replay_to_success_with_exact_rewards():
    """300 generated one-box rooms: replay the plan; every step costs 0.1, the last earns 11."""
    env = Sokoban()
    for seed in range(300):
        env.reset(seed=seed)
        plan = env.solve()
        assert plan is not None and 1 <= len(plan) <= 15
        results = play(env, plan)
        rewards = [r[1] for r in results]
        # one box: it never lands on its target before the final push (that would solve it)
        expected = [-0.1] * (len(plan) - 1) + [-0.1 + 1.0 + 10.0]
        assert rewards == pytest.approx(expected, abs=1e-12), seed
        assert [r[2] for r in results] == [False] * (len(plan) - 1) + [True]
        assert results[-1][4]["success"]


def test_two_box_solutions_reward_matches_target_count_changes():
    env = Sokoban(size=7, num_boxes=2)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        plan = env.solve()
        for action in plan:
            before = obs.count("*")
            obs, reward, terminated, _, info = env.step(action)
            change = obs.count("*") - before
            assert reward == pytest.approx(-0.1 + change + 10.0 * terminated, abs=1e-12)
        assert terminated and info["success"]


def test_solver_is_optimal_against_plain_exhaustive_search():
    for seed in range(60):
        room = generate_room(6, 1, seed=seed)
        plan = solve(room)
        assert len(plan) == plain_distance(room)
        assert solve(room, max_moves=len(plan) - 1) is None
        assert solve(room, max_moves=len(plan)) == plan


def test_solver_matches_plain_search_on_random_unfiltered_rooms():
    """Random placements (many unsolvable): pruning must never hide a solution."""
    from cairn.envs.sokoban.generate import _carve, _place

    rng = np.random.default_rng(7)
    n_unsolvable = 0
    for i in range(150):
        size, boxes = ((5, 6), 1) if i % 3 else ((5, 5), 2)
        room = _place(rng, *size, _carve(rng, *size, int(rng.integers(6, 10))), boxes)
        if room is None:
            continue
        expected = plain_distance(room)
        plan = solve(room)
        assert (None if plan is None else len(plan)) == expected, render_grid(room)
        n_unsolvable += expected is None
    assert n_unsolvable >= 10  # the check did exercise the pruning


def test_solver_worked_example_and_already_solved():
    room = parse_grid("######\n#____#\n#_$_.#\n#@___#\n######")
    plan = solve(room)
    # up (to (2,1)), right, right: pushes the box from (2,2) to (2,4), 3 moves in all
    assert plan == ["up", "right", "right"]
    solved = parse_grid("#####\n#@*_#\n#####")
    assert solve(solved) == []
    stuck = parse_grid("#####\n#$_.#\n#@__#\n#####")  # box in a corner
    assert solve(stuck) is None


def test_dead_squares_worked_example():
    room = parse_grid("######\n#____#\n#_$._#\n#@___#\n######")
    # Live cells are the target (2,3) and (2,2): a box reaches (2,3) only by a push right
    # from (2,2) with the player on (2,1); every other push into them would need the player
    # on the outer wall. All the other floor cells are dead.
    expected = {(1, c) for c in range(1, 5)} | {(3, c) for c in range(1, 5)} | {(2, 1), (2, 4)}
    assert dead_squares(room) == expected
    assert solution_length(room) == 2 and solution_length(room, max_moves=1) is None  # up, right


@pytest.mark.parametrize("transform", ["mirror", "transpose"])
def test_solution_length_invariant_under_symmetry(transform):
    """Mirroring swaps left/right, transposing swaps up/left and down/right."""
    swap = {
        "mirror": {"left": "right", "right": "left", "up": "up", "down": "down"},
        "transpose": {"up": "left", "left": "up", "down": "right", "right": "down"},
    }[transform]
    for seed in range(40):
        room = generate_room((6, 7), 1, seed=seed)
        rows = [row.split() for row in render_grid(room).splitlines()]
        if transform == "mirror":
            rows = [r[::-1] for r in rows]
        else:
            rows = [list(column) for column in zip(*rows, strict=True)]
        image = parse_grid("\n".join(" ".join(r) for r in rows))
        plan, image_plan = solve(room), solve(image)
        assert len(plan) == len(image_plan)
        mapped = image
        for a in plan:
            mapped = apply_action(mapped, swap[a])
        assert mapped.solved


def test_env_solve_mid_episode_is_consistent():
    env = Sokoban()
    rng = np.random.default_rng(0)
    for seed in range(30):
        env.reset(seed=seed)
        for a in rng.choice(ACTIONS, size=4):
            if env.step(str(a))[2]:
                break
        if env.room.solved:
            continue
        plan = env.solve()
        assert (plan is None) == (plain_distance(env.room) is None)
        if plan is not None:
            within = env.solve(max_moves=env.remaining_steps)
            assert (within is not None) == (len(plan) <= env.remaining_steps)


# -- generation ------------------------------------------------------------------------------------


def test_generation_is_deterministic_per_seed_and_options():
    a, b = Sokoban(), Sokoban()
    obs_a = [a.reset(seed=s)[0] for s in range(20)]
    _generate_cached.cache_clear()
    obs_b = [b.reset(seed=s)[0] for s in range(20)]
    assert obs_a == obs_b
    other = [Sokoban(walls=False).reset(seed=s)[0] for s in range(20)]
    assert sum(x != y for x, y in zip(obs_a, other, strict=True)) >= 18


def test_generation_varies_across_seeds():
    rooms = {generate_room(6, 1, seed=s) for s in range(200)}
    layouts = {(r.walls, r.targets) for r in rooms}
    assert len(rooms) >= 190 and len(layouts) >= 150


@pytest.mark.parametrize(
    ("size", "num_boxes", "walls", "lo", "hi"),
    [(6, 1, True, 1, 15), (6, 1, True, 3, 5), ((5, 8), 1, False, 2, 10), (7, 2, 0.2, 4, 20)],
)
def test_generated_rooms_respect_options(size, num_boxes, walls, lo, hi):
    for seed in range(40):
        room = generate_room(size, num_boxes, walls, lo, hi, seed=seed)
        h, w = (size, size) if isinstance(size, int) else size
        assert (room.height, room.width) == (h, w) and len(room.boxes) == num_boxes
        assert not room.solved and lo <= len(solve(room)) <= hi
        border = {(r, c) for r in range(h) for c in range(w) if r in (0, h - 1) or c in (0, w - 1)}
        assert border <= room.walls
        floor = {(r, c) for r in range(h) for c in range(w)} - room.walls
        interior = (h - 2) * (w - 2)
        density = 0.25 if walls is True else float(walls)
        assert len(floor) == interior - round(density * interior)
        assert _connected(floor)


def _connected(cells):
    start = next(iter(cells))
    seen, stack = {start}, [start]
    while stack:
        r, c = stack.pop()
        for n in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if n in cells and n not in seen:
                seen.add(n)
                stack.append(n)
    return seen == set(cells)


def test_generated_rooms_are_cached():
    """A seen seed comes from the cache: far cheaper than generating it. A ratio, not a
    wall-clock bound (speed is measured by benchmarks/, not by unit tests)."""
    _generate_cached.cache_clear()
    start = time.perf_counter()
    fresh = [generate_room(6, 1, seed=seed) for seed in range(1000, 1100)]
    generate_seconds = time.perf_counter() - start
    start = time.perf_counter()
    cached = [generate_room(6, 1, seed=seed) for seed in range(1000, 1100)]
    cached_seconds = time.perf_counter() - start
    assert _generate_cached.cache_info().hits >= 100
    assert [str(r) for r in cached] == [str(r) for r in fresh]
    assert cached_seconds < generate_seconds / 10


def test_seed_none_draws_a_recorded_seed():
    env = Sokoban()
    env.reset()
    after_up = env.step("up")[0]
    snap = TextEnv.snapshot(env)  # the replay fallback: seed + actions
    assert isinstance(snap.seed, int)
    after_left = env.step("left")[0]
    assert env.restore(snap)[0] == after_up
    assert env.step("left")[0] == after_left
    seeds = set()
    for _ in range(5):
        env.reset()
        seeds.add(env.snapshot().seed)
    assert len(seeds) == 5


# -- branching -------------------------------------------------------------------------------------


@pytest.mark.parametrize("render", ["grid", "compact"])
def test_snapshot_restore_matches_replay_fallback(render):
    """Cheap snapshots and the base class's replay give the same futures."""
    rng = np.random.default_rng(3)
    env = Sokoban(render=render, max_steps=12)
    words = [*ACTIONS, "stay"]
    for seed in range(40):
        env.reset(seed=seed)
        ended = False
        for a in rng.choice(words, size=int(rng.integers(0, 10))):
            if not ended:
                _, _, term, trunc, _ = env.step(str(a))
                ended = term or trunc
        fast, slow = env.snapshot(), TextEnv.snapshot(env)
        assert isinstance(fast, SokobanSnapshot)
        suffix = [str(a) for a in rng.choice(words, size=6)]
        runs = []
        for snap in (fast, slow):
            out, done = [env.restore(snap)], ended
            for a in suffix:
                if not done:
                    out.append(env.step(a))
                    done = out[-1][2] or out[-1][3]
            runs.append(out)
        assert runs[0] == runs[1]


def test_restore_rejects_foreign_snapshot():
    env = Sokoban()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="cannot restore"):
        env.restore({"player": (1, 1)})


# -- renders and vocabulary ------------------------------------------------------------------------


def test_compact_render_worked_example():
    room = parse_grid("######\n##_.##\n#_@$_#\n##__##\n#____#\n######")
    # player (2,2): up (1,2) floor, down (3,2) floor, left (2,1) floor, right (2,3) box,
    # diagonals (1,1) wall, (1,3) target=free, (3,1) wall, (3,3) free; box one column right;
    # nearest target (1,3) one row up from the box (2,3).
    assert render_compact(room) == (
        "pu:free pd:free pl:free pr:box pul:wall pur:free pdl:wall pdr:free "
        "r+0 c+1 tr-1 tc+0 "
        "bu:free bd:free bl:free br:free bul:free bur:wall bdl:free bdr:wall"
    )


def test_compact_render_is_canonical_and_targets_skip_occupied():
    a = parse_grid("#######\n#@$_._#\n#__$*.#\n#######")
    words = render_compact(a).split()
    assert len(words) == 8 + 12 * 3
    # boxes in row-major order (1,2), (2,3), (2,4); targets (1,4), (2,4), (2,5).
    # (1,2): nearest target (1,4), two columns right
    assert words[8:12] == ["r+0", "c+1", "tr+0", "tc+2"]
    # (2,3): (2,4) is nearer but holds another box; (1,4) and (2,5) tie at distance 2,
    # the tie goes to the first in row-major order, (1,4): one up, one right
    assert words[20:24] == ["r+1", "c+2", "tr-1", "tc+1"]
    # (2,4) sits on a target
    assert words[32:36] == ["r+1", "c+3", "tr+0", "tc+0"]
    b = a.with_state(a.player, reversed(sorted(a.boxes)))  # same state built in another order
    assert render_compact(b) == render_compact(a)


def test_grid_round_trip_and_symbols():
    text = "# # # # #\n# + $ _ #\n# * _ _ #\n# # # # #"
    room = parse_grid(text)
    assert render_grid(room) == text
    assert parse_grid(text.replace(" ", "")) == room
    with pytest.raises(ValueError, match="unknown symbol"):
        parse_grid("#####\n#@$?#\n#####")
    with pytest.raises(ValueError, match="rectangle"):
        parse_grid("#####\n#@$.\n#####")


@pytest.mark.parametrize(("size", "num_boxes"), [(6, 1), ((7, 6), 2)])
def test_every_rendered_word_is_in_vocabulary(size, num_boxes):
    rng = np.random.default_rng(11)
    for render in ("grid", "compact"):
        env = Sokoban(size=size, num_boxes=num_boxes, render=render)
        vocab = set(env.vocabulary())
        assert set(ACTIONS) <= vocab and set(env.instruction.split()) <= vocab
        for seed in range(30):
            obs, info = env.reset(seed=seed)
            seen = set(obs.split()) | set(info["anchor"].split())
            done = False
            while not done:
                obs, _, term, trunc, info = env.step(str(rng.choice(ACTIONS)))
                seen |= set(obs.split()) | set(info["anchor"].split())
                done = term or trunc
            assert seen <= vocab, seen - vocab


def test_compact_vocabulary_size():
    # 2 cells (player, box) x 8 neighbours x 3 kinds = 48 words, plus offsets r, c, tr, tc
    # each in -5..+5 for a 6x6 room (11 values): 44 words
    assert len(set(compact_vocabulary(6, 6))) == 48 + 44


def test_compact_render_rarely_aliases_states_needing_different_actions():
    """States rendering alike should mostly share an optimal action (a good policy exists)."""
    from collections import Counter, defaultdict

    votes, states = defaultdict(Counter), []
    for seed in range(40):
        start = generate_room(6, 1, seed=seed)
        seen, stack = {start}, [start]
        while stack:
            room = stack.pop()
            for a in ACTIONS:
                nxt = apply_action(room, a)
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        dist = {r: (None if (p := solve(r)) is None else len(p)) for r in seen}
        for room in seen:
            if dist[room]:
                best = {a for a in ACTIONS if dist[apply_action(room, a)] == dist[room] - 1}
                states.append((render_compact(room), best))
                votes[states[-1][0]].update(best)
    agree = np.mean([votes[key].most_common(1)[0][0] in best for key, best in states])
    assert agree > 0.97  # measured 0.9995 on 500 rooms; the 4-neighbour form gives 0.986


# -- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"size": 2}, "size"),
        ({"size": (6, 6, 6)}, "size"),
        ({"size": "6"}, "size"),
        ({"num_boxes": 0}, "num_boxes"),
        ({"size": 4, "num_boxes": 3}, "too few"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": True}, "max_steps"),
        ({"render": "ascii"}, "render must be one of 'grid', 'compact'"),
        ({"walls": 1.5}, "walls"),
        ({"walls": "yes"}, "walls"),
        ({"min_solution": 0}, "min_solution"),
        ({"min_solution": 5, "max_solution": 4}, r"max_solution must be an int >= min_solution"),
        ({"max_solution": 20}, "exceeds max_steps"),
        ({"instruction": 3}, "instruction"),
        ({"room": "#####\n#@*_#\n#####"}, "already solved"),
    ],
)
def test_bad_options_raise_clear_errors(options, match):
    with pytest.raises(ValueError, match=match):
        Sokoban(**options)


def test_impossible_generation_and_bad_reset_arguments():
    env = Sokoban(size=4, min_solution=12)  # a 2x2 interior cannot need 12 moves
    with pytest.raises(ValueError, match="draws"):
        env.reset(seed=0)
    env = Sokoban()
    with pytest.raises(ValueError, match="seed"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match="options"):
        env.reset(seed=0, options={"level": 3})


def test_registry_and_instruction_option():
    env = make("sokoban", render="compact", instruction="solve it")
    assert env.instruction == "solve it"
    assert make("sokoban", render="compact").instruction == "push the box onto the goal"
    grid_text = make("sokoban").instruction
    assert all(s in grid_text for s in ("#", "$", "*", "@", "+", "up", "down", "left", "right"))
    with pytest.raises(ValueError, match="allowed"):
        make("sokoban", colour="red")


# -- pinned behaviour: rooms, renderings and rewards byte-identical across refactors ---------------

PINNED_CONFIGS = [
    {},
    {"render": "compact"},
    {"size": 7, "num_boxes": 2, "max_steps": 30, "render": "compact"},
    {"size": (6, 8), "walls": False, "min_solution": 3, "max_solution": 10, "max_steps": 20},
    {"walls": 0.1, "min_solution": 4, "render": "compact", "max_steps": 12},
]
PINNED_ACTIONS = ["up", "down", "left", "right", "Left ", "jump", ""]
# sha256 of the trace below (generation, both renderings, rewards, info, snapshot/restore,
# vocabulary), typed in so that any change to what the env does shows. The info keys
# no_progress and task_blind are tested on their own and left out of it.
PINNED_NEW_INFO = ("no_progress", "task_blind")
PINNED_SHA256 = "2b1876c0a948c9cb43fe293b954cd10f3b33202f33924eef72e1c8f611e3be87"


def test_a_trace_of_580_episodes_hashes_to_its_pinned_value():
    import hashlib
    import json

    def pinned(info: dict) -> dict:
        return {k: v for k, v in info.items() if k not in PINNED_NEW_INFO}

    digest = hashlib.sha256()
    for ci, cfg in enumerate(PINNED_CONFIGS):
        env = make("sokoban", **cfg)
        rng = np.random.default_rng(ci)
        for seed in range(200 if ci < 2 else 60):
            obs, info = env.reset(seed=seed)
            record: list = [ci, seed, obs, pinned(info)]
            snap = None
            for k in range(40):
                action = PINNED_ACTIONS[int(rng.integers(len(PINNED_ACTIONS)))]
                if k == 3:
                    snap = env.snapshot()
                obs, reward, terminated, truncated, info = env.step(action)
                record.append([action, obs, reward, terminated, truncated, pinned(info)])
                if terminated or truncated:
                    break
            if snap is not None:
                obs, info = env.restore(snap)
                record.append(["restore", obs, pinned(info)])
            digest.update(json.dumps(record, sort_keys=True).encode())
    digest.update(json.dumps(make("sokoban", size=7, num_boxes=2).vocabulary()).encode())
    assert digest.hexdigest() == PINNED_SHA256


# -- the text rendering and the gold action (prompts for language models) ----------------------
DOC_ROOM = "# # # # # #\n# # _ . # #\n# _ @ $ _ #\n# # _ _ # #\n# _ _ _ _ #\n# # # # # #"


def test_text_render_numbers_rows():
    env = Sokoban(room=DOC_ROOM, render="text")
    obs, info = env.reset(seed=0)
    # the grid alone, rows numbered: no sentence repeating the positions the grid shows
    assert obs == (
        "row 0: # # # # # #\nrow 1: # # _ . # #\nrow 2: # _ @ $ _ #\nrow 3: # # _ _ # #\n"
        "row 4: # _ _ _ _ #\nrow 5: # # # # # #"
    )
    assert info["anchor"] == DOC_ROOM  # the anchor is the grid whatever the rendering
    assert "# wall" in env.instruction and "row 0 at the top" in env.instruction
    assert env.vocabulary() == []  # open text: a subword tokenizer
    # down, right, up: the box goes onto the target, shown as *
    obs = play(env, ["down", "right", "up"])[-1][0]
    assert obs.splitlines()[1:3] == ["row 1: # # _ * # #", "row 2: # _ _ @ _ #"]


def test_text_render_survives_snapshot_and_restore():
    env = Sokoban(room=DOC_ROOM, render="text")
    env.reset(seed=0)
    snap, obs = env.snapshot(), env.step("down")[0]
    env.step("right")
    assert env.restore(snap)[0] != obs and env.step("down")[0] == obs


def test_gold_action_is_the_solvers_next_move():
    env = Sokoban(room=DOC_ROOM, max_steps=5)
    env.reset(seed=0)
    moves = []
    while (gold := env.gold_action()) is not None:
        moves.append(gold)
        env.step(gold)
    assert moves == ["down", "right", "up"] and env.room.solved
    env.reset(seed=0)
    play(env, ["left", "left", "left", "left"])  # one step left: no 3-move plan fits
    assert env.gold_action() is None
    assert Sokoban.example_action in ACTIONS


def test_the_text_renderings_demonstration_is_a_solving_episode():
    assert Sokoban(render="compact").demonstration() == []  # tiny prompts: no example
    demo = Sokoban(render="text").demonstration()
    assert [a for _, a in demo] == ["right", "right"]
    assert demo[0][0] == "row 0: # # # # # #\nrow 1: # @ _ $ . #\nrow 2: # # # # # #"
    room = "\n".join(line.split(": ", 1)[1] for line in demo[0][0].splitlines())
    env = Sokoban(room=room, render="text")
    assert env.reset(seed=0)[0] == demo[0][0]
    assert env.step("right")[0] == demo[1][0]
    assert env.step("right")[4]["success"]  # the second push puts the box home
