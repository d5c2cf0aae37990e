"""logprobs_from_logits() and entropy_from_logits(), with and without an allowed set."""

from __future__ import annotations

import math

import pytest
import torch

from cairn.losses import entropy_from_logits, logprobs_from_logits


def _random(b=3, t=4, v=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(b, t, v, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, v, (b, t), generator=g)
    return logits, tokens, g


def test_logprobs_match_log_softmax_gather() -> None:
    logits, tokens, _ = _random()
    expected = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
    torch.testing.assert_close(logprobs_from_logits(logits, tokens), expected)


def test_logprobs_allowed_worked_example() -> None:
    # logits (1, 2, 3, 4) over 4 ids, allowed {3, 1}: log p(3) = 4 - log(e^4 + e^2)
    # = -log(1 + e^-2) = -0.126928; log p(1) = 2 - log(e^4 + e^2) = -2.126928
    logits = torch.tensor([[[1.0, 2.0, 3.0, 4.0]] * 2], dtype=torch.float64)
    allowed = torch.tensor([[[3, 1, -1]] * 2])
    tokens = torch.tensor([[3, 1]])
    out = logprobs_from_logits(logits, tokens, allowed)
    torch.testing.assert_close(
        out, torch.tensor([[-0.12692801104297263, -2.1269280110429727]], dtype=torch.float64)
    )


def test_logprobs_allowed_match_subset_loop() -> None:
    logits, _, g = _random(seed=1)
    b, t, v = logits.shape
    allowed = torch.full((b, t, 5), -1)
    tokens = torch.zeros(b, t, dtype=torch.long)
    for i in range(b):
        for j in range(t):
            k = 1 + (i + j) % 5
            ids = torch.randperm(v, generator=g)[:k]
            allowed[i, j, :k] = ids
            tokens[i, j] = ids[-1]
    out = logprobs_from_logits(logits, tokens, allowed)
    for i in range(b):
        for j in range(t):
            ids = [x for x in allowed[i, j].tolist() if x >= 0]
            z = [logits[i, j, x].item() for x in ids]
            log_norm = math.log(sum(math.exp(x) for x in z))
            assert out[i, j].item() == pytest.approx(logits[i, j, tokens[i, j]].item() - log_norm)


def test_logprobs_allowed_all_ids_equals_unrestricted() -> None:
    logits, tokens, _ = _random(seed=2)
    v = logits.shape[-1]
    allowed = torch.arange(v).flip(0).expand(*tokens.shape, v)  # order does not matter
    torch.testing.assert_close(
        logprobs_from_logits(logits, tokens, allowed), logprobs_from_logits(logits, tokens)
    )
    torch.testing.assert_close(entropy_from_logits(logits, allowed), entropy_from_logits(logits))


def test_outside_token_and_unrestricted_positions() -> None:
    logits = torch.randn(1, 2, 5, dtype=torch.float64, requires_grad=True)
    allowed = torch.tensor([[[0, 2], [-1, -1]]])
    out = logprobs_from_logits(logits, torch.tensor([[4, 4]]), allowed)
    # token 4 is not allowed at position 0: probability 0 -> -inf
    assert out[0, 0].item() == float("-inf")
    # position 1 lists no id: unrestricted (ScoreInputs convention), the full softmax
    full = torch.log_softmax(logits.detach(), -1)[0, 1, 4]
    assert out[0, 1].item() == pytest.approx(full.item())
    ent = entropy_from_logits(logits, allowed)
    full_ent = torch.distributions.Categorical(logits=logits.detach()[0, 1]).entropy()
    assert ent[0, 1].item() == pytest.approx(full_ent.item())
    (ent.sum() + out[0, 1]).backward()
    assert torch.isfinite(logits.grad).all()


def test_mixed_rows_match_loop() -> None:
    # rows 0 and 2 constrained, row 1 free (all -1), as the token collator builds them
    logits, tokens, g = _random(b=3, t=4, v=9, seed=7)
    allowed = torch.full((3, 4, 3), -1)
    for i in (0, 2):
        for j in range(4):
            ids = torch.randperm(9, generator=g)[:3]
            allowed[i, j] = ids
            tokens[i, j] = ids[j % 3]
    a = logits.clone().requires_grad_(True)
    lp, ent = logprobs_from_logits(a, tokens, allowed), entropy_from_logits(a, allowed)
    (lp.sum() + ent.sum()).backward()
    b = logits.clone().requires_grad_(True)
    lp_ref, ent_ref = torch.zeros(3, 4, dtype=torch.float64), torch.zeros(3, 4, dtype=torch.float64)
    for i in range(3):
        for j in range(4):
            ids = [x for x in allowed[i, j].tolist() if x >= 0] or list(range(9))
            sub = b[i, j, ids]
            k = ids.index(tokens[i, j].item())
            lp_ref[i, j] = torch.log_softmax(sub, -1)[k]
            ent_ref[i, j] = torch.distributions.Categorical(logits=sub).entropy()
    (lp_ref.sum() + ent_ref.sum()).backward()
    torch.testing.assert_close(lp, lp_ref)
    torch.testing.assert_close(ent, ent_ref)
    torch.testing.assert_close(a.grad, b.grad)


def test_logprobs_gradient_matches_log_softmax() -> None:
    logits, tokens, _ = _random(seed=3)
    a = logits.clone().requires_grad_(True)
    b = logits.clone().requires_grad_(True)
    logprobs_from_logits(a, tokens).sum().backward()
    torch.log_softmax(b, -1).gather(-1, tokens[..., None]).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_entropy_uniform_is_log_v_and_log_k() -> None:
    logits = torch.full((2, 3, 8), 0.7, dtype=torch.float64)
    expected = torch.full((2, 3), math.log(8), dtype=torch.float64)
    torch.testing.assert_close(entropy_from_logits(logits), expected)
    # K = 3 allowed ids (one padding slot) -> log 3, even with non-uniform logits elsewhere
    logits[..., 5] = 9.0
    allowed = torch.tensor([0, 2, 4, -1]).expand(2, 3, 4)
    torch.testing.assert_close(
        entropy_from_logits(logits, allowed), torch.full((2, 3), math.log(3), dtype=torch.float64)
    )


def test_entropy_matches_categorical_with_gradient() -> None:
    logits, _, _ = _random(seed=4)
    a = logits.clone().requires_grad_(True)
    b = logits.clone().requires_grad_(True)
    ent = entropy_from_logits(a)
    ref = torch.distributions.Categorical(logits=b).entropy()
    torch.testing.assert_close(ent, ref)
    ent.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_entropy_allowed_matches_subset_categorical() -> None:
    logits, _, _ = _random(seed=5)
    allowed = torch.tensor([6, 1, 9, -1]).expand(*logits.shape[:2], 4)
    expected = torch.distributions.Categorical(logits=logits[..., [6, 1, 9]]).entropy()
    torch.testing.assert_close(entropy_from_logits(logits, allowed), expected)


def test_half_precision_logits_are_upcast() -> None:
    logits, tokens, _ = _random(seed=6)
    out = logprobs_from_logits(logits.bfloat16(), tokens)
    assert out.dtype == torch.float32
    ref = logprobs_from_logits(logits.bfloat16().double(), tokens)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "allowed",
    [
        torch.tensor([[[0, 0, 1]]]),  # duplicate id
        torch.tensor([[[0, 5, -1]]]),  # id >= V
        torch.tensor([[[0, -2, -1]]]),  # below the -1 padding
        torch.tensor([[[0.0, 1.0]]]),  # float ids
        torch.tensor([[0, 1]]),  # not 3-D
        torch.zeros(1, 1, 0, dtype=torch.long),  # K = 0
        torch.zeros(2, 1, 2, dtype=torch.long),  # wrong B
    ],
)
def test_bad_allowed(allowed: torch.Tensor) -> None:
    logits = torch.zeros(1, 1, 5)
    with pytest.raises(ValueError, match="allowed"):
        logprobs_from_logits(logits, torch.zeros(1, 1, dtype=torch.long), allowed)
    with pytest.raises(ValueError, match="allowed"):
        entropy_from_logits(logits, allowed)


def test_bad_logits_and_tokens() -> None:
    with pytest.raises(ValueError, match="logits"):
        entropy_from_logits(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="logits"):
        entropy_from_logits(torch.zeros(1, 2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens"):
        logprobs_from_logits(torch.zeros(1, 2, 5), torch.tensor([[0, 5]]))
    with pytest.raises(ValueError, match="tokens"):
        logprobs_from_logits(torch.zeros(1, 2, 5), torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="tokens"):
        logprobs_from_logits(torch.zeros(1, 2, 5), torch.tensor([0, 1]))
