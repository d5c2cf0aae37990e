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
