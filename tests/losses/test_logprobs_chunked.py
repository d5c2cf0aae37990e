"""Log-probs and entropy from hidden states, chunk by chunk: the same numbers and gradients
as from the full logits, with at most one chunk of logits alive at a time."""

from __future__ import annotations

import math

import pytest
import torch

from cairn.losses import entropy_from_logits, logprobs_from_logits
from cairn.losses.logprobs import logprobs_from_hidden


def test_worked_example():
    # Head rows e1, e2, 0 on hidden (1, 0): logits (1, 0, 0), temperature 1.
    # log pi(0) = 1 - log(e + 2); H = log(e + 2) - e / (e + 2).
    head = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    lp, ent = logprobs_from_hidden(torch.tensor([[1.0, 0.0]]), head, torch.tensor([0]))
    z = math.log(math.e + 2)
    assert lp.item() == pytest.approx(1 - z, abs=1e-6)  # -0.551445
    assert ent.item() == pytest.approx(z - math.e / (math.e + 2), abs=1e-6)  # 0.975303
    # Temperature 2 halves the logits: log pi(0) = 0.5 - log(e^0.5 + 2).
    lp2, _ = logprobs_from_hidden(
        torch.tensor([[1.0, 0.0]]), head, torch.tensor([0]), temperature=2.0
    )
    assert lp2.item() == pytest.approx(0.5 - math.log(math.exp(0.5) + 2), abs=1e-6)


def _case(seed: int = 0, n: int = 11, h: int = 8, v: int = 40):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g, dtype=torch.float64).float().requires_grad_()
    head = torch.nn.Linear(h, v, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(v, h, generator=g))
    tokens = torch.randint(0, v, (n,), generator=g)
    # Positions 0-3 free (all -1), the rest restricted to 3 ids that include the token.
    allowed = torch.full((n, 3), -1)
    for i in range(4, n):
        allowed[i] = torch.tensor([int(tokens[i]), (int(tokens[i]) + 1) % v, (i * 7) % v])
        if allowed[i, 2] in allowed[i, :2]:
            allowed[i, 2] = -1
    return hidden, head, tokens, allowed


@pytest.mark.parametrize("chunk", [1, 3, 11, 64])
@pytest.mark.parametrize("restricted", [False, True])
def test_chunks_match_full_logits_with_gradients(chunk: int, restricted: bool):
    hidden, head, tokens, allowed = _case()
    allowed = allowed if restricted else None
    lp, ent = logprobs_from_hidden(hidden, head, tokens, allowed, temperature=0.7, chunk=chunk)
    (lp.sum() + 0.3 * ent.sum()).backward()
    g_hidden, g_head = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None

    z = (head(hidden) / 0.7)[None]  # (1, N, V): the whole-logits reference
    a = None if allowed is None else allowed[None]
    ref_lp, ref_ent = logprobs_from_logits(z, tokens[None], a)[0], entropy_from_logits(z, a)[0]
    (ref_lp.sum() + 0.3 * ref_ent.sum()).backward()
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=0)
    torch.testing.assert_close(g_hidden, hidden.grad, atol=1e-5, rtol=0)
    torch.testing.assert_close(g_head, head.weight.grad, atol=1e-5, rtol=0)


def test_the_head_never_sees_more_than_a_chunk():
    hidden, head, tokens, _ = _case(n=11)
    seen = []
    head.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[-2]))
    lp, _ = logprobs_from_hidden(hidden, head, tokens, chunk=4)
    lp.sum().backward()
    # 3 chunks (4, 4, 3) forward, each recomputed once in the backward pass.
    assert seen == [4, 4, 3, 3, 4, 4]  # backward recomputes the last chunk first


def test_without_entropy_and_without_gradients():
    hidden, head, tokens, _ = _case()
    with torch.no_grad():
        lp, ent = logprobs_from_hidden(hidden, head, tokens, with_entropy=False, chunk=5)
    assert ent is None and lp.shape == (11,) and not lp.requires_grad
    empty, ent0 = logprobs_from_hidden(hidden[:0], head, tokens[:0])
    assert empty.shape == (0,) and ent0.shape == (0,)
    empty.sum().backward()  # a minibatch without response tokens still backpropagates
    assert hidden.grad is not None and not hidden.grad.any()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hidden": torch.zeros(2, 3, 4)}, "hidden must be an"),
        ({"chunk": 0}, "chunk must be a positive"),
        ({"tokens": torch.zeros(3, dtype=torch.long)}, "tokens must be an"),
        ({"allowed": torch.zeros(3, 2, dtype=torch.long)}, "allowed must be an"),
    ],
)
def test_bad_inputs(kwargs: dict, match: str):
    args = {"hidden": torch.zeros(2, 4), "tokens": torch.zeros(2, dtype=torch.long)}
    head = torch.nn.Linear(4, 5)
    with pytest.raises(ValueError, match=match):
        logprobs_from_hidden(
            kwargs.get("hidden", args["hidden"]),
            head,
            kwargs.get("tokens", args["tokens"]),
            kwargs.get("allowed"),
            chunk=kwargs.get("chunk", 8),
        )
