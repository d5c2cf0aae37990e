"""pass@k and distinct solutions of a trained model's samples, read-only from a checkpoint.

The measure of exploration claims such as SGE's (arXiv 2603.02045: more diverse plans,
better pass@k at the same number of samples). A trained run's newest checkpoint samples
``n`` episodes on each of R held-out tasks (seeds ``eval.seed_offset + i``), with one of
two samplers:

- ``plain``: the run's rollout strategy (``rollout.strategy``) at its sampling settings,
  ``group`` where that is SGE (the SGE-trained weights without a plan);
- ``strategy``: SGE (rollout strategy ``sge``, ``cairn.exploration.sge.SGEStrategy``, with
  the run's options): a plan (the paper's "strategy") sampled at its own temperature first,
  the actions conditioned on it; its reflection history is the one the run had when the
  checkpoint was written, so the plan prompts read as they did at the end of training.

Then per task, with c successes among its n episodes:

- pass@k = 1 - C(n - c, k) / C(n, k), the unbiased estimate of Chen et al. 2021
  (arXiv 2107.03374, eq. 1), averaged over tasks;
- distinct solutions: the number of different action sequences among the successful
  episodes (env moves only: an SGE strategy step is not a move), averaged over tasks.

The run is only read (config, weights and the sampler's saved state), never resumed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from cairn.data.episode import Episode
from cairn.policies.budget import context_budget
from cairn.rollout import RolloutContext, make_strategy
from cairn.train.checkpoint.read import Checkpoint
from cairn.train.evaluate import greedy_episodes, open_checkpoint
from cairn.train.schema import Config
from cairn.train.settings import sampling_settings
from cairn.train.summary import episode_stats

__all__ = [
    "SAMPLERS",
    "distinct_solutions",
    "moves",
    "pass_at_k",
    "sample_held_out",
    "sampling_stats",
]

SAMPLERS = ("plain", "strategy")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``c`` successes in ``n`` samples (Chen et al. 2021, eq. 1)."""
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= successes <= samples, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples, got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def moves(episode: Episode) -> tuple[str, ...]:
    """The env actions of an episode; an SGE strategy (step 0 when the episode has one) is
    a plan, not a move, so two episodes with the same moves are one solution."""
    steps = episode.steps[1:] if episode.events.strategy is not None else episode.steps
    return tuple(s.action for s in steps)


def distinct_solutions(episodes: Iterable[Episode]) -> int:
    """Different move sequences among the successful episodes."""
    return len({moves(e) for e in episodes if e.success})


def sampling_stats(groups: Sequence[Sequence[Episode]], ks: Sequence[int]) -> dict[str, float]:
    """``pass@k`` for each k and ``distinct``, each a mean over the task groups."""
    wins = [(len(eps), sum(bool(e.success) for e in eps)) for eps in groups]
    out = {f"pass@{k}": float(np.mean([pass_at_k(n, c, k) for n, c in wins])) for k in ks}
    out["distinct"] = float(np.mean([distinct_solutions(eps) for eps in groups]))
    return out


def sample_held_out(
    cfg: Config, checkpoint: Checkpoint, tasks: int, n: int, samplers: Sequence[str]
) -> tuple[dict[str, list[list[Episode]]], float]:
    """(per sampler: ``n`` episodes on each of ``tasks`` held-out tasks, grouped by task;
    greedy success of the trainer's own evaluation, ``eval.episodes`` held-out tasks)."""
    unknown = sorted(set(samplers) - set(SAMPLERS))
    if unknown:
        raise ValueError(f"unknown sampler(s) {unknown}; allowed: {', '.join(SAMPLERS)}")
    seeds = cfg.eval.seed_offset + np.arange(tasks)
    groups: dict[str, list[list[Episode]]] = {}
    with open_checkpoint(cfg, checkpoint.path) as (policy, envs, prompt):
        budget = context_budget(policy, cfg.model.max_context, cfg.rollout.max_new_tokens)
        settings = sampling_settings(cfg, budget)
        for name in samplers:
            generator = torch.Generator().manual_seed(cfg.seed)  # same stream for each sampler
            ctx = RolloutContext(policy, envs, prompt, settings, generator, 0)
            groups[name] = _by_group(_sampler(name, cfg, checkpoint).collect(ctx, seeds, n))
        greedy = episode_stats(greedy_episodes(policy, envs, prompt, cfg), "eval")["eval/success"]
    return groups, greedy


def _sampler(name: str, cfg: Config, checkpoint: Checkpoint) -> Any:
    """``plain``: the run's rollout strategy, ``group`` for a run that samples with SGE;
    ``strategy``: SGE with the run's options and saved reflections (defaults for another
    run)."""
    strategy, options = cfg.rollout.strategy, dict(cfg.rollout.options)
    sge = strategy == "sge"
    if name == "plain":
        return make_strategy("group") if sge else make_strategy(strategy, **options)
    sampler: Any = make_strategy("sge", **(options if sge else {}))  # SGE's: a state
    saved = checkpoint.load_state().get("exploration", {}).get("sampler")
    if sge and saved is not None:
        sampler.load_state_dict(saved)
    return sampler


def _by_group(episodes: Sequence[Episode]) -> list[list[Episode]]:
    groups: dict[int, list[Episode]] = {}
    for e in episodes:
        groups.setdefault(e.group, []).append(e)
    return [groups[g] for g in sorted(groups)]
