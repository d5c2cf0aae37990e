"""Prompt building: the task instruction, the last K turns of history, the current observation.

The plain template suits base models and the tiny default (its words are part of the
local tokenizer's vocabulary); models with a chat template get the same content as a user
message (`chat=True`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TEMPLATE_WORDS", "PromptBuilder"]

OBS, ACT, TIPS = "obs:", "act:", "tips:"
TEMPLATE_WORDS = (OBS, ACT, TIPS)


@dataclass(frozen=True)
class PromptBuilder:
    """``build(instruction, history, observation) -> str``.

    history: the episode's earlier (observation, action) pairs; only the last ``history``
    of them are shown. ``extra`` is text inserted after the instruction (e.g. memory tips).
    """

    history: int = 0
    chat_template: object | None = None  # a tokenizer with apply_chat_template, or None

    def build(
        self,
        instruction: str,
        past: Sequence[tuple[str, str]],
        observation: str,
        extra: str = "",
    ) -> str:
        lines = [instruction] if instruction else []
        if extra:
            lines.append(extra)
        shown = past[len(past) - self.history :] if self.history > 0 else ()
        lines += [f"{OBS} {o} {ACT} {a}" for o, a in shown]
        lines.append(f"{OBS} {observation} {ACT}")
        text = "\n".join(lines)
        if self.chat_template is None:
            return text
        return self.chat_template.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
