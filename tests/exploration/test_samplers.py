"""SGE strategies, SSRL self-search and LADDER variants on the tiny policy."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

from cairn.agent import PromptBuilder
from cairn.data.tokens import TokenBatch, collate_scoring
from cairn.envs import make
from cairn.envs.antiderivative import parse_candidate
from cairn.exploration.self_search import SelfSearch
from cairn.exploration.sge import OUTCOME_WORDS, SGEStrategy
from cairn.exploration.variants import Curriculum, Node, SymbolicVariants, build_tree
from cairn.policies import HFPolicy, local_tokenizer
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.rollout import EnvPool, RolloutContext, RolloutSettings


def _ctx(policy, factory, **settings) -> RolloutContext:
    return RolloutContext(
        policy, EnvPool(factory), PromptBuilder(), RolloutSettings(**settings),
        torch.Generator().manual_seed(0),
    )  # fmt: skip


# -- SGE ---------------------------------------------------------------------------------------
def test_sge_episodes_start_with_a_strategy_the_actions_see(policy):
    factory = lambda: make("sokoban", render="compact", max_solution=4, max_steps=4)  # noqa: E731
    ctx = _ctx(policy, factory, restrict_to_admissible=True, temperature=1.0)
    sge = SGEStrategy(plan_temperature=2.0, plan_tokens=3)
    eps = sge.collect(ctx, [7, 8], 3)
    assert len(eps) == 6 and [e.group for e in eps] == [0, 0, 0, 1, 1, 1]
    for e in eps:
        first = e.steps[0]
        assert first.anchor[0] == "strategy" and first.reward == 0.0
        assert [s.t for s in e.steps] == list(range(len(e.steps)))
        shown = policy.decode(e.steps[1].prompt_ids)
        assert f"<strategy> {first.action} </strategy>" in shown or not first.action
    # behaviour log-probs of a strategy are at the action temperature: ratio 1 now
    s = eps[0].steps[0]
    logp, _ = policy.score(collate_scoring([s.prompt_ids], [s.action_ids], pad_id=policy.pad_id))
    assert np.allclose(logp[0, -len(s.action_ids) :].tolist(), s.logprobs, atol=1e-5)
    # reflection: the next strategy prompt lists these strategies and their outcomes
    block = sge.reflection_block(ctx.envs.take(1)[0].instruction)
    assert block.count("<strategy>") == 3 and ("failure" in block or "success" in block)
    state = sge.state_dict()
    again = SGEStrategy(plan_temperature=2.0, plan_tokens=3)
    again.load_state_dict(state)
    assert again.reflection_block(ctx.envs.take(1)[0].instruction) == block


def test_sge_bad_options():
    with pytest.raises(ValueError, match="SGE"):
        SGEStrategy(plan_temperature=0)


# -- SSRL --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qa_policy():
    env = make("search_qa", kb_seed=0, kb_size=6, hops=[1], max_steps=3)
    env.reset(seed=0)
    tok = local_tokenizer(env, env.instruction)
    cfg = tiny_config(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return HFPolicy(build_tiny_model(cfg, seed=0), tok)


def test_self_search_masks_its_own_information(qa_policy):
    factory = lambda: make("search_qa", kb_seed=0, kb_size=6, hops=[1], max_steps=3)  # noqa: E731
    ctx = _ctx(qa_policy, factory, restrict_to_admissible=False, max_new_tokens=4)
    # every action counts as a search here, so every turn self-searches
    eps = SelfSearch(max_info_tokens=5, search_pattern=r"^(.*)$").collect(ctx, [1], 2)
    open_id = qa_policy.encode("<information>")[0]
    for e in eps:
        for s, nxt in zip(e.steps, e.steps[1:], strict=False):
            k = s.loss_mask.index(False)  # action tokens, then the information block
            assert s.action_ids[k] == open_id
            assert s.loss_mask == [True] * k + [False] * (len(s.action_ids) - k)
            assert len(s.logprobs) == len(s.action_ids)
            written = qa_policy.decode(s.action_ids[k + 1 :]).removesuffix("</information>")
            assert nxt.observation == written.strip()  # the next prompt shows that text
    tokens = TokenBatch.from_episodes(eps, np.zeros(sum(len(e.steps) for e in eps)))
    mb = tokens.minibatch(np.arange(len(tokens)))
    assert (mb.mask.sum(1) < mb.inputs.action_mask.sum(1)).all()  # information not trained


def test_self_search_leaves_other_actions_alone(qa_policy):
    factory = lambda: make("search_qa", kb_seed=0, kb_size=6, hops=[1], max_steps=2)  # noqa: E731
    ctx = _ctx(qa_policy, factory, restrict_to_admissible=False, max_new_tokens=4)
    eps = SelfSearch(search_pattern=r"^never(x)$").collect(ctx, [1], 2)
    assert all(s.loss_mask is None for e in eps for s in e.steps)
    with pytest.raises(ValueError, match="one group"):
        SelfSearch(search_pattern="search")


# -- LADDER ------------------------------------------------------------------------------------
def test_symbolic_variants_are_smaller_and_integrable():
    gen = SymbolicVariants()
    out = gen.variants("3*x**2 + 2*x", 10, np.random.default_rng(0))
    # one term of the sum (3*x**2, 2*x), a coefficient set to 1 (x**2 + 2*x, 3*x**2 + x),
    # or the power lowered inside a term (3*x + 2*x = 5*x): all elementary, all smaller
    assert set(out) == {"3*x**2", "2*x", "x**2 + 2*x", "3*x**2 + x", "5*x"}
    x = sp.Symbol("x", real=True)
    size = sp.count_ops(parse_candidate("3*x**2 + 2*x"))
    assert all(sp.count_ops(parse_candidate(v)) < size for v in out)
    assert all(not sp.integrate(parse_candidate(v), x).has(sp.Integral) for v in out)


def test_variant_tree_and_easy_to_hard_stages():
    nodes = build_tree(SymbolicVariants(), ["3*x**2 + 2*x"], 2, 2, np.random.default_rng(0))
    assert nodes[0] == Node("3*x**2 + 2*x", 0, -1)
    assert {n.depth for n in nodes} == {0, 1, 2}
    assert all(nodes[n.parent].depth == n.depth - 1 for n in nodes[1:])
    assert len({n.problem for n in nodes}) == len(nodes)
    cur = Curriculum(SymbolicVariants(), nodes, advance_at=0.5, stage_iterations=3)
    deepest = [i for i, n in enumerate(nodes) if n.depth == 2]
    assert cur.stage_nodes() == deepest  # stage 0: the easiest only
    assert cur.observe([])["ladder/stage"] == 0.0
    cur.observe([]), cur.observe([])  # three iterations without success: next stage anyway
    assert cur.stage == 1 and set(cur.stage_nodes()) == {i for i, n in enumerate(nodes) if n.depth}
    env = cur.pool.take(1)[0]
    _, info = env.reset(seed=deepest[0])
    assert info["integrand"] == str(parse_candidate(nodes[deepest[0]].problem))
    with pytest.raises(ValueError, match="out of range"):
        cur.env(len(nodes))


def test_sge_reflection_words_are_in_a_word_level_vocabulary():
    """The tiny default's word tokenizer learns SGE's outcome words when the reflection is
    on (else the model would read them as <unk>), and only then: other runs keep their
    vocabulary."""
    from cairn.policies import build_policy
    from cairn.train.config import load_config
    from cairn.train.settings import prompt_words

    def tokenizer(*sets: str):  # as cairn.train.parts.build_parts builds it
        cfg = load_config("sokoban_sge", list(sets))
        probe = make("sokoban", **cfg.env.options)
        probe.reset(seed=0)
        instruction, words = cfg.agent.instruction or probe.instruction, prompt_words(cfg)
        policy = build_policy(cfg.model, probe, instruction, cfg.seed, None, words)
        return policy.tokenizer

    sge = tokenizer()
    ids = sge(" ".join(OUTCOME_WORDS), add_special_tokens=False)["input_ids"]
    assert sge.unk_token_id not in ids and len(ids) == 2
    plain = tokenizer("rollout.strategy=group", "rollout.options={}")  # the preset says sge
    no_reflection = tokenizer("rollout.options.reflection=false")
    assert plain.get_vocab() == no_reflection.get_vocab() != sge.get_vocab()
    assert set(sge.get_vocab()) - set(plain.get_vocab()) == set(OUTCOME_WORDS)
