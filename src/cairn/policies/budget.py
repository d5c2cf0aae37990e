"""A policy's token budgets: the prompt tokens its context leaves (``context_budget``)
and whether ``rollout.max_new_tokens`` holds a correct answer written with its own
tokenizer (``check_token_budget``: a cap sized for the tiny tokenizer cuts a pretrained
model's correct answers into format errors)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cairn.agent import example_completion
from cairn.policies.hf import HFPolicy

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["BUDGET_SEEDS", "check_token_budget", "context_budget"]

BUDGET_SEEDS = 4  # tasks whose gold action the token cap must hold


def context_budget(policy: HFPolicy, max_context: int | None, max_new_tokens: int) -> int:
    """Prompt tokens allowed: ``max_context`` (else the model config's
    ``max_position_embeddings``) minus the ``max_new_tokens`` a completion may add."""
    limit = max_context or getattr(policy.model.config, "max_position_embeddings", None)
    if limit is None:
        raise ValueError("set model.max_context: the model config has no max_position_embeddings")
    if limit <= max_new_tokens:
        raise ValueError(
            f"model.max_context {limit} leaves no room for a prompt: it must exceed "
            f"rollout.max_new_tokens {max_new_tokens}"
        )
    return int(limit) - max_new_tokens


def check_token_budget(
    env: Any, tokenizer: PreTrainedTokenizerBase, fmt: str, rollout: Any, prefix: str = ""
) -> None:
    """Fail in one line when ``rollout.max_new_tokens`` cannot hold the gold action of
    one of the first ``BUDGET_SEEDS`` tasks of ``env`` written in ``fmt`` after the
    response ``prefix`` the prompt already holds (envs without a gold action are not
    checked)."""
    longest, worst = 0, ""
    for seed in range(BUDGET_SEEDS):
        env.reset(seed=seed)
        gold = env.gold_action()
        if gold is None:
            continue
        text = example_completion(fmt, gold, getattr(env, "tools", ())).removeprefix(prefix)
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        if n > longest:
            longest, worst = n, text
    if longest > rollout.max_new_tokens:
        raise ValueError(
            f"rollout.max_new_tokens {rollout.max_new_tokens} cannot hold a correct answer: "
            f"{worst!r} is {longest} tokens with this model's tokenizer; set it to at least "
            f"{longest}"
        )
