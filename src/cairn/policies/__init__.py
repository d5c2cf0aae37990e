"""Policies: every model is a transformers ``AutoModelForCausalLM``.

``build_policy`` gives the tiny default (config + tokenizer built locally from the env's
vocabulary) or loads any model by local directory, hub name or embedded alias
(``model.path``, ``cairn.policies.smol``), or a checkpoint; optionally with gradient
checkpointing and LoRA adapters (``model.lora``, peft).
A LoRA checkpoint holds only the adapters: the base comes from ``model.path`` (or the tiny
default, rebuilt from the seed) and the adapters from the checkpoint. Whatever a checkpoint
needs is read offline (``local_files_only``) and from safetensors only: a base that is a
pickle (``pytorch_model.bin``) or a hub name not in the local cache is refused in one line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from cairn.agent import TEMPLATE_WORDS, format_completion
from cairn.envs import TextEnv
from cairn.policies.hf import Generation, HFPolicy
from cairn.policies.lora import LoraSpec, apply_lora, load_adapters
from cairn.policies.modelio import save_pretrained
from cairn.policies.options import GenerationOptions, cpu_has_bf16
from cairn.policies.remote import NO_REMOTE_CODE, check_no_remote_code
from cairn.policies.smol import alias_dir, is_alias
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.policies.tokenizer import bpe_tokenizer, chat_tokenizer, word_tokenizer

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

# Tokens per kept block of the prompts' shared prefix (GenerationOptions.prefix_block): 256 of
# sokoban_smol's 301-token instruction are kept across a rollout's turns.
PREFIX_BLOCK = 128
# What one more decoder call in an update is worth, in padding tokens (bucket_cost):
# on one CPU core a call of a few tokens after a ~500-token cache costs about what 25-40
# tokens cost in a large call (0.1-0.2 s against ~4 ms a token, forward, on
# SmolLM2-135M-Instruct). A GPU runs a small model's tokens almost free and its calls not,
# so it buckets only where padding is large (a guess: not measured on a GPU).
BUCKET_COST_CPU = 32
BUCKET_COST_ACCELERATOR = 1024
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def local_tokenizer(
    env: TextEnv,
    instruction: str,
    sample_seeds: int = 16,
    kind: str = "auto",
    vocab_size: int = 512,
    extra_words: Sequence[str] = (),
):
    """The tiny default's tokenizer, built here in well under a second.

    ``auto``: word-level over the env's closed vocabulary, else a BPE trained on sampled
    text; ``word`` / ``bpe`` force one; ``chat``: a BPE with ChatML tokens and a chat
    template (``chat_tokenizer``) trained on what the env produces: instructions,
    observations over ``sample_seeds`` episodes of random admissible actions, and those
    actions written as ``<think>``/``<action>`` and tool-call completions.
    """
    words = env.vocabulary()
    if kind == "word" or (kind == "auto" and words):
        return word_tokenizer([*words, instruction, *TEMPLATE_WORDS, *extra_words])
    texts = [instruction, " ".join(TEMPLATE_WORDS)]
    if extra_words:  # kept out of the texts when none, so existing tokenizers stay the same
        texts.append(" ".join(extra_words))
    for seed in range(sample_seeds):
        texts += _episode_text(env, seed, steps=4 if kind == "chat" else 0)
    if kind == "chat":
        return chat_tokenizer(texts, vocab_size)
    return bpe_tokenizer(texts, vocab_size)


def _episode_text(env: TextEnv, seed: int, steps: int) -> list[str]:
    """Instruction, observations and actions of one episode of random admissible actions
    (seeded), the actions also as completions in every action format."""
    obs, info = env.reset(seed=seed)
    texts = [obs, env.instruction, " ".join(info.get("admissible") or [])]
    rng = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        actions = info.get("admissible") or []
        if not actions:
            break
        action = actions[int(torch.randint(len(actions), (1,), generator=rng))]
        texts += [format_completion(action, think=obs.split(" ", 1)[0])]
        obs, _, term, trunc, info = env.step(action)
        texts.append(obs)
        if term or trunc:
            break
    return texts


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
    source = checkpoint if checkpoint is not None and not adapters else _model_source(cfg.path)
    if source is not None:
        extra = {"attn_implementation": attn} if attn else {}
        for folder in {checkpoint or source, source}:  # no folder's own code, ever
            check_no_remote_code(folder)
        with _offline(checkpoint is not None):
            tokenizer = AutoTokenizer.from_pretrained(checkpoint or source, **NO_REMOTE_CODE)
            model = _load_weights(source, checkpoint, dtype=dtype, **extra)
    else:
        tokenizer = (
            AutoTokenizer.from_pretrained(checkpoint, **NO_REMOTE_CODE)
            if checkpoint is not None
            else local_tokenizer(
                env, instruction, kind=getattr(cfg, "tokenizer", "auto"),
                vocab_size=getattr(cfg, "vocab_size", 512), extra_words=extra_words,
            )
        )  # fmt: skip
        model = _tiny_model(cfg, tokenizer, attn, seed).to(dtype)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(cfg, "gradient_checkpointing", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if adapters and checkpoint is not None:  # adapters implies a checkpoint
        with _offline(True):
            model = load_adapters(model, checkpoint)
    elif getattr(cfg, "lora", None) is not None:
        with torch.random.fork_rng(devices=[]):  # adapter init from the seed, not global state
            torch.manual_seed(seed)
            model = apply_lora(model, LoraSpec(**_lora_kwargs(cfg.lora)))
    options = generation_options(cfg, extend_turns=extend_turns)
    return HFPolicy(model, tokenizer, device=cfg.device, options=options)


def generation_options(cfg: Any, extend_turns: bool = False) -> GenerationOptions:
    """The sampling and scoring options of a policy built from ``cfg`` (ModelConfig).

    Pretrained models (``model.path``) draw each token by inverting its CDF, drop finished
    rows while generating, run their prompts' shared prefix once and keep its blocks
    between calls, continue each episode's
    KV cache where a turn's prompt extends the last (``extend_turns``:
    ``cairn.train.settings.turns_extend``), and score in buckets of similar length; the tiny
    default runs the plain path, the reference those are tested against: its prompts are
    short enough that sharing buys little, and the inverse-CDF draws and bucketed scoring
    would change its sampled tokens and the last bits of its losses, so a seed of the demo
    would no longer give the reference's numbers. ``model.autocast`` (``autocast_on``)
    picks the precision.
    """
    real = cfg.path is not None
    device = torch.device(cfg.device)
    cost = BUCKET_COST_CPU if device.type == "cpu" else BUCKET_COST_ACCELERATOR
    return GenerationOptions(
        drop_finished=real,
        share_prefix=real,
        reuse_cache=real and extend_turns,
        prefix_block=PREFIX_BLOCK if real else 0,
        bucket_cost=cost if real else None,
        autocast=autocast_on(cfg),
        inverse_cdf=real,
    )


def autocast_on(cfg: Any) -> bool:
    """Whether the policy's forwards run under bfloat16 autocast (``model.autocast``):
    ``bf16`` always, ``off`` never, ``auto`` for a pretrained model (``model.path``) with
    float32 weights on a CPU that multiplies bfloat16 natively (AMX or AVX512-BF16,
    ``cpu_has_bf16``). The tiny default stays float32 under ``auto``: it runs the float32
    reference path, which bfloat16 would change for little speed on a model that small;
    every other device stays float32 too, as autocast was not measured there. A config
    object without the key reads as the schema's default, ``auto``."""
    mode = getattr(cfg, "autocast", "auto")
    if mode in ("bf16", "off"):
        return mode == "bf16"
    cpu = torch.device(cfg.device).type == "cpu"
    return cfg.path is not None and cfg.dtype == "float32" and cpu and cpu_has_bf16()


