"""The transformers backend: batched sampling with a KV cache, and teacher-forced scoring.

Every model is an ``AutoModelForCausalLM``. Prompts are left-padded so that the last
prompt token of every row sits in the same column; position ids follow the attention
mask, so a row's numbers do not depend on how much padding its batch needed. Scoring
uses the same layout with the action appended, which makes the trainer's log-probs agree
with the sampler's (tested with allclose).

Constrained decoding (``choices``): each row may be restricted to a list of admissible
action strings. The policy is then the softmax renormalised over the tokens that continue
an admissible string, and the ids allowed at every generated position are returned, so
that scoring applies the very same restriction (ratio = 1 before the first update).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from inspect import signature
from typing import Any

import torch
import torch.nn.functional as F

from cairn.data.tokens import ScoreInputs, left_pad
from cairn.losses import entropy_from_logits, logprobs_from_logits
from cairn.losses.logprobs import logprobs_from_hidden
from cairn.policies.kv import KeptCaches, plain_layers, weights_version

__all__ = ["Generation", "HFPolicy", "end_token_ids"]

_END = -1  # trie key marking the end of a complete choice
KEPT_BLOCK_TOKENS = 8192  # at most this many token columns of kept prefix blocks (``prefix_block``)


@dataclass
class Generation:
    """One sampled completion. ``allowed[i]`` lists the ids token i was restricted to;
    ``entropies[i]`` is the entropy (nats) of the distribution token i was sampled from."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish: str  # "eos" | "stop" | "length" | "choice"
    allowed: list[list[int]] | None = None
    entropies: list[float] | None = None


