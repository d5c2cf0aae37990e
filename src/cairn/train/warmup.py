"""The format warm-up: a short supervised stage on solver demonstrations, before RL.

A randomly initialised model writing free text almost never produces a parsable
``<action>...</action>``: every completion is a format error with the same penalty, so
every group has equal returns and RL has no signal to find the format with. The warm-up
is a separate, named stage with its own budget (``warmup:`` in the config) that teaches
the format, and only the format's mechanics, from the env's own solver:

1. ``demonstrations``: for ``demos`` training seeds (drawn from the warm-up's own stream,
   disjoint from nothing the eval uses: eval seeds are held out), the env's ``solve()``
   plan is replayed, each action written as ``<think>...</think><action>a</action>``
   (``tagged``), a tool call (``tool_call``) or the bare action (``line``: its first line
   is the action, no ``<think>``; a word-level tokenizer cannot write the tags) through the
   *same* prompt path as the rollout (``fit_prompt``, chat prompts token-in/token-out, the
   context budget), so a warmed-up model reads exactly the prompts it will see in RL; a
   completion the tokenizer cannot write (unknown tokens) is an error;
2. ``supervised_warmup``: token-mean cross-entropy on the completion tokens (end-of-turn
   token included), AdamW, minibatches, for ``epochs`` passes or ``time_budget_s``
   (``supervised_passes``, the package's one supervised loop, which the benchmarks'
   behaviour cloning on (prompt, completion) pairs runs too).

The reasoning written in ``<think>`` (``think``): ``offsets`` copies the observation's
offset words (sokoban's compact render: where the box is from the player, where the goal
is from the box), the facts a move is chosen from; ``none`` writes no ``<think>`` block.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from cairn.data.episode import Episode, Step
from cairn.data.tokens import collate_scoring
from cairn.envs import TextEnv
from cairn.exploration.demos import demo_episode
from cairn.rollout.envpool.calls import GuardedEnv

if TYPE_CHECKING:
    from cairn.agent import PromptBuilder
    from cairn.policies.hf import HFPolicy
    from cairn.rollout.settings import RolloutSettings
    from cairn.train.parts import TrainParts
    from cairn.train.schema import Config, WarmupConfig

__all__ = [
    "Example",
    "SupervisedPasses",
    "demonstrations",
    "run_warmup",
    "run_warmup_stage",
    "supervised_passes",
    "supervised_warmup",
    "think_text",
]

#: A supervised example: (prompt ids, completion ids); the loss reads the completion.
Example = tuple[Sequence[int], Sequence[int]]
_OFFSET = re.compile(r"^(r|c|tr|tc)[+-]\d+$")


def think_text(observation: str, mode: str = "offsets") -> str:
    """The reasoning of a demonstration step (module docstring)."""
    if mode == "none":
        return ""
    return " ".join(w for w in observation.split() if _OFFSET.match(w))


def demonstrations(
    env: TextEnv,
    seeds: Iterable[int],
    policy: HFPolicy,
    prompt: PromptBuilder,
    settings: RolloutSettings,
    think: str = "offsets",
) -> list[Episode]:
    """Solver episodes on ``seeds`` with prompt and completion ids as the rollout makes them
    (``cairn.exploration.demos.demo_episode``, LUFFY's replay: one code path for both)."""
    solve = getattr(env, "solve", None)
    if solve is None:
        raise ValueError(f"warmup needs an env with a solver (env.solve()); {env!r} has none")
    out = []
    for k, seed in enumerate(seeds):
        env.reset(seed=int(seed))
        plan = solve()
        if not plan:
            continue
        demo = demo_episode(
            env, int(seed), plan, policy=policy, prompt=prompt, settings=settings,
            episode_id=k, group=k, think=lambda obs: think_text(obs, think),
        )  # fmt: skip
        out.append(demo)
    return out


@dataclass
class SupervisedPasses:
    """What ``supervised_passes`` did: each minibatch's loss in order, the example-weighted
    mean loss of each whole pass, the passes completed within the budget, the seconds."""

    losses: list[float]
    epoch_losses: list[float]
    epochs: int
    seconds: float


def supervised_passes(
    policy: HFPolicy,
    examples: Sequence[Example],
    *,
    epochs: int,
    lr: float,
    minibatch_size: int,
    time_budget_s: float | None,
    seed: int,
) -> SupervisedPasses:
    """Teacher forcing on ``(prompt ids, completion ids)`` pairs: token-mean cross-entropy
    of the completion tokens (``policy.score`` at temperature 1, the RL loss's scoring
    path), AdamW, gradients clipped to norm 1, ``epochs`` passes over near-equal minibatches
    in an order drawn from ``seed``, stopped after the update that reaches
    ``time_budget_s``. The one supervised loop: the format warm-up and the benchmarks'
    behaviour cloning both train with it."""
    if not examples:
        raise ValueError("supervised training needs at least one (prompt, completion) example")
    if any(len(completion) == 0 for _, completion in examples):
        raise ValueError("supervised training: every completion needs a token; got an empty answer")
    model, rng = policy.model, np.random.default_rng([seed, 5])
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    chunks = max(1, round(len(examples) / minibatch_size))
    t0, done = time.perf_counter(), SupervisedPasses([], [], 0, 0.0)
    model.train()
    for _ in range(epochs):
        total, seen = 0.0, 0
        for idx in np.array_split(rng.permutation(len(examples)), chunks):
            loss = _minibatch_nll(policy, [examples[i] for i in idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            done.losses.append(float(loss.detach()))
            total, seen = total + done.losses[-1] * len(idx), seen + len(idx)
            if time_budget_s is not None and time.perf_counter() - t0 >= time_budget_s:
                break
        else:
            done.epochs += 1
            done.epoch_losses.append(total / seen)
            continue
        break
    done.seconds = time.perf_counter() - t0
    return done


def _minibatch_nll(policy: HFPolicy, rows: Sequence[Example]) -> torch.Tensor:
    """Mean NLL over the completion tokens of one minibatch (a scalar with a graph)."""
    inputs = collate_scoring([p for p, _ in rows], [c for _, c in rows], pad_id=policy.pad_id)
    logp, _ = policy.score(inputs, 1.0, with_entropy=False)  # (B, A)
    return -logp[inputs.action_mask].mean()


def supervised_warmup(
    policy: HFPolicy,
    steps: Sequence[Step],
    *,
    epochs: int,
    lr: float,
    minibatch_size: int,
    time_budget_s: float | None,
    seed: int,
) -> dict[str, float]:
    """``supervised_passes`` on the prompt and completion ids of ``steps``; its stats."""
    examples = [(s.prompt_ids, s.action_ids) for s in steps]
    done = supervised_passes(
        policy, examples, epochs=epochs, lr=lr, minibatch_size=minibatch_size,
        time_budget_s=time_budget_s, seed=seed,
    )  # fmt: skip
    chunks, losses = max(1, round(len(examples) / minibatch_size)), done.losses
    return {
        "warmup/seconds": round(done.seconds, 2),
        "warmup/updates": len(losses),
        "warmup/epochs": done.epochs,
        "warmup/loss_first": losses[0] if losses else float("nan"),
        "warmup/loss_last": float(np.mean(losses[-chunks:])) if losses else float("nan"),
    }


def run_warmup(
    cfg: WarmupConfig,
    policy: HFPolicy,
    env: TextEnv,
    prompt: PromptBuilder,
    settings: RolloutSettings,
    seed: int,
) -> dict[str, float]:
    """The whole stage (``cfg``: the config's ``warmup`` section): demonstrations on seeds
    from the warm-up's own stream, then the supervised passes; returns its stats."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    seeds = np.random.default_rng([seed, 6]).integers(0, 1_000_000_000, size=cfg.demos)
    episodes = demonstrations(env, seeds, policy, prompt, settings, cfg.think)
    steps = [s for e in episodes for s in e.steps]
    if not steps:
        raise ValueError("warmup: the solver solved none of the demonstration tasks")
    stats = supervised_warmup(
        policy, steps, epochs=cfg.epochs, lr=cfg.lr, minibatch_size=cfg.minibatch_size,
        time_budget_s=cfg.time_budget_s, seed=seed,
    )  # fmt: skip
    tokens = sum(len(s.action_ids) for s in steps)
    return {
        **stats,
        "warmup/demos": len(episodes),
        "warmup/steps": len(steps),
        "warmup/completion_tokens": tokens / len(steps),
        "warmup/stage_seconds": round(time.perf_counter() - t0, 2),
        "warmup/stage_cpu_seconds": round(time.process_time() - cpu0, 2),
    }


def run_warmup_stage(
    parts: TrainParts, cfg: Config, say: Callable[[str], None]
) -> dict[str, float]:
    """The warm-up as a stage of a run (before its at-start eval): a fresh env from the
    ``parts``' factory, their policy, prompt and sampling settings; then the KL reference
    and the engine follow the warmed-up weights (``TrainParts.refresh_reference``). Says
    one line of what it did; returns the stage's stats."""
    guarded = GuardedEnv(parts.env_factory(), getattr(parts.env_factory, "name", ""))
    env = cast(TextEnv, guarded)  # a proxy: the env's methods, env faults named as such
    try:
        stats = run_warmup(cfg.warmup, parts.policy, env, parts.prompt, parts.sampling, cfg.seed)
    finally:
        env.close()
    parts.refresh_reference()
    say(
        f"warm-up: {stats['warmup/steps']} demonstration steps, loss "
        f"{stats['warmup/loss_first']:.3f} -> {stats['warmup/loss_last']:.3f} in "
        f"{stats['warmup/stage_seconds']:.0f}s"
    )
    return stats
