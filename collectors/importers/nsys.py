"""Nsight Systems exports: the SQLite export (``nsys export --type sqlite``: ``.sqlite``, also gzip-compressed),
read with the standard library's ``sqlite3``, and the NVTX push/pop trace report of ``nsys stats`` as CSV
(:func:`read_csv`).

Tables read (NVIDIA's "SQLite Export Schema Reference"; names through ``StringIds``):

* ``CUPTI_ACTIVITY_KIND_KERNEL`` (``demangledName``, else ``shortName``), ``_MEMCPY`` (named ``Memcpy HtoD`` ...
  from ``copyKind``), ``_MEMSET``: device work, lane ``gpu:<deviceId>/stream <streamId>``; a copy's or fill's
  ``bytes`` goes into the ``bytes`` column;
* ``CUPTI_ACTIVITY_KIND_RUNTIME`` (``nameId``): CUDA runtime calls on the calling thread, named without CUPTI's
  version suffix (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``, as Kineto names them); its CUDA backtrace
  records (``eventClass`` 67, written with ``--cudabacktrace``: a second row of a call, its correlation id and
  thread, around it) are skipped;
* ``NVTX_EVENTS`` push/pop (``eventType`` 59) and start/end (60) ranges with an end (``text``, else
  ``textId``): NVTX ranges on the thread that opened them; ranges of the ``MPI`` domain (``nsys --trace=mpi``
  records MPI calls so) get the cat ``mpi``, so the MPI rules categorise them by name.

Every row's ``correlationId`` (device work and runtime calls) goes into the ``correlation`` column: a launch call
(``cudaLaunchKernel``, ``cudaMemcpyAsync``) and the kernel, copy or fill it launched carry the same one (the GPU
launch analyses pair them). CUPTI numbers them per process, so in a rank made of several processes' rows each id
gets its process's position among them (sorted by ``globalPid``) times 2**32 added, keeping the processes' ids apart.

Host lanes are ``cpu/thread <tid>`` (with the thread's name, ``ThreadNames``), the thread id being the low 24 bits
of ``globalTid``. Times are ns since the session started, made epoch ns with
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` when the export has it (else the clock is relative). The rank is the
``MPI Rank N`` name nsys gives a thread of an MPI rank, else the file's name (``..._perlmutter0.sqlite``); an
export of several ranks' processes (their threads naming distinct ranks) gives one rank per process. Not read:
NVTX marks (instants), OS runtime, sched and sampling tables, newer exports' ``MPI_*_EVENTS`` tables, CUDA
synchronisation and event activity.
"""

from __future__ import annotations

import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ddltrace.arrow_timeline import numbers
from ddltrace.collectors.importers import csv_rows
from ddltrace.collectors.importers.base import (
    ImportContext,
    Importer,
    RankPart,
    build_timeline,
    rank_from_path,
    register,
)
from ddltrace.collectors.importers.source import ByteSource
from ddltrace.errors import DdltraceError

if TYPE_CHECKING:
    import sqlite3

FORMAT = "nsys"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: NVTX_EVENTS.eventType of ranges (push/pop, start/end), of a thread's name and of a domain's creation.
NVTX_RANGES = (59, 60)
NVTX_THREAD_NAME = 39
NVTX_DOMAIN_CREATE = 75
#: CUPTI's memcpy kinds (CUpti_ActivityMemcpyKind), as Nsight Systems names them.
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
              10: "PtoP"}
#: CUPTI_ACTIVITY_KIND_RUNTIME.eventClass of a CUDA backtrace record (TRACE_PROCESS_EVENT_CUDABACKTRACE).
CUDA_BACKTRACE = 67
#: CUPTI's version suffix of a runtime call's name (``cudaMalloc_v3020``).
_API_VERSION = re.compile(r"_v\d+$")
#: An NVTX range named as a CUDA runtime call (the CSV report's ``cudaMallocManaged``).
_RUNTIME_NAME = re.compile(r"^cuda[A-Z]\w*$")
#: A thread's name that nsys gives an MPI rank's thread.
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")
_TID_BITS = 0xFFFFFF
#: CUPTI's correlation ids are 32-bit: a process's position among a rank's processes goes above them.
_CORRELATION_BITS = 32