def _positions(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


class _Trie:
    """Token trie of admissible strings: node -> {token id: child}, `_END` marks a full choice."""

    def __init__(self, sequences: Sequence[Sequence[int]]):
        self.root: dict = {}
        for seq in sequences:
            node = self.root
            for tok in seq:
                node = node.setdefault(tok, {})
            node[_END] = {}


class HFPolicy:
    """Sampling and scoring for any ``AutoModelForCausalLM`` and its tokenizer.

    ``drop_finished``: generation drops finished rows (and their KV-cache rows) from the
    batch once at least half of the running rows are done. The tokens sampled stay the
    same (the random draws are those of the full batch), but a smaller batch may change
    the last bits of the logits (BLAS blocking depends on the row count), so it is off by
    default and the tiny presets' runs stay bit-identical. ``score_chunk``: response
    positions per chunk of the output head in ``score`` (peak memory ~ score_chunk x V).

    ``share_prefix``: the tokens that all distinct prompts of a ``generate`` call (or all
    contexts of a ``score`` call) begin with go through the model once, as one row whose
    KV cache every row then attends to (``_shared_prefix``); real-model prompts open with
    the same instruction and demonstration (301 of sokoban_smol's ~530 tokens). The
    numbers equal the full forward's up to float rounding (a different batch shape), not
    bit for bit, so it is off by default like ``drop_finished``. ``min_shared_prefix``:
    shorter common prefixes are not worth the extra forward.

    ``reuse_cache``: generation keeps each row's KV cache (prompt and reply) until the next
    call, where a prompt that extends a kept row's tokens (an episode's next turn with its
    whole history, over the chat template) feeds only its new tokens (``cairn.policies.kv``:
    dropped when the weights change, and by a ``score`` with gradients, which an update
    follows). Float rounding differs as with ``share_prefix``.

    ``prefix_block``: with ``share_prefix``, generation runs the prefix all prompts share
    in blocks of this many tokens and keeps each whole block's keys and values until the
    weights change; a later call whose prompts begin with the same blocks (the instruction
    at every turn of a rollout) feeds only what follows them. A block is always computed
    from the same tokens after the same blocks, so a kept block equals a recomputed one bit
    for bit and the numbers do not depend on what earlier calls kept. 0: off.

    ``bucket_cost``: ``score`` feeds each stage of shared tokens, and then the contexts' own
    tokens, in buckets of similar length instead of one batch padded to the longest row
    (``_partition``: the fewest tokens fed, counting each further call as this many). The
    numbers differ from one batch's by float rounding only. None: one batch (off).
    """

    drop_finished: bool = False
    score_chunk: int = 1024
    share_prefix: bool = False
    min_shared_prefix: int = 16
    reuse_cache: bool = False
    prefix_block: int = 0
    bucket_cost: int | None = None

    def __init__(self, model: torch.nn.Module, tokenizer, device: str | torch.device = "cpu"):
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.eos_id = tokenizer.eos_token_id
        self.end_ids = end_token_ids(model, tokenizer)  # a sampled one ends the completion
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.forward_tokens = 0  # tokens pushed through the model (prefill + decode)
        self._encode = lru_cache(maxsize=65536)(self._encode_uncached)
        self._kept = KeptCaches()  # ``reuse_cache``: the last generate call's rows
        self._blocks = KeptCaches()  # ``prefix_block``: the shared prefix's kept blocks

    # -- text <-> ids ---------------------------------------------------------------------
    def _encode_uncached(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    @lru_cache(maxsize=4096)  # noqa: B019 - one policy per run; choices repeat every turn
    def _trie(self, choices: tuple[str, ...]) -> _Trie:
        return _Trie([self._encode(c) for c in choices])

    # -- sampling ---------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 32,
        stop: Sequence[str] = (),
        choices: Sequence[Sequence[str] | None] | None = None,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """Sample one completion per prompt (B rows), with a KV cache.

        Behaviour log-probs are those of the distribution sampled from: logits / temperature,
        restricted to ``choices`` where given (top-p truncation is not reflected in them).
        """
        if not prompts:
            return []
        n = len(prompts)
        tries = [self._trie(tuple(c)) if c else None for c in (choices or [None] * n)]
        nodes = [t.root if t else None for t in tries]
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        out_ent: list[list[float]] = [[] for _ in range(n)]
        out_allowed: list[list[list[int]]] = [[] for _ in range(n)]
        finish = [""] * n
        # Prefill each distinct prompt once (group members share their first prompt),
        # then expand logits and cache to one row per prompt.
        index: dict[tuple[int, ...], int] = {}
        rows = torch.tensor([index.setdefault(tuple(p), len(index)) for p in prompts])
        self.model.eval()
        # Prompts that extend a row kept from the last call continue its cache
        # (``reuse_cache``); else a prefix shared by every distinct prompt is prefilled
        # once (``share_prefix``).
        kept = KeptCaches(weights_version(self.model)) if self.reuse_cache else None
        resumed = self._resume(list(index), kept.version) if kept is not None else None
        cache, ids, attn = resumed or self._shared_prefix(
            self.model, list(index), keep=1, blocks=self._kept_blocks(), logits_to_keep=1
        )
        ids, attn, rows = ids.to(self.device), attn.to(self.device), rows.to(self.device)
        pos = _positions(attn)[:, attn.shape[1] - ids.shape[1] :]  # of the columns fed
        live = torch.arange(n)  # the output row of each batch row (all, until rows are dropped)
        unexpanded = rows if len(index) < n else None  # output row i is batch row rows[i]
        for step in range(max_new_tokens):
            out = self.model(
                input_ids=ids,
                attention_mask=attn,
                position_ids=pos,
                **{_cache_kwarg(self.model): cache},
                use_cache=True,
                logits_to_keep=1,  # prefill: the head runs on the last position only
            )
            self.forward_tokens += int(attn[:, -ids.shape[1] :].sum())
            cache = out.cache if hasattr(out, "cache") else out.past_key_values
            logits = out.logits[:, -1].float()
            if step == 0:
                logits = logits[rows]
            allowed = self._allowed([nodes[i] for i in live], [finish[i] for i in live])
            toks, lps, ents = self._sample(
                logits, allowed, temperature, top_p, greedy, generator, _Rows(live, n)
            )
            for j, i in enumerate(live.tolist()):
                if finish[i]:
                    continue
                tok = int(toks[j])
                out_ids[i].append(tok)
                out_lp[i].append(float(lps[j]))
                out_ent[i].append(float(ents[j]))
                if allowed[j] is not None:
                    out_allowed[i].append(allowed[j])
                finish[i] = self._advance(i, tok, nodes, out_ids[i], stop)
            if all(finish):
                break
            # The next batch: group members expanded from their shared prefill (step 0),
            # finished rows dropped once enough are done (``drop_finished``).
            select, unexpanded = unexpanded, None
            keep = self._running(live, finish) if self.drop_finished else None
            if keep is not None:
                if kept is not None:
                    gone = set(range(len(live))) - set(keep.tolist())
                    self._keep_rows(kept, cache, attn, live, gone, prompts, out_ids, select)
                keep = keep.to(self.device)
                live, toks = live[keep.cpu()], toks[keep]
                select = keep if select is None else select[keep]
            if select is not None:
                cache.reorder_cache(select)
                attn, pos = attn[select], pos[select]
            ids = toks.view(-1, 1).to(self.device)
            attn = torch.cat([attn, attn.new_ones((len(live), 1))], dim=1)
            pos = pos[:, -1:] + 1
        if kept is not None:
            rest = range(len(live))
            self._keep_rows(kept, cache, attn, live, rest, prompts, out_ids, unexpanded)
            self._kept = kept
        return [
            Generation(
                token_ids=out_ids[i],
                logprobs=out_lp[i],
                text=self._text(out_ids[i], stop),
                finish=finish[i] or "length",
                allowed=out_allowed[i] if tries[i] is not None else None,
                entropies=out_ent[i],
            )
            for i in range(n)
        ]

    def _resume(
        self, rows: Sequence[Sequence[int]], version: object
    ) -> tuple[Any, torch.Tensor, torch.Tensor] | None:
        """(cache, ids, mask) as ``_shared_prefix`` gives them, continuing the rows kept
        by the last call (``reuse_cache``) that ``rows`` extend; None when none does or
        the weights have changed since."""
        if self._kept.version != version:
            self._kept.clear(version)
        keys = [self._kept.longest(r) for r in rows]
        if all(k is None for k in keys):
            return None
        cache, past = self._kept.batch(keys, self.device)
        ids, new = left_pad(
            [r[len(k or ()) :] for r, k in zip(rows, keys, strict=True)], self.pad_id
        )
        return cache, ids, torch.cat([past, new.to(self.device)], dim=1)

    @staticmethod
    def _keep_rows(
        kept: KeptCaches,
        cache: Any,
        attn: torch.Tensor,
        live: torch.Tensor,
        batch_rows: Any,
        prompts: Sequence[Sequence[int]],
        out_ids: list[list[int]],
        select: torch.Tensor | None,
    ) -> None:
        """Keep rows ``batch_rows`` of the generation batch (output rows ``live``) in
        ``kept``: each holds its prompt and every sampled token but the last (never fed).
        ``select``: before the first expansion, output row i is cache row select[i]."""
        for j in batch_rows:
            i = int(live[j])
            if out_ids[i]:  # a row that sampled nothing fed nothing after its prompt
                row = int(select[i]) if select is not None else j
                kept.keep(cache, attn, row, [*prompts[i], *out_ids[i][:-1]])

    def _kept_blocks(self) -> KeptCaches | None:
        """The kept prefix blocks (``prefix_block``) valid for the model as it is now (its
        identity and weights), or None when off or while gradients are recorded."""
        if not (self.prefix_block and self.share_prefix) or torch.is_grad_enabled():
            return None
        version = (id(self.model), weights_version(self.model))
        if self._blocks.version != version:
            self._blocks.clear(version)
        return self._blocks

    def _shared_prefix(
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
        of rows that share them, in the stages ``_prefix_stages`` plans (``_staged``), and
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
    ) -> _Staged:
        """Run the stages ``_prefix_stages`` plans for ``rows`` (``keeps``: their last tokens
        to feed last) through ``module``: first the prefix every row begins with, as one row;
        then each group of rows that agree on all they may share (a GRPO group's prompt), as
        one row after it.

        ``cost`` (``bucket_cost``): a stage's rows run in buckets of similar length
        (``_batches``), each after its parents' rows of the cache that made them, so little
        padding is fed; None: one batch per stage, whose cache the next stage's rows repeat.
        ``blocks`` (generation, ``prefix_block``): the prefix of all rows runs in whole
        blocks, each kept there or taken from there (``_blocked_prefix``), then its rest.
        """
        staged = _Staged(pasts=[None], where=[(0, 0)], group=[0] * len(rows), cut=[0])
        for new_group, new_cut in self._prefix_stages(rows, keeps, single=blocks is not None):
            reps = _representatives(new_group)
            old = staged
            segs = [rows[r][old.cut[old.group[r]] : new_cut[g]] for g, r in enumerate(reps)]
            parent = [old.where[old.group[r]] for r in reps]
            staged = _Staged(pasts=[], where=[(0, 0)] * len(reps), group=new_group, cut=new_cut)
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
        past: tuple[Any, torch.Tensor] | None,
        segs: list[Sequence[int]],
        kwargs: dict[str, Any],
    ) -> tuple[Any, torch.Tensor]:
        """Run the token rows ``segs`` through ``module``, each after the same row of
        ``past`` (a cache and its attention mask; None: from position 0): the extended
        cache and its attention mask."""
        out, attn = self._feed(module, past, segs, kwargs, use_cache=True)
        return (out.cache if hasattr(out, "cache") else out.past_key_values), attn

    def _feed(
        self,
        module: torch.nn.Module,
        past: tuple[Any, torch.Tensor] | None,
        segs: Sequence[Sequence[int]],
        kwargs: dict[str, Any],
        use_cache: bool,
    ) -> tuple[Any, torch.Tensor]:
        """``module``'s output for the token rows ``segs``, left-padded, each after the same
        row of ``past`` (``_extend``), and the attention mask of all its columns."""
        ids, seg_attn = left_pad(segs, self.pad_id)
        ids, seg_attn = ids.to(self.device), seg_attn.to(self.device)
        cache = None
        if past is not None:
            cache, attn = past
            seg_attn = torch.cat([attn, seg_attn], dim=1)
        out = module(
            input_ids=ids,
            attention_mask=seg_attn,
            position_ids=_positions(seg_attn)[:, seg_attn.shape[1] - ids.shape[1] :],
            use_cache=use_cache,
            **({_cache_kwarg(module): cache} if cache is not None else {}),  # as generate's
            **kwargs,
        )
        self.forward_tokens += sum(map(len, segs))
        return out, seg_attn

    def _rows(
        self, past: tuple[Any, torch.Tensor], index: list[int], alone: bool = True
    ) -> tuple[Any, torch.Tensor]:
        """Rows ``index`` of ``past`` (a cache and its attention mask). ``alone``: nothing
        else continues ``past``, whose cache is reordered in place (the next forward appends
        to it); else a new cache of plain layers (``_batches`` keeps others alone), so that
        ``past`` stays as it is and gradients flow back to it."""
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
        pasts: list[tuple[Any, torch.Tensor] | None],
        where: Sequence[tuple[int, int]],
        lengths: Sequence[int],
        cost: int | None,
    ) -> Iterator[tuple[list[int], tuple[Any, torch.Tensor] | None]]:
        """The batches that feed items of ``lengths`` tokens, each item after row
        ``where[i] = (p, j)`` of ``pasts[p]``: (the items, their parents' cache rows, None
        from position 0). The items after one cache are split by ``_partition`` with
        ``cost`` (``bucket_cost``), or kept in one batch (``cost`` None, or a cache that can
        only be reordered in place)."""
        for p, members in _by_past(where).items():
            past = pasts[p]
            if cost is None or (past is not None and plain_layers(past[0]) is None):
                buckets = [list(range(len(members)))]
            else:
                buckets = _partition([lengths[i] for i in members], cost)
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
    ) -> tuple[Any, torch.Tensor]:
        """(cache, mask) of the one row ``seg`` (from position 0): its longest run of whole
        ``prefix_block``-token blocks found in ``blocks``, then each further whole block,
        kept there, then the rest."""
        size = self.prefix_block
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

    def _prefix_stages(
        self, rows: Sequence[Sequence[int]], keep: Sequence[int], single: bool = False
    ) -> list[tuple[list[int], list[int]]]:
        """The stages ``_shared_prefix`` runs before the rows' own tokens, each as (the
        group of every row, the tokens each group's rows share, counted from position 0):
        first the prefix of all U rows, then the groups of rows whose shareable parts (all
        but their last ``keep`` tokens) are equal. A stage runs only when it saves at
        least ``min_shared_prefix`` tokens; none without ``share_prefix`` or under 2 rows
        (``single``: 1 row has the first stage too, to use kept blocks).
        """
        if not self.share_prefix or len(rows) < (1 if single else 2):
            return []
        limits = [max(0, len(r) - k) for r, k in zip(rows, keep, strict=True)]
        stages = []
        everyone = min(_common_prefix(rows), min(limits))
        if everyone >= self.min_shared_prefix:
            stages.append(([0] * len(rows), [everyone]))
        else:
            everyone = 0
        index: dict[tuple[int, ...], int] = {}
        group = [
            index.setdefault(tuple(r[:n]), len(index)) for r, n in zip(rows, limits, strict=True)
        ]
        cut = [len(k) for k in index]
        saved = sum(limits) - sum(cut) - everyone * (len(rows) - len(cut))
        if saved >= self.min_shared_prefix:
            stages.append((group, cut))
        return stages

    @staticmethod
    def _running(live: torch.Tensor, finish: list[str]) -> torch.Tensor | None:
        """Batch positions of the running rows when at least half of the batch is done
        (and some row still runs), else None (keep the batch as it is)."""
        running = [j for j, i in enumerate(live.tolist()) if not finish[i]]
        if not running or 2 * len(running) > len(live):
            return None
        return torch.tensor(running, dtype=torch.long)

    def _allowed(self, nodes: list, finish: list[str]) -> list[list[int] | None]:
        """Ids each row may emit next (None = any); a finished row gets a dummy [pad]."""
        allowed: list[list[int] | None] = []
        for node, done in zip(nodes, finish, strict=True):
            if done:
                allowed.append([self.pad_id])
            elif node is None:
                allowed.append(None)
            else:
                ids = [k for k in node if k != _END]
                allowed.append([*ids, self.eos_id] if _END in node else ids)
        return allowed

    def _advance(self, i: int, tok: int, nodes: list, ids: list[int], stop: Sequence[str]) -> str:
        if nodes[i] is not None:
            if tok == self.eos_id:
                return "choice"
            nodes[i] = nodes[i][tok]
            return "choice" if list(nodes[i]) == [_END] else ""
        if tok in self.end_ids:
            return "eos"
        if stop and any(s in self.decode(ids[-8:]) for s in stop):
            return "stop"
        return ""

    def _text(self, ids: list[int], stop: Sequence[str]) -> str:
        text = self.decode(ids)
        for s in stop:
            if s in text:
                text = text[: text.index(s)]
        return text.strip()

    def _sample(
        self,
        logits: torch.Tensor,
        allowed: list[list[int] | None],
        temperature: float,
        top_p: float,
        greedy: bool,
        generator: torch.Generator | None,
        rows: _Rows | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens (B,), their log-probs (B,) and the entropies (B,) of the restricted,
        tempered softmax they were drawn from (before top-p truncation, like the log-probs).
        ``rows``: the B rows are these rows of a larger batch (finished rows dropped)."""
        if not greedy:
            logits = logits / temperature
        if any(a is not None for a in allowed):
            keep = torch.zeros_like(logits, dtype=torch.bool)
            for i, a in enumerate(allowed):
                if a is None:
                    keep[i] = True
                else:
                    keep[i, a] = True
            logits = logits.masked_fill(~keep, float("-inf"))
        logp = F.log_softmax(logits, dim=-1)
        entropy = -(logp.exp() * logp.masked_fill(torch.isinf(logp), 0.0)).sum(-1)  # (B,)
        if greedy:
            toks = logp.argmax(-1)
        else:
            probs = logp.exp()
            if top_p < 1.0:
                probs = _top_p_filter(probs, top_p)
            toks = _multinomial(probs, generator, rows)
        return toks, logp.gather(-1, toks[:, None]).squeeze(-1), entropy

    # -- scoring ----------------------------------------------------------------------------
    def score(
        self, batch: ScoreInputs, temperature: float = 1.0, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced log-probs (B, A) of the action tokens, with gradients, and entropy
        (both 0 where ``action_mask`` is False).

        One forward of the decoder per distinct context gives its final hidden states; the
        output head then runs on the response positions only (``batch.action_mask``),
        ``score_chunk`` of them at a time (``logprobs_from_hidden``), so no full-vocabulary
        logits of prompt positions are ever computed and the logits held at once are
        bounded. Models whose head is not a plain linear layer over the decoder's output
        (``_decoder_and_head``) take the whole-model path (``_score_logits``).
        """
        if torch.is_grad_enabled():  # an update follows: the kept caches go stale (and cost memory)
            self._kept.clear()
        split = _decoder_and_head(self.model)
        if split is None:
            return self._score_logits(batch, temperature, with_entropy)
        decoder, head = split
        hidden = self._hidden(decoder, batch)  # (U, W, H): W = L without a shared prefix
        mask = batch.action_mask.to(self.device)
        rows, cols = mask.nonzero(as_tuple=True)  # (N,) response positions
        # The logits at context column L - A + j predict action column j.
        at = hidden.shape[1] - mask.shape[1] + cols
        h = hidden[batch.context.to(self.device)[rows], at]  # (N, H)
        allowed = None if batch.allowed is None else batch.allowed.to(self.device)[rows, cols]
        lp, ent = logprobs_from_hidden(
            h, head, batch.actions.to(self.device)[rows, cols], allowed,
            temperature=temperature, chunk=self.score_chunk, with_entropy=with_entropy,
        )  # fmt: skip
        zeros = lp.new_zeros(mask.shape)  # (B, A)
        logp = zeros.index_put((rows, cols), lp)
        return logp, (zeros.index_put((rows, cols), ent) if ent is not None else None)

    def _hidden(self, decoder: torch.nn.Module, batch: ScoreInputs) -> torch.Tensor:
        """The decoder's final hidden states (U, W, H) of ``batch``'s U contexts, each after
        the tokens it shares with others (``share_prefix``; gradients reach them through the
        cache rows, summed over the contexts that attend to them), left-padded to W.

        With ``bucket_cost``, every stage and then the contexts' own tokens run in buckets
        of similar length (``_partition``); their outputs are left-padded to W again, where
        nothing reads the padding.
        """
        shares = self.share_prefix and not _checkpointing(self.model)
        contexts = _unpadded(batch.input_ids, batch.attention_mask)
        keep = _scored_tails(batch) if shares else [len(c) for c in contexts]  # all: no stage
        staged = self._staged(decoder, contexts, keep, None, self.bucket_cost, {})
        tails = staged.tails(contexts)
        width = max(1, max(map(len, tails)))
        where = [staged.where[g] for g in staged.group]
        parts, order = [], []
        for us, after in self._batches(
            staged.pasts, where, list(map(len, tails)), self.bucket_cost
        ):
            out, _ = self._feed(decoder, after, [tails[u] for u in us], {}, after is not None)
            hidden = out.last_hidden_state
            parts.append(F.pad(hidden, (0, 0, width - hidden.shape[1], 0)))
            order += us
        hidden = torch.cat(parts)
        if order != sorted(order):
            hidden = hidden[torch.tensor(order, device=self.device).argsort()]
        return hidden

    def _score_logits(
        self, batch: ScoreInputs, temperature: float, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``score`` through the whole model: logits (U, A, V) of every context's last A
        positions (``logits_to_keep``), gathered to the rows that share it."""
        attn = batch.attention_mask.to(self.device)
        a_width = batch.actions.shape[1]
        out = self.model(
            input_ids=batch.input_ids.to(self.device),
            attention_mask=attn,
            position_ids=_positions(attn),
            logits_to_keep=a_width,
            use_cache=False,
        )
        self.forward_tokens += int(attn.sum())
        logits = out.logits.float()[batch.context.to(self.device)] / temperature  # (B, A, V)
        actions = batch.actions.to(self.device)
        if batch.allowed is None:
            logp = logprobs_from_logits(logits, actions)
            return logp, entropy_from_logits(logits) if with_entropy else None
        allowed = batch.allowed.to(self.device)
        free = allowed[..., 0] < 0  # (B, A) unrestricted positions
        if not free.any():
            logp = logprobs_from_logits(logits, actions, allowed)
            return logp, entropy_from_logits(logits, allowed) if with_entropy else None
        # Mixed batch: give free positions a harmless restriction, then select per position.
        only_action = torch.full_like(allowed, -1)
        only_action[..., 0] = actions
        safe = torch.where(free[..., None], only_action, allowed)
        logp = torch.where(
            free, logprobs_from_logits(logits, actions), logprobs_from_logits(logits, actions, safe)
        )
        if not with_entropy:
            return logp, None
        ent = torch.where(free, entropy_from_logits(logits), entropy_from_logits(logits, safe))
        return logp, ent


def _cache_kwarg(model: torch.nn.Module) -> str:
    """The name the model's forward takes its KV cache under: ``cache`` from transformers
    5.2x on, ``past_key_values`` before (5.17, the GPU check's machine); a PEFT wrapper's
    base model decides."""
    return _cache_kwarg_of(type(_unwrapped(model)))


def _unwrapped(model: torch.nn.Module) -> Any:
    """A PEFT wrapper's base model, else ``model``."""
    base = getattr(model, "get_base_model", None)
    return base() if base is not None else model


_CACHE_KWARG: dict[Any, str] = {}  # model class -> ``_cache_kwarg_of``


def _cache_kwarg_of(cls: Any) -> str:
    """``_cache_kwarg`` of a model class (its forward's parameter name)."""
    if cls not in _CACHE_KWARG:
        names = signature(cls.forward).parameters
        _CACHE_KWARG[cls] = "cache" if "cache" in names else "past_key_values"
    return _CACHE_KWARG[cls]


def _checkpointing(model: torch.nn.Module) -> bool:
    """Whether the model recomputes activations in its backward (gradient checkpointing):
    a recomputed layer would append its keys to a shared cache twice."""
    base = _unwrapped(model)
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # new, old
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False


def _representatives(group: Sequence[int]) -> list[int]:
    """The first row of each group 0..K-1 of ``group`` (row -> group)."""
    first: dict[int, int] = {}
    for row, g in enumerate(group):
        first.setdefault(g, row)
    return [first[g] for g in range(len(first))]


@dataclass
class _Staged:
    """The prefix stages run so far (``HFPolicy._staged``): ``pasts``, the (cache, mask)
    of each batch the last stage ran (``[None]`` before any); ``where``, per group of that
    stage, its batch in ``pasts`` and its row there; ``group`` (row -> group) and ``cut``
    (per group: its tokens fed, from position 0)."""

    pasts: list[tuple[Any, torch.Tensor] | None]
    where: list[tuple[int, int]]
    group: list[int]
    cut: list[int]

    def tails(self, rows: Sequence[Sequence[int]]) -> list[Sequence[int]]:
        """Each row's tokens after its group's stages."""
        return [r[self.cut[g] :] for r, g in zip(rows, self.group, strict=True)]


def _by_past(where: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """The indices of ``where`` ((batch, row) pairs) by batch, batches in order."""
    out: dict[int, list[int]] = {}
    for i, (p, _) in enumerate(where):
        out.setdefault(p, []).append(i)
    return dict(sorted(out.items()))


def _partition(lengths: Sequence[int], cost: int) -> list[list[int]]:
    """The indices of ``lengths`` in buckets, longest rows first, that minimise the tokens
    fed when each bucket is left-padded to its longest row, plus ``cost`` tokens per bucket
    (what one more forward call is worth). Optimal among all partitions: some optimal one
    cuts the longest-first order into runs (swapping a shorter row into a bucket with a
    longer head never adds padding), and dynamic programming finds the best runs."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    best = [0] + [0] * len(order)  # best[k]: the cost of the first k rows of ``order``
    start = [0] * (len(order) + 1)  # where the last run of that best partition starts
    for end in range(1, len(order) + 1):
        costs = [best[k] + (end - k) * lengths[order[k]] + cost for k in range(end)]
        start[end] = min(range(end), key=costs.__getitem__)
        best[end] = costs[start[end]]
    runs: list[list[int]] = []
    end = len(order)
    while end:
        runs.insert(0, order[start[end] : end])
        end = start[end]
    return runs


def _scored_tails(batch: ScoreInputs) -> list[int]:
    """Per context of ``batch``, how many of its last positions give scored log-probs: the
    widest of its rows' spans from the first scored action column to the end (at least 1)."""
    mask = batch.action_mask
    width = mask.shape[1]
    first = torch.where(mask.any(1), mask.int().argmax(1), width)  # (B,) first scored column
    tails = torch.ones(batch.input_ids.shape[0], dtype=torch.long)
    tails.scatter_reduce_(0, batch.context.cpu(), (width - first).cpu(), reduce="amax")
    return tails.tolist()


def _common_prefix(rows: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all ``rows`` share: that of the lexicographically
    smallest and largest (rows between them share at least as much)."""
    keys = [tuple(r) for r in rows]
    low, high = min(keys), max(keys)
    for k, (a, b) in enumerate(zip(low, high, strict=False)):
        if a != b:
            return k
    return min(len(low), len(high))


def _unpadded(ids: torch.Tensor, attn: torch.Tensor) -> list[list[int]]:
    """The token rows of left-padded ``ids`` (U, L), without their padding."""
    lengths = attn.sum(-1).tolist()
    return [row[len(row) - n :] for row, n in zip(ids.tolist(), lengths, strict=True)]


# Config fields of models whose logits are not just the head applied to the decoder's
# output (Gemma 2's soft-capping, Cohere's scale, Granite's divisor): they keep the
# whole-model scoring path.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def _decoder_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
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


@dataclass
class _Rows:
    """Batch rows ``index`` (B,) of a batch of ``total`` rows."""

    index: torch.Tensor
    total: int


def _multinomial(
    probs: torch.Tensor, generator: torch.Generator | None, rows: _Rows | None
) -> torch.Tensor:
    """One draw per row of ``probs`` (B, V), as ``torch.multinomial(probs, 1)``.

    When the B rows are part of a larger batch, the draws are those the whole batch would
    get: torch draws one sample as argmax(p / q) with q ~ Exp(1) of p's shape (the
    Gumbel-max trick in exponential form), so q is drawn for all ``rows.total`` rows and
    the running rows' share of it used; the random stream, and so every later token, is
    the same as when no row was dropped.
    """
    if rows is None or len(rows.index) == rows.total:
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    q = probs.new_empty((rows.total, probs.shape[-1])).exponential_(1, generator=generator)
    return (probs / q[rows.index.to(probs.device)]).argmax(-1)


def end_token_ids(model: torch.nn.Module, tokenizer) -> frozenset[int]:
    """The ids that end a completion: the tokenizer's eos and every end token of the
    model's generation config (an int or a list: SmolLM2's ends a turn with <|im_end|>)."""
    listed = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = listed if isinstance(listed, list | tuple) else [listed]
    return frozenset(int(i) for i in [tokenizer.eos_token_id, *ids] if i is not None)


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail outside the smallest set of tokens whose mass reaches ``top_p``."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    cum = sorted_p.cumsum(-1)
    drop = cum - sorted_p > top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)
