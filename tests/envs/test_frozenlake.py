"""FrozenLake text env: gold path, holes, renderings, snapshots, determinism, options."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("gymnasium", reason="frozenlake needs the 'gymnasium' extra")

from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from cairn.envs import make
from cairn.envs.base import TextEnv
from cairn.envs.frozenlake import ACTIONS, FrozenLake

# Gymnasium's 4x4 map:  S F F F / F H F H / F F F H / H F F G
GOLD_4X4 = ["down", "down", "right", "right", "down", "right"]


def rollout(env: FrozenLake, actions: list[str]) -> list[tuple]:
    """(obs, reward, terminated, truncated, anchor, valid) per step, stopping at the end."""
    out = []
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        out.append((obs, reward, term, trunc, info["anchor"], info["valid"]))
        if term or trunc:
            break
    return out


def test_gold_path_reaches_goal_with_reward_one():
    env = make("frozenlake")
    obs, info = env.reset(seed=0)
    assert obs == "A F F F\nF H F H\nF F F H\nH F F G"
    assert info["admissible"] == list(ACTIONS) and info["success"] is False
    rewards = []
    for action in GOLD_4X4:
        obs, reward, term, trunc, info = env.step(action)
        rewards.append(reward)
    # 3 rows down and 3 columns right is the shortest path; only the step onto G pays 1
    assert rewards == [0, 0, 0, 0, 0, 1.0]
    assert (term, trunc, info["success"], info["position"]) == (True, False, True, (3, 3))
    assert obs.endswith("H F F A")


def test_hole_terminates_with_failure():
    env = make("frozenlake")
    env.reset(seed=0)
    env.step("right")  # (0, 1)
    obs, reward, term, trunc, info = env.step("down")  # (1, 1) is a hole
    assert (reward, term, trunc, info["success"]) == (0.0, True, False, False)
    assert obs == "S F F F\nF A F H\nF F F H\nH F F G"
    assert info["position"] == (1, 1)
    with pytest.raises(RuntimeError, match="ended"):
        env.step("down")


def test_step_cost_is_subtracted_from_every_valid_step():
    env = make("frozenlake", step_cost=0.25)
    env.reset(seed=0)
    rewards = [r for _, r, *_ in rollout(env, [*GOLD_4X4[:1], "jump", *GOLD_4X4[1:]])]
    # five frozen steps cost 0.25 each, the goal pays 1 - 0.25; the invalid word costs nothing
    assert rewards == [-0.25, 0.0, -0.25, -0.25, -0.25, -0.25, 0.75]


def test_walking_into_a_wall_is_valid_and_keeps_position():
    env = make("frozenlake")
    _, info0 = env.reset(seed=0)
    _, reward, term, _, info = env.step("up")
    assert info["valid"] and info["position"] == (0, 0) and info["anchor"] == info0["anchor"]
    assert (reward, term) == (0.0, False)


@pytest.mark.parametrize("bad", ["jump", "", "left right", "LEFTT", "4"])
def test_invalid_action_changes_nothing(bad):
    env = make("frozenlake", max_steps=10)
    obs0, info0 = env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(bad)
    assert info["valid"] is False and reward == 0.0 and not term and not trunc
    assert obs == obs0 and info["anchor"] == info0["anchor"] and info["position"] == (0, 0)
    assert [r for _, r, *_ in rollout(env, GOLD_4X4)][-1] == 1.0  # the state really is unchanged


def test_action_words_ignore_case_and_surrounding_space():
    env = make("frozenlake")
    env.reset(seed=0)
    assert env.step("  Down\n")[4]["position"] == (1, 0)


def test_truncation_and_step_guards():
    env = make("frozenlake", max_steps=3)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("left")
    env.reset(seed=0)
    results = rollout(env, ["left", "left", "left", "left"])
    assert [(t, tr) for _, _, t, tr, _, _ in results] == [(False, False)] * 2 + [(False, True)]
    with pytest.raises(RuntimeError, match="ended"):
        env.step("left")
    with pytest.raises(TypeError):
        env.step(3)  # type: ignore[arg-type]


def test_compact_rendering_worked_example():
    env = make("frozenlake", render="compact")
    obs, info = env.reset(seed=0)
    # start (0,0): walls up and left, F right (0,1) and down (1,0); G is 3 rows and 3 cols away
    assert obs == "pos 0 0 left wall down F right F up wall goal 3 down 3 right"
    obs, *_ = env.step("right")
    # (0,1): S on the left, H below at (1,1), F at (0,2)
    assert obs == "pos 0 1 left S down H right F up wall goal 3 down 2 right"
    assert info["anchor"].startswith("A F F F")  # the anchor stays the full state


def _compact_from_grid(grid: str, goal: tuple[int, int]) -> str:
    """Plain-loop re-derivation of the compact text from the grid text."""
    rows = [line.split() for line in grid.split("\n")]
    r, c = next((i, row.index("A")) for i, row in enumerate(rows) if "A" in row)
    words = ["pos", str(r), str(c)]
    for name, (dr, dc) in zip(ACTIONS, [(0, -1), (1, 0), (0, 1), (-1, 0)], strict=True):
        inside = 0 <= r + dr < len(rows) and 0 <= c + dc < len(rows[0])
        words += [name, rows[r + dr][c + dc] if inside else "wall"]
    dr, dc = goal[0] - r, goal[1] - c
    tail = [str(abs(dr)), "down" if dr > 0 else "up"] if dr else []
    tail += [str(abs(dc)), "right" if dc > 0 else "left"] if dc else []
    return " ".join([*words, "goal", *(tail or ["here"])])


@pytest.mark.parametrize("seed", range(6))
def test_compact_agrees_with_grid_on_random_walks(seed):
    kwargs = dict(map_name="random", map_size=6, is_slippery=True)
    grid, compact = make("frozenlake", **kwargs), make("frozenlake", render="compact", **kwargs)
    rng = random.Random(seed)
    obs_g, _ = grid.reset(seed=seed)
    obs_c, _ = compact.reset(seed=seed)
    goal = (5, 5)  # generate_random_map puts G in the bottom-right corner
    for _ in range(30):
        assert obs_c == _compact_from_grid(obs_g, goal)
        action = rng.choice(ACTIONS)
        obs_g, _, term, trunc, info_g = grid.step(action)
        obs_c, _, _, _, info_c = compact.step(action)
        assert info_g["anchor"] == info_c["anchor"]  # anchors do not depend on the rendering
        if term or trunc:
            break


def test_random_maps_follow_gymnasium_generator_by_seed():
    env = make("frozenlake", map_name="random", map_size=5, frozen_prob=0.7)
    for seed in (1, 2, 3):
        obs, _ = env.reset(seed=seed)
        expected = generate_random_map(size=5, p=0.7, seed=seed)
        cells = [line.split() for line in obs.split("\n")]
        cells[0][0] = "S"  # the agent starts on S
        assert ["".join(row) for row in cells] == expected


def test_same_seed_same_trajectory_even_when_slippery():
    actions = [random.Random(0).choice(ACTIONS) for _ in range(40)]
    runs = []
    for _ in range(2):
        env = make("frozenlake", map_name="random", map_size=8, is_slippery=True, max_steps=40)
        env.reset(seed=11)
        runs.append(rollout(env, actions))
    assert runs[0] == runs[1]
    maps = {make("frozenlake", map_name="random").reset(seed=s)[0] for s in range(8)}
    assert len(maps) > 1  # different seeds give different maps


def test_slippery_moves_sometimes_sideways():
    env = make("frozenlake", map_name="random", map_size=8, frozen_prob=1.0, is_slippery=True)
    env.reset(seed=0)
    sideways = 0
    for _ in range(40):  # all-frozen map, so the episode only ends at G
        before = env._last[1]["position"]
        _, _, term, _, info = env.step("down")
        sideways += info["position"][0] == before[0] and before[0] < 7
        if term:
            break
    assert sideways > 0


@pytest.mark.parametrize("seed", range(4))
def test_snapshot_and_replay_fallback_restore_identical_futures(seed):
    env = make("frozenlake", map_name="random", map_size=6, is_slippery=True, max_steps=60)
    rng = random.Random(seed)
    env.reset(seed=seed)
    prefix = [rng.choice([*ACTIONS, "fly"]) for _ in range(3)]
    for action in prefix:
        _, _, term, trunc, _ = env.step(action)
        if term or trunc:
            pytest.skip("prefix ended the episode")
    state_obs, state_anchor = env._last[0], env._last[1]["anchor"]
    cheap, replay = env.snapshot(), TextEnv.snapshot(env)
    future = [rng.choice(ACTIONS) for _ in range(20)]
    reference = rollout(env, future)
    for snap in (cheap, replay, cheap):  # restoring twice from one snapshot works too
        obs, info = env.restore(snap)
        assert (obs, info["anchor"]) == (state_obs, state_anchor)
        assert rollout(env, future) == reference
    other = make("frozenlake", map_name="random", map_size=6, is_slippery=True, max_steps=60)
    other.reset(seed=seed + 100)  # a different map: restore must bring the snapshot's map
    assert other.restore(cheap)[0] == state_obs and rollout(other, future) == reference


@pytest.mark.parametrize("render", ["grid", "compact"])
def test_observation_words_are_in_vocabulary(render):
    env = make("frozenlake", map_name="random", map_size=7, render=render, is_slippery=True)
    vocab = set(env.vocabulary())
    assert set(ACTIONS) <= vocab
    rng = random.Random(0)
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        seen = set(obs.split())
        for _ in range(30):
            obs, _, term, trunc, _ = env.step(rng.choice(ACTIONS))
            seen |= set(obs.split())
            if term or trunc:
                break
        assert seen <= vocab, seen - vocab


@pytest.mark.parametrize(
    "options",
    [
        {"map_name": "5x5"},
        {"render": "ascii"},
        {"is_slippery": "yes"},
        {"step_cost": -0.1},
        {"max_steps": 0},
        {"map_size": 1},
        {"frozen_prob": 0.0},
        {"bogus": 1},
    ],
)
def test_bad_options_raise_value_error(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        make("frozenlake", **options)


def test_snapshot_before_reset_and_foreign_snapshots_fail():
    env = make("frozenlake")
    with pytest.raises(RuntimeError, match="reset"):
        env.snapshot()
    env.reset(seed=0)
    with pytest.raises(TypeError):
        env.restore("state")


def test_unseeded_reset_records_its_seed_so_replay_is_exact():
    env = make("frozenlake", map_name="random", is_slippery=True, max_steps=60)
    for _ in range(100):  # the drawn map/slips may end the episode within the prefix
        env.reset()  # seed=None: the env draws a seed and keeps it for the replay fallback
        if not any(term or trunc for _, _, term, trunc, _, _ in rollout(env, ["down", "right"])):
            break
    else:
        pytest.fail("100 unseeded resets all ended within two steps")
    snap = TextEnv.snapshot(env)
    assert isinstance(snap.seed, int)
    state_obs, future = env._last[0], ["right", "down", "down", "right"] * 3
    reference = rollout(env, future)
    assert env.restore(snap)[0] == state_obs and rollout(env, future) == reference


def test_gold_action_walks_a_shortest_hole_free_path():
    env = make("frozenlake", map_name="4x4")  # SFFF / FHFH / FFFH / HFFG
    env.reset(seed=0)
    moves = []
    while (gold := env.gold_action()) is not None:
        moves.append(gold)
        *_, info = env.step(gold)
    # 6 moves is the Manhattan distance; the hole at (1, 1) forces down, down first
    assert moves == ["down", "down", "right", "down", "right", "right"] and info["success"]
    env.reset(seed=0)
    env.step("right")
    env.step("down")  # into the hole at (1, 1): the episode is over
    assert env.gold_action() is None
    assert FrozenLake.example_action in ACTIONS
