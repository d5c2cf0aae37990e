"""LUFFY demonstrations: action ids under constrained decoding, replay, sources, mixing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cairn.agent import PromptBuilder, parse_action
from cairn.data.episode import to_records
from cairn.data.tokens import TokenBatch
from cairn.envs import make
from cairn.exploration.demos import (
    JsonlDemos,
    SolverDemos,
    constrained_ids,
    demo_episode,
    make_source,
    mix_demos,
)
from cairn.policies import HFPolicy, local_tokenizer
from cairn.policies.hf import Generation
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.rollout import RolloutSettings, rollout, tasks_for_groups

SETTINGS = RolloutSettings(restrict_to_admissible=True, max_new_tokens=4)
WORDS = {"go": 5, "north": 6, "up": 7, "down": 8}


def _enc(text: str) -> list[int]:
    return [WORDS[w] for w in text.split()]


def test_constrained_ids_worked_example():
    # single-token choices: one token, no end-of-sequence needed (the trie leaf ends it)
    assert constrained_ids(_enc, "up", ["up", "down"], eos_id=2) == ([7], [[7, 8]])
    # "go" is a prefix of "go north": after "go" the policy must choose eos or "north"
    ids, allowed = constrained_ids(_enc, "go", ["go", "go north", "up"], eos_id=2)
    assert ids == [5, 2] and allowed == [[5, 7], [6, 2]]
    ids, allowed = constrained_ids(_enc, "go north", ["go", "go north", "up"], eos_id=2)
    assert ids == [5, 6] and allowed == [[5, 7], [6, 2]]
    with pytest.raises(ValueError, match="not among the admissible"):
        constrained_ids(_enc, "down", ["up"], eos_id=2)


def test_constrained_ids_match_what_the_policy_generates(policy, sokoban):
    """The demo's ids and allowed sets equal those of a real constrained generation."""
    obs, info = sokoban.reset(seed=3)
    choices = info["admissible"]
    prompt = policy.encode(PromptBuilder().build(sokoban.instruction, [], obs))
    gen = torch.Generator().manual_seed(0)
    for g in policy.generate([prompt] * 16, choices=[choices] * 16, generator=gen):
        ids, allowed = constrained_ids(policy.encode, g.text, choices, policy.eos_id)
        assert ids == g.token_ids
        assert [sorted(a) for a in allowed] == [sorted(a) for a in g.allowed]


def test_solver_demo_replays_in_the_rollout_prompt_format(policy, sokoban):
    prompt = PromptBuilder()
    sokoban.reset(seed=5)
    plan = SolverDemos().actions(sokoban, 5, 0)
    e = demo_episode(
        sokoban, 5, plan, policy=policy, prompt=prompt, settings=SETTINGS, episode_id=9, group=2
    )
    assert e.success and e.source == 1 and (e.id, e.group, e.task) == (9, 2, 5)
    assert [s.action for s in e.steps] == plan
    # the same prompts an on-policy episode of this task would see at those states
    ref = rollout(policy, [sokoban], tasks_for_groups([5], 1), prompt, SETTINGS)[0]
    assert e.steps[0].prompt_ids == ref.steps[0].prompt_ids
    assert all(lp == 0.0 for s in e.steps for lp in s.logprobs)  # expert probability 1
    assert e.ret == pytest.approx(sum(s.reward for s in e.steps))
    tokens = TokenBatch.from_episodes([e, ref], np.zeros(len(e.steps) + len(ref.steps)))
    assert tokens.flags["off_policy"].tolist() == [True] * len(e.steps) + [False] * len(ref.steps)


def test_mix_demos_joins_each_group_with_fresh_ids(policy, sokoban):
    envs = [make("sokoban", render="compact", max_solution=5) for _ in range(4)]
    eps = rollout(policy, envs, tasks_for_groups([5, 6], 2), PromptBuilder(), SETTINGS)
    demos = mix_demos(
        eps, SolverDemos(), 2, env=sokoban, policy=policy, prompt=PromptBuilder(),
        settings=SETTINGS,
    )  # fmt: skip
    assert [(d.group, d.task, d.id) for d in demos] == [(0, 5, 4), (0, 5, 5), (1, 6, 6), (1, 6, 7)]
    assert all(d.meta["demo"] == "solver" and d.success for d in demos)


def test_jsonl_source_reads_dumps_and_matches_tasks(tmp_path, policy, sokoban):
    sokoban.reset(seed=5)
    e = demo_episode(
        sokoban, 5, SolverDemos().actions(sokoban, 5, 0), policy=policy, prompt=PromptBuilder(),
        settings=SETTINGS, episode_id=0, group=0,
    )  # fmt: skip
    path = tmp_path / "demos.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in to_records([e])) + "\n")
    src = make_source("jsonl", path=str(path))
    assert src.actions(sokoban, 5, 0) == [s.action for s in e.steps]
    assert src.actions(sokoban, 6, 0) is None  # no record of task 6
    anyone = JsonlDemos(path, match="any")
    assert anyone.actions(sokoban, 123, 0) == [s.action for s in e.steps]


