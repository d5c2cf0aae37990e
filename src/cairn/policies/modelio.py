"""What the policy needs to know about a transformers causal LM's forward: the name of its
KV-cache argument, whether it recomputes activations, its decoder and output head (and
the head run in float32 outside autocast), and the positions of left-padded rows. Shared
by ``hf`` (the sampler and scorer) and ``sharing`` (the shared-prefix component)."""

from __future__ import annotations

from inspect import signature
from os import PathLike
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "SavesPretrained",
    "TokenCount",
    "cache_kwarg",
    "checkpointing",
    "decoder_and_head",
    "dtype_of",
    "float_head",
    "positions",
    "save_pretrained",
]


class TokenCount:
    """Tokens pushed through the model (prefill, decode and scoring), one count per policy."""

    def __init__(self) -> None:
        self.n = 0

    def add(self, n: int) -> None:
        self.n += int(n)


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that follow the mask: a row's numbers do not depend on its padding."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def cache_kwarg(model: torch.nn.Module) -> str:
    """The name the model's forward takes its KV cache under: ``cache`` from transformers
    5.2x on, ``past_key_values`` before (5.17, the GPU check's machine); a PEFT wrapper's
    base model decides."""
    return _cache_kwarg_of(type(_unwrapped(model)))


def output_cache(out: Any) -> Any:
    """The KV cache a forward returned (under either name)."""
    return out.cache if hasattr(out, "cache") else out.past_key_values


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """A PEFT wrapper's base model, else ``model``."""
    base = getattr(model, "get_base_model", None)
    return base() if base is not None else model


_CACHE_KWARG: dict[type[torch.nn.Module], str] = {}  # model class -> ``_cache_kwarg_of``


def _cache_kwarg_of(cls: type[torch.nn.Module]) -> str:
    """``cache_kwarg`` of a model class (its forward's parameter name)."""
    if cls not in _CACHE_KWARG:
        names = signature(cls.forward).parameters
        _CACHE_KWARG[cls] = "cache" if "cache" in names else "past_key_values"
    return _CACHE_KWARG[cls]


def checkpointing(model: torch.nn.Module) -> bool:
    """Whether the model recomputes activations in its backward (gradient checkpointing):
    a recomputed layer would append its keys to a shared cache twice."""
    base = _unwrapped(model)
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # new, old
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False


# Config fields of models whose logits are not just the head applied to the decoder's
# output (Gemma 2's soft-capping, Cohere's scale, Granite's divisor): they keep the
# whole-model scoring path.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def decoder_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(decoder, output head) of a causal LM whose logits are ``head(decoder(...))``
    (a PEFT wrapper forwards both to its base model), else None."""
    lm: Any = model  # its methods, not a submodule or a tensor of that name
    try:
        decoder, head = lm.get_decoder(), lm.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    config = getattr(model, "config", None)
    if not isinstance(head, torch.nn.Linear) or decoder is None or decoder is model:
        return None
    if any(getattr(config, k, None) not in (None, 1, 1.0) for k in _LOGIT_TRANSFORMS):
        return None
    return decoder, head


@runtime_checkable
class SavesPretrained(Protocol):
    """A model that writes itself as a folder: a transformers ``PreTrainedModel`` or a peft
    ``PeftModel`` (adapters only)."""

    def save_pretrained(self, save_directory: str | PathLike[str], **kwargs: Any) -> Any: ...


def save_pretrained(model: torch.nn.Module, folder: str | PathLike[str], **kwargs: Any) -> None:
    """``model.save_pretrained(folder, **kwargs)``; a one-line TypeError naming the model's
    type when it has no ``save_pretrained`` (a plain ``torch.nn.Module``)."""
    if not isinstance(model, SavesPretrained):
        raise TypeError(f"{type(model).__name__} has no save_pretrained: it cannot be saved")
    model.save_pretrained(folder, **kwargs)


def dtype_of(head: torch.nn.Module, default: torch.dtype) -> torch.dtype:
    """The dtype of ``head``'s weight (``default`` without one)."""
    weight = getattr(head, "weight", None)
    return weight.dtype if isinstance(weight, torch.Tensor) else default


def float_head(head: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """``head(hidden)`` outside autocast, in the head's own dtype, as float logits."""
    with torch.autocast(hidden.device.type, enabled=False):
        return head(hidden.to(dtype_of(head, hidden.dtype))).float()