def _tiny_model(cfg: Any, tokenizer: Any, attn: str | None, seed: int) -> torch.nn.Module:
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


@contextmanager
def _offline(on: bool) -> Iterator[None]:
    """With ``on`` (loading a run's checkpoint: resume, eval), the Hugging Face hub offline:
    files come from local folders or the local cache, and no request of any kind is made
    (with ``local_files_only`` alone, transformers still asks the hub for an adapter config
    and huggingface_hub for its agent registry)."""
    if not on:
        yield
        return
    from huggingface_hub import constants

    before, constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE, True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def _load_weights(source: Path | str, checkpoint: Path | None, **options: Any) -> Any:
    """``AutoModelForCausalLM`` from ``source``; for a checkpoint, safetensors only and
    offline, a failure as one line naming the base (ValueError)."""
    if checkpoint is None:
        return AutoModelForCausalLM.from_pretrained(source, **NO_REMOTE_CODE, **options)
    local = {"local_files_only": True, "adapter_kwargs": {"local_files_only": True}}
    try:
        return AutoModelForCausalLM.from_pretrained(
            source, use_safetensors=True, **NO_REMOTE_CODE, **local, **options
        )
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        what = "" if source == checkpoint else f"the base model {str(source)!r} of "
        raise ValueError(
            f"cannot load {what}checkpoint {checkpoint} from local safetensors files ({first}); "
            "a checkpoint's weights are never downloaded nor unpickled: point model.path at "
            "a local folder with model.safetensors"
        ) from None


def _model_source(path: str | None) -> Path | str | None:
    """An embedded model's alias (its converted folder, ``cairn.policies.smol``), a local
    directory, else a hub name ("org/name"), else None (the tiny default)."""
    if path is None:
        return None
    if is_alias(path):
        return alias_dir(path)
    local = Path(path).expanduser()
    if local.exists():
        return local
    if path.count("/") == 1 and not path.startswith((".", "/", "~")):
        return path  # a hub name: from_pretrained downloads it (or reads the hub cache)
    raise FileNotFoundError(f"model path {path!r} does not exist (nor is it a hub 'org/name')")


def _lora_kwargs(lora: Any) -> dict[str, Any]:
    data = lora.model_dump() if hasattr(lora, "model_dump") else dict(lora)
    targets = data.get("target_modules", "all-linear")
    if not isinstance(targets, str):
        data["target_modules"] = tuple(targets)
    return data
