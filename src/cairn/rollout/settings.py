"""How a rollout samples actions and what an invalid one costs (``RolloutSettings``): plain
data, read by the turn loop (``cairn.rollout.loop``), a turn's steps (``cairn.rollout.turn``)
and every strategy."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RolloutSettings"]


@dataclass(frozen=True)
class RolloutSettings:
    """How actions are sampled and what an invalid one costs."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 16
    stop: tuple[str, ...] = ()
    restrict_to_admissible: bool = False
    greedy: bool = False
    max_turns: int | None = None
    invalid_penalty: float = 0.1
    action_pattern: str | None = None
    action_format: str = "line"  # cairn.agent.parse: line | tagged | tool_call
    format_reward: float = 0.0  # added (shaped "format") to a step whose action parsed
    no_progress_penalty: float = 0.0  # a valid step the env says made no progress (turn.py)
    context_budget: int | None = None  # prompt tokens at most (model context - new tokens)
    instruction: str | None = (
        None  # agent.instruction: replaces the env's wherever prompts are built
    )
    describe_format: bool = (
        False  # append the answer format of action_format (agent.describe_format)
    )
    response_prefix: str = ""  # agent.response_prefix: opens every reply, in the prompt
    show_admissible: bool = False  # agent.show_admissible: list the env's actions (turn.py)
