"""Indefinite integration with a numerically verified reward: the env of LADDER.

LADDER (arXiv 2503.00735) rewards an antiderivative that agrees numerically with the
problem at random points (``cairn.envs.antiderivative``: the safe parser and the
verifier); the problems come from ``cairn.envs.integrands.generate_integrand`` (levels
1-4), or one fixed integrand (a LADDER variant).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

from cairn.envs._common import EpisodeClock, check_int_choices, fresh_seed
from cairn.envs.antiderivative import parse_bounded, parse_candidate, verify_antiderivative, x
from cairn.envs.base import ReplaySnapshot, StepResult, TextEnv
from cairn.envs.integrands import DEFAULT_TERMS, LEVELS, TERMS, generate_integrand, pick

__all__ = ["Integration", "IntegrationSnapshot"]


@dataclass(frozen=True)
class IntegrationSnapshot:
    base: ReplaySnapshot
    integrand: sp.Expr
    level: int
    clock: tuple[int, bool, bool]
    obs: str
    info: dict[str, Any]


class Integration(TextEnv):
    """Find an antiderivative of the shown integrand; reward 1 if verified, else 0.

    Options:
        level: difficulty 1-4, or a list of levels to draw from per seed.
        terms: the number of terms of a level-1 polynomial (1-6), or a list to draw from
            per seed; default 2-4. Puts problems above a model's level by length: the
            LADDER polynomial benchmark asks for 6 terms from a model warmed up on fewer.
        integrand: a fixed integrand (sympy syntax) used on every reset instead of the
            generator (e.g. one LADDER variant); parsed with the safe parser.
        max_steps: tries per episode (1: single-turn).

    Episode end: a verified answer terminates with reward 1; a parseable wrong answer on
    the last try terminates with reward 0; an unparseable one on the last try truncates.
    """

    example_action = "x**2/2 + sin(x)"

    def __init__(
        self,
        level: int | Sequence[int] = LEVELS,
        integrand: str | None = None,
        max_steps: int = 1,
        terms: int | Sequence[int] = DEFAULT_TERMS,
    ) -> None:
        super().__init__()
        self.levels = check_int_choices("level", level, LEVELS)
        self.terms = check_int_choices("terms", terms, TERMS)
        if integrand is not None:
            try:
                self._fixed: sp.Expr | None = parse_candidate(integrand)
            except ValueError as err:
                raise ValueError(f"integrand {integrand!r} is not valid: {err}") from err
        else:
            self._fixed = None
        self._clock = EpisodeClock("integration", max_steps)
        self.integrand: sp.Expr = sp.Integer(0)
        self.level = 0
        self._last: tuple[str, dict[str, Any]] = ("", {})

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed = self._seed = fresh_seed()
        rng = np.random.default_rng(seed)
        self.level = int(pick(rng, self.levels)) if self._fixed is None else 0
        self.integrand = (
            self._fixed
            if self._fixed is not None
            else generate_integrand(self.level, rng, self.terms)
        )
        self.instruction = (
            f"Find an antiderivative F(x) of f(x) = {self.integrand}, that is a function with "
            "F'(x) = f(x). Write F(x) in Python syntax, e.g. x**2/2 + sin(x) + log(x); the "
            "constant of integration may be omitted. Answer with the expression only."
        )
        self._clock.start()
        return self._record(self._problem_text(), valid=True, success=False)

    def _step(self, action: str) -> StepResult:
        last_try = self._clock.tick()
        try:
            candidate = parse_bounded(action)
        except ValueError as err:
            self._clock.done = last_try
            obs, info = self._record(f"{self._problem_text()} | last invalid", False, False)
            info["error"] = str(err)
            return obs, 0.0, False, last_try, info
        correct = verify_antiderivative(candidate, self.integrand)
        self._clock.done = correct or last_try
        verdict = "correct" if correct else "wrong"
        obs, info = self._record(f"{self._problem_text()} | last {verdict}", True, correct)
        return obs, float(correct), self._clock.done, False, info

    def solution(self) -> str:
        """sympy's antiderivative of the current integrand, as text (may be slow, ~0.1-1 s)."""
        if not self._clock.started:
            raise RuntimeError("integration: call reset() first")
        return str(sp.integrate(self.integrand, x))

    def gold_action(self) -> str | None:
        """``solution()`` while the episode is on (None before reset and after the end)."""
        if not self._clock.started or self._clock.done:
            return None
        return self.solution()

    # -- branching ------------------------------------------------------------------------------
    def snapshot(self) -> IntegrationSnapshot:
        if not self._clock.started:
            raise RuntimeError("integration: call reset() first")
        obs, info = self._last
        return IntegrationSnapshot(
            super().snapshot(), self.integrand, self.level, self._clock.state(), obs, dict(info)
        )

    def restore(self, snap: Any) -> tuple[str, dict[str, Any]]:
        if isinstance(snap, ReplaySnapshot):
            return super().restore(snap)
        if not isinstance(snap, IntegrationSnapshot):
            raise TypeError(f"Integration cannot restore a {type(snap).__name__}")
        self._seed, self._actions = snap.base.seed, list(snap.base.actions)
        self.integrand, self.level = snap.integrand, snap.level
        self._clock.set_state(snap.clock)
        self._last = (snap.obs, dict(snap.info))
        return snap.obs, dict(snap.info)

    def _problem_text(self) -> str:
        return f"integrand {self.integrand}"

    def _record(self, obs: str, valid: bool, success: bool) -> tuple[str, dict[str, Any]]:
        info = {
            "anchor": self._problem_text(),
            "valid": valid,
            "success": success,
            "admissible": None,
            "integrand": str(self.integrand),
            "level": self.level,
        }
        self._last = (obs, info)
        return obs, dict(info)
