"""The importer registry and what importers hand back.

An :class:`Importer` declares a format: a ``sniff(head, path)`` that recognises it from the first bytes
of content (the path only breaks ties), and a ``read(path, ctx)`` that yields :class:`RankPart` objects, one
per rank found in the file. Registration order is sniffing order: specific formats first, generic last.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ddltrace.arrow_timeline import (
    CATEGORIES,
    category_column,
    numbers,
    string_array,
    time_order,
    timeline_table,
    timeline_valid,
    values_of,
)
from ddltrace.collectors.importers.categories import Categorizer
from ddltrace.collectors.importers.source import ByteSource
from ddltrace.errors import DdltraceError

RANK_FROM = ("auto", "name", "dir", "order")


class RankPart:
    """One rank's events from one file. ``rank`` is an int, or an identity tuple such as ("ps", 0) that the
    importing command numbers after the workers. ``clock`` says what the times are: "epoch" (ns since the
    Unix epoch, from the host's wall clock), "relative" (ns since a per-file start), or "shared" (one clock
    for every rank of the file). ``messages``, where the format pairs a receive with its send: one row per
    message, ``src`` and ``dst`` ranks (or identities), ``send_ns`` on the sender's clock (the message cannot
    have left earlier) and ``recv_ns`` on the receiver's (it had arrived by then), for clock alignment.

    The timeline and counters are held as given, an Arrow table (:mod:`ddltrace.arrow_timeline`, what
    :func:`build_timeline` makes) or a pandas DataFrame: :attr:`table` and :attr:`counter_table` give the
    Arrow form (``ddltrace import`` writes it without pandas), :attr:`timeline` and :attr:`counters` the
    DataFrame (made on first use)."""

    def __init__(self, rank: int | tuple, timeline, counters=None, info: dict | None = None, clock: str = "epoch",
                 messages=None):
        self.rank = rank
        self.timeline = timeline
        self.counters = counters
        self.info = {} if info is None else info
        self.clock = clock
        self.messages = messages

    def __repr__(self) -> str:
        return f"RankPart(rank={self.rank!r}, rows={self.rows}, clock={self.clock!r}, info={self.info!r})"

    @property
    def timeline(self):
        """The timeline as a pandas DataFrame (:mod:`ddltrace.timeline`)."""
        if isinstance(self._timeline, pa.Table):
            from ddltrace.timeline import frame_of_table

            self._timeline = frame_of_table(self._timeline)
        return self._timeline

    @timeline.setter
    def timeline(self, value) -> None:
        self._timeline = value

    @property
    def table(self) -> pa.Table:
        """The timeline as an Arrow table in :data:`~ddltrace.arrow_timeline.TIMELINE_SCHEMA`."""
        if isinstance(self._timeline, pa.Table):
            return self._timeline
        from ddltrace.timeline import table_of_frame

        return table_of_frame(self._timeline)

    @property
    def rows(self) -> int:
        """How many intervals the timeline holds."""
        return self._timeline.num_rows if isinstance(self._timeline, pa.Table) else len(self._timeline)

    @property
    def counters(self):
        """The counters as a pandas DataFrame (:mod:`ddltrace.timeline`), None when there are none."""
        if isinstance(self._counters, pa.Table):
            from ddltrace.timeline import make_counters

            self._counters = make_counters(self._counters.to_pandas())
        return self._counters

    @counters.setter
    def counters(self, value) -> None:
        self._counters = value

    @property
    def counter_table(self) -> pa.Table | None:
        """The counters as an Arrow table (:data:`~ddltrace.arrow_timeline.COUNTERS_SCHEMA`), None when none."""
        if self._counters is None or isinstance(self._counters, pa.Table):
            return self._counters
        from ddltrace.arrow_timeline import COUNTERS_SCHEMA
        from ddltrace.timeline import make_counters

        return pa.Table.from_pandas(make_counters(self._counters), preserve_index=False).cast(COUNTERS_SCHEMA)


@dataclass
class FileReport:
    """What was read from one file, what was skipped and why."""

    path: str
    format: str = ""
    events: int = 0
    intervals: int = 0
    skipped: Counter = field(default_factory=Counter)
    #: intervals made from the file's events but not kept (an event on a duplicate lane, a B/E pair of a copy, a
    #: rank's aggregate beside its detailed trace), by why: ``events`` = the events of the intervals kept and dropped
    #: + ``skipped``
    dropped: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    #: run-level manifest entries the file carries, which the store's manifest takes (ddltrace's own export:
    #: ``workload``, ``clock``, ``notes``; collectors/importers/ddltrace_export.py)
    manifest: dict[str, Any] = field(default_factory=dict)
    #: the world size of the run the file is a part of, where it says (ddltrace's own export of some ranks:
    #: ``otherData.run.world_size``), which the store's ``run.world_size`` takes where larger than its ranks
    world_size: int | None = None
    #: the hosts of the run the file is of, where it says (ddltrace's own export: ``otherData.run.hosts``), which the
    #: store's ``run.hosts`` takes: the host of the machine counters' plain names (ddltrace/node_summary.py)
    hosts: list[str] | None = None
    #: what the file says of the run it is of (ddltrace's own export: ``otherData.run``'s command, framework, how it
    #: ended, its profiled steps, collectors, ...), which the store's ``run`` takes where every file read says the same
    run: dict[str, Any] = field(default_factory=dict)
    #: the ranks of the run the file says are not in it, each with why (ddltrace's own export: ``ddltrace_missing``,
    #: a rank its store found damaged, ...), which ``ddltrace import`` notes for each rank the store does not hold
    missing: dict[int, str] = field(default_factory=dict)
    #: the rank the file was numbered by its place among the traces because it gives none of its own (``--rank-from
    #: auto``: none in the format, in its name or its folder's; :func:`rank_from_path`), None where it gives one:
    #: ``ddltrace import`` keeps that number only where no other file gives the rank
    placed_rank: int | None = None


@dataclass
class ImportContext:
    """What an importer needs besides the file: rules, how to number ranks, where to report."""

    categorizer: Categorizer
    rank_from: str = "auto"
    file_index: int = 0
    report: FileReport | None = None
    #: processes the file may be read with (a Chrome trace large enough: collectors/importers/chrome_split.py)
    processes: int = 1


@dataclass(frozen=True)
class Importer:
    name: str
    description: str
    sniff: Callable[[bytes, Path], bool]
    read: Callable[[Path, ImportContext], Iterator[RankPart]]
    binary: bool = False  # sniffed from raw bytes, not decompressed text


REGISTRY: list[Importer] = []


def register(importer: Importer) -> Importer:
    """Add a format; later registrations are sniffed after earlier ones."""
    if any(i.name == importer.name for i in REGISTRY):
        raise ValueError(f"importer {importer.name!r} registered twice")
    REGISTRY.append(importer)
    return importer


def get_importer(name: str) -> Importer:
    for importer in REGISTRY:
        if importer.name == name:
            return importer
    raise DdltraceError(f"--format {name}: unknown format (known: {', '.join(i.name for i in REGISTRY)})")


def detect(path: Path) -> Importer:
    """The first registered format whose sniffer recognises the file's content (its first 64 KiB, decompressed,
    without a UTF-8 byte-order mark; binary formats: the first 4 KiB as stored)."""
    source = ByteSource(path)
    head = source.head().removeprefix(b"\xef\xbb\xbf")
    with open(path, "rb") as fh:
        raw = fh.read(4096)
    for importer in REGISTRY:
        if importer.sniff(raw if importer.binary else head, path):
            return importer
    shown = head[:64].decode("utf-8", "replace")[:40].strip().replace("\n", " ")
    binary = any(c == "\ufffd" or not (c.isprintable() or c in "\r\t") for c in shown)
    what = (f"starts with the bytes {head[:16].hex(' ')}" if binary else f"starts with {shown!r}" if shown else
            f"its first {len(head) >> 10} KiB are whitespace" if head else "it is empty")
    raise DdltraceError(f"{path}: not a trace format ddltrace knows ({what}); "
                        f"name it with --format ({', '.join(i.name for i in REGISTRY)})")


_RANK_IN_NAME = re.compile(r"(?i)(?:rank|worker|task|node|proc)[-_.]?(\d+)")
_NUMBER = re.compile(r"(\d+)")


def rank_from_path(path: Path, mode: str, ctx: ImportContext, default: int | None = None) -> int:
    """A rank number from the file: ``name`` (rank12 / worker3 / last number in the file name), ``dir``
    (the same in the parent folder's name), ``order`` (position on the command line), ``auto`` (the
    format's own ``default`` when given, else name, then dir, then order: the position, noted in the file's
    report as :attr:`FileReport.placed_rank`)."""
    if mode == "order":
        return ctx.file_index
    if mode == "auto" and default is not None:
        return default
    candidates = {"name": [path.name], "dir": [path.parent.name], "auto": [path.name, path.parent.name]}[mode]
    for text in candidates:
        stem = re.sub(r"(\.(json|gz|pb|txt|csv|xml|trace|pt))+$", "", text)
        m = _RANK_IN_NAME.search(stem)
        if m:
            return int(m.group(1))
        if mode != "auto":
            numbers = _NUMBER.findall(stem)
            if numbers:
                return int(numbers[-1])
    if mode == "auto":
        if ctx.report is not None:  # (a guess: the command moves it where another file gives that rank)
            ctx.report.placed_rank = ctx.file_index
        return ctx.file_index
    raise DdltraceError(f"{path}: no rank number in the {'file' if mode == 'name' else 'folder'} name "
                        f"(try --rank-from order)")


def build_timeline(*, rank: int, lane_codes: np.ndarray, lane_table: list[str], key_codes: np.ndarray,
                   key_table: list[tuple[str, str]], start_ns: np.ndarray, dur_ns: np.ndarray, fmt: str,
                   ctx: ImportContext, name_table: list[str] | None = None,
                   extra: dict[str, Any] | None = None) -> pa.Table:
    """A validated timeline (an Arrow table, :mod:`ddltrace.arrow_timeline`) from coded columns, in the store's
    order (by start, then lane): each (cat, name) key is categorised once by the rules, and the rows are ordered
    by their codes, before any string is made. ``extra`` holds more columns (bytes, peer, step, ...): Arrow
    arrays (:func:`~ddltrace.arrow_timeline.nullable`), or pandas' nullable integer arrays."""
    lane_codes, key_codes = np.asarray(lane_codes, dtype=np.int64), np.asarray(key_codes, dtype=np.int64)
    order = time_order(start_ns, np.unique(lane_table, return_inverse=True)[1].reshape(-1)[lane_codes]
                       if len(lane_codes) else lane_codes)
    extra = {column: values if isinstance(values, pa.Array) else pa.array(values, from_pandas=True)
             for column, values in (extra or {}).items()}  # (pandas' arrays, from a reader that uses pandas)
    if order is not None:
        lane_codes, key_codes, start_ns, dur_ns = lane_codes[order], key_codes[order], start_ns[order], dur_ns[order]
        extra = {column: _taken(values, order) for column, values in extra.items()}
    counts = np.bincount(key_codes, minlength=len(key_table)) if len(key_codes) else np.zeros(len(key_table))
    category_index = {c: i for i, c in enumerate(CATEGORIES)}
    key_category = np.array([category_index[ctx.categorizer.category(fmt, cat, name, int(n))]
                             for (cat, name), n in zip(key_table, counts, strict=True)], dtype=np.int8)
    names = name_table if name_table is not None else [name for _, name in key_table]
    table = timeline_table({
        "rank": np.full(len(start_ns), rank, dtype=np.int32),
        "lane": string_array(lane_codes, lane_table),
        "name": string_array(key_codes, names),
        "category": category_column(key_category[key_codes] if len(key_codes) else np.empty(0, dtype=np.int8)),
        "start_ns": np.asarray(start_ns, dtype=np.int64),
        "dur_ns": np.asarray(dur_ns, dtype=np.int64),
        "source": string_array(np.zeros(len(start_ns), dtype=np.int64), [fmt]),
        **extra,
    })
    if not timeline_valid(table):  # the full checks name every violation
        from ddltrace.timeline import frame_of_table

        frame_of_table(table)
    return table


def _taken(values: pa.Array, order: np.ndarray) -> pa.Array:
    """An integer column's rows in the given order, through NumPy on its buffers (Arrow's ``take`` imports
    ``pyarrow.compute``, 35 ms of every import's start)."""
    if values.null_count == len(values):
        return values
    data, missing = values_of(values)
    return numbers(data[order], values.type, None if missing is None else missing[order])


