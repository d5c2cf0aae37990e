"""Generation that does less work: the prefill runs the head on the last position only, and
finished rows can be dropped from the batch, without changing what is sampled."""

from __future__ import annotations

import pytest
import torch

from cairn.envs import make
from cairn.policies import GenerationOptions, HFPolicy, local_tokenizer
from cairn.policies.modelio import cache_kwarg
from cairn.policies.sampling import Rows, multinomial
from cairn.policies.tiny import build_tiny_model, tiny_config

# Words the random tiny model writes often: as stop strings they end most rows early.
STOPS = ["pul:free", "tips:", "bul:free", "pl:wall", "#", "+", "bl:wall", "tc-5"]


@pytest.fixture
def llama() -> tuple[HFPolicy, list[list[int]]]:
    """The tiny Llama (seed 0) and 12 prompts: 8 rooms of different lengths, then the first
    4 again (rows that share a prompt share its prefill)."""
    env = make("sokoban", render="compact", max_solution=5)
    tok = local_tokenizer(env, env.instruction)
    config = tiny_config(len(tok), arch="llama", pad_token_id=0, eos_token_id=2)
    policy = HFPolicy(build_tiny_model(config, seed=0), tok)
    prompts = []
    for seed in range(8):
        obs, _ = env.reset(seed=seed)
        prompts.append(policy.encode(" ".join(["box"] * (seed % 4)) + f" obs: {obs} act:"))
    return policy, prompts + prompts[:4]


def _with(policy: HFPolicy, **options) -> HFPolicy:
    """A fresh policy over the same model and tokenizer with ``options`` (its token count
    starts at 0)."""
    return HFPolicy(policy.model, policy.tokenizer, options=GenerationOptions(**options))


def test_generation_is_unchanged_for_a_fixed_seed(llama):
    # Tokens and log-probs recorded with the generator before the prefill kept one position
    # (every position's logits then): the same seed samples the same completions.
    policy, prompts = llama
    outs = policy.generate(
        prompts, max_new_tokens=12, temperature=0.7, generator=torch.Generator().manual_seed(5)
    )
    assert [o.token_ids for o in outs[:3]] == [
        [78, 11, 107, 28, 113, 91, 46, 37, 68, 100, 45, 29],
        [50, 50, 26, 17, 81, 98, 86, 71, 35, 55, 119, 105],
        [20, 41, 96, 20, 78, 6, 64, 21, 101, 2],
    ]
    assert outs[11].token_ids == [107, 11, 24, 2]  # the 4th room again, its own draws
    assert [o.finish for o in outs].count("eos") == 2
    recorded = [-4.940767, -5.137574, -4.963772, -5.34413, -4.861436, -4.41625]
    torch.testing.assert_close(
        torch.tensor(outs[0].logprobs[:6]), torch.tensor(recorded), atol=1e-5, rtol=0
    )


def test_prefill_computes_the_last_positions_logits_only(llama):
    policy, prompts = llama
    shapes = []
    forward = policy.model.forward

    def spy(*args, **kwargs):
        out = forward(*args, **kwargs)
        shapes.append((tuple(kwargs["input_ids"].shape), tuple(out.logits.shape)))
        return out

    policy.model.forward = spy
    policy.generate(prompts, max_new_tokens=2, generator=torch.Generator().manual_seed(0))
    (u, width), logits = shapes[0]
    assert u == 8 and width > 1  # 8 distinct prompts, left-padded to a common width
    assert logits == (8, 1, policy.model.config.vocab_size)  # not (8, width, V)
    assert shapes[1][0] == (12, 1)  # then one token per row of the expanded batch


