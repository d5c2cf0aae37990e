"""Generation engines: who samples the actions during a rollout (``rollout.engine``).

``hf`` samples with the transformers model that is trained (``HFPolicy.generate``).
``vllm`` samples with a vLLM engine that holds its own copy of the weights
(``cairn.policies.vllm_engine``), synchronised after every update.

The trainer talks to an engine through three hooks, one per place in the iteration:

    metrics = engine.after_rollout(episodes)   # behaviour log-probs, mismatch check
    mb = engine.reweight(mb, idx)              # per-token importance correction, if any
    engine.sync()                              # new weights to the sampler

The ``hf`` engine's hooks do nothing: its samples come from the trained weights themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from cairn._registry import ImportRegistry
from cairn.data.episode import Episode
from cairn.data.tokens import Minibatch
from cairn.policies.hf import HFPolicy

__all__ = [
    "ENGINES",
    "Engine",
    "HFEngine",
    "make_engine",
    "validate_engine_options",
    "vllm_engine",
]


class Engine(Protocol):
    @property
    def policy(self) -> HFPolicy: ...  # read-only: an engine may hold a subclass (VLLMPolicy)

    def after_rollout(self, episodes: Sequence[Episode]) -> dict[str, float]: ...

    def reweight(self, mb: Minibatch, idx: np.ndarray) -> Minibatch: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


class HFEngine:
    """The transformers backend: generation and training share one model; no hooks needed."""

    def __init__(self, policy: HFPolicy):
        self.policy = policy

    @staticmethod
    def validate_options(options: Mapping[str, object]) -> None:
        if options:
            raise ValueError(f"rollout engine 'hf' takes no options, got {sorted(options)}")

    def after_rollout(self, episodes: Sequence[Episode]) -> dict[str, float]:
        return {}

    def reweight(self, mb: Minibatch, idx: np.ndarray) -> Minibatch:
        return mb

    def sync(self) -> None:
        return None

    def close(self) -> None:
        return None


def vllm_engine(
    policy: HFPolicy, workdir: Path | None = None, temperature: float = 1.0, **options: object
) -> Engine:
    """The vLLM engine (``cairn.policies.vllm_engine``); ``options`` are ``VLLMOptions`` fields."""
    from cairn.policies.vllm_engine import VLLMEngine, VLLMOptions

    if workdir is None:
        raise ValueError("the vllm engine needs a workdir for its model and adapter files")
    return VLLMEngine(policy, VLLMOptions.from_dict(options), workdir, temperature)


def _check_vllm_options(options: dict[str, object]) -> None:
    """Keys and values of the vllm engine's options, checked without importing vLLM."""
    from cairn.policies.vllm_engine import VLLMOptions

    VLLMOptions.from_dict(options)


vllm_engine.validate_options = _check_vllm_options  # type: ignore[attr-defined]

ENGINES = ImportRegistry(
    "rollout engine",
    {"hf": "cairn.policies.engines:HFEngine", "vllm": "cairn.policies.engines:vllm_engine"},
)
_CONTEXT = ("policy", "workdir", "temperature")  # supplied by the trainer, not options


def validate_engine_options(name: str, options: Mapping[str, object]) -> None:
    """Raise ValueError for an unknown engine, or options (keys or values) it does not take.

    Needs no engine installed: vLLM's options are checked without importing vLLM.
    """
    ENGINES.validate(name, options, _CONTEXT)


def make_engine(
    name: str,
    policy: HFPolicy,
    options: Mapping[str, object] | None = None,
    workdir: Path | None = None,
    temperature: float = 1.0,
) -> Engine:
    """The engine ``name`` around the trained ``policy``; vLLM writes its files to ``workdir``."""
    return ENGINES.build(name, options, policy=policy, workdir=workdir, temperature=temperature)
