"""Where a pretrained policy's weights are read from: ``load_weights`` (any model by
``from_pretrained``; a checkpoint's from local safetensors files only) inside
``offline`` (the hub switched off while a run's checkpoint loads)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from transformers import AutoModelForCausalLM

from cairn.policies.remote import NO_REMOTE_CODE

__all__ = ["load_weights", "offline"]


@contextmanager
def offline(on: bool) -> Iterator[None]:
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


def load_weights(source: Path | str, checkpoint: Path | None, **options: Any) -> Any:
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
