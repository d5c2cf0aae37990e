"""The StepBatch contract: validation, access, take/concat."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.data import StepBatch


def _cols(**kw):
    base = dict(
        group=[0, 0, 1],
        episode=[0, 1, 2],
        t=[0, 0, 0],
        reward=[1.0, 0.0, 2.0],
        anchor=["a", "b", "a"],
    )
    base.update(kw)
    return base


def test_columns_and_dtypes():
    b = StepBatch.from_columns(**_cols(path=[(0,), (1,), ()], success=[1, 0, 1]))
    assert len(b) == 3 and b.group.dtype == np.int64 and b.reward.dtype == np.float64
    assert b.path[0] == (0,) and b.path[2] == () and b.success.dtype == np.bool_
    assert "path" in b and "value" not in b


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        (dict(reward=[1.0, 2.0]), "differ in length"),
        (dict(t=[0, -1, 0]), "'t' must be >= 0"),
        (dict(group=[0.5, 0, 1]), "integers"),
        (dict(reward=[1.0, np.nan, 0.0]), "non-finite"),
        (dict(anchor=[[1], "b", "a"]), "not hashable"),
        (dict(values=[1, 2, 3]), "unknown StepBatch column"),
        (dict(path=np.array([()] * 3, dtype=object)), "must be 1-D"),
    ],
)
def test_bad_columns(kw, msg):
    with pytest.raises(ValueError, match=msg):
        StepBatch.from_columns(**_cols(**kw))


def test_missing_column_access_and_require():
    b = StepBatch.from_columns(**_cols())
    with pytest.raises(AttributeError, match="no column 'value'"):
        _ = b.value
    with pytest.raises(ValueError, match="needs StepBatch column"):
        b.require("value", estimator="vineppo")


def test_take_and_concat():
    b = StepBatch.from_columns(**_cols())
    perm = np.array([2, 0, 1])
    assert list(b.take(perm).episode) == [2, 0, 1]
    both = StepBatch.concat([b, b.take(np.array([0]))])
    assert len(both) == 4 and list(both.anchor) == ["a", "b", "a", "a"]


def test_steps_intern_text_anchors_so_equal_observations_share_one_object() -> None:
    from cairn.data.episode import Step

    text = "".join(["# _ @ ", "$ . #"])  # built at run time: not a compile-time constant
    copy = "".join(["# _ @ $", " . #"])
    assert text == copy and text is not copy
    a, b = Step(0, text, text, "up", "up", 0.0), Step(1, copy, copy, "up", "up", 0.0)
    assert a.anchor is b.anchor
    key = ("strategy", text)  # non-str anchors are kept as given
    assert Step(0, text, key, "up", "up", 0.0).anchor is key


def test_crit_is_the_published_alias_of_after_error() -> None:
    # docs/architecture.md publishes ELPO's column as `crit`; it is stored as `after_error`
    batch = StepBatch.from_columns(**_cols(crit=[False, True, True]))
    assert "after_error" in batch.columns and "crit" not in batch.columns
    assert batch.after_error.tolist() == [False, True, True]
    assert batch.crit.tolist() == batch["crit"].tolist() == [False, True, True]
    assert "crit" in batch
    with pytest.raises(ValueError, match="alias"):
        StepBatch.from_columns(**_cols(crit=[True] * 3, after_error=[True] * 3))
