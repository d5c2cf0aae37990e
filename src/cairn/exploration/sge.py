"""SGE: strategy-guided exploration (arXiv 2603.02045, Sec. 3), the rollout strategy ``sge``.

Before acting, the policy writes a short natural-language plan (the paper's "strategy",
shown in a ``<strategy> ... </strategy>`` block); every action of the episode is then
conditioned on it (the block follows the instruction). Plans are sampled at a higher
temperature than actions (mixed-temperature sampling) so that the G parallel rollouts of a
task differ in plan, not in token noise. Reflection: the plan prompt lists earlier plans on
the same task (same instruction) with their outcomes, so failed ones can be avoided.
Training is plain GRPO with the sparse outcome reward; the plan is a step of the episode
(t = 0, reward 0, anchor ``("strategy", initial anchor)``) trained like the others.

The trainer scores every row at the action temperature, so a plan's behaviour log-probs
are recomputed at that temperature (ratio 1 before the first update): the plan is a sample
from a hotter policy, trained as if drawn from the policy itself, the usual practice for
mixed-temperature sampling.

Names: this module says "plan" for what the paper calls a strategy, so that "strategy" in
code means a rollout strategy (``cairn.rollout.STRATEGIES``; this one is registered as
``sge``). The prompt tag and ``Episode.events.strategy`` (saved as meta ``strategy``) keep the
paper's word.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from cairn._env_host import EnvFault
from cairn.agent import TAGS, tagged
from cairn.data.episode import Episode, Step
from cairn.data.tokens import collate_scoring
from cairn.envs import TextEnv
from cairn.rollout.envpool.calls import reset_all
from cairn.rollout.loop import TASK_INFO_KEYS, drop_faulted, end_by_fault, play, tasks_for_groups

if TYPE_CHECKING:
    from cairn.policies.hf import HFPolicy
    from cairn.rollout.context import RolloutContext

__all__ = ["OUTCOME_WORDS", "GuidedEnv", "SGEStrategy"]

#: How a reflection names the outcome of an earlier plan (a word-level tokenizer gets them
#: through ``SGEStrategy.prompt_words``).
OUTCOME_WORDS = ("success", "failure")

#: One remembered plan: (text, success, return).
Outcome = tuple[str, bool, float]


class GuidedEnv:
    """An env seen through a plan: its instruction gains the plan block."""

    def __init__(self, env: Any, block: str):
        self._env, self._block = env, block

    @property
    def instruction(self) -> str:
        return f"{self._env.instruction}\n{self._block}"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


class SGEStrategy:
    """``sge``: G plan-guided episodes per task; see the module docstring.

    Options: ``plan_temperature`` (sampling temperature of the plan; the actions use
    ``rollout.temperature``), ``plan_tokens`` (token cap of a plan), ``reflection`` (show
    the outcomes of earlier plans on the same task), ``reflections`` (how many).
    """

    def __init__(
        self,
        plan_temperature: float = 1.5,
        plan_tokens: int = 8,
        reflection: bool = True,
        reflections: int = 3,
    ):
        _check("plan_temperature", plan_temperature, float, 0, "a number > 0")
        _check("plan_tokens", plan_tokens, int, 1, "an int >= 1")
        _check("reflections", reflections, int, 0, "an int >= 0")
        if not isinstance(reflection, bool):
            raise ValueError(f"SGE option reflection must be true or false, got {reflection!r}")
        self.plan_temperature, self.plan_tokens = float(plan_temperature), plan_tokens
        self.reflection, self.reflections = reflection, reflections
        self.history: dict[str, deque[Outcome]] = {}  # instruction -> its latest plans

    @staticmethod
    def prompt_words(options: dict[str, Any]) -> tuple[str, ...]:
        """Words ``sge`` with ``options`` writes into prompts beyond the env's and the
        template's (the reflection's outcomes): a word-level tokenizer must know them."""
        shown = options.get("reflection", True) and options.get("reflections", 3) > 0
        return OUTCOME_WORDS if shown else ()

    # -- reflection ---------------------------------------------------------------------------
    def reflection_block(self, instruction: str) -> str:
        """Earlier plans on this task and how they ended ("" when none or disabled)."""
        if not self.reflection or self.reflections == 0:
            return ""
        past = list(self.history.get(instruction, ()))[-self.reflections :]
        return " ".join(
            f"{tagged('strategy', [plan])} {OUTCOME_WORDS[0] if ok else OUTCOME_WORDS[1]}"
            for plan, ok, _ in past
        )

    def remember(self, instruction: str, episodes: Sequence[Episode]) -> None:
        past = self.history.setdefault(instruction, deque(maxlen=max(1, self.reflections)))
        for e in episodes:
            past.append((e.events.strategy or "", bool(e.success), float(e.ret)))

    # -- sampling -------------------------------------------------------------------------------
    def collect(self, ctx: RolloutContext, seeds: Sequence[int], group_size: int) -> list[Episode]:
        tasks = tasks_for_groups(seeds, group_size)
        envs = ctx.envs.take(len(tasks))
        resets = reset_all(envs, [seed for _, seed in tasks])  # a failed one: its EnvFault
        states = [("", {}) if isinstance(r, EnvFault) else r for r in resets]
        instructions = [envs[i].instruction for i in range(len(tasks))]
        plans = self._plans(ctx, instructions, states)
        episodes = [
            Episode(id=ctx.first_episode_id + i, group=g, task=seed)
            for i, (g, seed) in enumerate(tasks)
        ]
        for e, r in zip(episodes, resets, strict=True):
            if isinstance(r, EnvFault):
                end_by_fault(e, r)  # never played; dropped below
        guided = []
        for e, plan, env, (_, info) in zip(episodes, plans, envs, states, strict=False):
            e.meta.update({k: info[k] for k in TASK_INFO_KEYS if k in info})
            e.events.strategy = plan.action
            guided.append(GuidedEnv(env, tagged("strategy", [plan.action])))
        envs_played = cast(list[TextEnv], guided)  # proxies of the envs
        play(ctx.policy, envs_played, episodes, states, ctx.prompt, ctx.settings, ctx.generator)
        for e, plan in zip(episodes, plans, strict=True):
            for s in e.steps:
                s.t += 1
            e.steps.insert(0, plan)
        for ins in dict.fromkeys(instructions):
            mine = zip(episodes, instructions, strict=True)
            self.remember(ins, [e for e, i in mine if i == ins and not e.events.faulted])
        return drop_faulted(episodes, getattr(ctx.envs, "faults", None))  # env faults: dropped

    def _plans(self, ctx: RolloutContext, instructions: list[str], states: list) -> list[Step]:
        """One plan step per episode, sampled hot and rescored at the action temperature."""
        policy, open_tag = ctx.policy, TAGS["strategy"][0]
        texts = [
            f"{ctx.prompt.build(ins, [], obs, self.reflection_block(ins))} {open_tag}"
            for ins, (obs, _) in zip(instructions, states, strict=True)
        ]
        prompts = [policy.encode(t) for t in texts]
        gens = policy.generate(
            prompts,
            temperature=self.plan_temperature,
            max_new_tokens=self.plan_tokens,
            stop=(TAGS["strategy"][1],),
            generator=ctx.generator,
        )
        logps = _rescore(policy, prompts, [g.token_ids for g in gens], ctx.settings.temperature)
        return [
            Step(
                t=0, observation=obs, anchor=("strategy", info.get("anchor", obs)),
                action=g.text, completion=g.text, reward=0.0, prompt_ids=p,
                action_ids=g.token_ids, logprobs=lp,
            )
            for p, g, lp, (obs, info) in zip(prompts, gens, logps, states, strict=True)
        ]  # fmt: skip

    # -- checkpointing -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"history": {k: list(v) for k, v in self.history.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = {
            k: deque(map(tuple, v), maxlen=max(1, self.reflections))
            for k, v in state["history"].items()
        }


def _check(name: str, value: Any, kind: type, low: float, what: str) -> None:
    """ValueError naming SGE's option ``name`` unless ``value`` is a ``kind`` >= ``low``
    (> ``low`` for a float); a bool is neither."""
    number = (int, float) if kind is float else (int,)
    ok = isinstance(value, number) and not isinstance(value, bool)
    if not ok or (value <= low if kind is float else value < low):
        raise ValueError(f"SGE option {name} must be {what}, got {value!r}")


@torch.no_grad()
def _rescore(
    policy: HFPolicy, prompts: list[list[int]], actions: list[list[int]], temperature: float
) -> list[list[float]]:
    """Teacher-forced log-probs of ``actions`` at ``temperature`` (no grad), per row."""
    rows = [i for i, a in enumerate(actions) if a]
    out: list[list[float]] = [[] for _ in actions]
    if not rows:
        return out
    inputs = collate_scoring(
        [prompts[i] for i in rows], [actions[i] for i in rows], pad_id=policy.pad_id
    )
    logp, _ = policy.score(inputs, temperature, with_entropy=False)  # (B, A)
    for r, i in enumerate(rows):
        k = len(actions[i])
        out[i] = logp[r, logp.shape[1] - k :].tolist()
    return out
