"""TextWorld-Express env: gold paths, failure, invalid input, replay snapshots, seeds, options.

One JVM (the arithmetic game) serves most of the module through the ``env`` fixture.
"""

from __future__ import annotations

import os
import random
import shutil
import time

import pytest

pytest.importorskip("textworld_express", reason="twx env needs the 'twx' extra")
if shutil.which("java") is None:
    pytest.skip(
        "textworld-express needs a Java runtime (java not on PATH)", allow_module_level=True
    )

from cairn.envs import make
from cairn.envs._jvm import JvmDied
from cairn.envs.base import ReplaySnapshot
from cairn.envs.twx import (
    GAMES,
    INVALID_OBSERVATION,
    TextWorldExpress,
    format_game_params,
    normalize_action,
)

# train seed 0 of "arithmetic": the math problem is "divide 22 by 11", so the answer 2 means
# the 2 bananas go in the box; reading the problem and boxing the bananas are worth 1 point each
ARITHMETIC_GOLD = [
    "look around",
    "take math problem",
    "read math problem",
    "take 2 bananas",
    "put 2 bananas in box",
]


def java_children() -> set[int]:
    """Pids of java processes whose parent is this test process."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == os.getpid() and b"java" in cmd:
            pids.add(int(entry))
    return pids


@pytest.fixture(scope="module")
def env():
    twx = TextWorldExpress(game="arithmetic")
    yield twx
    twx.close()


def run(env: TextWorldExpress, actions: list[str]) -> list[tuple]:
    """(obs, reward, terminated, truncated, valid, admissible) per step, stopping at the end."""
    out = []
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        out.append((obs, reward, term, trunc, info["valid"], tuple(info["admissible"])))
        if term or trunc:
            break
    return out


# -- options -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"game": "zork"}, "game must be one of"),
        ({"game_params": "numLocations:5"}, "name=integer"),
        ({"game_params": "numLocations=five"}, "name=integer"),
        ({"game_params": {"numLocations": "5"}}, "must be an int"),
        ({"game_params": 5}, "must be a str or a mapping"),
        ({"split": "valid"}, "split must be one of"),
        ({"raw_score": "no"}, "raw_score must be True or False"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        TextWorldExpress(**options)


def test_game_params_accept_a_string_or_a_mapping():
    assert format_game_params({"numLocations": 3, "includeDoors": 0}) == (
        "numLocations=3,includeDoors=0"
    )
    assert format_game_params(" numLocations=3 , includeDoors=0,") == (
        "numLocations=3,includeDoors=0"
    )
    assert normalize_action("  Take   2 Bananas ") == "take 2 bananas"
    assert {"cookingworld", "coin", "mapreader", "arithmetic", "sorting", "twc"} <= set(GAMES)


def test_registry_builds_it_and_rejects_unknown_options():
    assert isinstance(make("twx", game="coin"), TextWorldExpress)
    with pytest.raises(ValueError, match="no option 'seed'"):
        make("twx", seed=3)


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        TextWorldExpress().step("look around")


# -- episodes -------------------------------------------------------------------------------------
def test_arithmetic_gold_path_rewards_and_success(env):
    obs, info = env.reset(seed=0)
    assert env.vocabulary() == [] and "math problem" in env.instruction
    assert "2 bananas" in obs and info["anchor"] == obs and info["valid"] is True
    assert (
        info["admissible"] == sorted(info["admissible"])
        and "take math problem" in (info["admissible"])
    )
    assert env.gold_actions() == ARITHMETIC_GOLD
    steps = run(env, ARITHMETIC_GOLD)
    # 2 points in all: reading the problem (1) and boxing the right item (1); score = points / 2
    assert [s[1] for s in steps] == [0.0, 0.0, 0.5, 0.0, 0.5]
    assert [s[2] for s in steps] == [False] * 4 + [True]
    assert env.snapshot().actions == tuple(ARITHMETIC_GOLD)
    with pytest.raises(RuntimeError, match="ended"):
        env.step("look around")


def test_raw_score_gives_points():
    with TextWorldExpress(game="arithmetic", raw_score=True) as twx:
        twx.reset(seed=0)
        steps = run(twx, ARITHMETIC_GOLD)
        assert [s[1] for s in steps] == [0.0, 0.0, 1.0, 0.0, 1.0]


def test_boxing_the_wrong_item_fails(env):
    env.reset(seed=0)
    run(env, ["take math problem", "read math problem", "take 6 oranges"])
    obs, reward, term, trunc, info = env.step("put 6 oranges in box")
    assert obs == "You put the 6 oranges in the box."
    # 6 is not 22 / 11: the game fails the task and sets the score to -1 from 0.5
    assert (reward, term, trunc, info["success"], info["score"]) == (-1.5, True, False, False, -1.0)


def test_inadmissible_input_is_invalid_not_sent_and_changes_nothing(env):
    obs0, info0 = env.reset(seed=0)
    for bad in ["xyzzy", "", "take 3 bananas", "put math problem in box", "eat box"]:
        obs, reward, term, trunc, info = env.step(bad)
        assert obs == INVALID_OBSERVATION
        assert (reward, term, trunc, info["valid"]) == (0.0, False, False, False)
        assert info["anchor"] == obs0 and info["admissible"] == info0["admissible"]
    # case and spacing are normalised before the admissibility check
    assert env.step("  TAKE   Math Problem ")[4]["valid"] is True


def test_invalid_inputs_between_gold_moves_do_not_alter_the_trajectory(env):
    env.reset(seed=0)
    clean = run(env, ARITHMETIC_GOLD)
    env.reset(seed=0)
    noisy = []
    for action in ARITHMETIC_GOLD:
        assert env.step("dance")[4]["valid"] is False
        noisy += run(env, [action])
    assert noisy == clean


# -- seeds and snapshots ------------------------------------------------------------------------
def test_seeds_index_the_split_and_repeat_exactly(env):
    seeds = env.split_seeds()
    assert len(seeds) == 1000 and seeds[:3] == (0, 1, 2)  # the package's train seeds
    first = env.reset(seed=5)
    assert env.game_seed == 5 and env.reset(seed=5) == first
    assert env.reset(seed=1005) == first  # 1005 % 1000 = 5
    assert env.reset(seed=6)[0] != first[0]


def test_splits_hold_disjoint_seeds():
    with TextWorldExpress(game="arithmetic", split="dev") as dev:
        dev.reset(seed=0)
        assert dev.game_seed not in range(1000)
        assert not set(dev.split_seeds()) & set(range(1000))


def test_restore_equals_replay_on_random_prefixes(env):
    rng = random.Random(0)
    for trial in range(5):
        obs, info = env.reset(seed=trial)
        prefix = []
        for _ in range(rng.randint(0, 4)):
            prefix.append(rng.choice([*info["admissible"], "xyzzy"]))
            obs, _, term, _, info = env.step(prefix[-1])
            if term:
                break
        if term:
            continue
        snap = env.snapshot()
        future = [rng.choice(info["admissible"]) for _ in range(3)]
        expected = run(env, future)
        env.reset(seed=trial + 100)  # somewhere else entirely
        restored_obs, restored_info = env.restore(snap)
        assert isinstance(snap, ReplaySnapshot) and snap.actions == tuple(prefix)
        assert restored_obs == obs and restored_info["admissible"] == info["admissible"]
        assert run(env, future) == expected


def test_reset_without_seed_draws_one_that_replays(env):
    obs, _ = env.reset()
    snap = env.snapshot()
    assert isinstance(snap.seed, int)
    env.reset(seed=snap.seed + 1)
    assert env.restore(snap)[0] == obs


def test_unknown_game_parameter_is_reported_at_the_first_reset():
    before = java_children()
    twx = TextWorldExpress(game="coin", game_params="numRooms=3")
    with pytest.raises(ValueError, match="numRooms"):
        twx.reset(seed=0)
    assert java_children() == before  # the JVM started for the check was stopped


# -- lifetime ------------------------------------------------------------------------------------
def test_coin_gold_path_truncation_and_clean_close():
    before = java_children()
    coin = {"game": "coin", "game_params": {"numLocations": 1}, "max_steps": 2}
    with TextWorldExpress(**coin, share_jvm=False) as twx:
        _obs, info = twx.reset(seed=0)
        assert len(java_children() - before) == 1  # a JVM of its own
        # one room: the coin is in sight, so "take coin" ends the game with the full score
        assert twx.step("take coin")[1:3] == (1.0, True)
        twx.reset(seed=0)
        twx.step("look around")
        _, _, term, trunc, info = twx.step("xyzzy")  # invalid steps count toward the budget
        assert (term, trunc, info["success"]) == (False, True, False)
    assert java_children() == before
    twx.close()  # idempotent


def play(envs: list[TextWorldExpress], seeds: list[int], turns: int) -> list[list[str]]:
    """Interleaved episodes: each turn, every env takes its first admissible action."""
    starts = [env.reset(seed=seed) for env, seed in zip(envs, seeds, strict=True)]
    obs = [[o] for o, _info in starts]
    admissible = [info["admissible"] for _o, info in starts]
    for _ in range(turns):
        for i, env in enumerate(envs):
            if admissible[i]:
                o, _r, term, trunc, info = env.step(admissible[i][0])
                obs[i].append(o)
                admissible[i] = [] if term or trunc else info["admissible"]
    return obs


def test_envs_of_a_process_share_one_jvm_and_play_as_if_alone():
    games = [{"game": "coin", "game_params": "numLocations=3"}, {"game": "arithmetic"}]
    alone = []
    for options in games:
        with TextWorldExpress(**options, share_jvm=False) as twx:
            alone += play([twx], [3], turns=4)
    before = java_children()
    envs = [TextWorldExpress(**options) for options in games]
    try:
        assert play(envs, [3, 3], turns=4) == alone
        assert len(java_children() - before) <= 1
        assert envs[0]._gateway is envs[1]._gateway
    finally:
        for twx in envs:
            twx.close()


def test_a_dead_shared_jvm_costs_one_episode_and_the_others_replay():
    options = {"game": "coin", "game_params": "numLocations=3", "max_steps": 8}
    with TextWorldExpress(**options, share_jvm=False) as twx:
        (expected,) = play([twx], [5], turns=3)
    first, second = TextWorldExpress(**options), TextWorldExpress(**options)
    try:
        play([first, second], [4, 5], turns=2)
        gateway = second._gateway
        gateway.java_process.kill()
        gateway.java_process.wait()
        with pytest.raises(JvmDied, match="exited"):
            first.step("look around")
        # the second env moves to a fresh JVM, replays its two moves, and goes on exactly
        action = second._info(valid=True)["admissible"][0]  # the last state, held in Python
        assert second.step(action)[0] == expected[3]
        assert second._gateway is not gateway and second._gateway.java_process.poll() is None
        assert first.reset(seed=4)[0]  # a reset after the lost episode starts afresh
    finally:
        first.close()
        second.close()


@pytest.mark.slow
@pytest.mark.parametrize("game", ["cookingworld", "coin", "mapreader", "sorting", "twc"])
def test_every_game_is_solved_by_its_gold_path(game):
    with TextWorldExpress(game=game, max_steps=200) as twx:
        for seed in (0, 1):
            twx.reset(seed=seed)
            steps = run(twx, twx.gold_actions())
            assert steps[-1][2] and sum(s[1] for s in steps) == pytest.approx(1.0)
            assert all(s[4] for s in steps)


@pytest.mark.slow
def test_throughput(env):
    rng = random.Random(0)
    _, info = env.reset(seed=0)
    n, start = 3000, time.perf_counter()
    for i in range(n):
        _, _, term, trunc, info = env.step(rng.choice(info["admissible"]))
        if term or trunc:
            _, info = env.reset(seed=i)
    rate = n / (time.perf_counter() - start)
    print(f"twx arithmetic: {rate:.0f} steps/s (random admissible actions, resets included)")
    assert rate > 300


def test_gold_action_follows_the_gold_path_until_the_episode_leaves_it(env):
    env.reset(seed=0)
    seen = []
    while (gold := env.gold_action()) is not None:
        seen.append(gold)
        env.step(gold)
    assert seen == ARITHMETIC_GOLD
    env.reset(seed=0)
    env.step("inventory")  # not the walkthrough's first action
    assert env.gold_action() is None
