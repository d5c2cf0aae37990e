"""One turn of one episode, the step shared by ``cairn train``'s batched loop
(``cairn.rollout.loop.play``) and verl's asynchronous agent loop
(``cairn.integrations.verl.episode.play_episode``): every ``agent.*`` key means the same in
both. A turn, in order:

    start        (once) the reset info's task keys (``TASK_INFO_KEYS``) onto the episode
    turn_prompt  the prompt ids: ``fit_prompt`` with ``instruction_for``'s instruction
                 and ``shown_observation``'s observation within ``settings.context_budget``
                 (old turns dropped to fit are listed in ``events.context_dropped``); a
                 prompt that cannot fit ends the episode, failed and truncated
                 (``events.end``: a context overflow): None
    [generate]   by the caller: batched in ``play``, one request at a time in verl
    parse        the completion's action (``action_pattern``, else ``action_format``); None
                 when it has none, and the env then steps with the empty action
    [env step]   by the caller: ``step_all`` in ``play``, awaited in verl
    record       the Step of the applied action: the env's reward and validity, the
                 invalid penalty, env-reported columns (``ENV_COLUMNS``: IGPO's info gain);
                 a completion cut at ``max_new_tokens`` is listed in
                 ``events.truncated_actions``, one without an action in
                 ``events.format_errors`` (invalid, penalised), a well-formed one the env
                 accepts earns ``format_reward`` (``Step.shaped["format"]``) unless the env
                 reports it made no progress (``info["no_progress"]``: a move into a wall,
                 an answer given without any search): then it earns no bonus and costs
                 ``no_progress_penalty``
    advance      the env's answer becomes the state; the episode ends where the env ends it
                 or at ``max_turns`` (then truncated), with the env's ``success`` and,
                 where the env judges it, ``info["task_blind"]`` as ``meta["task_blind"]``
                 (the episode did not use the task: each env's docstring says how it tells)

A per-episode demonstration: an env whose reset info holds ``demonstration`` ((observation,
action) turns, drawn per task instance from a pool) replaces the prompt's fixed example
exchange with it (``episode_prompt``), so no single answer is shown in every prompt.

``instruction_for``: the instruction a prompt starts with: ``agent.instruction`` when set,
else the env's (which may change on reset), followed by the answer format of
``agent.action_format`` when ``agent.describe_format`` is on.

``shown_observation``: the current observation as the prompt shows it. With
``agent.show_admissible`` the env's admissible actions (``info["admissible"]``) follow it,
one per line, as GiGPO's prompts list ALFWorld's (arXiv 2505.10978, verl-agent): a model
that writes free text then chooses among the actions instead of guessing their wording.
Only the current turn lists them; earlier turns in the history show their observation
alone, and the step's ``observation`` and ``anchor`` stay the env's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from cairn.agent import (
    ContextOverflow,
    Turn,
    describe_format,
    example_completion,
    fit_prompt,
    parse_action,
)
from cairn.data.episode import Episode, Step
from cairn.data.events import EndReason, EpisodeEnd

if TYPE_CHECKING:
    from cairn.envs import StepResult, TextEnv
    from cairn.rollout.settings import RolloutSettings

__all__ = [
    "ADMISSIBLE_HEADER",
    "ENV_COLUMNS",
    "TASK_INFO_KEYS",
    "Completion",
    "State",
    "advance",
    "episode_prompt",
    "instruction_for",
    "parse",
    "record",
    "shown_observation",
    "start",
    "turn_prompt",
]

#: Reset-info keys kept on the episode for rewards that need the task's ground truth.
TASK_INFO_KEYS = ("answer", "question", "key_steps", "demonstration")
_P = TypeVar("_P")  # a prompt builder, or a wrapper with its build (episode_prompt)
#: Step columns an env may report in its step info (IGPO's info gain), kept on the Step.
ENV_COLUMNS = ("info_gain",)

#: (observation, info): where an episode stands before its next turn.
State = tuple[str, dict[str, Any]]
#: The line that opens the list of admissible actions (``shown_observation``).
ADMISSIBLE_HEADER = "Admissible actions:"


class Completion(Protocol):
    """What a turn reads of a sampled completion (``cairn.policies.hf.Generation``)."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish: str  # "eos" | "stop" | "length" | "choice"
    allowed: list[list[int]] | None


def instruction_for(
    env: TextEnv, settings: RolloutSettings, tools_in_template: bool = False
) -> str:
    """The instruction of ``env``'s prompts under ``settings`` (module docstring);
    ``tools_in_template``: the chat template renders the env's tools itself."""
    base = settings.instruction if settings.instruction is not None else env.instruction
    if not settings.describe_format:
        return base
    fmt = describe_format(settings.action_format, env.example_action, env.tools, tools_in_template)
    return f"{base}\n{fmt}" if base else fmt


