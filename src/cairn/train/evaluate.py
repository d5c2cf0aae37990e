"""`cairn eval`: greedy evaluation of a run's newest complete checkpoint, read-only.

The run folder is only read: its config.yaml, and the weights and tokenizer of the
checkpoint that ``checkpoints/latest`` names (no optimizer or RNG state, no resuming
Trainer). Nothing in the run is written, truncated or deleted, so a run that is still
training can be evaluated while it writes; if the trainer prunes the checkpoint while it
is being read, the newer one is taken. The only files written are the result, by default
``RUN/eval/<checkpoint>-<episodes>.json`` (``out`` to put it elsewhere), and beside it the
episodes played (``<checkpoint>-<episodes>.episodes.jsonl.gz``, the records of a trajectory
dump with the prompts the model saw: which held-out tasks failed, and how), each replaced
atomically.

The episodes are those of the trainer's own evaluation: greedy decoding on the held-out
seeds ``eval.seed_offset + i``, one episode each, with the run's prompt and sampling
settings, so evaluating the final checkpoint repeats the run's last ``eval/*`` numbers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from cairn._errors import ConfigError
from cairn._files import check_regular
from cairn.agent import PromptBuilder
from cairn.data import rundir
from cairn.data.episode import Episode, to_records
from cairn.envs import TextEnv
from cairn.policies import HFPolicy, build_policy
from cairn.policies.budget import context_budget
from cairn.rollout import (
    EnvPool,
    RolloutSettings,
    WorkerPool,
    make_env_pool,
    rollout,
    tasks_for_groups,
)
from cairn.rollout.envpool.calls import GuardedEnv
from cairn.train.checkpoint.read import Checkpoint, latest_checkpoint
from cairn.train.config import load_config
from cairn.train.schema import Config
from cairn.train.settings import config_env_factory, prompt_builder, sampling_settings
from cairn.train.summary import episode_stats

__all__ = [
    "CheckpointPruned",
    "eval_settings",
    "evaluate_checkpoint",
    "evaluate_run",
    "greedy_episodes",
    "newest_checkpoint",
    "open_checkpoint",
]

_ATTEMPTS = 10  # a checkpoint pruned while read: take the newer one (a tiny run
# checkpointing every iteration prunes one every ~0.3 s, about as long as a load takes)


def eval_settings(cfg: Config, policy: HFPolicy | None = None) -> RolloutSettings:
    """The trainer's sampling settings with greedy decoding; with ``policy``, its context
    budget too."""
    max_context, max_new = cfg.model.max_context, cfg.rollout.max_new_tokens
    budget = None if policy is None else context_budget(policy, max_context, max_new)
    return replace(sampling_settings(cfg, budget), greedy=True)


@torch.no_grad()
def greedy_episodes(
    policy: HFPolicy,
    envs: EnvPool | WorkerPool,
    prompt: PromptBuilder,
    cfg: Config,
    seeds: Sequence[int] | None = None,
    settings: RolloutSettings | None = None,
) -> list[Episode]:
    """Greedy episodes on the held-out seeds, one each. ``seeds``: those to play (default:
    all ``eval.episodes`` of them, from ``eval.seed_offset``; a trainer passes its rank's
    share); ``settings``: sampling settings to play them greedily with (default:
    ``eval_settings``; a trainer passes its own)."""
    if seeds is None:
        seeds = (cfg.eval.seed_offset + np.arange(cfg.eval.episodes)).tolist()
    settings = eval_settings(cfg, policy) if settings is None else replace(settings, greedy=True)
    tasks = tasks_for_groups(seeds, 1)
    return rollout(policy, envs.take(len(tasks)), tasks, prompt, settings)


@contextmanager
def open_checkpoint(
    cfg: Config, checkpoint: Path
) -> Iterator[tuple[HFPolicy, EnvPool | WorkerPool, PromptBuilder]]:
    """(policy, env pool, prompt builder) of ``checkpoint``, read-only: weights and tokenizer
    only, no resuming Trainer; the envs are closed on exit."""
    factory = config_env_factory(cfg, held_out=True)
    r = cfg.rollout  # an env fault drops its episode, as in the trainer's own evaluation
    envs = make_env_pool(factory, r.workers, r.worker_backend, r.env_timeout_s)
    try:
        probe = GuardedEnv(envs.take(1)[0], cfg.env.name)  # a failure names env and call
        probe.reset(seed=0)
        instruction = cfg.agent.instruction or probe.instruction
        env = cast(TextEnv, probe)  # a proxy: the env's methods, env faults named as such
        policy = build_policy(cfg.model, env, instruction, cfg.seed, checkpoint)
        yield policy, envs, prompt_builder(cfg, policy.tokenizer, env)
    finally:
        envs.close()


def evaluate_checkpoint(
    cfg: Config, checkpoint: Path
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Build the policy from ``checkpoint`` (weights + tokenizer only) and evaluate it:
    the ``eval/*`` stats and the episodes played as records (``to_records``, with the
    prompts the model saw)."""
    with open_checkpoint(cfg, checkpoint) as (policy, envs, prompt):
        episodes = greedy_episodes(policy, envs, prompt, cfg)
        decode = getattr(policy.tokenizer, "decode", None)
        return episode_stats(episodes, "eval"), to_records(episodes, decode=decode)


