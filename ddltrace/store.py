"""The trace store: one folder per run, a person can keep, diff and send.

Layout::

    STORE/
      manifest.json                  schema version, run metadata, clock alignment, ranks, ddltrace version
      timeline/rank-00000.parquet    one timeline file per rank (read rank by rank for big runs)
      timeline/ranks-00000-00167.parquet   or, for an import of many small ranks (an IPM profile of 168 ranks of
                                     8 rows each), those ranks in one file one after the other, in rank order (the
                                     rank's manifest entry names the file and its rows: ``timeline_file``, ``rows``
                                     [first, end)); row groups of GROUP_ROW_GROUP rows, so a rank reads at most two
      counters/rank-00000.parquet    sampled values of one rank
      counters/machine.parquet       sampled values of the machine (counters rank -1)

Every file is written to a temporary name in the same folder and renamed into place, and the manifest is
written last: a crash mid-write never leaves a file that reads as valid, and a rank's files only count once
the manifest lists the rank. A whole store is built in a staging folder beside its final place and moved
there in one rename when complete (:func:`publish`), so a store that exists is a complete one; an existing
store is replaced only when asked (``overwrite``/``--force``), and an interrupted rewrite leaves the old store
as it was. :class:`StoreLock` keeps two ddltrace processes from writing one store at once.

Test hook: ``DDLTRACE_TEST_WRITE_DELAY_S=SECONDS`` makes :meth:`TraceStore.add_rank` wait that long before
each rank (the fault suite uses it so that a signal lands inside the write); never set it otherwise.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import glob
import json
import os
import re
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import pyarrow as pa

from ddltrace import __version__, arrow_timeline
from ddltrace.arrow_timeline import (
    CATEGORIES,
    LATER_COLUMNS,
    in_time_order,
    numbers,
    texts_of,
    timeline_valid,
    values_of,
)
from ddltrace.errors import DamagedStoreWarning, SchemaError, StoreError
from ddltrace.outputs import DISK_REFUSED, TEMPORARY_PARTS, os_errno, refused, temporary_beside
from ddltrace.workload_entry import merged_workload

if TYPE_CHECKING:  # pandas is imported where a DataFrame is read or given: writing an Arrow table needs none
    import pandas as pd

#: Version of the on-disk layout; a store with a higher number is refused.
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
#: The start of a manifest note that says what ``ddltrace import`` found wrong in a file it read.
IMPORT_PROBLEM = "import problem: "
#: How the import problem on ranks of separate runs begins (``ddltrace import``: times in groups that do not overlap).
SEPARATE_RUNS = "the ranks' times fall into"
_MACHINE = -1
#: The largest world size a manifest may give: MPI counts ranks in a C int.
MAX_WORLD_SIZE = 2**31 - 1
_INT64_MAX = int(np.iinfo(np.int64).max)
#: :meth:`TraceStore.missing` names at most this many ranks (a world size of 2**31 with two ranks recorded).
MAX_MISSING_NAMED = 4096


def _now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


#: True while this process writes a temporary store (:func:`temporary_writes`).
_temporary = False


@contextlib.contextmanager
def temporary_writes() -> Iterator[None]:
    """Inside, the stores this process writes (and the processes it forks) are temporary ones, removed when the
    command ends (``analyze`` or ``report`` of a trace: :mod:`ddltrace.trace_inputs`): no file or rename of theirs
    is flushed to the disk (fsync: 4 to 19 ms of waiting a store of one of HTA's traces here, for a store that a
    crash would lose nothing by losing). Their tables are written as a kept store's (lz4 instead of zstd would save
    about 2 ms of CPU on df_index_resolver's 123,378 rows, 17 against 15 ms to write, 18 against 18 ms to read)."""
    global _temporary
    before, _temporary = _temporary, True
    try:
        yield
    finally:
        _temporary = before


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for writing; rename it to ``path`` only if the block succeeds, and
    remove it however the block ends."""
    path = Path(path)
    tmp = temporary_beside(path)
    made = False
    try:
        with open(tmp, "xb") as fh:  # made here, 0o666 less the umask as any file
            made = True
            yield fh
            fh.flush()
            if not _temporary:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if made or not isinstance(exc, FileExistsError):  # a FileExistsError from open: another writer's file
            tmp.unlink(missing_ok=True)
        raise


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_output(path) as fh:
        fh.write(data)


#: A rank of fewer rows than this is small: a writer that groups ranks (``add_rank(..., group=True)``) holds it
#: and writes it in one file with the other small ranks, which costs microseconds a rank where a file of its own
#: costs 1 ms (an IPM profile's 8-row ranks).
GROUP_BELOW_ROWS = 256
#: Rows per row group of a file of small ranks: reading one rank decodes at most two row groups.
GROUP_ROW_GROUP = 8192
#: Small ranks are written together only when there are at least this many (fewer are written one file each).
GROUP_FROM_RANKS = 64
#: The most rows held for grouping (about 100 MB); a small rank beyond it is written on its own.
GROUP_MAX_ROWS = 1 << 20
_GROUP_FILE = re.compile(r"ranks-\d{5,}-\d{5,}(-\d+)?\.parquet")

#: Tables of fewer rows are written uncompressed: zstd's setup for each column costs more time than it saves
#: bytes there (an IPM rank's 8 rows: 0.7 ms of 1.4 ms to write, for 7,227 bytes instead of 6,925).
COMPRESS_FROM_ROWS = 256


def _atomic_write_parquet(path: Path, table: pa.Table, row_group_size: int | None = None) -> None:
    import pyarrow.parquet as pq

    tmp = temporary_beside(path)
    try:
        pq.write_table(table, str(tmp), row_group_size=row_group_size, **_parquet_options(table))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _parquet_options(table: pa.Table) -> dict:
    """How a table is written: times delta-encoded (sorted, they shrink to a few bits each), and the correlation
    ids (one per launch and its kernel, rising: a dictionary of them is as long as the column; delta-encoded,
    df_index_resolver's rank is 17 % smaller and written 2 ms sooner), the other columns dictionary-encoded, zstd
    from :data:`COMPRESS_FROM_ROWS` rows, no min/max statistics (nothing reads them)."""
    delta = [c for c in ("start_ns", "dur_ns", "t_ns", "correlation") if c in table.column_names]
    return {"compression": "zstd" if table.num_rows >= COMPRESS_FROM_ROWS else "none", "write_statistics": False,
            "use_dictionary": [c for c in table.column_names if c not in delta],
            "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED")}


def _read_rows(path: Path, rows: tuple[int, int]) -> pa.Table:
    """Rows [first, end) of a Parquet file, read from the row groups that hold them only."""
    import pyarrow.parquet as pq

    first, end = rows
    with pq.ParquetFile(path) as parquet:
        sizes = [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)]
        if end > sum(sizes):
            raise StoreError(f"{path}: holds {sum(sizes)} rows, not the rows {first} to {end} the manifest names")
        starts = np.cumsum([0, *sizes])
        groups = [i for i in range(len(sizes)) if starts[i] < end and starts[i + 1] > first]
        table = parquet.read_row_groups(groups) if groups else parquet.schema_arrow.empty_table()
    return table.slice(first - int(starts[groups[0]]) if groups else 0, end - first)


def _timeline_table(timeline: pd.DataFrame | pa.Table) -> pa.Table:
    """A rank's timeline as the Arrow table the store writes: an Arrow table in the schema as it is (checked by
    :func:`~ddltrace.arrow_timeline.timeline_valid`, without pandas), anything else through
    :func:`~ddltrace.timeline.make_timeline`, which names every violation in a :class:`SchemaError`."""
    if isinstance(timeline, pa.Table) and timeline_valid(timeline):
        return timeline.replace_schema_metadata(arrow_timeline.TIMELINE_SCHEMA.metadata)
    from ddltrace.timeline import frame_of_table, table_of_frame

    return table_of_frame(frame_of_table(timeline) if isinstance(timeline, pa.Table) else timeline)


def _counters_table(counters: pd.DataFrame | pa.Table) -> pa.Table:
    """Sampled values as the Arrow table the store writes (validated by :func:`~ddltrace.timeline.make_counters`
    unless already an Arrow table in the schema)."""
    if isinstance(counters, pa.Table) and counters.schema.equals(arrow_timeline.COUNTERS_SCHEMA, check_metadata=False) \
            and not any(counters.column(c).null_count for c in counters.column_names[:3]):
        return counters.replace_schema_metadata(arrow_timeline.COUNTERS_SCHEMA.metadata)
    from ddltrace.timeline import make_counters

    frame = make_counters(counters.to_pandas() if isinstance(counters, pa.Table) else counters)
    return pa.Table.from_pandas(frame, preserve_index=False).cast(arrow_timeline.COUNTERS_SCHEMA)


def _rows_of(table: pa.Table, selected: np.ndarray) -> pa.Table:
    """The rows of ``table`` where ``selected`` is True (the table itself when all are)."""
    return table if selected.all() else table.take(numbers(np.flatnonzero(selected), pa.int64()))


def _test_write_delay() -> None:
    """The fault suite's hook: wait ``$DDLTRACE_TEST_WRITE_DELAY_S`` seconds (unset: no wait)."""
    delay = os.environ.get("DDLTRACE_TEST_WRITE_DELAY_S")
    if delay:
        time.sleep(float(delay))


