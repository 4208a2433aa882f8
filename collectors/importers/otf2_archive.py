"""OTF2 archives (Score-P and others), read with the ``otf2`` package (optional: ``pip install otf2``).

Enter/Leave pairs on each location become intervals, with **exclusive** time: a region that encloses others
(Score-P's ``main`` around ``MPI_Init``, the MPI calls and ``MPI_Finalize``) is stored as the pieces between
its children, so the time of a name summed over its rows is its exclusive time (its inclusive time minus its
children's), and an instant belongs to the innermost region only. A leaf region is one row per call; an
enclosing region has one row per non-empty piece (a region its children cover entirely has none).
MpiSend/MpiRecv (and their non-blocking forms) put bytes, peer and tag on the MPI call that encloses them.
MPI_Init/Finalize keep their names, by which the phase analysis finds initialisation and finalisation. A
location group ("MPI Rank N") is a rank; times are the archive's one clock, converted with its timer resolution.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import re
from pathlib import Path

import numpy as np
import pyarrow as pa

from ddltrace.arrow_timeline import optional_integers
from ddltrace.collectors.importers.base import ImportContext, Importer, RankPart, build_timeline, register
from ddltrace.errors import DdltraceError

_RANK = re.compile(r"(\d+)\s*$")


def sniff(raw: bytes, path: Path) -> bool:
    return b"OTF2" in raw[:16] and path.suffix == ".otf2"


#: The C library's error callback type: (user data, file, line, function, error code, format, va_list) -> code.
_ERROR_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p,
                                   ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


@contextlib.contextmanager
def _library_quiet(said: list[str]):
    """The C library's error messages into ``said`` (their format strings), not onto the terminal; the
    Python package's own tracebacks (it prints one when a callback fails) as well, one line each."""
    from _otf2.Config import conf

    def keep(_user, _file, _line, _function, code, text, _args):
        said.append((text or b"").decode("utf-8", "replace"))
        return code

    register = conf.lib.OTF2_Error_RegisterCallback
    register.argtypes, register.restype = [_ERROR_CALLBACK, ctypes.c_void_p], ctypes.c_void_p
    callback = _ERROR_CALLBACK(keep)
    previous = register(callback, None)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            yield
    finally:
        register(ctypes.cast(previous, _ERROR_CALLBACK) if previous else _ERROR_CALLBACK(), None)
        said.extend(line.strip() for line in printed.getvalue().splitlines()[-1:] if line.strip())


def _reason(exc: Exception, said: list[str]) -> str:
    """Why the library stopped: its exception, with the first two messages it gave (innermost first)."""
    plain = [text for text in said if text and "%" not in text]
    return f"{exc}: {'; '.join(plain[:2])}" if plain else str(exc)


def _load():
    """The otf2 package and the error its C library raises on damaged data."""
    try:
        import otf2
        from _otf2.ErrorCodes import Error
    except ImportError as exc:
        raise DdltraceError("OTF2 archives need the 'otf2' package: pip install 'ddltrace[otf2]' "
                            "(or pip install otf2)") from exc
    return otf2, Error


def _piece(rows: list, lane: int, frame: list, end_ns: int, *, child_enters: bool) -> None:
    """The region's exclusive piece from its current start (its Enter, or where its last child left) to
    ``end_ns`` (where a child enters, or its Leave). A leaf is kept even when it lasts 0 ns (one call); an
    empty piece of a region with children is not a row."""
    name, start, nbytes, peer, tag, has_children = frame
    if end_ns > start or not (has_children or child_enters):
        rows.append((lane, name, start, end_ns - start, nbytes, peer, tag))
    frame[5] = frame[5] or child_enters


def read(path: Path, ctx: ImportContext):
    otf2, damaged = _load()
    per_rank: dict[int, dict] = {}
    said: list[str] = []
    with contextlib.ExitStack() as opened:
        try:
            with _library_quiet(said):
                reader = opened.enter_context(otf2.reader.open(str(path)))
                clock = reader.definitions.clock_properties
                resolution = float(clock.timer_resolution)
                offset = int(clock.global_offset)
                stream = iter(reader.events)
        except Exception as exc:  # the C library reports any damage as a generic error
            raise DdltraceError(f"{path}: not a readable OTF2 archive ({_reason(exc, said)})") from exc
        opened.enter_context(_library_quiet(said))
        events = 0
        while True:
            try:
                location, event = next(stream)
            except StopIteration:
                break
            except damaged as exc:  # damaged event data: keep what came before it
                if not events:
                    raise DdltraceError(f"{path}: not a readable OTF2 archive ({_reason(exc, said)})") from exc
                if ctx.report is not None:
                    ctx.report.problems.append(f"{path}: OTF2 events unreadable after event {events} "
                                               f"({_reason(exc, said)}); the events before it are kept")
                    ctx.report.skipped["OTF2 events after damaged data"] += 1
                break
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
                if stack:  # the enclosing region's piece up to here is its own time
                    _piece(state["rows"], lane, stack[-1], t_ns, child_enters=True)
                stack.append([event.region.name, t_ns, None, None, None, False])
            elif kind == "Leave":
                if not stack:
                    if ctx.report is not None:
                        ctx.report.skipped["Leave without an Enter"] += 1
                    continue
                _piece(state["rows"], lane, stack.pop(), t_ns, child_enters=False)
                if stack:  # the enclosing region's own time resumes
                    stack[-1][1] = t_ns
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
            extra={"bytes": optional_integers([r[4] for r in rows], pa.int64()),
                   "peer": optional_integers([r[5] for r in rows], pa.int32()),
                   "tag": optional_integers([r[6] for r in rows], pa.int32())})
        if ctx.report is not None:
            ctx.report.intervals += len(timeline)
        yield RankPart(rank=rank, timeline=timeline, clock="shared",
                       info={"format": "otf2", "file": str(path), "host": state["host"],
                             "time_base": "ns since the archive's global offset"})


register(Importer("otf2", "OTF2 archive (anchor file .otf2; needs the otf2 package)", read=read, sniff=sniff,
                  binary=True))
