"""The embedded default model: a tiny Llama- or Qwen2-style causal LM built from a config.

Nothing is downloaded: the weights are randomly initialised from the seed and the
vocabulary comes from a tokenizer built locally (`cairn.policies.tokenizer`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    Qwen2Config,
)

__all__ = ["ARCHITECTURES", "build_tiny_model", "tiny_config", "tiny_model"]

ARCHITECTURES = ("llama", "qwen2")


def tiny_config(
    vocab_size: int,
    *,
    arch: str = "llama",
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    intermediate_size: int = 128,
    max_positions: int = 1024,
    pad_token_id: int = 0,
    eos_token_id: int = 2,
    attn_implementation: str | None = "eager",
) -> PretrainedConfig:
    """A small decoder config; ~90k parameters at the defaults with a 100-word vocabulary."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"tiny model arch {arch!r} is not one of {ARCHITECTURES}")
    if hidden_size % heads:
        raise ValueError(f"hidden_size {hidden_size} is not divisible by heads {heads}")
    cls = LlamaConfig if arch == "llama" else Qwen2Config
    # attn_implementation (None: transformers picks) is no field of the config dataclasses:
    # their __init__ takes it among the extra keywords at run time, which its typed signature
    # does not list; passed apart so that every field keyword above stays checked.
    extra: dict[str, Any] = {"attn_implementation": attn_implementation}  # eager: fastest on CPU
    return cls(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        **extra,
    )


def build_tiny_model(config: PretrainedConfig, seed: int) -> torch.nn.Module:
    """Randomly initialised ``AutoModelForCausalLM`` for ``config``, deterministic in ``seed``."""
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG untouched
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config)


def tiny_model(
    cfg: Any, tokenizer: PreTrainedTokenizerBase, attn: str | None, seed: int
) -> torch.nn.Module:
    """The tiny default model of ``cfg`` over ``tokenizer``, initialised from ``seed``."""
    config = tiny_config(
        len(tokenizer),
        arch=cfg.arch,
        hidden_size=cfg.hidden_size,
        layers=cfg.layers,
        heads=cfg.heads,
        intermediate_size=cfg.intermediate_size,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        attn_implementation=attn,
        max_positions=max(1024, getattr(cfg, "max_context", None) or 0),
    )
    return build_tiny_model(config, seed)