def test_dropping_finished_rows_samples_the_same_tokens_with_less_work(llama):
    policy, prompts = llama
    runs = {}
    for drop in (False, True):
        policy = _with(policy, drop_finished=drop)
        outs = policy.generate(
            prompts,
            max_new_tokens=16,
            temperature=2.0,
            stop=STOPS,
            generator=torch.Generator().manual_seed(5),
        )
        runs[drop] = (outs, policy.forward_tokens)
    (kept, kept_tokens), (dropped, dropped_tokens) = runs[False], runs[True]
    # 12 rows end after 1 to 7 tokens: 7 or 8 of them are done by the third token.
    assert sorted(len(o.token_ids) for o in kept) == [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 7]
    assert [o.token_ids for o in dropped] == [o.token_ids for o in kept]
    assert [o.finish for o in dropped] == [o.finish for o in kept]
    for a, b in zip(dropped, kept, strict=True):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs))
    # Prefill 8 distinct prompts (188 tokens), then 6 decode steps for the 7-token row:
    # 12 rows each when kept (188 + 72 = 260); dropped, 12 rows, then 6 (half are done
    # after 2 tokens), then 1 (after 3) for the last 4 steps: 188 + 12 + 6 + 4 = 210.
    assert (kept_tokens, dropped_tokens) == (260, 210)


def test_multinomial_on_a_subset_draws_what_the_whole_batch_would():
    probs = torch.softmax(torch.randn(6, 50, generator=torch.Generator().manual_seed(0)), -1)
    full = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(9)).squeeze(-1)
    rows = torch.tensor([1, 4, 5])
    part = multinomial(probs[rows], torch.Generator().manual_seed(9), Rows(rows, total=6))
    assert part.tolist() == full[rows].tolist()
    whole = multinomial(probs, torch.Generator().manual_seed(9), Rows(torch.arange(6), 6))
    assert whole.tolist() == full.tolist()


def test_inverse_cdf_draws_each_token_with_its_probability():
    # 3 rows x 20000 draws: the frequencies match the probabilities, a zero never drawn.
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 1.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    toks = multinomial(probs.repeat(20000, 1), torch.Generator().manual_seed(0), None, True)
    freq = torch.stack([torch.bincount(toks[r::3], minlength=4) for r in range(3)]) / 20000
    torch.testing.assert_close(freq, probs, atol=0.01, rtol=0)
    assert freq[0, 1] == 0 and freq[1].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_inverse_cdf_on_a_subset_draws_what_the_whole_batch_would():
    probs = torch.softmax(torch.randn(6, 50, generator=torch.Generator().manual_seed(0)), -1)
    full = multinomial(probs, torch.Generator().manual_seed(9), None, True)
    rows = torch.tensor([1, 4, 5])
    part = multinomial(probs[rows], torch.Generator().manual_seed(9), Rows(rows, 6), True)
    assert part.tolist() == full[rows].tolist()


def test_inverse_cdf_never_draws_past_the_last_token_with_mass(monkeypatch):
    # u x mass rounded up to the whole mass would count every token (index 4 here): the
    # last token with mass is drawn instead. u is forced to 1.0 to stand for that rounding.
    one = torch.ones(1, dtype=torch.float64)
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: one)
    probs = torch.tensor([[0.25, 0.75, 0.0, 0.0]])
    assert multinomial(probs, torch.Generator(), None, True).tolist() == [1]


def test_the_kv_cache_goes_under_the_name_the_model_takes():
    # transformers 5.2x names it ``cache``; 5.17 (the GPU check's machine) past_key_values.
    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):
            return input_ids

    assert cache_kwarg(Old()) == "past_key_values"
    assert cache_kwarg(New()) == "cache"


def test_rows_dropped_right_after_the_shared_prefill(llama):
    # Odd rows choose between two one-token actions and end at the first token: half the
    # batch is done at step 0, where the cache is also expanded from 8 prefills to 12 rows.
    policy, prompts = llama
    choices = [["up", "down"] if i % 2 else None for i in range(12)]
    runs = {}
    for drop in (False, True):
        policy = _with(policy, drop_finished=drop)
        outs = policy.generate(
            prompts, max_new_tokens=6, choices=choices, generator=torch.Generator().manual_seed(3)
        )
        runs[drop] = ([o.token_ids for o in outs], [o.logprobs for o in outs])
        runs[drop, "tokens"] = policy.forward_tokens
    assert runs[True] == runs[False]
    assert [len(t) for t in runs[True][0]] == [6, 1, 6, 1, 3, 1, 6, 1, 6, 1, 6, 1]
    # 188 prefill tokens + 5 decode steps: 12 rows each kept (60); dropped, the 6 free rows
    # (one ends after 3 tokens, too few to drop again): 6 x 5 = 30.
    assert (runs[False, "tokens"], runs[True, "tokens"]) == (248, 218)
