"""TextWorld env: generated games, walkthroughs, invalid input, replay snapshots, cache, options.

Games live in pytest's cache folder (keyed by settings, seed and TextWorld version, so a
stale entry cannot be served), shared by xdist workers and kept between runs: the fast
tests need two coin-collector games (level 3: three rooms, a three-move walkthrough),
which cost a few seconds to generate the first time.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

pytest.importorskip("textworld", reason="textworld env needs the 'textworld' extra")

import cairn.envs.textworld as tw_module
from cairn.envs import make
from cairn.envs.base import ReplaySnapshot
from cairn.envs.textworld import (
    DEFAULT_SETTINGS,
    INVALID_OBSERVATION,
    TextWorld,
    cached_game,
    clean_feedback,
    game_settings,
    normalize_action,
)

COIN3 = {"level": 3}  # quest length 3: two moves and "take coin", one room per move


@pytest.fixture(scope="module")
def cache(request, tmp_path_factory) -> Path:
    if request.config.cache is None:  # cache provider disabled
        return tmp_path_factory.mktemp("textworld-cache")
    return request.config.cache.mkdir("cairn-textworld-games")


def no_build(*args: object) -> None:
    raise AssertionError("cache miss: a game was generated again")


@pytest.fixture(scope="module")
def env(cache):
    game = TextWorld(game="coin_collector", settings=COIN3, cache_dir=cache)
    yield game
    game.close()


def run(env: TextWorld, actions: list[str]) -> list[tuple]:
    """(obs, reward, terminated, truncated, valid, admissible) per step, stopping at the end."""
    out = []
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        out.append((obs, reward, term, trunc, info["valid"], tuple(info["admissible"])))
        if term or trunc:
            break
    return out


def child_processes() -> set[int]:
    pids = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    pids.add(int(entry))
        except OSError:
            continue
    return pids


# -- options and helpers (no game needed) ----------------------------------------------------------
def test_module_name_does_not_shadow_the_textworld_package():
    assert tw_module.textworld.__name__ == "textworld"
    assert hasattr(tw_module.textworld, "start") and tw_module.__name__ == "cairn.envs.textworld"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"game": "zork"}, "game must be one of"),
        ({"settings": {"levle": 2}}, "no setting 'levle'; allowed: level"),
        ({"settings": [("level", 2)]}, "settings must be a mapping"),
        ({"settings": {"level": 0}}, "level"),
        ({"settings": {"level": 250}}, "needs 150 rooms"),
        ({"game": "treasure_hunter", "settings": {"level": 31}}, r"\[1, 30\]"),
        ({"game": "cooking", "settings": {"go": 5}}, "1, 6, 9 or 12"),
        ({"game": "cooking", "settings": {"recipe": 2, "take": 3}}, "take"),
        ({"game": "cooking", "settings": {"cut": 1}}, "True or False"),
        ({"game": "cooking", "settings": {"split": "dev"}}, "split"),
        ({"game": "custom", "settings": {"world_size": 0}}, "world_size"),
        ({"num_games": 0}, "num_games"),
        ({"cache_dir": 3}, "cache_dir must be a path"),
        ({"raw_score": "yes"}, "raw_score must be True or False"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        TextWorld(**options)


def test_settings_fill_in_defaults_and_registry_builds_the_env(tmp_path):
    full = game_settings("cooking", {"recipe": 2, "cut": True})
    assert full == {**DEFAULT_SETTINGS["cooking"], "recipe": 2, "cut": True}
    assert game_settings("custom", None) == DEFAULT_SETTINGS["custom"]
    env = make("textworld", game="custom", cache_dir=tmp_path)
    assert isinstance(env, TextWorld) and env.vocabulary() == []
    assert TextWorld().cache_dir == Path.home() / ".cache" / "cairn" / "textworld"


def test_clean_feedback_drops_banner_prompt_status_and_blank_runs():
    raw = (
        "\n\n   ________  \n  |  $$  \\$$ /  $$\n\n"
        "Find the coin.\n\n-= Attic =-\nDusty.\n\n\n\n"
        ">                                      -= Attic =-0/1"
    )
    assert clean_feedback(raw) == "Find the coin.\n\n-= Attic =-\nDusty."
    assert clean_feedback("\nYou drop it.\n\n\n>     -= Attic =-0/4") == "You drop it."
    assert normalize_action("  Go   NORTH ") == "go north"


def test_step_before_reset_raises(tmp_path):
    with pytest.raises(RuntimeError, match="reset"):
        TextWorld(cache_dir=tmp_path).step("look")


# -- episodes --------------------------------------------------------------------------------------
def test_walkthrough_wins_with_reward_one(env):
    obs, info = env.reset(seed=0)
    assert obs.startswith(env.instruction) and "-= " in obs and ">" not in obs
    assert info["anchor"] == obs and info["valid"] and info["success"] is False
    gold = env.gold_actions()
    assert len(gold) == 3 and gold[-1] == "take coin"  # level 3: two moves, then the coin
    steps = run(env, gold)
    # the coin is the only point (max score 1), scored by the last move
    assert [s[1] for s in steps] == [0.0, 0.0, 1.0]
    assert [s[2] for s in steps] == [False, False, True] and all(s[4] for s in steps)
    assert all(a in s[5] for a, s in zip(gold[1:], steps, strict=False))
    with pytest.raises(RuntimeError, match="ended"):
        env.step("look")


def test_inadmissible_input_is_invalid_not_sent_and_changes_nothing(env):
    obs0, info0 = env.reset(seed=0)
    moves = env._state["moves"]
    for bad in ["xyzzy", "", "take coin", "go up", "eat the cellar"]:
        obs, reward, term, trunc, info = env.step(bad)
        assert obs == INVALID_OBSERVATION
        assert (reward, term, trunc, info["valid"]) == (0.0, False, False, False)
        assert (info["anchor"], info["admissible"]) == (obs0, info0["admissible"])
    assert env._state["moves"] == moves  # nothing reached the interpreter
    assert env.step("  LOOK ")[4]["valid"] is True  # case and spaces are normalised


def test_invalid_inputs_between_walkthrough_moves_do_not_alter_the_trajectory(env):
    env.reset(seed=0)
    gold = env.gold_actions()
    clean = run(env, gold)
    env.reset(seed=0)
    noisy = []
    for action in gold:
        assert env.step("dance")[4]["valid"] is False
        noisy += run(env, [action])
    assert noisy == clean


def test_truncation_counts_invalid_steps(cache):
    with TextWorld(game="coin_collector", settings=COIN3, cache_dir=cache, max_steps=2) as env:
        env.reset(seed=0)
        assert env.step("look")[3] is False
        _, _, term, trunc, info = env.step("xyzzy")
        assert (term, trunc, info["success"]) == (False, True, False)


# -- seeds, cache, snapshots -----------------------------------------------------------------------
def test_same_seed_same_game_and_different_seeds_differ(env):
    first = env.reset(seed=0)
    assert env.reset(seed=1)[0] != first[0]
    assert env.reset(seed=0) == first


def test_num_games_maps_seeds_onto_a_cached_pool(cache, env, monkeypatch):
    env.reset(seed=0)
    second = env.reset(seed=1)  # games 0 and 1 are on disk now
    monkeypatch.setattr(tw_module, "_build", no_build)
    with TextWorld(game="coin_collector", settings=COIN3, cache_dir=cache, num_games=2) as pool:
        first = pool.reset(seed=0)
        assert pool.reset(seed=4) == first and pool.game_seed == 0  # 4 % 2 = 0
        assert pool.reset(seed=7) == second and pool.game_seed == 1


def test_a_cached_game_is_never_rebuilt(cache, env, monkeypatch):
    env.reset(seed=0)  # make sure the game is on disk
    monkeypatch.setattr(tw_module, "_build", no_build)
    with TextWorld(game="coin_collector", settings=COIN3, cache_dir=cache) as fresh:
        assert fresh.reset(seed=0)[0] == env.reset(seed=0)[0]
    path = cached_game("coin_collector", game_settings("coin_collector", COIN3), 0, cache)
    assert json.loads(path.with_suffix(".json").read_text())["metadata"]["walkthrough"] == (
        env.gold_actions()
    )


def test_cache_builds_each_key_once_and_a_failed_build_leaves_nothing(tmp_path, monkeypatch):
    calls = []

    def fake_build(game: str, settings: dict, seed: int, path: Path) -> None:
        calls.append((settings["level"], seed))
        path.with_suffix(".json").write_text("{}")
        if seed == 13:
            raise RuntimeError("compiler crashed")
        path.write_text(f"level {settings['level']} seed {seed}")

    monkeypatch.setattr(tw_module, "_build", fake_build)
    level1 = game_settings("coin_collector", None)
    a = cached_game("coin_collector", level1, 0, tmp_path)
    assert cached_game("coin_collector", level1, 0, tmp_path) == a  # second call: a hit
    b = cached_game("coin_collector", {**level1, "level": 2}, 0, tmp_path)
    c = cached_game("coin_collector", level1, 1, tmp_path)
    assert calls == [(1, 0), (2, 0), (1, 1)] and len({a, b, c}) == 3
    assert c.read_text() == "level 1 seed 1"
    with pytest.raises(RuntimeError, match="compiler crashed"):
        cached_game("coin_collector", level1, 13, tmp_path)
    kept = {p.name for p in (tmp_path / "coin_collector").iterdir() if not p.name.endswith("lock")}
    # only whole games: no scratch folder, no lone .json of the failed build
    assert kept == {p.name for x in (a, b, c) for p in (x, x.with_suffix(".json"))}


def test_restore_equals_replay_on_random_prefixes(env):
    rng = random.Random(0)
    for _ in range(4):
        obs, info = env.reset(seed=0)
        prefix = []
        for _ in range(rng.randint(0, 3)):
            prefix.append(rng.choice([*info["admissible"], "xyzzy"]))
            obs, _, term, _, info = env.step(prefix[-1])
            if term:
                break
        if term:
            continue
        snap = env.snapshot()
        future = [rng.choice(info["admissible"]) for _ in range(2)]
        expected = run(env, future)
        env.reset(seed=0)
        run(env, env.gold_actions()[:1])  # somewhere else
        restored_obs, restored_info = env.restore(snap)
        assert isinstance(snap, ReplaySnapshot) and snap.actions == tuple(prefix)
        assert restored_obs == obs and restored_info["admissible"] == info["admissible"]
        assert run(env, future) == expected


def test_close_is_idempotent_and_leaves_no_process(cache):
    before = child_processes()
    env = TextWorld(game="coin_collector", settings=COIN3, cache_dir=cache)
    env.reset(seed=0)
    env.close()
    env.close()
    assert child_processes() == before
    env.reset(seed=0)  # a closed env can start again
    env.close()


# -- the other games (each costs a few seconds to generate) ----------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("game", "settings"),
    [
        ("treasure_hunter", {"level": 5}),
        ("cooking", {"recipe": 2, "take": 1, "go": 6, "open": True, "cook": True, "cut": True}),
        ("custom", {"world_size": 4, "nb_objects": 6, "quest_length": 3}),
    ],
)
def test_walkthroughs_win_the_other_games(game, settings, cache):
    with TextWorld(game=game, settings=settings, cache_dir=cache, max_steps=100) as env:
        for seed in (0, 1):
            env.reset(seed=seed)
            steps = run(env, env.gold_actions())
            assert steps[-1][2] and all(s[4] for s in steps)
            assert sum(s[1] for s in steps) == pytest.approx(1.0)


@pytest.mark.slow
def test_raw_score_counts_points_of_a_cooking_game(cache):
    settings = {"recipe": 1, "go": 1}
    # recipe 1 in one room: "prepare meal" and "eat meal" are worth a point each (max 2)
    with TextWorld(game="cooking", settings=settings, cache_dir=cache, raw_score=True) as env:
        env.reset(seed=0)
        raw = [s[1] for s in run(env, env.gold_actions())]
    with TextWorld(game="cooking", settings=settings, cache_dir=cache) as env:
        env.reset(seed=0)
        scaled = [s[1] for s in run(env, env.gold_actions())]
    assert sum(raw) == 2.0 and raw[-2:] == [1.0, 1.0]
    assert scaled == [r / 2 for r in raw]


@pytest.mark.slow
def test_generation_is_deterministic_across_caches(tmp_path):
    settings = game_settings("custom", {"world_size": 2, "nb_objects": 2, "quest_length": 1})
    a = cached_game("custom", settings, 5, tmp_path / "a")
    b = cached_game("custom", settings, 5, tmp_path / "b")
    assert a.name == b.name and a.read_bytes() == b.read_bytes()


def test_gold_action_follows_the_walkthrough_until_the_episode_leaves_it(env):
    env.reset(seed=0)
    gold, seen = env.gold_actions(), []
    while (action := env.gold_action()) is not None:
        seen.append(action)
        env.step(action)
    assert seen == gold
    env.reset(seed=0)
    env.step("dance")  # an invalid command leaves the walkthrough
    assert env.gold_action() is None
