"""Export a trace store to Chrome trace JSON, which Perfetto UI and chrome://tracing open.

Mapping: each rank is a process (``pid`` = rank, named "rank N (host)"), each lane a thread (``tid`` numbered
per rank in order of first appearance, named after the lane), each interval a complete event (``ph: "X"``,
``ts``/``dur`` in microseconds, the exact decimals of the store's integer ns: :func:`us_text`) whose ``cat`` is
the timeline category and whose ``args`` hold bytes, peer, step, tag, comm, request, correlation and source
where known; a launch and the device work it launched (one correlation id) are joined by a flow arrow
(``s``/``f``, :func:`_flow_events`). Counters become ``C`` events on the rank's process, the machine-wide ones
(counters rank -1, in every export, with --ranks too) on a process named "machine" (:data:`MACHINE_PID`), each sample's
name and value as the store has them (``NAME@HOST`` for a node's of a store made across nodes; the host of plain
names is the one of ``otherData.run.hosts``); ``ddltrace import`` reads them back as the store's machine counters.
A sample whose value is NaN (the sampler could not read it) is not written: a ``C`` event holds numbers. Metadata
events (``ph: "M"``) name every process and thread and order the ranks (a rank's
``process_name`` carries its manifest entry, ``ddltrace_rank``: role, aggregate, ...); the run's metadata goes in
the top-level ``otherData`` (``run``, the manifest's every run entry: command, world size, hosts, start and end,
GPU models, ...; and the manifest's :data:`RUN_ENTRIES`: workload, clock, notes, and the events no rule knew,
``uncategorised``, which ``info``'s ``uncategorised:`` line is made of). ``ddltrace import`` takes every entry of
``run`` back but the count of files imported (collectors/importers/ddltrace_export.py's ``IMPORT_OWN``); the other
top-level entries of the manifest are the store's own, not the run's (:data:`STORE_ENTRIES`, each with why).

The file is written rank by rank, so memory stays at one rank's events. A rank of the run the export does not hold
(the store found its file damaged while the ranks were written, or held none of it: :meth:`TraceStore.missing`) is
named with why in a top-level key after the events array, ``ddltrace_missing`` (rank -> the store's line): the
header is written before the ranks are read, and Chrome's JSON takes top-level keys after ``traceEvents`` (Perfetto
stops reading at an unknown one, after every event). ``ddltrace import`` keeps each as a note on the rank.

Precision: ``ts`` counts from ``otherData.origin_ns`` (:func:`origin_ns`, a whole second on the store's clock) and
``ts``/``dur`` are the store's nanoseconds exactly in decimal µs (``2524.938``): Perfetto UI and chrome://tracing read
a fractional ``ts`` as a float64, which keeps every nanosecond of such numbers (epoch µs, ~1.8e15, would keep 0.25 µs).
``ddltrace import`` adds the origin back (collectors/importers/ddltrace_export.py). ``displayTimeUnit`` "ns" only
sets chrome://tracing's display; Perfetto builds before 2022 took it as the unit of ``ts`` (google/perfetto#106).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pandas as pd

from ddltrace.errors import DdltraceError
from ddltrace.store import TraceStore, atomic_output

_ARG_COLUMNS = ("bytes", "peer", "step", "tag", "comm", "request", "correlation")
#: pid of the "machine" process that holds the machine-wide counters (the store's counters rank :data:`MACHINE_RANK`).
MACHINE_PID = 2**31 - 1
MACHINE_RANK = -1
#: Rows of a rank turned into events at a time: their args' Python objects (~1 KB a row) are held for these only.
CHUNK_ROWS = 65536
_encode = msgspec.json.Encoder().encode


def us_text(ns: int) -> msgspec.Raw:
    """``ns`` nanoseconds as the exact decimal text of its microseconds (a JSON number): 1500 -> 1.5,
    -1 -> -0.001; a float64 (``ns / 1000``) keeps only 15-16 digits, 0.25 µs at epoch times."""
    ns = int(ns)
    whole, part = divmod(abs(ns), 1000)
    text = f"{'-' if ns < 0 else ''}{whole}" + (f".{part:03d}".rstrip("0") if part else "")
    return msgspec.Raw(text.encode())


def _meta(kind: str, pid: int, tid: int = 0, **args) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}


#: The run-level manifest entries the export carries in ``otherData`` and ``ddltrace import`` restores: the workload's
#: configuration (w, the server rank, batch size: what ``analyze`` reads), the clock alignment (offsets and their
#: uncertainties, ns), the run's notes, and the events of raw categories no rule knew (``uncategorised``: one row per
#: format and raw category, ``info``'s ``uncategorised:`` line; the export's ``cat`` is the category they were filed
#: under, so the import cannot find them again).
RUN_ENTRIES = ("workload", "clock", "notes", "uncategorised")
#: The manifest's top-level entries that the export does not carry as they are, each with why: the store's own, of
#: its files, not of the run (the imported store writes its own). Every other top-level entry is ``run`` (carried
#: whole in ``otherData.run``) or one of :data:`RUN_ENTRIES` (tests/test_export_roundtrip_counters.py checks that a
#: store's manifest holds no other).
STORE_ENTRIES = {
    "ranks": "each rank's entry goes in its process's ddltrace_rank, but what the store derives from its files",
    "counter_ranks": "the ranks with counters, derived from the counters imported",
    "created": "when the store was written",
    "ddltrace_version": "the ddltrace that wrote the store (the export's is in otherData.ddltrace_version)",
    "schema_version": "the store's layout",
    "merged_from": "the stores a merged store was made from; the imported store is made from the export, whose "
                   "otherData.store names the store exported",
}
#: Entries of a rank's manifest entry that the store derives from its files (not carried in the export).
DERIVED_INFO = frozenset({"events", "start_ns", "end_ns", "counter_samples", "file", "files", "format",
                           "timeline_file", "rows", "host"})


def _rank_events(rank: int, frame: pd.DataFrame, counters: pd.DataFrame, info: dict,
                 flow_ids: Iterator[int], origin: int) -> Iterator[dict]:
    host = info.get("host")
    label = f"rank {rank}" + (f" ({host})" if host else "")
    kept = {k: v for k, v in info.items() if k not in DERIVED_INFO}
    yield _meta("process_name", rank, name=label, ddltrace_rank=kept)
    yield _meta("process_sort_index", rank, sort_index=rank)
    lanes = list(dict.fromkeys(frame["lane"].tolist()))
    tids = {lane: i for i, lane in enumerate(lanes)}
    for lane, tid in tids.items():
        yield _meta("thread_name", rank, tid, name=lane)
        yield _meta("thread_sort_index", rank, tid, sort_index=tid)
    if len(frame):
        for first in range(0, len(frame), CHUNK_ROWS):
            yield from _complete_events(rank, frame.iloc[first:first + CHUNK_ROWS], tids, origin)
        yield from _flow_events(rank, frame, tids, flow_ids, origin)
    yield from _counter_events(rank, counters, origin)


def _complete_events(rank: int, frame: pd.DataFrame, tids: dict, origin: int) -> Iterator[dict]:
    """The ``X`` events of some rows of a rank (their args' Python objects made for these rows only)."""
    columns = [c for c in _ARG_COLUMNS if frame[c].notna().any()]
    present = {c: frame[c].notna().to_numpy() for c in columns}
    values = {c: frame[c].to_numpy(dtype=object) for c in columns}
    sources = frame["source"].to_numpy(dtype=object)
    for i, (lane, name, cat, start, dur) in enumerate(zip(frame["lane"], frame["name"], frame["category"],
                                                          frame["start_ns"], frame["dur_ns"], strict=True)):
        args = {c: int(values[c][i]) for c in columns if present[c][i]}
        if sources[i]:
            args["source"] = sources[i]
        yield {"ph": "X", "name": name, "cat": cat, "pid": rank, "tid": tids[lane],
               "ts": us_text(start - origin), "dur": us_text(dur), "args": args}


def _flow_events(rank: int, frame: pd.DataFrame, tids: dict, flow_ids: Iterator[int],
                 origin: int) -> Iterator[dict]:
    """Flow arrows (``ph`` "s" -> "f", ``bp`` "e", cat and name "ac2g" as Kineto writes them) from each host interval
    to the device interval (lane ``gpu:...``) that shares its ``correlation`` id: a launch call and the kernel, copy
    or fill it launched; the first of each by start where an id is shared by more. Perfetto UI draws them as arrows
    between the two slices. ``flow_ids`` numbers them across the file (the id stays in both intervals' args)."""
    if "correlation" not in frame or not frame["correlation"].notna().any():
        return
    rows = frame[frame["correlation"].notna()]
    device = rows["lane"].str.startswith("gpu:").to_numpy(dtype=bool)
    host = rows[~device].drop_duplicates("correlation")[["correlation", "lane", "start_ns"]]
    work = rows[device].drop_duplicates("correlation")[["correlation", "lane", "start_ns"]]
    pairs = host.merge(work, on="correlation", suffixes=("_host", "_device"))
    for lane_h, start_h, lane_d, start_d in zip(pairs["lane_host"], pairs["start_ns_host"], pairs["lane_device"],
                                                pairs["start_ns_device"], strict=True):
        flow = next(flow_ids)
        yield {"ph": "s", "id": flow, "cat": "ac2g", "name": "ac2g", "pid": rank, "tid": tids[lane_h],
               "ts": us_text(start_h - origin)}
        yield {"ph": "f", "bp": "e", "id": flow, "cat": "ac2g", "name": "ac2g", "pid": rank, "tid": tids[lane_d],
               "ts": us_text(start_d - origin)}


def _counter_events(pid: int, counters: pd.DataFrame, origin: int) -> Iterator[dict]:
    """A ``C`` event on process ``pid`` per sample of ``counters`` (``ts``: its ``t_ns`` from ``origin``, exact µs;
    ``args``: its name and value), NaN values left out."""
    for name, t_ns, value in zip(counters["name"], counters["t_ns"], counters["value"], strict=True):
        if value != value:  # NaN: the sampler could not read it; Chrome's C events need numbers
            continue
        yield {"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": us_text(t_ns - origin),
               "args": {name: float(value)}}


def origin_ns(store: TraceStore, ranks: list[int] | None = None) -> int:
    """The time (ns, on the store's clock) the export's ``ts`` count from: the whole second at or before the first
    interval (the manifest's ``start_ns`` of the ranks) and the first sample of their counters (the machine's too),
    0 where a rank's entry gives no start. Kept in ``otherData.origin_ns``; times from there stay below 2**53 in
    float64 µs for 100 days, so a viewer that reads ``ts`` as a float64 (Perfetto UI, chrome://tracing) gets the
    nanoseconds."""
    chosen = store.ranks if ranks is None else [r for r in ranks if r in store.ranks]  # (others: iter_timeline's error)
    starts = [store.rank_info(r).get("start_ns") for r in chosen]
    if not starts or not all(isinstance(t, int) and not isinstance(t, bool) for t in starts):
        return 0
    counters = store.counters(None if ranks is None else ranks)
    first = min(min(starts), int(counters["t_ns"].min()) if len(counters) else min(starts))
    return first // 10**9 * 10**9


def run_entries(store: TraceStore) -> dict:
    """The manifest's :data:`RUN_ENTRIES` for ``otherData``, the workload's ``ground_truth`` (where the job's record
    lies, relative to the store: its staleness log, gradients.csv, beside it) made absolute where it names a file, so
    that a store imported from the export elsewhere still finds it (on this machine)."""
    entries = {key: store.manifest.get(key) for key in RUN_ENTRIES}
    workload = entries["workload"]
    truth = workload.get("ground_truth") if isinstance(workload, dict) else None
    if isinstance(truth, str) and truth and "\0" not in truth:
        try:
            path = (store.path / truth).resolve()
        except OSError:  # a name too long for the file system, a loop of links: kept as the manifest has it
            path = None
        if path is not None and path.is_file():
            entries["workload"] = {**workload, "ground_truth": str(path)}
    return entries


def export_chrome(store: TraceStore, out: str | os.PathLike, ranks: list[int] | None = None,
                  progress: Callable[[int, int, int], None] | None = None) -> int:
    """Write ``store`` (or the given ranks) to ``out`` as Chrome trace JSON; return the number of events.
    ``progress(ranks_written, ranks, events_written)`` is called after each rank.

    The output is written to a temporary file and renamed, so a failed export never leaves a partial file.
    """
    out = Path(out)
    if not out.parent.exists():
        raise DdltraceError(f"{out.parent}: no such directory for the Chrome trace")
    count = 0
    with atomic_output(out) as fh:
        origin = origin_ns(store, ranks)
        other = {"ddltrace_export": 1, "origin_ns": origin, "run": store.run,
                 **run_entries(store),
                 "ddltrace_version": store.manifest.get("ddltrace_version"),
                 "store": str(store.path)}
        fh.write(b'{"displayTimeUnit":"ns","otherData":' + msgspec.json.encode(other, enc_hook=str)
                 + b',"traceEvents":[\n')

        def emit(event: dict) -> None:
            nonlocal count
            if count:
                fh.write(b",\n")
            fh.write(_encode(event))
            count += 1

        total = len(store.ranks if ranks is None else ranks)
        flow_ids = itertools.count(1)
        for done, (rank, frame) in enumerate(store.iter_timeline(ranks), 1):
            info = store.rank_info(rank)
            for event in _rank_events(rank, frame, store.counters([rank]), info, flow_ids, origin):
                emit(event)
            if progress is not None:
                progress(done, total, count)
        if MACHINE_RANK in store.counter_ranks:  # (the machine's, with any ranks: merge keeps one of each sample)
            emit(_meta("process_name", MACHINE_PID, name="machine"))
            for event in _counter_events(MACHINE_PID, store.counters([MACHINE_RANK]), origin):
                emit(event)
        missing = not_exported(store, ranks)  # (a rank's file is found damaged as it is read: known only now)
        fh.write(b"\n]" + (b',"' + MISSING_KEY.encode() + b'":' + msgspec.json.encode(
            {str(r): why for r, why in missing.items()}) if missing else b"") + b"}\n")
    return count


#: The top-level key after the events array naming the ranks of the run the export does not hold, each with why.
MISSING_KEY = "ddltrace_missing"


def not_exported(store: TraceStore, ranks: list[int] | None = None) -> dict[int, str]:
    """The ranks of the run (of ``ranks``, where given) the store holds no usable timeline of, each with the store's
    line saying why (:meth:`TraceStore.missing`: a file found damaged when the ranks were read, a rank none of
    whose files reached the store, one that holds no events); read after the ranks are."""
    return {r: why for r, why in store.missing().items() if ranks is None or r in ranks}
