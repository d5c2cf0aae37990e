"""The shared turn step (``cairn.rollout.turn``): the instruction every prompt builder
uses (rollout, demonstrations and the warm-up, verl's data), env attributes read by
prompts on envs in worker processes, and step columns an env reports itself."""

from __future__ import annotations

from dataclasses import replace

import torch
from rollout_helpers import DEMO

from cairn.agent import PromptBuilder, describe_format, tool_schema
from cairn.data.episode import Episode
from cairn.envs import make
from cairn.exploration.demos import demo_episode
from cairn.integrations.verl.data import dataset_rows
from cairn.rollout import RolloutSettings, play
from cairn.rollout.envpool.calls import reset_all
from cairn.rollout.envpool.workers import WorkerPool
from cairn.rollout.turn import instruction_for

SETTINGS = RolloutSettings(max_new_tokens=4, restrict_to_admissible=True, max_turns=3)
ASK = "Push the box onto the goal."


class _ToolEnv:
    """Sokoban with an example action and a tool, reporting an info gain on every step."""

    example_action = "move[up]"
    tools = (tool_schema("move", "direction", "Move the player.", "up, down, left or right"),)

    def __init__(self):
        self.env = make("sokoban", **DEMO)

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "info_gain": 0.25 * len(action)}


def test_instruction_for_prefers_agent_instruction_and_appends_the_format():
    env = _ToolEnv()
    env.reset(seed=0)
    assert instruction_for(env, SETTINGS) == env.instruction  # nothing set: the env's
    assert instruction_for(env, replace(SETTINGS, instruction=ASK)) == ASK
    described = replace(SETTINGS, instruction=ASK, describe_format=True, action_format="tool_call")
    text = instruction_for(env, described)
    assert text == f"{ASK}\n{describe_format('tool_call', 'move[up]', env.tools)}"
    assert '{"name": "move", "arguments": {"direction": "up"}}' in text
    assert "- move(direction): Move the player." in text  # the tool listed in the text
    assert "Tools:" not in instruction_for(env, described, tools_in_template=True)


def test_envs_in_workers_give_prompts_their_example_action_and_tools():
    # RemoteEnv refreshes instruction with every answer, example_action and tools with
    # every reset: the instruction of a prompt is the in-process env's.
    settings = replace(SETTINGS, describe_format=True, action_format="tool_call")
    local = _ToolEnv()
    local.reset(seed=4)
    pool = WorkerPool(_ToolEnv, 1, backend="process")
    try:
        (remote,) = pool.take(1)
        reset_all([remote], [4])
        assert (remote.example_action, remote.tools) == (local.example_action, local.tools)
        assert instruction_for(remote, settings) == instruction_for(local, settings)
    finally:
        pool.close()


class _NoPromptAttributes:
    """An env object (not a TextEnv) with neither ``example_action`` nor ``tools``."""

    def __init__(self):
        self.env = make("sokoban", **DEMO)

    def __getattr__(self, name):
        if name in ("example_action", "tools"):
            raise AttributeError(name)
        return getattr(self.env, name)


def test_worker_env_without_the_attributes_keeps_the_defaults():
    # (sokoban itself has an example action now: a wrapper without either attribute)
    pool = WorkerPool(_NoPromptAttributes, 1, backend="process")
    try:
        (remote,) = pool.take(1)
        reset_all([remote], [1])
        assert (remote.example_action, remote.tools) == ("", ())
    finally:
        pool.close()


