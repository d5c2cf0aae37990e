"""Tokenizers built locally, with nothing downloaded.

A tiny model reads an env's closed vocabulary best one word per token: `word_tokenizer`
builds a word-level tokenizer from the env's `vocabulary()` plus the prompt template's
words. Open-text envs (no closed vocabulary) get `bpe_tokenizer`, a byte-level BPE trained
on sample text. Both are `PreTrainedTokenizerFast`, saved with every checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

__all__ = ["SPECIAL_TOKENS", "bpe_tokenizer", "word_tokenizer"]

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
