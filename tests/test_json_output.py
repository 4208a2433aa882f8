"""ddltrace.json_output: the ``--json`` text is what ``json.dumps(indent=2, allow_nan=False)`` wrote for the value
cleaned value by value (the way ``analyze --json`` made it before), byte for byte."""

import json
import math

import numpy as np
import pandas as pd

from ddltrace.json_output import encode, records


def _cleaned(value):
    """The value made JSON-ready one value at a time, as ``analyze --json`` did before json_output."""
    if isinstance(value, dict):
        return {str(k): _cleaned(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_cleaned(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) or math.isinf(value) else float(value)
    if value is pd.NA:
        return None
    return value


def _json_text(value) -> str:
    return json.dumps(_cleaned(value), indent=2, allow_nan=False)


def test_numpy_scalars_missing_values_keys_and_floats_are_written_as_json_dumps_wrote_them():
    value = {
        "ints": [np.int64(-3), np.int32(7), np.uint64(2**64 - 1), 2**70, True, False],
        "floats": [np.float64(0.1), np.float32(0.1), 1.0, -0.0, 0.0, 1e-4, 9.99e-5, 2.5e-7, -1.5e-5, 5e-324, 1e16,
                   -3.2e20, 1.7976931348623157e308, 123456.789],
        "missing": [math.nan, np.float64("nan"), math.inf, -np.inf, np.float32("inf"), pd.NA, None],
        "keys": {1: "int", np.int64(2): "numpy int", (3, 4): "tuple", None: "none", "s": "str"},
        "bool_keys": {True: "bool", np.float64(2.5): "float"},
        "nested": {"a": ({"b": [np.float64(1e-9), (np.int8(1), "x")]}, []), "empty": {}},
        "text": ["µs", "a\u2013b", "\U0001F600 emoji", "del \x7f", "tab\tquote\"back\\slash", "\x00\x1f"],
    }
    text = encode(value)
    assert text == _json_text(value)
    assert text.isascii()
    assert json.loads(text)["floats"][7] == 2.5e-7


def test_records_of_a_frame_are_the_values_to_dict_gave_index_or_not():
    frame = pd.DataFrame({
        "int": np.array([1, -2, 3], dtype=np.int64),
        "float": [0.5, math.nan, 3e-6],
        "big": [1e17, math.inf, 2.0],
        "float32": np.array([0.1, 2.0, math.nan], dtype=np.float32),
        "flag": [True, False, True],
        "name": pd.array(["nccl:all_reduce", None, "µ-kernel"], dtype="string"),
        "object": pd.Series([np.int64(4), None, np.float64(1e-5)], dtype=object),
        "nullable": pd.array([1, None, 3], dtype="Int64"),
        "nullable_float": pd.array([0.5, None, 2e-5], dtype="Float64"),
        "nullable_flag": pd.array([True, None, False], dtype="boolean"),
        "str": pd.Series(["a", None, "ü"], dtype="str"),
        "class": pd.Categorical(["compute", "comm", None]),
    }, index=pd.Index([10, 11, 12], name="rank"))
    assert encode(records(frame, index=True)) == _json_text(frame.reset_index().to_dict(orient="records"))
    assert encode(records(frame)) == _json_text(frame.to_dict(orient="records"))
    # the GPU section's former way: missing values as None first
    assert encode(records(frame)) == _json_text(frame.astype(object).where(frame.notna(), None).to_dict("records"))
    rows = json.loads(encode({"rows": records(frame)}))["rows"]
    assert rows[1] == {"int": -2, "float": None, "big": None, "float32": 2.0, "flag": False, "name": None,
                       "object": None, "nullable": None, "nullable_float": None, "nullable_flag": None, "str": None,
                       "class": "comm"}
    assert rows[2]["float"] == 3e-6 and rows[0]["big"] == 1e17 and rows[2]["class"] is None
    assert records(frame.iloc[:0]) == []
