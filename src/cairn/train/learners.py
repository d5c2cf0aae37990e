"""The learners beside the actor, and one loop for all of them: epochs over shuffled,
near-equal minibatches, and the optimizer step (gradient sync across ranks, clipping)
that follows each minibatch loss.

PPO (Schulman et al., arXiv 1707.06347, Alg. 1) optimises the surrogate for K epochs
over minibatches of the iteration's batch; the actor and a value network both run it.
A learner (``Learner``) has ``name``, ``module``, ``opt``, ``epochs`` (None:
``optim.epochs``), ``log_update`` and ``minibatch_loss(tokens, batch, terms)``; those
``build_learners`` adds beside the ``Actor`` (``SideLearner``) also have
``score(episodes)`` (they may fill step columns before the advantage) and ``save`` of
their weights.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from cairn import _progress
from cairn.losses import LossConfig, policy_loss

if TYPE_CHECKING:
    from cairn.advantages import Terms
    from cairn.data.episode import Episode
    from cairn.data.step_batch import StepBatch
    from cairn.data.tokens import TokenBatch
    from cairn.policies.engines import Engine
    from cairn.policies.hf import HFPolicy
    from cairn.train.distributed import Dist
    from cairn.train.schema import Config, OptimConfig

__all__ = [
    "Actor",
    "Learner",
    "SideLearner",
    "apply_gradients",
    "build_learners",
    "row_order",
    "run_epochs",
    "train_learners",
]

Step = Callable[[np.ndarray], dict[str, float]]  # minibatch row indices -> its metrics
MinibatchLoss = Callable[[np.ndarray], tuple[torch.Tensor, dict[str, float]]]


class Learner(Protocol):
    """What the update loop needs of a learner (module docstring)."""

    @property
    def name(self) -> str:
        """Its metrics' prefix and its optimizer's checkpoint key."""
        ...

    @property
    def log_update(self) -> bool:
        """Whether its grad norm, loss and skipped updates are reported under ``name/``."""
        ...

    @property
    def epochs(self) -> int | None:
        """Its PPO epochs (None: ``optim.epochs``)."""
        ...

    @property
    def module(self) -> torch.nn.Module: ...

    @property
    def opt(self) -> torch.optim.Optimizer: ...

    def minibatch_loss(self, tokens: TokenBatch, batch: StepBatch, terms: Terms) -> MinibatchLoss:
        """rows -> (loss, metrics) for this iteration's steps."""
        ...


class SideLearner(Learner, Protocol):
    """A learner beside the actor: it may fill step columns before the advantage, and a
    checkpoint keeps its weights in a folder of its name."""

    def score(self, episodes: Sequence[Episode]) -> None: ...

    def save(self, folder: Path) -> None: ...


def build_learners(cfg: Config, policy: HFPolicy, ckpt: Path | None) -> list[SideLearner]:
    """The learners the config turns on (``critic.enabled``: PPO's value network)."""
    if not cfg.critic.enabled:
        return []
    from cairn.policies.critic import CriticLearner

    return [CriticLearner.build(cfg.critic, policy, cfg.seed, ckpt)]


class Actor:
    """The policy as a learner: its minibatch loss is ``policy_loss`` on the token batch
    (``engine.reweight`` may weight tokens; ``dist.loss_scale`` makes the aggregate global
    over ranks). Its grad norm and loss are recorded under ``actor/``."""

    name: str = "actor"
    log_update: bool = True
    epochs: int | None = None

    def __init__(
        self,
        policy: HFPolicy,
        opt: torch.optim.Optimizer,
        engine: Engine,
        loss_cfg: LossConfig,
        dist: Dist,
        cfg: Config,
    ):
        self.policy, self.module, self.opt = policy, policy.model, opt
        self.engine, self.loss_cfg, self.dist, self.cfg = engine, loss_cfg, dist, cfg

    def minibatch_loss(self, tokens: TokenBatch, batch: StepBatch, terms: Terms) -> MinibatchLoss:
        def loss(idx: np.ndarray) -> tuple[torch.Tensor, dict[str, float]]:
            mb = self.engine.reweight(tokens.minibatch(idx), idx)  # vllm: TIS weights
            logp, entropy = self.policy.score(mb.inputs, self.cfg.rollout.temperature)
            value, metrics = policy_loss(
                logp, mb.old_logprobs, mb.advantages, mb.mask, config=self.loss_cfg,
                flags=mb.flags, entropy=entropy, ref_logp=mb.ref_logprobs,
            )  # fmt: skip
            return value * self.dist.loss_scale(mb.mask, self.loss_cfg.agg), metrics

        return loss


