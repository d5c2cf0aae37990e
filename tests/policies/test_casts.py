"""Frozen weights cast to bfloat16 once (``cairn.policies.casts``): under bfloat16 autocast
the products and input gradients are autocast's own bit for bit, a changed weight is cast
again, and nothing changes outside autocast."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from cairn.policies import GenerationOptions, HFPolicy
from cairn.policies.casts import CastOnceLinear, cast_once, cast_per_call, forget_casts
from cairn.policies.lora import LoraSpec, apply_lora, merged_state_dict


def _bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _frozen_pair(bias: bool = True) -> tuple[nn.Linear, nn.Linear]:
    """A frozen float32 layer and its cast-once twin with the same weights."""
    torch.manual_seed(0)
    plain = nn.Linear(24, 16, bias=bias).requires_grad_(False)
    return plain, cast_once(copy.deepcopy(plain))


def _out_and_input_grad(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    with _bf16():
        y = layer(x)
    (y.float() * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
    assert x.grad is not None
    return y.detach(), x.grad


@pytest.mark.parametrize("bias", [True, False])
def test_products_and_input_gradients_are_autocasts_bit_for_bit(bias):
    plain, once = _frozen_pair(bias)
    assert type(once) is CastOnceLinear
    x = torch.randn(5, 7, 24)
    for _ in range(2):  # the second call multiplies by the kept copy
        y, gx = _out_and_input_grad(once, x)
        y_ref, gx_ref = _out_and_input_grad(plain, x)
        assert y.dtype == torch.bfloat16 and torch.equal(y, y_ref)
        assert torch.equal(gx, gx_ref)
    assert set(once._casts) == ({"weight", "bias"} if bias else {"weight"})


def test_outside_autocast_the_layer_is_the_float32_layer():
    plain, once = _frozen_pair()
    x = torch.randn(3, 24)
    y = once(x)
    assert y.dtype == torch.float32 and torch.equal(y, plain(x))
    assert not once._casts  # nothing kept where nothing was cast


@pytest.mark.parametrize(
    "change",
    [
        lambda layer, new: layer.weight.copy_(new),  # an in-place write
        lambda layer, new: layer.load_state_dict({"weight": new, "bias": layer.bias}),
        lambda layer, new: setattr(layer.weight, "data", new.clone()),  # another storage
    ],
    ids=["copy_", "load_state_dict", "new_data"],
)
def test_a_changed_weight_is_cast_again(change):
    plain, once = _frozen_pair()
    x = torch.randn(4, 24)
    with _bf16():
        once(x)  # keeps the first weight's copy
    new = torch.randn_like(plain.weight)
    with torch.no_grad():
        change(once, new)
        plain.weight.copy_(new)
    with _bf16():
        assert torch.equal(once(x), plain(x))


def test_a_write_through_data_needs_forget_casts():
    plain, once = _frozen_pair()
    x = torch.randn(4, 24)
    with _bf16():
        kept = once(x)
        once.weight.data += 1.0  # neither version nor storage moves: the copy is stale
        plain.weight.data += 1.0
        assert torch.equal(once(x), kept)  # why forget_casts exists
        forget_casts(once)
        assert torch.equal(once(x), plain(x))


def test_trainable_tensors_are_left_to_autocast_and_get_their_gradients():
    torch.manual_seed(0)
    plain = nn.Linear(24, 16)
    once = cast_once(copy.deepcopy(plain))
    x = torch.randn(6, 24)
    for layer in (plain, once):
        with _bf16():
            layer(x).float().pow(2).sum().backward()
    assert not once._casts
    assert torch.equal(once.weight.grad, plain.weight.grad)
    assert torch.equal(once.bias.grad, plain.bias.grad)


def test_copies_and_pickles_carry_no_kept_tensors():
    _, once = _frozen_pair()
    with _bf16():
        once(torch.randn(2, 24))
    assert once._casts
    for clone in (copy.deepcopy(once), pickle.loads(pickle.dumps(once))):
        assert type(clone) is CastOnceLinear and not clone._casts
        with _bf16():
            assert torch.equal(clone(torch.ones(2, 24)), once(torch.ones(2, 24)))
    assert "_casts" not in "".join(once.state_dict())


def test_cast_once_leaves_linear_subclasses_alone_and_is_idempotent():
    class Special(nn.Linear):
        pass

    model = nn.Sequential(nn.Linear(2, 2), Special(2, 2))
    cast_once(cast_once(model))
    assert [type(m) for m in model] == [CastOnceLinear, Special]


def _score_sum(policy: HFPolicy, prompts: list[list[int]]) -> torch.Tensor:
    from cairn.data.tokens import collate_scoring

    actions = [[5, 6, 7], [8, 9]]
    batch = collate_scoring(prompts, actions, None, policy.pad_id)
    logp, _ = policy.score(batch, 1.0, with_entropy=False)
    return logp[batch.action_mask]


def test_a_lora_policy_under_autocast_scores_and_learns_as_autocast_alone(tiny_policy):
    """The whole path: a LoRA policy built with autocast casts its frozen layers once; its
    log-probs and the adapters' gradients equal those of the same model whose layers are
    cast by autocast at every call; merging the adapters for a state dict forgets the
    kept copies (peft writes through ``.data``)."""
    torch.manual_seed(0)
    base = apply_lora(copy.deepcopy(tiny_policy.model), LoraSpec(r=4))
    for p in base.parameters():  # adapters that are not zero, so they take part
        if p.requires_grad:
            p.data.normal_(0, 0.05)
    twin = copy.deepcopy(base)
    options = GenerationOptions(autocast=True)
    policy = HFPolicy(base, tiny_policy.tokenizer, options=options)  # casts once
    ref = HFPolicy(twin, tiny_policy.tokenizer, options=options)
    cast_per_call(twin)  # the twin's layers cast at every call, as autocast alone does
    assert not any(isinstance(m, CastOnceLinear) for m in twin.modules())
    assert any(isinstance(m, CastOnceLinear) for m in base.modules())
    prompts = [policy.encode("go north then east"), policy.encode("take the coin")]
    logp, ref_logp = _score_sum(policy, prompts), _score_sum(ref, prompts)
    logp.sum().backward()
    ref_logp.sum().backward()
    assert torch.equal(logp.detach(), ref_logp.detach())
    assert torch.equal(_score_sum(policy, prompts).detach(), logp.detach())  # kept copies
    grads = [(p.grad, q.grad) for p, q in zip(base.parameters(), twin.parameters(), strict=True)
             if p.requires_grad]  # fmt: skip
    assert grads and all(a is not None and torch.equal(a, b) for a, b in grads)
    merged_state_dict(base)
    assert all(not m._casts for m in base.modules() if isinstance(m, CastOnceLinear))
