"""The transformers backend: a plain sampler (prefill, decode loop) with a KV cache, and a
teacher-forced scorer.

Every model is an ``AutoModelForCausalLM``. Prompts are left-padded so that the last
prompt token of every row sits in the same column; position ids follow the attention
mask, so a row's numbers do not depend on how much padding its batch needed. Scoring
uses the same layout with the action appended, which makes the trainer's log-probs agree
with the sampler's (tested with allclose).

How rows reach the model is one component chosen when the policy is built
(``GenerationOptions``, ``cairn.policies.sharing``): the plain path, or the shared-prefix
component of pretrained models; nothing switches it afterwards (the policy's fields are
fixed: setting one raises). Constrained decoding (``choices``) is
``cairn.policies.constrained``: the ids allowed at every generated position are returned,
so that scoring applies the very same restriction (ratio = 1 before the first update).
How a token is drawn from its probabilities is ``cairn.policies.sampling``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F

from cairn.data.tokens import ScoreInputs
from cairn.losses import entropy_from_logits, logprobs_from_logits
from cairn.losses.logprobs import logprobs_from_hidden
from cairn.policies.casts import cast_once
from cairn.policies.constrained import Choices, ChoiceTrie, restrict
from cairn.policies.modelio import (
    TokenCount,
    cache_kwarg,
    decoder_and_head,
    dtype_of,
    float_head,
    output_cache,
    positions,
)
from cairn.policies.options import GenerationOptions
from cairn.policies.sampling import Rows, multinomial, top_p_filter
from cairn.policies.sharing import PlainPath, make_path

__all__ = ["Generation", "GenerationOptions", "HFPolicy", "end_token_ids"]

# Fixed when a policy is built (``HFPolicy.__setattr__``): the sharing path is built from
# the options, the model, the tokenizer and the device, so none of them may change after.
_FIXED = frozenset(
    {"model", "tokenizer", "device", "options", "sharing", "eos_id", "end_ids", "pad_id",
     "forward_tokens"}
)  # fmt: skip


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


@dataclass
class _Draw:
    """How a generate call draws each token."""

    temperature: float
    top_p: float
    greedy: bool
    generator: torch.Generator | None


@dataclass
class _Run:
    """What a generate call has sampled so far, per output row."""

    n: int
    ids: list[list[int]] = field(init=False)
    logprobs: list[list[float]] = field(init=False)
    entropies: list[list[float]] = field(init=False)
    allowed: list[list[list[int]]] = field(init=False)
    finish: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.ids, self.logprobs = [[] for _ in range(self.n)], [[] for _ in range(self.n)]
        self.entropies, self.allowed = [[] for _ in range(self.n)], [[] for _ in range(self.n)]
        self.finish = [""] * self.n


class HFPolicy:
    """Sampling and scoring for any ``AutoModelForCausalLM`` and its tokenizer.

    ``options`` (``GenerationOptions``) choose, once, how rows reach the model: the plain
    path (the default; the tiny default's) or the shared-prefix component
    (``cairn.policies.sharing``), the output head's chunk in ``score``, and bfloat16
    autocast of the decoder (sampling and scoring alike, so the behaviour log-probs and
    the first epoch's scores share one precision regime; the head runs in float32).
    ``sharing``: that component. ``forward_tokens``: tokens pushed through the model
    (prefill, decode and scoring). A policy over another model: ``with_model``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        device: str | torch.device = "cpu",
        options: GenerationOptions | None = None,
    ):
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.options = options or GenerationOptions()
        if self.options.autocast:
            cast_once(self.model)  # frozen weights cast to bfloat16 once, not at every call
        self.eos_id = tokenizer.eos_token_id
        self.end_ids = end_token_ids(model, tokenizer)  # a sampled one ends the completion
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._tokens = TokenCount()
        self.sharing: PlainPath = make_path(self.options, self.pad_id, self.device, self._tokens)
        self._encode = lru_cache(maxsize=65536)(self._encode_uncached)
        self._built = True

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIXED and self.__dict__.get("_built"):
            raise AttributeError(
                f"HFPolicy.{name} is fixed when the policy is built: pass "
                "HFPolicy(model, tokenizer, device, options=GenerationOptions(...)), or "
                "policy.with_model(model) for another model"
            )
        object.__setattr__(self, name, value)

    @property
    def forward_tokens(self) -> int:
        """Tokens pushed through the model so far (prefill, decode and scoring)."""
        return self._tokens.n

    def with_model(self, model: torch.nn.Module) -> HFPolicy:
        """A policy over ``model`` (e.g. the KL reference) with this one's tokenizer,
        device and options, and caches and a token count of its own."""
        return HFPolicy(model, self.tokenizer, self.device, self.options)

    def precision(self) -> AbstractContextManager[Any]:
        """The precision regime of every forward: bfloat16 autocast (``options.autocast``)
        or none."""
        if not self.options.autocast:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    # -- text <-> ids ---------------------------------------------------------------------
    def _encode_uncached(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    @lru_cache(maxsize=4096)  # noqa: B019 - one policy per run; choices repeat every turn
    def _trie(self, choices: tuple[str, ...]) -> ChoiceTrie:
        return ChoiceTrie([self._encode(c) for c in choices])

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
        rule = Choices.of(choices, n, self._trie, self.pad_id, self.eos_id)
        run = _Run(n)
        self.model.eval()
        with self.precision():
            self._decode(prompts, run, rule, _Draw(temperature, top_p, greedy, generator),
                         max_new_tokens, stop)  # fmt: skip
        return [
            Generation(
                token_ids=run.ids[i],
                logprobs=run.logprobs[i],
                text=self._text(run.ids[i], stop),
                finish=run.finish[i] or "length",
                allowed=run.allowed[i] if rule.restricted[i] else None,
                entropies=run.entropies[i],
            )
            for i in range(n)
        ]

    def _decode(
        self,
        prompts: Sequence[Sequence[int]],
        run: _Run,
        rule: Choices,
        draw: _Draw,
        max_new_tokens: int,
        stop: Sequence[str],
    ) -> None:
        """The decode loop: prefill each distinct prompt once (group members share their
        first prompt) and expand logits and cache to one row per prompt, then one token per
        row and step until every row is finished; ``sharing`` may drop finished rows."""
        n, dev = len(prompts), self.device
        index: dict[tuple[int, ...], int] = {}
        rows = torch.tensor([index.setdefault(tuple(p), len(index)) for p in prompts])
        cache, ids, attn = self.sharing.prefill(self.model, list(index))
        ids, attn, rows = ids.to(dev), attn.to(dev), rows.to(dev)
        pos = positions(attn)[:, attn.shape[1] - ids.shape[1] :]  # of the columns fed
        live = torch.arange(n)  # the output row of each batch row (all, until rows are dropped)
        unexpanded = rows if len(index) < n else None  # output row i is batch row rows[i]
        for step in range(max_new_tokens):
            if step == 0:
                logits, cache, attn = self.sharing.first_logits(
                    self._next_logits, ids, attn, pos, cache
                )
                logits = logits[rows]
            else:
                logits, cache = self._next_logits(ids, attn, pos, cache)
            allowed = rule.allowed(live.tolist(), run.finish)
            toks, lps, ents = self._sample(
                logits, allowed, draw.temperature, draw.top_p, draw.greedy, draw.generator,
                Rows(live, n),
            )  # fmt: skip
            self._record(run, rule, live, toks, (lps, ents, allowed), stop)
            if all(run.finish):
                break
            # The next batch: group members expanded from their shared prefill (step 0),
            # finished rows dropped once enough are done (``drop_finished``).
            select, unexpanded = unexpanded, None
            keep = self.sharing.shrink(live, run.finish, cache, attn, prompts, run.ids, select)
            if keep is not None:
                keep = keep.to(dev)
                live, toks = live[keep.cpu()], toks[keep]
                select = keep if select is None else select[keep]
            if select is not None:
                cache.reorder_cache(select)
                attn, pos = attn[select], pos[select]
            ids = toks.view(-1, 1).to(dev)
            attn = torch.cat([attn, attn.new_ones((len(live), 1))], dim=1)
            pos = pos[:, -1:] + 1
        self.sharing.end(cache, attn, live, prompts, run.ids, unexpanded)

    def _next_logits(
        self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        """Float logits (B, V) of the last position after feeding ``ids`` (B, W) after
        ``cache``, and the extended cache. The head runs on the last position only (at
        prefill too); under autocast it runs in float32 on the decoder's output."""
        split = decoder_and_head(self.model) if self.options.autocast else None
        if split is None:
            out = self.model(
                input_ids=ids,
                attention_mask=attn,
                position_ids=pos,
                **{cache_kwarg(self.model): cache},
                use_cache=True,
                logits_to_keep=1,  # prefill: the head runs on the last position only
            )
            logits = out.logits[:, -1].float()
        else:
            decoder, head = split
            out = decoder(
                input_ids=ids, attention_mask=attn, position_ids=pos,
                **{cache_kwarg(decoder): cache}, use_cache=True,
            )  # fmt: skip
            logits = float_head(head, out.last_hidden_state[:, -1])
        self._tokens.add(int(attn[:, -ids.shape[1] :].sum()))
        return logits, output_cache(out)

    def _record(
        self,
        run: _Run,
        rule: Choices,
        live: torch.Tensor,
        toks: torch.Tensor,
        drawn: tuple[torch.Tensor, torch.Tensor, list[list[int] | None]],
        stop: Sequence[str],
    ) -> None:
        """Append each running row's token, log-prob, entropy and allowed ids (``drawn``:
        per batch row) and mark the rows it finishes."""
        lps, ents, allowed = drawn
        for j, i in enumerate(live.tolist()):
            if run.finish[i]:
                continue
            tok = int(toks[j])
            run.ids[i].append(tok)
            run.logprobs[i].append(float(lps[j]))
            run.entropies[i].append(float(ents[j]))
            if allowed[j] is not None:
                run.allowed[i].append(allowed[j])
            run.finish[i] = self._finished(rule, i, tok, run.ids[i], stop)

    def _finished(
        self, rule: Choices, i: int, tok: int, ids: list[int], stop: Sequence[str]
    ) -> str:
        """Why row ``i`` is finished after sampling ``tok`` ("" while it runs)."""
        if rule.restricted[i]:
            return rule.advance(i, tok)
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
        rows: Rows | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens (B,), their log-probs (B,) and the entropies (B,) of the restricted,
        tempered softmax they were drawn from (before top-p truncation, like the log-probs).
        ``rows``: the B rows are these rows of a larger batch (finished rows dropped)."""
        if not greedy:
            logits = logits / temperature
        logits = restrict(logits, allowed)
        logp = F.log_softmax(logits, dim=-1)
        entropy = -(logp.exp() * logp.masked_fill(torch.isinf(logp), 0.0)).sum(-1)  # (B,)
        if greedy:
            toks = logp.argmax(-1)
        else:
            probs = logp.exp()
            if top_p < 1.0:
                probs = top_p_filter(probs, top_p)
            toks = multinomial(probs, generator, rows, self.options.inverse_cdf)
        return toks, logp.gather(-1, toks[:, None]).squeeze(-1), entropy

    # -- scoring ----------------------------------------------------------------------------
    def score(
        self, batch: ScoreInputs, temperature: float = 1.0, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced log-probs (B, A) of the action tokens, with gradients, and entropy
        (both 0 where ``action_mask`` is False).

        One forward of the decoder per distinct context gives its final hidden states
        (``sharing.hidden``); the output head then runs on the response positions only
        (``batch.action_mask``), ``options.score_chunk`` of them at a time
        (``logprobs_from_hidden``), so no full-vocabulary logits of prompt positions are
        ever computed and the logits held at once are bounded. Models whose head is not a
        plain linear layer over the decoder's output (``decoder_and_head``) take the
        whole-model path (``_score_logits``).
        """
        self.sharing.before_score()
        split = decoder_and_head(self.model)
        if split is None:
            with self.precision():
                return self._score_logits(batch, temperature, with_entropy)
        decoder, head = split
        with self.precision():
            hidden = self.sharing.hidden(self.model, decoder, batch)  # (U, W, H)
        mask = batch.action_mask.to(self.device)
        rows, cols = mask.nonzero(as_tuple=True)  # (N,) response positions
        # The logits at context column L - A + j predict action column j.
        at = hidden.shape[1] - mask.shape[1] + cols
        h = hidden[batch.context.to(self.device)[rows], at]  # (N, H)
        if self.options.autocast:  # the head in float32, as sampling runs it
            h = h.to(dtype_of(head, h.dtype))
        allowed = None if batch.allowed is None else batch.allowed.to(self.device)[rows, cols]
        lp, ent = logprobs_from_hidden(
            h, head, batch.actions.to(self.device)[rows, cols], allowed,
            temperature=temperature, chunk=self.options.score_chunk, with_entropy=with_entropy,
        )  # fmt: skip
        zeros = lp.new_zeros(mask.shape)  # (B, A)
        logp = zeros.index_put((rows, cols), lp)
        return logp, (zeros.index_put((rows, cols), ent) if ent is not None else None)

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
            position_ids=positions(attn),
            logits_to_keep=a_width,
            use_cache=False,
        )
        self._tokens.add(int(attn.sum()))
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
