"""The timeline and counters as Arrow tables: the schema of :mod:`ddltrace.timeline`, built, checked and put in
the store's row order without pandas.

``ddltrace import`` works on these tables from the importer to the Parquet file, so that a fresh process never
imports pandas (0.4 s of a 0.3 s import); :mod:`ddltrace.timeline` turns one into the pandas DataFrame the
analyses read (:func:`ddltrace.timeline.frame_of_table`). Each table carries the same pandas metadata that
``pyarrow.Table.from_pandas`` writes for the DataFrame, so a file written from either reads back as the same
DataFrame. A table whose values break the schema is never repaired here: :func:`timeline_problem` says that it
does, and the caller sends it to :func:`ddltrace.timeline.validate_timeline`, which names every violation.
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

#: The closed set of categories, with what each one means.
CATEGORY_MEANINGS: dict[str, str] = {
    "compute": "computation on the rank (forward, backward, update, kernels)",
    "comm": "moving payload between ranks (send, receive, collectives' data movement)",
    "wait": "blocked on a peer's data (MPI_Wait*, a blocking receive waiting for its sender)",
    "barrier": "synchronisation without payload (MPI_Barrier, fences)",
    "io": "disk and data loading",
    "memcpy": "host-device copies",
    "idle": "nothing recorded to run",
    "other": "recorded, but none of the above",
}
CATEGORIES: tuple[str, ...] = tuple(CATEGORY_MEANINGS)
#: A lane named ``<stream lane>`` + this holds the spans that annotate that device stream (Kineto's
#: ``gpu_user_annotation``): region marks, never device time.
ANNOTATION_LANE_SUFFIX = "/annotations"

#: Columns added after stores were first written: a store without one reads it as all missing.
LATER_COLUMNS = ("correlation",)
#: The optional integer columns (missing where the source does not give them).
NULLABLE_INTEGER_COLUMNS = ("bytes", "peer", "step", "tag", "comm", "request", "correlation")
#: Columns whose values are checked for a missing one (the nullable integers may miss values).
_NEVER_MISSING = ("rank", "lane", "name", "category", "start_ns", "dur_ns", "source")


def _pandas_metadata(columns, category_type) -> bytes:
    """What ``pyarrow.Table.from_pandas`` records of a DataFrame of these columns (no index), so that
    ``to_pandas`` gives back the pandas dtypes (nullable integers, str, the category set)."""
    def entry(name, arrow_type, numpy_type):
        kind = {"str": "object", "Int64": "int64", "Int32": "int32"}.get(numpy_type, numpy_type)
        if arrow_type == category_type:
            return {"name": name, "field_name": name, "pandas_type": "categorical", "numpy_type": "int8",
                    "metadata": {"num_categories": len(CATEGORIES), "ordered": False}}
        return {"name": name, "field_name": name, "pandas_type": kind, "numpy_type": numpy_type, "metadata": None}
    return json.dumps({"index_columns": [], "column_indexes": [], "columns": [entry(*c) for c in columns],
                       "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}}).encode()


@functools.cache
def _arrow() -> types.SimpleNamespace:
    """The schema's Arrow objects, made at their first use (pyarrow may be deferred until the readers of a large
    file are forked: :mod:`ddltrace.deferred_import`): ``timeline`` and ``counters`` (the schemas, read as
    :data:`TIMELINE_SCHEMA` and :data:`COUNTERS_SCHEMA`), ``category_values`` (the categories' dictionary)."""
    category_type = pa.dictionary(pa.int8(), pa.string())
    timeline = (  # (name, Arrow type, pandas dtype name as pyarrow records it)
        ("rank", pa.int32(), "int32"), ("lane", pa.large_string(), "str"), ("name", pa.large_string(), "str"),
        ("category", category_type, "int8"), ("start_ns", pa.int64(), "int64"), ("dur_ns", pa.int64(), "int64"),
        ("bytes", pa.int64(), "Int64"), ("peer", pa.int32(), "Int32"), ("step", pa.int64(), "Int64"),
        ("tag", pa.int32(), "Int32"), ("comm", pa.int64(), "Int64"), ("request", pa.int64(), "Int64"),
        ("correlation", pa.int64(), "Int64"), ("source", pa.large_string(), "str"),
    )
    counters = (("rank", pa.int32(), "int32"), ("name", pa.large_string(), "str"), ("t_ns", pa.int64(), "int64"),
                ("value", pa.float64(), "float64"))
    return types.SimpleNamespace(
        timeline=pa.schema([(name, arrow_type) for name, arrow_type, _ in timeline],
                           metadata={b"pandas": _pandas_metadata(timeline, category_type)}),
        counters=pa.schema([(name, arrow_type) for name, arrow_type, _ in counters],
                           metadata={b"pandas": _pandas_metadata(counters, category_type)}),
        category_values=pa.StringArray.from_buffers(
            len(CATEGORIES), pa.py_buffer(np.cumsum([0, *(len(c) for c in CATEGORIES)], dtype=np.int32)),
            pa.py_buffer("".join(CATEGORIES).encode())))


def __getattr__(name: str):
    """:data:`TIMELINE_SCHEMA` and :data:`COUNTERS_SCHEMA`, made at their first use (:func:`_arrow`)."""
    if name == "TIMELINE_SCHEMA":
        return _arrow().timeline
    if name == "COUNTERS_SCHEMA":
        return _arrow().counters
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# pyarrow imports pandas in every ``pa.array()`` and ``to_numpy()`` (to ask whether the values are pandas'), so the
# arrays here are made from buffers, and read back as views of them.


def numbers(values: np.ndarray, arrow_type: pa.DataType, missing: np.ndarray | None = None) -> pa.Array:
    """A fixed-width Arrow array of ``values`` (cast to ``arrow_type``'s NumPy type), missing where ``missing``
    is True (None: none missing)."""
    values = np.ascontiguousarray(values, dtype=arrow_type.to_pandas_dtype())
    validity = None
    if missing is not None and np.any(missing):
        validity = pa.py_buffer(np.packbits(~np.asarray(missing, dtype=bool), bitorder="little"))
    return pa.Array.from_buffers(arrow_type, len(values), [validity, pa.py_buffer(values)])


def optional_integers(values: list, arrow_type: pa.DataType) -> pa.Array:
    """An integer Arrow array from a list of ints and Nones (missing)."""
    missing = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    return numbers(np.array([0 if v is None else v for v in values], dtype=np.int64), arrow_type, missing)


def string_array(codes: np.ndarray, table: list[str]) -> pa.Array:
    """A large-string Arrow array of ``table[code]`` for each of ``codes``: Arrow's ``take`` from the table (10x
    faster than joining the rows' bytes in Python), called through ``pyarrow._compute``, which ``pyarrow.compute``
    re-exports: importing the latter builds a wrapper for every compute function, 50 ms of each import's start."""
    from pyarrow._compute import call_function

    encoded = [text.encode() for text in table]
    codes = np.asarray(codes, dtype=np.int64)
    if len(encoded) == 1:  # one value (the source column): its bytes repeated
        offsets = np.arange(len(codes) + 1, dtype=np.int64) * len(encoded[0])
        data = encoded[0] * len(codes)
        return pa.LargeStringArray.from_buffers(len(codes), pa.py_buffer(offsets), pa.py_buffer(data))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    values = pa.LargeStringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))
    return call_function("take", [values, numbers(codes, pa.int64())])


