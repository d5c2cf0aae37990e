"""Episode events: one typed record, saved under the meta keys run directories already hold."""

import json
from dataclasses import fields

import pytest

from cairn.data.episode import Episode, Step, to_records
from cairn.data.events import (
    EVENT_KEYS,
    ContextCut,
    EndReason,
    EpisodeEnd,
    EpisodeEvents,
    EpisodeMeta,
)

# An episode's meta as the code before the typed record wrote it (every event key, and
# free-form payload: task ground truth and a branching strategy's entropies).
OVERFLOW = "context overflow at turn 5: the prompt needs 600 tokens, over the budget of 512"
OLD_META = {
    "answer": "up",
    "key_steps": ["push", "goal"],
    "entropy": [0.5, 0.25],
    "context_dropped": [[3, 1], [4, 2]],
    "truncated_actions": [2],
    "format_errors": [1, 4],
    "end_reason": OVERFLOW,
    "fault": "timeout",
    "fault_error": "EnvTimeout: step ran past 30 s",
    "tips": ["act: left", "avoid corners"],
    "memory_mode": "off_policy",
    "strategy": "push the box left first",
    "demo": "solver",
}
PAYLOAD = ("answer", "key_steps", "entropy")


def test_old_meta_reads_into_typed_events_and_writes_back_identical():
    events = EpisodeEvents.from_dict(OLD_META)
    assert events.end == EpisodeEnd(EndReason.CONTEXT_OVERFLOW, 5, OVERFLOW.split(": ", 1)[1])
    assert events.end_reason is EndReason.CONTEXT_OVERFLOW and str(events.end) == OVERFLOW
    assert events.context_dropped == [ContextCut(3, 1), ContextCut(4, 2)]
    assert (events.format_errors, events.truncated_actions) == ([1, 4], [2])
    assert events.faulted and events.fault == "timeout"
    assert (events.tips, events.memory_mode, events.demo) == (
        OLD_META["tips"],
        "off_policy",
        "solver",
    )
    assert events.to_dict() == {k: v for k, v in OLD_META.items() if k not in PAYLOAD}
    # the whole meta through an Episode and its trajectory record: same JSON, key for key
    episode = Episode(id=0, group=0, task=0, meta=dict(OLD_META))
    assert episode.events == events and episode.meta == OLD_META
    (rec,) = json.loads(json.dumps(to_records([episode])))
    assert "events" not in rec
    assert json.dumps(rec["meta"], sort_keys=True) == json.dumps(OLD_META, sort_keys=True)


def test_from_dict_copies_so_the_old_dict_stays_alone():
    old = {"format_errors": [1], "context_dropped": [[0, 1]]}
    events = EpisodeEvents.from_dict(old)
    events.add_format_error(2)
    events.add_context_cut(3, 2)
    assert old == {"format_errors": [1], "context_dropped": [[0, 1]]}
    assert events.to_dict() == {"format_errors": [1, 2], "context_dropped": [[0, 1], [3, 2]]}


def test_an_end_reason_without_turn_or_detail_round_trips():
    for text in ("context overflow", "context overflow at turn 0", "context overflow: no room"):
        assert str(EpisodeEnd.parse(text)) == text
    assert EpisodeEnd.parse("context overflow: no room") == EpisodeEnd(
        EndReason.CONTEXT_OVERFLOW, None, "no room"
    )


@pytest.mark.parametrize("text", ["out of time at turn 3: 60 s", "", "context", 7])
def test_an_unknown_end_reason_is_a_clear_error_not_kept_as_is(text):
    # turn_stats counts episodes by reason: one it cannot classify would count as nothing
    with pytest.raises(ValueError, match=r"unknown end_reason .*one of context overflow"):
        Episode(id=0, group=0, task=0, meta={"end_reason": text})


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("format_errors", "1", r"meta\['format_errors'\] must be a list of turn indices"),
        ("truncated_actions", [1.0], r"meta\['truncated_actions'\] must be a list of turn"),
        ("context_dropped", [[3]], r"meta\['context_dropped'\] must be \[turn, dropped\] pairs"),
        ("tips", ["a", 1], r"meta\['tips'\] must be a list of strings"),
        ("fault", True, r"meta\['fault'\] must be a string, got True"),
    ],
)
def test_an_event_of_the_wrong_shape_names_its_key(key, value, match):
    with pytest.raises(ValueError, match=match):
        EpisodeMeta({key: value})