def sniff(head: bytes, path: Path) -> bool:
    """An SQLite database whose schema names Nsight Systems' ``StringIds`` table or its ``TARGET_INFO`` ones."""
    return head.startswith(SQLITE_MAGIC) and (b"StringIds" in head or b"TARGET_INFO_" in head)


@contextmanager
def _database(path: Path):
    """A read-only connection to the export (a compressed one decompressed to a temporary file first)."""
    with path.open("rb") as fh:
        stored = fh.read(16) == SQLITE_MAGIC
    with tempfile.TemporaryDirectory(prefix="ddltrace-nsys-") as tmp:
        target = path
        if not stored:
            source, target = ByteSource(path), Path(tmp) / "export.sqlite"
            with target.open("wb") as out:
                for chunk in source.chunks():
                    out.write(chunk)
            if source.problems:  # what was decoded is no database: say what is wrong, not "kept"
                why = source.problems[0].removeprefix(f"{path}: ").split(" (kept")[0].split("; kept")[0]
                raise DdltraceError(f"{path}: not a readable Nsight Systems SQLite export ({why}; a database "
                                    "cannot be read in part)")
        import sqlite3  # here, not at the top: every import run loads the importers' modules

        db = sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            yield db
        finally:
            db.close()


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info([{table}])")}


def _count(value) -> int:
    """An optional non-negative integer of the export (a correlation id, a byte count) as an int, -1: none."""
    return value if isinstance(value, int) and value >= 0 else -1


