"""Generation ends at any end token of the model's generation config, not only at the
tokenizer's eos (SmolLM2 ends a chat turn with <|im_end|>; Qwen lists two end tokens)."""

from __future__ import annotations

from types import SimpleNamespace

from cairn.policies import HFPolicy
from cairn.policies.hf import end_token_ids


def test_end_token_ids_merge_the_tokenizer_eos_and_the_generation_config_list():
    tok = SimpleNamespace(eos_token_id=2)
    as_list = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[7, 2]))
    as_int = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=5))
    unset = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=None))
    assert end_token_ids(as_list, tok) == {2, 7}
    assert end_token_ids(as_int, tok) == {2, 5}
    assert end_token_ids(unset, tok) == {2}
    assert end_token_ids(SimpleNamespace(), tok) == {2}  # a model without a generation config


def test_a_generation_config_end_token_stops_the_row(tiny_policy, compact_env):
    # The token the untrained model picks first (greedy) becomes an extra end token: the
    # completion must then stop right after it. Before, only tokenizer.eos_token_id stopped.
    obs, _ = compact_env.reset(seed=0)
    prompt = tiny_policy.encode(f"{compact_env.instruction} {obs}")
    first = tiny_policy.generate([prompt], max_new_tokens=6, greedy=True)[0]
    t0 = first.token_ids[0]
    assert t0 != tiny_policy.eos_id and len(first.token_ids) > 1  # else the test proves nothing
    model = tiny_policy.model
    model.generation_config.eos_token_id = [tiny_policy.eos_id, t0]
    policy = HFPolicy(model, tiny_policy.tokenizer)
    again = policy.generate([prompt], max_new_tokens=6, greedy=True)[0]
    assert again.token_ids == [t0]
    assert again.finish == "eos"
