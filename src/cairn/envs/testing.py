"""A contract checker for text envs, in the spirit of Gymnasium's ``check_env``.

    from cairn.envs.testing import check_env
    check_env(MyEnv())          # or check_env("sokoban"); raises EnvCheckError naming a clause

The clauses (``CLAUSES``), each checked on a few seeds:

    reset          ``reset(seed=...)`` returns ``(str, dict)`` and the info carries a hashable
                   ``anchor``
    step           ``step(action)`` returns ``(str, real reward, bool, bool, dict)`` whose info
                   carries a hashable ``anchor`` and a bool ``valid``; ``admissible``, where
                   given, is a list of strings or None
    seeding        the same seed gives the same observation and anchor, again and again, and
                   the same actions from it give the same observations
    episode_end    an episode ends (terminated or truncated) within ``max_episode_steps``, and
                   its last info carries a bool ``success``
    snapshot       ``restore(snapshot())`` gives back the observation and anchor of the
                   snapshot's state, and the same actions after it give what they gave the
                   first time (for every env: the replay fallback is the default snapshot)
    garbage        empty, huge, binary-ish and unicode actions are answered with
                   ``info["valid"] is False``, without raising (with
                   ``invalid_keeps_anchor=True``, also without changing the anchor: the
                   built-in envs' stricter form of "the env stays unchanged")

Actions for the walks come from the env itself: its admissible actions where it lists
them, else its ``gold_action()``, its ``example_action`` and an invalid word.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable, Hashable
from typing import Any

from cairn.envs.base import TextEnv

#: What one step gave: (obs, reward, terminated, truncated, anchor, valid).
Outcome = tuple[str, float, bool, bool, Hashable, bool]

__all__ = ["CLAUSES", "GARBAGE_ACTIONS", "EnvCheckError", "check_env"]

CLAUSES = ("reset", "step", "seeding", "episode_end", "snapshot", "garbage")

#: Actions no env should accept: empty, huge, binary-ish, unicode, lone surrogate, nested.
GARBAGE_ACTIONS: tuple[str, ...] = (
    "",
    " \t\n ",
    "x" * 20_000,
    "\x00\x01\x02\xff\xfe",
    "\u00e9\u6f22\u5b57 \U0001f642 \u202e",
    "\ud800",
    "(" * 500 + ")" * 500,
    '{"name": null, "arguments": [}',
)


class EnvCheckError(AssertionError):
    """An env broke a clause of the contract; ``clause`` names it (one of ``CLAUSES``)."""

    def __init__(self, env_name: str, clause: str, problem: str) -> None:
        self.env_name, self.clause, self.problem = env_name, clause, problem
        super().__init__(f"check_env({env_name}): clause {clause!r} failed: {problem}")


def check_env(
    env: TextEnv | str,
    seeds: tuple[int, ...] = (0, 1, 2),
    max_episode_steps: int = 500,
    invalid_keeps_anchor: bool = False,
    **options: object,
) -> None:
    """Check ``env`` (an instance, or a registered name built with ``options``) against the
    env contract; raises ``EnvCheckError`` naming the first clause that fails."""
    strict = invalid_keeps_anchor
    if isinstance(env, str):
        from cairn.envs import make

        name, built = env, make(env, **options)
        try:
            _Checker(built, name, seeds, max_episode_steps, strict).run()
        finally:
            built.close()
        return
    _Checker(env, type(env).__name__, seeds, max_episode_steps, strict).run()


def _hashable(x: object) -> bool:
    if not isinstance(x, Hashable):
        return False
    try:
        hash(x)
    except TypeError:
        return False
    return True


class _Checker:
    def __init__(
        self, env: TextEnv, name: str, seeds: tuple[int, ...], max_steps: int, strict: bool
    ) -> None:
        self.env, self.name, self.seeds, self.max_steps = env, name, seeds, max_steps
        self.strict = strict

    def fail(self, clause: str, problem: str) -> EnvCheckError:
        return EnvCheckError(self.name, clause, problem)

    def run(self) -> None:
        for seed in self.seeds:
            self.check_seeding(seed)
            self.check_snapshot(seed)
            self.check_episode_end(seed)
        self.check_garbage(self.seeds[0])

    # -- calls, each answer checked for its types ------------------------------------------
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        try:
            out = self.env.reset(seed=seed)
        except Exception as err:
            raise self.fail("reset", f"reset(seed={seed}) raised {err!r}") from err
        if not (isinstance(out, tuple) and len(out) == 2):
            raise self.fail("reset", f"reset must return (obs, info), got {_short(out)}")
        obs, info = out
        self._types("reset", obs, info)
        return obs, info

    def step(self, action: str, clause: str = "step") -> tuple[str, float, bool, bool, dict]:
        try:
            out = self.env.step(action)
        except Exception as err:
            raise self.fail(clause, f"step({_short(action)}) raised {err!r}") from err
        if not (isinstance(out, tuple) and len(out) == 5):
            raise self.fail("step", f"step must return a 5-tuple, got {_short(out)}")
        obs, reward, terminated, truncated, info = out
        self._types("step", obs, info)
        if not isinstance(reward, numbers.Real) or isinstance(reward, bool):
            raise self.fail("step", f"reward must be a real number, got {_short(reward)}")
        if not math.isfinite(float(reward)):
            raise self.fail("step", f"reward must be finite, got {reward}")
        for flag, value in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(value, bool):
                raise self.fail("step", f"{flag} must be a bool, got {_short(value)}")
        if not isinstance(info.get("valid"), bool):
            raise self.fail(
                "step", f"info['valid'] must be a bool, got {_short(info.get('valid'))}"
            )
        return obs, float(reward), terminated, truncated, info

    def _types(self, clause: str, obs: object, info: object) -> None:
        if not isinstance(obs, str):
            raise self.fail(clause, f"the observation must be a str, got {type(obs).__name__}")
        if not isinstance(info, dict):
            raise self.fail(clause, f"info must be a dict, got {type(info).__name__}")
        if "anchor" not in info:
            raise self.fail(clause, "info has no 'anchor'")
        if not _hashable(info["anchor"]):
            raise self.fail(clause, f"info['anchor'] is not hashable: {_short(info['anchor'])}")
        adm = info.get("admissible")
        if adm is not None and not (isinstance(adm, list) and all(isinstance(a, str) for a in adm)):
            raise self.fail(
                clause, f"info['admissible'] must be a list of str or None: {_short(adm)}"
            )

    # -- the walks -------------------------------------------------------------------------
    def chooser(self, seed: int) -> Callable[[dict[str, Any]], str]:
        rng = random.Random(seed)

        def choose(info: dict[str, Any]) -> str:
            if info.get("admissible"):
                return rng.choice(info["admissible"])
            gold = self.env.gold_action()
            options = [a for a in (gold, gold, self.env.example_action) if a] + ["zzz"]
            return rng.choice(options)

        return choose

    def walk(
        self, seed: int, n: int, clause: str, info: dict[str, Any] | None = None
    ) -> tuple[list[tuple[str, Outcome]], dict[str, Any]]:
        """Up to ``n`` steps (from ``reset(seed)``, or from the current state whose info is
        ``info``): (action, outcome) per step, and the last info."""
        if info is None:
            _, info = self.reset(seed)
        choose, out = self.chooser(seed + n), []
        for _ in range(n):
            action = choose(info)
            obs, reward, term, trunc, info = self.step(action, clause)
            out.append((action, (obs, reward, term, trunc, info["anchor"], info["valid"])))
            if term or trunc:
                break
        return out, info

    # -- the clauses -----------------------------------------------------------------------
    def check_seeding(self, seed: int) -> None:
        first = self.reset(seed)
        self.reset(seed + 1000)  # another state between the two
        again = self.reset(seed)
        if first[0] != again[0] or first[1]["anchor"] != again[1]["anchor"]:
            raise self.fail(
                "seeding", f"reset(seed={seed}) twice gave different observations or anchors"
            )
        walk, _ = self.walk(seed, 6, "step")
        self.reset(seed)
        for action, outcome in walk:
            if self._outcome(action, "seeding") != outcome:
                raise self.fail(
                    "seeding", f"the same seed ({seed}) and actions gave another outcome"
                )

    def _outcome(self, action: str, clause: str) -> Outcome:
        obs, reward, term, trunc, info = self.step(action, clause)
        return (obs, reward, term, trunc, info["anchor"], info["valid"])

    def check_snapshot(self, seed: int) -> None:
        """Snapshots after 0, 1 and 2 steps, restored after a detour to another seed."""
        for depth in range(3):
            prefix, info = self.walk(seed, depth, "snapshot")
            if prefix and (prefix[-1][1][2] or prefix[-1][1][3]):
                continue  # the episode ended: nothing to branch from
            obs, anchor = (
                (prefix[-1][1][0], prefix[-1][1][4]) if prefix else self._reset_state(seed)
            )
            try:
                snap = self.env.snapshot()
            except Exception as err:
                raise self.fail("snapshot", f"snapshot() raised {err!r}") from err
            after, _ = self.walk(seed + 7, 3, "snapshot", info)
            self.reset(seed + 1)  # elsewhere, then back
            try:
                back = self.env.restore(snap)
            except Exception as err:
                raise self.fail("snapshot", f"restore(snapshot()) raised {err!r}") from err
            if not (isinstance(back, tuple) and len(back) == 2):
                raise self.fail("snapshot", f"restore must return (obs, info), got {_short(back)}")
            if back[0] != obs or back[1].get("anchor") != anchor:
                raise self.fail(
                    "snapshot", "restore(snapshot()) gave another observation or anchor"
                )
            for action, outcome in after:
                if self._outcome(action, "snapshot") != outcome:
                    raise self.fail(
                        "snapshot", f"after restore, {_short(action)} gave another outcome"
                    )

    def _reset_state(self, seed: int) -> tuple[str, Hashable]:
        obs, info = self.reset(seed)
        return obs, info["anchor"]

    def check_episode_end(self, seed: int) -> None:
        walk, info = self.walk(seed, self.max_steps, "episode_end")
        if not (walk[-1][1][2] or walk[-1][1][3]):
            raise self.fail(
                "episode_end",
                f"the episode from seed {seed} did not end within {self.max_steps} steps",
            )
        if not isinstance(info.get("success"), bool):
            raise self.fail(
                "episode_end",
                f"info['success'] must be a bool at the episode's end, got "
                f"{_short(info.get('success'))}",
            )

    def check_garbage(self, seed: int) -> None:
        _, info = self.reset(seed)
        for action in GARBAGE_ACTIONS:
            before = info["anchor"]
            _, _, term, trunc, info = self.step(action, "garbage")
            if info["valid"] is not False:
                raise self.fail(
                    "garbage", f"the action {_short(action)} was answered valid (want False)"
                )
            if self.strict and info["anchor"] != before and not (term or trunc):
                raise self.fail(
                    "garbage", f"the invalid action {_short(action)} changed the state (anchor)"
                )
            if term or trunc:
                _, info = self.reset(seed)


def _short(x: object, n: int = 40) -> str:
    text = repr(x)
    return text if len(text) <= n else text[: n - 3] + "..."