def _chunk(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column's chunks as one array."""
    if isinstance(column, pa.Array):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def values_of(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """A fixed-width column's values as NumPy (a view of its buffer, where a missing value's slot holds
    anything) and which are missing (None: none)."""
    array = _chunk(column)
    dtype = np.dtype(array.type.to_pandas_dtype())
    buffers = array.buffers()
    if len(buffers) < 2 or buffers[1] is None:  # the null type, or no rows
        return np.zeros(len(array), dtype), (np.ones(len(array), dtype=bool) if len(array) else None)
    values = np.frombuffer(buffers[1], dtype)[array.offset:array.offset + len(array)]
    if not array.null_count:
        return values, None
    bits = np.unpackbits(np.frombuffer(buffers[0], np.uint8), bitorder="little")
    return values, bits[array.offset:array.offset + len(array)] == 0


def texts_of(column: pa.Array | pa.ChunkedArray, rows: np.ndarray | None = None) -> list[str]:
    """The strings of a large-string column with none missing (of ``rows`` only, when given)."""
    array = _chunk(column)
    buffers = array.buffers()
    if len(array) == 0:
        return []
    offsets = np.frombuffer(buffers[1], np.int64)[array.offset:array.offset + len(array) + 1]
    data = memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")
    if rows is None:
        starts, ends = offsets[:-1].tolist(), offsets[1:].tolist()
    else:  # (only the rows' offsets made Python ints: in_time_order asks for a few rows of a long column)
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = offsets[rows].tolist(), offsets[rows + 1].tolist()
    return [str(data[a:b], "utf-8") for a, b in zip(starts, ends, strict=True)]


def codes_of(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """A text column (string, large string, or a dictionary of them, as the category column is) as a code per row
    into its distinct values (int64; -1 where missing) and those values: ``pandas.factorize`` without pandas. Each
    chunk is encoded by Arrow's ``dictionary_encode`` (where not a dictionary already), the chunks' dictionaries
    merged here."""
    from pyarrow._compute import call_function

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    names: dict[str, int] = {}
    parts = []
    for chunk in chunks:
        if not pa.types.is_dictionary(chunk.type):
            chunk = call_function("dictionary_encode", [chunk])
        local, missing = values_of(chunk.indices)
        lookup = np.array([names.setdefault(str(v), len(names)) for v in chunk.dictionary.to_pylist()] + [-1],
                          dtype=np.int64)
        local = local.astype(np.int64)
        if missing is not None:
            local[missing] = -1
        parts.append(lookup[local])
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)), list(names)


def time_order(start_ns: np.ndarray, lane_rank: np.ndarray) -> np.ndarray | None:
    """The stable permutation that puts rows in the store's order (by start, then by lane name), None when
    they already are; ``lane_rank`` is each row's lane's place among the lane names sorted."""
    start_ns, lane_rank = np.asarray(start_ns), np.asarray(lane_rank)
    step = np.diff(start_ns)
    if ((step > 0) | ((step == 0) & (np.diff(lane_rank) >= 0))).all():
        return None
    return np.lexsort((lane_rank, start_ns))


def category_column(codes: np.ndarray) -> pa.DictionaryArray:
    """The category column from int8 codes into :data:`CATEGORIES`."""
    return pa.DictionaryArray.from_arrays(numbers(codes, pa.int8()), _arrow().category_values)


def timeline_table(columns: Mapping[str, Any]) -> pa.Table:
    """A table in :data:`TIMELINE_SCHEMA` from the given column arrays (Arrow, NumPy, or pandas arrays, which
    Arrow reads through ``__arrow_array__``); a nullable integer column not given is all missing, and
    ``source`` when not given is "". Values are not checked here: :func:`timeline_valid` does."""
    n = len(columns["start_ns"])
    arrays = []
    schema = _arrow().timeline
    for field in schema:
        values = columns.get(field.name)
        if values is None:
            values = pa.nulls(n, field.type) if field.name != "source" else string_array(np.zeros(n, np.int64), [""])
        elif isinstance(values, np.ndarray):
            values = numbers(values, field.type)
        elif not isinstance(values, pa.Array | pa.ChunkedArray):
            values = pa.array(values, field.type, from_pandas=True)
        elif values.type != field.type:
            values = values.cast(field.type)
        arrays.append(values)
    return pa.Table.from_arrays(arrays, schema=schema)


def counters_table(rank: np.ndarray, name, t_ns: np.ndarray, value: np.ndarray) -> pa.Table:
    """A table in :data:`COUNTERS_SCHEMA` (rank, name, t_ns, value); ``name`` a list or object array of str (each
    distinct name coded once and taken: ``pa.array`` of the strings would import pandas)."""
    names: dict[str, int] = {}
    codes = np.fromiter((names.setdefault(n, len(names)) for n in name), dtype=np.int64, count=len(name))
    return pa.Table.from_arrays([numbers(rank, pa.int32()), string_array(codes, list(names)),
                                 numbers(t_ns, pa.int64()), numbers(value, pa.float64())], schema=_arrow().counters)


def timeline_valid(table: pa.Table) -> bool:
    """Whether ``table`` holds exactly the timeline's columns at their Arrow types and every value passes
    :func:`ddltrace.timeline.validate_timeline`'s checks: no missing rank, lane, name, category, start, duration
    or source; the category dictionary the closed set; no negative rank, duration or byte count. False sends
    the table to the full checks, which name each violation."""
    if not table.schema.equals(_arrow().timeline, check_metadata=False):
        return False
    if any(table.column(column).null_count for column in _NEVER_MISSING):
        return False
    if not all(chunk.dictionary.equals(_arrow().category_values) for chunk in table.column("category").chunks):
        return False
    for column in ("rank", "dur_ns", "bytes"):
        values, missing = values_of(table.column(column))
        if ((values < 0) if missing is None else ((values < 0) & ~missing)).any():
            return False
    return True


def in_time_order(table: pa.Table) -> pa.Table:
    """The table's rows in the store's order (by start, then lane name; stable): the table itself when they
    already are, which is checked without sorting the lane names (only rows that start together compare them)."""
    start = values_of(table.column("start_ns"))[0]
    step = np.diff(start)
    if not (step < 0).any():
        ties = np.flatnonzero(step == 0)
        lanes = table.column("lane")
        if not len(ties) or all(a <= b for a, b in zip(texts_of(lanes, ties), texts_of(lanes, ties + 1), strict=True)):
            return table
    lane_rank = np.unique(np.array(texts_of(table.column("lane")), dtype=object), return_inverse=True)[1]
    return table.take(numbers(time_order(start, lane_rank.reshape(-1)), pa.int64()))
