"""Tip writers for EMPO2's memory (arXiv 2602.23008, Sec. 3.1, "self-generated memory").

One protocol, ``write(episodes, instructions) -> one list of Tip per episode``:

- ``PolicyTipWriter`` (the paper's way, for real LLMs): the policy itself reads the
  episode (its last turns and how it ended) and writes a one-sentence tip of at most
  ``max_words`` words (paper: < 100). The tip is keyed by the episode's first observation
  (the task context) and scored by the episode's return.
- ``TemplateTipWriter`` (for the tiny default, which cannot write prose): a summary from
  env facts. For each state the episode visited (its context), the tip names the actions
  the episode tried from there (``horizon`` of them) and, with ``{last}`` in the
  template, the last state it reached; its score is how far the episode got (its return,
  shaped and intrinsic terms included). Only words the env already uses appear, so a
  word-level tokenizer reads every tip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import torch

from cairn.agent import PromptBuilder
from cairn.data.episode import Episode
from cairn.exploration.memory import Tip
from cairn.exploration.registries import WRITERS

if TYPE_CHECKING:
    from cairn.policies.hf import HFPolicy

__all__ = ["WRITERS", "PolicyTipWriter", "TemplateTipWriter", "TipWriter", "make_writer"]

_FIELDS = ("actions", "last", "return", "steps")


class TipWriter(Protocol):
    def write(self, episodes: Sequence[Episode], instructions: Sequence[str]) -> list[list[Tip]]:
        """Tips of each episode (``instructions[i]`` is the task text of ``episodes[i]``)."""
        ...


class TemplateTipWriter:
    """Per visited state: ``template`` filled with the actions tried from it.

    Fields: ``{actions}`` the next ``horizon`` actions from that state, ``{last}`` the last
    observation of the episode, ``{return}`` its return (2 decimals), ``{steps}`` its length.
    """

    def __init__(self, template: str = "act: {actions}", horizon: int = 3):
        if horizon < 1:
            raise ValueError(f"template writer horizon must be >= 1, got {horizon}")
        try:
            template.format(**dict.fromkeys(_FIELDS, ""))
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(
                f"tip template {template!r} is invalid ({err}); fields: {', '.join(_FIELDS)}"
            ) from None
        self.template, self.horizon = template, horizon

    def write(self, episodes: Sequence[Episode], instructions: Sequence[str]) -> list[list[Tip]]:
        return [self._episode(e) for e in episodes]

    def _episode(self, e: Episode) -> list[Tip]:
        if not e.steps:
            return []
        actions = [s.action or "none" for s in e.steps]
        facts = {"last": e.steps[-1].observation, "return": f"{e.ret:.2f}", "steps": len(actions)}
        return [
            Tip(
                context=s.observation,
                text=self.template.format(
                    actions=" ".join(actions[t : t + self.horizon]), **facts
                ).strip(),
                score=e.ret,
            )
            for t, s in enumerate(e.steps)
        ]


class PolicyTipWriter:
    """The policy writes one tip per episode from its history (EMPO2's self-reflection)."""

    PROMPT = (
        "Here is how an attempt at the task went.\n{history}\nIt ended with {outcome} after "
        "{steps} steps (return {ret:.2f}). In one sentence of under {words} words, write a tip "
        "for the next attempt: what you learned and how far you got.\ntips:"
    )

    def __init__(
        self,
        policy: HFPolicy,
        prompt: PromptBuilder,
        max_new_tokens: int = 64,
        temperature: float = 0.7,
        turns: int = 8,
        max_words: int = 100,
        generator: torch.Generator | None = None,
    ):
        if max_new_tokens < 1 or turns < 1 or max_words < 1:
            raise ValueError("policy tip writer needs max_new_tokens, turns, max_words >= 1")
        self.policy, self.prompt = policy, prompt
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.turns, self.max_words, self.generator = turns, max_words, generator

    def _request(self, e: Episode, instruction: str) -> str:
        history = "\n".join(f"obs: {s.observation} act: {s.action}" for s in e.steps[-self.turns :])
        outcome = "success" if e.success else "failure"
        text = self.PROMPT.format(
            history=history, outcome=outcome, steps=len(e.steps), ret=e.ret, words=self.max_words
        )
        return self.prompt.build(instruction, [], text)

    def write(self, episodes: Sequence[Episode], instructions: Sequence[str]) -> list[list[Tip]]:
        todo = [i for i, e in enumerate(episodes) if e.steps]
        prompts = [self.policy.encode(self._request(episodes[i], instructions[i])) for i in todo]
        gens = self.policy.generate(
            prompts,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            generator=self.generator,
        )
        out: list[list[Tip]] = [[] for _ in episodes]
        for i, gen in zip(todo, gens, strict=True):
            words = gen.text.split()[: self.max_words]
            if words:
                e = episodes[i]
                out[i] = [Tip(e.steps[0].observation, " ".join(words), e.ret)]
        return out


def make_writer(name: str, policy: HFPolicy, prompt: PromptBuilder, **options: object) -> TipWriter:
    """``template`` or ``policy`` writer with its keyword options (the policy and the prompt
    builder go to the writers that take them)."""
    return WRITERS.build(name, options, policy=policy, prompt=prompt)
