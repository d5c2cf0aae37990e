"""Constrained decoding: each row of a ``generate`` call may be restricted to a list of
admissible action strings (``info["admissible"]``).

The policy is then the softmax renormalised over the tokens that continue an admissible
string (``restrict``), and the ids allowed at every generated position are returned with
the sample, so that scoring applies the very same restriction (ratio = 1 before the first
update). A row's strings are held as a token trie (``ChoiceTrie``); ``Choices`` walks one
node per row as tokens are sampled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["END", "ChoiceTrie", "Choices", "restrict"]

END = -1  # trie key marking the end of a complete choice


class ChoiceTrie:
    """Token trie of admissible strings: node -> {token id: child}, ``END`` marks a full choice."""

    def __init__(self, sequences: Sequence[Sequence[int]]):
        self.root: dict = {}
        for seq in sequences:
            node = self.root
            for tok in seq:
                node = node.setdefault(tok, {})
            node[END] = {}


class Choices:
    """Where each row of one ``generate`` call stands in its trie (None: a free row).

    ``pad_id`` is what a finished row is restricted to (a dummy draw nobody reads);
    ``eos_id`` ends a row at a node where a complete choice ends.
    """

    def __init__(self, tries: Sequence[ChoiceTrie | None], pad_id: int, eos_id: int):
        self.restricted = [t is not None for t in tries]
        self.nodes: list[dict | None] = [t.root if t is not None else None for t in tries]
        self.pad_id, self.eos_id = pad_id, eos_id

    @classmethod
    def of(
        cls,
        choices: Sequence[Sequence[str] | None] | None,
        n: int,
        trie: Callable[[tuple[str, ...]], ChoiceTrie],
        pad_id: int,
        eos_id: int,
    ) -> Choices:
        """The rows' tries from ``choices`` (None or an empty list: free), built by ``trie``
        (the policy's cached tokenisation)."""
        rows = choices or [None] * n
        return cls([trie(tuple(c)) if c else None for c in rows], pad_id, eos_id)

    def allowed(self, rows: Sequence[int], finish: Sequence[str]) -> list[list[int] | None]:
        """Ids each of ``rows`` may emit next (None = any); a finished row gets [pad]."""
        out: list[list[int] | None] = []
        for i in rows:
            node = self.nodes[i]
            if finish[i]:
                out.append([self.pad_id])
            elif node is None:
                out.append(None)
            else:
                ids = [k for k in node if k != END]
                out.append([*ids, self.eos_id] if END in node else ids)
        return out

    def advance(self, i: int, tok: int) -> str:
        """Row ``i`` (restricted) sampled ``tok``: "choice" once a whole choice is written
        (eos at a complete choice, or a leaf), else ""."""
        node = self.nodes[i]
        assert node is not None, f"row {i} is not restricted"
        if tok == self.eos_id:
            return "choice"
        self.nodes[i] = node[tok]
        return "choice" if list(node[tok]) == [END] else ""


def restrict(logits: torch.Tensor, allowed: Sequence[list[int] | None]) -> torch.Tensor:
    """``logits`` (B, V) with every id outside row b's ``allowed[b]`` set to -inf (None:
    the row is free); unchanged when no row is restricted."""
    if all(a is None for a in allowed):
        return logits
    keep = torch.zeros_like(logits, dtype=torch.bool)
    for i, a in enumerate(allowed):
        if a is None:
            keep[i] = True
        else:
            keep[i, a] = True
    return logits.masked_fill(~keep, float("-inf"))
