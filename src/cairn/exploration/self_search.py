"""SSRL: self-search reinforcement learning (arXiv 2508.10874, Sec. 3), the rollout strategy
``ssrl``.

The policy simulates the search engine from its own knowledge: after an action that
matches the option ``search_pattern`` (``search[query]`` in ``search_qa``) it goes on writing
``<information> ... </information>`` itself, and that text, not the engine's, is the
next observation. The information tokens belong to the step's action (so they are in
the token batch) but ``Step.loss_mask`` drops them from the loss (SSRL's information
masking); the search action and the answer are trained as usual (reward: the env's exact
match; GRPO, n 5, KL 0.001 low_var_kl in the paper's recipe, see the preset).

Sim2Real: the trainer's evaluation plays the plain env, whose ``search[query]`` returns the
real BM25 top-k documents (``SearchQA.retrieve``): the trained policy meets the real engine
only at evaluation. The env is still stepped during self-search (its turn clock, the final
answer's reward), and it computes a retrieval that the agent never sees.

The turns are those of the shared turn loop (``cairn.rollout.loop.play``); ``SelfSearch``
is its ``TurnHook``: after each turn's sampling it writes the information of the rows that
searched, and it rewrites those rows' steps and next observations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import torch

from cairn._regex import regex_groups
from cairn.agent import TAGS
from cairn.data.episode import Episode, Step
from cairn.envs import StepResult
from cairn.policies.hf import Generation, HFPolicy
from cairn.rollout.loop import RolloutSettings, TurnHook, rollout, tasks_for_groups

if TYPE_CHECKING:
    from cairn.rollout.context import RolloutContext

__all__ = ["SelfSearch"]

#: One row's self-written information: (text, ids with the tags, log-probs of those ids).
Information = tuple[str, list[int], list[float]]


class SelfSearch:
    """``ssrl``: G self-search episodes per task; see the module docstring.

    Options: ``max_info_tokens`` (token cap of self-written information), ``search_pattern``
    (regex with one group, the query, of an action that triggers self-search).
    """

    def __init__(
        self, max_info_tokens: int = 24, search_pattern: str = r"^\s*search\s*\[(.*)\]\s*$"
    ):
        is_int = isinstance(max_info_tokens, int) and not isinstance(max_info_tokens, bool)
        if not is_int or max_info_tokens < 1:
            raise ValueError(
                f"SSRL option max_info_tokens must be an int >= 1, got {max_info_tokens!r}"
            )
        _check_pattern(search_pattern)
        self.max_info_tokens = max_info_tokens
        self.pattern = re.compile(search_pattern, re.DOTALL | re.IGNORECASE)

    def collect(self, ctx: RolloutContext, seeds: Sequence[int], group_size: int) -> list[Episode]:
        tasks = tasks_for_groups(seeds, group_size)
        return rollout(
            ctx.policy, ctx.envs.take(len(tasks)), tasks, ctx.prompt, ctx.settings,
            ctx.generator, ctx.first_episode_id, hook=cast(TurnHook, self),
        )  # fmt: skip

    # -- the turn hook -------------------------------------------------------------------------
    def after_generate(
        self,
        policy: HFPolicy,
        settings: RolloutSettings,
        generator: torch.Generator | None,
        prompt_ids: list[list[int]],
        gens: list[Generation],
        actions: list[str],
    ) -> list[Information | None]:
        """The self-written information of every row whose action searched, else None."""
        searching = [k for k, a in enumerate(actions) if self.pattern.match(a)]
        contexts = [prompt_ids[k] + gens[k].token_ids for k in searching]
        infos = self._information(policy, settings, generator, contexts)
        out: list[Information | None] = [None] * len(actions)
        for k, info in zip(searching, infos, strict=True):
            out[k] = info
        return out

    def amend(self, step: Step, result: StepResult, info: Information) -> StepResult:
        """The policy's own text replaces the engine's; its tokens are kept out of the loss."""
        text, info_ids, info_lps = info
        step.loss_mask = [True] * len(step.action_ids) + [False] * len(info_ids)
        step.action_ids = list(step.action_ids) + info_ids
        step.logprobs = list(step.logprobs) + info_lps
        open_tag, close_tag = TAGS["information"]
        step.completion = f"{step.completion} {open_tag} {text} {close_tag}"
        _, reward, terminated, truncated, next_info = result
        return text, reward, terminated, truncated, {**next_info, "anchor": text}

    def _information(
        self, policy: HFPolicy, st: RolloutSettings, generator, contexts: list[list[int]]
    ) -> list[Information]:
        """Self-written information after each context: (text, ids with tags, log-probs)."""
        if not contexts:
            return []
        open_ids = policy.encode(TAGS["information"][0])
        close_tag = TAGS["information"][1]
        gens = policy.generate(
            [c + open_ids for c in contexts], temperature=st.temperature, top_p=st.top_p,
            max_new_tokens=self.max_info_tokens, stop=(close_tag,), greedy=st.greedy,
            generator=generator,
        )  # fmt: skip
        out = []
        for g in gens:
            close = [] if g.finish == "stop" else policy.encode(close_tag)
            ids = [*open_ids, *g.token_ids, *close]
            lps = [0.0] * len(open_ids) + list(g.logprobs) + [0.0] * len(close)
            out.append((g.text, ids, lps))
        return out


def _check_pattern(pattern: object) -> None:
    """ValueError naming the option unless ``pattern`` is a regex with exactly one group."""
    if not isinstance(pattern, str):
        raise ValueError(f"SSRL option search_pattern must be a string, got {pattern!r}")
    try:
        groups = regex_groups(pattern)
    except ValueError as err:
        raise ValueError(f"SSRL option search_pattern: {err}") from None
    if groups != 1:
        raise ValueError(f"SSRL option search_pattern {pattern!r} must have exactly one group")
