"""How a policy runs its model: the sharing and caching of sampling and scoring, and the
precision of its forward passes, fixed when the policy is built (``HFPolicy(options=...)``).

    GenerationOptions()                       the plain path: every row fed whole, float32
    GenerationOptions(share_prefix=True, ...) the shared-prefix component (``sharing``)

The plain path (all sharing and caching off) is the reference: the shared-prefix component
gives the same sampled tokens and the same log-probs, entropies and gradients within float
rounding (tests/policies compare them), and with every switch off it is the plain path bit
for bit. The tiny default runs the plain path (the demo's numbers are the reference's);
pretrained models run the component (``generation_options``).

``autocast`` (bfloat16 autocast of the decoder; the output head, the adapters and the
optimizer state stay float32) applies to sampling and scoring alike, so the behaviour
log-probs of a rollout and the first epoch's scores come from the same precision regime.
``cpu_has_bf16`` tells whether autocast pays on this CPU: it must say it multiplies
bfloat16 natively (AMX or AVX512-BF16) and a decoder-shaped product, timed here, must run
``BF16_MIN_SPEEDUP`` times faster under autocast than in float32 (flags alone are not
proof: a CPU that emulates part of the path runs a real model's iteration 10x slower).

``inverse_cdf`` (on for pretrained models) draws each token from the same distribution as
``torch.multinomial`` by another random stream, one uniform per row instead of one
exponential per vocabulary entry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "BF16_MIN_SPEEDUP",
    "BUCKET_COST_ACCELERATOR",
    "BUCKET_COST_CPU",
    "PREFIX_BLOCK",
    "GenerationOptions",
    "autocast_on",
    "bf16_flags",
    "bf16_speedup",
    "cpu_has_bf16",
    "generation_options",
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


@dataclass(frozen=True)
class GenerationOptions:
    """The policy's sampling and scoring switches (all off: the plain path).

    ``drop_finished``: generation drops finished rows (and their KV-cache rows) once at
    least half of the running rows are done; the tokens sampled stay the same (the random
    draws are those of the full batch), the logits may differ in their last bits.
    ``share_prefix``: the tokens that all distinct prompts of a ``generate`` call (or all
    contexts of a ``score`` call) begin with, and then those each group of rows shares, go
    through the model once (``min_shared_prefix``: shorter shared runs are not worth the
    extra forward). ``reuse_cache``: generation keeps each row's KV cache until the next
    call, where a prompt that extends a kept row feeds only its new tokens.
    ``prefix_block``: with ``share_prefix``, generation runs the prefix all prompts share in
    blocks of this many tokens and keeps whole blocks until the weights change (0: off).
    ``bucket_cost``: ``score`` feeds rows in buckets of similar length, one more decoder
    call counting as this many padding tokens (None: one batch). ``score_chunk``: response
    positions per chunk of the output head in ``score`` (peak memory ~ score_chunk x V).
    ``autocast``: the decoder's forward under bfloat16 autocast (module docstring).
    ``inverse_cdf``: each token is drawn by inverting its row's CDF with one uniform (the
    same distribution as ``torch.multinomial``, another random stream; B draws per token
    instead of B x V exponentials).
    """

    drop_finished: bool = False
    share_prefix: bool = False
    min_shared_prefix: int = 16
    reuse_cache: bool = False
    prefix_block: int = 0
    bucket_cost: int | None = None
    score_chunk: int = 1024
    autocast: bool = False
    inverse_cdf: bool = False

    def __post_init__(self) -> None:
        for name in ("min_shared_prefix", "prefix_block"):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"GenerationOptions.{name} must be >= 0, got {getattr(self, name)}"
                )
        if self.score_chunk < 1:
            raise ValueError(f"GenerationOptions.score_chunk must be >= 1, got {self.score_chunk}")
        if self.bucket_cost is not None and self.bucket_cost < 0:
            raise ValueError(
                f"GenerationOptions.bucket_cost must be >= 0 or None, got {self.bucket_cost}"
            )
        if self.prefix_block and not self.share_prefix:
            raise ValueError(
                "GenerationOptions.prefix_block needs share_prefix=True (it keeps shared blocks)"
            )

    @property
    def plain(self) -> bool:
        """Whether no sharing or caching is on: the plain sampler and scorer serve."""
        return not (
            self.drop_finished or self.share_prefix or self.reuse_cache
            or self.bucket_cost is not None
        )  # fmt: skip

    def describe(self) -> str:
        """The switches that differ from the plain path's, as ``name=value`` words."""
        base = GenerationOptions()
        changed = [f for f in fields(self) if getattr(self, f.name) != getattr(base, f.name)]
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in changed) or "plain"


#: How much faster than float32 a decoder-shaped product must run under bfloat16 autocast
#: for ``auto`` to choose it. ``bf16_speedup`` measured on one Sapphire Rapids machine,
#: loaded: 1.9-2.5x with AMX; with oneDNN capped (``ONEDNN_MAX_CPU_ISA``) to AVX512-BF16
#: without AMX 0.3-0.5x, to AVX512 0.1x, to AVX2 0.01-0.05x. The margin on both sides keeps
#: a loaded machine's noise from flipping the choice.
BF16_MIN_SPEEDUP = 1.2


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
    import torch  # at call time: this module imports no torch

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
    import torch

    cpu = torch.device(cfg.device).type == "cpu"
    return cfg.path is not None and cfg.dtype == "float32" and cpu and cpu_has_bf16()


@lru_cache(maxsize=1)
def cpu_has_bf16() -> bool:
    """Whether bfloat16 autocast pays on this CPU: it reports native bfloat16 products
    (``bf16_flags``) and ``bf16_speedup`` measures at least ``BF16_MIN_SPEEDUP``. Checked
    once per process; the product is timed only where the flags are there."""
    return bf16_flags() and bf16_speedup() >= BF16_MIN_SPEEDUP


def bf16_flags() -> bool:
    """Whether the CPU says it multiplies bfloat16 natively: the ``amx_bf16`` or
    ``avx512_bf16`` flag in /proc/cpuinfo (Linux), else torch's CPU capability (``AMX`` /
    ``BF16`` in its name, where this torch reports it)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace").split()
    except OSError:
        flags = []
    if "amx_bf16" in flags or "avx512_bf16" in flags:
        return True
    try:
        import torch

        capability = str(torch.backends.cpu.get_cpu_capability()).upper()
    except (ImportError, AttributeError, RuntimeError):
        return False
    return "AMX" in capability or "BF16" in capability


def bf16_speedup(rows: int = 128, width: int = 576, hidden: int = 1536, repeats: int = 7) -> float:
    """float32 time over bfloat16-autocast time of one decoder-shaped product (``rows``
    tokens through a frozen ``width x hidden`` float32 weight, SmolLM2-135M's MLP, cast on
    every call as autocast alone casts frozen weights: a policy's layers keep their casts,
    ``cairn.policies.casts``, so this errs on the side of float32). Timed on one thread, the
    two precisions alternating, the fastest of ``repeats`` each: another job's load only
    adds time, so the minimum is the machine's speed and the alternation shares what load
    remains."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, width, generator=gen)
    weight = torch.randn(hidden, width, generator=gen)
    best = {False: float("inf"), True: float("inf")}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for i in range(2 * (repeats + 1)):
                autocast = bool(i % 2)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    start = time.perf_counter()
                    torch.nn.functional.linear(x, weight)
                    took = time.perf_counter() - start
                if i >= 2:  # the first pair warms the kernels up
                    best[autocast] = min(best[autocast], took)
    finally:
        torch.set_num_threads(threads)
    return best[False] / max(best[True], 1e-9)
