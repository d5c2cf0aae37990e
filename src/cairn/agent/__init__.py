"""The agent side of the loop: prompts from observations and history, actions from text."""

from cairn.agent.parse import parse_action
from cairn.agent.prompt import TAGS, TEMPLATE_WORDS, PromptBuilder, tagged

__all__ = ["TAGS", "TEMPLATE_WORDS", "PromptBuilder", "parse_action", "tagged"]
