"""Frozen weights cast to bfloat16 once, not at every call.

Under ``torch.autocast`` every product casts its float32 operands to bfloat16. Autocast
keeps the cast of a weight for the rest of its context only where the weight is a leaf that
requires gradients; a frozen weight (the base of a LoRA model, every weight of a sampling
reference) is cast again by every call, and a call is one token per row while decoding. On
twx_smol's second iteration (SmolLM2-135M-Instruct, LoRA, 2 CPU threads, torch.profiler)
the copies and their allocations (``aten::copy_``, ``aten::empty_strided``) took 12.5 s of
63 s of op time with every call casting, 5.2 s with the casts kept; the kept copies hold
2 bytes a frozen weight (0.2 GB for SmolLM2-135M) and the run's peak RSS fell, as the
copies no call keeps are gone (5.9 -> 4.0 GiB, benchmarks/results/speed/real_speed.md).

``cast_once(model)`` makes each of the model's ``nn.Linear`` layers, under bfloat16
autocast, multiply by a bfloat16 copy of each of its frozen tensors (weight, bias) that is
made once and made again only when the tensor changes: its version counter (an in-place
write, ``load_state_dict``) or its storage (``.to``, a new ``.data``). The products are
those autocast computes, bit for bit: the same float32 values round to the same bfloat16
ones, and the gradient with respect to the input flows through the same cast. Outside
bfloat16 autocast, and for tensors that require gradients (autocast caches those itself),
the layer is the plain ``nn.Linear``. A write through ``.data`` (peft's merge of adapters)
moves neither counter nor storage: whoever writes so calls ``forget_casts`` after it.
A deep copy or pickle of the model carries no copies (they are remade on use).
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CastOnceLinear", "cast_once", "cast_per_call", "forget_casts"]


class _Casts(dict[str, tuple[int, int, torch.Tensor]]):
    """A layer's bfloat16 copies by tensor name, with the version and storage they copy;
    copied or pickled empty (a copy's tensors are other tensors)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> _Casts:
        return _Casts()

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (_Casts, ())


class CastOnceLinear(nn.Linear):
    """An ``nn.Linear`` whose frozen tensors are cast to bfloat16 once under bfloat16
    autocast (module docstring); ``cast_once`` turns layers into it in place."""

    _casts: _Casts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        if not (
            torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.bfloat16
        ):
            return super().forward(x)
        bias = None if self.bias is None else self._bf16("bias", self.bias)
        return F.linear(x, self._bf16("weight", self.weight), bias)

    def _bf16(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` itself where autocast handles it (it requires gradients or is not
        float32), else its kept bfloat16 copy, made again if the tensor changed."""
        if tensor.requires_grad or tensor.dtype != torch.float32:
            return tensor
        key = (tensor._version, tensor.data_ptr())
        kept = self._casts.get(name)
        if kept is None or kept[:2] != key:
            with torch.no_grad():
                kept = (*key, tensor.to(torch.bfloat16))
            self._casts[name] = kept
        return kept[2]


def cast_once(model: nn.Module) -> nn.Module:
    """Turn every ``nn.Linear`` of ``model`` (its subclasses aside: they may compute
    otherwise) into a ``CastOnceLinear``, in place; returns ``model``. Idempotent."""
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = CastOnceLinear
            cast(CastOnceLinear, module)._casts = _Casts()
    return model


def cast_per_call(model: nn.Module) -> nn.Module:
    """Undo ``cast_once`` in place: the layers are plain ``nn.Linear`` again, whose frozen
    weights autocast casts at every product (the reference the kept casts are compared
    against, in tests and benchmarks/speed/autocast.py); returns ``model``."""
    for module in model.modules():
        if type(module) is CastOnceLinear:
            setattr(module, "__class__", nn.Linear)  # noqa: B010 - narrowed type
    return model


def forget_casts(model: nn.Module) -> None:
    """Drop every kept bfloat16 copy of ``model``'s layers (after a write through
    ``.data``, which ``CastOnceLinear`` cannot see)."""
    for module in model.modules():
        if isinstance(module, CastOnceLinear):
            module._casts.clear()
