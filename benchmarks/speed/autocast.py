"""Tokens per second of a policy's scoring, forward and forward+backward, and the seconds of
one decoding step, in four precision regimes: float32, float32 weights under bfloat16
autocast (``model.autocast=bf16``, what ``auto`` picks for a real model on a CPU with AMX or
AVX512-BF16; frozen weights cast to bfloat16 once, ``cairn.policies.casts``), the same with
the frozen weights cast at every product as autocast alone does (the code before the casts
were kept), and bfloat16 weights (``model.dtype=bfloat16``).

    python benchmarks/speed/autocast.py                       # SmolLM2-135M + LoRA r16, 8 x 256
    python benchmarks/speed/autocast.py --rows 2 --tokens 64 --repeats 1   # seconds, a smoke run
    python benchmarks/speed/autocast.py --tiny                # the tiny default model

A decoding step is one token for each of ``--rows`` rows after a KV cache of ``--tokens``
tokens (the model's forward as ``HFPolicy.generate`` calls it, without the sampling).
It scores through ``HFPolicy.score`` (the decoder, then the head on the response
positions, as an update does), on random token rows whose last quarter is the "action".
The model is SmolLM2-135M-Instruct from the project's converted cache
(``cairn.policies.smol``) when that folder exists (nothing is downloaded or converted),
else the tiny default. One thread unless --threads; each arm runs ``--repeats`` times after
one warm-up and reports the best. The machine's bf16 support (``cpu_has_bf16``) is printed
with the numbers: without AMX or AVX512-BF16, bfloat16 is emulated and autocast is slower
than float32, which is why ``auto`` leaves it off there. Timings on a shared machine are
noisy: say what ran beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

from cairn.data.tokens import collate_scoring
from cairn.policies import GenerationOptions, HFPolicy
from cairn.policies.casts import cast_per_call
from cairn.policies.lora import LoraSpec, apply_lora
from cairn.policies.modelio import cache_kwarg, output_cache
from cairn.policies.options import cpu_has_bf16
from cairn.policies.smol import cache_root
from cairn.policies.tiny import build_tiny_model, tiny_config

ALIAS = "smollm2-135m-instruct"


def load(tiny: bool, dtype: torch.dtype, lora: int) -> tuple[torch.nn.Module, str]:
    """(model, its name): SmolLM2 from the converted cache where present, else the tiny
    default (random weights: speed only); LoRA adapters of rank ``lora`` (0: none)."""
    folder = cache_root() / ALIAS
    if not tiny and (folder / "config.json").is_file():
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        name = ALIAS
    else:
        config = tiny_config(512, pad_token_id=0, eos_token_id=2, attn_implementation="eager")
        model, name = build_tiny_model(config, seed=0).to(dtype), "tiny default"
    if lora:
        torch.manual_seed(0)
        model = apply_lora(model, LoraSpec(r=lora))  # adapters in float32 either way
    return model, name


def batch(vocab: int, rows: int, tokens: int) -> object:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, tokens), generator=g).tolist()
    cut = tokens - tokens // 4
    return collate_scoring([r[:cut] for r in ids], [r[cut:] for r in ids], None, pad_id=0)


def timed(policy: HFPolicy, inputs: object, backward: bool, repeats: int) -> float:
    """Best seconds of one scoring pass (with its backward when ``backward``)."""
    best = float("inf")
    for i in range(repeats + 1):  # the first is a warm-up
        t = time.perf_counter()
        with torch.set_grad_enabled(backward):
            logp, _ = policy.score(inputs, with_entropy=False)  # type: ignore[arg-type]
            if backward:
                logp.sum().backward()
        if i:
            best = min(best, time.perf_counter() - t)
        policy.model.zero_grad(set_to_none=True)
    return best


@torch.no_grad()
def timed_decode(policy: HFPolicy, rows: int, tokens: int, repeats: int) -> float:
    """Best seconds of one decoding step: a token per row after a cache of ``tokens``."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, policy.model.config.vocab_size, (rows, tokens + 1), generator=g)
    best = float("inf")
    with policy.precision():
        for i in range(repeats + 1):  # the first is a warm-up
            cache = output_cache(policy.model(input_ids=ids[:, :tokens], use_cache=True))
            t = time.perf_counter()
            policy.model(input_ids=ids[:, tokens:], **{cache_kwarg(policy.model): cache},
                         use_cache=True, logits_to_keep=1)  # fmt: skip
            if i:
                best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lora", type=int, default=16, help="LoRA rank (0: full weights)")
    ap.add_argument("--tiny", action="store_true", help="the tiny default, not SmolLM2")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    arms = {
        "float32": (torch.float32, False),
        "autocast bf16": (torch.float32, True),
        "autocast bf16, cast per call": (torch.float32, True),
        "bf16 weights": (torch.bfloat16, False),
    }
    n = args.rows * args.tokens
    out = {"cpu_has_bf16": cpu_has_bf16(), "cpu": platform.processor() or platform.machine(),
           "threads": args.threads, "load_before": os.getloadavg()[0], "arms": {}}  # fmt: skip
    for arm, (dtype, autocast) in arms.items():
        model, name = load(args.tiny, dtype, args.lora)
        model.train()
        policy = HFPolicy(model, _tokenizer(), options=GenerationOptions(autocast=autocast))
        if arm.endswith("cast per call"):
            cast_per_call(model)
        inputs = batch(model.config.vocab_size, args.rows, args.tokens)
        fwd = timed(policy, inputs, False, args.repeats)
        both = timed(policy, inputs, True, args.repeats)
        step = timed_decode(policy, args.rows, args.tokens, args.repeats)
        out["model"] = name
        out["arms"][arm] = {"fwd_tok_s": round(n / fwd, 1), "fwd_bwd_tok_s": round(n / both, 1),
                            "decode_step_ms": round(1000 * step, 1)}  # fmt: skip
        size = f"{args.rows} x {args.tokens} tokens"
        print(f"{arm:28s} {name}: forward {n / fwd:8.1f} tok/s, "
              f"forward+backward {n / both:8.1f} tok/s ({size}), "
              f"decoding step {1000 * step:6.1f} ms", flush=True)  # fmt: skip
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out))


def _tokenizer() -> object:
    """A stand-in with the ids ``HFPolicy`` reads (scoring needs no text)."""

    class Ids:
        eos_token_id, pad_token_id = 2, 0

    return Ids()


if __name__ == "__main__":
    main()
