"""One cairn episode, turn by turn, with an asynchronous token-in/token-out generator.

The turn is cairn's own (``cairn.rollout.turn``, the functions ``cairn train``'s batched
loop calls): the prompt ids by ``fit_prompt`` (the instruction of ``instruction_for``, the
last ``history`` turns, ``prompt_style`` flat or chat with every earlier turn's sampled
ids spliced in, within ``settings.context_budget``), the action by ``action_pattern`` /
``action_format``, format errors, cut completions and ``format_reward`` recorded as there,
the env's step, the Step, the end of the episode. What differs is only how a completion
arrives: one awaited request of sampled ids (``generate``), whose text is the decoded ids
cut at the first stop string (``completion_text``, as ``HFPolicy``), and whose finish
reason is read off the ids (``finish_reason``). The ids sent to the server and the ids it
sampled are what is stored: nothing is decoded and encoded again between turns.

verl-free, so that the turn loop is tested and timed without a server
(``benchmarks/scale/verl_overhead.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cairn.agent import PromptBuilder
from cairn.data.episode import Episode
from cairn.envs import TextEnv
from cairn.policies.hf import Generation
from cairn.rollout import RolloutSettings, turn

__all__ = [
    "EnvFailure",
    "Sample",
    "TurnTokens",
    "completion_text",
    "finish_reason",
    "play_episode",
]


@dataclass
class Sample:
    """What one generate call returned: sampled ids, their log-probs, server extras."""

    token_ids: list[int]
    logprobs: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


Generate = Callable[[list[int]], Awaitable[Sample]]
_T = TypeVar("_T")


@dataclass
class TurnTokens:
    """Per step of the episode: whether log-probs came back and the server's extras."""

    has_logprobs: list[bool] = field(default_factory=list)
    extra: list[dict[str, Any]] = field(default_factory=list)


class EnvFailure(RuntimeError):
    """The env raised; the episode cannot be scored (see ``CairnAgentLoop``)."""


def completion_text(tokenizer: Any, ids: Sequence[int], stop: Sequence[str]) -> str:
    """The text of sampled ids as cairn's policy gives it: decoded, cut at a stop, stripped."""
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    for s in stop:
        if s in text:
            text = text[: text.index(s)]
    return text.strip()


def finish_reason(
    ids: Sequence[int], text: str, eos_id: int | None, stop: Sequence[str], max_new_tokens: int
) -> str:
    """Why a server's completion ended, as ``HFPolicy.generate`` names it: ``eos`` (its
    last id), ``stop`` (a stop string in ``text``, the decoded ids), ``length`` (cut at
    ``max_new_tokens``), else ``eos`` (the server ended it on another stop id)."""
    if ids and eos_id is not None and ids[-1] == eos_id:
        return "eos"
    if any(s in text for s in stop):
        return "stop"
    return "length" if len(ids) >= max_new_tokens else "eos"


def _generation(tokenizer: Any, sample: Sample, settings: RolloutSettings) -> Generation:
    """A server's ``sample`` as the completion a turn records (``cairn.rollout.turn``)."""
    ids = list(sample.token_ids)
    full = tokenizer.decode(ids, skip_special_tokens=True)
    return Generation(
        token_ids=ids,
        logprobs=list(sample.logprobs or []),
        text=completion_text(tokenizer, ids, settings.stop),
        finish=finish_reason(
            ids, full, tokenizer.eos_token_id, settings.stop, settings.max_new_tokens
        ),
    )


async def _env_call(fn: Callable[..., _T], *args: object, in_thread: bool, **kwargs: object) -> _T:
    try:
        if in_thread:  # a slow env (a JVM, a simulator) must not stall the other episodes
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, lambda: fn(*args, **kwargs))
        return fn(*args, **kwargs)
    except Exception as err:
        raise EnvFailure(f"{type(err).__name__}: {err}") from err


async def play_episode(
    env: TextEnv,
    seed: int,
    generate: Generate,
    tokenizer: Any,
    prompt: PromptBuilder,
    settings: RolloutSettings,
    *,
    episode_id: int = 0,
    group: int = 0,
    env_in_thread: bool = False,
) -> tuple[Episode, TurnTokens]:
    """Play one episode of ``env`` from ``seed`` (module docstring); raises EnvFailure
    when the env raises. An episode whose prompt outgrows ``settings.context_budget`` ends
    there (``events.end``), with no step when it was the first prompt."""
    obs, info = await _env_call(env.reset, in_thread=env_in_thread, seed=seed)
    episode = Episode(id=episode_id, group=group, task=seed)
    turn.start(episode, info)
    tokens = TurnTokens()

    def encode(text: str) -> list[int]:  # as HFPolicy.encode
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    while True:
        prompt_ids = turn.turn_prompt(
            episode, env, (obs, info), prompt, encode, tokenizer.eos_token_id, settings
        )
        if prompt_ids is None:
            return episode, tokens
        sample = await generate(prompt_ids)
        gen = _generation(tokenizer, sample, settings)
        parsed = turn.parse(gen.text, settings)
        result = await _env_call(env.step, parsed or "", in_thread=env_in_thread)
        turn.record(episode, (obs, info), prompt_ids, gen, parsed, result, settings)
        tokens.has_logprobs.append(sample.logprobs is not None)
        tokens.extra.append(dict(sample.extra))
        (obs, info), goes_on = turn.advance(episode, result, settings)
        if not goes_on:
            return episode, tokens