def test_meta_shows_the_events_and_keeps_payload_apart():
    episode = Episode(id=0, group=0, task=0)
    assert episode.meta == {} and len(episode.meta) == 0
    episode.meta["answer"] = "up"  # payload
    episode.meta.setdefault("format_errors", []).append(3)  # as the loop wrote it before
    episode.events.add_format_error(5)
    episode.events.fault = "error"
    assert episode.events.format_errors == [3, 5] and episode.meta.payload == {"answer": "up"}
    assert dict(episode.meta) == {"answer": "up", "fault": "error", "format_errors": [3, 5]}
    assert "fault" in episode.meta and "fault_error" not in episode.meta
    del episode.meta["fault"]
    assert not episode.events.faulted and list(episode.meta) == ["answer", "format_errors"]
    with pytest.raises(KeyError):
        del episode.meta["fault"]


def test_a_branch_prefix_keeps_the_events_before_its_turn_and_no_fault():
    events = EpisodeEvents.from_dict(OLD_META)
    branch = events.prefix(2)  # the first two steps: turns 0 and 1
    assert branch.format_errors == [1] and branch.truncated_actions == []
    assert branch.context_dropped == [] and branch.fault is None and branch.fault_error is None
    assert (branch.end, branch.strategy, branch.demo) == (events.end, events.strategy, "solver")
    branch.tips.append("new")  # fresh lists: the parent's stay
    assert events.tips == ["act: left", "avoid corners"]
    assert EpisodeEvents().prefix(2) == EpisodeEvents()  # nothing recorded stays unrecorded


def test_every_field_has_a_saved_key():
    named = {"end_reason": "end"}
    assert {f.name for f in fields(EpisodeEvents)} == {named.get(k, k) for k in EVENT_KEYS}


def _episode(steps: int) -> Episode:
    step = lambda t: Step(t=t, observation="o", anchor="o", action="a", completion="a", reward=0)  # noqa: E731
    return Episode(id=0, group=0, task=0, steps=[step(t) for t in range(steps)])


def test_turn_stats_counts_context_cuts_and_overflows_by_the_typed_events():
    from cairn.rollout.loop import turn_stats

    cut, overflowed, plain = _episode(4), _episode(2), _episode(3)
    cut.events.add_context_cut(2, 1)
    cut.events.add_context_cut(3, 2)
    overflowed.events.add_context_cut(1, 1)
    overflowed.events.end = EpisodeEnd(EndReason.CONTEXT_OVERFLOW, 2, "no room")
    overflowed.events.add_format_error(0)
    plain.events.fault = "error"  # a fault is no context overflow
    stats = turn_stats([cut, overflowed, plain], "r")
    # 3 turns dropped old turns (2 + 1), one episode ended by an overflow; 1 format error in 9
    assert stats["r/context_truncated"] == 3.0 and stats["r/context_overflows"] == 1.0
    assert stats["r/format_errors"] == 1.0 and stats["r/format_error_rate"] == 1 / 9


def test_an_episode_with_events_pickles_and_copies_whole():
    # the meta view must not tie a copy to its original (pickled by Ray or a process pool)
    import copy
    import pickle

    episode = Episode(id=0, group=0, task=0, meta=dict(OLD_META))
    for twin in (pickle.loads(pickle.dumps(episode)), copy.deepcopy(episode)):
        assert twin == episode and twin.meta == OLD_META
        twin.events.add_format_error(9)
        assert episode.events.format_errors == [1, 4]
