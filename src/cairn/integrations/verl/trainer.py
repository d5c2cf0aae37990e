"""verl v1 trainer mode ``cairn``: verl's sync PPO trainer with cairn's step advantages.

``trainer.v1.trainer_mode=cairn`` selects ``CairnTrainer``, verl's ``PPOTrainerSync`` with
one method replaced: ``_compute_advantage`` reads each sample's per-turn ``extra_fields``
(written by the ``cairn`` agent loop) from the TransferQueue, rebuilds cairn's step table

    group   verl's uid (the rollout.n episodes of one dataset row share it)
    episode cairn_episode     t       cairn_turn      reward  cairn_step_reward
    anchor  cairn_anchor      success cairn_success   info_gain, value where they arrive

calls ``cairn.advantages.compute(batch, cairn.advantage)`` (the estimator, then the
whitening of ``advantage.whiten``, exactly as ``cairn train``) and spreads each step's
advantage over that step's response tokens. ``returns`` (the critic's target)
is ``A + V`` where values arrive (GAE's return; the TD(0) target for vineppo), else ``A``
as for verl's outcome estimators.
Failed samples (an env that raised) get advantage 0, stay out of the step table and are
counted in ``cairn/failed_episodes``; so do verl's synthetic padding samples (tag
``is_padding``, copies of a real sample's fields under another uid), uncounted. Rollout
correction (importance weights) runs as in verl's own ``_compute_advantage``; a KL
penalty in the reward is refused (cairn's rewards are per step: use
``actor_rollout_ref.actor.use_kl_loss``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer

from cairn._errors import ConfigError
from cairn.advantages import compute
from cairn.data import StepBatch
from cairn.integrations.verl.config import CairnVerlConfig, cairn_config, check_estimator

__all__ = ["CairnTrainer", "step_advantages", "step_table"]


def _ids(labels: Sequence[Hashable]) -> np.ndarray:
    """Hashable labels -> int64 ids (equal labels, equal ids)."""
    index: dict[Hashable, int] = {}
    return np.fromiter((index.setdefault(x, len(index)) for x in labels), np.int64, len(labels))


def _anchor(a: object) -> Hashable:
    return a if isinstance(a, int | str | tuple) else str(a)


def step_table(
    uid: Sequence[object], fields: Sequence[Mapping[str, Any]], values: np.ndarray | None = None
) -> StepBatch:
    """cairn's StepBatch of the samples in ``fields`` (one dict of extra_fields per sample).

    ``values`` (N,) is V before each step (the critic at the step's first response token).
    """
    n = len(fields)
    missing = [i for i, f in enumerate(fields) if "cairn_episode" not in f]
    if missing:
        raise ValueError(
            f"{len(missing)} of {n} samples carry no cairn fields (first: row {missing[0]}); "
            "the cairn trainer needs the cairn agent loop (agent_name 'cairn' in the data)"
        )
    optional: dict[str, np.ndarray] = {}
    if all("cairn_info_gain" in f for f in fields):
        optional["info_gain"] = np.array([f["cairn_info_gain"] for f in fields], np.float64)
    if values is not None:
        optional["value"] = np.asarray(values, np.float64)
    anchors = np.empty(n, dtype=object)  # 1-D even when anchors are tuples
    anchors[:] = [_anchor(f["cairn_anchor"]) for f in fields]
    return StepBatch.from_columns(
        group=_ids([str(u) for u in uid]),
        episode=_ids([f["cairn_episode"] for f in fields]),
        t=np.array([int(f["cairn_turn"]) for f in fields], np.int64),
        reward=np.array([float(f["cairn_step_reward"]) for f in fields], np.float64),
        anchor=anchors,
        success=np.array([bool(f["cairn_success"]) for f in fields], bool),
        **optional,
    )


def step_advantages(
    cfg: CairnVerlConfig,
    uid: Sequence[object] | np.ndarray,
    fields: Sequence[Mapping[str, Any]],
    values: np.ndarray | None = None,
    padding: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, float]]:
    """Per-sample advantages (N,) float64 (0 for failed and padding samples) and metrics."""
    fields = [dict(f) for f in fields]
    failed = np.array([bool(f.get("cairn_failed", False)) for f in fields], bool)
    padding = np.zeros(len(fields), bool) if padding is None else np.asarray(padding, bool)
    failed &= ~padding
    ok = np.flatnonzero(~failed & ~padding)
    adv = np.zeros(len(fields), np.float64)
    metrics = {"cairn/failed_episodes": float(failed.sum())}
    if len(ok):
        kept = [uid[int(i)] for i in ok], [fields[i] for i in ok]
        batch = step_table(*kept, None if values is None else values[ok])
        try:
            a, _ = compute(batch, cfg.advantage)  # cairn train's stage: estimate, whiten
        except ValueError as err:
            raise ValueError(
                f"cairn.advantage.name={cfg.advantage.name!r}: {err}. Through verl a step "
                "carries info_gain when the env reports info['info_gain'] and value when "
                "verl's critic runs (docs/scale.md, verl)"
            ) from err
        adv[ok] = a
        metrics.update(_episode_metrics(batch, fields, ok))
    return adv, metrics


def _episode_metrics(
    batch: StepBatch, fields: Sequence[Mapping[str, Any]], ok: np.ndarray
) -> dict[str, float]:
    first = batch.t == 0  # one row per episode
    return {
        "cairn/episodes": float(first.sum()),
        "cairn/success": float(batch.success[first].mean()) if first.any() else 0.0,
        "cairn/turns_per_episode": len(batch) / max(float(first.sum()), 1.0),
        "cairn/invalid_actions": float(np.mean([not fields[i]["cairn_valid"] for i in ok])),
    }


@register_trainer("cairn")
class CairnTrainer(PPOTrainerSync):
    """verl's sync v1 trainer whose advantages are cairn's (see the module docstring)."""

    def __init__(self, config: Any):
        self.cairn = cairn_config(config)
        check_estimator(self.cairn, has_values=_critic_enabled(config))
        if config.algorithm.get("use_kl_in_reward", False):
            raise ConfigError(
                "algorithm.use_kl_in_reward=true is not supported with cairn's per-step "
                "rewards; use actor_rollout_ref.actor.use_kl_loss=true"
            )
        super().__init__(config)

    def _build_replay_buffer(self) -> Any:
        # verl switches on trainer_mode == "sync" for its synchronous paths; this mode is
        # the sync trainer with another advantage, so it runs under that name.
        self.trainer_mode = "sync"
        return super()._build_replay_buffer()

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        return compute_cairn_advantage(self, batch, metrics)


def _critic_enabled(config: Any) -> bool:
    from verl.trainer.ppo.utils import need_critic

    return bool(need_critic(config))


def compute_cairn_advantage(trainer: Any, batch: Any, metrics: dict) -> Any:
    """``_compute_advantage`` of ``CairnTrainer``: verl's steps with cairn's advantages."""
    import transfer_queue as tq
    from tensordict import TensorDict
    from verl.protocol import DataProto
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
    from verl.workers.utils.padding import response_to_nested

    select = ["uid", "response_mask", "rollout_log_probs", "old_log_probs", "values"]
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=select)
    extra = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
    )
    fields = list(extra["extra_fields"])
    response_mask = data["response_mask"]  # nested (bs, response_len_i)
    data = DataProto(batch=data.to_padded_tensor())
    uid = np.array(data.batch.pop("uid").tolist(), dtype=object)
    values = data.batch["values"][:, 0].double().cpu().numpy() if "values" in data.batch else None

    corr = trainer.config.algorithm.get("rollout_correction", None)
    correction = (
        corr is not None
        and "rollout_log_probs" in data.batch
        and not corr.get("bypass_mode", False)
    )
    if correction:
        data, is_metrics = compute_rollout_correction_and_add_to_batch(data, corr)
        metrics.update(is_metrics)

    padding = np.array([bool(tag.get("is_padding", False)) for tag in batch.tags], bool)
    adv, cairn_metrics = step_advantages(trainer.cairn, uid, fields, values, padding)
    metrics.update(cairn_metrics)
    mask = data.batch["response_mask"]
    ret = adv if values is None else adv + values  # (bs,) the critic's target
    scores = torch.as_tensor(adv, dtype=torch.float32, device=mask.device)[:, None] * mask
    returns = torch.as_tensor(ret, dtype=torch.float32, device=mask.device)[:, None] * mask
    out = {"advantages": scores, "returns": returns}
    if correction:
        out["response_mask"] = data.batch["response_mask"]
        if "rollout_is_weights" in data.batch:
            out["rollout_is_weights"] = data.batch["rollout_is_weights"]
    if response_mask.is_nested:  # TransferQueue's jagged layout, as verl writes it back
        out = {k: response_to_nested(v, response_mask) for k, v in out.items()}
    return tq.kv_batch_put(
        keys=batch.keys,
        partition_id=batch.partition_id,
        fields=TensorDict(out, batch_size=len(batch)),
    )
