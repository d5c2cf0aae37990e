"""aggregate(): the four modes by hand, loop equivalence, invariances, edge cases."""

from __future__ import annotations

import pytest
import torch

from cairn.losses import AGG_MODES, aggregate

# 2x3 example: row 0 has tokens 1, 2 valid; row 1 has token 4 valid; the rest is padding.
VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize(
    ("mode", "norm_len", "expected"),
    [
        ("token-mean", None, 7.0 / 3.0),  # (1 + 2 + 4) / 3 valid tokens
        ("seq-mean-token-sum", None, 3.5),  # ((1 + 2) + 4) / 2 sequences
        ("seq-mean-token-mean", None, 2.75),  # (1.5 + 4) / 2
        ("seq-mean-token-sum-norm", None, 7.0 / 6.0),  # 7 / (B=2 * T=3)
        ("seq-mean-token-sum-norm", 10, 0.35),  # 7 / (2 * 10)
    ],
)
def test_worked_example(mode: str, norm_len: float | None, expected: float) -> None:
    assert aggregate(VALUES, MASK, mode, norm_len).item() == pytest.approx(expected, abs=1e-12)


def test_float_mask_same_as_bool() -> None:
    for mode in AGG_MODES:
        assert aggregate(VALUES, MASK.double(), mode) == aggregate(VALUES, MASK, mode)


def test_token_mean_gradient_is_one_over_valid_count() -> None:
    v = VALUES.clone().requires_grad_(True)
    aggregate(v, MASK, "token-mean").backward()
    # 3 valid tokens, each weighs 1/3; padding gets nothing
    expected = torch.tensor([[1 / 3, 1 / 3, 0.0], [1 / 3, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(v.grad, expected)


def _loop_aggregate(values: list[list[float]], mask: list[list[bool]], mode: str, norm_len):
    """Plain-Python reference: no tensors, explicit loops."""
    sums, counts = [], []
    for row_v, row_m in zip(values, mask, strict=True):
        s, c = 0.0, 0
        for v, m in zip(row_v, row_m, strict=True):
            if m:
                s += v
                c += 1
        sums.append(s)
        counts.append(c)
    total, n_tok = sum(sums), sum(counts)
    if mode == "token-mean":
        return total / n_tok if n_tok else 0.0
    valid_rows = [i for i, c in enumerate(counts) if c > 0]
    if not valid_rows:
        return 0.0
    if mode == "seq-mean-token-sum":
        return sum(sums[i] for i in valid_rows) / len(valid_rows)
    if mode == "seq-mean-token-mean":
        return sum(sums[i] / counts[i] for i in valid_rows) / len(valid_rows)
    length = len(values[0]) if norm_len is None else norm_len
    return total / (len(valid_rows) * length)


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("seed", range(6))
def test_matches_plain_loop(mode: str, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    b, t = torch.randint(1, 7, (2,), generator=g).tolist()
    values = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = torch.rand(b, t, generator=g) < 0.6  # some rows end up empty
    norm_len = None if seed % 2 else 4.5
    expected = _loop_aggregate(values.tolist(), mask.tolist(), mode, norm_len)
    assert aggregate(values, mask, mode, norm_len).item() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_row_permutation_invariance(mode: str) -> None:
    g = torch.Generator().manual_seed(1)
    values = torch.randn(8, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(8, 5, generator=g) < 0.5
    perm = torch.randperm(8, generator=g)
    a = aggregate(values, mask, mode)
    b = aggregate(values[perm], mask[perm], mode)
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_padding_columns(mode: str) -> None:
    g = torch.Generator().manual_seed(2)
    values = torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 5, generator=g) < 0.7
    mask[0, 0] = True
    pad_v = torch.cat([values, torch.randn(4, 3, generator=g, dtype=torch.float64)], dim=1)
    pad_m = torch.cat([mask, torch.zeros(4, 3, dtype=torch.bool)], dim=1)
    a, b = aggregate(values, mask, mode), aggregate(pad_v, pad_m, mode)
    if mode == "seq-mean-token-sum-norm":
        # default norm_len is T: 5 -> 8 rescales the loss by 5/8
        torch.testing.assert_close(b, a * 5 / 8)
        # with a constant norm_len the padding is invisible
        torch.testing.assert_close(
            aggregate(values, mask, mode, 16), aggregate(pad_v, pad_m, mode, 16)
        )
    else:
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_empty_rows_are_ignored(mode: str) -> None:
    extra_v = torch.cat([VALUES, torch.tensor([[7.0, 8.0, 9.0]], dtype=torch.float64)])
    extra_m = torch.cat([MASK, torch.zeros(1, 3, dtype=torch.bool)])
    torch.testing.assert_close(aggregate(extra_v, extra_m, mode), aggregate(VALUES, MASK, mode))


@pytest.mark.parametrize("mode", AGG_MODES)
def test_empty_batch_is_zero_with_gradient(mode: str) -> None:
    v = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    out = aggregate(v, torch.zeros(3, 4, dtype=torch.bool), mode)
    assert out.item() == 0.0
    out.backward()
    torch.testing.assert_close(v.grad, torch.zeros_like(v))


@pytest.mark.parametrize("mode", AGG_MODES)
def test_padding_nan_does_not_leak(mode: str) -> None:
    v = VALUES.clone()
    v[~MASK] = float("nan")
    v.requires_grad_(True)
    out = aggregate(v, MASK, mode)
    out.backward()
    assert torch.isfinite(out) and torch.isfinite(v.grad).all()
    assert out.item() == pytest.approx(aggregate(VALUES, MASK, mode).item())


def test_zero_columns() -> None:
    empty = torch.zeros(2, 0)
    for mode in AGG_MODES:
        assert aggregate(empty, empty.bool(), mode).item() == 0.0


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="token-mean"):  # the message lists the modes
        aggregate(VALUES, MASK, "mean")
    with pytest.raises(ValueError, match="shape"):
        aggregate(VALUES, MASK[:, :2])
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        aggregate(VALUES[0], MASK[0])
    for bad in (0, -1.0, float("inf"), "3"):
        with pytest.raises(ValueError, match="norm_len"):
            aggregate(VALUES, MASK, "seq-mean-token-sum-norm", bad)