def _rank_file(folder: Path, rank: int) -> Path:
    return folder / ("machine.parquet" if rank == _MACHINE else f"rank-{rank:05d}.parquet")


def new_manifest(run: Mapping[str, Any] | None = None, clock: Mapping[str, Any] | None = None) -> dict:
    """A manifest for a new store: ``run`` says what was run, ``clock`` how the ranks' clocks were aligned."""
    return {
        "schema_version": SCHEMA_VERSION,
        "ddltrace_version": __version__,
        "created": _now_iso(),
        "run": dict(run or {}),
        "clock": dict(clock or {"method": "single clock", "offsets_ns": {}, "uncertainty_ns": {}}),
        "ranks": {},
        "notes": [],
    }


class TraceStore:
    """A trace store on disk. Open one with :meth:`open`, make one with :meth:`create`.

    Reads are lazy: :meth:`iter_timeline` yields one rank's DataFrame at a time, and :meth:`timeline`
    reads only the ranks asked for.
    """

    def __init__(self, path: Path, manifest: dict):
        self.path = Path(path)
        self.manifest = manifest
        #: The trace a temporary store holds (:mod:`ddltrace.trace_inputs`): what the output calls it, else None
        self.label: str | None = None
        #: Ranks left out, each with the one line saying why (a damaged file or manifest entry).
        self.damaged: dict[int, str] = {}
        self._damaged_counters: set[int] = set()
        #: Small ranks held by this writer to be written together (:meth:`write_held`), by rank.
        self._held: dict[int, pa.Table] = {}
        self._held_rows = 0

    # -- opening and creating -------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike) -> TraceStore:
        """Open an existing store; :class:`StoreError` names the path and what is wrong.

        The manifest is checked here: ``schema_version`` an integer from 1 to :data:`SCHEMA_VERSION`, every
        rank key a non-negative integer with a table of non-negative integer ``events`` and ``start_ns`` <=
        ``end_ns``, ``run.world_size`` from 1 to :data:`MAX_WORLD_SIZE` and not below the ranks recorded. A
        damaged rank entry or world size is named in a :class:`DamagedStoreWarning` and left out (the world
        size falls back to the ranks recorded); a store none of whose listed ranks is usable is refused.
        """
        path = Path(path)
        if not path.exists():
            raise StoreError(f"{path}: no such trace store")
        to_import = (f"; to read trace files: 'ddltrace import {path} --out STORE', or give them to analyze or "
                     "report as they are")
        if not path.is_dir():
            raise StoreError(f"{path}: not a trace store (a store is a folder with {MANIFEST}{to_import})")
        manifest_path = path / MANIFEST
        if not manifest_path.exists():
            raise StoreError(f"{path}: not a trace store (no {MANIFEST}{'' if is_store_folder(path) else to_import})")
        try:
            manifest = json.loads(manifest_path.read_text())
        except PermissionError as exc:
            raise StoreError(f"{manifest_path}: permission denied (the manifest cannot be read)") from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoreError(f"{manifest_path}: unreadable manifest ({exc})") from exc
        version = manifest.get("schema_version") if isinstance(manifest, dict) else None
        if type(version) is not int:  # a JSON true is a bool, and a bool is an int to Python: refused too
            raise StoreError(f"{manifest_path}: not a ddltrace manifest (no integer schema_version)")
        if version < 1:
            raise StoreError(f"{manifest_path}: schema_version {version} is not a store schema version "
                             f"(versions start at 1)")
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path}: written with store schema version {version} by ddltrace "
                f"{manifest.get('ddltrace_version', '?')}; this ddltrace {__version__} reads up to version "
                f"{SCHEMA_VERSION}: upgrade ddltrace to read it")
        if not isinstance(manifest.get("ranks"), dict):
            raise StoreError(f"{manifest_path}: manifest has no 'ranks' table")
        if not isinstance(manifest.get("run", {}), dict):
            raise StoreError(f"{manifest_path}: manifest's 'run' is not a table")
        store = cls(path, manifest)
        store._check_manifest()
        return store

    @classmethod
    def create(cls, path: str | os.PathLike, run: Mapping[str, Any] | None = None,
               clock: Mapping[str, Any] | None = None, *, exist_ok: bool = False) -> TraceStore:
        """Make an empty store at ``path`` (a new folder); ``exist_ok`` reopens an existing store instead."""
        path = Path(path)
        if path.exists():
            if exist_ok:
                return cls.open(path)
            raise StoreError(f"{path}: already exists (choose another --out, or remove it)")
        try:
            (path / "timeline").mkdir(parents=True)
            (path / "counters").mkdir()
        except OSError as exc:
            raise StoreError(f"{path}: cannot create trace store ({exc.strerror})") from exc
        store = cls(path, new_manifest(run, clock))
        store.save_manifest()
        return store

    # -- metadata -------------------------------------------------------------------------------------

    @property
    def ranks(self) -> list[int]:
        """The ranks this store holds a usable timeline for, in order (damaged ones are in :attr:`damaged`)."""
        keys = (_rank_of_key(key) for key in self.manifest["ranks"])
        return sorted(r for r in keys if r is not None and r not in self.damaged)

    @property
    def world_size(self) -> int:
        """World size of the run (from the run metadata when it is sane, else the number of ranks recorded)."""
        return self._world_size()[0]

    def _world_size(self) -> tuple[int, str | None]:
        """(world size, the problem with the run's own figure or None)."""
        recorded = sum(1 for key in self.manifest["ranks"] if _rank_of_key(key) is not None)
        said = self.run.get("world_size")
        if said is None:
            return recorded, None
        if type(said) is not int or not 1 <= said <= MAX_WORLD_SIZE:
            return recorded, (f"{self.path / MANIFEST}: run.world_size {_shown(said)} is not a world size "
                              f"(an integer from 1 to {MAX_WORLD_SIZE}); using the {recorded} ranks recorded")
        if said < recorded:
            return recorded, (f"{self.path / MANIFEST}: run.world_size {said} is below the {recorded} ranks "
                              f"recorded; using {recorded}")
        return said, None

    def missing(self, limit: int = MAX_MISSING_NAMED) -> dict[int, str]:
        """Ranks of the run this store holds no usable timeline for, each with why, in rank order: a damaged file
        or manifest entry (:attr:`damaged`; a file is found damaged when the timeline is read), or for a rank below
        the world size with no usable entry, the run's note on the ranks none of whose files it gathered (a node
        whose part was not gathered, which ``ddltrace merge`` joins) where it has one, else no usable entry in the
        manifest; or an entry of no events (an imported file that gave none). At most ``limit`` ranks (see
        :meth:`missing_count`)."""
        from ddltrace.merged_manifest import unfiled_ranks

        listed = {r for r in map(_rank_of_key, self.manifest["ranks"]) if r is not None}
        found = dict(self.damaged)
        # what the run knew (a note naming a rank past the world is damaged: no reason for any rank)
        unfiled = [(ranks, note) for note in self.notes if (ranks := unfiled_ranks(note, self.world_size))]
        for rank in range(self.world_size):
            if len(found) >= limit:
                break
            if rank not in listed:
                said = next((note for ranks, note in unfiled if rank in ranks), None)
                found[rank] = (said if said else
                               f"{self.label}: rank {rank} of the world of {self.world_size} is not in the trace"
                               if self.label else f"{self.path / MANIFEST}: rank {rank} of the world of "
                               f"{self.world_size} has no usable entry in the manifest")
        for rank in sorted(self._empty(listed) - found.keys()):
            source = self.rank_info(rank).get("file")
            problems = [n for n in self.import_problems if source and n.startswith(source)]
            found[rank] = (problems[0] + f"; rank {rank} holds no events" if problems else
                           f"{source or self.label or self.path}: rank {rank} holds no events")
        return dict(sorted(found.items())[:limit])

    def refuse_if_empty(self, nothing: str) -> None:
        """Refuse (a :class:`StoreError`, one line ending in ``nothing``, e.g. "nothing to report") a store none of
        whose ranks holds a usable timeline (a trace file cut before its first event, an import that kept nothing):
        its analysis would be of no rank at all, a 0 % verdict over a "0-worker run"."""
        if self.world_size and self.missing_count() < self.world_size:
            return
        named = list(self.missing(2).values())
        reason = (f" ({named[0]}" + (f"; and {self.missing_count() - 1} more)" if self.missing_count() > 1 else ")")
                  if named else "")
        raise StoreError(f"{self.label or self.path}: no rank holds a usable timeline{reason}; {nothing}")

    @property
    def problem_ranks(self) -> list[int]:
        """The ranks read from a file an import problem names (cut short, an event that could not be used): what
        the store holds of them is what could be read."""
        problems = self.import_problems
        files = {rank: self.rank_info(rank).get("file") for rank in self.ranks}
        return sorted(rank for rank, file in files.items()
                      if isinstance(file, str) and any(p.startswith(f"{file}:") for p in problems))

    @property
    def import_problems(self) -> list[str]:
        """What ``ddltrace import`` found wrong in the files it read (a gzip stream or JSON cut short, an event it
        could not use, ...), each naming its file: the store holds what could be read of them."""
        notes = self.manifest.get("notes")  # (a damaged manifest's may be anything)
        return [n.removeprefix(IMPORT_PROBLEM) for n in notes if isinstance(n, str) and n.startswith(IMPORT_PROBLEM)
                ] if isinstance(notes, list) else []

    @property
    def notes(self) -> list[str]:
        """What the run or import that made the store said about it besides :attr:`import_problems` (a sampler that
        could not run, emulated compute, a store made by ``ddltrace recover`` and what it could not know, ...)."""
        notes = self.manifest.get("notes")
        return [n for n in notes if isinstance(n, str) and not n.startswith(IMPORT_PROBLEM)] \
            if isinstance(notes, list) else []

    def missing_count(self) -> int:
        """How many ranks of the run the store holds no usable timeline for (damaged, not listed, or empty)."""
        world = self.world_size
        listed = {r for r in map(_rank_of_key, self.manifest["ranks"]) if r is not None and r < world}
        return world - len(listed) + len((self.damaged.keys() | self._empty(listed)) & listed)

    def _empty(self, ranks: set[int]) -> set[int]:
        """The ranks of ``ranks`` whose manifest entry says they hold no events."""
        entries = self.manifest["ranks"]  # (an entry that is not a table is a damaged rank, named as such)
        return {r for r in ranks if isinstance(entry := entries.get(str(r)), dict) and entry.get("events") == 0}

    @property
    def run(self) -> dict:
        """What was run: command, framework, world_size, hosts, batch size, ... (free-form dict)."""
        return self.manifest.setdefault("run", {})

    def _check_manifest(self) -> None:
        """Name every damaged rank entry and a wrong world size (warnings); refuse a store with no usable rank."""
        where = self.path / MANIFEST
        problems = []
        for key, entry in self.manifest["ranks"].items():
            rank = _rank_of_key(key)
            if rank is None:
                problems.append(f"{where}: rank key {_shown(key)} is not a rank (a non-negative integer); "
                                "its entry is left out")
                continue
            problem = _entry_problem(entry)
            if problem:
                self.damaged[rank] = f"{where}: rank {rank}'s entry {problem}; rank {rank} left out"
                problems.append(self.damaged[rank])
        if problems and self.manifest["ranks"] and not self.ranks:
            raise StoreError(f"{where}: no usable rank ({problems[0]}" +
                             (f"; and {len(problems) - 1} more)" if len(problems) > 1 else ")"))
        listed = self.manifest.get("counter_ranks", [])
        strays = [r for r in listed if not (type(r) is int and r >= _MACHINE)] if isinstance(listed, list) \
            else [listed]
        if strays:
            problems.append(f"{where}: counter_ranks holds {', '.join(map(_shown, strays[:3]))}, not ranks (an "
                            "integer from -1, the machine); left out")
        world_problem = self._world_size()[1]
        for problem in [*problems, *([world_problem] if world_problem else [])]:
            warnings.warn(problem, DamagedStoreWarning, stacklevel=3)

    def rank_info(self, rank: int) -> dict:
        """Per-rank metadata: events, start_ns, end_ns, host, role, how the rank ended."""
        return self.manifest["ranks"][str(rank)]

    def save_manifest(self) -> None:
        """Write the ranks held for grouping (:meth:`write_held`), then the manifest, atomically."""
        self.write_held()
        data = json.dumps(self.manifest, indent=2, sort_keys=True, default=str).encode()
        _atomic_write_bytes(self.path / MANIFEST, data)

    def update_run(self, **run: Any) -> None:
        """Merge keys into the run metadata and save."""
        self.manifest["run"].update(run)
        self.save_manifest()

    # -- writing --------------------------------------------------------------------------------------

    def add_rank(self, rank: int, timeline: pd.DataFrame | pa.Table, counters: pd.DataFrame | pa.Table | None = None,
                 *, save: bool = True, group: bool = False, **info: Any) -> None:
        """Write (or replace) one rank's timeline and counters, then list it in the manifest.

        ``timeline`` (a DataFrame, or an Arrow table of :mod:`ddltrace.arrow_timeline`, written without pandas)
        is validated (rows of other ranks are an error); ``info`` goes into the rank's manifest entry (host,
        role, ended="normal"/"abrupt", ...). With ``group``, a small rank (1 to :data:`GROUP_BELOW_ROWS` - 1
        rows, no counters) is held in memory and written with the other small ranks by :meth:`write_held`
        (:meth:`save_manifest` calls it); reading it before then reads what is held.
        """
        _test_write_delay()
        listed = self.manifest["ranks"].get(str(rank))
        shared = listed.get("timeline_file") if isinstance(listed, dict) else None
        if shared is not None:  # its rows would stay in that file too: a dataset reader would see them twice
            raise StoreError(f"{self.path}: rank {rank} is written in timeline/{shared} with other ranks; it cannot "
                             "be written again in this store")
        table = _timeline_table(timeline)
        ranks = values_of(table.column("rank"))[0]
        if len(ranks) and (ranks != rank).any():
            raise SchemaError("timeline", [f"rows of rank {sorted(set(ranks.tolist()) - {rank})} "
                                           f"passed to add_rank({rank})"])
        table = in_time_order(table)
        replaced = self._held.pop(rank, None)
        self._held_rows -= replaced.num_rows if replaced is not None else 0
        if group and counters is None and 0 < table.num_rows < GROUP_BELOW_ROWS \
                and self._held_rows + table.num_rows <= GROUP_MAX_ROWS:
            self._held[rank] = table
            self._held_rows += table.num_rows
        else:
            _atomic_write_parquet(_rank_file(self.path / "timeline", rank), table)
        entry = {"events": table.num_rows}
        if table.num_rows:
            start = values_of(table.column("start_ns"))[0]
            entry["start_ns"] = int(start.min())
            entry["end_ns"] = int((start + values_of(table.column("dur_ns"))[0]).max())
        if counters is not None:
            counters = _counters_table(counters)
            counter_ranks = values_of(counters.column("rank"))[0]
            for crank in np.unique(counter_ranks).tolist():
                if crank not in (rank, _MACHINE):
                    raise SchemaError("counters", [f"rows of rank {crank} passed to add_rank({rank})"])
                self._write_counters(crank, _rows_of(counters, counter_ranks == crank))
            entry["counter_samples"] = int((counter_ranks == rank).sum())
        old = self.manifest["ranks"].get(str(rank), {})
        old.update(entry)
        old.update(info)
        self.manifest["ranks"][str(rank)] = old
        if save:
            self.save_manifest()

    def write_held(self) -> None:
        """Write the small ranks held for grouping: at least :data:`GROUP_FROM_RANKS` of them into one file
        ``timeline/ranks-FIRST-LAST.parquet``, one after the other in rank order, which their manifest entries name
        with their rows (``timeline_file``, ``rows``: [first, end)); fewer, each into its own file."""
        held, self._held, self._held_rows = dict(sorted(self._held.items())), {}, 0
        if not held:
            return
        if len(held) < GROUP_FROM_RANKS:
            for rank, table in held.items():
                _atomic_write_parquet(_rank_file(self.path / "timeline", rank), table)
            return
        ranks = list(held)
        name = f"ranks-{ranks[0]:05d}-{ranks[-1]:05d}.parquet"
        serial = 1
        while (self.path / "timeline" / name).exists():
            serial += 1
            name = f"ranks-{ranks[0]:05d}-{ranks[-1]:05d}-{serial}.parquet"
        tables = list(held.values())
        _atomic_write_parquet(self.path / "timeline" / name, pa.concat_tables(tables), row_group_size=GROUP_ROW_GROUP)
        end = np.cumsum([t.num_rows for t in tables]).tolist()
        for rank, first, last in zip(ranks, [0, *end[:-1]], end, strict=True):
            self.manifest["ranks"][str(rank)].update(timeline_file=name, rows=[first, last])

    def timeline_source(self, rank: int) -> tuple[Path, tuple[int, int] | None]:
        """Where a rank's timeline is on disk: its file and, in a file of several ranks, its rows there ([first,
        end); None for a file of its own)."""
        entry = self.manifest["ranks"].get(str(rank))
        name = entry.get("timeline_file") if isinstance(entry, dict) else None
        if name is None:
            return _rank_file(self.path / "timeline", rank), None
        return self.path / "timeline" / name, tuple(entry["rows"])

    def written_table(self, rank: int) -> pa.Table:
        """The timeline of a rank this writer wrote (or holds), as written (an Arrow table, not checked again:
        readers use :meth:`timeline`)."""
        import pyarrow.parquet as pq

        if rank in self._held:
            return self._held[rank]
        path, rows = self.timeline_source(rank)
        return pq.read_table(path) if rows is None else _read_rows(path, rows)

    def add_counters(self, counters: pd.DataFrame, *, save: bool = True) -> None:
        """Append sampled values (any ranks, -1 for the machine) to the store."""
        import pandas as pd

        from ddltrace.timeline import make_counters

        counters = make_counters(counters)
        for crank, part in counters.groupby("rank", sort=True):
            existing = self.counters([int(crank)]) if int(crank) in self.counter_ranks else None
            if existing is not None and len(existing):
                part = pd.concat([existing, part], ignore_index=True)
            self._write_counters(int(crank), _counters_table(part))
        if save:
            self.save_manifest()

    def _write_counters(self, rank: int, part: pa.Table) -> None:
        """Write one rank's counters file, its rows by time, then name (stable)."""
        t_ns = values_of(part.column("t_ns"))[0]
        names = np.array(texts_of(part.column("name")), dtype=object)
        step = np.diff(t_ns)
        if (step < 0).any() or ((step == 0) & (names[1:] < names[:-1])).any():
            order = np.lexsort((np.unique(names, return_inverse=True)[1].reshape(-1), t_ns))
            part = part.take(numbers(order, pa.int64()))
        _atomic_write_parquet(_rank_file(self.path / "counters", rank), part)
        listed = set(self.manifest.setdefault("counter_ranks", []))
        listed.add(rank)
        self.manifest["counter_ranks"] = sorted(listed)

    # -- reading --------------------------------------------------------------------------------------

    @property
    def counter_ranks(self) -> list[int]:
        """Ranks (and -1 for the machine) with sampled values (entries that are not ranks are ignored)."""
        listed = self.manifest.get("counter_ranks", [])
        return [r for r in listed if type(r) is int and r >= _MACHINE] if isinstance(listed, list) else []

    def _read_table(self, folder: str, rank: int) -> tuple[pa.Table, Path]:
        """One rank's file in ``folder`` (timeline: its rows in a file of several ranks) as written, an Arrow table,
        and the file's path; unreadable: a :class:`StoreError` naming it. Read with ``ParquetFile.read``, which needs
        no pandas (``pyarrow.parquet.read_table`` imports it)."""
        import pyarrow.parquet as pq

        path, rows = self.timeline_source(rank) if folder == "timeline" else (_rank_file(self.path / folder, rank),
                                                                                      None)
        try:
            if folder == "timeline" and rank in self._held:
                return self._held[rank], path
            if rows is not None:
                return _read_rows(path, rows), path
            with pq.ParquetFile(path) as parquet:
                return parquet.read(), path
        except FileNotFoundError as exc:
            raise StoreError(f"{path}: listed in the manifest but missing") from exc
        except PermissionError as exc:
            raise StoreError(f"{path}: permission denied (ddltrace may not read this file)") from exc
        except IsADirectoryError as exc:
            raise StoreError(f"{path}: a folder, not a Parquet file") from exc
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"{path}: corrupt Parquet file ({exc})") from exc

    def _read(self, folder: str, rank: int, dtypes: Mapping[str, Any]) -> pd.DataFrame:
        import pandas as pd

        from ddltrace.timeline import TIMELINE_DTYPES

        table, path = self._read_table(folder, rank)
        frame = table.to_pandas()
        later = LATER_COLUMNS if dtypes is TIMELINE_DTYPES else ()
        missing = [c for c in dtypes if c not in frame.columns and c not in later]
        if missing:
            raise StoreError(f"{path}: missing column(s) {', '.join(missing)}")
        for column in [c for c in dtypes if c in later]:  # written before it existed: it reads as all missing
            if column not in frame.columns:
                frame.insert(list(dtypes).index(column), column, pd.array([pd.NA] * len(frame), dtypes[column]))
        return frame

    def _read_timeline(self, rank: int) -> pd.DataFrame:
        """One rank's timeline, checked against what the store promises (:func:`_timeline_problem`)."""
        from ddltrace.timeline import CATEGORY_DTYPE, TIMELINE_DTYPES

        frame = self._read("timeline", rank, TIMELINE_DTYPES)
        problem = _timeline_problem(frame, rank, self.rank_info(rank))
        if problem:
            path, rows = self.timeline_source(rank)
            raise StoreError(f"{path}{'' if rows is None else f' (rows {rows[0]} to {rows[1]})'}: {problem}")
        return frame.assign(category=frame["category"].astype(CATEGORY_DTYPE))

    def iter_timeline(self, ranks: Iterable[int] | None = None) -> Iterator[tuple[int, pd.DataFrame]]:
        """Yield ``(rank, timeline)`` one rank at a time: memory stays at one rank's events.

        With ``ranks`` None, a rank whose file is damaged (unreadable, or holding a category outside the closed
        set, a negative duration, times outside the rank's span in the manifest, another rank's rows) is left
        out and named in a :class:`DamagedStoreWarning` (and in :attr:`damaged`); when no rank can be read the
        :class:`StoreError` names them. A damaged rank asked for by number is a :class:`StoreError`.
        """
        return self._iter_ranks(self._read_timeline, ranks)

    def iter_timeline_tables(self, ranks: Iterable[int] | None = None) -> Iterator[tuple[int, pa.Table]]:
        """As :meth:`iter_timeline`, each rank's timeline as an Arrow table, read and checked without pandas where
        the file is sound (:meth:`_read_timeline_table`): ``ddltrace info`` starts without pandas."""
        return self._iter_ranks(self._read_timeline_table, ranks)

    def _read_timeline_table(self, rank: int) -> pa.Table:
        """One rank's timeline as an Arrow table, checked as :meth:`_read_timeline` checks it, from the table's
        buffers (:func:`_table_sound`); a table those checks do not pass (a damaged file, or one in another form: a
        store written before a later column) is read through pandas, which names what is wrong in a
        :class:`StoreError`, or gives its rows."""
        table, _ = self._read_table("timeline", rank)
        if _table_sound(table, rank, self.rank_info(rank)):
            return table
        return pa.Table.from_pandas(self._read_timeline(rank), preserve_index=False)

    def _iter_ranks(self, read: Callable[[int], Any], ranks: Iterable[int] | None) -> Iterator[tuple[int, Any]]:
        """``(rank, read(rank))`` of the ranks asked for, or of every rank but the damaged ones
        (:meth:`iter_timeline`)."""
        if ranks is not None:
            for rank in self._select(ranks):
                yield rank, read(rank)
            return
        held: list[str] = []  # the damage found before the first good rank: a warning, or the error's text
        for rank in self.ranks:
            try:
                frame = read(rank)
            except StoreError as exc:
                self.damaged[rank] = f"{exc}; rank {rank} left out"
                held.append(self.damaged[rank])
                continue
            for message in held:
                warnings.warn(message, DamagedStoreWarning, stacklevel=2)
            held = []
            yield rank, frame
        if held and not self.ranks:
            raise StoreError(f"{self.path}: no rank can be read ({held[0]}" +
                             (f"; and {len(held) - 1} more)" if len(held) > 1 else ")"))
        for message in held:
            warnings.warn(message, DamagedStoreWarning, stacklevel=2)

    def timeline(self, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """The timeline of the given ranks (all when None), concatenated and sorted by rank then start."""
        import pandas as pd

        from ddltrace.timeline import empty_timeline

        parts = [frame for _, frame in self.iter_timeline(ranks)]
        if not parts:
            return empty_timeline()
        return pd.concat(parts, ignore_index=True)

    def counters(self, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """Sampled values of the given ranks (all, machine included, when None).

        A damaged counters file (unreadable, rows of another rank, times or values of the wrong type) is left
        out and named in a :class:`DamagedStoreWarning`: counters never stop a timeline from being read.
        """
        import pandas as pd

        from ddltrace.timeline import COUNTER_DTYPES, empty_counters

        available = [r for r in self.counter_ranks if r not in self._damaged_counters]
        wanted = available if ranks is None else [r for r in ranks if r in available]
        parts = []
        for rank in wanted:
            try:
                frame = self._read("counters", rank, COUNTER_DTYPES)
                problem = _counters_problem(frame, rank)
                if problem:
                    raise StoreError(f"{_rank_file(self.path / 'counters', rank)}: {problem}")
            except StoreError as exc:
                self._damaged_counters.add(rank)
                warnings.warn(f"{exc}; these counters are left out", DamagedStoreWarning, stacklevel=2)
                continue
            parts.append(frame)
        if not parts:
            return empty_counters()
        return pd.concat(parts, ignore_index=True)

    def counter_tables(self, ranks: Iterable[int] | None = None) -> dict[int, pa.Table]:
        """Sampled values of the given ranks (all, machine included, when None) as an Arrow table per rank (-1: the
        machine), read and checked without pandas where the file is sound (:func:`_counters_sound`); another goes
        through :meth:`counters`, which names a damaged file in a :class:`DamagedStoreWarning` and leaves it out."""
        available = [r for r in self.counter_ranks if r not in self._damaged_counters]
        tables = {}
        for rank in available if ranks is None else [r for r in ranks if r in available]:
            with contextlib.suppress(StoreError):  # (read again, and named, by counters())
                table, _ = self._read_table("counters", rank)
                if _counters_sound(table, rank):
                    tables[rank] = table
                    continue
            frame = self.counters([rank])
            if rank not in self._damaged_counters:
                tables[rank] = pa.Table.from_pandas(frame, preserve_index=False)
        return tables

    def _select(self, ranks: Iterable[int]) -> list[int]:
        known = self.ranks
        wanted = [int(r) for r in ranks]
        for rank in wanted:
            if rank in self.damaged:
                raise StoreError(self.damaged[rank])
        unknown = sorted(set(wanted) - set(known))
        if unknown:
            raise StoreError(f"{self.path}: no rank {', '.join(map(str, unknown))} "
                             f"(the store has ranks {rank_ranges(known)})")
        return wanted

    def __repr__(self) -> str:
        return f"TraceStore({str(self.path)!r}, ranks={rank_ranges(self.ranks)})"


def _shown(value: Any) -> str:
    """A value from a file, quoted for a message (control characters escaped, long values cut)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _rank_of_key(key: str) -> int | None:
    """The rank of a manifest key ("3" -> 3); None for anything but a non-negative integer written plainly."""
    return int(key) if isinstance(key, str) and key.isascii() and key.isdigit() and str(int(key)) == key else None


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _entry_problem(entry: Any) -> str | None:
    """What is wrong with one rank's manifest entry (None when nothing): its counts and times are checked."""
    if not isinstance(entry, dict):
        return f"is {_shown(entry)}, not a table"
    for key in ("events", "counter_samples"):
        if key in entry and not _is_count(entry[key]):
            return f"has {key} {_shown(entry[key])} (a count: a non-negative integer)"
    if "timeline_file" in entry or "rows" in entry:
        name, rows = entry.get("timeline_file"), entry.get("rows")
        if not (isinstance(name, str) and _GROUP_FILE.fullmatch(name)):
            return f"has timeline_file {_shown(name)} (a file ranks-FIRST-LAST.parquet in timeline/)"
        if not (isinstance(rows, list) and len(rows) == 2 and all(map(_is_count, rows)) and rows[0] <= rows[1]
                and rows[1] - rows[0] == entry.get("events")):
            return (f"has rows {_shown(rows)} (its rows in {name}: [first, end), as many as its events "
                    f"{_shown(entry.get('events'))})")
    times = [entry.get("start_ns"), entry.get("end_ns")]
    if any(t is not None for t in times):
        if not all(type(t) is int for t in times):
            return f"has start_ns {_shown(times[0])} and end_ns {_shown(times[1])} (integers in ns)"
        if times[0] > times[1]:
            return f"ends (end_ns {times[1]}) before it starts (start_ns {times[0]})"
    return None


def _rows(mask: np.ndarray) -> str:
    """'3 rows (first: row 12)' for a boolean mask over a frame's rows."""
    where = np.flatnonzero(mask)
    return f"{len(where)} row{'s' if len(where) != 1 else ''} (first: row {where[0]})"


def _has_missing(series: pd.Series) -> bool:
    """Whether an integer column has missing values (a NumPy integer column cannot: not looked at)."""

    return not isinstance(series.dtype, np.dtype) and bool(series.isna().any())


def _timeline_problem(frame: pd.DataFrame, rank: int, entry: Mapping[str, Any]) -> str | None:
    """What is wrong with one rank's timeline as read from its file (None when nothing).

    Checked: the rank column holds only ``rank``; start_ns and dur_ns are integers, none missing; every
    category is in the closed set; no duration is negative; no interval ends past int64 ns; and the rows
    lie within the rank's span in the manifest (``start_ns`` to ``end_ns``, written from the same rows).
    """
    import pandas as pd

    ranks = frame["rank"]
    if not pd.api.types.is_integer_dtype(ranks.dtype) or _has_missing(ranks):
        return f"column 'rank' is {ranks.dtype}, not integer ranks"
    wrong = ranks.to_numpy() != rank
    if wrong.any():
        return f"{_rows(wrong)} of rank {int(ranks.to_numpy()[wrong][0])} in the file of rank {rank}"
    for column in ("start_ns", "dur_ns"):
        series = frame[column]
        if not pd.api.types.is_integer_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
            return f"column '{column}' is {series.dtype}, not integer nanoseconds"
        if _has_missing(series):
            return f"column '{column}': {_rows(series.isna().to_numpy())} missing"
    category = frame["category"]
    if isinstance(category.dtype, pd.CategoricalDtype):  # as written: check the few categories, then the codes
        foreign = [i for i, c in enumerate(category.cat.categories) if c not in CATEGORIES]
        codes = category.cat.codes.to_numpy()
        unknown = np.isin(codes, [-1, *foreign])
    else:
        unknown = ~category.isin(CATEGORIES).to_numpy()
    if unknown.any():
        return (f"category {_shown(category[unknown].iloc[0])} in {_rows(unknown)} is not one of "
                f"{', '.join(CATEGORIES)}")
    start = frame["start_ns"].to_numpy(np.int64)
    dur = frame["dur_ns"].to_numpy(np.int64)
    negative = dur < 0
    if negative.any():
        return f"negative duration ({int(dur[negative][0])} ns) in {_rows(negative)}"
    overflow = start > _INT64_MAX - dur
    if overflow.any():
        return f"an interval ending past the largest int64 time in {_rows(overflow)}"
    first, last = entry.get("start_ns"), entry.get("end_ns")
    if len(frame) and type(first) is int and type(last) is int:
        outside = (start < first) | (start + dur > last)
        if outside.any():
            where = int(np.flatnonzero(outside)[0])
            return (f"{_rows(outside)} outside the rank's span in the manifest ({first} to {last} ns): row "
                    f"{where} runs from {int(start[where])} to {int(start[where] + dur[where])} ns")
    return None


def _counters_problem(frame: pd.DataFrame, rank: int) -> str | None:
    """What is wrong with one counters file (None when nothing): its rank column and the types of t_ns, value."""
    import pandas as pd

    ranks = frame["rank"]
    if not pd.api.types.is_integer_dtype(ranks.dtype) or ranks.isna().any() or (ranks.to_numpy() != rank).any():
        return f"rows of another rank than {rank}" if rank != _MACHINE else "rows of a rank, not of the machine (-1)"
    if not pd.api.types.is_integer_dtype(frame["t_ns"].dtype) or frame["t_ns"].isna().any():
        return f"column 't_ns' is {frame['t_ns'].dtype} or has missing values, not integer nanoseconds"
    if not pd.api.types.is_numeric_dtype(frame["value"].dtype):
        return f"column 'value' is {frame['value'].dtype}, not numbers"
    return None


def _table_sound(table: pa.Table, rank: int, entry: Mapping[str, Any]) -> bool:
    """Whether a rank's timeline table passes :func:`_timeline_problem`'s checks, read from its buffers without
    pandas: every column of the schema (those added later may be absent), the rank an integer column of ``rank``
    alone, start_ns and dur_ns int64 with none missing, the lane text, every category of the closed set, no negative
    duration, no interval ending past the largest int64 time, the rows within the rank's span in the manifest.
    False: :func:`_timeline_problem` decides."""
    if not set(arrow_timeline.TIMELINE_SCHEMA.names) - set(LATER_COLUMNS) <= set(table.column_names):
        return False
    types = {field.name: field.type for field in table.schema}
    if not (pa.types.is_integer(types["rank"]) and types["start_ns"] == types["dur_ns"] == pa.int64()
            and types["lane"] in (pa.string(), pa.large_string()) and pa.types.is_dictionary(types["category"])):
        return False
    if any(table.column(c).null_count for c in ("rank", "start_ns", "dur_ns", "category")):
        return False
    if not all(set(chunk.dictionary.to_pylist()) <= set(CATEGORIES) for chunk in table.column("category").chunks):
        return False
    if (values_of(table.column("rank"))[0] != rank).any():
        return False
    start, dur = values_of(table.column("start_ns"))[0], values_of(table.column("dur_ns"))[0]
    if (dur < 0).any() or (start > _INT64_MAX - dur).any():
        return False
    first, last = entry.get("start_ns"), entry.get("end_ns")
    return not (len(start) and type(first) is int and type(last) is int
                and ((start < first) | (start + dur > last)).any())


def _counters_sound(table: pa.Table, rank: int) -> bool:
    """Whether a counters table passes :func:`_counters_problem`'s checks, read without pandas: the schema's columns
    at their types, no rank, name or time missing, only ``rank``'s rows. False: :func:`_counters_problem` decides."""
    if not table.schema.equals(arrow_timeline.COUNTERS_SCHEMA, check_metadata=False):
        return False
    if any(table.column(c).null_count for c in ("rank", "name", "t_ns")):
        return False
    return not (values_of(table.column("rank"))[0] != rank).any()


def rank_ranges(ranks: list[int]) -> str:
    """'0-3, 7' for [0, 1, 2, 3, 7]."""
    if not ranks:
        return "none"
    out, start, prev = [], ranks[0], ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
        if r is not None:
            start = prev = r
    return ", ".join(out)


def rank_runs(named: list[tuple[int, str]]) -> list[tuple[int, int, str]]:
    """(rank, rank, why) per rank, but one (first, last, why with "rank N" for each one's number: '...: rank N of the
    world of 128 is not in the trace') for consecutive ranks whose reasons differ only in their own number (HTA's
    trace_filter holds 2 ranks of 128: 126 lines that said the same)."""
    runs: list[list] = []  # [first, last, the reason with the rank's number as "rank N", the first's reason]
    for rank, why in named:
        said = why.replace(f"rank {rank} ", "rank N ")
        if runs and runs[-1][2] == said != why and runs[-1][1] == rank - 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank, said, why])
    return [(first, last, why if first == last else said) for first, last, said, why in runs]


