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

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from cairn.data.tokens import ScoreInputs, left_pad
from cairn.losses import entropy_from_logits, logprobs_from_logits

__all__ = ["Generation", "HFPolicy", "end_token_ids"]

_END = -1  # trie key marking the end of a complete choice


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
    """Sampling and scoring for any ``AutoModelForCausalLM`` and its tokenizer."""

    def __init__(self, model: torch.nn.Module, tokenizer, device: str | torch.device = "cpu"):
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.eos_id = tokenizer.eos_token_id
        self.end_ids = end_token_ids(model, tokenizer)  # a sampled one ends the completion
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.forward_tokens = 0  # tokens pushed through the model (prefill + decode)
        self._encode = lru_cache(maxsize=65536)(self._encode_uncached)

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
        ids, attn = left_pad(list(index), self.pad_id)
        ids, attn, rows = ids.to(self.device), attn.to(self.device), rows.to(self.device)
        pos = _positions(attn)
        self.model.eval()
        cache = None
        for step in range(max_new_tokens):
            out = self.model(
                input_ids=ids, attention_mask=attn, position_ids=pos, cache=cache, use_cache=True
            )
            self.forward_tokens += int(attn[:, -ids.shape[1] :].sum())
            cache = out.cache if hasattr(out, "cache") else out.past_key_values
            logits = out.logits[:, -1].float()
            if step == 0:
                logits = logits[rows]
            allowed = self._allowed(nodes, finish)
            toks, lps, ents = self._sample(logits, allowed, temperature, top_p, greedy, generator)
            for i in range(n):
                if finish[i]:
                    continue
                tok = int(toks[i])
                out_ids[i].append(tok)
                out_lp[i].append(float(lps[i]))
                out_ent[i].append(float(ents[i]))
                if allowed[i] is not None:
                    out_allowed[i].append(allowed[i])
                finish[i] = self._advance(i, tok, nodes, out_ids[i], stop)
            if all(finish):
                break
            if step == 0 and len(index) < n:
                cache.reorder_cache(rows)
                attn, pos = attn[rows], pos[rows]
            ids = toks.view(n, 1).to(self.device)
            attn = torch.cat([attn, attn.new_ones((n, 1))], dim=1)
            pos = pos[:, -1:] + 1
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
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens (B,), their log-probs (B,) and the entropies (B,) of the restricted,
        tempered softmax they were drawn from (before top-p truncation, like the log-probs)."""
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
            toks = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        return toks, logp.gather(-1, toks[:, None]).squeeze(-1), entropy

    # -- scoring ----------------------------------------------------------------------------
    def score(
        self, batch: ScoreInputs, temperature: float = 1.0, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced log-probs (B, A) of the action tokens, with gradients, and entropy.

        One forward per distinct context; only the logits of its last A positions are
        computed (``logits_to_keep``) and gathered to the rows that share it.
        """
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
