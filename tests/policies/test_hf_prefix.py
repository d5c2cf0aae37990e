"""A prefix that every prompt (or scored context) begins with goes through the model once
(``GenerationOptions.share_prefix``): the same tokens are sampled for a fixed seed, log-probs,
entropies and gradients equal the full forward's within float rounding, and the tokens
pushed through the model fall by the prefix times the rows that share it. Scoring in
buckets of similar length (``bucket_cost``) feeds less padding, with the same
numbers within float rounding."""

from __future__ import annotations

import random

import pytest
import torch

from cairn.data.tokens import collate_scoring
from cairn.envs import make
from cairn.policies import (
    GenerationOptions,
    HFPolicy,
    build_policy,
    local_tokenizer,
    save_model_dir,
)
from cairn.policies import sharing as sharing_mod
from cairn.policies.lora import LoraSpec, apply_lora
from cairn.policies.options import BUCKET_COST_CPU
from cairn.policies.rowplan import common_prefix, partition, shared_runs
from cairn.policies.sharing import SharedPath
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.train.rollout_sections import ModelConfig


def _policy(arch: str = "llama", attn: str = "eager") -> tuple[HFPolicy, list[list[int]]]:
    """The tiny model (seed 0) and 6 prompts: one 30-token instruction, then rooms of
    different lengths (5 distinct, the last repeats the first). ``attn``: the attention
    kernels (pretrained models load with sdpa)."""
    env = make("sokoban", render="compact", max_solution=5)
    tok = local_tokenizer(env, env.instruction)
    config = tiny_config(
        len(tok), arch=arch, pad_token_id=0, eos_token_id=2, attn_implementation=attn
    )
    policy = HFPolicy(build_tiny_model(config, seed=0), tok)
    head = policy.encode(" ".join(["wall box goal up"] * 8))[:30]
    prompts = []
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        prompts.append(head + policy.encode(" ".join(["box"] * seed) + f" obs: {obs} act:"))
    return policy, prompts + prompts[:1]


def _with(policy: HFPolicy, **options) -> HFPolicy:
    """A fresh policy over ``policy``'s model and tokenizer with ``options`` (nothing kept,
    its token count at 0)."""
    return HFPolicy(policy.model, policy.tokenizer, options=GenerationOptions(**options))


def _stages(share: bool = True, least: int = 2):
    options = GenerationOptions(share_prefix=share, min_shared_prefix=least)
    return SharedPath(options).prefix_stages


def test_prefix_stages_worked_numbers():
    rows = [[1, 2, 3, 4, 5], [1, 2, 3, 9]]
    stages = _stages(least=2)
    assert stages(rows, [1, 1]) == [([0, 0], [3])]  # common 3, shortest 4 keeps 1
    assert stages(rows, [2, 2]) == [([0, 0], [2])]  # the shortest row keeps 2 tokens
    assert stages(rows[:1], [1]) == []  # one row: nothing to share
    assert _stages(least=4)(rows, [1, 1]) == []  # 3 < 4: not worth a forward
    assert _stages(share=False, least=2)(rows, [1, 1]) == []
    # Groups: rows 0 and 1 agree on all but their last token, row 2 only on the first two.
    rows = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7], [1, 2, 8, 9, 9, 9]]
    # Everyone's 2 tokens once; then [3, 4, 5] once for rows 0-1 (saves 3 tokens) and
    # [8, 9, 9] for row 2; the rows' last tokens after.
    assert stages(rows, [1, 1, 1]) == [([0, 0, 0], [2]), ([0, 0, 1], [5, 5])]
    # Row 1 keeps its last 2 tokens: rows 0-1 share [3, 4] (saves 2), row 0 feeds its 5.
    assert stages(rows, [1, 2, 1]) == [([0, 0, 0], [2]), ([0, 0, 1], [4, 5])]
    # At 3, everyone's 2 tokens are not worth a forward: rows 0-1 share [1, 2, 3, 4].
    assert _stages(least=3)(rows, [1, 2, 1]) == [([0, 0, 1], [4, 5])]
    assert _stages(least=5)(rows, [1, 2, 1]) == []  # saves 4 < 5
    # At 4, the 2 common tokens are not worth a forward; rows 0-1 sharing 5 tokens are.
    assert _stages(least=4)(rows, [1, 1, 1]) == [([0, 0, 1], [5, 5])]
    assert _stages(least=6)(rows, [1, 1, 1]) == []
    # The common prefix is that of the smallest and largest rows in lexicographic order.
    assert common_prefix([(1, 2, 3, 4), (1, 5), (1, 2, 9)]) == 1
    assert common_prefix([(7, 8), (7, 8, 9)]) == 2  # one row is a prefix of the other
    assert common_prefix([(4,), (5,)]) == 0


