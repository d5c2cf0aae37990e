"""ProxMO: proximity-based multi-level credit assignment (arXiv 2602.19225).

Episode level, Polarized Signal Controller (PSC):
    success_i = the ``success`` column where present, else R_i > 0.5
    p         = success rate of i's group (over episodes)
    f_i       = sigmoid((1 - p)^alpha) - 0.5      if success_i   (amplifies rare successes)
              = sigmoid(-(p^alpha)) - 0.5          otherwise      (damps failures of easy groups)
    w_i       = 1 + beta * f_i
    A_E(i)    = GRPO over episode returns (``episode_norm``, default mean_std)
Step level, Proximity-based Soft Aggregation (PSA):
    x_t       = TF-IDF vector of str(anchor) (scikit-learn, max 1024 features, L2-normalised),
                or row t of ``features`` (N, d), L2-normalised
    s_tj      = cos(x_t, x_j) for the rows j of t's group (t itself included)
    omega_tj  = softmax_j(s_tj / tau)
    b_t       = sum_j omega_tj G_j,     A_S(t) = G_t - b_t,     G_t = sum_k gamma^k r_{t+k}
Combined: A = w * A_E + step_weight * A_S.

Limits: beta = 0 and tau -> 0 give GRPO(mean_std) + GiGPO's mean-normalised step term
(rows with identical vectors share the weight; distinct anchors must have distinct
vectors); tau -> inf gives the group's mean G as baseline.

TF-IDF is fitted once per batch on the batch's distinct anchor texts (so a state visited
often does not dominate the IDF); words are ``\\b\\w+\\b`` tokens, lower-cased, single
characters kept. Fitting per batch makes results depend on the other groups' texts, so
concatenating batches is exact only with ``features``. Anchors with no word token (e.g. a
grid drawn in symbols only) need ``tokens="cells"`` — each whitespace token tagged with its
position, so two grids are close when many cells hold the same symbol — or ``features``.

Shapes: batch of N rows -> (N,) float64. Terms: ``A_E``, ``A_S``, ``w``, ``G``, each (N,).
Cost: one (n_g, n_g) similarity matrix per group (a loop over groups, not rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cairn.advantages._registry import (
    DISCOUNT,
    NORM,
    WEIGHT,
    choice,
    matrix_or_none,
    real,
    register_terms,
)
from cairn.advantages.episodes import Episodes
from cairn.advantages.segments import Norm, factorize, normalize_in_segments, segment_mean
from cairn.data import StepBatch

__all__ = ["anchor_tfidf", "proxmo", "psc_weight", "soft_baseline"]

CHECKS = {
    "tau": real(0.0, lo_open=True),
    "alpha": real(0.0),
    "beta": real(0.0),
    "gamma": DISCOUNT,
    "step_weight": WEIGHT,
    "episode_norm": NORM,
    "features": matrix_or_none(),
    "tokens": choice("words", "cells"),
}
TOKENS = r"(?u)\b\w+\b"
MAX_FEATURES = 1024


def psc_weight(success: np.ndarray, p: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """PSC weight ``w = 1 + beta*f`` per episode from its outcome and group success rate, (E,)."""
    sigmoid = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
    f = np.where(success, sigmoid((1.0 - p) ** alpha), sigmoid(-(p**alpha))) - 0.5
    return 1.0 + beta * f


def _success(batch: StepBatch, ep: Episodes, R: np.ndarray) -> np.ndarray:
    """(E,) bool outcome: the ``success`` column (equal on an episode's rows) or R > 0.5."""
    if "success" not in batch:
        return R > 0.5
    wins = np.bincount(ep.row, weights=batch.success.astype(np.float64), minlength=ep.n)
    if np.any((wins != 0) & (wins != ep.length)):
        raise ValueError("column 'success' differs between rows of one episode")
    return wins > 0


def _cells(text: str) -> list[str]:
    """Whitespace tokens tagged with their position: ``"# @ _"`` -> ``["0:#", "1:@", "2:_"]``."""
    return [f"{i}:{tok}" for i, tok in enumerate(text.split())]


def anchor_tfidf(docs: list[str], tokens: str = "words") -> Any:
    """(n, F) sparse L2-normalised TF-IDF rows of ``docs`` (the vectors PSA compares)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    if tokens == "cells":  # grids: two states are close when many cells hold the same symbol
        vectorizer = TfidfVectorizer(analyzer=_cells, lowercase=False, max_features=MAX_FEATURES)
    else:
        vectorizer = TfidfVectorizer(token_pattern=TOKENS, max_features=MAX_FEATURES)
    try:
        return vectorizer.fit_transform(docs).tocsr()
    except ValueError as err:  # empty vocabulary
        raise ValueError(
            f"proxmo: TF-IDF found no word token in the anchor texts ({err}); "
            "pass tokens='cells' (grids) or features="
        ) from err


def _tfidf(anchor: np.ndarray, tokens: str = "words") -> Any:
    """(N, F) sparse CSR TF-IDF rows, fitted on the distinct anchor texts."""
    codes, n = factorize(anchor)
    rep = np.empty(n, dtype=np.int64)
    rep[codes] = np.arange(len(codes))
    texts = np.fromiter((str(a) for a in anchor[rep]), object, n)
    text_codes, n_texts = factorize(texts)  # anchors with equal str() are one document
    docs = np.empty(n_texts, dtype=object)
    docs[text_codes] = texts
    return anchor_tfidf(docs.tolist(), tokens)[text_codes[codes]]


def _embeddings(features: ArrayLike, n_rows: int) -> np.ndarray:
    X = np.asarray(features, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] != n_rows:
        raise ValueError(f"proxmo: features must have shape ({n_rows}, d), got {X.shape}")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(norms > 0, norms, 1.0)


def soft_baseline(
    X: Any, G: np.ndarray, group: np.ndarray, n_groups: int, tau: float
) -> np.ndarray:
    """PSA baseline ``b_t = sum_j softmax_j(cos(x_t, x_j)/tau) G_j`` over t's group, (N,).

    ``X``: (N, d) L2-normalised rows, dense or scipy sparse; ``group``: (N,) dense ids.
    """
    order = np.argsort(group, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(group, minlength=n_groups))])
    Xs, Gs = X[order], G[order]
    b = np.empty(len(G), dtype=np.float64)
    for g in range(n_groups):
        lo, hi = bounds[g], bounds[g + 1]
        Xg = Xs[lo:hi]
        S = Xg @ Xg.T  # (n_g, n_g) cosine similarities
        S = (S.toarray() if hasattr(S, "toarray") else np.asarray(S)) / tau
        W = np.exp(S - S.max(axis=1, keepdims=True))
        b[lo:hi] = (W @ Gs[lo:hi]) / W.sum(axis=1)
    out = np.empty_like(b)
    out[order] = b
    return out


@register_terms("proxmo", checks=CHECKS, term_names=("A_E", "A_S", "w", "G"))
def proxmo(
    batch: StepBatch,
    *,
    tau: float = 0.1,
    alpha: float = 4.0,
    beta: float = 0.1,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    episode_norm: Norm = "mean_std",
    features: ArrayLike | None = None,
    tokens: str = "words",
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """ProxMO advantage ``w*A_E + step_weight*A_S`` per step, (N,) float64.

    Registered with its terms: ``estimate_terms`` returns ``(A, {"A_E", "A_S", "w", "G"})``,
    all (N,); ``proxmo(batch, ...)`` and ``estimate("proxmo", ...)`` return ``A`` alone.
    """
    ep = Episodes.of(batch)
    R = ep.returns(batch.reward)  # (E,)
    A_E = normalize_in_segments(R, ep.group, ep.n_groups, episode_norm)  # (E,)
    success = _success(batch, ep, R)  # (E,)
    p = segment_mean(success.astype(np.float64), ep.group, ep.n_groups)[ep.group]
    w = psc_weight(success, p, alpha, beta)  # (E,)
    G = ep.discounted_cumsum(batch.reward, gamma)  # (N,)
    if len(G) == 0:
        X = np.zeros((0, 1))
    else:
        X = _tfidf(batch.anchor, tokens) if features is None else _embeddings(features, len(batch))
    A_S = G - soft_baseline(X, G, ep.row_group, ep.n_groups, tau)
    adv = (w * A_E)[ep.row] + step_weight * A_S
    return adv, {"A_E": A_E[ep.row], "A_S": A_S, "w": w[ep.row], "G": G}
