"""cairn's advantage estimators in verl's advantage-estimator registry (verl >= 0.4.1).

    from cairn.integrations.verl import register
    register()                      # registers cairn_gigpo, cairn_grpo, cairn_proxmo, ...
    # verl config: algorithm.adv_estimator=cairn_gigpo

Each registered function has the signature verl's ``compute_advantage`` calls for estimators
outside its GAE / GRPO branches (``verl.trainer.ppo.core_algos``):

    fn(token_level_rewards (bs, L), response_mask (bs, L), index=uid (bs,), config=None,
       **extra) -> (advantages (bs, L), returns (bs, L))

One batch row is one step (one prompt -> response turn), as in agentic verl trainers.
verl passes ``index`` (the group id, "uid") on its own; what multi-turn credit assignment
needs beyond it, a verl trainer must pass as keyword arguments (or inside
``non_tensor_batch`` under the same names), each an array of length bs:

    traj_uid      episode id of the row (rows of one episode share it)
    step_t        turn index of the row within its episode (0-based)
    anchor_obs    the raw env observation before the step (GiGPO / ProxMO step groups)
    step_rewards  the step's own env reward (default: the row's token_level_rewards sum)
    success       optional bool per row (ProxMO's episode success)

Without them every row is a one-step episode of its group (single-turn RL) and GiGPO
reduces to GRPO; ``cairn_grpo`` then equals verl's GRPO except for groups of one response
(verl: the raw score, cairn: 0). verl's own ``compute_advantage`` passes none of these
fields, so through this registry alone elpo, treepo (``path``), gae, vineppo (``value``)
and igpo (``info_gain``) cannot run: multi-turn training goes through the ``cairn``
agent loop and trainer mode (``cairn.integrations.verl.trainer``). The step advantage the cairn
estimator returns is broadcast to the row's response tokens; ``returns`` equals it, as for
verl's outcome estimators. Options of an estimator are bound when registering
(``register(options={"gigpo": {"gamma": 0.95}})``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from cairn.advantages import available, estimate, validate_options
from cairn.data import StepBatch

__all__ = ["EXTRA_FIELDS", "register", "step_batch_from_verl", "verl_estimator"]

EXTRA_FIELDS = ("traj_uid", "step_t", "anchor_obs", "step_rewards", "success")
_MADE: dict[tuple[str, str], Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {}


def _ids(values: object, n: int, name: str) -> np.ndarray:
    """Any hashable labels (bs,) -> int64 ids (equal labels, equal ids)."""
    arr = np.asarray(values, dtype=object).reshape(-1)
    if len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} entries for {n} rows")
    return np.unique(arr.astype(str), return_inverse=True)[1].astype(np.int64)


def _field(name: str, given: object, non_tensor: Mapping[str, object] | None) -> Any:
    if given is not None:
        return given
    return None if non_tensor is None else non_tensor.get(name)


def step_batch_from_verl(
    token_level_rewards: torch.Tensor,
    index: object = None,
    non_tensor_batch: Mapping[str, object] | None = None,
    **extra: object,
) -> StepBatch:
    """The cairn step table of a verl batch (one row per step; see the module docstring)."""
    n = token_level_rewards.shape[0]
    get = {k: _field(k, extra.get(k), non_tensor_batch) for k in EXTRA_FIELDS}
    rows = np.arange(n)
    group = _ids(index, n, "index") if index is not None else np.zeros(n, np.int64)
    episode = _ids(get["traj_uid"], n, "traj_uid") if get["traj_uid"] is not None else rows
    t = np.asarray(get["step_t"], np.int64) if get["step_t"] is not None else np.zeros(n, np.int64)
    anchor = get["anchor_obs"] if get["anchor_obs"] is not None else [("row", i) for i in rows]
    reward = get["step_rewards"]
    if reward is None:
        reward = token_level_rewards.detach().sum(-1).double().cpu().numpy()
    optional = {} if get["success"] is None else {"success": np.asarray(get["success"], bool)}
    keys = np.empty(n, dtype=object)  # 1-D even when the anchors are tuples
    keys[:] = [a if isinstance(a, int | str | tuple) else str(a) for a in anchor]
    return StepBatch.from_columns(
        group=group,
        episode=episode,
        t=t,
        reward=np.asarray(reward, np.float64),
        anchor=keys,
        **optional,
    )


def verl_estimator(
    name: str, **options: object
) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """cairn's estimator ``name`` (with ``options``) as a verl advantage function."""
    if name not in available():
        raise ValueError(f"unknown cairn estimator {name!r}; available: {', '.join(available())}")
    validate_options(name, options)

    def cairn_advantage(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: object = None,
        config: object = None,
        non_tensor_batch: Mapping[str, object] | None = None,
        **extra: object,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if token_level_rewards.shape != response_mask.shape:
            raise ValueError(
                f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
                f"{tuple(response_mask.shape)} differ in shape"
            )
        batch = step_batch_from_verl(token_level_rewards, index, non_tensor_batch, **extra)
        adv = torch.as_tensor(estimate(name, batch, **options), dtype=token_level_rewards.dtype)
        scores = adv.to(token_level_rewards.device)[:, None] * response_mask  # (bs, L)
        return scores, scores

    cairn_advantage.__name__ = f"cairn_{name}_advantage"
    cairn_advantage.__doc__ = f"cairn's {name!r} estimator with options {options} (see module)."
    return cairn_advantage


def register(
    names: Iterable[str] | None = None,
    prefix: str = "cairn_",
    options: Mapping[str, Mapping[str, object]] | None = None,
) -> list[str]:
    """Register cairn estimators with verl's ``register_adv_est`` as ``prefix + name``.

    Returns the registered names. Registering the same name with the same options again is
    a no-op; verl raises if another function already holds a name.
    """
    try:
        from verl.trainer.ppo.core_algos import register_adv_est
    except ImportError as err:
        raise ImportError("cairn.integrations.verl needs verl >= 0.4.1: pip install verl") from err
    options = options or {}
    unknown = sorted(set(options) - set(available()))
    if unknown:
        raise ValueError(f"options for unknown estimators {unknown}; available: {available()}")
    done = []
    for name in names if names is not None else available():
        opts = dict(options.get(name, {}))
        key = (name, repr(sorted(opts.items())))
        if key not in _MADE:
            _MADE[key] = verl_estimator(name, **opts)
        register_adv_est(prefix + name)(_MADE[key])
        done.append(prefix + name)
    return done
