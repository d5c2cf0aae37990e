"""The agent side of the loop: prompts from observations and history, actions from text."""

from cairn.agent.episode import prompt_for_env
from cairn.agent.instructions import describe_format, example_completion, tool_schema
from cairn.agent.parse import ACTION_FORMATS, format_completion, parse_action, parse_tool_call
from cairn.agent.prompt import (
    PROMPT_STYLES,
    TAGS,
    TEMPLATE_WORDS,
    ContextOverflow,
    FittedPrompt,
    PromptBuilder,
    Turn,
    fit_prompt,
    tagged,
)

__all__ = [
    "ACTION_FORMATS",
    "PROMPT_STYLES",
    "TAGS",
    "TEMPLATE_WORDS",
    "ContextOverflow",
    "FittedPrompt",
    "PromptBuilder",
    "Turn",
    "describe_format",
    "example_completion",
    "fit_prompt",
    "format_completion",
    "parse_action",
    "parse_tool_call",
    "prompt_for_env",
    "tagged",
    "tool_schema",
]
