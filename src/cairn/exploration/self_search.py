"""SSRL: self-search reinforcement learning (arXiv 2508.10874, Sec. 3).

The policy simulates the search engine from its own knowledge: after an action that
matches ``search_pattern`` (``search[query]`` in ``search_qa``) it goes on writing
``<information> ... </information>`` itself, and that text, not the engine's, is the
next observation. The information tokens belong to the step's action (so they are in
the token batch) but ``Step.loss_mask`` drops them from the loss (SSRL's information
masking); the search action and the answer are trained as usual (reward: the env's exact
match; GRPO, n 5, KL 0.001 low_var_kl in the paper's recipe, see the preset).

Sim2Real: the trainer's evaluation plays the plain env, whose ``search[query]`` returns the
real BM25 top-k documents (``SearchQA.retrieve``): the trained policy meets the real engine
only at evaluation. The env is still stepped during self-search (its turn clock, the final
answer's reward), and it computes a retrieval that the agent never sees.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from cairn.agent import TAGS, parse_action
from cairn.data.episode import Episode, Step
from cairn.rollout.group import TASK_INFO_KEYS, tasks_for_groups

__all__ = ["SelfSearch"]


class SelfSearch:
    """G self-search episodes per task; see the module docstring."""

    def __init__(
        self, max_info_tokens: int = 24, search_pattern: str = r"^\s*search\s*\[(.*)\]\s*$"
    ):
        if max_info_tokens < 1:
            raise ValueError(f"max_info_tokens must be >= 1, got {max_info_tokens}")
        self.max_info_tokens = max_info_tokens
        self.pattern = re.compile(search_pattern, re.DOTALL | re.IGNORECASE)
        if self.pattern.groups != 1:
            raise ValueError(f"search_pattern {search_pattern!r} must have exactly one group")

    def collect(self, ctx: Any, seeds: Sequence[int], group_size: int) -> list[Episode]:
        tasks = tasks_for_groups(seeds, group_size)
        envs = ctx.envs.take(len(tasks))
        episodes = [
            Episode(id=ctx.first_episode_id + i, group=g, task=seed)
            for i, (g, seed) in enumerate(tasks)
        ]
        states = [env.reset(seed=seed) for env, (_, seed) in zip(envs, tasks, strict=False)]
        for e, (_, info) in zip(episodes, states, strict=True):
            e.meta.update({k: info[k] for k in TASK_INFO_KEYS if k in info})
        active = list(range(len(tasks)))
        while active:
            active = self._turn(ctx, envs, episodes, states, active)
        return episodes

    def _turn(self, ctx, envs, episodes, states, active: list[int]) -> list[int]:
        policy, st = ctx.policy, ctx.settings
        prompts = [
            policy.encode(
                ctx.prompt.build(
                    envs[i].instruction,
                    [(s.observation, s.action) for s in episodes[i].steps],
                    states[i][0],
                )
            )
            for i in active
        ]
        gens = policy.generate(
            prompts, temperature=st.temperature, top_p=st.top_p, max_new_tokens=st.max_new_tokens,
            stop=st.stop, greedy=st.greedy, generator=ctx.generator,
        )  # fmt: skip
        actions = [parse_action(g.text, st.action_pattern) or "" for g in gens]
        searching = [k for k, a in enumerate(actions) if self.pattern.match(a)]
        infos = self._information(ctx, [prompts[k] + gens[k].token_ids for k in searching])
        info_of = dict(zip(searching, infos, strict=True))
        still = []
        for k, i in enumerate(active):
            if self._advance(envs[i], episodes[i], states, i, prompts[k], gens[k], actions[k],
                             info_of.get(k), st):  # fmt: skip
                still.append(i)
        return still

    def _information(
        self, ctx, contexts: list[list[int]]
    ) -> list[tuple[str, list[int], list[float]]]:
        """Self-written information after each context: (text, ids with tags, log-probs)."""
        if not contexts:
            return []
        policy, st = ctx.policy, ctx.settings
        open_ids = policy.encode(TAGS["information"][0])
        close_tag = TAGS["information"][1]
        gens = policy.generate(
            [c + open_ids for c in contexts], temperature=st.temperature, top_p=st.top_p,
            max_new_tokens=self.max_info_tokens, stop=(close_tag,), greedy=st.greedy,
            generator=ctx.generator,
        )  # fmt: skip
        out = []
        for g in gens:
            close = [] if g.finish == "stop" else policy.encode(close_tag)
            ids = [*open_ids, *g.token_ids, *close]
            lps = [0.0] * len(open_ids) + list(g.logprobs) + [0.0] * len(close)
            out.append((g.text, ids, lps))
        return out

    @staticmethod
    def _advance(env, episode, states, i, prompt_ids, gen, action, info, st) -> bool:
        obs, inf = states[i]
        nxt, reward, terminated, truncated, nxt_info = env.step(action)
        valid = bool(nxt_info.get("valid", True))
        ids, lps, mask, completion = list(gen.token_ids), list(gen.logprobs), None, gen.text
        if info is not None:  # self-search: the policy's own text replaces the engine's
            text, info_ids, info_lps = info
            mask = [True] * len(ids) + [False] * len(info_ids)
            ids, lps = ids + info_ids, lps + info_lps
            open_tag, close_tag = TAGS["information"]
            completion = f"{gen.text} {open_tag} {text} {close_tag}"
            nxt = text
            nxt_info = {**nxt_info, "anchor": text}
        episode.steps.append(
            Step(
                t=len(episode.steps), observation=obs, anchor=inf.get("anchor", obs),
                action=action, completion=completion, reward=float(reward), valid=valid,
                penalty=0.0 if valid else st.invalid_penalty, prompt_ids=prompt_ids,
                action_ids=ids, logprobs=lps, loss_mask=mask,
            )
        )  # fmt: skip
        states[i] = (nxt, nxt_info)
        out = st.max_turns is not None and len(episode.steps) >= st.max_turns
        if terminated or truncated or out:
            episode.success = bool(nxt_info.get("success", False))
            episode.terminated, episode.truncated = bool(terminated), not terminated
            return False
        return True
