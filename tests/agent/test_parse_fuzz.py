"""Hostile model output never ends a run: every parser (the three action formats and each
env's answer checker) turns it into an invalid action, counted, and never raises."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from cairn.agent import ACTION_FORMATS, PromptBuilder, parse_action, parse_tool_call
from cairn.envs import available, env_traits, make
from cairn.policies.hf import Generation
from cairn.rollout import RolloutSettings, rollout, tasks_for_groups

DEEP = 1000  # past Python's default recursion limit: json.loads raised RecursionError


def _call(name: str, value: str) -> str:
    """A tool call whose argument is the raw JSON text ``value``."""
    return f'<tool_call>{{"name": "{name}", "arguments": {{"query": {value}}}}}</tool_call>'


#: Completions a model could write that no parser may crash on (name -> text).
HOSTILE_TEXT = {
    "deep_brackets": "[" * DEEP + "]" * DEEP,
    "deep_braces": '{"a":' * DEEP + "1" + "}" * DEEP,
    "deep_parens": "(" * DEEP + "1" + ")" * DEEP,
    "huge_int": "9" * 5000,
    "nan": "NaN",
    "infinity": "-Infinity",
    "control_chars": "up\x00\x01\x1b[31m\r\x7f\x85down",
    "long": "left " * 200_000,  # 1 MB
    "unicode": "\u202eleft\ufeff \U0001d7d9\U0001d7da \u5de6 \ud800 e\u0301",
    "unclosed_tags": "<action><action>left</action" + "<tool_call>" * 1000,
    "huge_power": "9**9**9**9",
    "huge_float": "1e99999 ** 1e99999",
}

#: Tool calls that are not standard JSON or break Python's JSON reader: format errors.
HOSTILE_CALLS = {
    "deep_nesting": _call("search", "[" * DEEP + "]" * DEEP),  # RecursionError before
    "deep_object": _call("search", '{"a":' * DEEP + "1" + "}" * DEEP),
    "huge_int": _call("answer", "9" * 5000),  # ValueError (int digit limit) before
    "nan": _call("answer", "NaN"),
    "infinity": _call("answer", "Infinity"),
    "duplicate_keys": '<tool_call>{"name": "answer", "name": "search", '
    '"arguments": {"query": "x"}}</tool_call>',
    "duplicate_argument": '<tool_call>{"name": "search", '
    '"arguments": {"query": "x", "query": "y"}}</tool_call>',
    "raw_control_char": '<tool_call>{"name": "search\x00", "arguments": {"q": "x"}}</tool_call>',
    "bad_json": "<tool_call>{'name': 'search'}</tool_call>",
    "array": "<tool_call>[1, 2]</tool_call>",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_CALLS))
def test_a_hostile_tool_call_is_a_format_error(name):
    # Old code: deep nesting raised RecursionError and a 5000-digit number ValueError out of
    # parse_tool_call (and out of rollout/loop.py's play); NaN / a key twice were accepted.
    assert parse_tool_call(HOSTILE_CALLS[name]) is None
    assert parse_action(HOSTILE_CALLS[name], fmt="tool_call") is None


def test_standard_tool_calls_still_parse():
    ok = '<tool_call>{"name": "search", "arguments": {"query": "who"}}</tool_call>'
    assert parse_action(ok, fmt="tool_call") == "search[who]"
    number = '<tool_call>{"name": "answer", "arguments": {"answer": 12345}}</tool_call>'
    assert parse_action(number, fmt="tool_call") == "answer[12345]"
    # 4000 digits is within int's default limit of 4300: still a number, not an error.
    big = _call("answer", "7" * 4000)
    assert parse_tool_call(big) == ("answer", "7" * 4000)
    # 900 levels fit under the recursion limit: valid JSON, but not one string or number.
    assert parse_tool_call(_call("search", "[" * 900 + "]" * 900)) is None


def test_a_call_whose_closing_tag_is_missing_is_read_up_to_its_json_object():
    """What SmolLM2 writes after a ``<tool_call>`` response prefix: the call, then prose."""
    rambling = '<tool_call>{"name": "answer", "arguments": {"answer": "Kalioa"}}\n\nIt is.'
    assert parse_action(rambling, fmt="tool_call") == "answer[Kalioa]"
    assert parse_tool_call('<tool_call> {"name": "search", "arguments": {"q": 7}}') == (
        "search",
        "7",
    )
    # an open call then a closed one is one bad call (as before); a cut or hostile object
    # is still none
    two = '<tool_call>{"name": "a", "arguments": {"x": "1"}}<tool_call>{"name": "b", '
    assert parse_tool_call(two + '"arguments": {"x": "2"}}</tool_call>') is None
    assert parse_tool_call('<tool_call>{"name": "answer", "arguments": {"answer": "x"') is None
    assert parse_tool_call('<tool_call>{"name": "a", "arguments": {"x": NaN}} ok') is None
    assert parse_tool_call('<tool_call>{"name": "a", "name": "b", "arguments": {"x": 1}}') is None
    assert parse_tool_call("<tool_call> answer: Kalioa") is None


@pytest.mark.parametrize("fmt", ACTION_FORMATS)
@pytest.mark.parametrize("name", sorted({**HOSTILE_TEXT, **HOSTILE_CALLS}))
def test_no_completion_makes_a_parser_raise(fmt, name):
    text = {**HOSTILE_TEXT, **HOSTILE_CALLS}[name]
    for completion in (text, f"<action>{text}</action>", _call("search", json.dumps(text))):
        action = parse_action(completion, fmt=fmt)
        assert action is None or isinstance(action, str)
    assert parse_action(text, pattern=r"move:\s*(\S+)") is None


def test_a_bad_format_or_pattern_is_still_the_callers_error():
    with pytest.raises(ValueError, match="action format 'yaml'"):
        parse_action("left", fmt="yaml")
    with pytest.raises(ValueError, match="needs a group"):
        parse_action("left", pattern=r"left")


def _envs() -> list[str]:
    names = []
    for name in available():
        try:
            make(name).close()
        except ImportError:  # an optional extra that is not installed
            continue
        names.append(name)
    return names


ENV_NAMES = _envs()


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_every_env_checker_answers_hostile_actions_with_valid_false(env_name):
    env = make(env_name)
    # an env that takes free text as its answer (the dataset env) may call any text valid:
    # there the checker must answer with a bool, never raise
    free_text = env_traits(env_name).get("free_text", False)
    try:
        ended = True
        for name, text in {**HOSTILE_TEXT, **HOSTILE_CALLS}.items():
            if ended:  # one reset per episode (a JVM env's reset takes seconds)
                env.reset(seed=3)
            _, _, term, trunc, info = env.step(text)
            if free_text:
                assert isinstance(info["valid"], bool), (env_name, name)
            else:
                assert info["valid"] is False, (env_name, name)
            ended = term or trunc
        if env_name == "search_qa":  # its two actions, each with a hostile argument
            for verb in ("search", "answer"):
                for text in HOSTILE_TEXT.values():
                    env.reset(seed=3)
                    env.step(f"{verb}[{text}]")  # a well-formed action: only no exception
    finally:
        env.close()


class _Scripted:
    """A policy that answers the n-th prompt with ``texts[n % len(texts)]`` (one id per char)."""

    def __init__(self, texts: Sequence[str]):
        self.texts, self.n, self.forward_tokens = list(texts), 0, 0

    def encode(self, text: str) -> list[int]:
        return [ord(c) % 128 for c in text[:64]]

    def generate(self, prompts: Sequence[Sequence[int]], **_: Any) -> list[Generation]:
        out = []
        for _ids in prompts:
            text = self.texts[self.n % len(self.texts)]
            self.n += 1
            out.append(Generation([1], [0.0], text, "eos", None, [0.0]))
        return out


@pytest.mark.parametrize("fmt", ACTION_FORMATS)
@pytest.mark.parametrize("env_name", ["sokoban", "countdown", "search_qa", "integration"])
def test_a_rollout_of_hostile_completions_counts_invalid_actions(env_name, fmt):
    # Through rollout/loop.py's play: old code ended the whole rollout (and the run) on the
    # first deep tool call; now each hostile turn is an invalid step, and a tool call that
    # does not parse is also a format error.
    texts = [*HOSTILE_CALLS.values(), *HOSTILE_TEXT.values()]
    envs = [make(env_name) for _ in range(4)]
    settings = RolloutSettings(max_turns=len(texts), action_format=fmt, invalid_penalty=0.1)
    episodes = rollout(
        _Scripted(texts), envs, tasks_for_groups([5, 6], 2), PromptBuilder(), settings
    )
    steps = [s for e in episodes for s in e.steps]
    assert steps and all(not s.valid and s.penalty == 0.1 for s in steps)
    if fmt == "tool_call":  # every completion: no tool call, or one that does not parse
        assert all(len(e.meta["format_errors"]) == len(e.steps) for e in episodes)
