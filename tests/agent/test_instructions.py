"""What a language model is told: the answer-format sentence (``describe_format``), tools in
the chat template (``PromptBuilder.tools``) and the instruction of a turn."""

from __future__ import annotations

import json

import pytest

from cairn.agent import (
    PromptBuilder,
    describe_format,
    example_completion,
    format_completion,
    parse_action,
)
from cairn.envs import make
from cairn.envs.search_qa import TOOLS
from cairn.policies.tokenizer import CHAT_TEMPLATE, chat_tokenizer
from cairn.rollout.loop import RolloutSettings
from cairn.rollout.turn import instruction_for

# A Qwen-style ChatML template that renders tools into the system turn (as Qwen2.5's does).
TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n{% endif %}"
    "# Tools\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>"
    "<|im_end|>\n"
    "{%- elif messages[0]['role'] == 'system' %}<|im_start|>system\n"
    "{{ messages[0]['content'] }}<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] != 'system' %}\n"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}\n<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    texts = ["search answer query documents Kalomi born Question who is the founder of"]
    return chat_tokenizer([*texts, json.dumps(list(TOOLS))], vocab_size=400)


def _builder(tok, template: str, **kw) -> PromptBuilder:
    tok.chat_template = template
    return PromptBuilder(history=5, chat_template=tok, style="chat", tools=TOOLS, **kw)


# -- describe_format ------------------------------------------------------------------------
def test_line_and_tagged_sentences_with_their_example():
    assert describe_format("line", "up") == (
        "Reply with your action alone on the first line, nothing before it. Example:\nup"
    )
    assert describe_format("tagged", "up") == (
        "You may think first, then write your action between <action> and </action>. "
        "Example: <action>up</action>"
    )


def test_tools_are_listed_as_env_actions_for_line_and_tagged_and_as_calls_for_tool_call():
    tagged = describe_format("tagged", "search[Kalomi born]", TOOLS)
    assert "- search[query]: Search the documents" in tagged
    assert "- answer[answer]: Give the final answer" in tagged
    assert tagged.endswith("Example: <action>search[Kalomi born]</action>")
    calls = describe_format("tool_call", "search[Kalomi born]", TOOLS)
    assert "- search(query): Search the documents" in calls
    example = '{"name": "search", "arguments": {"query": "Kalomi born"}}'
    assert calls.endswith(f"Example: <tool_call>{example}</tool_call>")
    # the example is itself a call the parser reads back as the env action
    assert parse_action(calls.rsplit("Example: ", 1)[1], fmt="tool_call") == "search[Kalomi born]"
    # a template that renders the tools: the text does not list them again
    assert "Tools:" not in describe_format("tool_call", "search[x]", TOOLS, tools_in_template=True)


def test_unknown_format_is_a_clear_error():
    with pytest.raises(ValueError, match="action format 'json' is not one of"):
        describe_format("json", "up")


# -- tools in the chat template -------------------------------------------------------------
def test_renders_tools_needs_tools_and_a_template_that_mentions_them(tok):
    assert _builder(tok, TOOLS_TEMPLATE).renders_tools
    assert not _builder(tok, CHAT_TEMPLATE).renders_tools  # ChatML without tools
    tok.chat_template = TOOLS_TEMPLATE
    assert not PromptBuilder(chat_template=tok, style="chat").renders_tools  # no tools given


def test_chat_prompt_carries_the_schemas_as_the_tokenizer_renders_them(tok):
    builder = _builder(tok, TOOLS_TEMPLATE)
    text = builder.build("Answer.", [], "Question: who is Kalomi ?")
    messages = [
        {"role": "system", "content": "Answer."},
        {"role": "user", "content": "Question: who is Kalomi ?"},
    ]
    assert text == tok.apply_chat_template(
        messages, tools=list(TOOLS), tokenize=False, add_generation_prompt=True
    )
    assert json.dumps(TOOLS[0]) in text and "<tools>" in text
    # a template without tools: the prompt is the plain rendering, no schema in it
    plain = _builder(tok, CHAT_TEMPLATE).build("Answer.", [], "Question: who is Kalomi ?")
    assert "<tools>" not in plain and '"parameters"' not in plain


def test_token_in_token_out_holds_with_tools(tok):
    """Turn 2's prompt ids extend turn 1's prompt ids plus the sampled ids, and splicing
    canonical ids gives the template's own rendering, tools included."""
    builder = _builder(tok, TOOLS_TEMPLATE, tool_observations=True)
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    completion = format_completion("search[Kalomi born]", fmt="tool_call")
    sampled = [*enc(completion), tok.eos_token_id]
    first = builder.chat_ids(enc, tok.eos_token_id, "Answer.", [], "Question: who ?")
    second = builder.chat_ids(
        enc, tok.eos_token_id, "Answer.", [("Question: who ?", sampled)], "[1] Kalomi born", turn=1
    )
    assert second[: len(first) + len(sampled)] == first + sampled
    text = builder.build("Answer.", [("Question: who ?", completion)], "[1] Kalomi born")
    assert tok.decode(second) == text and "<tools>" in text


