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

Model output is untrusted input: whatever a completion holds (nesting 1000 deep, a
5000-digit number, NaN, duplicate keys, control characters, megabytes of text), parsing
it either gives an action or None (a format error the turn loop counts), never an
exception. Tool-call JSON is read strictly: ``NaN``/``Infinity`` and a key given twice
are format errors, as in standard JSON.
"""

from __future__ import annotations

import json
import re
from typing import NoReturn

__all__ = ["ACTION_FORMATS", "format_completion", "parse_action", "parse_tool_call"]

ACTION_FORMATS = ("line", "tagged", "tool_call")
_TAGGED = re.compile(r"<\s*action\s*>(.*?)<\s*/\s*action\s*>", re.DOTALL | re.IGNORECASE)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN_CALL = "<tool_call>"
_ENV_ACTION = re.compile(r"^\s*(\w+)\s*\[(.*)\]\s*$", re.DOTALL)


def parse_action(completion: str, pattern: str | None = None, fmt: str = "line") -> str | None:
    """The action in ``completion``, or None when it has none (a format error).

    With ``pattern`` (a regex with one group), the first match's group is the action;
    otherwise ``fmt`` decides (module docstring). The env decides whether the string is a
    valid action. Any exception while reading the completion is a format error (None);
    only a bad ``pattern`` or ``fmt`` (the caller's, not the model's) raises ValueError.
    """
    regex = _pattern(pattern) if pattern is not None else None
    if regex is None and fmt not in ACTION_FORMATS:
        raise ValueError(f"action format {fmt!r} is not one of {', '.join(ACTION_FORMATS)}")
    try:
        return _parse(completion, regex, fmt)
    except Exception:  # model output never ends a run (module docstring)
        return None


def _pattern(pattern: str) -> re.Pattern[str]:
    try:
        regex = re.compile(pattern, re.DOTALL)
    except re.error as err:
        raise ValueError(f"action pattern {pattern!r} is not a regex: {err}") from None
    if regex.groups < 1:
        raise ValueError(f"action pattern {pattern!r} needs a group holding the action")
    return regex


def _parse(completion: str, regex: re.Pattern[str] | None, fmt: str) -> str | None:
    if regex is not None:
        m = regex.search(completion)
        return m.group(1).strip() if m else None
    if fmt == "tool_call":
        call = parse_tool_call(completion)
        return None if call is None else f"{call[0]}[{call[1]}]"
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

    A call whose closing tag is missing (small models often stop or ramble on after the
    JSON) is read from the JSON object right after the first ``<tool_call>``, when no
    closed call exists; the text after that object is ignored, never part of the call.
    The call must be a standard JSON object (no ``NaN``/``Infinity``, no key twice) with a
    string ``name`` and an ``arguments`` object of exactly one string or number value;
    anything else is None: bad JSON, nesting past Python's recursion limit, a number
    past int's digit limit, or any other error while reading it.
    """
    try:
        return _tool_call(completion)
    except Exception:  # RecursionError, ValueError, MemoryError, ...
        return None


def _tool_call(completion: str) -> tuple[str, str] | None:
    m = _TOOL_CALL.search(completion)
    if m is not None:
        call = _DECODER.decode(m.group(1))
    elif _OPEN_CALL in completion:  # unclosed: the one JSON object that follows the tag
        rest = completion.split(_OPEN_CALL, 1)[1].lstrip()
        call = _DECODER.raw_decode(rest)[0]
    else:
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


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object as a dict; a key given twice is an error (standard JSON's intent)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key appears twice in a JSON object")
    return out


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not standard JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)


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
