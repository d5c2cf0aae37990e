"""Episodes packed into one sequence: the same log-probs at every action token, the same
token-mean loss and gradient, as one row per turn; episodes that cannot be packed keep
their per-turn rows."""

from __future__ import annotations

import numpy as np
import torch

from cairn.data.episode import Episode, Step
from cairn.data.tokens import TokenBatch, pack_episode, runs
from cairn.losses import policy_loss


def _step(t: int, prompt: list[int], action: list[int], **kw) -> Step:
    lp = [-0.5 - 0.1 * j for j in range(len(action))]
    return Step(t, "obs", f"a{t}", "act", "act", 0.0, prompt_ids=prompt, action_ids=action,
                logprobs=lp, **kw)  # fmt: skip


def test_pack_episode_worked_example():
    # Turn 0: prompt [1, 2], action [3]; turn 1: prompt [1, 2, 3, 4] (+ env text 4),
    # action [5, 6]. Packed: prompt [1, 2], span [3, 4, 5, 6], env text 4 masked out.
    row = pack_episode([_step(0, [1, 2], [3]), _step(1, [1, 2, 3, 4], [5, 6])])
    assert row.prompt == [1, 2] and row.span == [3, 4, 5, 6]
    assert row.is_action == [True, False, True, True]
    assert row.turn == [0, -1, 1, 1]
    assert row.logprobs == [-0.5, 0.0, -0.5, -0.6]
    assert row.loss_mask == [True, False, True, True] and row.allowed is None


def test_what_cannot_be_packed():
    a, b = _step(0, [1, 2], [3]), _step(1, [1, 2, 3, 4], [5])
    assert pack_episode([a]) is None  # one turn: nothing to share
    assert pack_episode([a, _step(1, [1, 9, 3, 4], [5])]) is None  # history cut / re-rendered
    assert pack_episode([a, _step(1, [1, 2, 3, 4], [5], train_prompt_ids=[7])]) is None
    assert pack_episode([a, _step(1, [1, 2, 3, 4], [5], flags={"crit": True})]) is None
    assert pack_episode([a, b]) is not None


def test_runs_start_again_at_each_cut():
    a, b = _step(0, [1, 2], [3]), _step(1, [1, 2, 3, 4], [5])
    c, d = _step(2, [4, 5], [6]), _step(3, [4, 5, 6, 7], [8])  # c: old turns dropped
    assert runs([a, b, c, d]) == [range(0, 2), range(2, 4)]
    assert runs([a, c]) == [range(0, 1), range(1, 2)] and runs([]) == []


def _chain(policy, obs: list[list[int]], gen, t0: int = 0) -> list[Step]:
    """Turns whose prompts extend each other: prompt + sampled ids + the next text."""
    steps, prompt = [], obs[0]
    for t in range(len(obs)):
        out = policy.generate([prompt], max_new_tokens=3 + t, temperature=1.0, generator=gen)[0]
        steps.append(_step(t0 + t, prompt, out.token_ids))
        steps[-1].logprobs = out.logprobs
        prompt = [*prompt, *out.token_ids, *obs[(t + 1) % len(obs)]]
    return steps


def _episodes(policy, env) -> list[Episode]:
    """Episode 0: three turns whose prompts extend each other (the chat path); episode 1:
    two turns whose second prompt drops the first turn (a history window of 0); episode 2:
    two runs of two extending turns (a context limit cut the history before turn 2)."""
    gen = torch.Generator().manual_seed(0)
    obs = [policy.encode(f"obs: {env.reset(seed=s)[0]} act:") for s in range(3)]
    cut = [_step(0, obs[1], [5, 6]), _step(1, obs[2], [7])]
    twice = _chain(policy, obs[:2], gen) + _chain(policy, obs[1:], gen, t0=2)
    return [Episode(0, 0, 0, _chain(policy, obs, gen)), Episode(1, 0, 0, cut),
            Episode(2, 0, 0, twice)]  # fmt: skip


def _loss_and_grads(policy, tokens: TokenBatch):
    policy.model.zero_grad(set_to_none=True)
    mb = tokens.minibatch(np.arange(len(tokens)))
    logp, ent = policy.score(mb.inputs, 1.0)
    old = mb.old_logprobs - 0.05 * mb.mask  # ratio != 1, so the clip is exercised
    loss, _ = policy_loss(logp, old, mb.advantages, mb.mask, flags=mb.flags, entropy=ent)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
    return mb, logp.detach(), loss.detach(), grads


def test_packed_log_probs_loss_and_gradients_equal_the_per_turn_rows(tiny_policy, compact_env):
    episodes = _episodes(tiny_policy, compact_env)
    adv = np.array([0.5, -1.0, 2.0, 0.3, -0.7, 1.5, 0.2, -0.4, 0.9])  # per step, in order
    turns = TokenBatch.from_episodes(episodes, adv, pad_id=tiny_policy.pad_id)
    packed = TokenBatch.from_episodes(episodes, adv, pad_id=tiny_policy.pad_id, pack=True)
    # Episode 0 one row, episode 1 two (no run), episode 2 two (one per run of 2 turns).
    assert len(turns) == 9 and len(packed) == 5
    mb_t, lp_t, loss_t, g_t = _loss_and_grads(tiny_policy, turns)
    mb_p, lp_p, loss_p, g_p = _loss_and_grads(tiny_policy, packed)
    # Per-turn rows 0-2 are episode 0's turns; in the packed row 0 they are its action
    # tokens, in order: the same log-probs, advantages and behaviour log-probs.
    per_turn = torch.cat([lp_t[i][mb_t.mask[i]] for i in range(3)])
    torch.testing.assert_close(lp_p[0][mb_p.mask[0]], per_turn, atol=1e-5, rtol=0)
    adv_turn = torch.cat([mb_t.advantages[i][mb_t.mask[i]] for i in range(3)])
    torch.testing.assert_close(mb_p.advantages[0][mb_p.mask[0]], adv_turn)
    old_turn = torch.cat([mb_t.old_logprobs[i][mb_t.mask[i]] for i in range(3)])
    torch.testing.assert_close(mb_p.old_logprobs[0][mb_p.mask[0]], old_turn)
    torch.testing.assert_close(lp_p[1:][mb_p.mask[1:]], lp_t[3:][mb_t.mask[3:]], atol=1e-5, rtol=0)
    adv_rest = mb_t.advantages[3:][mb_t.mask[3:]]
    torch.testing.assert_close(mb_p.advantages[1:][mb_p.mask[1:]], adv_rest)
    assert int(mb_p.mask.sum()) == int(mb_t.mask.sum())  # the same tokens are trained
    # Token-mean loss over the same tokens with the same weights: equal, gradients too.
    torch.testing.assert_close(loss_p, loss_t, atol=1e-6, rtol=0)
    for name, g in g_t.items():
        torch.testing.assert_close(g_p[name], g, atol=1e-5, rtol=1e-4, msg=name)
    # The packed episode reads its 3-turn history once: fewer context tokens.
    assert int(mb_p.inputs.attention_mask.sum()) < int(mb_t.inputs.attention_mask.sum())


def test_without_pack_the_batch_has_no_token_level_columns(tiny_policy, compact_env):
    episodes = _episodes(tiny_policy, compact_env)
    tokens = TokenBatch.from_episodes(episodes, np.zeros(9))
    assert tokens.token_advantages is None and tokens.token_mask is None
    assert TokenBatch.from_episodes([], np.zeros(0), pack=True).action_ids == []
