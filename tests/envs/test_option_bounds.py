"""Every env option that sizes memory or time is bounded: sokoban's size (old code reached
7.6 GB at size 2000) and every env's max_steps (1e12 was accepted and never ended)."""

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