def episode_prompt(
    prompt: _P,
    demonstration: Sequence[tuple[str, str]] | None,
    env: TextEnv,
    settings: RolloutSettings,
) -> _P:
    """``prompt`` with its example exchange replaced by ``demonstration`` (the env's
    per-episode (observation, action) turns, written in ``settings.action_format``);
    ``prompt`` itself where there is none or the prompt shows no example (the tiny default,
    ``agent.describe_format`` off) or cannot swap it."""
    swap = getattr(prompt, "with_example", None)
    if not demonstration or not getattr(prompt, "example", ()) or swap is None:
        return prompt
    tools = getattr(env, "tools", ())
    fmt = settings.action_format
    return swap(tuple((obs, example_completion(fmt, a, tools)) for obs, a in demonstration))


def shown_observation(state: State, settings: RolloutSettings) -> str:
    """The observation of ``state`` as the prompt shows it: with ``settings.show_admissible``
    and an env that lists its actions, followed by ``ADMISSIBLE_HEADER`` and one action a
    line (module docstring)."""
    observation, info = state
    actions = info.get("admissible") if settings.show_admissible else None
    if not actions:
        return observation
    return "\n".join((observation.rstrip(), ADMISSIBLE_HEADER, *actions))


def start(episode: Episode, info: dict[str, Any]) -> None:
    """Keep the reset ``info``'s task keys (``TASK_INFO_KEYS``) on ``episode``."""
    episode.meta.update({k: info[k] for k in TASK_INFO_KEYS if k in info})


def turn_prompt(
    episode: Episode,
    env: TextEnv,
    state: State,
    prompt: Any,
    encode: Callable[[str], list[int]],
    eos_id: int | None,
    settings: RolloutSettings,
) -> list[int] | None:
    """The prompt ids of ``episode``'s next turn in ``state`` (``prompt``: a
    ``PromptBuilder`` or a wrapper with its ``build``), or None when even the shortest
    prompt exceeds the context budget: the episode then ends there (module docstring)."""
    observation = shown_observation(state, settings)
    past = [Turn(s.observation, s.action, s.action_ids) for s in episode.steps]
    instruction = instruction_for(env, settings, getattr(prompt, "renders_tools", False))
    prompt = episode_prompt(prompt, episode.meta.get("demonstration"), env, settings)
    try:
        fitted = fit_prompt(
            prompt, encode, eos_id, instruction, past, observation, settings.context_budget
        )
    except ContextOverflow as err:
        episode.events.end = EpisodeEnd(EndReason.CONTEXT_OVERFLOW, len(episode.steps), str(err))
        episode.truncated, episode.success = True, False
        return None
    if fitted.dropped:
        episode.events.add_context_cut(len(episode.steps), fitted.dropped)
    return fitted.ids


def parse(text: str, settings: RolloutSettings) -> str | None:
    """The action in a completion's ``text`` (read after ``settings.response_prefix``, which
    the prompt wrote), or None (a format error)."""
    full = settings.response_prefix + text
    return parse_action(full, settings.action_pattern, settings.action_format)


def record(
    episode: Episode,
    state: State,
    prompt_ids: list[int],
    gen: Completion,
    parsed: str | None,
    result: StepResult,
    settings: RolloutSettings,
) -> Step:
    """Append the Step of the action ``parsed`` from ``gen`` (None: none, the env got ""),
    taken in ``state`` (the (observation, info) it was chosen in), with the env's answer
    ``result``; counts a cut completion and a format error, rewards a well-formed action
    the env accepts (one it rejects, such as a call to a tool it lacks, earns nothing: a
    bonus for form alone is a reward that RL learns to collect without acting; nor does
    one the env says made no progress, ``info["no_progress"]``, which costs
    ``settings.no_progress_penalty``)."""
    obs, info = state
    next_info = result[4]
    valid = bool(next_info.get("valid", True))
    step = Step(
        t=len(episode.steps),
        observation=obs,
        anchor=info.get("anchor", obs),
        action=parsed or "",
        completion=gen.text,
        reward=float(result[1]),
        valid=valid,
        penalty=0.0 if valid else settings.invalid_penalty,
        prompt_ids=prompt_ids,
        action_ids=gen.token_ids,
        logprobs=gen.logprobs,
        allowed=gen.allowed,
        columns={k: float(next_info[k]) for k in ENV_COLUMNS if k in next_info},
    )
    episode.steps.append(step)
    if gen.finish == "length":
        episode.events.add_truncated_action(step.t)
    if parsed is None:
        episode.events.add_format_error(step.t)
        step.valid, step.penalty = False, settings.invalid_penalty
    elif step.valid and next_info.get("no_progress", False):
        step.penalty = settings.no_progress_penalty
    elif settings.format_reward and step.valid:
        step.shaped["format"] = settings.format_reward
    return step


def advance(episode: Episode, result: StepResult, settings: RolloutSettings) -> tuple[State, bool]:
    """(the state the episode continues from, whether it goes on) after the env's answer
    ``result``: it ends where the env ends it or at ``settings.max_turns``."""
    next_obs, _, terminated, truncated, next_info = result
    out_of_turns = settings.max_turns is not None and len(episode.steps) >= settings.max_turns
    if terminated or truncated or out_of_turns:
        episode.success = bool(next_info.get("success", False))
        episode.terminated, episode.truncated = bool(terminated), not terminated
        if "task_blind" in next_info:
            episode.meta["task_blind"] = bool(next_info["task_blind"])
        return (next_obs, next_info), False
    return (next_obs, next_info), True
