"""The prompt builder of an episode of an env: the keys of ``agent`` as plain values
(``cairn.train.settings.prompt_settings`` reads them from a config) over a tokenizer's
chat template, with what the env brings: its tools and its demonstration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cairn.agent.instructions import example_completion
from cairn.agent.prompt import PromptBuilder

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["prompt_for_env"]


def prompt_for_env(
    tokenizer: PreTrainedTokenizerBase,
    env: Any = None,
    *,
    history: int,
    style: str,
    action_format: str,
    demonstrate: bool,
    response_prefix: str,
) -> PromptBuilder:
    """``history`` and ``style`` over ``tokenizer``'s chat template. From ``env``: with the
    ``tool_call`` format its ``tools`` (for a template that renders them); with
    ``demonstrate`` (``agent.describe_format`` on), its ``demonstration()`` as finished
    exchanges written in ``action_format``."""
    chat = tokenizer if getattr(tokenizer, "chat_template", None) else None
    calls = action_format == "tool_call"
    tools = tuple(getattr(env, "tools", ())) if calls else ()
    demonstration = getattr(env, "demonstration", None) if demonstrate else None
    demo = demonstration() if demonstration is not None else []
    example = tuple(
        (obs, example_completion(action_format, a, getattr(env, "tools", ()))) for obs, a in demo
    )
    return PromptBuilder(
        history=history, chat_template=chat, style=style, tool_observations=calls,
        tools=tools, example=example, response_prefix=response_prefix,
    )  # fmt: skip
