"""Data parallel with torch distributed: `torchrun --nproc_per_node N -m cairn.cli train`.

Each of the W processes (ranks) rolls out its own share of the iteration's task groups
(a whole group stays on one rank, so every group-relative estimator sees complete groups),
computes advantages locally and scores its own token rows. Gradients are then averaged
across ranks, so every rank applies the same update to the same weights:

    loss_r  = agg over rank r's rows,  scaled by  s_r = W * n_r / sum_q n_q
    grad    = (1/W) * sum_r grad(s_r * loss_r) = grad of agg over all rows of all ranks

with n_r the rank's count of what the aggregation averages over (tokens for token-mean,
rows for the seq-mean modes; ``AGG_UNITS``). One rank on the union of the data computes
the same loss and the same step (tested with two gloo processes on CPU).

The averaging is an all-reduce of one flat gradient buffer after ``backward`` (what DDP does,
bucketed, during it). cairn does not wrap the model in ``DistributedDataParallel``: the same
module also samples (``generate`` with a KV cache), scores, is saved and is read for its
config, and a wrapper would have to be unwrapped at each of those places. ``shard_model``
applies FSDP2 (``torch.distributed.fsdp.fully_shard``) per decoder layer for models that do
not fit one device; its forward passes are collectives, so with FSDP every rank must run the
same number of forwards: the trainer then requires the vLLM engine for free-text sampling.

Outside torchrun (no ``WORLD_SIZE`` > 1) ``Dist`` is a single rank and every method is a no-op.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = ["AGG_UNITS", "Dist", "agg_count"]

T = TypeVar("T")

#: What each loss aggregation mode averages over (cairn.losses.aggregation).
AGG_UNITS = {
    "token-mean": "tokens",
    "seq-mean-token-sum": "rows",
    "seq-mean-token-mean": "rows",
    "seq-mean-token-sum-norm": "rows",
}


def agg_count(mask: torch.Tensor, agg: str) -> int:
    """Units the aggregation ``agg`` averages over in ``mask`` (B, T): tokens or rows (with
    at least one token)."""
    if agg not in AGG_UNITS:
        raise ValueError(f"unknown aggregation {agg!r}; allowed: {', '.join(AGG_UNITS)}")
    m = mask.bool()
    return int(m.sum()) if AGG_UNITS[agg] == "tokens" else int(m.any(dim=-1).sum())


@dataclass
class Dist:
    """This process's place in a torch distributed job (rank ``rank`` of ``world``)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls, backend: str | None = None) -> Dist:
        """Join the job torchrun described in the environment, or a single rank without it."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        if not dist.is_initialized():
            backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
            dist.init_process_group(backend=backend)
        return cls(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- data ----------------------------------------------------------------------------------
    def shard(self, items: T) -> T:
        """This rank's share of a sequence: ``items[rank::world]``."""
        return items[self.rank :: self.world] if self.enabled else items  # type: ignore[index]

    def broadcast_object(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank (run directory names, timers)."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _reduce(self, values: list[float], op: Any) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self._device())
        dist.all_reduce(t, op=op)
        return t.tolist()

    def sum(self, x: float) -> float:
        return self._reduce([x], dist.ReduceOp.SUM)[0] if self.enabled else x

    def max_int(self, x: int) -> int:
        return int(self._reduce([x], dist.ReduceOp.MAX)[0]) if self.enabled else x

    def mean_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Float entries averaged over ranks (same keys on every rank); others kept."""
        if not self.enabled:
            return metrics
        keys = sorted(k for k, v in metrics.items() if isinstance(v, float))
        sums = self._reduce([metrics[k] for k in keys], dist.ReduceOp.SUM)
        return {**metrics, **{k: v / self.world for k, v in zip(keys, sums, strict=True)}}

    # -- gradients -------------------------------------------------------------------------------
    def loss_scale(self, mask: torch.Tensor, agg: str) -> float:
        """s_r = W * n_r / sum_q n_q (module docstring); 1 on a single rank."""
        if not self.enabled:
            return 1.0
        n = agg_count(mask, agg)
        total = self.sum(float(n))
        return self.world * n / total if total > 0 else 0.0

    def sync_grads(self, model: torch.nn.Module) -> None:
        """Average the gradients of ``model``'s trainable parameters over ranks (one bucket)."""
        if not self.enabled:
            return
        params = [p for p in model.parameters() if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.world
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p)
            offset += n

    def broadcast_params(self, model: torch.nn.Module) -> None:
        """Rank 0's weights on every rank (all ranks start from the same model)."""
        if not self.enabled:
            return
        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                dist.broadcast(t.data, src=0)

    def shard_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """FSDP2: shard each decoder layer, then the root, across ranks (in place)."""
        from torch.distributed.fsdp import fully_shard

        layers = _decoder_layers(model)
        if not layers:
            raise ValueError(f"{type(model).__name__}: no decoder layers found to shard")
        for layer in layers:
            fully_shard(layer)
        fully_shard(model)
        return model

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def _device(self) -> torch.device:
        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of an HF causal LM (``model.model.layers`` and alike)."""
    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0:
            return list(layers)
    return []
