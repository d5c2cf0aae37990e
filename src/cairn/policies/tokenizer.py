"""Tokenizers built locally, with nothing downloaded.

A tiny model reads an env's closed vocabulary best one word per token: `word_tokenizer`
builds a word-level tokenizer from the env's `vocabulary()` plus the prompt template's
words. Open-text envs (no closed vocabulary) get `bpe_tokenizer`, a byte-level BPE trained
on sample text. `local_tokenizer` picks one for an env (the tiny default's tokenizer).
Both are `PreTrainedTokenizerFast`, saved with every checkpoint.

`chat_tokenizer` is the local stand-in for an instruction model's tokenizer: a byte-level
BPE trained on env text, ChatML control tokens (``<|im_start|>``, ``<|im_end|>`` = eos,
special: dropped when decoding), markup tokens kept in decoded text (``<think>``,
``<action>``, ``<tool_call>``, ``<tool_response>`` and their closing forms) and a Jinja
``chat_template`` (system / user / assistant / tool turns, assistant content rendered as
is, so reasoning inside ``<think>`` stays in later turns). Saved with
``save_pretrained`` it is a model directory's tokenizer like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from cairn.agent import TEMPLATE_WORDS, format_completion

if TYPE_CHECKING:
    from cairn.envs import TextEnv

__all__ = [
    "CHAT_MARKUP",
    "CHAT_SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "bpe_tokenizer",
    "chat_tokenizer",
    "local_tokenizer",
    "word_tokenizer",
]

SPECIAL_TOKENS = {"pad_token": "<pad>", "unk_token": "<unk>", "eos_token": "<eos>"}


def _wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)


def word_tokenizer(words: Iterable[str]) -> PreTrainedTokenizerFast:
    """One token per whitespace-separated word; words outside ``words`` map to ``<unk>``."""
    specials = list(SPECIAL_TOKENS.values())
    vocab: dict[str, int] = {s: i for i, s in enumerate(specials)}
    for w in sorted({w for text in words for w in text.split()}):
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()  # joins words with single spaces
    return _wrap(tok)


def bpe_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ``texts`` (every byte is covered, so nothing is unknown)."""
    tok = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return _wrap(tok)


#: ChatML control tokens: special, so decoding a completion drops them.
CHAT_SPECIAL_TOKENS = {"pad_token": "<pad>", "unk_token": "<unk>", "eos_token": "<|im_end|>"}
CHAT_CONTROL = ("<|im_start|>", "<|im_end|>")
#: Markup a completion or an observation may hold: one token each, kept when decoding.
CHAT_MARKUP = (
    "<think>", "</think>", "<action>", "</action>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
)  # fmt: skip
#: ChatML, as Qwen-style instruction models ship it: an optional system turn, then user and
#: assistant turns; a ``tool`` turn is a user turn wrapped in ``<tool_response>``. Assistant
#: content is rendered verbatim (no reasoning is stripped from earlier turns).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{{ '<|im_start|>user\n<tool_response>\n' + message['content']"
    " + '\n</tool_response><|im_end|>\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)  # fmt: skip


def chat_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE with ChatML tokens and ``CHAT_TEMPLATE``, trained on ``texts``.

    Pre-tokenisation splits at whitespace only (a space joins the word after it), so a
    compact observation word such as ``pu:wall`` can become one token. Deterministic: the
    same texts give the same vocabulary and merges.
    """
    tok = Tokenizer(models.BPE(unk_token=CHAT_SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r" ?\S+|\s+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [*dict.fromkeys([*CHAT_SPECIAL_TOKENS.values(), *CHAT_CONTROL])]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    roles = ("system\n", "user\n", "assistant\n")
    tok.train_from_iterator(sorted({*texts, *roles}), trainer=trainer)
    tok.add_tokens([AddedToken(m, special=False, normalized=False) for m in CHAT_MARKUP])
    out = PreTrainedTokenizerFast(
        tokenizer_object=tok, additional_special_tokens=[CHAT_CONTROL[0]], **CHAT_SPECIAL_TOKENS
    )
    out.chat_template = CHAT_TEMPLATE
    return out


def local_tokenizer(
    env: TextEnv,
    instruction: str,
    sample_seeds: int = 16,
    kind: str = "auto",
    vocab_size: int = 512,
    extra_words: Sequence[str] = (),
):
    """The tiny default's tokenizer, built here in well under a second.

    ``auto``: word-level over the env's closed vocabulary, else a BPE trained on sampled
    text; ``word`` / ``bpe`` force one; ``chat``: a BPE with ChatML tokens and a chat
    template (``chat_tokenizer``) trained on what the env produces: instructions,
    observations over ``sample_seeds`` episodes of random admissible actions, and those
    actions written as ``<think>``/``<action>`` and tool-call completions.
    """
    words = env.vocabulary()
    if kind == "word" or (kind == "auto" and words):
        return word_tokenizer([*words, instruction, *TEMPLATE_WORDS, *extra_words])
    texts = [instruction, " ".join(TEMPLATE_WORDS)]
    if extra_words:  # kept out of the texts when none, so existing tokenizers stay the same
        texts.append(" ".join(extra_words))
    for seed in range(sample_seeds):
        texts += _episode_text(env, seed, steps=4 if kind == "chat" else 0)
    if kind == "chat":
        return chat_tokenizer(texts, vocab_size)
    return bpe_tokenizer(texts, vocab_size)


def _episode_text(env: TextEnv, seed: int, steps: int) -> list[str]:
    """Instruction, observations and actions of one episode of random admissible actions
    (seeded), the actions also as completions in every action format."""
    obs, info = env.reset(seed=seed)
    texts = [obs, env.instruction, " ".join(info.get("admissible") or [])]
    rng = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        actions = info.get("admissible") or []
        if not actions:
            break
        action = actions[int(torch.randint(len(actions), (1,), generator=rng))]
        texts += [format_completion(action, think=obs.split(" ", 1)[0])]
        obs, _, term, trunc, info = env.step(action)
        texts.append(obs)
        if term or trunc:
            break
    return texts