def test_shared_runs_worked_numbers():
    # Two tasks' turns: task A's three rows share [1, 2, 3, 4], two of them also [5, 6];
    # task B's two rows share [1, 7, 8]; everyone shares [1] (floor 1).
    a1, a2, a3 = [1, 2, 3, 4, 5, 6, 9], [1, 2, 3, 4, 5, 6, 8], [1, 2, 3, 4, 7]
    b1, b2 = [1, 7, 8, 2], [1, 7, 8, 3]
    rows = [a1, b1, a2, b2, a3]
    # A as one run saves 2 x 3 = 6 (a1, a2 alone would save 5 + 0 for a3 beside them);
    # B saves 1 x 2 = 2.
    assert shared_runs(rows, 1) == ([0, 1, 0, 1, 0], [4, 3])
    # Equal rows share all they have; a row alone shares its own tokens.
    assert shared_runs([[1, 2], [1, 2], [3]], 0) == ([0, 0, 1], [2, 1])
    # Nothing shared beyond the floor: every row alone.
    assert shared_runs([[1, 2], [1, 3]], 1) == ([0, 1], [2, 2])
    assert shared_runs([], 0) == ([], [])


@pytest.mark.parametrize("seed", range(40))
def test_shared_runs_save_the_most_of_all_partitions(seed):
    """Against every partition of up to 6 rows into groups, each sharing its rows' common
    prefix (what ``shared_runs`` may choose from, runs of the sorted order or not)."""
    rng = random.Random(seed)
    rows = [[rng.randint(1, 3) for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(1, 6))]
    floor = rng.randint(0, 1)

    def saving(groups):
        return sum(
            (len(g) - 1) * max(0, common_prefix([rows[i] for i in g]) - floor) for g in groups
        )

    group, cut = shared_runs(rows, floor)
    groups = [[r for r, g in enumerate(group) if g == k] for k in range(len(cut))]
    for g, c in zip(groups, cut, strict=True):  # each group shares its cut, beyond the floor
        assert c == common_prefix([rows[i] for i in g])
        assert len(g) == 1 or c > floor
    assert saving(groups) == max(saving(p) for p in _set_partitions(list(range(len(rows)))))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("greedy", [False, True])
def test_generation_samples_the_same_tokens(greedy, attn):
    policy, prompts = _policy(attn=attn)
    runs = {}
    for share in (False, True):
        policy = _with(policy, share_prefix=share)
        outs = policy.generate(
            prompts, max_new_tokens=10, temperature=0.9, greedy=greedy,
            generator=torch.Generator().manual_seed(4),
        )  # fmt: skip
        runs[share] = (outs, policy.forward_tokens)
    (full, full_tokens), (shared, shared_tokens) = runs[False], runs[True]
    assert [o.token_ids for o in shared] == [o.token_ids for o in full]
    assert [o.finish for o in shared] == [o.finish for o in full]
    for a, b in zip(shared, full, strict=True):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs))
        torch.testing.assert_close(torch.tensor(a.entropies), torch.tensor(b.entropies))
    # 5 distinct prompts share exactly their 30-token head (the rooms start with "obs" or
    # "box"): the head goes through the model once instead of 5 times.
    assert full_tokens - shared_tokens == 4 * 30


def _batch(policy: HFPolicy, prompts: list[list[int]]):
    """8 rows on the 6 prompts (5 distinct): responses of 1 to 5 tokens; rows 0 and 5, and
    rows 6 and 7, share a context, so 6 distinct contexts."""
    words = ["up", "down", "left", "right", "box"]
    acts = [policy.encode(" ".join(words[: 1 + (i * 3) % 5])) for i in range(8)]
    ctx = [prompts[i % 6] for i in range(8)]
    ctx[7], acts[7] = ctx[6], acts[6]
    return collate_scoring(ctx, acts, None, policy.pad_id)


def _scores_and_grads(policy: HFPolicy, batch, share: bool, bucket_cost: int | None = None):
    policy = _with(policy, share_prefix=share, bucket_cost=bucket_cost)
    policy.model.zero_grad(set_to_none=True)
    logp, ent = policy.score(batch, 0.8, True)
    m = batch.action_mask
    w = torch.linspace(0.5, 1.5, m.numel()).view(m.shape)
    ((logp * w)[m].sum() + 0.1 * (ent * w)[m].sum()).backward()
    grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
    return logp.detach() * m, ent.detach() * m, grads, policy.forward_tokens


