"""The timeline and the counters: the one schema every part of ddltrace speaks.

A *timeline* is a pandas DataFrame with one row per interval on one rank:

==========  ==========  =============================================================
column      dtype       meaning
==========  ==========  =============================================================
rank        int32       MPI rank (or worker index) that the interval belongs to, >= 0
lane        object/str  thread, stream or device within the rank ("main", "gpu:0", ...)
name        object/str  what ran ("MPI_Barrier", "conv2d", "read_data", ...)
category    category    one of :data:`CATEGORIES` (a closed set)
start_ns    int64       start, nanoseconds on the run's common clock
dur_ns      int64       duration in nanoseconds, >= 0
bytes       Int64       payload bytes moved, where known (else <NA>)
peer        Int32       the other rank of a point-to-point call or root of a collective
step        Int64       training step, where the source marks it
tag         Int32       MPI tag of a point-to-point call
comm        Int64       communicator id (per rank, as recorded)
request     Int64       MPI request handle, to match a Wait to its Isend / Irecv
correlation Int64       id linking a GPU activity to the host call that launched it (Kineto ``correlation``)
source      object/str  collector or importer that made the row ("pmpi", "kineto", ...)
==========  ==========  =============================================================

The *counters* table holds sampled values (CPU %, GPU utilisation, bytes on the wire):
``rank`` (int32; -1 for values that belong to the machine, not to one rank), ``name`` (str, with its unit
as a suffix such as ``cpu_percent`` or ``net_sent_bytes``), ``t_ns`` (int64, common clock) and
``value`` (float64).

Both are validated by :func:`validate_timeline` / :func:`validate_counters`, which report every violation
at once, each with its row index and column, in one :class:`~ddltrace.errors.SchemaError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ddltrace.arrow_timeline import (  # noqa: F401  (the schema's names, also read from here)
    CATEGORIES,
    CATEGORY_MEANINGS,
    LATER_COLUMNS,
    NULLABLE_INTEGER_COLUMNS,
    time_order,
)
from ddltrace.errors import SchemaError

CATEGORY_DTYPE = pd.CategoricalDtype(list(CATEGORIES), ordered=False)
_CODE = {c: i for i, c in enumerate(CATEGORIES)}

#: Timeline columns and their pandas dtypes, in order.
TIMELINE_DTYPES: dict[str, Any] = {
    "rank": "int32",
    "lane": "str",
    "name": "str",
    "category": CATEGORY_DTYPE,
    "start_ns": "int64",
    "dur_ns": "int64",
    "bytes": "Int64",
    "peer": "Int32",
    "step": "Int64",
    "tag": "Int32",
    "comm": "Int64",
    "request": "Int64",
    "correlation": "Int64",
    "source": "str",
}
#: Columns a caller must give; the others default to missing (or "" for strings).
TIMELINE_REQUIRED = ("rank", "name", "category", "start_ns", "dur_ns")

COUNTER_DTYPES: dict[str, Any] = {
    "rank": "int32",
    "name": "str",
    "t_ns": "int64",
    "value": "float64",
}

_STRING_COLUMNS = {"lane": "main", "name": "", "source": ""}
_MAX_LISTED = 20


def _is_integer_dtype(series: pd.Series) -> bool:
    return pd.api.types.is_integer_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)


def _all_strings(series: pd.Series) -> np.ndarray | None:
    """None when every value is a string, else the mask of rows that are not."""
    if isinstance(series.dtype, pd.StringDtype):
        mask = series.isna().to_numpy()
    else:
        mask = ~np.fromiter((isinstance(v, str) for v in series), dtype=bool, count=len(series))
    return mask if mask.any() else None


def _bad_rows(mask: np.ndarray | pd.Series, index: pd.Index) -> list:
    mask = np.asarray(mask, dtype=bool)
    return list(index[mask])


def _describe(problems: list[str], rows: list, column: str, what: str, note: str = "") -> None:
    if not rows:
        return
    shown = ", ".join(str(r) for r in rows[:_MAX_LISTED])
    more = f" (and {len(rows) - _MAX_LISTED} more)" if len(rows) > _MAX_LISTED else ""
    problems.append(f"column '{column}': {what} at row {shown}{more}{note}")


def _check_integer_column(df: pd.DataFrame, column: str, problems: list[str], *, nullable: bool,
                          exact_dtype: str | None = None, minimum: int | None = None) -> None:
    series = df[column]
    if exact_dtype is not None and str(series.dtype) != exact_dtype:
        problems.append(f"column '{column}': dtype is {series.dtype}, must be {exact_dtype}")
    if _is_integer_dtype(series):
        values = series
    else:
        numeric = pd.to_numeric(series, errors="coerce")
        not_number = numeric.isna() & series.notna()
        _describe(problems, _bad_rows(not_number, df.index), column, "not a number")
        fractional = numeric.notna() & (numeric.astype("float64") % 1 != 0)
        _describe(problems, _bad_rows(fractional, df.index), column, "not an integer")
        values = numeric
    if not nullable:
        _describe(problems, _bad_rows(series.isna(), df.index), column, "missing (NaN/None)")
    if minimum is not None:
        below = pd.to_numeric(values, errors="coerce").astype("float64") < minimum
        _describe(problems, _bad_rows(below.fillna(False), df.index), column, f"below {minimum}")


def validate_timeline(df: pd.DataFrame) -> None:
    """Check ``df`` against the timeline schema; raise one :class:`SchemaError` listing every violation.

    Checks: every column present with its dtype; ``rank`` integer and >= 0; ``start_ns`` int64;
    ``dur_ns`` int64 and >= 0 (NaN or negative durations are errors); ``category`` in :data:`CATEGORIES`;
    optional integer columns hold integers; no unknown columns.
    """
    if _valid_as_typed(df):
        return
    problems: list[str] = []
    missing = [c for c in TIMELINE_DTYPES if c not in df.columns]
    if missing:
        problems.append(f"missing column(s): {', '.join(missing)}")
    unknown = [c for c in df.columns if c not in TIMELINE_DTYPES]
    if unknown:
        problems.append(f"unknown column(s): {', '.join(map(str, unknown))}")
    present = [c for c in TIMELINE_DTYPES if c in df.columns]
    for column in present:
        if column == "rank":
            _check_integer_column(df, column, problems, nullable=False, exact_dtype="int32", minimum=0)
        elif column in ("start_ns", "dur_ns"):
            _check_integer_column(df, column, problems, nullable=False, exact_dtype="int64",
                                  minimum=0 if column == "dur_ns" else None)
        elif column in NULLABLE_INTEGER_COLUMNS:
            _check_integer_column(df, column, problems, nullable=True, exact_dtype=TIMELINE_DTYPES[column],
                                  minimum=0 if column == "bytes" else None)
        elif column == "category":
            if df[column].dtype == CATEGORY_DTYPE:  # only a missing value can be outside the set
                unknown_cat = df[column].isna()
                series = df[column].astype("object")[unknown_cat]
            else:
                series = df[column].astype("object")
                unknown_cat = ~series.isin(CATEGORIES)
            if unknown_cat.any():
                values = sorted({str(v) for v in series[unknown_cat]})[:5]
                _describe(problems, _bad_rows(unknown_cat, df.index), column,
                          f"unknown category {', '.join(values)}", f" (allowed: {', '.join(CATEGORIES)})")
            elif not isinstance(df[column].dtype, pd.CategoricalDtype) or \
                    list(df[column].cat.categories) != list(CATEGORIES):
                problems.append(f"column 'category': dtype is {df[column].dtype}, must be the category set "
                                f"({', '.join(CATEGORIES)})")
        else:  # string columns
            not_str = _all_strings(df[column])
            if not_str is not None:
                _describe(problems, _bad_rows(not_str, df.index), column, "not a string")
            elif not isinstance(df[column].dtype, pd.StringDtype):
                problems.append(f"column '{column}': dtype is {df[column].dtype}, must be str")
    if problems:
        raise SchemaError("timeline", problems)


def _valid_as_typed(columns: Mapping[str, Any] | pd.DataFrame) -> bool:
    """True when ``columns`` (a frame, or a mapping of equally long arrays) holds exactly the timeline's
    columns, each at its exact dtype, and every value passes :func:`validate_timeline`'s checks, tested on the
    arrays themselves (microseconds a column, where the full checks cost a millisecond a frame); False sends
    them to the full checks, which name each violation."""
    if len(columns.keys()) != len(TIMELINE_DTYPES) or set(columns.keys()) != set(TIMELINE_DTYPES):
        return False
    if isinstance(columns, pd.DataFrame):
        dtypes = columns.dtypes
        arrays = {column: columns[column].array for column in _CHECKED_VALUES}
    else:
        dtypes = {column: getattr(values, "dtype", None) for column, values in columns.items()}
        arrays = {column: getattr(columns[column], "array", columns[column]) for column in _CHECKED_VALUES}
        if len({len(values) for values in columns.values()}) != 1:
            return False
    if not all(dtypes[column] == dtype for column, dtype in TIMELINE_DTYPES.items()):
        return False
    if any(arrays[column].isna().any() for column in ("lane", "name", "source", "category")):
        return False  # a missing string, or a category outside the set
    if list(arrays["category"].categories) != list(CATEGORIES):
        return False
    return not any(_any_negative(arrays[column]) for column in ("rank", "dur_ns", "bytes"))


#: The columns whose values :func:`_valid_as_typed` looks at (the others' dtypes say all there is to check).
_CHECKED_VALUES = ("lane", "name", "source", "category", "rank", "dur_ns", "bytes")


def _any_negative(values) -> bool:
    """Whether an integer array (numpy, or pandas' with missing values) holds a value below 0."""
    if not isinstance(values, np.ndarray):
        values = values.to_numpy("int64", na_value=0)
    return bool((values < 0).any())


def validate_counters(df: pd.DataFrame) -> None:
    """Check ``df`` against the counters schema; raise one :class:`SchemaError` listing every violation.

    ``rank`` is int32 and >= -1 (-1: the machine, not one rank), ``t_ns`` int64, ``value`` a float64
    (NaN allowed: a sampler that could not read a value says so), ``name`` a non-empty string.
    """
    problems: list[str] = []
    missing = [c for c in COUNTER_DTYPES if c not in df.columns]
    if missing:
        problems.append(f"missing column(s): {', '.join(missing)}")
    unknown = [c for c in df.columns if c not in COUNTER_DTYPES]
    if unknown:
        problems.append(f"unknown column(s): {', '.join(map(str, unknown))}")
    if "rank" in df.columns:
        _check_integer_column(df, "rank", problems, nullable=False, exact_dtype="int32", minimum=-1)
    if "t_ns" in df.columns:
        _check_integer_column(df, "t_ns", problems, nullable=False, exact_dtype="int64")
    if "value" in df.columns and str(df["value"].dtype) != "float64":
        problems.append(f"column 'value': dtype is {df['value'].dtype}, must be float64")
    if "name" in df.columns:
        not_str = _all_strings(df["name"])
        bad = not_str if not_str is not None else (df["name"] == "").to_numpy()
        _describe(problems, _bad_rows(bad, df.index), "name", "not a non-empty string")
        if not_str is None and not isinstance(df["name"].dtype, pd.StringDtype):
            problems.append(f"column 'name': dtype is {df['name'].dtype}, must be str")
    if problems:
        raise SchemaError("counters", problems)


def _coerce(df: pd.DataFrame, dtypes: Mapping[str, Any], what: str, validate) -> pd.DataFrame:
    """Cast the columns that can be cast losslessly; leave the rest for ``validate`` to report."""
    out = pd.DataFrame(index=pd.RangeIndex(len(df)))
    for column, dtype in dtypes.items():
        if column not in df.columns:
            continue
        series = df[column].reset_index(drop=True)
        try:
            if series.dtype == dtype and not (dtype == "str" and not isinstance(series.dtype, pd.StringDtype)):
                casted = series  # already right: nothing to cast (validate still checks the values)
            elif dtype == "str":
                casted = series if _all_strings(series) is None else series.astype("object")
                if _all_strings(casted) is None:
                    casted = series.astype("str")
            elif isinstance(dtype, pd.CategoricalDtype):
                casted = series.astype("object")
                if casted.isin(CATEGORIES).all():
                    casted = casted.astype(dtype)
            elif str(dtype) in ("int32", "int64"):
                if series.isna().any() or (pd.api.types.is_float_dtype(series.dtype)
                                           and (series % 1 != 0).any()):
                    raise ValueError
                casted = series.astype(dtype)
            elif str(dtype) == "float64":
                casted = series.astype("float64")
            else:  # nullable integers
                if pd.api.types.is_float_dtype(series.dtype) and (series.dropna() % 1 != 0).any():
                    raise ValueError
                casted = series.astype(dtype)
        except (ValueError, TypeError, OverflowError):
            casted = series
        out[column] = casted
    for column in df.columns:
        if column not in dtypes:
            out[column] = df[column].reset_index(drop=True)
    validate(out)
    return out


def _in_schema(columns: Mapping[str, Any]) -> bool:
    """Whether ``columns`` holds exactly the timeline's columns, each already at its dtype and length."""
    if len(columns.keys()) != len(TIMELINE_DTYPES) or set(columns.keys()) != set(TIMELINE_DTYPES):
        return False
    if len({len(columns[column]) for column in TIMELINE_DTYPES}) != 1:
        return False
    if not all(getattr(columns[column], "dtype", None) == dtype for column, dtype in TIMELINE_DTYPES.items()):
        return False
    return not any(pd.isna(columns[column]).any() for column in ("lane", "source"))  # those get filled


def make_timeline(records: Iterable[Mapping[str, Any]] | Mapping[str, Any] | pd.DataFrame | None = None,
                  **columns: Any) -> pd.DataFrame:
    """Build a validated timeline from records (dicts), a mapping of column arrays, or a DataFrame.

    Missing optional columns (and missing values in ``lane`` and ``source``) are filled: ``lane`` with "main",
    ``source`` with "", integer columns with <NA>.
    Columns may also be passed as keyword arrays: ``make_timeline(rank=[0], name=["x"], ...)``.
    Raises :class:`SchemaError` listing every violation.
    """
    if isinstance(records, Mapping | pd.DataFrame) and _valid_as_typed(records):  # nothing to fill, cast or report
        if (isinstance(records, pd.DataFrame) and list(records.columns) == list(TIMELINE_DTYPES)
                and records.index.equals(pd.RangeIndex(len(records)))):
            return records.copy(deep=False)  # already in the store's layout (copy-on-write: nothing is copied)
        return pd.DataFrame({column: getattr(records[column], "array", records[column])  # no index to align
                             for column in TIMELINE_DTYPES}, copy=False)
    if isinstance(records, Mapping | pd.DataFrame) and _in_schema(records):
        frame = pd.DataFrame({column: getattr(records[column], "array", records[column])  # no index to align
                              for column in TIMELINE_DTYPES}, copy=False)
        validate_timeline(frame)  # nothing to fill or cast: check the values only
        return frame
    if records is None:
        frame = pd.DataFrame(columns) if columns else pd.DataFrame({c: [] for c in TIMELINE_REQUIRED})
    elif isinstance(records, pd.DataFrame):
        frame = records
    elif isinstance(records, Mapping):
        frame = pd.DataFrame(dict(records))
    else:
        frame = pd.DataFrame.from_records(list(records))
        if frame.empty and not len(frame.columns):
            frame = pd.DataFrame({c: [] for c in TIMELINE_REQUIRED})
    frame = frame.copy()
    n = len(frame)
    missing_required = [c for c in TIMELINE_REQUIRED if c not in frame.columns]
    if missing_required:
        raise SchemaError("timeline", [f"missing column(s): {', '.join(missing_required)}"])
    for column, dtype in TIMELINE_DTYPES.items():
        if column in frame.columns:
            if column in ("lane", "source") and frame[column].isna().any():
                frame[column] = frame[column].astype("object").where(frame[column].notna(), _STRING_COLUMNS[column])
            continue
        if column in _STRING_COLUMNS:
            frame[column] = pd.Series([_STRING_COLUMNS[column]] * n, dtype="str")
        else:
            frame[column] = pd.array([pd.NA] * n, dtype=dtype)
    frame = frame[list(TIMELINE_DTYPES) + [c for c in frame.columns if c not in TIMELINE_DTYPES]]
    return _coerce(frame, TIMELINE_DTYPES, "timeline", validate_timeline)


def make_counters(records: Iterable[Mapping[str, Any]] | Mapping[str, Any] | pd.DataFrame | None = None,
                  **columns: Any) -> pd.DataFrame:
    """Build a validated counters table (rank, name, t_ns, value) from records, arrays or a DataFrame."""
    if records is None:
        frame = pd.DataFrame(columns) if columns else pd.DataFrame({c: [] for c in COUNTER_DTYPES})
    elif isinstance(records, pd.DataFrame):
        frame = records.copy()
    elif isinstance(records, Mapping):
        frame = pd.DataFrame(dict(records))
    else:
        frame = pd.DataFrame.from_records(list(records))
        if frame.empty and not len(frame.columns):
            frame = pd.DataFrame({c: [] for c in COUNTER_DTYPES})
    return _coerce(frame, COUNTER_DTYPES, "counters", validate_counters)


def empty_timeline() -> pd.DataFrame:
    """A timeline with no rows and every column at its dtype."""
    return make_timeline()


def empty_counters() -> pd.DataFrame:
    """A counters table with no rows and every column at its dtype."""
    return make_counters()


def frame_of_table(table) -> pd.DataFrame:
    """The timeline DataFrame of an Arrow table in :data:`~ddltrace.arrow_timeline.TIMELINE_SCHEMA` (what
    :func:`make_timeline` gives for the same columns); a table whose values break the schema is a
    :class:`SchemaError` naming each violation."""
    from ddltrace.arrow_timeline import timeline_valid

    frame = table.to_pandas()
    if timeline_valid(table):
        return frame.assign(category=frame["category"].astype(CATEGORY_DTYPE))
    return make_timeline(frame)


def table_of_frame(frame: pd.DataFrame):
    """The Arrow table (:data:`~ddltrace.arrow_timeline.TIMELINE_SCHEMA`) of a timeline DataFrame, validated."""
    import pyarrow as pa

    from ddltrace.arrow_timeline import TIMELINE_SCHEMA

    frame = make_timeline(frame)
    return pa.Table.from_pandas(frame, preserve_index=False).cast(TIMELINE_SCHEMA)


def category_codes(categories: pd.Series) -> np.ndarray:
    """Index into CATEGORIES of each row's category (-1 where missing), without a Python call per row."""
    if isinstance(categories.dtype, pd.CategoricalDtype):
        lookup = np.array([_CODE.get(c, -1) for c in categories.cat.categories] + [-1], dtype=np.int16)
        return lookup[categories.cat.codes.to_numpy()]
    codes, uniques = pd.factorize(categories.astype("object"))
    lookup = np.array([_CODE.get(c, -1) for c in uniques] + [-1], dtype=np.int16)
    return lookup[codes]
