"""The training loop. One iteration (``Trainer.train_iteration``), stage by stage:

    sample     B task seeds -> B groups x G episodes: the rollout strategy, with the
               exploration hooks around it (``Exploration.wrap``)
    rewards    the configured rewards (shaped, intrinsic) added to the env's
    observe    exploration observers see the scored episodes (EMPO2 writes its tips)
    keep       groups with signal are kept and the missing ones sampled again from fresh
               seeds (DAPO's dynamic sampling, ``cairn.rollout.dynamic``; off: one round)
    advantage  the step table (a learner may fill columns first, e.g. the value), then
               ``cairn.advantages.compute``: the estimator, then the whitening
    update     the token batch (+ KL reference log-probs) -> PPO epochs over shuffled
               minibatches, for the actor and every other learner; weights to the sampler
    log        counters, trajectories, the metrics row; the curriculum (if any) sees the
               iteration's successes and may change the training envs' difficulty
               (``cairn.train.curriculum``); then (``run``) greedy eval at the fixed
               ``env.options``, metrics.jsonl and the live line, checkpoint

Nothing here knows a specific estimator, env, strategy or method: they come by name from
the config, and what a method needs arrives as data (step columns, per-token flags the
loss config interprets, an estimator's terms) or as a wrapper around the rollout strategy.
The counters and every random stream live in ``TrainState``
(``cairn.train.checkpoint.state``), whose state is checkpointed with the rest
(``cairn.train.checkpoint``), so a resumed run repeats an uninterrupted one exactly.
The trainer reads its parts and counters by name (``trainer.policy``, ``trainer.iteration``:
``cairn.train.fields.TrainerFields``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from cairn.advantages import Terms
from cairn.advantages import compute as compute_advantages
from cairn.data import rundir
from cairn.data.episode import Episode, Source, to_records, to_step_batch
from cairn.data.step_batch import StepBatch
from cairn.data.tokens import TokenBatch
from cairn.policies.lora import reference_logprobs
from cairn.rollout import RolloutContext
from cairn.rollout.dynamic import SamplingRounds
from cairn.train import budget
from cairn.train.checkpoint.read import Checkpoint, latest_checkpoint
from cairn.train.checkpoint.state import TrainState
from cairn.train.checkpoint.write import save_checkpoint
from cairn.train.distributed import Dist
from cairn.train.divergence import DivergenceWatch, finite_outputs
from cairn.train.evaluate import greedy_episodes
from cairn.train.fields import TrainerFields
from cairn.train.learners import train_learners
from cairn.train.parts import TrainParts, build_parts
from cairn.train.preflight import check_config
from cairn.train.runlog import RunLog
from cairn.train.schema import Config
from cairn.train.summary import episode_stats, summarize
from cairn.train.trust import named_code, record_run
from cairn.train.warmup import run_warmup_stage

__all__ = ["Trainer"]

TRAIN_SEED_RANGE = 1_000_000_000  # train seeds are drawn below it, eval seeds start at it


class Trainer(TrainerFields):
    def __init__(self, cfg: Config, run_dir: Path, resume: bool = False, *, checked: bool = False):
        """A run of ``cfg`` in ``run_dir`` (``resume``: from its newest checkpoint).

        The preflight (``check_config``: plugins, registries, env options) runs here before
        any work, unless ``checked`` says the caller has run it on this config in this
        process already (``load_config`` does by default, as the CLI calls it)."""
        if not checked:
            check_config(cfg)
        self.cfg, self.dist = cfg, Dist.from_env()  # under torchrun: one data-parallel rank
        self.dir = Path(self.dist.broadcast_object(str(run_dir)))  # rank 0's name everywhere
        self.dir.mkdir(parents=True, exist_ok=True)
        # One writer per run folder (run.lock, held until the run ends or fails); rank 0's.
        self.lock = rundir.RunLock(self.dir)
        if self.dist.is_main:
            self.lock.acquire()
        try:
            self._build(cfg, resume)
        except BaseException:
            self.lock.release()
            raise

    def _build(self, cfg: Config, resume: bool) -> None:
        torch.set_num_threads(cfg.train.threads or os.cpu_count() or 1)
        ckpt = latest_checkpoint(self.dir) if resume else None
        if resume and ckpt is None:
            raise FileNotFoundError(f"no checkpoint to resume from in {self.dir}")
        # config.yaml: written once, atomically, when the run is created; never on a resume
        # (cairn.train.checkpoint.runconfig: a checkpoint records its hash, amendments the
        # changes a resume makes).
        if self.dist.is_main and not resume:
            rundir.write_config(self.dir, cfg.model_dump())
            # the code this config names was the user's choice: reading the run needs no
            # --trust-code later (cairn.train.trust; the store lives outside the run)
            record_run(self.dir, named_code(cfg.model_dump()))
        self.iteration_started: float | None = None  # perf_counter of the iteration in flight

        # Counters and random streams (tasks, minibatch order, token sampling, torch's global
        # generator): seeded before any part draws from them, checkpointed.
        rank = self.dist.rank
        self.state = TrainState.start(cfg.seed, rank)
        # The parts: envs, policy + engine + prompt, optimizer, KL reference, learners,
        # rollout strategy + exploration, rewards (cairn.train.parts, in that order).
        self.parts: TrainParts = build_parts(cfg, self.dir, self.dist, ckpt.path if ckpt else None)
        self.local_groups = len(self.dist.shard(range(cfg.rollout.groups)))  # this rank's share
        if self.local_groups == 0:
            raise ValueError(f"rollout.groups={cfg.rollout.groups} < {self.dist.world} ranks")
        self._started = time.time()  # this session's start (the earlier ones: state)
        self.divergence = DivergenceWatch()  # non-finite numbers end the run in one line
        log_dir = self.dir if self.dist.is_main else self.dir / "ranks" / str(rank)
        self.log = RunLog(
            log_dir, cfg.log.progress, loggers=cfg.log.loggers, config=cfg.model_dump()
        )
        if ckpt is not None:
            self._restore(ckpt)

    def set_curriculum_level(self, level: int) -> None:
        """Train at curriculum ``level`` from now on (``TrainParts.set_curriculum_level``)."""
        self.parts.set_curriculum_level(level)

    def _climb(self, played: Sequence[Episode]) -> dict[str, float]:
        """The curriculum's metrics for this iteration's level, then its step: the
        successes of ``played`` enter its window and may change the level (rank 0's level
        on every rank)."""
        if self.curriculum is None:
            return {}
        metrics, trained = self.curriculum.metrics(), self.curriculum.level
        self.curriculum.observe([e.success for e in played])
        metrics["curriculum/success"] = self.curriculum.last_rate
        new = self.dist.broadcast_object(self.curriculum.level)
        self.curriculum.level = trained
        self.set_curriculum_level(new)  # new training envs where the level changed
        return metrics

    # ------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train to the end of the budget; the run folder's lock is released however it ends
        (an interrupted run is resumed from its last checkpoint, possibly in this process)."""
        try:
            return self._run()
        except BaseException:
            self.lock.release()
            raise

    def _run(self) -> dict[str, Any]:
        cfg, state, self._started = self.cfg, self.state, time.time()
        if state.iteration == 0 and cfg.warmup.enabled and not state.warmup_stats:
            state.warmup_stats = run_warmup_stage(self.parts, cfg, self.log.say)  # then: eval
        if state.iteration == 0 and cfg.eval.at_start and not state.evals:
            self._record_eval(0, self.evaluate())
        while not self._done():
            self.iteration += 1
            with self.log.live_line(self.iteration, self.local_groups * cfg.rollout.group_size):
                row = self.train_iteration()
            if budget.eval_due(cfg.eval.every, self.iteration, self._done()):
                row.update(self._record_eval(self.iteration, self.evaluate()))
            self.log.metrics(row)
            self.log.line(row, budget.budget_text(cfg.train, self.iteration, self.train_seconds))
            if self.iteration % cfg.checkpoint.every == 0 or self._done():
                self._save()
        self._finish(summary := self._summary())
        return summary

    def train_iteration(self) -> dict[str, Any]:
        """One iteration, stage by stage (module docstring); returns its metrics row."""
        cfg, t0 = self.cfg, time.perf_counter()
        self.iteration_started = t0
        lr = self._schedule_lr()
        # --- sample -> rewards -> observe -> keep groups with signal (resample the rest) ----
        tokens_before = self.policy.forward_tokens
        try:
            episodes, rounds = self.collect()
        except RuntimeError as err:  # sampling from inf/nan: TrainingDiverged, one line
            DivergenceWatch.sampling(err, self.iteration, cfg.optim.lr)
            raise
        env_faults = self.train_envs.faults.end_iteration()  # raises past max_env_error_rate
        engine_stats = self.engine.after_rollout(episodes)  # vllm: trainer log-probs, mismatch
        rollout_tokens = self.policy.forward_tokens - tokens_before
        t1 = time.perf_counter()
        # --- advantage -----------------------------------------------------------------------
        batch, adv, terms = self.advantage(episodes)
        t2 = time.perf_counter()
        # --- update --------------------------------------------------------------------------
        actor, update_tokens = self.learn(episodes, batch, adv, terms)
        self.divergence.after_update(actor, self.iteration, cfg.optim.lr)
        t3 = time.perf_counter()
        # --- log -----------------------------------------------------------------------------
        self.episodes += int(self.dist.sum(rounds.sampled))
        self.train_seconds = self.dist.broadcast_object(self.train_seconds + t3 - t0)
        if cfg.log.trajectories_every and self.iteration % cfg.log.trajectories_every == 0:
            self._dump(episodes, adv, terms)
        played = [e for e in episodes if Source(e.source).from_policy] or episodes
        climbed = self._climb(played)
        return self.dist.mean_metrics({
            "iteration": self.iteration,
            "episodes": self.episodes,
            "steps": len(batch),
            **episode_stats(played, "rollout"),
            "rollout/forward_tokens": rollout_tokens,
            "update/forward_tokens": update_tokens,
            "rollout/dropped_groups": rounds.dropped,
            **env_faults,
            "adv/mean": float(adv.mean()),
            "adv/std": float(adv.std()),
            "adv/abs_max": float(np.abs(adv).max()),
            **actor,
            "actor/lr": lr,
            **self.exploration.metrics(),
            **climbed,
            "time/rollout": t1 - t0,
            "time/advantage": t2 - t1,
            "time/update": t3 - t2,
            "time/iteration": t3 - t0,
            "time/train_seconds": self.train_seconds,
            **engine_stats,
        })  # fmt: skip

    # -- the stages ------------------------------------------------------------------------------
    def collect(self) -> tuple[list[Episode], SamplingRounds]:
        """This rank's groups of G episodes, scored: sample, rewards, observe, then keep the
        groups with signal and sample the missing ones again (``rollout.dynamic_sampling``;
        off: one round, every group kept). Returns the episodes to train on and the rounds'
        counts (episodes sampled, groups dropped)."""
        r = self.cfg.rollout
        rounds = SamplingRounds(
            self.local_groups, first_episode_id=self.episodes, enabled=r.dynamic_sampling,
            max_rounds=r.max_sampling_rounds, group_stride=r.groups,
        )  # fmt: skip
        missing = self.local_groups
        while missing:
            episodes = self.sample(self._draw_seeds(missing), rounds.next_episode_id)
            rounds.renumber(episodes)  # group ids unique across rounds
            self.reward(episodes)
            self.exploration.observe(episodes)  # observers (e.g. a tip memory) see the rewards
            missing = rounds.keep(episodes)  # groups with signal; how many to sample again
        return rounds.episodes, rounds

    def sample(self, seeds: Sequence[int], first_episode_id: int) -> list[Episode]:
        """A group of ``rollout.group_size`` episodes per task seed, with the env's rewards:
        the rollout strategy with the exploration hooks around it."""
        ctx = RolloutContext(self.policy, self.train_envs, self.prompt, self.sampling,
                             self.state.sample_gen, first_episode_id)  # fmt: skip
        return self.strategy.collect(ctx, seeds, self.cfg.rollout.group_size)

    def reward(self, episodes: list[Episode]) -> None:
        """The configured rewards (shaped, intrinsic, information gain), added in order."""
        for reward in self.rewards:
            reward(episodes, self.reward_ctx)

    def advantage(self, episodes: list[Episode]) -> tuple[StepBatch, np.ndarray, Terms]:
        """The step table (one row per step; a learner may fill columns first, e.g. the
        value), its per-step advantages (the estimator, then the whitening) and the
        estimator's terms."""
        for learner in self.learners:
            learner.score(episodes)
        batch = to_step_batch(episodes)
        adv, terms = compute_advantages(batch, self.cfg.advantage)
        return batch, adv, terms

    def learn(
        self,
        episodes: list[Episode],
        batch: StepBatch,
        adv: np.ndarray,
        terms: Terms,
    ) -> tuple[dict[str, float], int]:
        """The token batch of ``episodes`` with advantages ``adv`` (+ the KL reference's
        log-probs), the update of every learner, the new weights to the sampler. Returns
        the learners' metrics and the tokens the update's forward passes read."""
        cfg = self.cfg
        tokens = TokenBatch.from_episodes(
            episodes, adv, pad_id=self.policy.pad_id, pack=cfg.train.pack_episodes
        )
        if self.ref_model is not None:
            tokens.ref_logprobs = reference_logprobs(
                self.policy, self.ref_model, tokens, cfg.rollout.temperature
            )
        tokens_before = self.policy.forward_tokens
        metrics = self.update(tokens, batch, terms)
        update_tokens = self.policy.forward_tokens - tokens_before  # every epoch's passes
        self.engine.sync()  # vllm: the new weights to the sampler
        return metrics, update_tokens

    def _draw_seeds(self, n: int) -> Sequence[int]:
        """``n`` task seeds from the task stream (an int64 array: a sequence of ints)."""
        return cast(Sequence[int], self.state.task_rng.integers(0, TRAIN_SEED_RANGE, size=n))

    def update(
        self,
        tokens: TokenBatch,
        batch: StepBatch | None = None,
        terms: Terms | None = None,
    ) -> dict[str, float]:
        """PPO epochs for the actor, then for each other learner (they read the step table
        ``batch`` and the estimator's ``terms``); the mean of each metric. The actor reads
        neither: it alone may update without them (``batch`` None)."""
        if batch is None and self.learners:
            names = ", ".join(x.name for x in self.learners)
            raise ValueError(f"update: the learners beside the actor ({names}) need the step table")
        return train_learners(
            [self.actor, *self.learners], tokens, cast(StepBatch, batch), terms or {},
            optim=self.cfg.optim, dist=self.dist, rng=self.state.shuffle_rng,
            stop=self.out_of_time,
        )  # fmt: skip

    def evaluate(self) -> dict[str, float]:
        """Greedy episodes on held-out seeds (``eval.seed_offset + i``), this rank's share
        of them (``greedy_episodes``), averaged over ranks."""
        cfg = self.cfg
        seeds = self.dist.shard(cfg.eval.seed_offset + np.arange(cfg.eval.episodes)).tolist()
        envs, prompt = self.eval_envs, self.prompt
        played = greedy_episodes(self.policy, envs, prompt, cfg, seeds, self.sampling)
        return self.dist.mean_metrics(episode_stats(played, "eval"))

    # -- bookkeeping ---------------------------------------------------------------------------
    def _summary(self, wall: float | None = None) -> dict[str, Any]:
        wall, state = self.wall() if wall is None else wall, self.state
        counts = (state.iteration, state.episodes, state.train_seconds)
        summary = summarize(self.cfg, self.dir, counts, wall, state.evals)
        return {**summary, "warmup": state.warmup_stats} if state.warmup_stats else summary

    def wall(self) -> float:
        """Wall seconds of the run: this session's and the checkpointed earlier ones'."""
        return self.state.wall_seconds + time.time() - self._started

    def _done(self) -> bool:
        return budget.done(self.cfg.train, self.iteration, self.episodes, self.train_seconds)

    def out_of_time(self) -> bool:
        """Inside an iteration: has ``train.time_budget_s`` run out, counting the iteration in
        flight? The update asks after each PPO epoch (the first always runs), the clean point
        to stop at: the weights and optimizer are whole, the iteration is logged and saved as
        usual, and the run then ends (a 38 s iteration does not overshoot the budget by 38 s)."""
        limit, started = self.cfg.train.time_budget_s, self.iteration_started
        if limit is None or started is None:
            return False
        return self.train_seconds + time.perf_counter() - started >= limit

    def _schedule_lr(self) -> float:
        """Set and return this iteration's learning rate (``optim.lr_schedule``)."""
        used = budget.progress(self.cfg.train, self.iteration, self.episodes, self.train_seconds)
        lr = self.cfg.optim.lr * budget.lr_factor(self.cfg.optim, used)
        for group in self.opt.param_groups:
            group["lr"] = lr
        return lr

    def _record_eval(self, iteration: int, stats: dict[str, float]) -> dict[str, float]:
        counts = {"episodes": self.episodes, "train_seconds": self.train_seconds}
        self.state.evals.append({"iteration": iteration, **counts, **stats})
        if iteration == 0:
            self.log.say(f"untrained greedy success {stats['eval/success']:.3f}")
        return stats

    def _dump(self, episodes: list[Episode], adv: np.ndarray, terms: Terms):
        groups = sorted({e.group for e in episodes})[: self.cfg.log.trajectory_groups]
        keep = np.array([e.group in groups for e in episodes for _ in e.steps], dtype=bool)
        chosen = [e for e in episodes if e.group in groups]
        per_step = {"advantage": adv[keep], **{k: v[keep] for k, v in terms.items()}}
        # What the model saw: each turn's prompt text, decoded from its ids, stored as the
        # part new since the turn before (``to_records``; ``prompt_texts`` rebuilds them).
        decode = getattr(self.policy.tokenizer, "decode", None)
        records = to_records(chosen, decode=decode, **per_step)
        self.log.trajectories(self.iteration, records)

    def _save(self) -> None:
        model = self.policy.model  # damaged weights are never checkpointed (divergence)
        vocab = int(getattr(model.config, "vocab_size", 2) or 2)
        bad = not finite_outputs(model, vocab, self.policy.device)
        DivergenceWatch.weights(not self.dist.max_int(int(bad)), self.iteration, self.cfg.optim.lr)
        if self.dist.is_main:  # every rank holds the same weights
            save_checkpoint(
                self.dir, self.cfg, self.parts, self.state, self.wall(), self.log.unsaved_rows
            )
        self.log.unsaved_rows.clear()  # now held by the checkpoint

    def _restore(self, ckpt: Checkpoint) -> None:
        saved = ckpt.restore(self.parts, self.state)
        self.log.truncate_after(self.iteration, saved.get("metrics", ()))
        if self.dist.is_main and (changes := ckpt.record_amendment(self.cfg)):
            keys = ", ".join(c["key"] for c in changes)
            self.log.say(f"config amended at iteration {self.iteration}: {keys}")
        self.log.say(f"resumed from {ckpt.name} (iteration {self.iteration})")

    def _finish(self, summary: dict[str, Any]) -> None:
        if self.dist.is_main:
            (self.dir / "summary.json").write_text(json.dumps(summary, indent=2))
        self.close()

    def close(self) -> None:
        """Close the envs and workers, the run log and the run folder's lock (``train``
        does at its end; a trainer built and not trained, as tests build them, must)."""
        self.parts.close()
        self.log.close()
        self.lock.release()
