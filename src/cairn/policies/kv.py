"""Key/value caches kept between ``HFPolicy.generate`` calls (``HFPolicy.reuse_cache``).

With a full history over the chat template, an episode's next prompt is its previous
prompt, the reply it sampled, and the new observation: the keys and values of everything
but the new observation were computed in the previous call. ``KeptCaches`` holds them per
sequence of token ids, one row each (the rows of the last call that kept any), and builds
the batch cache that continues them:

    keep(cache, attn, j, seq)   row j of a generation batch, whose first len(seq) attended
                                columns hold the tokens ``seq``
    longest(row)                the longest kept sequence that ``row`` strictly extends
    batch(keys)                 (cache, mask): the kept rows of ``keys`` left-padded to one
                                width (no entry: an empty row)

``keep_rows`` keeps the chosen rows of a generation batch, each under its prompt and
sampled tokens.

Keys and values depend on the weights: every entry is dropped when ``weights_version``
changes (an optimizer step or a loaded state dict bumps a parameter's version counter).
Only caches of plain layers (a key and a value tensor per layer, no sliding window) are
kept; any other cache class keeps nothing, and generation then prefills every prompt whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import DynamicCache

__all__ = ["KeptCaches", "keep_rows", "plain_layers", "weights_version"]

Row = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (heads, T, dim)


def weights_version(model: torch.nn.Module) -> int:
    """A number that changes whenever a parameter is changed in place (PyTorch's version
    counter of each tensor: optimizer steps, ``load_state_dict``, ``copy_``)."""
    return sum(p._version for p in model.parameters())


def plain_layers(cache: object) -> list[Any] | None:
    """The layers of ``cache`` when each is a plain key and value tensor (no sliding
    window), else None."""
    layers = getattr(cache, "layers", None)
    if not layers or any(getattr(layer, "is_sliding", False) for layer in layers):
        return None
    if not all(torch.is_tensor(getattr(layer, "keys", None)) for layer in layers):
        return None
    return list(layers)


class KeptCaches:
    """The kept rows (module docstring)."""

    def __init__(self, version: object = None) -> None:
        self.rows: dict[tuple[int, ...], Row] = {}
        self.version = version  # what the rows were made by (``weights_version``, ...)

    def clear(self, version: object = None) -> None:
        self.rows.clear()
        self.version = version

    def longest(self, row: Sequence[int]) -> tuple[int, ...] | None:
        """The longest kept sequence that ``row`` begins with and goes past (at least one
        token of ``row`` is left to feed, whose logits the next token is drawn from)."""
        for n in sorted({len(k) for k in self.rows}, reverse=True):
            if n < len(row):
                key = tuple(row[:n])
                if key in self.rows:
                    return key
        return None

    def keep(self, cache: object, attn: torch.Tensor, j: int, seq: Sequence[int]) -> None:
        """Keep row ``j`` of ``cache`` for the tokens ``seq``: the first ``len(seq)``
        columns that ``attn`` (the batch's attention mask) attends to."""
        layers = plain_layers(cache)
        if layers is None or not seq:
            return
        cols = attn[j].nonzero().squeeze(1)[: len(seq)]
        if len(cols) < len(seq):
            return
        self.rows[tuple(seq)] = [
            (layer.keys[j].index_select(1, cols), layer.values[j].index_select(1, cols))
            for layer in layers
        ]

    def batch(
        self, keys: Sequence[tuple[int, ...] | None], device: torch.device
    ) -> tuple[DynamicCache, torch.Tensor]:
        """(DynamicCache, attention mask (U, T)) of the kept rows ``keys`` (None: none),
        left-padded to the longest (T columns; padding masked out)."""
        from transformers import DynamicCache

        width = max(len(k) for k in keys if k is not None)
        some = self.rows[next(k for k in keys if k is not None)]
        mask = torch.zeros((len(keys), width), dtype=torch.long, device=device)
        cache = DynamicCache()
        for layer, (k0, v0) in enumerate(some):
            k = k0.new_zeros((len(keys), k0.shape[0], width, k0.shape[2]))
            v = v0.new_zeros((len(keys), v0.shape[0], width, v0.shape[2]))
            for i, key in enumerate(keys):
                if key is not None:
                    keys_i, values_i = self.rows[key][layer]
                    k[i, :, width - len(key) :] = keys_i
                    v[i, :, width - len(key) :] = values_i
                    mask[i, width - len(key) :] = 1
            cache.update(k, v, layer)
        return cache, mask


def keep_rows(
    kept: KeptCaches,
    cache: Any,
    attn: torch.Tensor,
    live: torch.Tensor,
    batch_rows: Any,
    prompts: Sequence[Sequence[int]],
    out_ids: Sequence[list[int]],
    select: torch.Tensor | None,
) -> None:
    """Keep rows ``batch_rows`` of the generation batch (output rows ``live``) in ``kept``:
    each holds its prompt and every sampled token but the last (never fed). ``select``:
    before the first expansion, output row i is cache row select[i]."""
    for j in batch_rows:
        i = int(live[j])
        if out_ids[i]:  # a row that sampled nothing fed nothing after its prompt
            row = int(select[i]) if select is not None else j
            kept.keep(cache, attn, row, [*prompts[i], *out_ids[i][:-1]])
