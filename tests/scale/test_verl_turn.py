"""verl's agent loop and ``cairn train``'s rollout play one turn step (``cairn.rollout.turn``):
from the same sampled ids they record the same steps for every ``agent.action_format``,
``prompt_style``, ``format_reward`` and instruction; one request id per episode; and the
two trainers whiten advantages the same way. Skipped where verl's optional imports are
missing (``make test`` installs them)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

for _mod in ("verl", "hydra", "datasets", "pyarrow", "transfer_queue", "torchdata", "aiohttp"):
    pytest.importorskip(_mod)

from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from cairn.advantages import compute  # noqa: E402
from cairn.agent import format_completion  # noqa: E402
from cairn.data.episode import Episode, Step, to_step_batch  # noqa: E402
from cairn.envs import make  # noqa: E402
from cairn.integrations.verl import agent_loop as agent_loop_mod  # noqa: E402
from cairn.integrations.verl.agent_loop import CairnAgentLoop  # noqa: E402
from cairn.integrations.verl.config import cairn_config  # noqa: E402
from cairn.policies import local_tokenizer  # noqa: E402
from cairn.policies.budget import context_budget  # noqa: E402
from cairn.policies.hf import Generation  # noqa: E402
from cairn.rollout import rollout  # noqa: E402
from cairn.train.config import load_config  # noqa: E402
from cairn.train.schema import AdvantageConfig  # noqa: E402
from cairn.train.settings import prompt_builder, sampling_settings  # noqa: E402

ENV = {"size": 6, "num_boxes": 1, "max_steps": 15, "render": "compact", "max_solution": 5}
NEW_TOKENS, PROMPT_LENGTH, TURNS = 64, 448, 6
LOGPROB = -0.5


@pytest.fixture(scope="module")
def tok():
    env = make("sokoban", **ENV)
    return local_tokenizer(env, env.instruction, kind="chat", vocab_size=400)


def _script(tok, fmt: str) -> list[list[int]]:
    """The ids 'sampled' turn after turn: well-formed, malformed, cut at the token cap,
    then well-formed again (tool calls name no sokoban move: parsed but invalid)."""
    eos = tok.eos_token_id

    def ids(text: str, end: bool = True) -> list[int]:
        return [*tok(text, add_special_tokens=False)["input_ids"], *([eos] if end else [])]

    def good(action: str) -> str:
        if fmt == "tool_call":
            return format_completion(f"move[{action}]", "", "tool_call", arg="direction")
        return action if fmt == "line" else format_completion(action, "r+1", "tagged")

    bad = {"line": "", "tagged": "up, I think", "tool_call": '<tool_call>{"name": 1}</tool_call>'}
    cut = ids("<think>" + " r+1 c-1" * 60, end=False)[:NEW_TOKENS]
    assert len(cut) == NEW_TOKENS  # HFPolicy's finish "length"
    return [ids(good("up")), ids(bad[fmt]), cut, ids(good("left")), ids(good("down"))]


class _ScriptedPolicy:
    """cairn's side: an HFPolicy stand-in whose generate returns the script's ids."""

    def __init__(self, tok, script):
        self.tokenizer, self.script, self.turn = tok, script, 0
        self.eos_id, self.pad_id = tok.eos_token_id, tok.pad_token_id
        self.forward_tokens = 0

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompts, **_) -> list[Generation]:
        (ids,) = [self.script[self.turn % len(self.script)] for _ in prompts]
        self.turn += 1
        text = self.tokenizer.decode(ids, skip_special_tokens=True).strip()
        finish = "eos" if ids[-1] == self.eos_id else "length"
        return [Generation(list(ids), [LOGPROB] * len(ids), text, finish)]


class _ScriptedServer:
    """verl's side: ``server_manager.generate`` returning the script's ids."""

    def __init__(self, script):
        self.script, self.turn, self.request_ids = script, 0, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.request_ids.append(request_id)
        ids = self.script[self.turn % len(self.script)]
        self.turn += 1
        return TokenOutput(token_ids=list(ids), log_probs=[LOGPROB] * len(ids))


def _agent(fmt, style, format_reward, instruction) -> dict:
    agent = {"history": 2, "action_format": fmt, "prompt_style": style}
    agent["format_reward"] = format_reward
    agent["describe_format"] = instruction == "describe"
    if instruction not in (None, "describe"):
        agent["instruction"] = instruction
    return agent


def _cairn_side(tok, agent, seed, prompt_length=PROMPT_LENGTH):
    overrides = [
        "env.name=sokoban", *(f"env.options.{k}={v}" for k, v in ENV.items()),
        "model.tokenizer=chat", f"model.max_context={prompt_length + NEW_TOKENS}",
        f"rollout.max_new_tokens={NEW_TOKENS}", f"rollout.max_turns={TURNS}",
        "rollout.restrict_to_admissible=false",
        *(f"agent.{k}={json.dumps(v)}" for k, v in agent.items()),
    ]  # fmt: skip
    cfg = load_config(None, overrides)
    policy = _ScriptedPolicy(tok, _script(tok, agent["action_format"]))
    budget = context_budget(policy, cfg.model.max_context, cfg.rollout.max_new_tokens)
    settings = sampling_settings(cfg, budget)
    prompt = prompt_builder(cfg, tok)
    (episode,) = rollout(policy, [make("sokoban", **ENV)], [(0, seed)], prompt, settings)
    return episode, settings


def _verl_side(tok, agent, seed, monkeypatch, prompt_length=PROMPT_LENGTH, **rollout_cfg):
    cfg = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": prompt_length, "response_length": NEW_TOKENS, **rollout_cfg
                }
            },
            "data": {},
            "cairn": {"agent": agent, "rollout": {"max_turns": TURNS}},
        }
    )  # fmt: skip
    server = _ScriptedServer(_script(tok, agent["action_format"]))
    loop = CairnAgentLoop(
        trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tok,
        processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
    )  # fmt: skip
    played = []

    async def keep(*args, **kwargs):
        episode, tokens = await real(*args, **kwargs)
        played.append(episode)
        return episode, tokens

    real = agent_loop_mod.play_episode
    monkeypatch.setattr(agent_loop_mod, "play_episode", keep)
    monkeypatch.setattr(agent_loop_mod, "_IDLE_ENVS", {})
    row = {"cairn_env": "sokoban", "cairn_options": json.dumps(ENV), "cairn_seed": seed}
    sampling = {"temperature": 1.0, "top_p": 1.0, "logprobs": True}
    outputs = asyncio.run(loop.run(sampling, **row))
    monkeypatch.setattr(agent_loop_mod, "play_episode", real)
    return played[0], outputs, server


def _recorded(step: Step) -> tuple:
    return (
        step.t, step.prompt_ids, step.action_ids, step.logprobs, step.completion, step.action,
        step.valid, step.penalty, step.shaped, step.reward, step.columns,
    )  # fmt: skip


@pytest.mark.parametrize("instruction", [None, "Push the box onto the goal.", "describe"])
@pytest.mark.parametrize("format_reward", [0.0, 0.05])
@pytest.mark.parametrize("style", ["flat", "chat"])
@pytest.mark.parametrize("fmt", ["line", "tagged", "tool_call"])
def test_verl_loop_records_cairns_steps(tok, fmt, style, format_reward, instruction, monkeypatch):
    if fmt == "tool_call" and instruction == "describe":
        pytest.skip("sokoban has no tools to describe a tool call with")
    agent = _agent(fmt, style, format_reward, instruction)
    seed = 3
    want, settings = _cairn_side(tok, agent, seed)
    got, outputs, _ = _verl_side(tok, agent, seed, monkeypatch)
    assert len(want.steps) == TURNS  # the script never solves it: the turn cap ends it
    assert [_recorded(s) for s in got.steps] == [_recorded(s) for s in want.steps]
    assert (got.success, got.terminated, got.truncated) == (
        want.success, want.terminated, want.truncated,
    )  # fmt: skip
    assert got.meta == want.meta  # format errors, cut completions, dropped turns
    assert 1 in want.meta["format_errors"] and want.meta["truncated_actions"] == [2]
    assert [o.prompt_ids for o in outputs] == [s.prompt_ids for s in want.steps]
    assert [o.extra_fields["cairn_step_reward"] for o in outputs] == [
        s.total_reward for s in want.steps
    ]
    if style == "chat":  # token-in/token-out: turn 1's prompt extends turn 0's + its ids
        first = want.steps[0]
        assert want.steps[1].prompt_ids[: len(first.prompt_ids)] == first.prompt_ids
        n = len(first.prompt_ids)
        assert want.steps[1].prompt_ids[n : n + len(first.action_ids)] == first.action_ids
    if instruction not in (None, "describe"):
        assert instruction in tok.decode(want.steps[0].prompt_ids)
    # every agent key reaches verl's settings as cairn train maps it
    verl_settings = cairn_config({"cairn": {"agent": agent, "rollout": {"max_turns": TURNS}}})
    assert verl_settings.settings(NEW_TOKENS, 1.0, 1.0, PROMPT_LENGTH) == settings


@pytest.mark.parametrize("style", ["flat", "chat"])
def test_a_response_prefix_means_the_same_in_both(tok, style, monkeypatch):
    """agent.response_prefix: both loops write it at the end of every turn's prompt and
    parse prefix + reply alike."""
    agent = {**_agent("tagged", style, 0.05, None), "response_prefix": "<action>"}
    want, settings = _cairn_side(tok, agent, 3)
    got, outputs, _ = _verl_side(tok, agent, 3, monkeypatch)
    assert [_recorded(s) for s in got.steps] == [_recorded(s) for s in want.steps]
    assert got.meta == want.meta and settings.response_prefix == "<action>"
    prefix = tok("<action>", add_special_tokens=False)["input_ids"]
    assert all(s.prompt_ids[-len(prefix) :] == prefix for s in want.steps)
    assert [o.prompt_ids for o in outputs] == [s.prompt_ids for s in want.steps]


def test_context_budget_drops_old_turns_in_both(tok, monkeypatch):
    # A budget that holds the chat prompt of only some earlier turns: both loops drop the
    # same oldest turns (meta["context_dropped"]) and record the same prompts.
    agent = _agent("tagged", "chat", 0.0, None)
    want, _ = _cairn_side(tok, agent, 5, prompt_length=200)
    got, _, _ = _verl_side(tok, agent, 5, monkeypatch, prompt_length=200)
    assert want.meta.get("context_dropped")  # the budget did bind
    assert got.meta == want.meta
    assert [_recorded(s) for s in got.steps] == [_recorded(s) for s in want.steps]


def test_one_request_id_per_episode(tok, monkeypatch):
    agent = _agent("tagged", "chat", 0.0, None)
    _, outputs, server = _verl_side(tok, agent, 3, monkeypatch)
    assert len(outputs) == TURNS and len(server.request_ids) == TURNS
    assert len(set(server.request_ids)) == 1  # sticky routing keeps the episode on a server
    _, _, again = _verl_side(tok, agent, 3, monkeypatch)
    assert again.request_ids[0] != server.request_ids[0]  # a new episode, a new id
    # under rollout.full_determinism the id is verl's ToolAgentLoop's: det-<priority>
    assert agent_loop_mod.episode_request_id(7, True) == "det-7"
    _, _, det = _verl_side(tok, agent, 3, monkeypatch, full_determinism=True)
    assert set(det.request_ids) == {"det-0"}


def _episodes(rng) -> list[Episode]:
    episodes = []
    for g in range(3):
        for _ in range(4):
            e = Episode(id=len(episodes), group=g, task=g, success=bool(rng.random() < 0.5))
            for t in range(int(rng.integers(1, 5))):
                e.steps.append(
                    Step(
                        t=t, observation=f"o{t}", anchor=f"g{g}s{int(rng.integers(0, 3))}",
                        action="a", completion="a", reward=float(rng.normal()), valid=True,
                        prompt_ids=[1], action_ids=[5, 6], logprobs=[-0.5, -0.5],
                    )
                )  # fmt: skip
            episodes.append(e)
    return episodes


@pytest.mark.parametrize("name", ["gigpo", "rloo"])
def test_verl_trainer_whitens_as_cairn_train(name):
    # verl's trainer used the population std + 1e-8, cairn train the unbiased std + 1e-6:
    # a factor sqrt(N / (N - 1)) apart. Both now call cairn.advantages.compute.
    from cairn.integrations.verl.agent_loop import episode_outputs
    from cairn.integrations.verl.episode import TurnTokens
    from cairn.integrations.verl.trainer import step_advantages

    episodes = _episodes(np.random.default_rng(4))
    fields, uid = [], []
    for e in episodes:
        tokens = TurnTokens([True] * len(e.steps), [{} for _ in e.steps])
        fields += [o.extra_fields for o in episode_outputs(e, tokens, 8, {})]
        uid += [f"u{e.group}" for _ in e.steps]
    cfg = cairn_config({"cairn": {"advantage": {"name": name, "whiten": True}}})
    got, _ = step_advantages(cfg, uid, fields)
    want, _ = compute(to_step_batch(episodes), AdvantageConfig(name=name, whiten=True))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert abs(float(np.std(want, ddof=1)) - 1.0) < 1e-5  # unit unbiased spread
