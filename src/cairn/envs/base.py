"""The text-environment protocol every cairn env follows (Gymnasium conventions, str in/out).

    obs, info = env.reset(seed=123)                      # same seed -> same initial state
    obs, reward, terminated, truncated, info = env.step("left")

`info` always carries:
- ``anchor``: a hashable key of the raw current state (no history), used for step grouping;
- ``valid``: False when the action could not be parsed or applied (state unchanged);
- ``success``: bool, meaningful once the episode has ended;
- ``admissible``: list of admissible action strings, or None where the env does not know them.

Branching (tree rollouts, value probes, error search) restarts from a state:
``snap = env.snapshot(); ...; env.restore(snap)``. The default implementation here replays
the action prefix from the reset seed, which is exact for any deterministic env; envs with
cheap state copies override both methods.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReplaySnapshot", "StepResult", "TextEnv"]

StepResult = tuple[str, float, bool, bool, dict[str, Any]]


@dataclass(frozen=True)
class ReplaySnapshot:
    """A state reached by replaying ``actions`` after ``reset(seed)`` (the generic fallback)."""

    seed: int | None
    actions: tuple[str, ...] = field(default_factory=tuple)


class TextEnv(ABC):
    """Base class of cairn environments. Subclasses implement ``_reset`` and ``_step``.

    The base class records the seed and the action history so that ``snapshot`` /
    ``restore`` work for every deterministic env without extra code.
    """

    #: Task instruction shown at the top of the prompt; may change on ``reset``.
    instruction: str = ""
    #: One legal action as the env receives it (``up``, ``search[query]``): the example of
    #: the answer format a language model is shown (``cairn.agent.describe_format``).
    example_action: str = ""
    #: An observation that ``example_action`` answers, in the env's language-model rendering
    #: (``demonstration``). Empty where the rendering has none (the compact forms).
    example_observation: str = ""
    #: Tools for the ``tool_call`` action format, as JSON schemas
    #: (``cairn.agent.tool_schema``): each tool ``name`` with one argument is the env
    #: action ``name[value]``. Empty where the env's actions are not tool calls.
    tools: tuple[dict[str, Any], ...] = ()
    #: Options whose values name code by import path (``module:function``), imported when
    #: the env is built. A run folder naming such code runs it only with the reader's
    #: consent (``cairn.train.trust``). An env registered by import path states the same
    #: names as a trait: ``register(name, "pkg.mod:Env", code_options=("reward",))``.
    code_options: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._seed: int | None = None
        self._actions: list[str] = []

    # -- the Gymnasium-style API -------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self._seed = seed
        self._actions = []
        return self._reset(seed, options or {})

    def step(self, action: str) -> StepResult:
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}: {action!r}")
        result = self._step(action)  # an action that raised is not part of the state
        self._actions.append(action)
        return result

    # -- branching -------------------------------------------------------------------------
    def snapshot(self) -> Any:
        """An opaque object from which ``restore`` rebuilds the current state exactly."""
        return ReplaySnapshot(self._seed, tuple(self._actions))

    def restore(self, snap: object) -> tuple[str, dict[str, Any]]:
        """Return to the state of ``snap``; returns that state's observation and info."""
        if not isinstance(snap, ReplaySnapshot):
            raise TypeError(f"{type(self).__name__} cannot restore a {type(snap).__name__}")
        obs, info = self.reset(seed=snap.seed)
        for action in snap.actions:
            obs, _, _, _, info = self.step(action)
        return obs, info

    def demonstration(self) -> list[tuple[str, str]]:
        """A short made-up episode as (observation, action) turns: a language model's prompt
        opens with it (``PromptBuilder.example``). Default: ``example_observation`` answered
        by ``example_action``, or none where there is no example observation."""
        if not self.example_observation:
            return []
        return [(self.example_observation, self.example_action)]

    def gold_action(self) -> str | None:
        """A correct action from the current state (the solver's next move, the gold
        answer), or None where the env knows none. Token budgets are measured on it."""
        return None

    # -- text for local tokenizers ----------------------------------------------------------
    def vocabulary(self) -> list[str]:
        """Whitespace-separated words this env's observations and actions can contain.

        A tiny model's word-level tokenizer is built from it; envs whose text is open-ended
        return an empty list and need a subword tokenizer.
        """
        return []

    def close(self) -> None:  # noqa: B027 - optional hook, most envs hold no resources
        """Release external resources (processes, files)."""

    def __enter__(self) -> TextEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- to implement ------------------------------------------------------------------------
    @abstractmethod
    def _reset(self, seed: int | None, options: dict[str, object]) -> tuple[str, dict[str, Any]]:
        """Start an episode; the same seed must give the same initial state."""

    @abstractmethod
    def _step(self, action: str) -> StepResult:
        """Apply one action; an unparsable action leaves the state unchanged, valid=False."""