class _Reader:
    """Collects (lane, cat, name, start, end, correlation, bytes) rows from the export's tables (``db`` None: rows
    added by hand)."""

    def __init__(self, db: sqlite3.Connection | None, ctx: ImportContext):
        self.db, self.ctx = db, ctx
        self.tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} \
            if db is not None else set()
        self.strings = dict(db.execute("SELECT id, value FROM StringIds")) if "StringIds" in self.tables else {}
        self.thread_names: dict[int, str] = {}
        if "ThreadNames" in self.tables:
            for name_id, tid in db.execute("SELECT nameId, globalTid FROM ThreadNames"):
                self.thread_names[tid] = self.strings.get(name_id, "")
        self.lanes: dict[str, int] = {}
        self.keys: dict[tuple[str, str], int] = {}
        self.lane, self.key, self.start, self.end, self.process = [], [], [], [], []
        self.correlation: list[int] = []  # each row's correlationId, -1: none
        self.bytes: list[int] = []  # each row's bytes moved or set, -1: none
        self.read = 0

    def add(self, lane: str, cat: str, name: str, start: int, end: int, process: int, correlation: int = -1,
            nbytes: int = -1) -> None:
        self.process.append(process)
        self.correlation.append(correlation)
        self.bytes.append(nbytes)
        self.lane.append(self.lanes.setdefault(lane, len(self.lanes)))
        self.key.append(self.keys.setdefault((cat, name), len(self.keys)))
        self.start.append(start)
        self.end.append(end)

    def skip(self, reason: str, n: int = 1) -> None:
        if self.ctx.report is not None and n:
            self.ctx.report.skipped[reason] += n

    def host_lane(self, global_tid: int) -> str:
        name = self.thread_names.get(global_tid, "")
        return f"cpu/thread {global_tid & _TID_BITS}" + (f" ({name})" if name else "")

    def device_work(self) -> None:
        kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
        if kernel in self.tables:
            cols = _columns(self.db, kernel)
            name = "demangledName" if "demangledName" in cols else "shortName"
            for start, end, device, stream, name_id, process, correlation in self.db.execute(
                    f"SELECT start, end, deviceId, streamId, {name}, {self._ids(kernel)} FROM {kernel}"):
                self.row(f"gpu:{device}/stream {stream}", "cuda_kernel", self._name(name_id), start, end, process,
                         correlation)
        copies = "CUPTI_ACTIVITY_KIND_MEMCPY"
        if copies in self.tables:
            for start, end, device, stream, kind, process, correlation, nbytes in self.db.execute(
                    f"SELECT start, end, deviceId, streamId, copyKind, {self._ids(copies)}, "
                    f"{self._column(copies, 'bytes')} FROM {copies}"):
                self.row(f"gpu:{device}/stream {stream}", "cuda_memcpy", f"Memcpy {COPY_KINDS.get(kind, kind)}",
                         start, end, process, correlation, nbytes)
        fills = "CUPTI_ACTIVITY_KIND_MEMSET"
        if fills in self.tables:
            for start, end, device, stream, process, correlation, nbytes in self.db.execute(
                    f"SELECT start, end, deviceId, streamId, {self._ids(fills)}, {self._column(fills, 'bytes')} "
                    f"FROM {fills}"):
                self.row(f"gpu:{device}/stream {stream}", "cuda_memset", "Memset", start, end, process,
                         correlation, nbytes)

    def _column(self, table: str, column: str, default: str = "NULL") -> str:
        """``column`` where ``table`` has it (older exports lack some), else the SQL ``default``."""
        return column if column in _columns(self.db, table) else default

    def _ids(self, table: str) -> str:
        """The SQL of a device table's process (``globalPid``, else 0: one process) and ``correlationId``."""
        return f"{self._column(table, 'globalPid', '0')}, {self._column(table, 'correlationId')}"

    def runtime(self) -> None:
        """CUDA runtime calls as rows on the calling thread, with their ``correlationId``; backtrace records
        (duplicates of a call) skipped."""
        table = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if table not in self.tables:
            return
        for start, end, tid, name_id, correlation, event_class in self.db.execute(
                f"SELECT start, end, globalTid, nameId, {self._column(table, 'correlationId')}, "
                f"{self._column(table, 'eventClass')} FROM {table}"):
            if event_class == CUDA_BACKTRACE:
                self.read += 1
                self.skip("CUDA backtrace records (a second row of a runtime call)")
                continue
            self.row(self.host_lane(tid), "cuda_runtime", _API_VERSION.sub("", self._name(name_id)), start, end,
                     tid & ~_TID_BITS, correlation)

    def nvtx(self) -> None:
        """NVTX ranges as rows; NVTX's thread names added to ``thread_names``."""
        if "NVTX_EVENTS" not in self.tables:
            return
        has_text_id = "textId" in _columns(self.db, "NVTX_EVENTS")
        text_id = "textId" if has_text_id else "NULL"
        events = self.db.execute(f"SELECT start, end, eventType, text, {text_id}, globalTid, domainId "
                                 "FROM NVTX_EVENTS ORDER BY start").fetchall()
        domains = {domain: text for _s, _e, kind, text, _t, _g, domain in events if kind == NVTX_DOMAIN_CREATE}
        for start, end, kind, text, tid_text, global_tid, domain in events:
            name = text if text is not None else self.strings.get(tid_text, "")
            if kind in NVTX_RANGES:
                if end is None:
                    self.read += 1
                    self.skip("NVTX ranges without an end")
                    continue
                cat = "mpi" if domains.get(domain) == "MPI" else "nvtx"
                self.row(self.host_lane(global_tid), cat, name, start, end, global_tid & ~_TID_BITS)
                continue
            self.read += 1
            if kind == NVTX_THREAD_NAME and global_tid not in self.thread_names:
                self.thread_names[global_tid] = name
            self.skip("NVTX marks, names and domains (not intervals)")

    def process_ranks(self) -> dict[int, int]:
        """{process (globalTid with the thread bits cleared): rank} from the ``MPI Rank N`` names of threads."""
        return {tid & ~_TID_BITS: int(m.group(1)) for tid, name in self.thread_names.items()
                if (m := _MPI_RANK.match(name))}

    def row(self, lane: str, cat: str, name: str, start, end, process: int = 0, correlation=None,
            nbytes=None) -> None:
        """One interval (ns); ``correlation`` and ``nbytes`` (bytes) as the export has them, None: none."""
        self.read += 1
        if start is None or end is None or end < start:
            self.skip("intervals without a valid start and end")
            return
        self.add(lane, cat, name, int(start), int(end), process, _count(correlation), _count(nbytes))

    def part(self, path: Path, rank: int | tuple, epoch_ns: int, process: int | None = None) -> RankPart:
        """One rank's part: the rows of ``process`` (None: all); ``epoch_ns`` (the session's start, 0: unknown)
        is added to every time."""
        rows = np.flatnonzero(np.array(self.process, dtype=np.int64) == process) if process is not None else \
            np.arange(len(self.start))
        start = np.array(self.start, dtype=np.int64)[rows]
        correlation, nbytes = self._correlations(rows), np.array(self.bytes, dtype=np.int64)[rows]
        extra = {"correlation": numbers(np.maximum(correlation, 0), pa.int64(), correlation < 0),
                 "bytes": numbers(np.maximum(nbytes, 0), pa.int64(), nbytes < 0)}
        timeline = build_timeline(
            rank=0 if isinstance(rank, tuple) else rank, lane_codes=np.array(self.lane, dtype=np.int64)[rows],
            lane_table=list(self.lanes), key_codes=np.array(self.key, dtype=np.int64)[rows],
            key_table=list(self.keys), start_ns=start + epoch_ns,
            dur_ns=np.array(self.end, dtype=np.int64)[rows] - start, fmt=FORMAT, ctx=self.ctx, extra=extra)
        if self.ctx.report is not None:
            self.ctx.report.intervals += len(timeline)
        return RankPart(rank=rank, timeline=timeline, info={"format": FORMAT, "file": str(path), "role": "worker"},
                        clock="epoch" if epoch_ns else "relative")

    def _correlations(self, rows: np.ndarray) -> np.ndarray:
        """The correlation ids of ``rows`` (-1: none); where they are of several processes, each id plus its
        process's position among them times 2**32 (CUPTI numbers each process's ids from 1). Kept as they are
        where some are of no known process (0: a device table without ``globalPid``), which cannot be told apart."""
        ids = np.array(self.correlation, dtype=np.int64)[rows]
        linked = ids >= 0
        processes, position = np.unique(np.array(self.process, dtype=np.int64)[rows][linked], return_inverse=True)
        if len(processes) < 2 or (processes == 0).any():
            return ids
        ids[linked] += position.reshape(-1) << _CORRELATION_BITS
        return ids

    def _name(self, string_id) -> str:
        return self.strings.get(string_id, f"<string {string_id}>")


