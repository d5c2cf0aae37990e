"""``cairn.envs.testing.check_env``: every registered env passes it, and a deliberately
broken env fails it naming the clause it breaks (one broken env per clause)."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.envs import TextEnv, available, env_class, env_traits, make
from cairn.envs.testing import CLAUSES, EnvCheckError, check_env

# Every registered env, from the registry (a new one is covered by registering it); the
# envs registered with ``slow=True`` (a process to start, games to generate) are slow tests.
REGISTERED = [
    pytest.param(n, marks=[pytest.mark.slow] if env_traits(n).get("slow") else [])
    for n in available()
]


@pytest.mark.parametrize("name", REGISTERED)
def test_every_registered_env_passes(name: str) -> None:
    try:
        env_class(name)
    except ImportError as err:
        pytest.skip(f"{name}: optional extra not installed ({err})")
    env = make(name)
    try:
        check_env(env, invalid_keeps_anchor=True)  # raises EnvCheckError naming a clause
    finally:
        env.close()


def test_a_name_is_built_with_options() -> None:
    check_env("countdown", max_steps=3)
    with pytest.raises(ValueError, match="no option 'nope'"):
        check_env("countdown", nope=1)


class Guess(TextEnv):
    """A correct env: guess a number in 0-3 within 3 tries (``guess[n]``)."""

    instruction = "Guess the number between 0 and 3."
    example_action = "guess[0]"

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.target, self.tries = (seed or 0) % 4, 0
        return "guess", self._info(True)

    def _info(self, valid: bool, success: bool = False) -> dict[str, Any]:
        return {"anchor": "start", "valid": valid, "success": success, "admissible": None}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.tries += 1
        digits = action.removeprefix("guess[").removesuffix("]")
        truncated = self.tries >= 3
        if not (action.startswith("guess[") and digits in {"0", "1", "2", "3"}):
            return "invalid", 0.0, False, truncated, self._info(False)
        won = int(digits) == self.target
        return (
            ("right" if won else "wrong"),
            float(won),
            won,
            truncated and not won,
            self._info(True, won),
        )

    def gold_action(self) -> str | None:
        return f"guess[{self.target}]"


def test_a_correct_env_passes() -> None:
    check_env(Guess())


class BadReset(Guess):
    def _reset(self, seed, options):  # type: ignore[no-untyped-def]
        super()._reset(seed, options)
        return ["not", "a", "str"], {"anchor": "start"}


class BadStep(Guess):
    def _step(self, action):  # type: ignore[no-untyped-def]
        obs, reward, term, trunc, info = super()._step(action)
        return obs, reward, 1 if term else 0, trunc, info  # ints, not bools


class UnhashableAnchor(Guess):
    def _info(self, valid: bool, success: bool = False) -> dict[str, Any]:
        return {**super()._info(valid, success), "anchor": ["start"]}


class Unseeded(Guess):
    count = 0

    def _reset(self, seed, options):  # type: ignore[no-untyped-def]
        obs, info = super()._reset(seed, options)
        Unseeded.count += 1
        return f"{obs} {Unseeded.count}", info  # same seed, another observation


class Endless(Guess):
    def _step(self, action):  # type: ignore[no-untyped-def]
        obs, _, _, _, info = super()._step("x")
        return obs, 0.0, False, False, info


class NoSuccess(Guess):
    def _info(self, valid: bool, success: bool = False) -> dict[str, Any]:
        info = super()._info(valid, success)
        info["success"] = None
        return info


class LossySnapshot(Guess):
    """Claims a cheap snapshot that forgets the number: restore gives another future."""

    def snapshot(self) -> Any:
        return self.tries

    def restore(self, snap: Any) -> tuple[str, dict[str, Any]]:
        self.target, self.tries = 0, snap
        return "guess", self._info(True)


class RestoreAnotherObs(LossySnapshot):
    def snapshot(self) -> Any:
        return (self.target, self.tries)

    def restore(self, snap: Any) -> tuple[str, dict[str, Any]]:
        self.target, self.tries = snap
        return "restored", self._info(True)


class AcceptsGarbage(Guess):
    def _step(self, action):  # type: ignore[no-untyped-def]
        obs, reward, term, trunc, info = super()._step(action)
        return obs, reward, term, trunc, {**info, "valid": True}


class RaisesOnGarbage(Guess):
    def _step(self, action):  # type: ignore[no-untyped-def]
        action.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError
        if len(action) > 10_000:
            raise MemoryError("too long")
        return super()._step(action)


BROKEN = [
    (BadReset, "reset", "observation must be a str"),
    (BadStep, "step", "terminated must be a bool"),
    (UnhashableAnchor, "reset", "anchor'] is not hashable"),
    (Unseeded, "seeding", "reset\\(seed=0\\) twice"),
    (Endless, "episode_end", "did not end within 50 steps"),
    (NoSuccess, "episode_end", "success'] must be a bool"),
    (LossySnapshot, "snapshot", "after restore"),
    (RestoreAnotherObs, "snapshot", "another observation or anchor"),
    (AcceptsGarbage, "garbage", "answered valid"),
    (RaisesOnGarbage, "garbage", "raised"),
]


@pytest.mark.parametrize(("cls", "clause", "problem"), BROKEN, ids=[b[0].__name__ for b in BROKEN])
def test_a_broken_env_fails_naming_the_clause(cls: type, clause: str, problem: str) -> None:
    with pytest.raises(EnvCheckError, match=problem) as err:
        check_env(cls(), max_episode_steps=50)
    assert err.value.clause == clause
    assert f"clause {clause!r} failed" in str(err.value)
    assert str(err.value).startswith(f"check_env({cls.__name__}):")


class InvalidMovesTheAnchor(Guess):
    def _info(self, valid: bool, success: bool = False) -> dict[str, Any]:
        return {**super()._info(valid, success), "anchor": f"start {self.tries}"}


def test_an_invalid_action_may_change_the_anchor_unless_asked() -> None:
    check_env(InvalidMovesTheAnchor())  # the contract's form: valid False, no raise
    with pytest.raises(EnvCheckError, match="changed the state") as err:
        check_env(InvalidMovesTheAnchor(), invalid_keeps_anchor=True)
    assert err.value.clause == "garbage"


def test_every_clause_has_a_broken_env() -> None:
    assert {c for _, c, _ in BROKEN} == set(CLAUSES)
