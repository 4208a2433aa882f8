"""OTF2 archives (Score-P and others), read with the ``otf2`` package (optional: ``pip install otf2``).

Enter/Leave pairs on each location become intervals; MpiSend/MpiRecv (and their non-blocking forms) put
bytes, peer and tag on the MPI call that encloses them. A location group ("MPI Rank N") is a rank; times are
the archive's one clock, converted with its timer resolution.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace.collectors.importers.base import ImportContext, Importer, RankPart, build_timeline, register
from ddltrace.errors import DdltraceError

_RANK = re.compile(r"(\d+)\s*$")


def sniff(raw: bytes, path: Path) -> bool:
    return b"OTF2" in raw[:16] and path.suffix == ".otf2"


def _load():
    try:
        import otf2
    except ImportError as exc:
        raise DdltraceError("OTF2 archives need the 'otf2' package: pip install 'ddltrace[otf2]' "
                            "(or pip install otf2)") from exc
    return otf2


def read(path: Path, ctx: ImportContext):
    otf2 = _load()
    per_rank: dict[int, dict] = {}
    try:
        reader_cm = otf2.reader.open(str(path))
    except Exception as exc:  # the C library reports any damage as a generic error
        raise DdltraceError(f"{path}: not a readable OTF2 archive ({exc})") from exc
    with reader_cm as reader:
        clock = reader.definitions.clock_properties
        resolution = float(clock.timer_resolution)
        offset = int(clock.global_offset)
        events = 0
        for location, event in reader.events:
            events += 1
            group = location.group
            m = _RANK.search(group.name or "")
            rank = int(m.group(1)) if m else int(group._ref)
            state = per_rank.setdefault(rank, {"stacks": {}, "rows": [], "host": "", "lanes": {}})
            if not state["host"] and group.system_tree_parent is not None:
                state["host"] = group.system_tree_parent.name
            lane = state["lanes"].setdefault(location.name or f"location {location._ref}", len(state["lanes"]))
            stack = state["stacks"].setdefault(lane, [])
            kind = type(event).__name__
            t_ns = int(round((event.time - offset) * 1e9 / resolution))
            if kind == "Enter":
                stack.append([event.region.name, t_ns, None, None, None])
            elif kind == "Leave":
                if not stack:
                    if ctx.report is not None:
                        ctx.report.skipped["Leave without an Enter"] += 1
                    continue
                name, start, nbytes, peer, tag = stack.pop()
                state["rows"].append((lane, name, start, t_ns - start, nbytes, peer, tag))
            elif kind in ("MpiSend", "MpiIsend", "MpiRecv", "MpiIrecv"):
                if stack:
                    top = stack[-1]
                    top[2] = int(event.msg_length)
                    top[3] = int(event.receiver if kind in ("MpiSend", "MpiIsend") else event.sender)
                    top[4] = int(event.msg_tag)
            elif ctx.report is not None:
                ctx.report.skipped[f"OTF2 {kind} records (not intervals)"] += 1
    if ctx.report is not None:
        ctx.report.events += events
    for rank in sorted(per_rank):
        state = per_rank[rank]
        rows = state["rows"]
        unclosed = sum(len(s) for s in state["stacks"].values())
        if unclosed and ctx.report is not None:
            ctx.report.skipped["Enter never left"] += unclosed
        names: dict[str, int] = {}
        key_codes = np.array([names.setdefault(r[1], len(names)) for r in rows], dtype=np.int64)
        timeline = build_timeline(
            rank=rank, lane_codes=np.array([r[0] for r in rows], dtype=np.int64), lane_table=list(state["lanes"]),
            key_codes=key_codes, key_table=[("", n) for n in names],
            start_ns=np.array([r[2] for r in rows], dtype=np.int64),
            dur_ns=np.array([r[3] for r in rows], dtype=np.int64), fmt="otf2", ctx=ctx,
            extra={"bytes": pd.array([r[4] for r in rows], dtype="Int64"),
                   "peer": pd.array([r[5] for r in rows], dtype="Int32"),
                   "tag": pd.array([r[6] for r in rows], dtype="Int32")})
        if ctx.report is not None:
            ctx.report.intervals += len(timeline)
        yield RankPart(rank=rank, timeline=timeline, clock="shared",
                       info={"format": "otf2", "file": str(path), "host": state["host"],
                             "time_base": "ns since the archive's global offset"})


register(Importer("otf2", "OTF2 archive (anchor file .otf2; needs the otf2 package)", read=read, sniff=sniff,
                  binary=True))
