"""Prompt building and action parsing."""

from __future__ import annotations

import pytest

from cairn.agent import PromptBuilder, parse_action


def test_prompt_keeps_the_last_k_turns():
    past = [("o1", "up"), ("o2", "down"), ("o3", "left")]
    text = PromptBuilder(history=2).build("push", past, "o4")
    assert text == "push\nobs: o2 act: down\nobs: o3 act: left\nobs: o4 act:"
    assert PromptBuilder(history=0).build("push", past, "o4") == "push\nobs: o4 act:"
    assert PromptBuilder(history=9).build("", past, "o4").count("obs:") == 4


def test_prompt_extra_block_follows_the_instruction():
    text = PromptBuilder().build("push", [], "o", extra="<tip> go left </tip>")
    assert text.splitlines()[:2] == ["push", "<tip> go left </tip>"]


def test_parse_action_forms():
    assert parse_action("  left \n") == "left"
    assert parse_action("think...\n<action> up </action> done") == "up"
    assert parse_action("\n\n") is None
    assert parse_action("move: right", pattern=r"move:\s*(\w+)") == "right"
    assert parse_action("nothing", pattern=r"move:\s*(\w+)") is None


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("<Action>up</Action>", "up"),
        ("<ACTION> left </ACTION>", "left"),
        ("< action >down</ action >", "down"),
        ("<action >right< /action>", "right"),
        ("I think so.\n<action>\n(1 + 2) * 3\n</action>\nDone.", "(1 + 2) * 3"),
        ("<action>up</action><action>down</action>", "up"),  # the first tag counts
    ],
)
def test_tagged_accepts_case_and_whitespace_variants_of_the_tag(text, action):
    assert parse_action(text, fmt="tagged") == action


@pytest.mark.parametrize(
    "text",
    ["<action>up", "up</action>", "<actions>up</actions>", "<act>up</act>", "up", "<action up>"],
)
def test_tagged_still_needs_a_closed_action_tag(text):
    assert parse_action(text, fmt="tagged") is None