def write_store(path: str | os.PathLike, timeline: pd.DataFrame, counters: pd.DataFrame | None = None,
                run: Mapping[str, Any] | None = None, clock: Mapping[str, Any] | None = None,
                rank_info: Mapping[int, Mapping[str, Any]] | None = None, *,
                overwrite: bool = False) -> TraceStore:
    """Write a whole store from one timeline (all ranks) and optional counters.

    The store is built in a temporary folder beside ``path`` and moved into place at the end; with
    ``overwrite`` an existing store is replaced only once the new one is complete.
    """
    from ddltrace.timeline import empty_timeline, make_counters, make_timeline

    path = Path(path)
    if path.exists() and not overwrite:
        raise StoreError(f"{path}: already exists (choose another --out, or remove it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    timeline = make_timeline(timeline)
    counters = make_counters(counters) if counters is not None else None
    with StoreLock(path, replace=overwrite), building(path) as staging:
        store = TraceStore.create(staging, run, clock)
        ranks = sorted(set(int(r) for r in timeline["rank"]) | set((rank_info or {}).keys()))
        by_rank = dict(tuple(timeline.groupby("rank", sort=True))) if len(timeline) else {}
        for rank in ranks:
            part = by_rank.get(rank, empty_timeline())
            store.add_rank(rank, part, save=False, **dict((rank_info or {}).get(rank, {})))
        if counters is not None and len(counters):
            store.add_counters(counters, save=False)
        store.save_manifest()
        publish(staging, path, replace=overwrite)
    return TraceStore.open(path)


@contextlib.contextmanager
def building(path: Path) -> Iterator[Path]:
    """A fresh folder name beside ``path`` (same file system, so :func:`publish` is one rename) to build a store
    in. The block builds and publishes it; where the block does not finish (an error, Ctrl-C, SIGTERM) whatever it
    built is removed, from the name's making on, and a write the disk refuses
    (:data:`~ddltrace.outputs.DISK_REFUSED`) is :func:`~ddltrace.outputs.refused`'s line naming ``path``."""
    staging = temporary_beside(path)  # (the name only, held before anything is made: TraceStore.create makes it)
    try:
        yield staging
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError) and os_errno(exc) in DISK_REFUSED:
            raise refused(exc, path, "the store") from None
        raise


