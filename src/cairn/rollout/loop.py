"""The turn loop: every live episode advances one turn at a time, all of them together.

Each turn builds every active episode's prompt, samples all actions in one batched
``generate`` call, then steps every env (``step_all``: envs on worker processes,
``rollout.workers``, step concurrently; see ``cairn.rollout.envpool.calls``).

A strategy that needs more than "generate, parse, step" in a turn passes a ``TurnHook``:
``after_generate`` sees the turn's prompts, generations and actions before the envs step
(SSRL samples its self-written search results there), and ``amend`` edits the recorded
step and the answer the episode continues from. Without a hook (the common path) the loop
pays nothing for it.

Env faults cost one episode, not the run. An env that raises in ``reset`` or ``step``, runs
past ``rollout.env_timeout_s`` or whose worker dies answers with an ``EnvFault``
(``cairn.rollout.envpool.calls``; its pool counts it and rebuilds the env): the loop ends
that episode there (``events.fault``: "error" or "timeout", ``truncated``) and
``drop_faulted`` removes it from the rollout's output. A group that lost an episode keeps
the others if at least 2 remain, else it is dropped whole: the group-relative estimators
(GRPO, GiGPO, RLOO, ...) compare each episode with the rest of its group, which is still
a valid comparison among the survivors, but a lone survivor has nothing to be compared
with (zero advantage, or a division by G - 1 = 0) and only costs a forward pass.

The turn itself (prompt, parse, record, advance) is ``cairn.rollout.turn``'s, the same
functions verl's agent loop calls, so every ``agent.*`` key means the same in both. Free
text is counted, never silently fixed (``turn_stats``): a completion with no parsable
action steps the env with an empty action, is recorded invalid and penalised (its turn in
``events.format_errors``, ``cairn.data.events``); one cut at ``max_new_tokens`` is in
``events.truncated_actions``; a well-formed one the env accepts may earn
``settings.format_reward``. A
turn whose prompt dropped old turns to fit ``settings.context_budget`` is in
``events.context_dropped``; one that cannot fit even then ends its episode, failed and
truncated, with ``events.end`` (``EndReason.CONTEXT_OVERFLOW``, the turn, the error).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from cairn import _progress
from cairn._env_host import EnvFault, EnvFaultRateError
from cairn.agent import PromptBuilder
from cairn.data.episode import Episode, Step
from cairn.data.events import TURN_EVENTS, EndReason
from cairn.envs import StepResult, TextEnv
from cairn.policies.hf import Generation
from cairn.rollout import turn
from cairn.rollout.envpool.calls import reset_all, step_all
from cairn.rollout.envpool.faults import FaultStats, owner_of
from cairn.rollout.settings import RolloutSettings
from cairn.rollout.turn import TASK_INFO_KEYS

__all__ = [
    "TASK_INFO_KEYS",
    "TURN_EVENTS",
    "Policy",
    "RolloutSettings",
    "TurnHook",
    "drop_faulted",
    "end_by_fault",
    "play",
    "rollout",
    "tasks_for_groups",
    "turn_stats",
]


class Policy(Protocol):
    """What the turn loop asks of a policy: ``cairn.policies.hf.HFPolicy``, or a wrapper
    of one that sees each call (the branching strategies' recorder)."""

    @property
    def eos_id(self) -> int | None:
        """The end-of-turn id a sampled completion may end with (chat prompts splice it)."""
        ...

    def encode(self, text: str) -> list[int]: ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 32,
        stop: Sequence[str] = (),
        choices: Sequence[Sequence[str] | None] | None = None,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """One completion per prompt (``HFPolicy.generate``)."""
        ...


class TurnHook(Protocol):
    """What a strategy adds to a turn of ``play`` (see the module docstring)."""

    def after_generate(
        self,
        policy: Policy,
        settings: RolloutSettings,
        generator: torch.Generator | None,
        prompt_ids: list[list[int]],
        gens: list[Generation],
        actions: list[str],
    ) -> list[Any]:
        """One extra per active row (None: the row is left alone), before the envs step."""
        ...

    def amend(self, step: Step, result: StepResult, extra: Any) -> StepResult:
        """Edit the recorded ``step``; returns the env answer the episode continues from."""
        ...


def tasks_for_groups(seeds: Sequence[int], group_size: int) -> list[tuple[int, int]]:
    """(group id, env seed) for every episode: ``group_size`` copies of each seed."""
    return [(g, int(seed)) for g, seed in enumerate(seeds) for _ in range(group_size)]


def rollout(
    policy: Policy,
    envs: Sequence[TextEnv],
    tasks: Sequence[tuple[int, int]],
    prompt: PromptBuilder,
    settings: RolloutSettings,
    generator: torch.Generator | None = None,
    first_episode_id: int = 0,
    hook: TurnHook | None = None,
) -> list[Episode]:
    """Run one episode per task ``(group, seed)`` on ``envs[i]``; returns them in task order."""
    if len(envs) < len(tasks):
        raise ValueError(f"rollout needs {len(tasks)} envs, got {len(envs)}")
    episodes = [
        Episode(id=first_episode_id + i, group=g, task=seed) for i, (g, seed) in enumerate(tasks)
    ]
    pool = owner_of(envs[0]) if tasks else None  # before a fault replaces envs[0] there
    states: list[turn.State] = []
    for episode, state in zip(episodes, reset_all(envs, [seed for _, seed in tasks]), strict=True):
        if isinstance(state, EnvFault):
            end_by_fault(episode, state)
            state = ("", {})
        else:
            turn.start(episode, state[1])
        states.append(state)
    play(policy, envs, episodes, states, prompt, settings, generator, hook=hook)
    return drop_faulted(episodes, pool.faults if pool is not None else None)


def end_by_fault(episode: Episode, fault: EnvFault) -> None:
    """End ``episode`` where it is: an infrastructure failure, not the agent's."""
    episode.events.fault, episode.events.fault_error = fault.kind, str(fault)
    episode.truncated, episode.success = True, False


def drop_faulted(episodes: list[Episode], stats: FaultStats | None = None) -> list[Episode]:
    """``episodes`` without those a fault ended, and without the groups that kept fewer
    than 2 of theirs (module docstring). ``stats`` (a pool's ``FaultStats``) counts both."""
    faulted = [e for e in episodes if e.events.faulted]
    if stats is not None:
        stats.episodes += len(episodes)
        stats.lost += len(faulted)
    if not faulted:
        return episodes
    hit = {e.group for e in faulted}
    kept = [e for e in episodes if not e.events.faulted]
    left = Counter(e.group for e in kept if e.group in hit)
    kept = [e for e in kept if e.group not in hit or left[e.group] >= 2]
    if not kept:  # nothing to learn from: a clear stop, not an empty update's traceback
        raise EnvFaultRateError(
            f"env faults left no group of {len({e.group for e in episodes})} with 2 episodes "
            f"({len(faulted)} of {len(episodes)} episodes ended by an env "
            f"{faulted[-1].events.fault}); fix the env, then resume from the last "
            "checkpoint (--resume)"
        )
    return kept


def play(
    policy: Policy,
    envs: Sequence[TextEnv],
    episodes: Sequence[Episode],
    states: list[turn.State],
    prompt: PromptBuilder,
    settings: RolloutSettings,
    generator: torch.Generator | None = None,
    turns: int | None = None,
    hook: TurnHook | None = None,
) -> list[int]:
    """Advance ``episodes[i]`` on ``envs[i]`` from ``states[i]`` (its current (obs, info)).

    Episodes may already hold steps (a branch continues its parent's prefix). Plays until
    every episode ends, or for at most ``turns`` turns; ``states`` is updated in place.
    Returns the indices of the episodes still running.
    """
    active = [i for i, e in enumerate(episodes) if not (e.terminated or e.truncated)]
    played = 0
    while active and (turns is None or played < turns):
        active, prompt_ids = _prompts(policy, envs, episodes, states, prompt, settings, active)
        if not active:
            break
        choices = [states[i][1].get("admissible") for i in active]
        gens = policy.generate(
            prompt_ids,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_new_tokens=settings.max_new_tokens,
            stop=settings.stop,
            choices=choices if settings.restrict_to_admissible else None,
            greedy=settings.greedy,
            generator=generator,
        )
        parsed = [turn.parse(gen.text, settings) for gen in gens]
        actions = [a or "" for a in parsed]
        extras = (
            hook.after_generate(policy, settings, generator, prompt_ids, gens, actions)
            if hook is not None
            else [None] * len(active)
        )
        results = step_all([envs[i] for i in active], actions)  # env workers step together
        still = []
        for i, ids, gen, ok, result, extra in zip(
            active, prompt_ids, gens, parsed, results, extras, strict=True
        ):
            if isinstance(result, EnvFault):
                end_by_fault(episodes[i], result)
                continue
            step = turn.record(episodes[i], states[i], ids, gen, ok, result, settings)
            if hook is not None and extra is not None:
                result = hook.amend(step, result, extra)
            states[i], goes_on = turn.advance(episodes[i], result, settings)
            if goes_on:
                still.append(i)
        _progress.turn_done(played + 1, len(active) - len(still))  # the live line's counts
        active, played = still, played + 1
    return active


def _prompts(
    policy: Policy,
    envs: Sequence[TextEnv],
    episodes: Sequence[Episode],
    states: list[turn.State],
    prompt: PromptBuilder,
    settings: RolloutSettings,
    active: list[int],
) -> tuple[list[int], list[list[int]]]:
    """(episodes still playing, their prompt ids): an episode whose prompt cannot fit in
    the context budget ends there (``turn.turn_prompt``)."""
    kept, ids = [], []
    eos = getattr(policy, "eos_id", None)
    for i in active:
        p = turn.turn_prompt(episodes[i], envs[i], states[i], prompt, policy.encode, eos, settings)
        if p is not None:
            kept.append(i)
            ids.append(p)
    return kept, ids


def turn_stats(episodes: Sequence[Episode], prefix: str) -> dict[str, float]:
    """Free-text counters summed over ``episodes`` (``prefix/format_errors``,
    ``truncated_actions``, ``context_truncated``: turns whose prompt dropped old turns,
    ``context_overflows``: episodes ended by one that could not fit), the format-error rate
    per step and the mean completion length in tokens."""
    steps = [s for e in episodes for s in e.steps]
    events = [e.events for e in episodes]
    out = {
        f"{prefix}/format_errors": float(sum(len(x.format_errors or ()) for x in events)),
        f"{prefix}/truncated_actions": float(sum(len(x.truncated_actions or ()) for x in events)),
        f"{prefix}/context_truncated": float(sum(len(x.context_dropped or ()) for x in events)),
        f"{prefix}/context_overflows": float(
            sum(x.end_reason is EndReason.CONTEXT_OVERFLOW for x in events)
        ),
    }
    out[f"{prefix}/format_error_rate"] = out[f"{prefix}/format_errors"] / max(1, len(steps))
    out[f"{prefix}/completion_tokens"] = sum(len(s.action_ids) for s in steps) / max(1, len(steps))
    return out
