"""Policies: every model is a transformers ``AutoModelForCausalLM``.

``build_policy`` gives the tiny default (config + tokenizer built locally from the env's
vocabulary) or loads any local model directory (``model.path``), or a checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from cairn.agent import TEMPLATE_WORDS
from cairn.envs import TextEnv
from cairn.policies.hf import Generation, HFPolicy
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.policies.tokenizer import bpe_tokenizer, word_tokenizer

__all__ = ["Generation", "HFPolicy", "build_policy", "local_tokenizer"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def local_tokenizer(env: TextEnv, instruction: str, sample_seeds: int = 16):
    """Word-level over the env's closed vocabulary, else a BPE trained on sampled text."""
    words = env.vocabulary()
    if words:
        return word_tokenizer([*words, instruction, *TEMPLATE_WORDS])
    texts = [instruction, " ".join(TEMPLATE_WORDS)]
    for seed in range(sample_seeds):
        obs, info = env.reset(seed=seed)
        texts += [obs, env.instruction, " ".join(info.get("admissible") or [])]
    return bpe_tokenizer(texts)


def build_policy(
    cfg: Any, env: TextEnv, instruction: str, seed: int, checkpoint: Path | None = None
) -> HFPolicy:
    """The policy of a run: from ``checkpoint`` when given, else from ``cfg`` (ModelConfig)."""
    hf_logging.disable_progress_bar()
    dtype = _DTYPES[cfg.dtype]
    # The tiny default runs eager attention (fastest for short CPU sequences); a resumed
    # run must use the same kernels as the run it continues, or its numbers drift.
    attn = cfg.attn_implementation or ("eager" if cfg.path is None else None)
    source = checkpoint or (Path(cfg.path) if cfg.path else None)
    if source is not None:
        if not source.exists():
            raise FileNotFoundError(f"model path {str(source)!r} does not exist")
        tokenizer = AutoTokenizer.from_pretrained(source)
        extra = {"attn_implementation": attn} if attn else {}
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **extra)
    else:
        tokenizer = local_tokenizer(env, instruction)
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
        )
        model = build_tiny_model(config, seed).to(dtype)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return HFPolicy(model, tokenizer, device=cfg.device)
