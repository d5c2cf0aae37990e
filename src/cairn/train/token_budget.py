"""The token budget check of a run with a pretrained model (``model.path``): the env's
gold action, written in ``agent.action_format``, must fit ``rollout.max_new_tokens`` with
the model's own tokenizer (``cairn.policies.budget.check_token_budget``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cairn.envs import make
from cairn.policies.budget import check_token_budget
from cairn.rollout.envpool.calls import GuardedEnv

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from cairn.train.schema import Config

__all__ = ["budget_check"]


def budget_check(cfg: Config, tokenizer: PreTrainedTokenizerBase) -> None:
    """``check_token_budget`` on an env of its own (the probe may live in a worker), its
    calls guarded like the probe's."""
    env = GuardedEnv(make(cfg.env.name, **cfg.env.options), cfg.env.name)
    try:
        a = cfg.agent
        check_token_budget(env, tokenizer, a.action_format, cfg.rollout, a.response_prefix)
    finally:
        env.close()