def read(path: Path, ctx: ImportContext):
    """One rank per process when the threads of two or more processes name their MPI ranks (``nsys profile
    mpirun ...``; a process naming none becomes an identity numbered after them), else one rank: the file's."""
    import sqlite3

    try:
        with _database(path) as db:
            reader = _Reader(db, ctx)
            reader.nvtx()  # first: NVTX names threads that the runtime rows are on
            reader.device_work()
            reader.runtime()
            epoch = None
            if "TARGET_INFO_SESSION_START_TIME" in reader.tables:
                epoch = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    except sqlite3.DatabaseError as exc:
        raise DdltraceError(f"{path}: not a readable Nsight Systems SQLite export ({exc})") from exc
    if ctx.report is not None:
        ctx.report.events += reader.read
    epoch_ns = int(epoch[0]) if epoch and epoch[0] is not None else 0
    named = reader.process_ranks()
    if len(set(named.values())) < 2:
        default = next(iter(named.values())) if named else None
        yield reader.part(path, rank_from_path(path, ctx.rank_from, ctx, default), epoch_ns)
        return
    for process in sorted(set(reader.process)):
        rank = named.get(process, ("process", (process >> 24) & _TID_BITS))
        yield reader.part(path, rank, epoch_ns, process)


#: The header of ``nsys stats --report nvtx_pushpop_trace --format csv`` (the columns read; more may follow).
CSV_HEADER = b"Start (ns),End (ns),Duration (ns)"
CSV_COLUMNS = ("Start (ns)", "End (ns)", "Name", "TID")


