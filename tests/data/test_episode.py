"""Episode sources: the enum keeps the published integers of the step table's column."""

import json

from cairn.data.episode import Episode, Source, to_records, to_step_batch


def test_source_values_are_the_published_column_values() -> None:
    # docs/architecture.md: source 0 on-policy, 1 off-policy demonstration, 2 memory-guided
    assert [int(s) for s in (Source.ON_POLICY, Source.DEMO, Source.MEMORY)] == [0, 1, 2]
    assert Episode(id=0, group=0, task=0).source == Source.ON_POLICY


def test_source_reaches_the_step_table_and_records_as_an_integer() -> None:
    from cairn.data.episode import Step

    step = Step(t=0, observation="o", anchor="o", action="a", completion="a", reward=1.0)
    ep = Episode(id=0, group=0, task=0, steps=[step], source=Source.DEMO)
    assert to_step_batch([ep]).source.tolist() == [1]
    assert json.loads(json.dumps(to_records([ep])))[0]["source"] == 1


def _turns(prompts: list[str]) -> "Episode":
    from cairn.data.episode import Step

    steps = [
        Step(t, f"o{t}", f"o{t}", "up", "up", 0.0, prompt_ids=[ord(c) for c in text])
        for t, text in enumerate(prompts)
    ]
    return Episode(id=0, group=0, task=0, steps=steps)


def test_records_keep_each_turns_prompt_once() -> None:
    """The prompt the model saw, decoded from its ids, stored as what is new since the turn
    before: a history prompt repeats the turns before it, so each turn adds its own part."""
    from cairn.data.episode import prompt_texts

    system = "You push boxes. " * 20
    prompts = [system + "o0 ->", system + "o0 -> up o1 ->", system + "o0 -> up o1 -> up o2 ->"]
    prompts.append(system + "o1 -> up o2 -> up o3 ->")  # a window of two turns slid by one
    prompts.append("a prompt that shares nothing")
    decode = lambda ids: "".join(map(chr, ids))  # noqa: E731 - the tokenizer's ids -> text
    (rec,) = json.loads(json.dumps(to_records([_turns(prompts)], decode=decode)))
    deltas = [s["prompt"] for s in rec["steps"]]
    assert deltas[0] == {"keep": 0, "add": prompts[0]}
    assert deltas[1] == {"keep": len(prompts[0]), "add": " up o1 ->"}
    # after the system text, the two turns both show are copied from the prompt before
    start = len(system + "o0 -> up ")
    assert deltas[3] == {"keep": len(system), "from": start, "len": 14, "add": " up o3 ->"}
    assert deltas[4] == {"keep": 0, "add": prompts[4]}
    assert prompt_texts(rec) == prompts
    stored = sum(len(d["add"]) for d in deltas[:4])
    assert stored < len(prompts[0]) + 60 < sum(map(len, prompts[:4])) / 3  # system text once


def test_records_without_a_decoder_keep_no_prompt() -> None:
    from cairn.data.episode import prompt_texts

    (rec,) = to_records([_turns(["a", "ab"])])
    assert "prompt" not in rec["steps"][0] and prompt_texts(rec) == [None, None]
