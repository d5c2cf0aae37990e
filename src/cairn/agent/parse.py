"""Action parsing: from a model's completion to the action string the env receives.

Three formats (``agent.action_format``):

- ``line`` (lenient, the default): an ``<action>...</action>`` tag when present, else the
  first non-empty line;
- ``tagged``: only an ``<action>...</action>`` tag counts (any case, spaces inside the
  brackets allowed: ``< Action >up</ACTION >``); a completion without one has no action (a
  format error);
- ``tool_call``: a JSON tool call ``<tool_call>{"name": N, "arguments": {K: V}}</tool_call>``
  with exactly one argument becomes the env action ``N[V]`` (search_qa's ``search[query]``);
  malformed JSON, a missing name or any other argument shape is a format error.
"""

from __future__ import annotations

import json
import re

__all__ = ["ACTION_FORMATS", "format_completion", "parse_action", "parse_tool_call"]

ACTION_FORMATS = ("line", "tagged", "tool_call")
_TAGGED = re.compile(r"<\s*action\s*>(.*?)<\s*/\s*action\s*>", re.DOTALL | re.IGNORECASE)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ENV_ACTION = re.compile(r"^\s*(\w+)\s*\[(.*)\]\s*$", re.DOTALL)


def parse_action(completion: str, pattern: str | None = None, fmt: str = "line") -> str | None:
    """The action in ``completion``, or None when it has none (a format error).

    With ``pattern`` (a regex with one group), the first match's group is the action;
    otherwise ``fmt`` decides (module docstring). The env decides whether the string is a
    valid action.
    """
    if pattern is not None:
        m = re.search(pattern, completion, re.DOTALL)
        return m.group(1).strip() if m else None
    if fmt == "tool_call":
        call = parse_tool_call(completion)
        return None if call is None else f"{call[0]}[{call[1]}]"
    if fmt not in ACTION_FORMATS:
        raise ValueError(f"action format {fmt!r} is not one of {', '.join(ACTION_FORMATS)}")
    m = _TAGGED.search(completion)
    if m:
        return m.group(1).strip()
    if fmt == "tagged":
        return None
    for line in completion.splitlines():
        if line.strip():
            return line.strip()
    return None


def parse_tool_call(completion: str) -> tuple[str, str] | None:
    """(name, argument) of the first ``<tool_call>`` JSON in ``completion``, else None.

    The call must be a JSON object with a string ``name`` and an ``arguments`` object of
    exactly one string or number value; anything else (bad JSON included) is None.
    """
    m = _TOOL_CALL.search(completion)
    if m is None:
        return None
    try:
        call = json.loads(m.group(1))
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    args = call.get("arguments")
    if not isinstance(args, dict) or len(args) != 1:
        return None
    (value,) = args.values()
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    name = call["name"].strip()
    return (name, str(value).strip()) if name else None


def format_completion(
    action: str, think: str = "", fmt: str = "tagged", arg: str | None = None
) -> str:
    """A well-formed completion for ``action`` (demonstrations, tokenizer corpora).

    ``tagged``/``line``: ``<think>think</think><action>action</action>`` (no think block
    when ``think`` is empty). ``tool_call``: an env action ``name[value]`` as a JSON tool
    call whose one argument is named ``arg`` (default: ``query`` for ``search``, else the
    tool's own name, e.g. ``{"answer": ...}``).
    """
    head = f"<think>{think}</think>" if think else ""
    if fmt != "tool_call":
        return f"{head}<action>{action}</action>"
    m = _ENV_ACTION.match(action)
    if m is None:
        raise ValueError(f"tool_call format needs an action 'name[value]', got {action!r}")
    name = m.group(1)
    key = arg or ("query" if name == "search" else name)
    call = {"name": name, "arguments": {key: m.group(2).strip()}}
    return f"{head}<tool_call>{json.dumps(call)}</tool_call>"
