"""TensorFlow 2 profiler XPlane files (``<host>.xplane.pb``), decoded without TensorFlow, xprof or protobuf.

A small protobuf wire-format reader walks the ``XSpace`` messages of ``tsl/profiler/protobuf/xplane.proto``
(field numbers in :data:`_FIELDS`): planes (``/host:CPU``, ``/device:GPU:0``) hold lines (threads, streams), lines
hold events (metadata id, offset and duration in picoseconds from the line's ``timestamp_ns``). Start =
``line.timestamp_ns * 1000 + offset_ps``. Event category field: ``step`` for ``Trace(..., step_num=n)`` step
markers, ``tf_function`` for a ``tf.function`` call (its ``tf_function_call`` stat: a span around the whole
function, not work of its own), else empty. A device plane's derived lines (``Steps``, ``TensorFlow Ops``, XLA,
...: :mod:`xprof_lines`) are not device time: they are dropped, and its ``Steps`` events number the stream events
that start within them. The ``correlation_id`` stat (CUPTI's, on a stream event and on the host event of the
runtime call that launched it, which xprof names after the kernel or copy it launched) goes into the
``correlation`` column. A ``Task Environment`` plane's ``profile_start_time`` (ns since the
epoch, TF >= 2.21) makes times absolute; older files are relative to the profile's start. The rank comes from
the folder or file name (``worker1/``), as in the trace-viewer JSON.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

from ddltrace.arrow_timeline import numbers
from ddltrace.collectors.importers import protowire as pw
from ddltrace.collectors.importers.base import (
    ImportContext,
    Importer,
    RankPart,
    build_timeline,
    rank_from_path,
    register,
)
from ddltrace.collectors.importers.source import ByteSource
from ddltrace.collectors.importers.xprof_lines import DERIVED_LINES, DROPPED, STEP_LINE, step_number, steps_of_rows
from ddltrace.errors import DdltraceError


def _stat(data: bytes, stat_names: dict[int, str]):
    """(name, value) of an XStat; ref_value resolves to the referenced stat_metadata name."""
    name, value = None, None
    for number, _kind, v in pw.fields(data):
        if number == 1:
            name = stat_names.get(pw.number(v), str(v))
        elif number == 2:
            value = struct.unpack("<d", pw.message(v))[0]
        elif number in (3, 4):
            value = pw.signed(v) if number == 4 else pw.number(v)
        elif number in (5, 6):
            value = pw.text(v)
        elif number == 7:
            value = stat_names.get(pw.number(v), str(v))
    return name, value


def _map_entry(data: bytes) -> tuple[int, bytes]:
    key, value = 0, b""
    for number, _kind, v in pw.fields(data):
        if number == 1:
            key = pw.signed(v)
        elif number == 2:
            value = pw.message(v)
    return key, value


def _plane(data: bytes):
    """(name, {line}, event names by metadata id, plane stats) of one XPlane."""
    name, lines, event_meta, stat_names, raw_stats = "", [], {}, {}, []
    for number, _kind, v in pw.fields(data):
        if number == 2:
            name = pw.text(v)
        elif number == 3:
            lines.append(pw.message(v))
        elif number == 4:
            key, meta = _map_entry(v)
            meta_name = display = ""
            for n, _k, mv in pw.fields(meta):
                if n == 2:
                    meta_name = pw.text(mv)
                elif n == 4:
                    display = pw.text(mv)
            event_meta[key] = meta_name or display
        elif number == 5:
            key, meta = _map_entry(v)
            for n, _k, mv in pw.fields(meta):
                if n == 2:
                    stat_names[key] = pw.text(mv)
        elif number == 6:
            raw_stats.append(pw.message(v))
    stats = dict(_stat(s, stat_names) for s in raw_stats)
    return name, lines, event_meta, stat_names, stats


def _plane_name(data: bytes) -> str:
    """The name of a plane that does not decode, where its name field comes before the damage; else ""."""
    try:
        for number, _kind, v in pw.fields(data):
            if number == 2:
                return pw.text(v)
    except _BROKEN:
        pass
    return ""


def _event(data: bytes) -> tuple:
    """(metadata_id, offset_ps, duration_ps, raw stats, occurrences) of one XEvent (occurrences None unless it is an
    aggregate)."""
    meta = offset = duration = 0
    occurrences, stats = None, []
    for n, _k, v in pw.fields(data):
        if n == 1:
            meta = pw.signed(v)
        elif n == 2:
            offset = pw.signed(v)
        elif n == 3:
            duration = pw.signed(v)
        elif n == 5:
            occurrences = pw.number(v)
        elif n == 4:
            stats.append(pw.message(v))
    return meta, offset, duration, stats, occurrences


def _line(data: bytes):
    """(name, timestamp_ns, [(metadata_id, offset_ps, duration_ps, raw stats, occurrences)], damage): ``damage`` is
    None, or what broke a line damaged after its name, whose events before the damage are returned (a line damaged
    before its name raises)."""
    name = display = ""
    timestamp_ns, events = 0, []
    try:
        for number, _kind, v in pw.fields(data):
            if number == 2:
                name = pw.text(v)
            elif number == 11:
                display = pw.text(v)
            elif number == 3:
                timestamp_ns = pw.signed(v)
            elif number == 4:
                events.append(_event(pw.message(v)))
    except _BROKEN as exc:
        if not (display or name):
            raise
        return display or name, timestamp_ns, events, exc
    return display or name, timestamp_ns, events, None


def sniff(raw: bytes, path: Path) -> bool:
    """An XSpace starts with its first plane (field 1, length-delimited): 0x0a, a varint, then the plane's own
    fields; the name says ``.xplane.pb``."""
    return path.name.endswith(".xplane.pb") and raw[:1] == b"\x0a"


#: What a damaged message raises while it is decoded.
_BROKEN = (ValueError, struct.error)
#: Start and end times (ps) beyond this are not times (int64 ns holds ±9.2e18 ns = ±9.2e21 ps).
_MAX_PS = 1 << 62
#: A copy's bytes in its ``memcpy_details`` stat (``kind_src:pageable kind_dst:device size:1024 ...``).
_COPY_SIZE = re.compile(r"\bsize:(\d+)")


def _in_range(start_ps: int, duration_ps: int) -> bool:
    """A duration >= 0 and start and end times that are times (within ±2^62 ps)."""
    return duration_ps >= 0 and abs(start_ps) <= _MAX_PS and start_ps + duration_ps <= _MAX_PS


def read(path: Path, ctx: ImportContext):
    data = ByteSource(path).read_all()
    planes: list[bytes] = []
    skipped: Counter = Counter()
    try:
        for number, _kind, v in pw.fields(data):
            if number == 1:
                planes.append(pw.message(v))
    except _BROKEN as exc:  # a truncated file: the planes before the damage are kept
        if not planes:
            raise DdltraceError(f"{path}: not a readable XPlane protobuf ({exc})") from exc
        skipped["unreadable XPlane planes"] += 1
        if ctx.report is not None:
            ctx.report.problems.append(f"{path}: the XSpace is damaged after its plane {len(planes)} ({exc}: "
                                       f"truncated?); the {len(planes)} complete plane(s) before it are kept")
    problems = ctx.report.problems if ctx.report is not None else []
    parsed = []
    for number, plane in enumerate(planes, 1):  # a damaged plane, line or event is named and counted; the rest kept
        try:
            parsed.append(_plane(plane))
        except _BROKEN as exc:
            skipped["unreadable XPlane planes"] += 1
            problems.append(f"{path}: plane {_plane_name(plane) or f'number {number}'} does not decode ({exc}): "
                            "its events are lost; the other planes are kept")
    if planes and not parsed:
        raise DdltraceError(f"{path}: not a readable XPlane protobuf (none of its {len(planes)} planes decodes)")
    start_ns, clock = 0, "relative"
    for name, _lines, _meta, _stat_names, stats in parsed:
        profile_start = stats.get("profile_start_time")
        if name == "Task Environment" and isinstance(profile_start, int) and 0 < profile_start < 1 << 62:
            start_ns, clock = profile_start, "epoch"
    lanes: dict[str, int] = {}
    keys: dict[tuple[str, str], int] = {}
    lane_codes, key_codes, starts, durs, steps, correlations, sizes = [], [], [], [], [], [], []
    lane_device: list[int] = []  # per lane: its device plane's code, -1 on the host
    step_rows: list[tuple[int, int, int, int]] = []  # (device code, start ps, end ps, step) of the Steps lines
    events_read = 0
    for device, (plane_name, lines, event_meta, stat_names, _stats) in enumerate(parsed):
        if not plane_name.startswith(("/host:", "/device:")):
            continue
        short = plane_name.replace("/device:", "").replace("/host:", "host:").lower()
        on_device = not plane_name.startswith("/host:")
        for raw_line in lines:
            try:
                line_name, timestamp_ns, events, damage = _line(raw_line)
            except _BROKEN as exc:
                skipped["unreadable XPlane lines"] += 1
                problems.append(f"{path}: a line of plane {plane_name} does not decode ({exc}): its events are lost; "
                                "the plane's other lines are kept")
                continue
            if damage is not None:
                skipped["XPlane lines damaged part way (their events before the damage kept)"] += 1
                problems.append(f"{path}: line {line_name} of plane {plane_name} is damaged after its event "
                                f"{len(events)} ({damage}): those {len(events)} are kept, the rest of the line is lost")
            events_read += len(events)
            if on_device and line_name in DERIVED_LINES:
                skipped[DROPPED] += len(events)
                if line_name == STEP_LINE:
                    for i, (meta, offset_ps, duration_ps, *_rest) in enumerate(events):
                        start_ps = timestamp_ns * 1000 + offset_ps
                        if _in_range(start_ps, duration_ps):
                            step_rows.append((device, start_ps, start_ps + duration_ps,
                                              step_number(event_meta.get(meta, ""), i)))
                continue
            lane = lanes.setdefault(f"{short}/{line_name}", len(lanes))
            if lane == len(lane_device):
                lane_device.append(device if on_device else -1)
            for meta, offset_ps, duration_ps, raw_stats, occurrences in events:
                if occurrences is not None:
                    skipped["aggregated events (num_occurrences, no time)"] += 1
                    continue
                start_ps = timestamp_ns * 1000 + offset_ps
                if not _in_range(start_ps, duration_ps):
                    skipped["events with a negative duration or a time out of range"] += 1
                    continue
                name = event_meta.get(meta, f"event {meta}")
                step, cat, correlation, size = -1, "", -1, -1
                try:
                    for raw in raw_stats:  # Trace("train", step_num=i) marks a step
                        stat_name, value = _stat(raw, stat_names)
                        if stat_name == "step_num" and isinstance(value, int):
                            step, cat = value, "step"
                        elif stat_name == "tf_function_call" and not cat:  # a tf.function call: the whole function
                            cat = "tf_function"
                        elif stat_name == "correlation_id" and isinstance(value, int):
                            correlation = value
                        elif stat_name == "memcpy_details" and isinstance(value, str):  # "kind_src:... size:N"
                            found = _COPY_SIZE.search(value)
                            size = int(found.group(1)) if found else -1
                except _BROKEN:
                    skipped["events with unreadable stats (kept without them)"] += 1
                    step, cat, correlation, size = -1, "", -1, -1
                lane_codes.append(lane)
                key_codes.append(keys.setdefault((cat, name), len(keys)))
                starts.append(start_ps)
                durs.append(duration_ps)
                steps.append(step if 0 <= step < _MAX_PS else -1)
                correlations.append(correlation if 0 <= correlation < _MAX_PS else -1)
                sizes.append(size if 0 <= size < _MAX_PS else -1)
    if ctx.report is not None:
        ctx.report.events += events_read
        ctx.report.intervals += len(starts)
        ctx.report.skipped.update(skipped)
    starts_ps = np.array(starts, dtype=np.int64)
    step_arr = np.array(steps, dtype=np.int64)
    corr_arr = np.array(correlations, dtype=np.int64)
    size_arr = np.array(sizes, dtype=np.int64)
    if step_rows:
        columns = np.array(step_rows, dtype=np.int64).T  # device code, start, end (ps), step
        row_device = np.array(lane_device, dtype=np.int64)[np.array(lane_codes, dtype=np.int64)]
        from_lines = steps_of_rows(row_device, starts_ps, *columns)
        step_arr = np.where(step_arr < 0, from_lines, step_arr)
    rank = rank_from_path(path, ctx.rank_from, ctx)
    timeline = build_timeline(rank=rank, lane_codes=np.array(lane_codes, dtype=np.int64), lane_table=list(lanes),
                              key_codes=np.array(key_codes, dtype=np.int64), key_table=list(keys),
                              start_ns=starts_ps // 1000 + start_ns,
                              dur_ns=np.array(durs, dtype=np.int64) // 1000, fmt="tf2", ctx=ctx,
                              extra={"step": numbers(np.maximum(step_arr, 0), pa.int64(), step_arr < 0),
                                     "correlation": numbers(np.maximum(corr_arr, 0), pa.int64(), corr_arr < 0),
                                     "bytes": numbers(np.maximum(size_arr, 0), pa.int64(), size_arr < 0)})
    yield RankPart(rank=rank, timeline=timeline, clock=clock,
                   info={"format": "tf2-xplane", "file": str(path),
                         "time_base": "ns since the epoch" if clock == "epoch" else "ns since the profile started"})


register(Importer("tf2-xplane", "TensorFlow 2 profiler XPlane (<host>.xplane.pb), read without TensorFlow", sniff,
                  read, binary=True))