def _assert_same(policy: HFPolicy, batch) -> tuple[int, int]:
    new_lp, new_ent, new_g, new_tokens = _scores_and_grads(policy, batch, share=True)
    old_lp, old_ent, old_g, old_tokens = _scores_and_grads(policy, batch, share=False)
    torch.testing.assert_close(new_lp, old_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(new_ent, old_ent, atol=1e-5, rtol=0)
    assert new_g.keys() == old_g.keys() and new_g
    for name, g in new_g.items():
        torch.testing.assert_close(g, old_g[name], atol=1e-5, rtol=1e-5, msg=name)
    return old_tokens, new_tokens


@pytest.mark.parametrize(
    ("arch", "attn"), [("llama", "eager"), ("qwen2", "eager"), ("llama", "sdpa")]
)
def test_scoring_equals_the_full_forward_values_and_gradients(arch, attn):
    policy, prompts = _policy(arch, attn)
    batch = _batch(policy, prompts)
    old, new = _assert_same(policy, batch)
    assert batch.input_ids.shape[0] == 6 and old - new == _saved(prompts)


def _saved(prompts: list[list[int]]) -> int:
    """Tokens sharing saves on ``_batch``: its 6 distinct contexts share the 30-token
    head, which runs once, not 6 times; two of them (rows 0 and 6) extend prompt 0 with
    different actions, and all but the last token of that prompt runs once, not twice;
    the rooms of 3 and 4 boxes begin with 3 equal "box" tokens, those of 1 and 2 with 1,
    and each such pair runs them once (``shared_runs``)."""
    return 5 * 30 + (len(prompts[0]) - 1 - 30) + 3 + 1


@pytest.mark.parametrize("bucket_cost", [None, BUCKET_COST_CPU])
def test_turns_of_one_task_share_its_instruction_values_and_gradients_equal(bucket_cost):
    """Multi-turn rows: two tasks, each a 12-token question after the 30-token head, then
    turns of different histories. Each task's question runs once however its turns differ;
    values and gradients (LoRA) equal the full forward's."""
    policy, prompts = _policy()
    apply_lora(policy.model, LoraSpec(r=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    head = prompts[0][:30]
    question = [policy.encode(" ".join(["goal"] * 12)), policy.encode(" ".join(["wall"] * 12))]
    history = [policy.encode(" ".join(["up"] * n + ["left"])) for n in range(3)]
    ctx = [head + question[t] + h for h in history for t in (0, 1)]
    acts = [policy.encode(w) for w in ("down", "right", "box", "up", "left", "down")]
    batch = collate_scoring(ctx, acts, None, policy.pad_id)
    new_lp, new_ent, new_g, new_tokens = _scores_and_grads(policy, batch, True, bucket_cost)
    old_lp, old_ent, old_g, old_tokens = _scores_and_grads(policy, batch, False, bucket_cost)
    torch.testing.assert_close(new_lp, old_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(new_ent, old_ent, atol=1e-5, rtol=0)
    assert new_g.keys() == old_g.keys() and any("lora" in n for n in new_g)
    for name, g in new_g.items():
        torch.testing.assert_close(g, old_g[name], atol=1e-5, rtol=1e-5, msg=name)
    # the head once instead of 6 times and each question once instead of 3 times; the
    # "up" that turns 2 and 3 of a task begin their histories with runs in both (one level
    # of groups: the question shared by 3 rows saves more than "up" by 2)
    assert old_tokens - new_tokens == 5 * 30 + 2 * 2 * 12


def test_scoring_rows_scored_from_inside_their_action():
    # Packed episodes score only their action tokens (``TokenBatch.minibatch``): a row
    # whose first scored column is later keeps fewer tokens for the last stage.
    policy, prompts = _policy()
    batch = _batch(policy, prompts)
    first = batch.action_mask.int().argmax(1)
    long = batch.action_mask.sum(1) > 1
    batch.action_mask[long.nonzero().squeeze(1), first[long]] = False
    _assert_same(policy, batch)


def test_scoring_with_lora_adapters():
    policy, prompts = _policy()
    policy = policy.with_model(apply_lora(policy.model, LoraSpec(r=4, alpha=8)))
    with torch.no_grad():  # B starts at zero: give the adapters an effect to differentiate
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    old, new = _assert_same(policy, _batch(policy, prompts))
    assert old - new == _saved(prompts)


@pytest.mark.parametrize("lora", [False, True])
def test_gradient_checkpointing_scores_the_whole_contexts(lora):
    # A recomputed layer would append its keys to the shared cache twice: no sharing then.
    policy, prompts = _policy()
    policy.model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    if lora:  # as build_policy does: checkpointing first, then the adapters
        policy = policy.with_model(apply_lora(policy.model, LoraSpec(r=4, alpha=8)))
    policy.model.train()
    old, new = _assert_same(policy, _batch(policy, prompts))
    assert old == new


def test_pretrained_models_share_the_prefix_the_tiny_default_does_not(tmp_path):
    # The tiny default's recorded runs stay bit-identical; a model loaded by path shares.
    policy, _ = _policy()
    env = make("sokoban", render="compact", max_solution=5)
    folder = save_model_dir(policy, tmp_path / "tiny")
    loaded = build_policy(ModelConfig(path=str(folder)), env, env.instruction, seed=0)
    assert loaded.options.share_prefix and loaded.options.drop_finished
    assert loaded.options.bucket_cost == BUCKET_COST_CPU
    assert isinstance(loaded.sharing, SharedPath)
    default = build_policy(ModelConfig(), env, env.instruction, seed=0)
    assert not default.options.share_prefix and not default.options.drop_finished
    assert default.options.bucket_cost is None
    assert default.options == GenerationOptions()  # the plain path, float32
    assert not isinstance(default.sharing, SharedPath)


def test_generation_groups_prompts_that_differ_in_their_last_token_with_lora():
    # Two prompts that agree on all but their last token share that part (the second
    # stage), through a PEFT wrapper: same tokens, log-probs within rounding.
    base, prompts = _policy()
    model = apply_lora(base.model, LoraSpec(r=4, alpha=8))
    rows = [prompts[1], [*prompts[1][:-1], prompts[2][-1]], prompts[3]]
    runs = {}
    for share in (False, True):
        options = GenerationOptions(share_prefix=share, min_shared_prefix=4)
        policy = HFPolicy(model, base.tokenizer, options=options)
        assert len(SharedPath(options).prefix_stages(rows, [1, 1, 1])) == (2 if share else 0)
        outs = policy.generate(
            rows, max_new_tokens=6, temperature=0.9, generator=torch.Generator().manual_seed(2)
        )
        runs[share] = ([o.token_ids for o in outs], [o.logprobs for o in outs])
    assert runs[True][0] == runs[False][0]
    for a, b in zip(runs[True][1], runs[False][1], strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b))


# -- buckets of similar length (``bucket_cost``) ----------------------------------------------
def test_partition_worked_numbers():
    # Longest first: rows 0 (10), 2 (9), 3 (3), 1 (2). At 4 tokens a call, [0, 2] and [3, 1]
    # feed 2 x 10 + 2 x 3 + 2 x 4 = 34; one bucket 4 x 10 + 4 = 44; each row alone 40.
    assert partition([10, 2, 9, 3], 4) == [[0, 2], [3, 1]]
    assert partition([10, 2, 9, 3], 0) == [[0], [2], [3], [1]]  # free calls: no padding
    assert partition([10, 2, 9, 3], 100) == [[0, 2, 3, 1]]  # dear calls: one batch
    assert partition([5, 5, 5], 0) == [[0, 1, 2]]  # a tie goes to fewer calls
    assert partition([7], 8) == [[0]]


def _set_partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1 :]]


@pytest.mark.parametrize("seed", range(20))
def test_partition_is_the_best_of_all_partitions(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 7))]
    cost = rng.choice([0, 3, 16, 64])

    def fed(part: list[list[int]]) -> int:
        return sum(len(b) * max(lengths[i] for i in b) + cost for b in part)

    got = partition(lengths, cost)
    assert sorted(i for b in got for i in b) == list(range(len(lengths)))
    assert fed(got) == min(fed(p) for p in _set_partitions(list(range(len(lengths)))))


