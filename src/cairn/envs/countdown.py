"""Countdown: reach a target number with + - * / over given numbers (single-turn by default).

The task format follows the Countdown arithmetic game used for RL with verifiable rewards
(TinyZero; "Cognitive Behaviors that Enable Self-Improving Reasoners", arXiv 2503.01307):
each given number may be used at most once (``use_all``: exactly once, TinyZero's rule), and
the answer is one arithmetic expression.

Instances come with a solution and answers are checked exactly, through ``ast`` and
``fractions.Fraction`` (``cairn.envs.countdown_math``: the generator, the checker and
``key_steps``). Reset info carries ``key_steps``: the intermediate equations of the
solution (Step-GRPO's StepRAR reward matches them in an answer).

Renderings (``render=``):
- ``"compact"`` (default, for tiny models): ``numbers 3 7 25 50 target 302`` (then ``last too
  low`` / ``last too high`` / ``last invalid`` / ``last correct`` after a try) and a one-line
  instruction. Write answers with spaces between tokens (``( 25 - 3 ) * 7 + 50``) for a
  word-level tokenizer; spacing does not matter to the parser.
- ``"text"`` (for language models): ``Numbers: 3, 7, 25, 50. Target: 302.`` (then ``Your last
  answer was too low.`` ...) and an instruction stating the goal and the rules, the same for
  every instance (the instance is in the observation alone: one shared prompt prefix), no
  answer format (``agent.describe_format`` adds the format of ``agent.action_format``).

Answers as language models write them (``countdown_math.read_answer``): a leading
``Answer:``, surrounding backticks or ``$``, a final period, ``×``/``÷`` for ``*``/``/`` and
a trailing ``= 302`` are accepted; the stated value must equal the expression's value
(``1 + 4 + 3 = 9`` is invalid), and success still needs that value to be the target.

Instances whose target is the sum or the product of all the numbers (a shortcut a policy
learns without searching) are redrawn unless ``allow_trivial`` is set.

Rewards of a well-formed answer that misses: ``format_reward`` plus ``closeness_reward *
closeness``, ``closeness = max(0, 1 - |value - target| / target)`` (1 near the target, 0 at
twice the target or at 0 and below; ``closeness``). A flat format reward alone is the only
reward an untrained model collects, and RL then settles on a task-blind answer (SmolLM2 on
countdown_smol: 28 of 32 answers were the sum of all the numbers); closeness pays for
moving towards this instance's target, which an answer that ignores it earns less of on
average (``tests/test_task_blind.py`` has the numbers). A task-blind miss (below) earns
no closeness: with three numbers the sum of all of them lands at closeness 0.35 on
average, and RL on countdown_smol settled on it anyway (task-blind share 0.9 by iteration
60 of one seed); an answer in the example's shape is blind by the same rule. Their sum
stays below 1, the reward of a correct answer.

``info["task_blind"]`` (``rollout/task_blind``): a well-formed miss that ignores the target:
its value is the sum or the product of all the numbers, or it has the format example's
shape (``example_action``, ``(1 + 2) * 3``) with other numbers: under ``use_all`` all three
countdown_smol seeds settled on writing the given numbers into that shape, `(6 + 9) * 9`
for a target of 6; on seed 0 that shape alone made its held-out success of 0.16.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from cairn.envs._common import (
    EpisodeClock,
    check_bool,
    check_choice,
    check_float,
    check_int_range,
    fresh_seed,
)
from cairn.envs.base import ReplaySnapshot, StepResult, TextEnv
from cairn.envs.countdown_math import OPS, closeness, generate_countdown, key_steps, read_answer

__all__ = ["Countdown", "CountdownSnapshot"]

_MAX_VOCAB_NUMBERS = 100_000
_FEEDBACK = ("too", "low", "high", "invalid", "correct")
_RENDERS = ("compact", "text")
_TEXT_FEEDBACK = {
    "invalid": "Your last answer was not a valid expression over the numbers.",
    "too low": "Your last answer was too low.",
    "too high": "Your last answer was too high.",
    "correct": "Your last answer was correct.",
}
# The text rendering's instruction: the rules, no instance. The numbers and the target are
# in the observation only, so the system turn is one prefix that every prompt of an
# iteration shares (computed once per generate call and per minibatch) and a row's own
# tokens are its one-line observation, not the whole prompt.
_TEXT_INSTRUCTION = (
    "Countdown: combine the given numbers with + - * / and parentheses into one arithmetic "
    "expression whose value is the target. Use each number at most once."
)
_TEXT_INSTRUCTION_ALL = _TEXT_INSTRUCTION.replace("at most once", "exactly once")


def _shape(expression: str) -> str:
    """``expression`` with every integer literal as ``n`` and no spaces: ``(n+n)*n``."""
    return re.sub(r"\d+", "n", "".join(expression.split()))


@dataclass(frozen=True)
class CountdownSnapshot:
    base: ReplaySnapshot
    numbers: tuple[int, ...]
    target: int
    gold: str
    clock: tuple[int, bool, bool]
    obs: str
    info: dict[str, Any]


class Countdown(TextEnv):
    """Countdown arithmetic puzzle; the action is one expression.

    ``example_action`` (the format example a language model is shown) uses numbers of its
    own, as TinyZero's prompt does, so that it never gives an instance's answer away.

    Options:
        count: (lo, hi) how many numbers are given, drawn per seed, within 2..8.
        number_range: (lo, hi) range of the given numbers, within 1..10**6.
        target_range: (lo, hi) range of targets, within 1..10**9.
        format_reward: reward of a well-formed expression that misses the target, [0, 1).
        closeness_reward: added to a miss's reward times its closeness to the target
            (module docstring), [0, 1); ``format_reward + closeness_reward`` stays below 1.
        max_steps: tries per episode (1: single-turn).
        render: ``"compact"`` (tiny models) or ``"text"`` (language models); module docstring.
        allow_trivial: also draw instances whose target is the sum or the product of all
            the numbers (default False: they are redrawn).
        use_all: an answer must use every given number exactly once (TinyZero's rule; an
            answer that leaves one out is invalid). Default False: each at most once.

    Episode end: a correct answer terminates with reward 1; a well-formed wrong answer on
    the last try terminates with ``format_reward`` (+ the closeness reward); an invalid
    action on the last try truncates with reward 0.
    """

    example_action = "(1 + 2) * 3"

    def __init__(
        self,
        count: tuple[int, int] = (3, 6),
        number_range: tuple[int, int] = (1, 100),
        target_range: tuple[int, int] = (1, 999),
        format_reward: float = 0.0,
        max_steps: int = 1,
        render: str = "compact",
        allow_trivial: bool = False,
        closeness_reward: float = 0.0,
        use_all: bool = False,
    ) -> None:
        super().__init__()
        self.count = check_int_range("count", count, 2, 8)
        self.number_range = check_int_range("number_range", number_range, 1, 10**6)
        self.target_range = check_int_range("target_range", target_range, 1, 10**9)
        self.format_reward = check_float("format_reward", format_reward, 0.0, 0.999)
        self.closeness_reward = check_float("closeness_reward", closeness_reward, 0.0, 0.999)
        if self.format_reward + self.closeness_reward >= 1.0:
            raise ValueError(
                f"format_reward {format_reward} + closeness_reward {closeness_reward} must "
                "stay below 1, the reward of a correct answer"
            )
        self._clock = EpisodeClock("countdown", max_steps)
        self.render = check_choice("render", render, _RENDERS)
        self.allow_trivial = check_bool("allow_trivial", allow_trivial)
        self.use_all = check_bool("use_all", use_all)
        self._rules = _TEXT_INSTRUCTION_ALL if use_all else _TEXT_INSTRUCTION
        if self.render == "text":
            self.example_observation = "Numbers: 1, 2, 3. Target: 9."
            self.instruction = self._rules
        self.numbers: list[int] = []
        self.target = 0
        self._gold = ""
        self._last: tuple[str, dict[str, Any]] = ("", {})

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed = self._seed = fresh_seed()
        rng = np.random.default_rng(seed)
        self.numbers, self.target, self._gold = generate_countdown(
            rng, self.count, self.number_range, self.target_range,
            allow_trivial=self.allow_trivial,
        )  # fmt: skip
        listed = ", ".join(map(str, self.numbers))
        if self.render == "compact":
            self.instruction = (
                f"Using the numbers {listed}, write an arithmetic "
                f"expression that equals {self.target}. You may use + - * / and parentheses, "
                f"and each number {'exactly' if self.use_all else 'at most'} once. Answer "
                "with the expression only."
            )
        else:  # the rules only: the same for every instance, so every prompt shares it
            self.instruction = self._rules
        self._clock.start()
        return self._record(self._observation(None), valid=True, success=False)

    def _step(self, action: str) -> StepResult:
        last_try = self._clock.tick()
        value = read_answer(action, self.numbers, self.use_all)
        if value is None:
            self._clock.done = last_try
            obs, info = self._record(self._observation("invalid"), False, False)
            return obs, 0.0, False, last_try, info
        correct = value == self.target
        self._clock.done = correct or last_try
        feedback = "correct" if correct else ("too low" if value < self.target else "too high")
        obs, info = self._record(self._observation(feedback), True, correct)
        info["task_blind"] = not correct and self.target_blind(action, value)
        self._last[1]["task_blind"] = info["task_blind"]  # snapshots see it too
        if correct:
            return obs, 1.0, self._clock.done, False, info
        reward = self.format_reward
        if self.closeness_reward and not info["task_blind"]:
            reward += self.closeness_reward * closeness(value, self.target)
        return obs, reward, self._clock.done, False, info

    def target_blind(self, action: str, value: Fraction) -> bool:
        """A well-formed answer of value ``value`` that ignores the target: the sum or the
        product of all the numbers, or the format example's shape with other numbers
        (module docstring)."""
        copied = _shape(action) == _shape(self.example_action)
        return copied or value in (sum(self.numbers), math.prod(self.numbers))

    def _observation(self, feedback: str | None) -> str:
        """The observation in the configured rendering, after ``feedback`` on the last try."""
        if self.render == "compact":
            text = self._problem_text()
            return text if feedback is None else f"{text} last {feedback}"
        text = f"Numbers: {', '.join(map(str, self.numbers))}. Target: {self.target}."
        return text if feedback is None else f"{text} {_TEXT_FEEDBACK[feedback]}"

    def solution(self) -> str:
        """An expression (tokens separated by spaces) that reaches this instance's target."""
        if not self._clock.started:
            raise RuntimeError("countdown: call reset() first")
        return self._gold

    def solve(self) -> list[str]:
        """The plan a warm-up or a demonstration replays: the one answer ``solution()``."""
        return [self.solution()]

    def gold_action(self) -> str | None:
        """The solution while the episode is on (None before reset and after the end)."""
        if not self._clock.started or self._clock.done:
            return None
        return self._gold

    # -- branching ----------------------------------------------------------------------------
    def snapshot(self) -> CountdownSnapshot:
        if not self._clock.started:
            raise RuntimeError("countdown: call reset() first")
        obs, info = self._last
        return CountdownSnapshot(
            super().snapshot(), tuple(self.numbers), self.target, self._gold,
            self._clock.state(), obs, dict(info),
        )  # fmt: skip

    def restore(self, snap: Any) -> tuple[str, dict[str, Any]]:
        if isinstance(snap, ReplaySnapshot):
            return super().restore(snap)
        if not isinstance(snap, CountdownSnapshot):
            raise TypeError(f"Countdown cannot restore a {type(snap).__name__}")
        self._seed, self._actions = snap.base.seed, list(snap.base.actions)
        self.numbers, self.target, self._gold = list(snap.numbers), snap.target, snap.gold
        self._clock.set_state(snap.clock)
        self._last = (snap.obs, dict(snap.info))
        return snap.obs, dict(snap.info)

    # -- text ----------------------------------------------------------------------------------
    def vocabulary(self) -> list[str]:
        """Observation words, operators, parentheses and every number that can appear.

        Empty (open vocabulary) when the ranges hold more than 100 000 numbers.
        """
        spans = [self.number_range, self.target_range]
        if sum(hi - lo + 1 for lo, hi in spans) > _MAX_VOCAB_NUMBERS:
            return []
        words = {"numbers", "target", "last", *_FEEDBACK, *OPS, "(", ")"}
        for lo, hi in spans:
            words.update(str(v) for v in range(lo, hi + 1))
        return sorted(words)

    def _problem_text(self) -> str:
        return f"numbers {' '.join(map(str, self.numbers))} target {self.target}"

    def _record(self, obs: str, valid: bool, success: bool) -> tuple[str, dict[str, Any]]:
        info = {
            "anchor": self._problem_text(),
            "valid": valid,
            "success": success,
            "admissible": None,
            "target": self.target,
            "numbers": tuple(self.numbers),
            "key_steps": key_steps(self._gold),
            "task_blind": False,  # set by _step on a miss that ignores the target
        }
        self._last = (obs, info)
        return obs, dict(info)