def sniff_csv(head: bytes, path: Path) -> bool:
    """The NVTX push/pop trace report of ``nsys stats`` as CSV: its header, with the thread column."""
    first = head.lstrip().split(b"\n", 1)[0]
    return first.startswith(CSV_HEADER) and b",TID" in first


def _csv_damage(fields: list[str], header: list[str], column: dict[str, int]) -> str | None:
    """Why a row of the CSV report is damaged (None: it is whole): :func:`~.csv_rows.row_damage` of its times and
    thread, or a duration that is not its end - start."""
    why = csv_rows.row_damage(fields, header, [column[c] for c in ("Start (ns)", "End (ns)", "TID", "Duration (ns)")])
    if why is not None:
        return why
    start, end, duration = (int(fields[column[c]]) for c in ("Start (ns)", "End (ns)", "Duration (ns)"))
    return None if duration == end - start else f"duration {duration} ns where end - start is {end - start} ns"


def read_csv(path: Path, ctx: ImportContext):
    """NVTX push/pop ranges of the CSV report: each row an interval on ``cpu/thread <TID>`` (``cpu/pid <PID>
    thread <TID>`` when the report holds several processes), cat ``nvtx`` (``cuda_runtime`` where it is named as a
    CUDA runtime call: categorised as the export's runtime calls); ns since the session start (``relative``); the
    rank from the file's name or position. A damaged row (:func:`_csv_damage`), or the last one where the file
    ends inside it, is skipped and named by its line in one problem line; the rest are kept."""
    import csv
    import io

    source = ByteSource(path)
    text = source.read_all().decode("utf-8", "replace")
    rows = csv.reader(io.StringIO(text))
    header = next(rows, [])
    missing = [c for c in (*CSV_COLUMNS, "Duration (ns)") if c not in header]
    if missing:
        raise DdltraceError(f"{path}: not an nsys NVTX push/pop trace CSV (no column {', '.join(missing)})")
    column = {c: header.index(c) for c in header}
    cut_line = csv_rows.cut_line(text)
    reader = _Reader(None, ctx)
    parsed, damaged = [], []
    for fields in rows:
        if not fields:
            continue
        why = "the file ends inside it" if rows.line_num == cut_line else _csv_damage(fields, header, column)
        if why is not None:
            reader.read += 1
            damaged.append(f"line {rows.line_num} ({why})")
            continue
        pid = fields[column["PID"]] if "PID" in column else ""
        parsed.append((pid, int(fields[column["TID"]]), fields[column["Name"]],
                       int(fields[column["Start (ns)"]]), int(fields[column["End (ns)"]])))
    several = len({pid for pid, *_ in parsed}) > 1
    for pid, tid, name, start, end in parsed:
        cat = "cuda_runtime" if _RUNTIME_NAME.match(name) else "nvtx"
        reader.row(f"cpu/pid {pid} thread {tid}" if several else f"cpu/thread {tid}", cat, name, start, end)
    if damaged:
        if not parsed:
            raise DdltraceError(f"{path}: every row of the nsys NVTX push/pop trace CSV is damaged: "
                                f"{csv_rows.listed(damaged)}")
        reader.skip("damaged CSV rows (named in the problem line)", len(damaged))
    if ctx.report is not None:
        if damaged:
            ctx.report.problems.append(csv_rows.problem(path, damaged))
        ctx.report.events += reader.read
        ctx.report.problems.extend(source.problems)
    yield reader.part(path, rank_from_path(path, ctx.rank_from, ctx), 0)


register(Importer(FORMAT, "Nsight Systems SQLite export (nsys export --type sqlite)", sniff, read))
register(Importer("nsys-csv", "Nsight Systems NVTX push/pop trace report, CSV (nsys stats)", sniff_csv, read_csv))
