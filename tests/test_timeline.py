"""The timeline and counters schema: construction, dtypes, and one error listing every violation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ddltrace.errors import SchemaError
from ddltrace.timeline import (
    CATEGORIES,
    CATEGORY_DTYPE,
    COUNTER_DTYPES,
    TIMELINE_DTYPES,
    make_counters,
    make_timeline,
    validate_timeline,
)


def good_rows():
    return [
        dict(rank=0, name="MPI_Barrier", category="barrier", start_ns=10, dur_ns=5),
        dict(rank=1, lane="gpu:0", name="conv", category="compute", start_ns=12, dur_ns=0, bytes=64, peer=0),
    ]


def test_from_records_fills_optional_columns_with_their_dtypes():
    t = make_timeline(good_rows())
    assert list(t.columns) == list(TIMELINE_DTYPES)
    for column, dtype in TIMELINE_DTYPES.items():
        assert str(t[column].dtype) == str(dtype), column
    assert t.loc[0, "lane"] == "main"
    assert pd.isna(t.loc[0, "bytes"]) and t.loc[1, "bytes"] == 64
    assert list(t["category"].cat.categories) == list(CATEGORIES)


def test_from_arrays_and_keywords_agree():
    arrays = dict(rank=np.array([0, 1]), name=["a", "b"], category=["io", "wait"],
                  start_ns=np.array([1, 2], dtype=np.int64), dur_ns=np.array([3, 4], dtype=np.int64))
    a = make_timeline(arrays)
    b = make_timeline(**arrays)
    pd.testing.assert_frame_equal(a, b)
    assert a["dur_ns"].tolist() == [3, 4]


@pytest.mark.parametrize("column, value, message", [
    ("dur_ns", -1, "column 'dur_ns': below 0 at row 1"),
    ("dur_ns", float("nan"), "column 'dur_ns': missing (NaN/None) at row 1"),
    ("category", "gpu", "column 'category': unknown category gpu"),
    ("rank", 1.5, "column 'rank': not an integer at row 1"),
    ("rank", -2, "column 'rank': below 0 at row 1"),
    ("rank", "one", "column 'rank': not a number at row 1"),
    ("start_ns", 2.5, "column 'start_ns': not an integer at row 1"),
    ("name", 7, "column 'name': not a string at row 1"),
    ("bytes", -8, "column 'bytes': below 0 at row 1"),
    ("peer", 0.5, "column 'peer': not an integer at row 1"),
])
def test_each_kind_of_violation_is_named_with_row_and_column(column, value, message):
    rows = good_rows()
    rows[1][column] = value
    with pytest.raises(SchemaError) as err:
        make_timeline(rows)
    assert message in str(err.value)


def test_every_violation_is_reported_at_once():
    rows = good_rows() + [dict(rank=0.5, name="x", category="nope", start_ns=1, dur_ns=-3)]
    rows[0]["dur_ns"] = float("nan")
    with pytest.raises(SchemaError) as err:
        make_timeline(rows)
    problems = err.value.problems
    joined = " | ".join(problems)
    assert "'rank': not an integer at row 2" in joined
    assert "unknown category nope at row 2" in joined
    assert "'dur_ns': missing (NaN/None) at row 0" in joined
    assert "'dur_ns': below 0 at row 2" in joined
    assert len(problems) >= 4


@pytest.mark.parametrize("column, values, message", [
    ("rank", np.array([0, -1], dtype=np.int32), "column 'rank': below 0 at row 1"),
    ("dur_ns", np.array([5, -2], dtype=np.int64), "column 'dur_ns': below 0 at row 1"),
    ("bytes", pd.array([pd.NA, -8], dtype="Int64"), "column 'bytes': below 0 at row 1"),
    ("lane", pd.Series(["main", None], dtype="str"), "column 'lane': not a string at row 1"),
    ("source", pd.Series([None, "x"], dtype="str"), "column 'source': not a string at row 0"),
    ("category", pd.Categorical([None, "compute"], dtype=CATEGORY_DTYPE), "column 'category': unknown category"),
    ("category", pd.Categorical(["barrier", "compute"], categories=list(reversed(CATEGORIES))),
     "column 'category': dtype is category, must be the category set"),
])
def test_a_frame_at_the_exact_dtypes_is_still_checked_value_by_value(column, values, message):
    """Frames already at the schema's dtypes take a shortcut through validation: a bad value there is still
    found and named like any other (make_timeline fills a missing lane or source, as for any frame)."""
    t = make_timeline(good_rows())
    t[column] = values
    with pytest.raises(SchemaError) as err:
        validate_timeline(t)
    assert message in str(err.value)
    if column in ("lane", "source"):  # make_timeline fills a missing lane or source instead
        assert make_timeline(t)[column].tolist() == {"lane": ["main", "main"], "source": ["", "x"]}[column]
    else:
        with pytest.raises(SchemaError):
            make_timeline(t)


def test_start_ns_must_be_int64_when_validating_a_frame_directly():
    t = make_timeline(good_rows())
    t["start_ns"] = t["start_ns"].astype("int32")
    with pytest.raises(SchemaError, match="column 'start_ns': dtype is int32, must be int64"):
        validate_timeline(t)


def test_missing_and_unknown_columns():
    with pytest.raises(SchemaError, match="missing column"):
        make_timeline([dict(rank=0, name="a", start_ns=0, dur_ns=1)])
    t = make_timeline(good_rows())
    t["colour"] = "red"
    with pytest.raises(SchemaError, match="unknown column.*colour"):
        validate_timeline(t)


def test_long_lists_of_bad_rows_are_shortened():
    rows = [dict(rank=0, name="a", category="compute", start_ns=i, dur_ns=-1) for i in range(50)]
    with pytest.raises(SchemaError, match=r"and 30 more"):
        make_timeline(rows)


def test_counters_schema():
    c = make_counters(rank=[0, -1], name=["cpu_percent", "mem_used_bytes"], t_ns=[1, 2], value=[50, 1e9])
    assert {k: str(v) for k, v in c.dtypes.items()} == {k: str(v) for k, v in COUNTER_DTYPES.items()}
    with pytest.raises(SchemaError) as err:
        make_counters(rank=[-2, 0.5], name=["", "x"], t_ns=[1.5, 2], value=[1.0, 2.0])
    text = str(err.value)
    assert "'rank': below -1 at row 0" in text
    assert "'rank': not an integer at row 1" in text
    assert "'name': not a non-empty string at row 0" in text
    assert "'t_ns': not an integer at row 0" in text


def test_empty_timeline_is_valid():
    t = make_timeline([])
    assert len(t) == 0 and list(t.columns) == list(TIMELINE_DTYPES)
    validate_timeline(t)
