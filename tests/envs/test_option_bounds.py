"""Every env option that sizes memory or time is bounded: sokoban's size (old code reached
7.6 GB at size 2000), every env's max_steps (1e12 was accepted and never ended), TextWorld's
pool of generated games and TextWorld-Express's game parameters; the error says why."""

from __future__ import annotations

import inspect

import pytest

from cairn.envs import ENVS, make
from cairn.envs._common import MAX_EPISODE_STEPS


def _with_max_steps() -> list[str]:
    names = []
    for name in sorted(ENVS.entries):
        try:
            cls = ENVS.get(name)
        except ImportError:  # an optional extra that is not installed
            continue
        if "max_steps" in inspect.signature(cls.__init__).parameters:
            names.append(name)
    return names


@pytest.mark.parametrize("name", _with_max_steps())
def test_max_steps_is_bounded_on_every_env(name):
    with pytest.raises(ValueError, match=rf"max_steps must be \[1, {MAX_EPISODE_STEPS}\]"):
        make(name, max_steps=10**12)


@pytest.mark.parametrize("size", [2000, (6, 33), (40, 6)])
def test_sokoban_size_is_bounded(size):
    with pytest.raises(ValueError, match=r"size must be an int >= 3 \(at most 32\)"):
        make("sokoban", size=size)


def test_sokoban_fixed_room_is_bounded():
    room = "\n".join(["#" * 40, "#@$." + " " * 35 + "#", "#" * 40])
    with pytest.raises(ValueError, match="room must be at most 32x32"):
        make("sokoban", room=room)


def test_the_largest_bounded_sokoban_still_builds():
    env = make("sokoban", size=32, max_steps=MAX_EPISODE_STEPS, walls=0.0)
    obs, _ = env.reset(seed=0)
    assert obs and env.max_steps == MAX_EPISODE_STEPS


def test_textworld_num_games_is_bounded_with_the_reason():
    pytest.importorskip("textworld")
    from cairn.envs.textworld import MAX_GAMES

    with pytest.raises(ValueError, match=rf"num_games must be \[1, {MAX_GAMES}\], got 10000001 "):
        make("textworld", num_games=10_000_001)
    with pytest.raises(ValueError, match=r"1-6 s, and cached, ~0.4 MB: 10000 games are up to"):
        make("textworld", num_games=MAX_GAMES + 1)
    assert make("textworld", num_games=MAX_GAMES).num_games == MAX_GAMES  # builds nothing yet


@pytest.mark.parametrize(
    "params", ["numLocations=1000000", {"numLocations": 10**9}, "numDistractorItems=-1"]
)
def test_twx_game_params_are_bounded_with_the_reason(params):
    pytest.importorskip("textworld_express")
    from cairn.envs.twx import MAX_PARAM

    with pytest.raises(ValueError, match=rf"must be \[0, {MAX_PARAM}\], got .*simonsays"):
        make("twx", game_params=params)


def test_the_largest_twx_game_param_is_accepted_before_the_jvm_starts():
    pytest.importorskip("textworld_express")
    env = make("twx", game="simonsays", game_params="gameLength=1000,numDistractors=0")
    assert env.game_params == "gameLength=1000,numDistractors=0"
