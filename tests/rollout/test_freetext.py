"""The free-text path: chat prompts token-in/token-out, format counters, tool calls and
the context budget."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from cairn.agent import PromptBuilder, parse_action, parse_tool_call
from cairn.data.episode import Episode, to_step_batch
from cairn.data.tokens import TokenBatch, collate_scoring
from cairn.envs import make
from cairn.policies import HFPolicy, local_tokenizer
from cairn.policies.hf import Generation
from cairn.policies.tiny import build_tiny_model, tiny_config
from cairn.rollout import RolloutSettings, play, turn_stats

DEMO = {"size": 6, "num_boxes": 1, "max_steps": 15, "render": "compact", "max_solution": 5}


def _sokoban():
    return make("sokoban", **DEMO)


@pytest.fixture(scope="module")
def chat_tok():
    env = _sokoban()
    return local_tokenizer(env, env.instruction, kind="chat", vocab_size=400)


@pytest.fixture(scope="module")
def chat_policy(chat_tok):
    config = tiny_config(
        len(chat_tok), pad_token_id=chat_tok.pad_token_id, eos_token_id=chat_tok.eos_token_id
    )
    return HFPolicy(build_tiny_model(config, seed=0), chat_tok)


class Scripted:
    """A policy that 'samples' given id sequences, turn after turn (one script per row)."""

    def __init__(self, tokenizer, scripts: Sequence[Sequence[list[int]]], finish="eos"):
        self.tokenizer, self.scripts, self.finish = tokenizer, scripts, finish
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id
        self.turn = 0
        self.prompts: list[list[list[int]]] = []

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(self, prompts, **_) -> list[Generation]:
        self.prompts.append([list(p) for p in prompts])
        out = []
        for row in range(len(prompts)):
            ids = list(self.scripts[row][min(self.turn, len(self.scripts[row]) - 1)])
            text = self.tokenizer.decode(ids, skip_special_tokens=True).strip()
            out.append(Generation(ids, [0.0] * len(ids), text, self.finish))
        self.turn += 1
        return out


def _play(policy, envs, prompt, settings, seeds=(0,)) -> list[Episode]:
    episodes = [Episode(id=i, group=0, task=s) for i, s in enumerate(seeds)]
    states = [env.reset(seed=s) for env, s in zip(envs, seeds, strict=True)]
    play(policy, envs, episodes, states, prompt, settings, torch.Generator().manual_seed(0))
    return episodes


def _chat(tok, **kw) -> PromptBuilder:
    return PromptBuilder(history=kw.pop("history", 50), chat_template=tok, style="chat", **kw)


def test_chat_prompts_are_token_in_token_out(chat_policy, chat_tok):
    """Each turn's prompt is the previous prompt + the ids sampled there + new template
    pieces, and the trainer scores exactly the sampled ids (log-probs agree)."""
    envs = [_sokoban() for _ in range(4)]
    settings = RolloutSettings(max_new_tokens=12, max_turns=4, action_format="tagged")
    episodes = _play(chat_policy, envs, _chat(chat_tok), settings, seeds=(0, 1, 2, 3))
    steps = [s for e in episodes for s in e.steps]
    assert sum(len(e.steps) for e in episodes) == 16
    for e in episodes:
        for prev, step in zip(e.steps, e.steps[1:], strict=False):
            head = prev.prompt_ids + prev.action_ids
            assert step.prompt_ids[: len(head)] == head
    inputs = collate_scoring(
        [s.prompt_ids for s in steps], [s.action_ids for s in steps], pad_id=chat_policy.pad_id
    )
    logp, _ = chat_policy.score(inputs)
    for i, s in enumerate(steps):
        k = len(s.action_ids)
        torch.testing.assert_close(logp[i, -k:], torch.tensor(s.logprobs), atol=1e-5, rtol=0)
    batch = TokenBatch.from_episodes(episodes, np.zeros(len(steps)), pad_id=chat_policy.pad_id)
    assert batch.action_ids == [s.action_ids for s in steps]


def test_sampled_ids_are_never_re_encoded_and_reasoning_is_kept(chat_tok):
    """The sampled ids spell '<think>box left</think><action>left</action>' one byte-level
    piece at a time, which is not how the tokenizer would encode that text: a later prompt
    holds these very ids (a decode/re-encode would merge them), <think> included."""
    text = "<think>box left</think><action>left</action>"
    canonical = chat_tok(text, add_special_tokens=False)["input_ids"]
    spelled = []
    for piece in ("<think>", "b", "o", "x", " ", "l", "e", "f", "t", "</think>", "<action>"):
        spelled += chat_tok(piece, add_special_tokens=False)["input_ids"]
    spelled += [*chat_tok("left", add_special_tokens=False)["input_ids"]]
    spelled += [chat_tok.convert_tokens_to_ids("</action>"), chat_tok.eos_token_id]
    assert spelled[:-1] != canonical and chat_tok.decode(spelled, skip_special_tokens=True) == text
    policy = Scripted(chat_tok, [[spelled]])
    env = _sokoban()
    settings = RolloutSettings(max_turns=3, action_format="tagged")
    (episode,) = _play(policy, [env], _chat(chat_tok), settings)
    assert [s.action for s in episode.steps] == ["left"] * len(episode.steps)
    assert len(episode.steps) == 3 and all(s.action_ids == spelled for s in episode.steps)
    last = episode.steps[-1].prompt_ids
    for _ in range(2):  # both earlier turns: their exact ids, back to back with the template
        start = _find(last, spelled)
        assert start >= 0
        last = last[start + len(spelled) :]
    shown = chat_tok.decode(episode.steps[-1].prompt_ids)
    assert shown.count("<think>box left</think>") == 2
    # The template's own end-of-turn is not doubled after a completion that ended in eos.
    assert shown.count("<|im_end|>") == 1 + 2 * 2 + 1  # system, 2 x (user, assistant), user


def _find(seq: list[int], sub: list[int]) -> int:
    for i in range(len(seq) - len(sub) + 1):
        if seq[i : i + len(sub)] == sub:
            return i
    return -1


def test_chat_prompt_text_matches_the_template_rendering(chat_tok):
    """Splicing ids gives the ids of the template's own rendering when the sampled ids
    are the canonical encoding (so nothing is lost or added around them)."""
    builder = _chat(chat_tok)
    completion = "<think>box r+1</think><action>up</action>"
    ids = chat_tok(completion, add_special_tokens=False)["input_ids"] + [chat_tok.eos_token_id]
    enc = lambda t: chat_tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    got = builder.chat_ids(enc, chat_tok.eos_token_id, "push", [("o1", ids)], "o2")
    text = builder.build("push", [("o1", completion)], "o2")
    assert chat_tok.decode(got) == text


def test_format_errors_and_cut_completions_are_counted(chat_tok):
    env = _sokoban()
    bad = chat_tok("no action here", add_special_tokens=False)["input_ids"]
    good = chat_tok("<action>up</action>", add_special_tokens=False)["input_ids"]
    settings = RolloutSettings(max_turns=4, action_format="tagged", invalid_penalty=0.5)
    policy = Scripted(chat_tok, [[bad, good, bad, good]], finish="length")
    (episode,) = _play(policy, [env], _chat(chat_tok), settings)
    assert [s.valid for s in episode.steps][:1] == [False]
    assert episode.steps[0].penalty == 0.5 and episode.steps[0].action == ""
    stats = turn_stats([episode], "rollout")
    assert stats["rollout/format_errors"] == 2 and stats["rollout/format_error_rate"] == 0.5
    assert stats["rollout/truncated_actions"] == 4
    assert stats["rollout/completion_tokens"] == (2 * len(bad) + 2 * len(good)) / 4
    # Lenient 'line' format takes the first line: no format error.
    lenient = RolloutSettings(max_turns=1, action_format="line")
    (ep2,) = _play(Scripted(chat_tok, [[bad]]), [_sokoban()], _chat(chat_tok), lenient)
    assert turn_stats([ep2], "r")["r/format_errors"] == 0


def test_format_reward_goes_to_parsed_actions_the_env_accepts(chat_tok):
    bad = chat_tok("nothing", add_special_tokens=False)["input_ids"]
    good = chat_tok("<action>down</action>", add_special_tokens=False)["input_ids"]
    unknown = chat_tok("<action>jump</action>", add_special_tokens=False)["input_ids"]
    settings = RolloutSettings(
        max_turns=3, action_format="tagged", format_reward=0.05, invalid_penalty=0.1
    )
    script = Scripted(chat_tok, [[good, bad, unknown]])
    (episode,) = _play(script, [_sokoban()], _chat(chat_tok), settings)
    first, no_action, rejected = episode.steps
    assert first.shaped == {"format": 0.05} and first.valid and first.penalty == 0.0
    assert no_action.shaped == {} and not no_action.valid and no_action.penalty == 0.1
    # Well-formed, but no action of the env: rejected, penalised, and no format bonus.
    assert rejected.action == "jump" and not rejected.valid
    assert rejected.shaped == {} and rejected.penalty == 0.1
    assert episode.events.format_errors == [1]


def test_a_move_that_changes_nothing_earns_no_format_bonus(chat_tok):
    """Walking into a wall (seed 0: up is walled) is legal but no progress: no bonus, and it
    costs no_progress_penalty; the same move with the room changing earns the bonus."""
    wall = chat_tok("<action>up</action>", add_special_tokens=False)["input_ids"]
    settings = RolloutSettings(
        max_turns=2, action_format="tagged", format_reward=0.05, no_progress_penalty=0.1
    )
    (episode,) = _play(Scripted(chat_tok, [[wall, wall]]), [_sokoban()], _chat(chat_tok), settings)
    for step in episode.steps:
        assert step.valid and step.shaped == {} and step.penalty == 0.1
    assert episode.meta["task_blind"] is True  # two identical moves, neither one moved


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>{"name": "search", "arguments": {"query": "Lusa born"}}</tool_call>',
         "search[Lusa born]"),
        ('<think>x</think><tool_call>{"name": "answer", "arguments": {"answer": 7}}</tool_call>',
         "answer[7]"),
        ('<tool_call>{"name": "search", "arguments": {"query": "Lusa"</tool_call>', None),
        ("<tool_call>not json</tool_call>", None),
        ('<tool_call>["search", "x"]</tool_call>', None),
        ('<tool_call>{"name": "search"}</tool_call>', None),
        ('<tool_call>{"name": "search", "arguments": {"q": "a", "k": 2}}</tool_call>', None),
        ('<tool_call>{"name": "search", "arguments": {"q": ["a"]}}</tool_call>', None),
        ('{"name": "search", "arguments": {"query": "x"}}', None),  # no tags
    ],
)  # fmt: skip
def test_tool_call_parsing(text, expected):
    assert parse_action(text, fmt="tool_call") == expected


def test_tool_call_episode_masks_tool_answers_and_counts_malformed_json():
    """search_qa with JSON tool calls: a malformed call is a counted format error (no
    crash); the tool's answer comes back as a tool turn in the next prompt, and no trained
    token is one of its tokens."""
    env = make("search_qa")
    _, info = env.reset(seed=3)
    tok = local_tokenizer(env, env.instruction, kind="chat")
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]  # noqa: E731
    query = info["question"]
    call = json.dumps({"name": "search", "arguments": {"query": query}})
    malformed = enc('<tool_call>{"name": "search", "arguments": {"query": </tool_call>')
    script = [malformed, enc(f"<think>look it up</think><tool_call>{call}</tool_call>")]
    script.append(enc('<tool_call>{"name": "answer", "arguments": {"answer": "x"}}</tool_call>'))
    prompt = PromptBuilder(history=10, chat_template=tok, style="chat", tool_observations=True)
    settings = RolloutSettings(max_turns=3, action_format="tool_call")
    (episode,) = _play(Scripted(tok, [script]), [env], prompt, settings, seeds=(3,))
    assert [s.action for s in episode.steps] == ["", f"search[{query}]", "answer[x]"]
    assert turn_stats([episode], "r")["r/format_errors"] == 1 and episode.terminated
    answer = episode.steps[2].observation
    assert answer.startswith("[1]")
    shown = tok.decode(episode.steps[2].prompt_ids)
    assert f"<tool_response>\n{answer}\n</tool_response>" in shown
    response_ids = set(tok(answer, add_special_tokens=False)["input_ids"])
    batch = TokenBatch.from_episodes([episode], np.zeros(3), pad_id=tok.pad_token_id)
    mb = batch.minibatch(np.arange(3))
    trained = set(mb.inputs.actions[mb.mask].tolist())
    assert trained == {t for s in episode.steps for t in s.action_ids}
    answer_only = response_ids - {t for ids in script for t in ids}
    assert answer_only and not answer_only & trained  # the tool's answer is never trained
    assert parse_tool_call("<tool_call>{bad</tool_call>") is None


def _long_script(tok, n: int = 6) -> list[list[int]]:
    long = "<think>" + " ".join(["box"] * 30) + "</think><action>up</action>"
    return [tok(long, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]] * n


def test_context_budget_drops_the_oldest_turns_and_counts_them(chat_tok):
    env = _sokoban()
    prompt = _chat(chat_tok)
    free = _play(Scripted(chat_tok, [_long_script(chat_tok)]), [_sokoban()], prompt,
                 RolloutSettings(max_turns=5, action_format="tagged"))[0]  # fmt: skip
    lengths = [len(s.prompt_ids) for s in free.steps]
    budget = lengths[2] + 1  # fits two earlier turns, not three
    settings = RolloutSettings(max_turns=5, action_format="tagged", context_budget=budget)
    (episode,) = _play(Scripted(chat_tok, [_long_script(chat_tok)]), [env], prompt, settings)
    assert len(episode.steps) == 5 and all(len(s.prompt_ids) <= budget for s in episode.steps)
    assert episode.meta["context_dropped"] == [[3, 1], [4, 2]]
    assert turn_stats([episode], "r")["r/context_truncated"] == 2
    for step in episode.steps:  # instruction and current observation always shown
        text = chat_tok.decode(step.prompt_ids)
        assert text.startswith(f"<|im_start|>system\n{env.instruction}<|im_end|>")
        assert text.endswith(f"{step.observation}<|im_end|>\n<|im_start|>assistant\n")


def test_a_prompt_that_cannot_fit_ends_the_episode_with_a_reason(chat_tok):
    env = _sokoban()
    first = len(_chat(chat_tok).chat_ids(
        lambda t: chat_tok(t, add_special_tokens=False)["input_ids"], chat_tok.eos_token_id,
        env.instruction, [], env.reset(seed=0)[0],
    ))  # fmt: skip
    settings = RolloutSettings(max_turns=5, action_format="tagged", context_budget=first - 1)
    episodes = _play(Scripted(chat_tok, [_long_script(chat_tok)] * 2), [env, _sokoban()],
                     _chat(chat_tok), settings, seeds=(0, 1))  # fmt: skip
    # Instruction + observation alone exceed the budget: the episode ends failed, no crash.
    assert len(episodes[0].steps) == 0 and episodes[0].truncated and not episodes[0].success
    reason = episodes[0].meta["end_reason"]
    assert "context overflow at turn 0" in reason and f"budget of {first - 1}" in reason
    assert turn_stats(episodes, "r")["r/context_overflows"] >= 1
    assert len(to_step_batch(episodes)) == sum(len(e.steps) for e in episodes)


def test_flat_prompts_are_unchanged_by_the_budget_path(chat_tok):
    """Flat style: same text as PromptBuilder.build, history window respected."""
    policy = Scripted(chat_tok, [[chat_tok("up")["input_ids"]]])
    prompt = PromptBuilder(history=2)
    (episode,) = _play(policy, [_sokoban()], prompt, RolloutSettings(max_turns=4))
    s = episode.steps
    expect = prompt.build(_sokoban().instruction, [(x.observation, x.action) for x in s[:3]],
                          s[3].observation)  # fmt: skip
    assert s[3].prompt_ids == policy.encode(expect)


def test_a_branch_keeps_only_its_prefix_turn_events(chat_tok):
    from cairn.rollout.branching import clone_prefix

    (parent,) = _play(Scripted(chat_tok, [[[5]]]), [_sokoban()], _chat(chat_tok),
                      RolloutSettings(max_turns=4))  # fmt: skip
    parent.meta.update(
        {"format_errors": [0, 3], "truncated_actions": [2], "context_dropped": [[1, 1], [3, 2]]}
    )
    branch = clone_prefix(parent, 2)
    assert branch.meta["format_errors"] == [0] and branch.meta["truncated_actions"] == []
    assert branch.meta["context_dropped"] == [[1, 1]]
    branch.meta["format_errors"].append(1)  # the branch's own events leave the parent alone
    assert parent.meta["format_errors"] == [0, 3]


def test_branching_paths_get_the_chat_prompts_of_the_turn_loop(chat_tok):
    """The forest played through a recorder that hid the policy's eos id, so in chat style a
    tree's later prompts repeated the end-of-turn text after every sampled eos: prompts
    the policy never sees from the turn loop (or in verl)."""
    from cairn.rollout import EnvPool, RolloutContext
    from cairn.rollout.branching import Forest

    up = chat_tok("<action>up</action>", add_special_tokens=False)["input_ids"]
    script = [[[*up, chat_tok.eos_token_id]]]
    settings = RolloutSettings(max_turns=3, action_format="tagged")
    (want,) = _play(Scripted(chat_tok, script), [_sokoban()], _chat(chat_tok), settings)
    policy = Scripted(chat_tok, script)
    policy.model = None  # the forest reads the vocabulary size from the tokenizer then
    ctx = RolloutContext(policy, EnvPool(_sokoban), _chat(chat_tok), settings)
    forest = Forest(ctx)
    path = forest.root(0, 0)
    forest.play([path])
    assert len(want.steps) == 3 and want.steps[1].prompt_ids[-1] != chat_tok.eos_token_id
    assert [s.prompt_ids for s in path.episode.steps] == [s.prompt_ids for s in want.steps]