def test_bad_sources(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        JsonlDemos(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="no episode"):
        JsonlDemos(tmp_path / "empty.jsonl")
    with pytest.raises(ValueError, match="match"):
        JsonlDemos(tmp_path / "empty.jsonl", match="all")
    with pytest.raises(ValueError, match="unknown demo source"):
        make_source("oracle")
    with pytest.raises(ValueError, match=r"solve\(\)"):
        SolverDemos().actions(object(), 0, 0)


class _Replay:
    """A policy that 'samples' the given completions' ids turn after turn (every row)."""

    def __init__(self, base: HFPolicy, completions: list[list[int]]):
        self.base, self.completions, self.turn, self.prompts = base, completions, 0, []
        self.encode, self.eos_id, self.pad_id = base.encode, base.eos_id, base.pad_id

    def generate(self, prompts, **_) -> list[Generation]:
        self.prompts.append(list(prompts[0]))
        ids = self.completions[self.turn]
        self.turn += 1
        text = self.base.tokenizer.decode(ids, skip_special_tokens=True)
        return [Generation(ids, [0.0] * len(ids), text, "eos") for _ in prompts]


@pytest.mark.parametrize(
    ("fmt", "prefix"), [("tagged", ""), ("tool_call", ""), ("tool_call", "<tool_call>")]
)
def test_free_text_demo_writes_the_action_format_in_the_rollout_chat_prompts(fmt, prefix):
    """In free text a demonstration is written as the policy's parser reads it, and its
    prompts are the chat prompts (token-in/token-out) a rollout sampling the same ids
    builds; before, demos were bare action text over flat prompts. With a response prefix
    the prompt holds it, so the demonstration's ids are what follows it."""
    from cairn.envs import make as make_env

    env = make_env("search_qa", kb_seed=0, kb_size=6, hops=2, max_steps=4)
    tok = local_tokenizer(env, env.instruction, kind="chat", vocab_size=400)
    config = tiny_config(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    policy = HFPolicy(build_tiny_model(config, seed=0), tok)
    prompt = PromptBuilder(history=3, chat_template=tok, style="chat", response_prefix=prefix)
    settings = RolloutSettings(
        restrict_to_admissible=False, action_format=fmt, max_new_tokens=64, format_reward=0.1,
        response_prefix=prefix,
    )  # fmt: skip
    env.reset(seed=4)
    plan = env.gold_actions()
    demo = demo_episode(
        env, 4, plan, policy=policy, prompt=prompt, settings=settings, episode_id=0, group=0
    )
    assert demo.success and [s.action for s in demo.steps] == plan
    for s in demo.steps:
        assert parse_action(s.completion, fmt=fmt) == s.action != s.completion
        written = s.completion.removeprefix(prefix)
        assert s.action_ids == [*policy.encode(written), policy.eos_id]
        assert written.startswith('{"name"') if prefix else written == s.completion
        assert s.shaped == {"format": 0.1}
    replay = _Replay(policy, [s.action_ids for s in demo.steps])
    ref = rollout(replay, [env], tasks_for_groups([4], 1), prompt, settings)[0]
    assert [s.prompt_ids for s in ref.steps] == [s.prompt_ids for s in demo.steps]
    assert ref.success and [s.action for s in ref.steps] == plan


def test_demonstrations_replay_the_task_of_the_rollouts_envs_not_the_configs():
    """With a curriculum the rollout's envs take the level's options, under which a seed
    gives another task (search_qa draws its hops from the seed): a demonstration answers
    the group's own question, and follows the pool when the level changes."""
    from cairn.data.episode import Episode
    from cairn.exploration.config import DemosSection
    from cairn.exploration.hooks import DemosHook
    from cairn.rollout import EnvFactory, RolloutContext
    from cairn.rollout.envpool.local import EnvPool

    base = {"kb_seed": 0, "kb_size": 6, "max_steps": 4}
    config, level = {**base, "hops": [1, 2]}, {**base, "hops": [1]}
    probe = make("search_qa", **config)
    tok = local_tokenizer(probe, probe.instruction, kind="word")
    model = build_tiny_model(tiny_config(len(tok), pad_token_id=tok.pad_token_id), seed=0)
    policy = HFPolicy(model, tok)
    settings = RolloutSettings(restrict_to_admissible=False, max_new_tokens=8)
    hook = DemosHook(
        DemosSection(enabled=True, source="solver", n_off=1), policy, PromptBuilder(),
        EnvFactory.of("search_qa", **config),
    )  # fmt: skip
    seed = next(s for s in range(50) if _answer(config, s) != _answer(level, s))
    for options in (level, config):  # the level's envs, then the config's (a level raised)
        pool = EnvPool(EnvFactory.of("search_qa", **options))
        ctx = RolloutContext(policy, pool, PromptBuilder(), settings)
        played = [Episode(id=0, group=0, task=seed)]
        (demo,) = hook.after_collect(ctx, played)[1:]
        assert demo.success and demo.steps[-1].action == f"answer [ {_answer(options, seed)} ]"
        pool.close()
    hook.close()


def _answer(options: dict, seed: int) -> str:
    env = make("search_qa", **options)
    env.reset(seed=seed)
    return env.answer