def verify_written(store: TraceStore, ranks: Iterable[int]) -> None:
    """Check a store just written before anything it was made from is deleted (or it is published): its manifest
    reads back, it lists every rank of ``ranks``, and each rank's timeline file holds the rows the manifest counts
    (read from the files' footers; a shared file of small ranks holds exactly the rows its ranks' entries name,
    one after the other)."""
    reread = TraceStore.open(store.path)
    missing = sorted(set(ranks) - set(reread.ranks))
    if missing:
        raise StoreError(f"{store.path}: ranks {rank_ranges(missing)} were not written")
    shared: dict[Path, list[tuple[int, int]]] = {}
    for rank in reread.ranks:
        path, span = reread.timeline_source(rank)
        if span is not None:
            shared.setdefault(path, []).append(span)
            continue
        rows = _written_rows(path)
        if rows != reread.rank_info(rank).get("events"):
            raise StoreError(f"{path}: {rows} rows written, the manifest counts {reread.rank_info(rank).get('events')}")
    for path, spans in shared.items():
        rows, spans = _written_rows(path), sorted(spans)
        ends = [0, *(end for _, end in spans)]
        if [first for first, _ in spans] != ends[:-1] or ends[-1] != rows:
            raise StoreError(f"{path}: {rows} rows written, its ranks' entries name {ends[-1]} (or leave gaps)")