def evaluate_run(
    run_dir: Path, episodes: int | None = None, out: Path | None = None
) -> tuple[dict[str, Any], Path]:
    """Evaluate ``run_dir``'s newest complete checkpoint; returns (result, file written).
    The episodes played go beside that file (``rundir.episodes_path``), named in the
    result's ``episodes_file``."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{run_dir}: no config.yaml there (not a run directory)")
    check_regular(run_dir / "config.yaml", root=run_dir)  # no link out of the run
    overrides = [f"eval.episodes={episodes}"] if episodes is not None else []
    cfg = load_config(run_dir / "config.yaml", overrides)
    for attempt in range(_ATTEMPTS):
        ckpt = newest_checkpoint(run_dir)
        try:
            stats, records = evaluate_checkpoint(cfg, ckpt.path)
            break
        except Exception:  # pruned by a live trainer while read? The loaders report a file
            # vanished under them in many ways (ValueError, OSError; a TypeError from
            # transformers' open(None) when generation_config.json goes between its lookup
            # and its read), so any error counts as the prune's once the checkpoint is gone
            # or no longer the newest; a prune under way may leave the folder for a moment
            if not _pruned(run_dir, ckpt):
                raise  # the checkpoint is there and newest: its own error
            if attempt == _ATTEMPTS - 1:
                raise CheckpointPruned(
                    f"{run_dir}: checkpoint {ckpt.name} was pruned while it was read (the run "
                    f"is still training with checkpoint.keep={cfg.checkpoint.keep}), "
                    f"{_ATTEMPTS} times in a row; run cairn eval again, or once the run ends"
                ) from None
    result = {
        "run_dir": str(run_dir),
        "checkpoint": ckpt.name,
        "episodes": cfg.eval.episodes,
        "seed_offset": cfg.eval.seed_offset,
        **stats,
    }
    path = out or run_dir / "eval" / f"{ckpt.name}-{cfg.eval.episodes}.json"
    episodes_file = rundir.episodes_path(path)
    result["episodes_file"] = episodes_file.name
    rundir.write_records(episodes_file, records)
    _write_atomic(path, json.dumps(result, indent=2) + "\n")
    return result, path


class CheckpointPruned(ConfigError):
    """Every checkpoint eval picked was pruned by the live run while it was read (not a bad
    model path: the loaders' messages for a vanished folder blame the path)."""


def _pruned(run_dir: Path, ckpt: Checkpoint) -> bool:
    """Is ``ckpt`` gone, or no longer the run's newest checkpoint?"""
    if not ckpt.path.exists():
        return True
    try:
        return newest_checkpoint(run_dir) != ckpt
    except ConfigError:
        return True


def newest_checkpoint(run_dir: Path) -> Checkpoint:
    """``run_dir``'s newest valid checkpoint; a ConfigError (one line) when it has none."""
    try:
        ckpt = latest_checkpoint(run_dir)
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"{run_dir}: {err}") from None
    if ckpt is None:
        raise ConfigError(f"{run_dir}: no checkpoint to evaluate (none written yet)")
    return ckpt


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
