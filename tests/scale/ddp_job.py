"""One data-parallel update on fixed data: run alone, or as every rank under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node 2 ddp_job.py OUT RUN_DIR

Every rank builds the same trainer (same seed), samples the same episodes (a fixed
generator on fixed seeds), takes its share of the episodes (``Dist.shard``) and runs one
``Trainer.update``. Rank 0 saves the rank-averaged metrics and the updated weights to OUT.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from cairn.data.tokens import TokenBatch
from cairn.rollout import rollout, tasks_for_groups
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

OVERRIDES = [
    "rollout.groups=2",
    "rollout.group_size=3",
    "rollout.restrict_to_admissible=false",  # free text: ragged token counts across ranks
    "rollout.max_new_tokens=3",
    "rollout.max_turns=3",
    "optim.epochs=1",
    "optim.minibatch_size=100000",  # one minibatch: one gradient step on all the data
    "optim.lr=0.05",
    "loss.agg=token-mean",
    "eval.at_start=false",
    "train.iterations=1",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
]


def run(run_dir: Path) -> dict:
    """One update on this process's share of the fixed episodes (all of them alone)."""
    trainer = Trainer(load_config(None, [*OVERRIDES, f"out_dir={run_dir}"]), run_dir)
    tasks = tasks_for_groups([5, 17, 23, 41], 3)
    envs = trainer.train_envs.take(len(tasks))
    gen = torch.Generator().manual_seed(0)
    episodes = rollout(trainer.policy, envs, tasks, trainer.prompt, trainer.sampling, gen)
    adv = np.linspace(-1.0, 1.0, sum(len(e.steps) for e in episodes))
    ends = np.cumsum([0] + [len(e.steps) for e in episodes])
    mine = trainer.dist.shard(list(range(len(episodes))))
    local = [episodes[i] for i in mine]
    local_adv = np.concatenate([adv[ends[i] : ends[i + 1]] for i in mine])
    tokens = TokenBatch.from_episodes(local, local_adv, pad_id=trainer.policy.pad_id)
    metrics = trainer.dist.mean_metrics(trainer.update(tokens))
    model = trainer.policy.model
    weights = {k: v.detach().clone() for k, v in model.named_parameters()}
    grads = {k: v.grad.detach().clone() for k, v in model.named_parameters()}  # averaged
    tokens_here = sum(len(s.action_ids) for e in local for s in e.steps)
    return {"metrics": metrics, "weights": weights, "grads": grads, "world": trainer.dist.world,
            "tokens": tokens_here}  # fmt: skip


if __name__ == "__main__":
    out, run_dir = Path(sys.argv[1]), Path(sys.argv[2])
    result = run(run_dir)
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        torch.save(result, out)
    if dist.is_initialized():
        dist.destroy_process_group()