def _written_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path).num_rows
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"{path}: unreadable after writing ({exc})") from exc


def publish(staging: Path, path: Path, *, replace: bool = False) -> None:
    """Move the complete store ``staging`` to ``path`` in one rename. An existing ``path`` is a
    :class:`StoreError` unless ``replace``, which swaps it out only now that the new store is complete."""
    if path.exists() or path.is_symlink():
        if not replace:
            raise StoreError(f"{path}: already exists (choose another --out, or add --force)")
        _swap_into_place(staging, path)
    else:
        os.rename(staging, path)
    if _temporary:
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself is on disk before anything the store was made from is deleted
    finally:
        os.close(fd)


def _swap_into_place(staging: Path, path: Path) -> None:
    old = path.with_name(f".{path.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(path, old)
    try:
        os.replace(staging, path)
    except BaseException:  # (a Ctrl-C or an error between the two renames: the old store goes back in its place)
        os.replace(old, path)
        raise
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink(missing_ok=True)


#: The folders only a trace store has.
STORE_FOLDERS = ("timeline", "counters")


def is_store_folder(path: Path) -> bool:
    """Whether the folder ``path`` is a trace store, or what is left of one whose manifest is lost (its own
    folders)."""
    return (path / MANIFEST).exists() or any((path / folder).is_dir() for folder in STORE_FOLDERS)


def _replaceable(path: Path) -> bool:
    """Whether ``--force`` may swap out ``path``: a trace store (:func:`is_store_folder`) or an empty folder; never
    a file or a folder of other things."""
    return path.is_dir() and (is_store_folder(path) or not any(path.iterdir()))


class StoreLock:
    """An exclusive lock on the store ``path`` while one process writes it: ``flock(2)`` on ``.NAME.lock``
    beside it (released by the kernel if the holder dies; the file names the holder). Taking it checks that
    ``path`` does not exist yet unless ``replace``, and removes the staging folders a writer killed before
    its rename left (every writer stages under the lock). Use as a context manager, from the start of the work that
    will write the store (before a job runs or files are read) until the store is in place."""

    def __init__(self, path: str | os.PathLike, *, replace: bool = False):
        self.path = Path(path)
        self.lock_path = self.path.with_name(f".{self.path.name}.lock")
        self.replace = replace
        self._fd: int | None = None

    def __enter__(self) -> StoreLock:
        while True:
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreError(f"{self.path}: cannot write a store here ({exc.strerror}: {self.lock_path})") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
                os.close(fd)
                raise StoreError(f"{self.path}: being written by {holder} (choose another --out, or wait "
                                 "for it to finish)") from None
            try:  # the previous holder may have removed the file between our open and our lock
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        with contextlib.suppress(OSError):  # who holds it, for the next one's message (a full disk: no name)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"ddltrace pid {os.getpid()} ({' '.join(sys.argv[:3])[:200]})".encode(), 0)
        if (self.path.exists() or self.path.is_symlink()) and not self.replace:
            self.__exit__()
            raise StoreError(f"{self.path}: already exists (choose another --out, or add --force)")
        if self.path.exists() and not _replaceable(self.path):
            self.__exit__()
            what = "a file" if not self.path.is_dir() else "a folder that is not a trace store"
            raise StoreError(f"{self.path}: {what}, which --force does not replace (only a trace store): choose "
                             "another --out, or remove it yourself")
        # every writer stages under this lock: a staging folder here now is a dead writer's partial store
        for part in TEMPORARY_PARTS:
            for stale in self.path.parent.glob(f".{glob.escape(self.path.name)}.{part}.tmp"):
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale, ignore_errors=True)
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            self.lock_path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None


