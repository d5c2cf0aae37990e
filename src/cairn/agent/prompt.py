"""Prompt building: the task instruction, the last K turns of history, the current observation.

The plain template suits base models and the tiny default (its words are part of the
local tokenizer's vocabulary); models with a chat template get the same content as a user
message (`chat=True`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TAGS", "TEMPLATE_WORDS", "PromptBuilder", "tagged"]

OBS, ACT, TIPS = "obs:", "act:", "tips:"
#: Delimiters of text blocks inside prompts and completions: memory tips (EMPO2), a
#: strategy (SGE), self-written search results (SSRL). Whitespace-separated words, so a
#: word-level tokenizer gives each delimiter one token.
TAGS = {
    "tip": ("<tip>", "</tip>"),
    "strategy": ("<strategy>", "</strategy>"),
    "information": ("<information>", "</information>"),
}
TEMPLATE_WORDS = (OBS, ACT, TIPS, *(w for pair in TAGS.values() for w in pair))


def tagged(tag: str, texts: Sequence[str]) -> str:
    """``<tag> text </tag>`` for each text, joined by spaces ("" when ``texts`` is empty)."""
    if tag not in TAGS:
        raise ValueError(f"unknown tag {tag!r}; allowed: {', '.join(TAGS)}")
    open_, close = TAGS[tag]
    return " ".join(f"{open_} {t} {close}" for t in texts)


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
