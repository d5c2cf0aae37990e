"""What happened to an episode besides its steps, typed in one place: ``EpisodeEvents``.

Every episode carries one record, ``Episode.events``:

    end                 why it ended early (``EpisodeEnd``: an ``EndReason``, the turn, the
                        detail); None when the env or ``max_turns`` ended it
    fault, fault_error  an env fault ended it (``EnvFault.kind``: "error" | "timeout", and
                        its message); such an episode is left out of training
    format_errors       turns whose completion held no parsable action
    truncated_actions   turns whose completion was cut at ``max_new_tokens``
    context_dropped     turns whose prompt dropped old turns to fit the context budget
                        (``ContextCut``: the turn, how many turns were dropped)
    tips                the memory tips its prompts showed (EMPO2)
    memory_mode         the memory mode of its iteration (EMPO2: "tips" | "off_policy")
    strategy            the strategy text its first step wrote (SGE)
    demo                the demonstration source it was replayed from (LUFFY)

A field left None was never recorded, which the saved form keeps apart from an empty list
(a branch's prefix may hold none of its parent's format errors: ``[]``).

Saved form. ``to_dict`` writes the record under the ``meta`` keys cairn has always used
(``EVENT_KEYS``: ``end_reason`` as one line of text, "context overflow at turn 3: ...",
``context_dropped`` as ``[turn, dropped]`` pairs) and ``from_dict`` reads them back, so
trajectory dumps, the report and old run directories keep their format. ``Episode.meta``
(``EpisodeMeta``) shows the events under those keys next to the free-form payload keys,
read and written through the typed record: code that reads or writes ``meta["fault"]``
keeps working. An end reason that is not an ``EndReason`` is an error naming the known
ones, not a string kept as it came: ``turn_stats`` counts episodes by reason, and a reason
it cannot classify would be counted as nothing.

Free-form payload, kept in ``meta`` untyped: keys whose shape one producer chooses for one
consumer, which the data layer cannot know:

- the task's ground truth from the env's reset info (``answer``, ``question``,
  ``key_steps``: ``cairn.rollout.turn.TASK_INFO_KEYS``): any JSON an env chooses, read by
  the reward that asks for it (``cairn.rewards``);
- a rollout strategy's working data: the branching strategies' per-step response
  entropies (``entropy``) and error search's results (``t_crit``, ``probes``,
  ``continuations``, ``resolved``), read by that strategy and its estimator;
- anything a user's own strategy or env attaches.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

__all__ = [
    "EVENT_KEYS",
    "TURN_EVENTS",
    "ContextCut",
    "EndReason",
    "EpisodeEnd",
    "EpisodeEvents",
    "EpisodeMeta",
]


class EndReason(StrEnum):
    """Why an episode ended before the env or ``max_turns`` ended it."""

    CONTEXT_OVERFLOW = "context overflow"  # even the shortest prompt exceeded the budget


_END_TEXT = re.compile(r"(?P<reason>.+?)(?: at turn (?P<turn>\d+))?(?:: (?P<detail>.*))?", re.S)


@dataclass(frozen=True)
class EpisodeEnd:
    """An early end: its reason, the turn it came at and a detail (an error's text)."""

    reason: EndReason
    turn: int | None = None
    detail: str | None = None

    def __str__(self) -> str:
        """The saved text: ``"<reason>[ at turn <turn>][: <detail>]"``."""
        at = "" if self.turn is None else f" at turn {self.turn}"
        return f"{self.reason.value}{at}" + ("" if self.detail is None else f": {self.detail}")

    @classmethod
    def parse(cls, text: str) -> EpisodeEnd:
        """The end ``text`` (``str(end)``) describes; a ValueError for an unknown reason."""
        match = _END_TEXT.fullmatch(text) if isinstance(text, str) else None
        known = [r.value for r in EndReason]
        if match is None or match["reason"] not in known:
            raise ValueError(
                f"unknown end_reason {text!r}: it must start with one of {', '.join(known)}"
            )
        turn = None if match["turn"] is None else int(match["turn"])
        return cls(EndReason(match["reason"]), turn, match["detail"])


class ContextCut(NamedTuple):
    """A turn whose prompt dropped its ``dropped`` oldest turns to fit the context budget."""

    turn: int
    dropped: int


#: The per-turn events, lists of turns (or ``[turn, dropped]``) that a branch's prefix
#: keeps only up to its branch point.
TURN_EVENTS = ("format_errors", "truncated_actions", "context_dropped")
#: The ``meta`` keys the events are saved under, in the order ``to_dict`` writes them.
EVENT_KEYS = (
    "end_reason",
    "fault",
    "fault_error",
    *TURN_EVENTS,
    "tips",
    "memory_mode",
    "strategy",
    "demo",
)
_FIELD = {"end_reason": "end"}  # saved key -> field, where the names differ
_TEXT_KEYS = ("fault", "fault_error", "memory_mode", "strategy", "demo")


@dataclass
class EpisodeEvents:
    """The typed events of one episode (module docstring); None: never recorded."""

    end: EpisodeEnd | None = None
    fault: str | None = None
    fault_error: str | None = None
    format_errors: list[int] | None = None
    truncated_actions: list[int] | None = None
    context_dropped: list[ContextCut] | None = None
    tips: list[str] | None = None
    memory_mode: str | None = None
    strategy: str | None = None
    demo: str | None = None

    # -- recording ---------------------------------------------------------------------------
    def add_format_error(self, t: int) -> None:
        """Turn ``t``'s completion held no parsable action."""
        if self.format_errors is None:
            self.format_errors = []
        self.format_errors.append(t)

    def add_truncated_action(self, t: int) -> None:
        """Turn ``t``'s completion was cut at ``max_new_tokens``."""
        if self.truncated_actions is None:
            self.truncated_actions = []
        self.truncated_actions.append(t)

    def add_context_cut(self, t: int, dropped: int) -> None:
        """Turn ``t``'s prompt dropped its ``dropped`` oldest turns."""
        if self.context_dropped is None:
            self.context_dropped = []
        self.context_dropped.append(ContextCut(t, dropped))

    # -- reading -------------------------------------------------------------------------------
    @property
    def end_reason(self) -> EndReason | None:
        """The reason of an early end (None: no early end)."""
        return None if self.end is None else self.end.reason

    @property
    def faulted(self) -> bool:
        """An env fault ended the episode."""
        return self.fault is not None

    def prefix(self, t: int) -> EpisodeEvents:
        """The events of a branch that copies the first ``t`` steps: the per-turn events
        before turn ``t`` (fresh lists), no fault (one after the prefix is not the branch's),
        the rest as they are."""
        before = lambda xs: None if xs is None else [x for x in xs if _turn(x) < t]  # noqa: E731
        return EpisodeEvents(
            end=self.end,
            format_errors=before(self.format_errors),
            truncated_actions=before(self.truncated_actions),
            context_dropped=before(self.context_dropped),
            tips=None if self.tips is None else list(self.tips),
            memory_mode=self.memory_mode,
            strategy=self.strategy,
            demo=self.demo,
        )

    # -- saved form ----------------------------------------------------------------------------
    def saved_keys(self) -> list[str]:
        """The ``EVENT_KEYS`` recorded (not None), in saved order."""
        return [k for k in EVENT_KEYS if getattr(self, _FIELD.get(k, k)) is not None]

    def saved(self, key: str) -> object:
        """The saved form of ``key`` (one of ``EVENT_KEYS``); KeyError when not recorded.
        The lists of turns and of tips are the record's own (appending to them records)."""
        value = getattr(self, _FIELD.get(key, key)) if key in EVENT_KEYS else None
        if value is None:
            raise KeyError(key)
        if key == "end_reason":
            return str(value)
        if key == "context_dropped":
            return [list(cut) for cut in value]
        return value

    def record(self, key: str, value: object) -> None:
        """Record the saved form ``value`` of ``key`` (one of ``EVENT_KEYS``); a ValueError
        names the key when the value has the wrong shape. None clears the key."""
        if key not in EVENT_KEYS:
            raise KeyError(f"{key!r} is no episode event; the events are {', '.join(EVENT_KEYS)}")
        setattr(self, _FIELD.get(key, key), None if value is None else _parse(key, value))

    def to_dict(self) -> dict[str, Any]:
        """The recorded events under their ``meta`` keys, as JSON-ready copies."""
        return {k: _copy(self.saved(k)) for k in self.saved_keys()}

    @classmethod
    def from_dict(cls, meta: Mapping[str, Any]) -> EpisodeEvents:
        """The events among ``meta``'s keys (other keys are ignored), copied."""
        events = cls()
        for k in EVENT_KEYS:
            if k in meta:
                events.record(k, _copy(meta[k]))
        return events


def _turn(x: int | ContextCut) -> int:
    return x.turn if isinstance(x, ContextCut) else x


def _copy(value: object) -> object:
    return (
        [list(x) if isinstance(x, list) else x for x in value] if isinstance(value, list) else value
    )


def _parse(key: str, value: Any) -> object:
    """The field value of the saved form ``value`` of ``key``."""
    if key == "end_reason":
        return value if isinstance(value, EpisodeEnd) else EpisodeEnd.parse(value)
    if key in _TEXT_KEYS:
        if not isinstance(value, str):
            raise ValueError(f"meta[{key!r}] must be a string, got {value!r}")
        return value
    if key == "context_dropped":
        pairs = value if isinstance(value, list) else None
        if pairs is None or not all(_is_int_pair(p) for p in pairs):
            raise ValueError(
                f"meta['context_dropped'] must be [turn, dropped] pairs, got {value!r}"
            )
        return [ContextCut(int(t), int(n)) for t, n in pairs]
    kind = str if key == "tips" else int
    if not isinstance(value, list) or not all(_is(x, kind) for x in value):
        what = "strings" if key == "tips" else "turn indices"
        raise ValueError(f"meta[{key!r}] must be a list of {what}, got {value!r}")
    return value  # the list itself: appending to meta[key] records, as with a dict


def _is(x: object, kind: type) -> bool:
    return isinstance(x, kind) and not isinstance(x, bool)


def _is_int_pair(p: object) -> bool:
    return isinstance(p, list | tuple) and len(p) == 2 and all(_is(x, int) for x in p)


class EpisodeMeta(MutableMapping[str, Any]):
    """``Episode.meta``: a dict of the episode's free-form ``payload`` and its ``events``
    under their saved keys (module docstring). An ``EVENT_KEYS`` key is read from and
    written to ``events`` (its value checked), any other key goes to ``payload``.
    ``context_dropped`` reads as a fresh list of pairs (append through ``events``)."""

    def __init__(
        self, items: Mapping[str, object] | None = None, events: EpisodeEvents | None = None
    ):
        self.events = events if events is not None else EpisodeEvents()
        self.payload: dict[str, Any] = {}
        if items:
            self.update(items)

    def __getitem__(self, key: str) -> Any:
        return self.events.saved(key) if key in EVENT_KEYS else self.payload[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key in EVENT_KEYS:
            self.events.record(key, value)
        else:
            self.payload[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in EVENT_KEYS:
            del self.payload[key]
        elif key not in self.events.saved_keys():
            raise KeyError(key)
        else:
            self.events.record(key, None)

    def __iter__(self) -> Iterator[str]:
        yield from self.payload
        yield from self.events.saved_keys()

    def __len__(self) -> int:
        return len(self.payload) + len(self.events.saved_keys())

    def __repr__(self) -> str:
        return repr(dict(self))

    def to_dict(self) -> dict[str, Any]:
        """A plain dict: the payload (shallow copy) and the events' ``to_dict``."""
        return {**self.payload, **self.events.to_dict()}