def train_learners(
    learners: Sequence[Learner],
    tokens: TokenBatch,
    batch: StepBatch,
    terms: Terms,
    *,
    optim: OptimConfig,
    dist: Dist,
    rng: np.random.Generator,
    stop: Callable[[], bool] | None = None,
) -> dict[str, float]:
    """PPO epochs for each learner in turn (the actor first), each on its own optimizer;
    the mean of each metric. ``optim``: epochs, minibatch size and clipping; ``rng``: the
    minibatch order (the trainer's ``shuffle_rng``); ``stop()``: asked between epochs (the
    time budget). Rows are steps (the token batch's, the same as the step table's). A
    learner with ``log_update`` also reports its grad norm, its loss and ``skipped_updates``
    (updates dropped for a non-finite loss or gradient; their minibatch metrics are left
    out)."""
    metrics: dict[str, float] = {}
    n = len(tokens)
    chunks = dist.max_int(max(1, round(n / optim.minibatch_size)))  # same on all ranks
    labels = None
    if optim.group_tasks:
        labels = tokens.task_labels()
    elif optim.group_prompts:
        labels = tokens.prompt_labels()
    for learner in learners:
        step, skipped = _learner_step(learner, tokens, batch, terms, optim, dist)
        epochs = learner.epochs or optim.epochs
        metrics.update(run_epochs(n, epochs, chunks, rng, step, stop, labels))
        if learner.log_update:
            metrics[f"{learner.name}/skipped_updates"] = float(len(skipped))
    return metrics


def _learner_step(
    learner: Learner,
    tokens: TokenBatch,
    batch: StepBatch,
    terms: Terms,
    optim: OptimConfig,
    dist: Dist,
) -> tuple[Step, list[int]]:
    """One minibatch update of ``learner`` as a ``Step``, and the list it appends to for
    each update it skips."""
    loss_of = learner.minibatch_loss(tokens, batch, terms)
    learner.module.train()
    skipped: list[int] = []

    def step(idx: np.ndarray) -> dict[str, float]:
        loss, out = loss_of(idx)
        norm, stepped = apply_gradients(
            loss, learner.opt, learner.module, dist, optim.max_grad_norm
        )
        if not stepped:
            skipped.append(1)
            return {}
        if learner.log_update:
            if norm is not None:
                out[f"{learner.name}/grad_norm"] = norm
            out[f"{learner.name}/loss"] = float(loss.detach())
        return out

    return step, skipped


def run_epochs(
    n: int,
    epochs: int,
    chunks: int,
    rng: np.random.Generator,
    step: Step,
    stop: Callable[[], bool] | None = None,
    labels: np.ndarray | None = None,
) -> dict[str, float]:
    """``epochs`` passes over a fresh order of ``n`` rows (``row_order``) cut into ``chunks``
    near-equal parts; returns the mean over minibatches of each metric ``step`` reports.
    ``stop()``, asked after each pass but the last, ends them early (the training time
    budget ran out)."""
    sums: dict[str, list[float]] = defaultdict(list)
    done = 0
    for epoch in range(epochs):
        for idx in np.array_split(row_order(n, rng, labels), chunks):
            for k, v in step(idx).items():
                sums[k].append(v)
            done += 1
            _progress.minibatch_done(done, epochs * chunks)  # the live line's counts
        if stop is not None and epoch < epochs - 1 and stop():
            break
    return {k: float(np.mean(v)) for k, v in sums.items()}


def row_order(n: int, rng: np.random.Generator, labels: np.ndarray | None = None) -> np.ndarray:
    """A random order of rows 0..n-1. Without ``labels``: a permutation. With ``labels``
    (n,) (rows of equal label share a prompt): the labels in random order, each label's
    rows together in random order, so that cutting the order into minibatches splits a
    label's rows only at a cut."""
    if labels is None:
        return rng.permutation(n)
    labels = np.asarray(labels)
    rank = rng.permutation(int(labels.max()) + 1 if n else 0)  # each label's place
    rows = rng.permutation(n)
    return rows[np.argsort(rank[labels[rows]], kind="stable")]


def apply_gradients(
    loss: torch.Tensor,
    opt: torch.optim.Optimizer,
    module: torch.nn.Module,
    dist: Dist,
    max_grad_norm: float | None,
) -> tuple[float | None, bool]:
    """Backward, average gradients over ranks, clip to ``max_grad_norm``, step.

    A non-finite loss or gradient norm (on any rank) skips the step: the gradients are
    dropped, and the weights and the optimizer state stay as they were, so a NaN never
    reaches the weights. Returns (the gradient norm before clipping, None without
    clipping; whether the step was taken)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    dist.sync_grads(module)  # data parallel: average gradients over ranks
    norm = None
    if max_grad_norm is not None:
        norm = total = float(torch.nn.utils.clip_grad_norm_(module.parameters(), max_grad_norm))
    else:
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        total = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
    bad = not (math.isfinite(float(loss.detach())) and math.isfinite(total))
    if dist.max_int(int(bad)):  # every rank skips together
        opt.zero_grad(set_to_none=True)
        return norm, False
    opt.step()
    return norm, True