#: Two parts of a run (two files of one rank, two stores) whose times on the wall clock lie further apart than this,
#: and than ``RUN_GAP_SPANS`` times the longer of their spans, are of two runs, not of one.
RUN_GAP_NS = 3600 * 10**9
RUN_GAP_SPANS = 10
#: Times from this many ns on are the wall clock's (2001-09-09): a relative clock's are far below (the generic
#: Chrome reader takes them so too).
WALL_CLOCK_NS = 10**18


def two_runs_apart(a: tuple[int, int], b: tuple[int, int]) -> int:
    """The gap (ns) between the spans ``a`` and ``b`` (start, end ns on one wall clock) where it says they are of two
    runs (:data:`RUN_GAP_NS`, :data:`RUN_GAP_SPANS`), else 0."""
    gap = max(b[0] - a[1], a[0] - b[1])
    return gap if gap > max(RUN_GAP_NS, RUN_GAP_SPANS * max(a[1] - a[0], b[1] - b[0])) else 0


def _wall_span(store: TraceStore) -> tuple[int, int] | None:
    """The first start and last end (ns) of the store's ranks where they are wall-clock times, else None."""
    entries = [store.manifest["ranks"].get(str(r)) for r in store.ranks]
    spans = [(e["start_ns"], e["end_ns"]) for e in entries if isinstance(e, dict) and isinstance(e.get("start_ns"), int)
             and isinstance(e.get("end_ns"), int) and e["start_ns"] >= WALL_CLOCK_NS]
    return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None


