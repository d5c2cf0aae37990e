"""How sampling and scoring feed their rows to the model: the plain path and the
shared-prefix component, one of which a policy is built with (``make_path``).

Both serve the same four calls of ``HFPolicy``:

    prefill(model, rows)        (KV cache or None, ids (U, W), mask): a generate call's
                                first inputs for its U distinct prompts
    shrink(...)                 the running batch rows to keep after a decode step (None: all)
    end(...)                    the call is over (rows kept for the next call)
    hidden(model, decoder, b)   the decoder's final hidden states (U, W, H) of a score batch

``PlainPath`` feeds every row whole, left-padded, in one batch: the reference the
tests compare the component against, and the path the tiny default runs (the demo's
numbers are the plain path's). ``SharedPath`` (``GenerationOptions``: ``share_prefix``,
``drop_finished``, ``reuse_cache``, ``prefix_block``, ``bucket_cost``) runs the tokens
rows share once, drops finished rows, continues kept caches and scores in buckets of
similar length; its numbers equal the plain path's within float rounding (a different
batch shape), its sampled tokens are the same, and with every switch off it is the plain
path bit for bit. The plans it follows over token rows (shared prefixes, buckets) are
``cairn.policies.rowplan``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from cairn.data.tokens import ScoreInputs, left_pad
from cairn.policies.kv import KeptCaches, keep_rows, plain_layers, weights_version
from cairn.policies.modelio import (
    TokenCount,
    cache_kwarg,
    checkpointing,
    output_cache,
    positions,
)
from cairn.policies.options import GenerationOptions
from cairn.policies.rowplan import (
    Past,
    Staged,
    by_past,
    common_prefix,
    partition,
    representatives,
    scored_tails,
    shared_runs,
    unpadded,
)

__all__ = ["KEPT_BLOCK_TOKENS", "PlainPath", "SharedPath", "make_path"]

#: The policy's next-token logits of a batch: (ids, attention mask, positions, cache) ->
#: (logits of each row's last position, the extended cache).
Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], tuple[torch.Tensor, Any]]

KEPT_BLOCK_TOKENS = 8192  # at most this many token columns of kept prefix blocks (``prefix_block``)


class PlainPath:
    """Every row whole, left-padded, one batch (the reference; module docstring)."""

    def __init__(
        self,
        options: GenerationOptions | None = None,
        pad_id: int = 0,
        device: str | torch.device = "cpu",
        tokens: TokenCount | None = None,
    ):
        self.options = options or GenerationOptions()
        self.pad_id = pad_id
        self.device = torch.device(device)
        self.tokens = tokens or TokenCount()

    def prefill(self, model: torch.nn.Module, rows: Sequence[Sequence[int]]) -> tuple:
        ids, attn = left_pad(rows, self.pad_id)
        return None, ids, attn

    def shrink(self, live: torch.Tensor, finish: list[str], *state: Any) -> torch.Tensor | None:
        return None

    def end(self, *state: Any) -> None:
        return None

    def before_score(self) -> None:
        return None

    def first_logits(
        self, step: Step, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """A generate call's first logits (U, V): ``step`` (the policy's next-token logits
        after feeding ``ids`` (U, W) after ``cache``) over the prompts' remaining tokens, in
        one batch; with the extended cache and its attention mask (U, C + W)."""
        logits, cache = step(ids, attn, pos, cache)
        return logits, cache, attn

    def hidden(
        self, model: torch.nn.Module, decoder: torch.nn.Module, batch: ScoreInputs
    ) -> torch.Tensor:
        contexts = unpadded(batch.input_ids, batch.attention_mask)
        out, _ = self.feed(decoder, None, contexts, {}, use_cache=False)
        hidden = out.last_hidden_state
        width = max(1, max(map(len, contexts)))
        return F.pad(hidden, (0, 0, width - hidden.shape[1], 0))

    def feed(
        self,
        module: torch.nn.Module,
        past: Past | None,
        segs: Sequence[Sequence[int]],
        kwargs: dict[str, Any],
        use_cache: bool,
    ) -> tuple[Any, torch.Tensor]:
        """``module``'s output for the token rows ``segs``, left-padded, each after the same
        row of ``past`` (None: from position 0), and the attention mask of all its columns."""
        ids, seg_attn = left_pad(segs, self.pad_id)
        ids, seg_attn = ids.to(self.device), seg_attn.to(self.device)
        cache = None
        if past is not None:
            cache, attn = past
            seg_attn = torch.cat([attn, seg_attn], dim=1)
        out = module(
            input_ids=ids,
            attention_mask=seg_attn,
            position_ids=positions(seg_attn)[:, seg_attn.shape[1] - ids.shape[1] :],
            use_cache=use_cache,
            **({cache_kwarg(module): cache} if cache is not None else {}),  # as generate's
            **kwargs,
        )
        self.tokens.add(sum(map(len, segs)))
        return out, seg_attn


class SharedPath(PlainPath):
    """The shared-prefix component (module docstring; ``GenerationOptions`` says what each
    switch does). ``kept``: the last generate call's rows (``reuse_cache``); ``blocks``: the
    shared prefix's kept blocks (``prefix_block``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.kept = KeptCaches()
        self.blocks = KeptCaches()
        self._next: KeptCaches | None = None  # the rows this generate call keeps

    # -- generation ---------------------------------------------------------------------
    def prefill(self, model: torch.nn.Module, rows: Sequence[Sequence[int]]) -> tuple:
        """Prompts that extend a row kept from the last call continue its cache
        (``reuse_cache``); else a prefix shared by every distinct prompt is prefilled once
        (``share_prefix``)."""
        reuse = self.options.reuse_cache
        self._next = KeptCaches(weights_version(model)) if reuse else None
        resumed = self._resume(rows, self._next.version) if self._next is not None else None
        return resumed or self.shared_prefix(
            model, rows, keep=1, blocks=self.kept_blocks(model), logits_to_keep=1
        )

    def shrink(
        self,
        live: torch.Tensor,
        finish: list[str],
        cache: Any = None,
        attn: torch.Tensor | None = None,
        prompts: Sequence[Sequence[int]] = (),
        out_ids: Sequence[list[int]] = (),
        select: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """With ``drop_finished``, the batch positions of the running rows once at least half
        of the batch is done (the dropped rows kept first, with ``reuse_cache``)."""
        keep = _running(live, finish) if self.options.drop_finished else None
        if keep is not None and self._next is not None:
            assert attn is not None
            gone = set(range(len(live))) - set(keep.tolist())
            keep_rows(self._next, cache, attn, live, gone, prompts, out_ids, select)
        return keep

    def end(
        self,
        cache: Any,
        attn: torch.Tensor,
        live: torch.Tensor,
        prompts: Sequence[Sequence[int]],
        out_ids: Sequence[list[int]],
        select: torch.Tensor | None,
    ) -> None:
        """Keep the rows still in the batch for the next call (``reuse_cache``)."""
        if self._next is not None:
            keep_rows(self._next, cache, attn, live, range(len(live)), prompts, out_ids, select)
            self.kept, self._next = self._next, None

    def before_score(self) -> None:
        if torch.is_grad_enabled():  # an update follows: the kept caches go stale (and cost memory)
            self.kept.clear()

    def _resume(self, rows: Sequence[Sequence[int]], version: object) -> tuple | None:
        """(cache, ids, mask) as ``shared_prefix`` gives them, continuing the rows kept by
        the last call (``reuse_cache``) that ``rows`` extend; None when none does or the
        weights have changed since."""
        if self.kept.version != version:
            self.kept.clear(version)
        keys = [self.kept.longest(r) for r in rows]
        if all(k is None for k in keys):
            return None
        cache, past = self.kept.batch(keys, self.device)
        ids, new = left_pad(
            [r[len(k or ()) :] for r, k in zip(rows, keys, strict=True)], self.pad_id
        )
        return cache, ids, torch.cat([past, new.to(self.device)], dim=1)

    def kept_blocks(self, model: torch.nn.Module) -> KeptCaches | None:
        """The kept prefix blocks (``prefix_block``) valid for ``model`` as it is now (its
        identity and weights), or None when off or while gradients are recorded."""
        if not self.options.prefix_block:  # options: prefix_block needs share_prefix
            return None
        if torch.is_grad_enabled():
            return None
        version = (id(model), weights_version(model))
        if self.blocks.version != version:
            self.blocks.clear(version)
        return self.blocks

    def first_logits(
        self, step: Step, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """As ``PlainPath.first_logits``, in buckets of similar length (``bucket_cost``, as
        ``partition`` splits a score batch) where that feeds less padding: a turn's prompts
        differ after what they share by tens to hundreds of tokens, and one left-padded
        batch feeds every row to the longest. Each bucket runs after its rows of ``cache``;
        the buckets' caches are then joined into one batch, a row's padding columns first
        (masked out: a row's positions follow its own mask, so its numbers are those of
        the one batch within float rounding)."""
        width = ids.shape[1]
        lengths = attn[:, attn.shape[1] - width :].sum(1).tolist()
        cost = self.options.bucket_cost
        joinable = plain_layers(cache) is not None  # a cache to continue, of plain layers
        buckets = partition(lengths, cost) if cost is not None and joinable else []
        if len(buckets) < 2:
            return super().first_logits(step, ids, attn, pos, cache)
        past = attn.shape[1] - width  # the cache's columns
        parts = []
        for bucket in buckets:
            w = max(lengths[i] for i in bucket)  # >= 1: a prompt's last token is always fed
            at = torch.tensor(bucket, device=attn.device)
            rows, mask = self._rows((cache, attn[:, :past]), bucket, alone=False)
            mask = torch.cat([mask, attn[at, attn.shape[1] - w :]], dim=1)
            cut = slice(width - w, width)
            logits, out = step(ids[at, cut], mask, pos[at, cut], rows)
            parts.append((bucket, logits, out, mask))
        return _joined(parts, past + width)

    # -- scoring ------------------------------------------------------------------------
    def hidden(
        self, model: torch.nn.Module, decoder: torch.nn.Module, batch: ScoreInputs
    ) -> torch.Tensor:
        """The decoder's final hidden states (U, W, H) of ``batch``'s U contexts, each after
        the tokens it shares with others (``share_prefix``; gradients reach them through the
        cache rows, summed over the contexts that attend to them), left-padded to W.

        With ``bucket_cost``, every stage and then the contexts' own tokens run in buckets
        of similar length (``partition``); their outputs are left-padded to W again, where
        nothing reads the padding.
        """
        cost = self.options.bucket_cost
        shares = self.options.share_prefix and not checkpointing(model)
        contexts = unpadded(batch.input_ids, batch.attention_mask)
        keep = scored_tails(batch) if shares else [len(c) for c in contexts]  # all: no stage
        staged = self._staged(decoder, contexts, keep, None, cost, {})
        tails = staged.tails(contexts)
        width = max(1, max(map(len, tails)))
        where = [staged.where[g] for g in staged.group]
        parts, order = [], []
        for us, after in self._batches(staged.pasts, where, list(map(len, tails)), cost):
            out, _ = self.feed(decoder, after, [tails[u] for u in us], {}, after is not None)
            hidden = out.last_hidden_state
            parts.append(F.pad(hidden, (0, 0, width - hidden.shape[1], 0)))
            order += us
        hidden = torch.cat(parts)
        if order != sorted(order):
            hidden = hidden[torch.tensor(order, device=self.device).argsort()]
        return hidden

    # -- the shared prefix --------------------------------------------------------------
    def shared_prefix(
        self,
        module: torch.nn.Module,
        rows: Sequence[Sequence[int]],
        keep: int | Sequence[int],
        blocks: KeptCaches | None = None,
        **kwargs: Any,
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """(KV cache or None, ids (U, W), attention mask (U, C + W)) to feed ``module`` (the
        model or its decoder; ``kwargs`` go to its forward) for the U token rows ``rows``,
        of which the last ``keep`` tokens (one count, or one per row) must be fed last.

        With ``share_prefix``, the tokens rows share go through ``module`` once per group
        of rows that share them, in the stages ``prefix_stages`` plans (``_staged``), and
        ``ids`` are the rows' remaining tokens, left-padded after the last stage's cache;
        the mask covers every stage's columns, padding included (the positions follow the
        mask). Attention to the shared keys is what the full forward computes, so only
        float rounding differs. Otherwise: no cache, the whole rows left-padded.
        """
        keeps = [keep] * len(rows) if isinstance(keep, int) else list(keep)
        staged = self._staged(module, rows, keeps, blocks, None, kwargs)
        ids, rest = left_pad(staged.tails(rows), self.pad_id)
        past = staged.pasts[0]
        if past is None:
            return None, ids, rest
        cache, attn = self._rows(past, [staged.where[g][1] for g in staged.group])
        return cache, ids, torch.cat([attn, rest.to(self.device)], dim=1)

    def _staged(
        self,
        module: torch.nn.Module,
        rows: Sequence[Sequence[int]],
        keeps: Sequence[int],
        blocks: KeptCaches | None,
        cost: int | None,
        kwargs: dict[str, Any],
    ) -> Staged:
        """Run the stages ``prefix_stages`` plans for ``rows`` (``keeps``: their last tokens
        to feed last) through ``module``: first the prefix every row begins with, as one row;
        then each group of rows that agree on all they may share (a GRPO group's prompt), as
        one row after it.

        ``cost`` (``bucket_cost``): a stage's rows run in buckets of similar length
        (``_batches``), each after its parents' rows of the cache that made them, so little
        padding is fed; None: one batch per stage, whose cache the next stage's rows repeat.
        ``blocks`` (generation, ``prefix_block``): the prefix of all rows runs in whole
        blocks, each kept there or taken from there (``_blocked_prefix``), then its rest.
        """
        staged = Staged(pasts=[None], where=[(0, 0)], group=[0] * len(rows), cut=[0])
        for new_group, new_cut in self.prefix_stages(rows, keeps, single=blocks is not None):
            reps = representatives(new_group)
            old = staged
            segs = [rows[r][old.cut[old.group[r]] : new_cut[g]] for g, r in enumerate(reps)]
            parent = [old.where[old.group[r]] for r in reps]
            staged = Staged(pasts=[], where=[(0, 0)] * len(reps), group=new_group, cut=new_cut)
            if old.pasts == [None] and blocks is not None and len(reps) == 1:  # all rows' prefix
                staged.pasts.append(self._blocked_prefix(module, segs[0], blocks, kwargs))
                continue
            for gs, after in self._batches(old.pasts, parent, list(map(len, segs)), cost):
                staged.pasts.append(self._extend(module, after, [segs[g] for g in gs], kwargs))
                for j, g in enumerate(gs):
                    staged.where[g] = (len(staged.pasts) - 1, j)
        return staged

    def _extend(
        self,
        module: torch.nn.Module,
        past: Past | None,
        segs: list[Sequence[int]],
        kwargs: dict[str, Any],
    ) -> Past:
        """Run the token rows ``segs`` through ``module``, each after the same row of
        ``past`` (None: from position 0): the extended cache and its attention mask."""
        out, attn = self.feed(module, past, segs, kwargs, use_cache=True)
        return output_cache(out), attn

    def _rows(self, past: Past, index: list[int], alone: bool = True) -> Past:
        """Rows ``index`` of ``past``. ``alone``: nothing else continues ``past``, whose cache
        is reordered in place (the next forward appends to it); else a new cache of plain
        layers (``_batches`` keeps others alone), so that ``past`` stays as it is and
        gradients flow back to it."""
        cache, attn = past
        if alone and index == list(range(attn.shape[0])):
            return past
        at = torch.tensor(index, device=self.device)
        if alone:
            cache.reorder_cache(at)
            return cache, attn[at]
        from transformers import DynamicCache

        layers = plain_layers(cache)
        assert layers is not None, "only plain caches are continued by several batches"
        rows = DynamicCache()
        for i, layer in enumerate(layers):
            rows.update(layer.keys.index_select(0, at), layer.values.index_select(0, at), i)
        return rows, attn[at]

    def _batches(
        self,
        pasts: list[Past | None],
        where: Sequence[tuple[int, int]],
        lengths: Sequence[int],
        cost: int | None,
    ) -> Iterator[tuple[list[int], Past | None]]:
        """The batches that feed items of ``lengths`` tokens, each item after row
        ``where[i] = (p, j)`` of ``pasts[p]``: (the items, their parents' cache rows, None
        from position 0). The items after one cache are split by ``partition`` with
        ``cost`` (``bucket_cost``), or kept in one batch (``cost`` None, or a cache that can
        only be reordered in place)."""
        for p, members in by_past(where).items():
            past = pasts[p]
            if cost is None or (past is not None and plain_layers(past[0]) is None):
                buckets = [list(range(len(members)))]
            else:
                buckets = partition([lengths[i] for i in members], cost)
            for bucket in buckets:
                items = [members[i] for i in bucket]
                index = [where[i][1] for i in items]
                yield items, None if past is None else self._rows(past, index, len(buckets) == 1)

    def _blocked_prefix(
        self,
        module: torch.nn.Module,
        seg: Sequence[int],
        blocks: KeptCaches,
        kwargs: dict[str, Any],
    ) -> Past:
        """(cache, mask) of the one row ``seg`` (from position 0): its longest run of whole
        ``prefix_block``-token blocks found in ``blocks``, then each further whole block,
        kept there, then the rest."""
        size = self.options.prefix_block
        ends = range(size, len(seg) + 1, size)  # where each whole block ends
        done = max((n for n in ends if tuple(seg[:n]) in blocks.rows), default=0)
        past = blocks.batch([tuple(seg[:done])], self.device) if done else None
        for n in range(done + size, len(seg) + 1, size):
            past = self._extend(module, past, [seg[n - size : n]], kwargs)
            if sum(map(len, blocks.rows)) + n > KEPT_BLOCK_TOKENS:
                blocks.clear(blocks.version)  # bounded memory: start over
            blocks.keep(past[0], past[1], 0, seg[:n])
        rest = seg[len(seg) - len(seg) % size :]
        if rest:
            past = self._extend(module, past, [rest], kwargs)
        assert past is not None  # seg is not empty
        return past

    def prefix_stages(
        self, rows: Sequence[Sequence[int]], keep: Sequence[int], single: bool = False
    ) -> list[tuple[list[int], list[int]]]:
        """The stages ``shared_prefix`` runs before the rows' own tokens, each as (the group
        of every row, the tokens each group's rows share, counted from position 0): first
        the prefix of all U rows, then the groups of rows whose shareable parts (all but
        their last ``keep`` tokens) begin alike, each group sharing the tokens that save the
        most (``shared_runs``: a GRPO group's equal prompts share all of them, the turns of
        one task their instruction and question). A stage runs only when it saves at least
        ``min_shared_prefix`` tokens; none without ``share_prefix`` or under 2 rows
        (``single``: 1 row has the first stage too, to use kept blocks).
        """
        least = self.options.min_shared_prefix
        if not self.options.share_prefix or len(rows) < (1 if single else 2):
            return []
        limits = [max(0, len(r) - k) for r, k in zip(rows, keep, strict=True)]
        stages = []
        everyone = min(common_prefix(rows), min(limits))
        if everyone >= least:
            stages.append(([0] * len(rows), [everyone]))
        else:
            everyone = 0
        group, cut = shared_runs([r[:n] for r, n in zip(rows, limits, strict=True)], everyone)
        # each group's tokens after ``everyone`` run once instead of once per row
        saved = sum(cut[g] - everyone for g in group) - sum(c - everyone for c in cut)
        if saved >= least:
            stages.append((group, cut))
        return stages


def make_path(
    options: GenerationOptions, pad_id: int, device: torch.device, tokens: TokenCount
) -> PlainPath:
    """The plain path when no sharing or caching is on, else the shared-prefix component."""
    cls = PlainPath if options.plain else SharedPath
    return cls(options, pad_id, device, tokens)


def _joined(
    parts: list[tuple[list[int], torch.Tensor, Any, torch.Tensor]], width: int
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """(logits, cache, attention mask) of the rows of every bucket of ``parts`` ((rows,
    logits, cache, mask) each) as one batch in row order, each row left-padded with masked
    columns to ``width``."""
    from transformers import DynamicCache

    at = torch.tensor([i for rows, *_ in parts for i in rows]).argsort()
    at = at.to(parts[0][1].device)
    logits = torch.cat([lg for _, lg, _, _ in parts])[at]
    attn = torch.cat([F.pad(m, (width - m.shape[1], 0)) for *_, m in parts])[at]
    layers = [plain_layers(cache) for _, _, cache, _ in parts]
    cache = DynamicCache()
    for i in range(len(layers[0] or [])):
        keys, values = [], []
        for part in layers:
            assert part is not None  # a model's output cache: plain layers, as its input
            k, v = part[i].keys, part[i].values
            keys.append(F.pad(k, (0, 0, width - k.shape[2], 0)))
            values.append(F.pad(v, (0, 0, width - v.shape[2], 0)))
        cache.update(torch.cat(keys)[at], torch.cat(values)[at], i)
    return logits, cache, attn


def _running(live: torch.Tensor, finish: list[str]) -> torch.Tensor | None:
    """Batch positions of the running rows when at least half of the batch is done (and
    some row still runs), else None (keep the batch as it is)."""
    running = [j for j, i in enumerate(live.tolist()) if not finish[i]]
    if not running or 2 * len(running) > len(live):
        return None
    return torch.tensor(running, dtype=torch.long)
