"""SGE and SSRL as registered rollout strategies (``rollout.strategy: sge`` / ``ssrl``): built
by name, options checked, state checkpointed, prompt words declared."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cairn._errors import ConfigError
from cairn.agent import PromptBuilder
from cairn.envs import make
from cairn.exploration import Exploration
from cairn.exploration.self_search import SelfSearch
from cairn.exploration.sge import OUTCOME_WORDS, SGEStrategy
from cairn.policies import HFPolicy, local_tokenizer
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.rollout import EnvPool, RolloutContext, RolloutSettings, make_strategy
from cairn.train.config import load_config
from cairn.train.settings import prompt_words

SGE_NEW = ["rollout.strategy=sge", "rollout.options={plan_temperature: 2.0, plan_tokens: 3}"]
SSRL_NEW = ["rollout.strategy=ssrl", "rollout.options={max_info_tokens: 5}"]


def _sokoban():
    return make("sokoban", render="compact", max_solution=4, max_steps=4)


def _qa():
    return make("search_qa", kb_seed=0, kb_size=6, hops=[1], max_steps=3)


def _ctx(policy, factory, **settings) -> RolloutContext:
    return RolloutContext(
        policy, EnvPool(factory), PromptBuilder(), RolloutSettings(**settings),
        torch.Generator().manual_seed(0),
    )  # fmt: skip


def _strategy(cfg):
    """The rollout strategy as the trainer makes it."""
    return make_strategy(cfg.rollout.strategy, **cfg.rollout.options)


def _explore(cfg, tmp_path: Path) -> Exploration:
    return Exploration(
        cfg.exploration, policy=None, prompt=None, env_factory=None, run_dir=tmp_path, seed=0
    )


@pytest.fixture(scope="module")
def qa_policy() -> HFPolicy:
    env = _qa()
    env.reset(seed=0)
    tok = local_tokenizer(env, env.instruction)
    cfg = tiny_config(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return HFPolicy(build_tiny_model(cfg, seed=0), tok)


# -- built by name, collecting on a tiny env ---------------------------------------------------
def test_sge_is_built_by_name_and_plans_before_acting(policy):
    sge = make_strategy("sge", plan_temperature=2.0, plan_tokens=3)
    assert isinstance(sge, SGEStrategy) and (sge.plan_temperature, sge.plan_tokens) == (2.0, 3)
    eps = sge.collect(_ctx(policy, _sokoban, temperature=1.0), [7, 8], 3)
    # 2 tasks x G = 3 episodes, grouped by task; every episode opens with its plan at t = 0
    assert [e.group for e in eps] == [0, 0, 0, 1, 1, 1]
    assert [e.task for e in eps] == [7, 7, 7, 8, 8, 8]
    for e in eps:
        assert e.steps[0].anchor[0] == "strategy" and e.steps[0].reward == 0.0
        assert e.meta["strategy"] == e.steps[0].action
        assert len(e.steps[0].action_ids) <= 3  # plan_tokens
        assert [s.t for s in e.steps] == list(range(len(e.steps)))
    # reflection: sokoban has one instruction for every room, so of its 6 plans the last 3
    # (reflections: 3) are remembered, with their outcomes
    (past,) = sge.history.values()
    assert [(plan, ok) for plan, ok, _ in past] == [
        (e.meta["strategy"], e.success) for e in eps[3:]
    ]


def test_ssrl_is_built_by_name_and_masks_its_own_information(qa_policy):
    ssrl = make_strategy("ssrl", max_info_tokens=5, search_pattern=r"^(.*)$")
    assert isinstance(ssrl, SelfSearch)
    eps = ssrl.collect(_ctx(qa_policy, _qa, restrict_to_admissible=False, max_new_tokens=4), [1], 2)
    assert [e.group for e in eps] == [0, 0]
    open_id = qa_policy.encode("<information>")[0]
    for e in eps:
        for s in e.steps[:-1]:  # every action searched: an information block follows it
            k = s.loss_mask.index(False)
            assert s.action_ids[k] == open_id and not any(s.loss_mask[k:])
            assert len(s.action_ids) - k <= 1 + 5 + 1  # the tags and at most 5 tokens


# -- options: checked like every strategy's ----------------------------------------------------
@pytest.mark.parametrize(
    ("name", "options", "problem"),
    [
        ("sge", {"temperature": 1.5}, "rollout strategy 'sge' has no option 'temperature'; "
         "allowed: plan_temperature, plan_tokens, reflection, reflections"),
        ("ssrl", {"max_tokens": 4}, "rollout strategy 'ssrl' has no option 'max_tokens'; "
         "allowed: max_info_tokens, search_pattern"),
        ("sge", {"plan_tokens": 0}, "SGE option plan_tokens must be an int >= 1, got 0"),
        ("sge", {"plan_temperature": True}, "SGE option plan_temperature must be a number > 0"),
        ("sge", {"reflection": "yes"}, "SGE option reflection must be true or false, got 'yes'"),
        ("ssrl", {"max_info_tokens": 2.5}, "SSRL option max_info_tokens must be an int >= 1"),
        ("ssrl", {"search_pattern": "search"}, "SSRL option search_pattern 'search' must have"),
        ("ssrl", {"search_pattern": "(("}, "SSRL option search_pattern: '((' is not a valid"),
    ],
)  # fmt: skip
def test_a_bad_option_is_one_line_naming_it(name, options, problem):
    with pytest.raises(ValueError) as err:
        make_strategy(name, **options)
    assert problem in str(err.value) and "\n" not in str(err.value)


def test_the_config_names_the_strategy_and_its_options():
    cfg = load_config(None, SGE_NEW)
    assert (cfg.rollout.strategy, cfg.rollout.options) == (
        "sge", {"plan_temperature": 2.0, "plan_tokens": 3}
    )  # fmt: skip
    sge = _strategy(cfg)
    assert isinstance(sge, SGEStrategy) and (sge.plan_temperature, sge.plan_tokens) == (2.0, 3)
    ssrl = _strategy(load_config(None, SSRL_NEW))
    assert isinstance(ssrl, SelfSearch) and ssrl.max_info_tokens == 5


def test_a_config_with_an_unknown_option_fails_at_load_naming_it():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["rollout.strategy=sge", "rollout.options.max_tokens=4"])
    assert "rollout strategy 'sge' has no option 'max_tokens'" in str(err.value)
    assert "\n" not in str(err.value)


# -- state and prompt words ----------------------------------------------------------------------
def test_sge_reflections_are_checkpointed_under_sampler(policy, tmp_path):
    cfg = load_config(None, SGE_NEW)
    exploration = _explore(cfg, tmp_path)
    sge = exploration.wrap(_strategy(cfg))
    sge.collect(_ctx(policy, _sokoban, temperature=1.0), [5], 2)
    state = exploration.state_dict()
    assert list(state) == ["rng", "sampler"]  # the rollout strategy's state: "sampler"
    again = _explore(cfg, tmp_path)
    fresh = again.wrap(_strategy(cfg))
    again.load_state_dict(state)
    (instruction,) = sge.history
    assert fresh.reflection_block(instruction) == sge.reflection_block(instruction)
    assert fresh.reflection_block(instruction).count("<strategy>") == 2


def test_a_saved_strategy_state_needs_a_strategy_that_keeps_one(tmp_path):
    exploration = _explore(load_config(None), tmp_path)
    exploration.wrap(make_strategy("group"))
    state = {**exploration.state_dict(), "sampler": {"history": {}}}
    with pytest.raises(ValueError, match=r"strategy's state \('sampler'\).*GroupStrategy"):
        exploration.load_state_dict(state)


def test_prompt_words_come_from_the_strategy():
    # a word-level tokenizer learns the reflection's outcome words
    assert prompt_words(load_config(None, SGE_NEW)) == OUTCOME_WORDS == ("success", "failure")
    off = ["rollout.strategy=sge", "rollout.options={reflections: 0}"]
    assert prompt_words(load_config(None, off)) == ()
    assert prompt_words(load_config(None, ["rollout.strategy=tree"])) == ()