def separate_runs(store) -> list[str]:
    """An import problem where the ranks' times on the wall clock fall into groups that do not overlap, further
    apart than ten times the longest rank's span and a second: the ranks of one job run at once (their profiled
    windows overlap), so those are files of two runs (two single-GPU runs in one folder, 41 s apart, read as ranks
    0 and 1; two stores of runs 8.8 s apart merged into one). Not refused, as an import's same rank twice is: said
    (``ddltrace import`` and ``merge_stores``)."""
    from ddltrace.units import format_ns

    spans = sorted((e["start_ns"], e["end_ns"], r) for r in store.ranks
                   if isinstance(e := store.manifest["ranks"].get(str(r)), dict)
                   and isinstance(e.get("start_ns"), int) and isinstance(e.get("end_ns"), int)
                   and e["start_ns"] >= WALL_CLOCK_NS and e["end_ns"] > e["start_ns"])
    if len(spans) < 2:
        return []
    longest = max(end - start for start, end, _ in spans)
    groups, reach = [[spans[0]]], spans[0][1]
    for span in spans[1:]:
        if span[0] - reach > max(RUN_GAP_SPANS * longest, 10**9):
            groups.append([])
        groups[-1].append(span)
        reach = max(reach, span[1])
    if len(groups) < 2:
        return []
    described = [f"ranks {rank_ranges(sorted(r for _, _, r in g))}" + (
        f" {format_ns(g[0][0] - spans[0][0])} after" if i else " first") for i, g in enumerate(groups)]
    return [f"{IMPORT_PROBLEM}{SEPARATE_RUNS} {len(groups)} groups that do not overlap ("
            + "; ".join(described) + f"; no rank's trace longer than {format_ns(longest)}): "
            "the ranks of one job run at once, so these look like files of separate runs (import each into a store "
            "of its own)"]


