"""The TextEnv base class: a step that raises leaves the recorded state as it was."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.envs import StepResult, TextEnv


class _Counter(TextEnv):
    """Counts "inc" actions; "boom" raises (an env bug, or a checker that gave up)."""

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.n = seed or 0
        return str(self.n), {"anchor": self.n}

    def _step(self, action: str) -> StepResult:
        if action == "boom":
            raise RuntimeError("boom")
        self.n += 1
        return str(self.n), 0.0, False, False, {"anchor": self.n}


def test_a_failed_step_is_not_recorded_so_its_snapshot_restores():
    env = _Counter()
    env.reset(seed=5)
    env.step("inc")
    with pytest.raises(RuntimeError, match="boom"):
        env.step("boom")
    snap = env.snapshot()
    assert snap.actions == ("inc",)  # the raising action never happened
    other = _Counter()
    obs, info = other.restore(snap)  # replaying "boom" would raise here
    assert (obs, info["anchor"]) == ("6", 6)


def test_next_on_path_follows_a_walkthrough_only_while_on_it():
    from cairn.envs._common import next_on_path

    gold = ["open door", "go north", "take coin"]
    assert next_on_path(gold, []) == "open door"
    assert next_on_path(gold, ["Open  Door"]) == "go north"  # case and spaces do not matter
    assert next_on_path(gold, ["open door", "go south"]) is None  # off the path
    assert next_on_path(gold, gold) is None  # past its end
    assert TextEnv.gold_action(object.__new__(_Counter)) is None  # the default knows none


def test_code_options_are_known_without_importing_the_env():
    """The registry states an env's code options as a trait (the dataset env's reward and
    feedback functions), the same as its class declares; a class registered as itself
    declares them on the class."""
    import sys

    from cairn.envs import ENVS, code_options, register

    assert code_options("dataset") == ("reward", "feedback") and code_options("sokoban") == ()
    assert code_options("not_registered") == ()
    for name, (target, _) in ENVS.entries.items():
        module = target.partition(":")[0] if isinstance(target, str) else ""
        if module in sys.modules or name == "dataset":  # imported already, or cheap
            assert code_options(name) == ENVS.get(name).code_options, name

    class _Scored(_Counter):
        code_options = ("scorer",)

    register("scored_counter", _Scored, code_options=("checker",))
    try:
        assert code_options("scored_counter") == ("checker", "scorer")
    finally:
        del ENVS.entries["scored_counter"]
