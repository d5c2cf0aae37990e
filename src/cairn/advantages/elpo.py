"""ELPO hierarchical tree advantage (arXiv 2602.09598; the advantage part only).

The clipping widened after the first irrecoverable step lives in the loss, not here.

Tree: the nodes of a group are the prefixes of its episodes' paths; each episode is a leaf
(its path is the one on its final step). Rows map to nodes through their own ``path``: the
tuple of branch ids of the node that generated the row (``()`` before the first branch;
at a branch point every continuation, the original included, takes its own id). Rows of a
shared prefix appear once per leaf (complete episodes t = 0..T-1) and all map to the same
node, so they get the same advantage. The tree must be valid (``trees.check_tree``).

    V(leaf)      = R of the leaf's episode;  V(node) = mean of its children's V
    A_b(node)    = (V(node) - mean_siblings V) / (std_siblings V + eps)   siblings = the
                   parent's children, the node included; 0 for the root and for an only child
    z(leaf)      = (R - mean_group R) / (std_group R + eps)               over the group's leaves
    A_t(node)    = mean of z over the leaves below the node
    A            = branch_weight * A_b + traj_weight * A_t                (0.5 and 0.5)

eps = 1e-6, std unbiased. Shapes: batch of N rows with ``path`` -> (N,) float64.
Terms: ``A_b``, ``A_t`` (N,). Loops over tree depth, vectorised over nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cairn.advantages._registry import WEIGHT, register
from cairn.advantages.episodes import Episodes
from cairn.advantages.segments import (
    factorize_keys,
    normalize_in_segments,
    segment_count,
    segment_mean,
    segment_sum,
)
from cairn.advantages.trees import PathTable, check_tree, leaf_paths
from cairn.data import StepBatch

__all__ = ["elpo"]


@dataclass(frozen=True)
class _Tree:
    """Nodes of every group's tree, via the (episode, depth) pairs of root-to-leaf chains.

    pair_ep (P,) episode of each pair; first (E,) offset of each episode's chain, so
    ``node[first[e] + d]`` is episode e's ancestor at depth d; node (P,) dense node id;
    parent (n_nodes,) parent node (-1 at a root); depth (n_nodes,).
    """

    pair_ep: np.ndarray
    first: np.ndarray
    node: np.ndarray
    parent: np.ndarray
    depth: np.ndarray

    @classmethod
    def of(cls, ep: Episodes, paths: PathTable, leaf: np.ndarray) -> _Tree:
        L = paths.length[leaf]  # (E,)
        first = np.cumsum(L + 1) - (L + 1)
        pair_ep = np.repeat(np.arange(ep.n), L + 1)  # (P,)
        pair_depth = np.arange(len(pair_ep)) - first[pair_ep]
        node, n = factorize_keys(ep.group[pair_ep], paths.prefix[leaf[pair_ep], pair_depth])
        depth = np.zeros(n, dtype=np.int64)
        depth[node] = pair_depth
        parent = np.full(n, -1, dtype=np.int64)
        deep = np.flatnonzero(pair_depth > 0)
        parent[node[deep]] = node[deep - 1]
        return cls(pair_ep, first, node, parent, depth)

    def values(self, leaf_node: np.ndarray, R: np.ndarray) -> np.ndarray:
        """V (n_nodes,): a leaf's R, an inner node the mean of its children's V (bottom-up)."""
        n = len(self.parent)
        V = np.zeros(n)
        V[leaf_node] = R
        child = np.flatnonzero(self.parent >= 0)
        n_children = segment_count(self.parent[child], n)
        for d in range(int(self.depth.max(initial=0)), 0, -1):
            kids = child[self.depth[child] == d]
            sums = segment_sum(V[kids], self.parent[kids], n)
            inner = np.flatnonzero((self.depth == d - 1) & (n_children > 0))
            V[inner] = sums[inner] / n_children[inner]
        return V


def _elpo_terms(
    batch: StepBatch, *, branch_weight: float = 0.5, traj_weight: float = 0.5
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(A, {"A_b", "A_t"})``, all (N,) float64; see the module docstring."""
    batch.require("path", estimator="elpo")
    ep = Episodes.of(batch)
    paths = PathTable.of(batch.path)
    leaf = leaf_paths(ep, paths)  # (E,)
    check_tree(ep, paths, leaf)
    tree = _Tree.of(ep, paths, leaf)
    n_nodes = len(tree.parent)
    R = ep.returns(batch.reward)  # (E,)
    V = tree.values(tree.node[tree.first + paths.length[leaf]], R)  # (n_nodes,)
    child = np.flatnonzero(tree.parent >= 0)
    A_b = np.zeros(n_nodes)
    A_b[child] = normalize_in_segments(V[child], tree.parent[child], n_nodes, "mean_std")
    z = normalize_in_segments(R, ep.group, ep.n_groups, "mean_std")  # (E,) leaf z-scores
    A_t = segment_mean(z[tree.pair_ep], tree.node, n_nodes)  # mean over leaves below
    row_node = tree.node[tree.first[ep.row] + paths.length[paths.code]]  # (N,)
    A_b, A_t = A_b[row_node], A_t[row_node]
    return branch_weight * A_b + traj_weight * A_t, {"A_b": A_b, "A_t": A_t}


@register(
    "elpo",
    checks={"branch_weight": WEIGHT, "traj_weight": WEIGHT},
    terms=_elpo_terms,
    term_names=("A_b", "A_t"),
)
def elpo(batch: StepBatch, *, branch_weight: float = 0.5, traj_weight: float = 0.5) -> np.ndarray:
    """ELPO hierarchical advantage ``branch_weight*A_b + traj_weight*A_t`` per step, (N,)."""
    return _elpo_terms(batch, branch_weight=branch_weight, traj_weight=traj_weight)[0]