def merge_stores(first: TraceStore, second: TraceStore, out: str | os.PathLike, *,
                 renumber: bool = False, amend: Callable[[TraceStore, dict[str, str]], None] | None = None,
                 tell: Callable[[str], None] | None = None, as_one_run: bool = False) -> TraceStore:
    """Merge two stores of one job into a new store at ``out``.

    Ranks present in both are an error unless ``renumber``, which shifts the second store's ranks past
    the first's. Run metadata of the first wins; both sources are recorded in the manifest. What the stores' manifests
    say is kept where it stays true of the merged store (ddltrace/merged_manifest.py): their notes (a note of one
    store naming it; the notes on ranks with no file only for ranks still without one), the nodes whose parts were
    not gathered only where neither store holds their ranks (``run.missing_nodes``), each rank's clock entries
    from the store that held it (a note where the stores' clocks were aligned differently), the world size they
    declare (the largest, and a note, where they differ); the job's ``workload`` entry where both carry the same one
    (ddltrace/workload_entry.py), else a note says why there is none; the events no rule knew (``uncategorised``,
    ``info``'s ``uncategorised:`` line: the rows of both, a row both carry once). ``tell`` is given each of the
    merge's own notes once the store is published. ``amend(store, said)`` may change the merged store's manifest
    before it is written and the store published, so that no reader ever sees the store without it (``said``: the
    merge's own notes by what they are on, ``world_size``, ``clock``, ``workload``, ``one_run``).

    Stores that are evidently of two runs are refused (:class:`StoreError`, one line naming both and the evidence,
    nothing written): their times on the wall clock far apart (:func:`two_runs_apart`), or their world sizes, their
    runs' commands or their job configurations differing (ddltrace/merged_manifest.py's ``not_one_run``: QA, a w = 4
    and a w = 8 run 6 s apart merged, and ``analyze`` read the gap as a 12.7 s sequential initialisation).
    ``as_one_run`` merges them anyway (the user's word that they are one run), and a note in the merged store says
    what looked otherwise.
    """
    from ddltrace.merged_manifest import AS_ONE_RUN, not_one_run, not_one_run_text

    spans = _wall_span(first), _wall_span(second)
    gap = two_runs_apart(*spans) if None not in spans else 0
    evidence = not_one_run(first, second, renumbered=renumber)
    if gap and not as_one_run:
        from ddltrace.units import format_ns

        raise StoreError(f"{second.path}: {format_ns(gap)} apart from {first.path} on the wall clock: not a part of "
                         f"its run (merge joins the parts of one job; {AS_ONE_RUN} merges them anyway, where you "
                         "know they are one)")
    if evidence and not as_one_run:
        raise StoreError(not_one_run_text(first, second, evidence))
    if gap:
        from ddltrace.units import format_ns

        evidence.insert(0, f"{format_ns(gap)} apart on the wall clock")
    one_run = (f"merged as one run on the user's word ({AS_ONE_RUN}), though {second.path} looked like another "
               f"run than {first.path} (its vs {first.path}'s: {'; '.join(evidence)})") if evidence else None
    offset = 0
    overlap = set(first.ranks) & set(second.ranks)
    if overlap:
        if not renumber:
            raise StoreError(f"{second.path}: ranks {rank_ranges(sorted(overlap))} are also in {first.path}: two "
                             "parts of one job hold different ranks")
        offset = max(first.ranks) + 1
    out = Path(out)
    if out.exists():
        raise StoreError(f"{out}: already exists (choose another output)")
    with StoreLock(out):
        said = _merge_into(first, second, out, offset, amend, one_run)
    for note in said.values() if tell is not None else ():
        tell(note)
    return TraceStore.open(out)


def _merge_into(first: TraceStore, second: TraceStore, out: Path, offset: int,
                amend: Callable[[TraceStore, dict[str, str]], None] | None, one_run: str | None) -> dict[str, str]:
    """Build the merged store at ``out``; the merge's own notes (why the manifest differs from the stores'), by what
    they are on (``one_run``: that the stores were merged as one run though they looked like two)."""
    from ddltrace.merged_manifest import (
        MergedPart,
        joined_nodes,
        merged_clock,
        merged_notes,
        merged_uncategorised,
        merged_world_size,
        still_missing,
    )

    with building(out) as staging:
        run = {**second.run, **first.run}
        merged = TraceStore.create(staging, run)
        merged.manifest["merged_from"] = [str(first.path), str(second.path)]
        parts, machine = [], []
        for source, shift in ((first, 0), (second, offset)):
            taken = []
            for rank, frame in source.iter_timeline():
                frame = frame.assign(rank=(frame["rank"] + shift).astype("int32"))
                counters = source.counters([rank])
                counters = counters.assign(rank=(counters["rank"] + shift).astype("int32"))
                merged.add_rank(rank + shift, frame, counters if len(counters) else None, save=False,
                                **{k: v for k, v in source.rank_info(rank).items()
                                   if k not in ("events", "start_ns", "end_ns", "counter_samples",
                                                "timeline_file", "rows")})
                taken.append(rank)
            if _MACHINE in source.counter_ranks:
                machine.append(source.counters([_MACHINE]))
            parts.append(MergedPart(source.path, source.manifest, taken, shift, source.world_size,
                                    source.world_size == source.run.get("world_size")))
        if machine:  # a machine's sample both stores hold (parts of one run exported apart) is one sample
            import pandas as pd

            merged.add_counters(pd.concat(machine, ignore_index=True).drop_duplicates(["name", "t_ns", "value"]),
                                save=False)
        missing = still_missing({**parts[1].missing_nodes, **parts[0].missing_nodes}, joined_nodes(*parts))
        merged.run.pop("missing_nodes", None)
        merged.run.update({"missing_nodes": missing} if missing else {})
        said = {}
        merged.run["world_size"], said["world_size"] = merged_world_size(*parts)
        merged.manifest["clock"], said["clock"] = merged_clock(*parts)
        workload, said["workload"] = merged_workload((first.path, first.manifest.get("workload")),
                                                     (second.path, second.manifest.get("workload")), out)
        if workload is not None:
            merged.manifest["workload"] = workload
        uncategorised = merged_uncategorised(first.manifest.get("uncategorised"), second.manifest.get("uncategorised"))
        if uncategorised:  # (info's 'uncategorised:' line; was lost, its note alone kept)
            merged.manifest["uncategorised"] = uncategorised
        said["runs"] = next(iter(separate_runs(merged)), None)  # (the import's check: two runs, not one job's)
        said["one_run"] = one_run
        said = {on: note for on, note in said.items() if note}
        merged.manifest["notes"] = [*merged_notes(*parts, merged.ranks, merged.run), *said.values()]
        if amend is not None:
            amend(merged, said)
        merged.save_manifest()
        publish(staging, out)
    return said