def test_instruction_lists_tools_only_where_the_template_does_not(tok):
    env = make("search_qa", kb_seed=0, kb_size=12, hops=[1, 2], max_steps=4, render="text")
    env.reset(seed=3)
    settings = RolloutSettings(action_format="tool_call", describe_format=True)
    rendered = _builder(tok, TOOLS_TEMPLATE).renders_tools
    assert "Tools:" not in instruction_for(env, settings, rendered)
    listed = instruction_for(env, settings, _builder(tok, CHAT_TEMPLATE).renders_tools)
    assert listed.startswith(env.instruction + "\nCall exactly one tool per turn")
    assert "- answer(answer): Give the final answer; this ends the episode." in listed


# -- the demonstration exchange ---------------------------------------------------------------
def test_example_completion_in_each_format():
    assert example_completion("line", "up") == "up"
    assert example_completion("tagged", "up") == "<action>up</action>"
    call = example_completion("tool_call", "answer[Kaka]", TOOLS)
    assert call == '<tool_call>{"name": "answer", "arguments": {"answer": "Kaka"}}</tool_call>'


def test_example_opens_the_conversation_and_the_flat_prompt(tok):
    example = (("Numbers: 1, 2, 3. Target: 9.", "<action>(1 + 2) * 3</action>"),)
    tok.chat_template = CHAT_TEMPLATE
    chat = PromptBuilder(chat_template=tok, style="chat", example=example)
    roles = [(m["role"], m["content"]) for m in chat.messages("Make 9.", [], "Numbers: 4.")]
    assert roles == [
        ("system", "Make 9."),
        ("user", "Numbers: 1, 2, 3. Target: 9."),
        ("assistant", "<action>(1 + 2) * 3</action>"),
        ("user", "Numbers: 4."),
    ]
    flat = PromptBuilder(example=example).build("Make 9.", [], "Numbers: 4.")
    assert flat == (
        "Make 9.\nobs: Numbers: 1, 2, 3. Target: 9. act: <action>(1 + 2) * 3</action>\n"
        "obs: Numbers: 4. act:"
    )


def test_token_in_token_out_holds_after_the_example(tok):
    example = (
        ("Question: where was Kalomi born ?", "<action>search[Kalomi born]</action>"),
        ("[1] Kalomi was born in Torbel", "<action>answer[Torbel]</action>"),
    )
    builder = _builder(tok, CHAT_TEMPLATE, example=example, tool_observations=True)
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    sampled = [*enc("<action>search[who]</action>"), tok.eos_token_id]
    first = builder.chat_ids(enc, tok.eos_token_id, "Answer.", [], "Question: who ?")
    second = builder.chat_ids(
        enc, tok.eos_token_id, "Answer.", [("Question: who ?", sampled)], "[1] doc", turn=1
    )
    assert second[: len(first) + len(sampled)] == first + sampled
    shown = tok.decode(first)
    assert shown.count("search[Kalomi born]") == 1
    assert "<tool_response>\n[1] Kalomi was born in Torbel" in shown  # a tool turn, as in play


def test_setup_wires_the_envs_example_and_tools_for_a_pretrained_model(tok):
    from cairn.train.config import load_config
    from cairn.train.settings import prompt_builder

    env = make("search_qa", kb_seed=0, kb_size=12, hops=[1, 2], max_steps=4, render="text")
    tok.chat_template = TOOLS_TEMPLATE
    sets = ["agent.action_format=tool_call", "agent.prompt_style=chat", "model.tokenizer=chat"]
    on = prompt_builder(
        load_config("search_qa_gigpo", [*sets, "agent.describe_format=true"]), tok, env
    )
    assert on.example == (
        (
            "Question: where was Kalomi born ?",
            '<tool_call>{"name": "search", "arguments": {"query": "Kalomi born"}}</tool_call>',
        ),
        (
            "[1] Kalomi was born in Torbel\n[2] Torbel is a city in Venlu",
            '<tool_call>{"name": "answer", "arguments": {"answer": "Torbel"}}</tool_call>',
        ),
    )
    assert on.tools == TOOLS and on.renders_tools
    # the tiny default (describe_format off) and the compact rendering get no example
    assert prompt_builder(load_config("search_qa_gigpo", sets), tok, env).example == ()
    compact = make("search_qa", kb_seed=0)
    assert compact.demonstration() == [] and make("countdown").demonstration() == []
    tagged = load_config("search_qa_gigpo", ["agent.describe_format=true"])
    assert prompt_builder(tagged, tok, env).tools == ()  # tools reach the template for calls only


def test_a_flat_prompt_ends_with_the_response_prefix(tok):
    flat = PromptBuilder(history=1, response_prefix="<action>")
    assert flat.build("Go.", [("a", "left")], "b") == "Go.\nobs: a act: left\nobs: b act: <action>"
    assert PromptBuilder(history=1).build("Go.", [], "b") == "Go.\nobs: b act:"
    chat_flat = PromptBuilder(chat_template=tok, response_prefix="<action>")
    user = [{"role": "user", "content": "Go.\nobs: b act:"}]
    own = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    assert chat_flat.build("Go.", [], "b") == own + "<action>"
