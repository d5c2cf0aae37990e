"""Prompt building: the task instruction, the last K turns of history, the current observation.

Two styles (``agent.prompt_style``):

- ``flat`` (default): one text, ``instruction / obs: o act: a / ... / obs: o act:``. It
  suits base models and the tiny default (its words are part of the local tokenizer's
  vocabulary); a tokenizer with a chat template gets the same text as one user message.
- ``chat``: a real multi-turn conversation through the tokenizer's chat template: the
  instruction as the system turn, each earlier turn as a user turn (its observation; a
  ``tool`` turn when observations are tool answers) and an assistant turn holding the
  model's own sampled token ids, then the current observation and the generation prompt.

Token-in/token-out (``chat_ids``): the ids of a chat prompt are the template's pieces,
each encoded on its own, with every earlier turn's *sampled ids* spliced in between, never
decoded and re-encoded. So the ids a model sampled are the ids it is trained on and the
ids it reads in every later prompt (reasoning inside ``<think>`` included), and a turn's
prompt extends the previous turn's prompt plus its sampled ids. The template is rendered
with a placeholder per assistant turn and split there, so any template that renders an
earlier turn the same way whatever follows it gives this prefix property.

Tools (``tools``, the env's JSON schemas for the ``tool_call`` format): passed to the chat
template as ``apply_chat_template(..., tools=...)`` when the template renders tools
(``renders_tools``: its source mentions ``tools``), as transformers does for Qwen-style
templates; otherwise they are left to the instruction (``cairn.agent.describe_format``
lists them). The tools render inside the system turn, before any assistant turn, so the
token-in/token-out prefix property holds with them.

A demonstration (``example``: (observation, completion) pairs, one per turn of a short
made-up episode): the prompt opens with it as finished exchanges (chat: an observation
turn and an assistant turn each, after the system turn; flat: an ``obs: ... act: ...``
line each, after the instruction). A small instruction model follows
the answer format far more often after one such exchange than after any wording of it.

A response prefix (``response_prefix``, ``agent.response_prefix``): text written right
after the generation prompt (flat: after the last ``act:``), so every reply starts with it;
the model continues it and the parser reads prefix + reply. In the chat history each earlier
assistant turn is the prefix followed by that turn's sampled ids, so the prefix property
holds. ``<tool_call>`` makes a 135M model write a call where it otherwise answers in prose.

A context budget (``fit_prompt``): when a prompt would exceed ``budget`` tokens the oldest
shown turns are dropped, one at a time (never the instruction or the current
observation); a prompt that does not fit even with no earlier turn raises
``ContextOverflow``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "PROMPT_STYLES",
    "TAGS",
    "TEMPLATE_WORDS",
    "ContextOverflow",
    "FittedPrompt",
    "PromptBuilder",
    "Turn",
    "fit_prompt",
    "tagged",
]

PROMPT_STYLES = ("flat", "chat")
_SLOT = "\u27e6cairn-assistant-{}\u27e7"  # placeholder of an assistant turn while rendering

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
    style: str = "flat"  # "flat" | "chat" (module docstring)
    tool_observations: bool = False  # chat: observations after the first are tool answers
    tools: tuple[dict[str, Any], ...] = ()  # JSON tool schemas for a template that renders them
    example: tuple[tuple[str, str], ...] = ()  # (observation, completion) turns shown first
    response_prefix: str = ""  # opens the reply the prompt asks for (module docstring)

    def __post_init__(self) -> None:
        if self.style not in PROMPT_STYLES:
            raise ValueError(
                f"prompt style {self.style!r} is not one of {', '.join(PROMPT_STYLES)}"
            )
        if self.style == "chat" and not getattr(self.chat_template, "chat_template", None):
            raise ValueError(
                "prompt_style 'chat' needs a tokenizer with a chat template "
                "(model.tokenizer: chat for the tiny default, or a model.path that ships one)"
            )

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
        lines += [f"{OBS} {o} {ACT} {c}" for o, c in self.example]
        shown = past[len(past) - self.history :] if self.history > 0 else ()
        lines += [f"{OBS} {o} {ACT} {a}" for o, a in shown]
        lines.append(f"{OBS} {observation} {ACT}")
        text = "\n".join(lines)
        if self.chat_template is None:
            return f"{text} {self.response_prefix}" if self.response_prefix else text
        if self.style == "chat":  # the conversation as text (display; ids: chat_ids)
            return self._render(self.messages(instruction, shown, observation, extra, len(past)))
        return self._render([{"role": "user", "content": text}])

    def with_example(self, example: tuple[tuple[str, str], ...]) -> PromptBuilder:
        """This builder showing ``example`` instead (a per-episode demonstration)."""
        return replace(self, example=example)

    @property
    def renders_tools(self) -> bool:
        """The prompts carry ``tools`` through the chat template: there are tools and the
        template renders them (its source mentions ``tools``)."""
        source = getattr(self.chat_template, "chat_template", None)
        return bool(self.tools) and isinstance(source, str) and "tools" in source

    def _render(self, messages: list[dict[str, str]]) -> str:
        extra = {"tools": list(self.tools)} if self.renders_tools else {}
        text = self.chat_template.apply_chat_template(  # type: ignore[attr-defined]
            messages, tokenize=False, add_generation_prompt=True, **extra
        )
        return text + self.response_prefix

    def messages(
        self,
        instruction: str,
        shown: Sequence[tuple[str, str]],
        observation: str,
        extra: str = "",
        turn: int | None = None,
    ) -> list[dict[str, str]]:
        """The chat messages: system, the ``example`` exchange, then (observation, assistant)
        per shown turn, then the
        current observation. ``turn`` is the current turn's index in the episode (default:
        ``len(shown)``); only the episode's first observation is a user turn when
        observations are tool answers."""
        turn = len(shown) if turn is None else turn
        first = turn - len(shown)  # episode index of the first shown turn
        system = "\n".join(x for x in (instruction, extra) if x)
        out = [{"role": "system", "content": system}] if system else []
        for k, (obs, completion) in enumerate(self.example):
            out.append({"role": self._obs_role(k), "content": obs})
            out.append({"role": "assistant", "content": completion})
        for k, (obs, action) in enumerate(shown):
            out.append({"role": self._obs_role(first + k), "content": obs})
            out.append({"role": "assistant", "content": action})
        out.append({"role": self._obs_role(turn), "content": observation})
        return out

    def _obs_role(self, t: int) -> str:
        return "tool" if self.tool_observations and t > 0 else "user"

    def chat_ids(
        self,
        encode: Callable[[str], list[int]],
        eos_id: int | None,
        instruction: str,
        shown: Sequence[tuple[str, Sequence[int]]],
        observation: str,
        extra: str = "",
        turn: int | None = None,
    ) -> list[int]:
        """Token-in/token-out prompt ids (module docstring): ``shown`` holds each shown
        earlier turn's (observation, sampled action ids). A sampled completion that ended
        with eos already closes its turn, so the template's own end-of-turn text right
        after it is not added again."""
        prefix = self.response_prefix  # each earlier reply: the prefix, then its sampled ids
        slots = [(obs, prefix + _SLOT.format(k)) for k, (obs, _) in enumerate(shown)]
        text = self._render(self.messages(instruction, slots, observation, extra, turn))
        eos = self.chat_template.eos_token if eos_id is not None else None  # type: ignore[attr-defined]
        ids: list[int] = []
        for k, (_, action_ids) in enumerate(shown):
            before, text = text.split(_SLOT.format(k), 1)
            ids += encode(before) if before else []
            ids += list(action_ids)
            if eos and action_ids and action_ids[-1] == eos_id and text.startswith(eos):
                text = text[len(eos) :]
        return ids + (encode(text) if text else [])


@dataclass(frozen=True)
class Turn:
    """An earlier turn as a prompt shows it: the observation, the action and the ids the
    model sampled for it (the completion, end-of-turn token included)."""

    observation: str
    action: str
    action_ids: Sequence[int]


@dataclass(frozen=True)
class FittedPrompt:
    """Prompt ids within the budget; ``dropped``: oldest shown turns left out to fit."""

    ids: list[int]
    dropped: int = 0


class ContextOverflow(ValueError):
    """Even with no earlier turn the prompt exceeds the context budget."""


def fit_prompt(
    prompt: Any,
    encode: Callable[[str], list[int]],
    eos_id: int | None,
    instruction: str,
    past: Sequence[Turn],
    observation: str,
    budget: int | None = None,
) -> FittedPrompt:
    """The prompt ids of the current turn, dropping the oldest shown turns to fit ``budget``.

    ``prompt`` is a ``PromptBuilder`` or a wrapper with the same ``build`` (memory tips):
    the flat style encodes its text, the chat style builds token-in/token-out ids.
    """
    history = getattr(prompt, "history", 0)
    shown = list(past[len(past) - history :]) if history > 0 else []
    chat = getattr(prompt, "style", "flat") == "chat"
    for dropped in range(len(shown) + 1):
        keep = shown[dropped:]
        if chat:
            pairs = [(s.observation, s.action_ids) for s in keep]
            ids = prompt.chat_ids(encode, eos_id, instruction, pairs, observation, turn=len(past))
        else:
            ids = encode(
                prompt.build(instruction, [(s.observation, s.action) for s in keep], observation)
            )
        if budget is None or len(ids) <= budget:
            return FittedPrompt(list(ids), dropped)
    raise ContextOverflow(
        f"the prompt needs {len(ids)} tokens with no earlier turn shown, over the context "
        f"budget of {budget} (model.max_context minus rollout.max_new_tokens)"
    )
