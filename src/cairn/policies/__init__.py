"""Policies: every model is a transformers ``AutoModelForCausalLM``.

``build_policy`` gives the tiny default (config + tokenizer built locally from the env's
vocabulary) or loads any model by local directory, hub name or embedded alias
(``model.path``, ``cairn.policies.smol``), or a checkpoint; optionally with gradient
checkpointing and LoRA adapters (``model.lora``, peft). Its parts live beside their kind:
the source (``smol.model_source``), the weights (``weights``), the tiny default's
tokenizer and model (``tokenizer.local_tokenizer``, ``tiny.tiny_model``), the adapters
(``lora``) and the sampling and scoring options (``options.generation_options``).
A LoRA checkpoint holds only the adapters: the base comes from ``model.path`` (or the tiny
default, rebuilt from the seed) and the adapters from the checkpoint. Whatever a checkpoint
needs is read offline (``local_files_only``) and from safetensors only: a base that is a
pickle (``pytorch_model.bin``) or a hub name not in the local cache is refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from cairn.envs import TextEnv
from cairn.policies.hf import Generation, HFPolicy
from cairn.policies.lora import apply_lora, load_adapters, lora_spec
from cairn.policies.modelio import save_pretrained
from cairn.policies.options import GenerationOptions, autocast_on, generation_options
from cairn.policies.remote import NO_REMOTE_CODE, check_no_remote_code
from cairn.policies.smol import model_source
from cairn.policies.tiny import tiny_model
from cairn.policies.tokenizer import local_tokenizer
from cairn.policies.weights import load_weights, offline

__all__ = [
    "Generation",
    "GenerationOptions",
    "HFPolicy",
    "autocast_on",
    "build_policy",
    "generation_options",
    "local_tokenizer",
    "save_model_dir",
]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def save_model_dir(policy: HFPolicy, folder: Path) -> Path:
    """Write ``policy`` as a Hugging Face model directory (config, safetensors weights,
    tokenizer files with its chat template): what ``model.path`` loads, like any model."""
    folder = Path(folder)
    save_pretrained(policy.model, folder, safe_serialization=True)
    policy.tokenizer.save_pretrained(folder)
    return folder


def build_policy(
    cfg: Any,
    env: TextEnv,
    instruction: str,
    seed: int,
    checkpoint: Path | None = None,
    extra_words: Sequence[str] = (),
    extend_turns: bool = False,
) -> HFPolicy:
    """The policy of a run: from ``checkpoint`` when given, else from ``cfg`` (ModelConfig);
    ``extra_words``: prompt words the tiny default's tokenizer must know beyond the env's
    (``cairn.train.settings.prompt_words``); ``extend_turns``: each turn's prompt extends the
    last turn's prompt and reply (``generation_options``)."""
    hf_logging.disable_progress_bar()
    dtype = _DTYPES[cfg.dtype]
    # The tiny default runs eager attention (fastest for short CPU sequences); a resumed
    # run must use the same kernels as the run it continues, or its numbers drift.
    attn = cfg.attn_implementation or ("eager" if cfg.path is None else None)
    # A LoRA checkpoint holds adapters only: its base is built as for a fresh run.
    adapters = checkpoint is not None and (checkpoint / "adapter_config.json").exists()
    source = checkpoint if checkpoint is not None and not adapters else model_source(cfg.path)
    if source is not None:
        extra = {"attn_implementation": attn} if attn else {}
        for folder in {checkpoint or source, source}:  # no folder's own code, ever
            check_no_remote_code(folder)
        with offline(checkpoint is not None):
            tokenizer = AutoTokenizer.from_pretrained(checkpoint or source, **NO_REMOTE_CODE)
            model = load_weights(source, checkpoint, dtype=dtype, **extra)
    else:
        tokenizer = (
            AutoTokenizer.from_pretrained(checkpoint, **NO_REMOTE_CODE)
            if checkpoint is not None
            else local_tokenizer(
                env, instruction, kind=getattr(cfg, "tokenizer", "auto"),
                vocab_size=getattr(cfg, "vocab_size", 512), extra_words=extra_words,
            )
        )  # fmt: skip
        model = tiny_model(cfg, tokenizer, attn, seed).to(dtype)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(cfg, "gradient_checkpointing", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if adapters and checkpoint is not None:  # adapters implies a checkpoint
        with offline(True):
            model = load_adapters(model, checkpoint)
    elif getattr(cfg, "lora", None) is not None:
        with torch.random.fork_rng(devices=[]):  # adapter init from the seed, not global state
            torch.manual_seed(seed)
            model = apply_lora(model, lora_spec(cfg.lora))
    options = generation_options(cfg, extend_turns=extend_turns)
    return HFPolicy(model, tokenizer, device=cfg.device, options=options)