def _record_calls(policy: HFPolicy) -> list[tuple[int, int, int]]:
    """(rows, columns fed, columns attended) of every decoder call from now on."""
    calls: list[tuple[int, int, int]] = []

    def hook(module, args, kwargs):
        rows, width = kwargs["input_ids"].shape
        calls.append((rows, width, kwargs["attention_mask"].shape[1]))

    policy.model.get_decoder().register_forward_pre_hook(hook, with_kwargs=True)
    return calls


def _assert_close(a, b) -> None:
    torch.testing.assert_close(a[0], b[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(a[1], b[1], atol=1e-5, rtol=0)
    assert a[2].keys() == b[2].keys() and a[2]
    for name, g in a[2].items():
        torch.testing.assert_close(g, b[2][name], atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("share", [False, True])
def test_buckets_feed_no_padding_and_give_the_same_numbers(share, attn):
    policy, prompts = _policy(attn=attn)
    batch = _batch(policy, prompts)
    calls = _record_calls(policy)
    one = _scores_and_grads(policy, batch, share)
    padded = sum(rows * width for rows, width, _ in calls)
    assert padded > one[3]  # one batch feeds padding: the contexts differ in length
    calls.clear()
    # calls are free: each bucket holds rows of one length
    bucketed = _scores_and_grads(policy, batch, share, bucket_cost=0)
    _assert_close(bucketed, one)
    assert bucketed[3] == one[3]  # the same tokens, without the padding
    assert sum(rows * width for rows, width, _ in calls) == bucketed[3]
    calls.clear()  # calls too dear to split: the one batch's calls
    _assert_close(_scores_and_grads(policy, batch, share, bucket_cost=10**6), one)
    assert sum(rows * width for rows, width, _ in calls) == padded


def test_buckets_under_gradient_checkpointing_feed_whole_contexts():
    policy, prompts = _policy()
    policy.model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    policy.model.train()
    batch = _batch(policy, prompts)
    one = _scores_and_grads(policy, batch, share=True)
    calls = _record_calls(policy)
    bucketed = _scores_and_grads(policy, batch, share=True, bucket_cost=0)
    _assert_close(bucketed, one)
    assert len(calls) > 1 and all(width == attended for _, width, attended in calls)  # no cache
    assert sum(rows * width for rows, width, _ in calls) == bucketed[3] == one[3]


def test_a_cache_that_can_only_be_reordered_in_place_is_not_split(monkeypatch):
    # Rows of a cache of another class (sliding windows...) are reordered in place, so only
    # one batch may continue it: each stage after the first runs as one batch, as without
    # buckets.
    policy, prompts = _policy()
    batch = _batch(policy, prompts)
    calls = _record_calls(policy)
    one = _scores_and_grads(policy, batch, share=True)
    n_calls = len(calls)
    monkeypatch.setattr(sharing_mod, "plain_layers", lambda cache: None)
    calls.clear()
    _assert_close(_scores_and_grads(policy, batch, share=True, bucket_cost=0), one)
    assert len(calls) == n_calls == 3  # the head, the groups, the contexts' own tokens


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("greedy", [False, True])
def test_generation_prefills_in_buckets_the_same_tokens_with_less_padding(greedy, attn):
    """A generate call's prompts, after the head they share, run in buckets of similar
    length whose caches are joined for decoding: the same tokens are sampled with the same
    log-probs and entropies as from one left-padded batch, and less padding is fed."""
    policy, prompts = _policy(attn=attn)
    calls = _record_calls(policy)
    runs = {}
    for cost in (None, 0):  # one batch; buckets of one length each (calls free)
        calls.clear()
        p = _with(policy, share_prefix=True, bucket_cost=cost)
        outs = p.generate(
            prompts, max_new_tokens=10, temperature=0.9, greedy=greedy,
            generator=torch.Generator().manual_seed(4),
        )  # fmt: skip
        runs[cost] = (outs, sum(rows * width for rows, width, _ in calls), p.forward_tokens)
    (one, one_fed, one_tokens), (bucketed, fed, tokens) = runs[None], runs[0]
    assert [o.token_ids for o in bucketed] == [o.token_ids for o in one]
    assert [o.finish for o in bucketed] == [o.finish for o in one]
    for a, b in zip(bucketed, one, strict=True):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs))
        torch.testing.assert_close(torch.tensor(a.entropies), torch.tensor(b.entropies))
    assert tokens == one_tokens and fed < one_fed  # the same tokens, less padding
    # The 5 distinct prompts differ in length after their shared head: one batch pads
    # each to the longest, buckets of one length pad none (the decode steps feed a token
    # per running row either way).
    prefill = [width for _, width, _ in calls if width > 1]
    assert len(prefill) == 1 + len({len(p) for p in prompts})  # the head, then each length
