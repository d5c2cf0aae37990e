"""The one epoch/minibatch loop of actor and critic, and its optimizer step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cairn.train.learners import apply_gradients, row_order, run_epochs


class _NoDist:
    def sync_grads(self, module):
        pass

    def max_int(self, x: int) -> int:
        return x


def test_run_epochs_draws_one_permutation_per_epoch_and_averages_metrics() -> None:
    seen = []
    rng = np.random.default_rng(0)
    out = run_epochs(7, 2, 3, rng, lambda idx: seen.append(idx.tolist()) or {"m": len(idx)})
    ref = np.random.default_rng(0)  # the loop the trainer ran twice before
    want = [c.tolist() for _ in range(2) for c in np.array_split(ref.permutation(7), 3)]
    assert seen == want and rng.bit_generator.state == ref.bit_generator.state
    assert out == {"m": pytest.approx(14 / 6)}  # chunks of 3, 2, 2 rows, twice


def test_apply_gradients_steps_and_reports_the_norm_before_clipping() -> None:
    w = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(w.weight)
    opt = torch.optim.SGD(w.parameters(), lr=1.0)
    loss = (w(torch.tensor([[3.0]])) - 4.0).pow(2).sum()  # d/dw = 2 * (0 - 4) * 3 = -24
    norm, stepped = apply_gradients(loss, opt, w, _NoDist(), max_grad_norm=1.0)
    assert norm == pytest.approx(24.0) and w.weight.item() == pytest.approx(1.0)  # clipped
    assert stepped


@pytest.mark.parametrize("max_grad_norm", [1.0, None])
def test_a_non_finite_loss_never_reaches_the_weights(max_grad_norm) -> None:
    w = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.ones_(w.weight)
    opt = torch.optim.Adam(w.parameters(), lr=1.0)
    loss = (w(torch.tensor([[float("nan")]]))).sum()
    _, stepped = apply_gradients(loss, opt, w, _NoDist(), max_grad_norm)
    assert not stepped and w.weight.item() == 1.0 and w.weight.grad is None
    assert opt.state_dict()["state"] == {}  # Adam's moments untouched


def test_row_order_without_labels_is_one_permutation_of_the_stream() -> None:
    rng, ref = np.random.default_rng(3), np.random.default_rng(3)
    assert row_order(9, rng).tolist() == ref.permutation(9).tolist()
    assert rng.bit_generator.state == ref.bit_generator.state


def test_row_order_keeps_each_prompts_rows_together_in_random_label_order() -> None:
    labels = np.array([0, 1, 0, 2, 1, 2])
    # Worked draw: default_rng(0) places the labels at ranks [2, 0, 1] (label 1 first,
    # then 2, then 0) and orders the rows [5, 3, 2, 4, 1, 0]; grouped stably by rank.
    ref = np.random.default_rng(0)
    assert ref.permutation(3).tolist() == [2, 0, 1]
    assert ref.permutation(6).tolist() == [5, 3, 2, 4, 1, 0]
    order = row_order(6, np.random.default_rng(0), labels)
    assert order.tolist() == [4, 1, 5, 3, 2, 0]
    assert [c.tolist() for c in np.array_split(order, 3)] == [[4, 1], [5, 3], [2, 0]]


def _row_order_loop(n: int, rng: np.random.Generator, labels: list[int]) -> list[int]:
    rank = rng.permutation(max(labels) + 1)
    rows = rng.permutation(n).tolist()
    out = []
    for label in sorted(range(max(labels) + 1), key=lambda lab: rank[lab]):
        out += [r for r in rows if labels[r] == label]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_row_order_matches_a_loop_and_is_a_grouped_permutation(seed: int) -> None:
    gen = np.random.default_rng(100 + seed)
    n = int(gen.integers(1, 40))
    labels = gen.integers(0, max(1, n // 3), size=n)
    labels = np.unique(labels, return_inverse=True)[1]  # 0..K-1, each used
    order = row_order(n, np.random.default_rng(seed), labels)
    assert order.tolist() == _row_order_loop(n, np.random.default_rng(seed), labels.tolist())
    assert sorted(order.tolist()) == list(range(n))  # every row once
    seq = labels[order]
    changes = int((seq[1:] != seq[:-1]).sum())
    assert changes == len(set(labels.tolist())) - 1  # each label one contiguous run


def test_run_epochs_with_labels_draws_a_grouped_order_per_epoch() -> None:
    seen = []
    labels = np.array([0, 0, 1, 1, 2, 2])
    rng = np.random.default_rng(1)
    run_epochs(6, 2, 3, rng, lambda i: seen.append(i.tolist()) or {}, None, labels)
    assert len(seen) == 6
    for chunk in seen:  # chunks of 2 in an order that keeps each label's 2 rows together
        assert len(set(labels[chunk].tolist())) == 1
    assert seen[:3] != seen[3:]  # a fresh order in the second epoch
