"""ppo_clip() and shaped_offpolicy(): worked numbers, gradients, statistics, edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from cairn.losses import ppo_clip, shaped_offpolicy


def _one_token(rho: float, adv: float, **kw):
    """Loss, d loss / d logp and stats for a single token with ratio ``rho``."""
    logp = torch.tensor([[math.log(rho)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 1, dtype=torch.float64)
    loss, stats = ppo_clip(logp, old, torch.tensor([adv]), torch.ones(1, 1, dtype=torch.bool), **kw)
    loss.sum().backward()
    return loss.item(), logp.grad.item(), {k: v.item() for k, v in stats.items()}


@pytest.mark.parametrize(
    ("rho", "adv", "kw", "loss", "clipped"),
    [
        # A > 0, rho above 1 + 0.2: the surrogate is capped at 1.2 * A
        (1.5, 1.0, {}, -1.2, True),
        # A < 0, rho below 1 - 0.2: clip(0.5) = 0.8, -min(-0.5, -0.8) = 0.8
        (0.5, -1.0, {}, 0.8, True),
        # inside the trust region: plain -rho * A
        (1.1, 1.0, {}, -1.1, False),
        # A > 0, rho low: min picks the unclipped (pessimistic) 0.5, no clipping
        (0.5, 1.0, {}, -0.5, False),
        # A < 0, rho high: min picks -rho*A = 2 (above clip 1.2), unclipped
        (2.0, -1.0, {}, 2.0, False),
        # DAPO asymmetric 0.2 / 0.28: ceiling 1.28
        (1.3, 1.0, {"clip_high": 0.28}, -1.28, True),
        (1.25, 1.0, {"clip_high": 0.28}, -1.25, False),
        (1.25, 1.0, {"clip_high": 0.2}, -1.2, True),
        (0.7, -1.0, {"clip_high": 0.28}, 0.8, True),  # floor still 1 - 0.2
        # advantage scales the loss: rho 1.5, A = 2.5 -> -1.2 * 2.5
        (1.5, 2.5, {}, -3.0, True),
    ],
)
def test_worked_examples(rho, adv, kw, loss, clipped) -> None:
    got, grad, stats = _one_token(rho, adv, **kw)
    assert got == pytest.approx(loss, abs=1e-12)
    assert stats["clipfrac"] == float(clipped)
    # clipped -> the loss is constant in logp; else d(-rho*A)/dlogp = -rho*A
    assert grad == pytest.approx(0.0 if clipped else -rho * adv, abs=1e-12)


def test_dual_clip_caps_negative_advantage() -> None:
    # rho 5, A = -1: standard loss -min(-5, -1.2) = 5, dual cap -c*A = 3
    loss, grad, stats = _one_token(5.0, -1.0, dual_clip=3.0)
    assert loss == pytest.approx(3.0)
    assert grad == 0.0
    assert stats["dual_clipfrac"] == 1.0
    # without dual clip the same token costs 5 and has gradient -rho*A = 5
    loss, grad, stats = _one_token(5.0, -1.0)
    assert (loss, stats["dual_clipfrac"]) == (pytest.approx(5.0), 0.0)
    assert grad == pytest.approx(5.0)
    # rho 2: loss 2 < 3, the cap is inactive
    loss, _, stats = _one_token(2.0, -1.0, dual_clip=3.0)
    assert (loss, stats["dual_clipfrac"]) == (pytest.approx(2.0), 0.0)
    # positive advantages are never dual-clipped: rho 5, A = +1 -> -1.2
    loss, _, stats = _one_token(5.0, 1.0, dual_clip=3.0)
    assert (loss, stats["dual_clipfrac"]) == (pytest.approx(-1.2), 0.0)


def test_per_token_clip_low_elpo() -> None:
    # ELPO widens eps_low to 0.315 from the critical step: rho 0.7, A = -1 is inside
    # [0.685, 1.315] so the loss is 0.7 (unclipped); with 0.2 it is floored at 0.8
    logp = torch.log(torch.tensor([[0.7, 0.7]], dtype=torch.float64))
    old = torch.zeros(1, 2, dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    eps = torch.tensor([[0.2, 0.315]], dtype=torch.float64)
    loss, stats = ppo_clip(logp, old, torch.tensor([-1.0]), mask, clip_low_per_token=eps)
    torch.testing.assert_close(loss, torch.tensor([[0.8, 0.7]], dtype=torch.float64))
    assert stats["clipfrac"].item() == 0.5
    # a per-sequence (B,) tensor broadcasts to every token of the row
    loss_b, _ = ppo_clip(logp, old, torch.tensor([-1.0]), mask, clip_low_per_token=eps[:, 1])
    torch.testing.assert_close(loss_b, torch.tensor([[0.7, 0.7]], dtype=torch.float64))


def test_stats_by_hand() -> None:
    # ratios 1.5, 0.5, 1.0 (the 4th token is padding with a huge ratio that must be ignored)
    ratios = torch.tensor([[1.5, 0.5, 1.0, 100.0]], dtype=torch.float64)
    logp, old = ratios.log(), torch.zeros(1, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    loss, stats = ppo_clip(logp, old, torch.tensor([1.0]), mask)
    # k3 = rho - 1 - log rho per token, averaged over the 3 valid tokens
    k3 = [(r - 1 - math.log(r)) for r in (1.5, 0.5, 1.0)]
    assert stats["approx_kl"].item() == pytest.approx(sum(k3) / 3)
    assert stats["ratio_mean"].item() == pytest.approx(1.0)
    assert stats["ratio_max"].item() == pytest.approx(1.5)
    assert stats["clipfrac"].item() == pytest.approx(1 / 3)  # only rho 1.5 with A > 0
    assert loss[0, 3].item() == 0.0


def test_matches_plain_loop() -> None:
    g = torch.Generator().manual_seed(0)
    b, t = 6, 7
    logp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    old = logp + 0.4 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = torch.rand(b, t, generator=g) < 0.8
    eps_low = 0.1 + 0.3 * torch.rand(b, t, generator=g, dtype=torch.float64)
    kw = {"clip_high": 0.28, "dual_clip": 3.0, "clip_low_per_token": eps_low}
    loss, _ = ppo_clip(logp, old, adv, mask, **kw)
    for i in range(b):
        for j in range(t):
            if not mask[i, j]:
                assert loss[i, j].item() == 0.0
                continue
            rho = math.exp(logp[i, j].item() - old[i, j].item())
            a, lo = adv[i, j].item(), eps_low[i, j].item()
            ref = -min(rho * a, min(max(rho, 1 - lo), 1.28) * a)
            if a < 0:
                ref = min(ref, -3.0 * a)
            assert loss[i, j].item() == pytest.approx(ref, abs=1e-12)


def test_row_permutation_equivariance() -> None:
    g = torch.Generator().manual_seed(3)
    logp, old = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    adv, mask = torch.randn(5, generator=g), torch.rand(5, 4, generator=g) < 0.7
    perm = torch.randperm(5, generator=g)
    loss, stats = ppo_clip(logp, old, adv, mask, dual_clip=4.0)
    loss_p, stats_p = ppo_clip(logp[perm], old[perm], adv[perm], mask[perm], dual_clip=4.0)
    torch.testing.assert_close(loss[perm], loss_p)
    for k in stats:
        torch.testing.assert_close(stats[k], stats_p[k])


def test_nan_padding_and_extreme_log_ratio_stay_finite() -> None:
    logp = torch.tensor([[-1.0, -1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-101.0, float("nan"), -1.0]])  # log-ratio 100 is clamped to 20
    adv = torch.tensor([[1.0, float("nan"), -1.0]])
    mask = torch.tensor([[True, False, True]])
    loss, stats = ppo_clip(logp, old, adv, mask, dual_clip=3.0)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(logp.grad).all()
    assert all(torch.isfinite(v) for v in stats.values())
    assert loss[0, 0].item() == pytest.approx(-1.2)  # clipped at 1 + 0.2


def test_empty_mask_stats_are_zero() -> None:
    logp = torch.zeros(2, 3)
    loss, stats = ppo_clip(logp, logp, torch.ones(2), torch.zeros(2, 3, dtype=torch.bool))
    assert loss.abs().sum().item() == 0.0
    assert all(v.item() == 0.0 for v in stats.values())


@pytest.mark.parametrize(
    "kw",
    [
        {"clip_low": 1.0},
        {"clip_low": -0.1},
        {"clip_high": -0.2},
        {"clip_high": float("nan")},
        {"dual_clip": 1.0},
        {"dual_clip": 0.5},
        {"clip_low_per_token": torch.full((2, 3), 1.5)},
        {"clip_low_per_token": torch.full((3,), 0.2)},
        {"clip_low_per_token": torch.full((2, 3), 0, dtype=torch.long)},
    ],
)
def test_bad_arguments(kw) -> None:
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError):
        ppo_clip(logp, logp, torch.ones(2), torch.ones(2, 3), **kw)


def test_bad_shapes() -> None:
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="old_logp"):
        ppo_clip(logp, torch.zeros(2, 4), torch.ones(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="adv"):
        ppo_clip(logp, logp, torch.ones(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="mask"):
        ppo_clip(logp, logp, torch.ones(2), torch.ones(3, 2))
    with pytest.raises(ValueError, match="floating"):
        ppo_clip(logp.long(), logp.long(), torch.ones(2), torch.ones(2, 3))


# --- LUFFY policy shaping ---------------------------------------------------------------


def test_shaping_worked_example() -> None:
    # p = 0.1 = gamma: f = 0.1 / 0.2 = 0.5, so loss = -A * 0.5 = -0.5;
    # df/dlogp = p*gamma/(p+gamma)^2 = 0.01 / 0.04 = 0.25, so dloss/dlogp = -0.25
    logp = torch.tensor([[math.log(0.1)]], dtype=torch.float64, requires_grad=True)
    loss, stats = shaped_offpolicy(logp, torch.tensor([1.0]), torch.ones(1, 1), gamma=0.1)
    loss.sum().backward()
    assert loss.item() == pytest.approx(-0.5)
    assert logp.grad.item() == pytest.approx(-0.25)
    assert stats["prob_mean"].item() == pytest.approx(0.1)


def test_shaping_gradient_matches_formula() -> None:
    g = torch.Generator().manual_seed(4)
    logp = (-6 * torch.rand(4, 5, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 5, generator=g) < 0.7
    gamma = 0.1
    loss, _ = shaped_offpolicy(logp, adv, mask, gamma)
    loss.sum().backward()
    p = logp.detach().exp()
    torch.testing.assert_close(loss.detach(), torch.where(mask, -adv * p / (p + gamma), 0.0))
    expected = torch.where(mask, -adv * p * gamma / (p + gamma) ** 2, 0.0)
    torch.testing.assert_close(logp.grad, expected)


def test_shaping_boosts_low_probability_tokens_and_never_clips() -> None:
    # plain on-policy gradient of p w.r.t. logp is p; shaping multiplies it by
    # gamma/(p+gamma)^2: for p = 0.01 that is 0.1/0.0121 = 8.26x, for p = 0.9 only 0.1x
    logp = torch.log(torch.tensor([[0.01, 0.9]], dtype=torch.float64)).requires_grad_(True)
    loss, _ = shaped_offpolicy(logp, torch.tensor([-1.0]), torch.ones(1, 2), gamma=0.1)
    loss.sum().backward()
    torch.testing.assert_close(
        logp.grad, torch.tensor([[0.01 * 0.1 / 0.0121, 0.9 * 0.1 / 1.0]], dtype=torch.float64)
    )


def test_shaping_bad_gamma() -> None:
    for gamma in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="gamma"):
            shaped_offpolicy(torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), gamma)
