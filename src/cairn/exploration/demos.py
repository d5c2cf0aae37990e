"""LUFFY's off-policy demonstrations mixed into each group (arXiv 2504.14945, Sec. 3).

Mixed-policy GRPO: every group of n_on on-policy episodes gets n_off expert
demonstrations of the same task instance (paper: 7 + 1); advantages are computed over the
mixed group (the estimators group by ``Episode.group``), and demonstration tokens are
trained with the shaped loss ``-A * p / (p + gamma)`` (gamma 0.1, no clipping, the expert's
probability taken as 1): ``Episode.source = 1`` sets the token batch's ``off_policy`` flag.

A demonstration is an action sequence *replayed* in the env from the group's seed, so its
steps have the very prompts, observations, rewards and anchors an on-policy episode would
have (the rollout's own prompt path, ``cairn.rollout.turn.turn_prompt``: the instruction
of ``instruction_for``, ``agent.instruction`` included, the observation of
``shown_observation``, the episode's task keys (``turn.start``); chat prompts
token-in/token-out with the earlier demo turns' ids spliced in, the context budget), and
its action ids are what the policy would emit for those actions: the admissible-choice
restriction included, so the shaped probability p is the one the restricted policy
assigns; in free text each action written in the rollout's ``action_format``
(``<action>a</action>`` or a tool call, ``cairn.agent.format_completion``), so the policy
imitates completions its own parser accepts. Sources:

- ``solver``: the env's own planner, ``env.solve()`` after reset (sokoban's BFS solver);
- ``jsonl``: a file of episodes (``cairn.data.episode.to_records`` lines, or any JSON
  objects with ``task`` and ``steps: [{action}, ...]``); ``match="task"`` uses only
  records of the group's task seed, ``match="any"`` replays the record ``seed % n`` (for
  envs whose task does not depend on the seed, e.g. a fixed map).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cairn._env_host import EnvFault
from cairn.agent import PromptBuilder, format_completion
from cairn.data.episode import Episode, Source, Step
from cairn.envs import TextEnv
from cairn.exploration.registries import SOURCES
from cairn.rollout import turn

if TYPE_CHECKING:
    from cairn.policies.hf import HFPolicy
    from cairn.rollout.settings import RolloutSettings

__all__ = [
    "SOURCES",
    "SOURCE_DEMO",
    "DemoSource",
    "JsonlDemos",
    "SolverDemos",
    "constrained_ids",
    "demo_episode",
    "make_source",
    "mix_demos",
]

SOURCE_DEMO = Source.DEMO  # Episode.source of an off-policy demonstration


class DemoSource(Protocol):
    def actions(self, env: TextEnv, seed: int, k: int) -> list[str] | None:
        """The k-th demonstration's actions for the task of ``seed`` (``env`` just reset
        to it), or None when there is none."""
        ...


class SolverDemos:
    """``solver``: the env's planner (``env.solve()``), e.g. sokoban's BFS."""

    name = "solver"

    def actions(self, env: TextEnv, seed: int, k: int) -> list[str] | None:
        solve = getattr(env, "solve", None)
        if not callable(solve):
            raise ValueError(
                f"demo source 'solver' needs an env with solve(); {type(env).__name__} has "
                "none (use source 'jsonl')"
            )
        plan = solve()
        return None if plan is None else list(plan)


class JsonlDemos:
    """``jsonl``: recorded episodes; see the module docstring for the formats."""

    name = "jsonl"

    def __init__(self, path: str | Path, match: str = "task"):
        if match not in ("task", "any"):
            raise ValueError(f"jsonl demos match must be 'task' or 'any', got {match!r}")
        self.match = match
        self.records = _read_records(Path(path))
        if not self.records:
            raise ValueError(f"demo file {str(path)!r} holds no episode with steps")
        self.by_task: dict[int, list[list[str]]] = {}
        for task, actions in self.records:
            self.by_task.setdefault(task, []).append(actions)

    def actions(self, env: TextEnv, seed: int, k: int) -> list[str] | None:
        if self.match == "any":
            return self.records[(seed + k) % len(self.records)][1]
        options = self.by_task.get(int(seed), [])
        return options[k % len(options)] if options else None


def _read_records(path: Path) -> list[tuple[int, list[str]]]:
    if not path.exists():
        raise ValueError(f"demo file {str(path)!r} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n} is not JSON: {err}") from None
            for ep in rec.get("episodes", [rec]):  # a dump line may hold several
                steps = ep.get("steps") or []
                if steps:
                    out.append((int(ep.get("task", 0)), [str(s["action"]) for s in steps]))
    return out


def constrained_ids(
    encode: Callable[[str], Sequence[int]], action: str, choices: Sequence[str], eos_id: int
) -> tuple[list[int], list[list[int]]]:
    """The ids a choice-restricted policy emits for ``action`` and the ids allowed at each.

    Mirrors ``HFPolicy.generate`` with ``choices``: tokens walk a trie of the encoded
    choices; a choice that is a prefix of another needs an explicit end-of-sequence token.
    """
    seqs = [tuple(encode(c)) for c in choices]
    target = tuple(encode(action))
    if target not in seqs:
        raise ValueError(f"demo action {action!r} is not among the admissible {list(choices)}")
    ids, allowed = [], []
    for j in range(len(target) + 1):
        prefix = target[:j]
        nxt = list(dict.fromkeys(s[j] for s in seqs if len(s) > j and s[:j] == prefix))
        ends = prefix in seqs
        if j == len(target):
            if not nxt:  # a complete choice with no continuation: generation stops here
                break
            ids.append(eos_id)
            allowed.append([*nxt, eos_id])
            break
        ids.append(target[j])
        allowed.append([*nxt, eos_id] if ends else nxt)
    return ids, allowed


def demo_episode(
    env: TextEnv,
    seed: int,
    actions: Sequence[str],
    *,
    policy: HFPolicy,
    prompt: PromptBuilder,
    settings: RolloutSettings,
    episode_id: int,
    group: int,
    think: Callable[[str], str] | None = None,
) -> Episode:
    """Replay ``actions`` from ``env.reset(seed)`` as an ``Episode(source=1)`` (module
    docstring); ``think(observation)`` writes a ``<think>`` block before each free-text
    action. A prompt over the context budget ends the demonstration unsuccessful."""
    obs, info = env.reset(seed=seed)
    e = Episode(id=episode_id, group=group, task=int(seed), source=SOURCE_DEMO)
    turn.start(e, info)  # the task keys, as the rollout keeps them
    eos = getattr(policy, "eos_id", None)
    unk = getattr(getattr(policy, "tokenizer", None), "unk_token_id", None)
    for action in actions:
        prompt_ids = turn.turn_prompt(e, env, (obs, info), prompt, policy.encode, eos, settings)
        if prompt_ids is None:  # over the context budget: ends the demonstration, failed
            break
        choices = info.get("admissible") if settings.restrict_to_admissible else None
        completion = action
        if choices:
            ids, allowed = constrained_ids(policy.encode, action, choices, policy.eos_id)
        else:
            if settings.action_format != "line":
                completion = format_completion(
                    action, think(obs) if think else "", settings.action_format
                )
            written = completion.removeprefix(settings.response_prefix)  # the prompt has it
            ids, allowed = [*policy.encode(written), policy.eos_id], None
            if unk is not None and unk in ids:
                raise ValueError(
                    f"the tokenizer cannot write the demonstration {completion!r} (unknown "
                    "tokens); use a tokenizer that covers the env's actions"
                )
        nxt, reward, terminated, truncated, nxt_info = env.step(action)
        valid = bool(nxt_info.get("valid", True))
        step = Step(
            t=len(e.steps), observation=obs, anchor=info.get("anchor", obs), action=action,
            completion=completion, reward=float(reward), valid=valid,
            penalty=0.0 if valid else settings.invalid_penalty,
            prompt_ids=prompt_ids, action_ids=ids, logprobs=[0.0] * len(ids), allowed=allowed,
        )  # fmt: skip
        if valid and nxt_info.get("no_progress", False):  # as the rollout does
            step.penalty = getattr(settings, "no_progress_penalty", 0.0)
        elif completion != action and settings.format_reward and valid:
            step.shaped["format"] = settings.format_reward
        e.steps.append(step)
        obs, info = nxt, nxt_info
        out = settings.max_turns is not None and len(e.steps) >= settings.max_turns
        if terminated or truncated or out:
            e.terminated, e.truncated = bool(terminated), not terminated
            break
    e.success = bool(info.get("success", False))
    return e


def mix_demos(
    episodes: list[Episode],
    source: DemoSource,
    n_off: int,
    *,
    env: TextEnv,
    policy: HFPolicy,
    prompt: PromptBuilder,
    settings: RolloutSettings,
    only_successful: bool = True,
    on_fault: Callable[[], TextEnv] | None = None,
) -> list[Episode]:
    """``n_off`` demonstrations per group of ``episodes``, with fresh episode ids.

    ``on_fault``: where ``env`` raises an ``EnvFault`` (a ``GuardedEnv``), that
    demonstration is skipped and ``on_fault()`` gives the env to go on with; without it
    the fault propagates.
    """
    tasks = {e.group: e.task for e in episodes if e.source != SOURCE_DEMO}
    next_id = max((e.id for e in episodes), default=-1) + 1
    demos: list[Episode] = []
    for group in sorted(tasks):
        for k in range(n_off):
            try:
                demo = _demo(env, source, tasks[group], k, policy, prompt, settings, next_id, group)
            except EnvFault:
                if on_fault is None:
                    raise
                env = on_fault()
                continue
            if demo is not None and (demo.success or not only_successful):
                demo.events.demo = getattr(source, "name", "demo")
                demos.append(demo)
                next_id += 1
    return demos


def _demo(env, source, seed, k, policy, prompt, settings, episode_id, group) -> Episode | None:
    """Demonstration ``k`` of task ``seed`` (None: the source has none)."""
    env.reset(seed=seed)
    actions = source.actions(env, seed, k)
    if not actions:
        return None
    return demo_episode(
        env, seed, actions, policy=policy, prompt=prompt, settings=settings,
        episode_id=episode_id, group=group,
    )  # fmt: skip


def make_source(name: str, **options: object) -> DemoSource:
    """``solver`` or ``jsonl`` (options: ``path``, ``match``)."""
    return SOURCES.make(name, **options)
