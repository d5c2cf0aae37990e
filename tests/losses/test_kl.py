"""kl_penalty(): worked numbers per kind, unbiasedness by exact expectation, clamping."""

from __future__ import annotations

import math

import pytest
import torch

from cairn.losses import KL_KINDS, kl_penalty

# pi = 0.5, pi_ref = 0.25: d = log(pi/pi_ref) = log 2
LOGP = torch.tensor([[math.log(0.5)]], dtype=torch.float64)
REF = torch.tensor([[math.log(0.25)]], dtype=torch.float64)
LN2 = math.log(2.0)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("k1", LN2),
        ("kl", LN2),
        ("k2", 0.5 * LN2**2),  # 0.2402
        ("mse", 0.5 * LN2**2),
        ("k3", 0.5 + LN2 - 1.0),  # pi_ref/pi - 1 - log(pi_ref/pi) = 0.5 - 1 + ln 2 = 0.1931
        ("low_var_kl", 0.5 + LN2 - 1.0),
        ("abs", LN2),
    ],
)
def test_worked_values(kind: str, expected: float) -> None:
    assert kl_penalty(LOGP, REF, kind).item() == pytest.approx(expected, abs=1e-12)


def test_sign_when_policy_below_reference() -> None:
    # swapped: d = -ln 2; k1 is negative, k2 / abs / k3 are not
    assert kl_penalty(REF, LOGP, "k1").item() == pytest.approx(-LN2)
    assert kl_penalty(REF, LOGP, "abs").item() == pytest.approx(LN2)
    assert kl_penalty(REF, LOGP, "k2").item() == pytest.approx(0.5 * LN2**2)
    # k3 = pi_ref/pi - 1 - log(pi_ref/pi) = 2 - 1 - ln 2 = 0.3069
    assert kl_penalty(REF, LOGP, "k3").item() == pytest.approx(1.0 - LN2)


def test_k3_nonnegative_and_zero_when_equal() -> None:
    g = torch.Generator().manual_seed(0)
    logp = -5 * torch.rand(50, 20, generator=g, dtype=torch.float64)
    ref = -5 * torch.rand(50, 20, generator=g, dtype=torch.float64)
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    assert kl_penalty(logp, logp, "k3").abs().max().item() == 0.0
    for kind in KL_KINDS:
        assert kl_penalty(logp, logp, kind).abs().max().item() == 0.0


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_unbiased_in_exact_expectation(kind: str) -> None:
    # k1 and k3 are unbiased: E_{x~pi}[k(x)] = KL(pi || pi_ref) exactly (no sampling:
    # weight each token of a 6-way categorical by its probability)
    g = torch.Generator().manual_seed(1)
    logp = torch.log_softmax(torch.randn(1, 6, generator=g, dtype=torch.float64), -1)
    ref = torch.log_softmax(torch.randn(1, 6, generator=g, dtype=torch.float64), -1)
    exact = (logp.exp() * (logp - ref)).sum()
    estimate = (logp.exp() * kl_penalty(logp, ref, kind)).sum()
    torch.testing.assert_close(estimate, exact)


def test_k3_clamped_and_finite_gradient() -> None:
    # ref - logp = 50: exp(50) would give ~5e21; the log-ratio is clamped to 20 and the
    # result to 10, as verl does, and the gradient stays finite (zero where clamped)
    logp = torch.tensor([[-60.0, -1.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-10.0, -1.5]], dtype=torch.float64)
    out = kl_penalty(logp, ref, "k3")
    out.sum().backward()
    assert out[0, 0].item() == 10.0
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 0].item() == 0.0
    # unclamped token: d/dlogp [exp(ref-logp) - (ref-logp) - 1] = 1 - exp(ref-logp)
    assert logp.grad[0, 1].item() == pytest.approx(1 - math.exp(-0.5))


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="k3"):  # the message lists the kinds
        kl_penalty(LOGP, REF, "k4")
    with pytest.raises(ValueError, match="same shape"):
        kl_penalty(LOGP, torch.zeros(1, 2, dtype=torch.float64))
