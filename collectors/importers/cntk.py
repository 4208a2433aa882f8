"""CNTK profiler output: the detail JSON (B/E pairs written in completion order), the older detail CSV, and
the summary text (aggregates only).

``ts`` is µs since the profiler was enabled on that rank: ranks are not on one clock. The rank is the file
name's suffix (``..._detail_<rank>.json``; empty when MPI was not initialised: rank 0).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np

from ddltrace.collectors.importers.base import (
    ImportContext,
    Importer,
    RankPart,
    build_timeline,
    rank_from_path,
    register,
)
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.collectors.importers.convert import chrome_part, record
from ddltrace.collectors.importers.source import ByteSource
from ddltrace.errors import DdltraceError

_SNIFF_JSON = re.compile(rb'^\s*\[\s*\{[^}]*"cat"\s*:\s*"PERF"')
_SUFFIX = re.compile(r"_(?:detail|summary)_(\d*)\.(?:json|csv|txt)(?:\.gz)?$")
_CSV_HEADERS = (b"EventDescription,ThreadId,BeginTimeStamp(ms),EndTimeStamp(ms)",
                b"EventId,Description,ThreadId,TimeStamp(ms)")
_SUMMARY_ROW = re.compile(r"^(\S.*?)\s*:\s+(\S+) ms\s+(\S+) ms\s+(\S+) ms\s+(\S+) ms\s+(\d+)\s+(\S+) ms\s*$")


def _rank(path: Path, ctx: ImportContext) -> int:
    m = _SUFFIX.search(path.name)
    default = (int(m.group(1)) if m.group(1) else 0) if m else None
    return rank_from_path(path, ctx.rank_from, ctx, default)


def sniff_json(head: bytes, path: Path) -> bool:
    return bool(_SNIFF_JSON.search(head))


def read_json(path: Path, ctx: ImportContext):
    trace = read_chrome(path, processes=ctx.processes)
    record(ctx, trace)

    def lane(pid, tid):
        return "main" if pid == tid else f"thread {tid}"

    yield chrome_part(trace, fmt="cntk", rank=_rank(path, ctx), ctx=ctx, lane_name=lane, clock="relative",
                      info={"time_base": "µs since the profiler was enabled on this rank"})


def sniff_csv(head: bytes, path: Path) -> bool:
    return head.lstrip().startswith(_CSV_HEADERS)


def _ms_to_ns(text: str) -> int:
    """Milliseconds (text) to ns; ValueError when not a finite time within int64 ns."""
    value = float(text)
    if not abs(value) < 9e12:  # NaN, inf, or beyond int64 ns (292 years)
        raise ValueError(f"{text!r} is not a time in ms")
    return int(round(value * 1e6))


def read_csv(path: Path, ctx: ImportContext):
    text = ByteSource(path).read_all().decode("utf-8", "replace")
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not rows[0]:
        raise DdltraceError(f"{path}: empty CSV (no header row)")
    header, body = rows[0], rows[1:]
    lanes: dict[str, int] = {}
    keys: dict[tuple[str, str], int] = {}
    lane_codes, key_codes, starts, durs = [], [], [], []
    bad = 0
    if header[0] == "EventDescription":
        for row in body:
            try:
                name, tid, begin, end = row[0], row[1], _ms_to_ns(row[2]), _ms_to_ns(row[3])
            except (IndexError, ValueError):
                bad += 1
                continue
            if end < begin:
                bad += 1
                continue
            lane_codes.append(lanes.setdefault(f"thread {tid}", len(lanes)))
            key_codes.append(keys.setdefault(("PERF", name), len(keys)))
            starts.append(begin)
            durs.append(end - begin)
    else:  # EventId,Description,ThreadId,TimeStamp(ms): a begin row then an end row per event
        open_: dict[tuple[str, str, str], list[int]] = {}
        for row in body:
            try:
                event, name, tid, t = row[0], row[1], row[2], _ms_to_ns(row[3])
            except (IndexError, ValueError):
                bad += 1
                continue
            stack = open_.setdefault((event, name, tid), [])
            if not stack:
                stack.append(t)
                continue
            begin = stack.pop()
            if t < begin:
                bad += 1
                continue
            lane_codes.append(lanes.setdefault(f"thread {tid}", len(lanes)))
            key_codes.append(keys.setdefault(("PERF", name), len(keys)))
            starts.append(begin)
            durs.append(t - begin)
        bad += sum(len(s) for s in open_.values())
    if ctx.report is not None:
        ctx.report.events += len(body)
        if bad:
            ctx.report.skipped["unreadable or unpaired CSV rows"] += bad
        ctx.report.intervals += len(starts)
    timeline = build_timeline(rank=_rank(path, ctx), lane_codes=np.array(lane_codes, dtype=np.int64),
                              lane_table=list(lanes), key_codes=np.array(key_codes, dtype=np.int64),
                              key_table=list(keys), start_ns=np.array(starts, dtype=np.int64),
                              dur_ns=np.array(durs, dtype=np.int64), fmt="cntk", ctx=ctx)
    yield RankPart(rank=_rank(path, ctx), timeline=timeline, clock="relative",
                   info={"format": "cntk", "file": str(path), "time_base": "ms since the profiler was enabled"})


def sniff_summary(head: bytes, path: Path) -> bool:
    return head.lstrip().startswith(b"CNTK Performance Profiler Summary Report")


def _duration_ns(text: str) -> int:
    """'12.345' (ms) or 'HH:MM:SS.sss' (times of 60 s and more)."""
    if ":" in text:
        h, m, s = text.split(":")
        return int(round((int(h) * 3600 + int(m) * 60 + float(s)) * 1e9))
    return int(round(float(text) * 1e6))


def read_summary(path: Path, ctx: ImportContext):
    """Aggregates only: per thread section, the deepest rows' totals laid end to end (plus the top row's
    unattributed remainder, "(not in a deeper event)": category ``other``, like the detail JSON's Epoch and
    Minibatch Iteration frames), so per-category sums match the summary; not a time line."""
    text = ByteSource(path).read_all().decode("utf-8", "replace")
    sections: dict[str, list[tuple[str, int]]] = {}
    section = None
    for line in text.splitlines():
        m = _SUMMARY_ROW.match(line)
        if m and section is not None:
            try:
                sections[section].append((m.group(1), _duration_ns(m.group(7))))
            except ValueError:
                if ctx.report is not None:
                    ctx.report.skipped["unreadable summary rows"] += 1
        elif line.strip() in ("Main Thread", "Data Reader") or (line.strip() and line.strip()[0].isalpha()
                                                                 and ":" not in line and "." not in line):
            section = line.strip()
            sections.setdefault(section, [])
    if not any(sections.values()):
        raise DdltraceError(f"{path}: CNTK summary without any event rows")
    lanes, keys, lane_codes, key_codes, starts, durs = {}, {}, [], [], [], []
    for section, rows in sections.items():
        if not rows:
            continue
        depth = [len(name) - len(name.lstrip("_")) for name, _ in rows]
        deepest = max(depth)
        t = 0
        lane = lanes.setdefault(section.lower(), len(lanes))
        for (name, total), d in zip(rows, depth, strict=True):
            if d == deepest:
                lane_codes.append(lane)
                key_codes.append(keys.setdefault(("PERF", name), len(keys)))
                starts.append(t)
                durs.append(total)
                t += total
        top_total = max(total for (name, total), d in zip(rows, depth, strict=True) if d == min(depth))
        if deepest > min(depth) and top_total > t:
            lane_codes.append(lane)
            key_codes.append(keys.setdefault(("PERF", "(not in a deeper event)"), len(keys)))
            starts.append(t)
            durs.append(top_total - t)
    if ctx.report is not None:
        ctx.report.events += sum(len(r) for r in sections.values())
        ctx.report.intervals += len(starts)
    rank = _rank(path, ctx)
    timeline = build_timeline(rank=rank, lane_codes=np.array(lane_codes, dtype=np.int64), lane_table=list(lanes),
                              key_codes=np.array(key_codes, dtype=np.int64), key_table=list(keys),
                              start_ns=np.array(starts, dtype=np.int64), dur_ns=np.array(durs, dtype=np.int64),
                              fmt="cntk", ctx=ctx)
    yield RankPart(rank=rank, timeline=timeline, clock="relative",
                   info={"format": "cntk-summary", "file": str(path), "aggregate": True})


register(Importer("cntk", "CNTK profiler detail JSON (B/E pairs in completion order)", sniff_json, read_json))
register(Importer("cntk-csv", "CNTK profiler detail CSV (older CNTK 2.x)", sniff_csv, read_csv))
register(Importer("cntk-summary", "CNTK profiler summary text (aggregates per event)", sniff_summary,
                  read_summary))
