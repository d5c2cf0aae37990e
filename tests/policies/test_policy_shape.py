"""The policy package stays readable and its policies are fixed once built: no function in
src/cairn/policies over 60 lines, and no policy field switched after construction."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import cairn.policies
from cairn.policies import GenerationOptions, HFPolicy
from cairn.policies.sharing import PlainPath, SharedPath

MAX_LINES = 60
PACKAGE = Path(cairn.policies.__file__).parent


def _long_functions(source: str, name: str) -> list[str]:
    tree = ast.parse(source)
    return [
        f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_LINES
    ]


def test_no_function_in_the_policy_package_is_over_60_lines():
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) >= 10  # the package itself, not an empty glob
    long = [f for path in files for f in _long_functions(path.read_text(), path.name)]
    assert not long, f"functions over {MAX_LINES} lines: {long}"


def test_the_length_check_sees_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    assert _long_functions(f"def f():\n{body}\n", "m.py") == ["m.py:1 f (61 lines)"]
    assert _long_functions("def g():\n    return 1\n", "m.py") == []


@pytest.mark.parametrize("name", ["model", "device", "options", "sharing", "forward_tokens"])
def test_a_built_policy_refuses_a_field_set_from_outside(tiny_policy, name):
    with pytest.raises(AttributeError, match=f"HFPolicy.{name} is fixed when the policy is built"):
        setattr(tiny_policy, name, getattr(tiny_policy, name, True))


def test_options_are_chosen_at_construction(tiny_policy):
    assert tiny_policy.options == GenerationOptions() and tiny_policy.options.plain
    assert type(tiny_policy.sharing) is PlainPath  # the plain path: the reference
    shared = HFPolicy(tiny_policy.model, tiny_policy.tokenizer, options=GenerationOptions(
        share_prefix=True, drop_finished=True))  # fmt: skip
    assert isinstance(shared.sharing, SharedPath) and not shared.options.plain
    other = shared.with_model(tiny_policy.model)
    assert other.options == shared.options and other.sharing is not shared.sharing
    with pytest.raises(AttributeError):  # frozen: one set of switches per policy
        shared.options.share_prefix = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"prefix_block": 8}, "prefix_block needs share_prefix=True"),
        ({"score_chunk": 0}, "score_chunk must be >= 1"),
        ({"min_shared_prefix": -1}, "min_shared_prefix must be >= 0"),
        ({"bucket_cost": -2}, "bucket_cost must be >= 0 or None"),
    ],
)
def test_bad_options_fail_in_one_line(options, needle):
    with pytest.raises(ValueError, match=needle):
        GenerationOptions(**options)


def _rows(policy: HFPolicy) -> list[list[int]]:
    words = ["box wall goal", "up down", "box box wall left", "goal"]
    return [policy.encode(f"{w} obs: wall act:") for w in words + words[:2]]


def test_the_component_with_every_switch_off_is_the_plain_path_bit_for_bit(tiny_policy):
    # The component's code with no sharing or caching must give the reference's numbers
    # exactly: sampled tokens, log-probs, entropies, scores and gradients.
    from cairn.data.tokens import collate_scoring

    plain = tiny_policy
    component = plain.with_model(plain.model)
    object.__setattr__(component, "sharing", SharedPath(GenerationOptions(), plain.pad_id))
    object.__setattr__(component.sharing, "tokens", component._tokens)
    rows = _rows(plain)
    outs = {}
    for name, policy in (("plain", plain), ("component", component)):
        gen = torch.Generator().manual_seed(7)
        got = policy.generate(rows, max_new_tokens=6, temperature=0.9, generator=gen)
        batch = collate_scoring(rows, [g.token_ids or [2] for g in got], None, policy.pad_id)
        policy.model.zero_grad(set_to_none=True)
        logp, ent = policy.score(batch, 0.9)
        (logp.sum() + ent.sum()).backward()
        grads = [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]
        outs[name] = (got, logp.detach(), ent.detach(), grads, policy.forward_tokens)
    (a, lp_a, ent_a, g_a, t_a), (b, lp_b, ent_b, g_b, t_b) = outs["plain"], outs["component"]
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.logprobs for x in a] == [x.logprobs for x in b]
    assert [x.entropies for x in a] == [x.entropies for x in b]
    assert torch.equal(lp_a, lp_b) and torch.equal(ent_a, ent_b) and t_a == t_b > 0
    assert len(g_a) == len(g_b) > 0 and all(
        torch.equal(x, y) for x, y in zip(g_a, g_b, strict=True)
    )