def test_env_reported_info_gain_becomes_a_step_column(demo_policy):
    # As verl's agent loop always recorded it: info["info_gain"] -> Step.columns.
    env = _ToolEnv()
    episode = Episode(id=0, group=0, task=2)
    play(
        demo_policy, [env], [episode], [env.reset(seed=2)], PromptBuilder(), SETTINGS,
        torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert episode.steps
    assert [s.columns for s in episode.steps] == [
        {"info_gain": 0.25 * len(s.action)} for s in episode.steps
    ]


def test_demonstrations_and_rollouts_start_prompts_with_agent_instruction(demo_policy):
    # LUFFY's demonstrations and the warm-up (both demo_episode) build the prompt the
    # rollout builds: agent.instruction replaces the env's there too.
    env = make("sokoban", **DEMO)
    settings = replace(SETTINGS, instruction="push box")  # words of the tiny vocabulary
    prompt = PromptBuilder()
    obs, _ = env.reset(seed=7)
    plan = env.solve()
    demo = demo_episode(
        env, 7, plan, policy=demo_policy, prompt=prompt, settings=settings, episode_id=0, group=0
    )
    assert demo.steps[0].prompt_ids == demo_policy.encode(prompt.build("push box", [], obs))
    rolled = Episode(id=1, group=0, task=7)
    play(demo_policy, [env], [rolled], [env.reset(seed=7)], prompt, settings)
    assert rolled.steps[0].prompt_ids == demo.steps[0].prompt_ids


def test_verl_data_rows_start_with_agent_instruction():
    (row,) = dataset_rows("sokoban", DEMO, [3], "train", agent={"instruction": ASK})
    content = row["prompt"][0]["content"]
    assert content.startswith(ASK + "\n")  # then the format, described for a pretrained model
    assert describe_format("line", "") in content
    (plain,) = dataset_rows("sokoban", DEMO, [3], "train", agent={"describe_format": False})
    env = make("sokoban", **DEMO)
    obs, _ = env.reset(seed=3)
    assert plain["prompt"][0]["content"] == PromptBuilder().build(env.instruction, [], obs)


def test_each_episode_shows_the_example_its_env_drew():
    """A reset info's ``demonstration`` replaces the builder's fixed example, written in the
    action format; a builder that shows no example (the tiny default) is left as it is."""
    from cairn.exploration.memory import TipPromptBuilder
    from cairn.rollout.turn import episode_prompt

    env = make("sokoban", size=6, max_steps=6, max_solution=3, render="text", example_pool=True)
    _, info = env.reset(seed=2)
    settings = replace(SETTINGS, action_format="tagged", describe_format=True)
    fixed = PromptBuilder(example=(("a room", "<action>right</action>"),))
    drawn = episode_prompt(fixed, info["demonstration"], env, settings)
    moves = [a for _, a in info["demonstration"]]
    assert moves == ["down", "down"]  # seed 2's corridor
    assert [c for _, c in drawn.example] == ["<action>down</action>"] * 2
    assert [o for o, _ in drawn.example] == [o for o, _ in info["demonstration"]]
    assert episode_prompt(PromptBuilder(), info["demonstration"], env, settings) == PromptBuilder()
    assert episode_prompt(fixed, None, env, settings) is fixed
    tips = TipPromptBuilder(fixed, memory=None)  # the tips wrapper keeps its records
    view = episode_prompt(tips, info["demonstration"], env, settings)
    assert isinstance(view, TipPromptBuilder) and view.shown is tips.shown
    assert view.base.example == drawn.example


def test_a_branch_keeps_the_drawn_example_but_not_the_parents_judgement():
    from cairn.rollout.branching import clone_prefix

    parent = Episode(id=0, group=0, task=3, meta={"demonstration": [("o", "up")]})
    parent.meta["task_blind"] = True  # the parent ended task-blind
    child = clone_prefix(parent, 0)
    assert child.meta["demonstration"] == [("o", "up")] and "task_blind" not in child.meta


def test_show_admissible_lists_the_current_actions_after_the_observation():
    from cairn.rollout.turn import ADMISSIBLE_HEADER, shown_observation

    state = ("You are in the kitchen. \n", {"admissible": ["look around", "move east"]})
    listed = replace(SETTINGS, show_admissible=True)
    assert shown_observation(state, listed) == (
        "You are in the kitchen.\nAdmissible actions:\nlook around\nmove east"
    )
    assert ADMISSIBLE_HEADER == "Admissible actions:"
    assert shown_observation(state, SETTINGS) == state[0]  # off: the env's text as it is
    for none in ({"admissible": None}, {"admissible": []}, {}):  # an env that lists none
        assert shown_observation(("obs", none), listed) == "obs"


def test_listed_actions_reach_rollout_and_demonstration_prompts_alike(demo_policy):
    # Only the current turn lists them: history shows the earlier observation alone.
    env = make("sokoban", **DEMO)
    settings = replace(SETTINGS, show_admissible=True)
    prompt = PromptBuilder(history=1)
    obs, info = env.reset(seed=7)
    plan = env.solve()
    demo = demo_episode(
        env, 7, plan, policy=demo_policy, prompt=prompt, settings=settings, episode_id=0, group=0
    )
    actions = "\n".join(info["admissible"])
    first = prompt.build(env.instruction, [], f"{obs.rstrip()}\nAdmissible actions:\n{actions}")
    assert demo.steps[0].prompt_ids == demo_policy.encode(first)
    env.reset(seed=7)
    obs1, _, _, _, info1 = env.step(plan[0])
    shown1 = f"{obs1.rstrip()}\nAdmissible actions:\n" + "\n".join(info1["admissible"])
    second = prompt.build(env.instruction, [(obs, plan[0])], shown1)  # the past turn unlisted
    assert demo.steps[1].prompt_ids == demo_policy.encode(second)
    rolled = Episode(id=1, group=0, task=7)
    play(demo_policy, [env], [rolled], [env.reset(seed=7)], prompt, settings)
    assert rolled.steps[0].prompt_ids == demo.steps[0].prompt_ids
    assert rolled.steps[0].observation == obs  # the step keeps the env's own observation
