"""What a language model is told about the answer format of ``agent.action_format``.

An env's ``instruction`` states the task: the goal and the legal actions. How an action is
written down is the agent's business (``cairn.agent.parse``), so the sentence that states
the exact format, with one example built from the env's own ``example_action``, is made
here and appended to the instruction when ``agent.describe_format`` is on (the default
for pretrained models; the tiny default reads no instructions, so its prompts stay as
they are).

``tool_call``: the env's ``tools`` (JSON schemas, as ``apply_chat_template(tools=...)``
takes them) reach a chat template that renders tools; where the template does not, the
tools are described here in one line each. With ``line`` and ``tagged`` the same tools are
listed as the env actions they stand for (``search[query]: ...``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cairn.agent.parse import ACTION_FORMATS, format_completion

__all__ = ["describe_format", "example_completion", "tool_schema"]


def tool_schema(name: str, argument: str, description: str, arg_help: str) -> dict[str, Any]:
    """One tool in the JSON-schema form chat templates take (``tools=[...]``): a function
    ``name`` with one required string ``argument``."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {argument: {"type": "string", "description": arg_help}},
                "required": [argument],
            },
        },
    }


def describe_format(
    fmt: str,
    example_action: str,
    tools: Sequence[dict[str, Any]] = (),
    tools_in_template: bool = False,
) -> str:
    """The sentence(s) stating how to write one action in format ``fmt``, with an example.

    ``example_action`` is an env action (``up``, ``search[capital of France]``); for
    ``tool_call`` it is shown as the JSON call ``format_completion`` writes. ``tools``
    are described in the text unless the chat template renders them itself.
    """
    if fmt not in ACTION_FORMATS:
        raise ValueError(f"action format {fmt!r} is not one of {', '.join(ACTION_FORMATS)}")
    actions = ["Actions:", *(_action_line(t) for t in tools)] if tools else []
    if fmt == "line":
        head = "Reply with your action alone on the first line, nothing before it."
        return _joined(head, actions, f"Example:\n{example_action}")
    if fmt == "tagged":
        head = "You may think first, then write your action between <action> and </action>."
        example = format_completion(example_action, fmt="tagged")
        return _joined(head, actions, f"Example: {example}")
    lines = ["Call exactly one tool per turn, as JSON between <tool_call> and </tool_call>."]
    if tools and not tools_in_template:
        lines.append("Tools:")
        lines += [_tool_line(t) for t in tools]
    example = format_completion(example_action, fmt="tool_call", arg=_arg_of(tools, example_action))
    lines.append(f"Example: {example}")
    return "\n".join(lines)


def _tool_line(tool: dict[str, Any]) -> str:
    fn = tool["function"]
    args = ", ".join(fn["parameters"]["properties"])
    return f"- {fn['name']}({args}): {fn['description']}"


def example_completion(fmt: str, example_action: str, tools: Sequence[dict[str, Any]] = ()) -> str:
    """``example_action`` written as a model's whole reply in format ``fmt``: the bare
    action (``line``), ``<action>...</action>`` (``tagged``) or the JSON tool call."""
    if fmt not in ACTION_FORMATS:
        raise ValueError(f"action format {fmt!r} is not one of {', '.join(ACTION_FORMATS)}")
    if fmt == "line":
        return example_action
    return format_completion(example_action, fmt=fmt, arg=_arg_of(tools, example_action))


def _joined(head: str, actions: list[str], example: str) -> str:
    """One paragraph, or one line each when an action list sits between."""
    return "\n".join([head, *actions, example]) if actions else f"{head} {example}"


def _action_line(tool: dict[str, Any]) -> str:
    fn = tool["function"]
    args = ", ".join(fn["parameters"]["properties"])
    return f"- {fn['name']}[{args}]: {fn['description']}"


def _arg_of(tools: Sequence[dict[str, Any]], action: str) -> str | None:
    """The argument name the tools give the example action's tool (None: the default)."""
    name = action.split("[", 1)[0].strip()
    for tool in tools:
        fn = tool["function"]
        if fn["name"] == name:
            return next(iter(fn["parameters"]["properties"]), None)
    return None
