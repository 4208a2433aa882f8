"""OTF2 archives (Score-P and others), read with the ``otf2`` package (optional: ``pip install otf2``).

Enter/Leave pairs on each location become intervals, with **exclusive** time: a region that encloses others
(Score-P's ``main`` around ``MPI_Init``, the MPI calls and ``MPI_Finalize``) is stored as the pieces between
its children, so the time of a name summed over its rows is its exclusive time (its inclusive time minus its
children's), and an instant belongs to the innermost region only. A leaf region is one row per call; an
enclosing region has one row per non-empty piece (a region its children cover entirely has none).
MpiSend/MpiRecv and MpiIsend put bytes, peer and tag on the MPI call that encloses them (an MPI_Sendrecv's, or
_replace's, its MpiSend's: the row is its send half, ``peer`` the destination, as the PMPI collector and IPM give it;
its MpiRecv becomes the call's receive half, a row of no duration at the call's Leave named as the PMPI collector's
(``ddltrace_sendrecv_received``: ``peer`` the source, the tag and bytes received), which the wait states match as a
receive over the call and the per-node traffic counts as received; was the last event's, the receive's source, on the
call's row); a matched probe's
MpiProbe its message's source and tag on the MPI_Mprobe / MPI_Improbe, and the message's id on it and on the
MPI_Mrecv (MpiMrecv, with the bytes) or MPI_Imrecv (MpiImrecvRequest) that takes the message, as the PMPI collector
gives a matched receive its probe's envelope. A non-blocking call's request (OTF2's request id, MpiIsend's,
MpiIrecvRequest's and MpiImrecvRequest's) is its row's ``request``; the MPI_Wait*/Test* region in which a request
completes (MpiIsendComplete, MpiIrecv, MpiImrecv) takes it too, and where one completes several (a Waitall) the posts
share the first one's, so that wait-state analysis finds each post's completion (:func:`_complete`). A receive's
sender, tag and bytes, known at its completion (MpiIrecv, in the Wait), go to its MPI_Irecv row, as the PMPI
collector has them (to the Wait's row where the trace holds no post of its request).
MPI_Init/Finalize keep their names, by which the phase analysis finds initialisation and finalisation. A
location group ("MPI Rank N") is a rank; times are the archive's one clock, converted with its timer resolution.

Metric records (Score-P's PAPI / rusage / perf / plugin counters: OTF2 Metric events of a MetricClass, or of a
MetricInstance scoped to a location or location group) become the rank's counters: one series per metric member
and location, named after the member (``PAPI_TOT_CYC``; ``PAPI_TOT_CYC [OMP thread 1]`` where a rank's member is
recorded by more than one location), each value as recorded times the member's base ** exponent. What a value means
(its member's unit, mode, type, description, occurrence) is the rank's ``counter_series`` entry
(:func:`_series_meanings`): a cumulative count since the location's counters started (ACCUMULATED_START, what
Score-P writes for PAPI), a count per interval (ACCUMULATED_LAST / NEXT), or a value at an instant (ABSOLUTE_*,
RELATIVE_*, ACCUMULATED_POINT). Where a count's samples are taken at region enters and leaves (a metric class that is
SYNCHRONOUS_STRICT or SYNCHRONOUS: the Metric record just before the Enter / Leave at the same timestamp on the same
location, as Score-P writes it), each call's count between its Enter and Leave is summed per region name and member
into the rank's ``region_counters`` (:class:`_RegionCounts`; read by :mod:`ddltrace.analyses.region_counters`).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

from ddltrace.arrow_timeline import counters_table, optional_integers
from ddltrace.collectors.importers.base import ImportContext, Importer, RankPart, build_timeline, register
from ddltrace.collectors.pmpi.table import SENDRECV_RECEIVED
from ddltrace.errors import DdltraceError

_RANK = re.compile(r"(\d+)\s*$")


def sniff(raw: bytes, path: Path) -> bool:
    """An OTF2 anchor file: by its magic (``OTF2`` after its two header bytes) whatever its name, so that
    :func:`read` can say one renamed must be named ``*.otf2``."""
    return raw[2:6] == b"OTF2" or (b"OTF2" in raw[:16] and path.suffix == ".otf2")


#: Calls that send and receive at once: each is one row, its send half (``peer`` the destination, ``tag`` the send
#: tag, ``bytes`` sent: the MpiSend inside it), as the PMPI collector and IPM record it and analyses/wait_states.py
#: and node_traffic.py read it; its MpiRecv (the message's source, tag and bytes) is its receive half, a row of its
#: own at the call's Leave (:data:`~ddltrace.collectors.pmpi.table.SENDRECV_RECEIVED`), as the PMPI collector writes.
_SENDRECVS = frozenset({"MPI_Sendrecv", "MPI_Sendrecv_replace"})


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


#: The otf2 package's callback failing on a record that names an id no definition defines (its last line).
_UNDEFINED = re.compile(r"^KeyError: (\d+)$")


def _reason(exc: Exception, said: list[str], part: str = "event data") -> str:
    """Why the library stopped: its exception, with the first two messages it gave (innermost first); a record of
    ``part`` naming an undefined id (the package's KeyError) in words."""
    undefined = next((m.group(1) for m in map(_UNDEFINED.match, said) if m), None)
    if undefined is not None:
        return f"a record of its {part} refers to id {undefined}, which no definition defines: its {part} are damaged"
    plain = [text for text in said if text and "%" not in text]
    return f"{exc}: {'; '.join(plain[:2])}" if plain else str(exc)


def _load():
    """The otf2 package and the error its C library raises on damaged data."""
    try:
        import otf2
        from _otf2.ErrorCodes import Error
    except ImportError as exc:
        raise DdltraceError("OTF2 archives need the 'otf2' package: pip install '<ddltrace checkout>[otf2]' "
                            "(or pip install otf2)") from exc
    return otf2, Error


def _piece(rows: list, lane: int, frame: list, end_ns: int, *, child_enters: bool) -> None:
    """The region's exclusive piece from its current start (its Enter, or where its last child left) to
    ``end_ns`` (where a child enters, or its Leave). A leaf is kept even when it lasts 0 ns (one call); an
    empty piece of a region with children is not a row. The requests completed in the region go with its last."""
    name, start, nbytes, peer, tag, has_children, request, completed, posted, _counts = frame
    if end_ns > start or not (has_children or child_enters):
        rows.append((lane, name, start, end_ns - start, nbytes, peer, tag, request,
                     () if child_enters else tuple(completed), posted))
    frame[5] = frame[5] or child_enters


def _complete(rows: list) -> list:
    """``rows`` (lane, name, start, duration, bytes, peer, tag, request, requests completed, whether its request is
    a post's, not a message's id) with each completion given to its post: in time order, a region's completed
    requests (request id, and for a receive what it knows of its bytes, sender and tag) are found among the posts
    before it by request id; the posts and the region share the request of the first, and a receive's bytes, sender
    and tag go to its post (to the region where no post is in the trace). Returns (lane, name, start, duration,
    bytes, peer, tag, request) rows in the same order."""
    out = [list(row[:8]) for row in rows]
    posts: dict[int, int] = {}
    for i in sorted(range(len(rows)), key=lambda i: rows[i][2]):
        completed = rows[i][8]
        if not completed:
            if rows[i][9]:
                posts[out[i][7]] = i
            continue
        shared = completed[0][0]
        out[i][7] = shared
        for request, message in completed:
            post = posts.pop(request, None)
            if post is not None:
                out[post][7] = shared
            if message is not None:  # (the parts the completion knows: an Imrecv's is its bytes only)
                row = out[i if post is None else post]
                row[4:7] = [known if known is not None else had for known, had in zip(message, row[4:7], strict=True)]
    return out


class _Fold:
    """Enter/Leave and message events folded, per rank and location, into exclusive-time rows."""

    def __init__(self, resolution: float, offset: int):
        self.resolution, self.offset = resolution, offset
        self.per_rank: dict[int, dict] = {}
        self.skipped: Counter = Counter()
        self.events = 0
        self.rank_events: Counter = Counter()
        self.location_events: Counter = Counter()  # by the location's reference
        self.meanings: dict[int, _Member] = {}  # by the metric member's reference
        from otf2.definitions import Location, LocationGroup, MetricInstance

        self._instance, self._location, self._group = MetricInstance, Location, LocationGroup
        self._metrics: dict[int, tuple] = {}  # how each metric's records are read (:meth:`_how`), by its reference

    def state(self, rank: int) -> dict:
        """The rank's fold state, made empty on first use."""
        state = self.per_rank.get(rank)
        if state is None:
            state = self.per_rank[rank] = _new_state()
        return state

    def add(self, location, event) -> None:
        self.events += 1
        self.location_events[location._ref] += 1
        rank = _rank_of(location)
        self.rank_events[rank] += 1
        state = self.state(rank)
        group = location.group
        if not state["host"] and group.system_tree_parent is not None:
            state["host"] = group.system_tree_parent.name
        label = location.name or f"location {location._ref}"
        lane = state["lanes"].setdefault(label, len(state["lanes"]))
        stack = state["stacks"].setdefault(lane, [])
        kind = type(event).__name__
        t_ns = int(round((event.time - self.offset) * 1e9 / self.resolution))
        if kind == "Enter":
            if stack:  # the enclosing region's piece up to here is its own time
                _piece(state["rows"], lane, stack[-1], t_ns, child_enters=True)
            name = event.region.name
            counts = state["counts"].get(lane)
            stack.append([name, t_ns, None, None, None, False, None, [], False,
                          None if counts is None else counts.enter(name, stack, event.time)])
        elif kind == "Leave":
            if not stack:
                self.skipped["Leave without an Enter"] += 1
                return
            frame = stack.pop()
            _piece(state["rows"], lane, frame, t_ns, child_enters=False)
            received = state["received"].pop(lane, None)
            if received is not None and frame[0].removesuffix("_c") in _SENDRECVS:  # its receive half, as PMPI's
                state["rows"].append((lane, SENDRECV_RECEIVED, t_ns, 0, *received, None, (), False))
            state["calls"][frame[0]] += 1
            counts = state["counts"].get(lane)
            if counts is not None:
                counts.leave(frame, stack, event.time, state["regions"])
            if stack:  # the enclosing region's own time resumes
                stack[-1][1] = t_ns
        elif kind == "Metric":
            self._metric(label, state, lane, event, t_ns)
        elif kind in ("MpiSend", "MpiIsend", "MpiRecv"):
            if stack and kind == "MpiRecv" and stack[-1][0].removesuffix("_c") in _SENDRECVS:
                # a Sendrecv's row is its send half (its MpiSend: peer the destination), as PMPI and IPM give it;
                # what it received is its receive half, a row at its Leave
                state["received"][lane] = (int(event.msg_length), int(event.sender), int(event.msg_tag))
            elif stack:
                top = stack[-1]
                top[2] = int(event.msg_length)
                top[3] = int(event.receiver if kind in ("MpiSend", "MpiIsend") else event.sender)
                top[4] = int(event.msg_tag)
                if kind == "MpiIsend":
                    top[6], top[8] = int(event.request_id), True
        elif kind == "MpiIrecvRequest":
            if stack:
                stack[-1][6], stack[-1][8] = int(event.request_id), True
        elif kind in ("MpiIrecv", "MpiIsendComplete"):  # a request completes, in the Wait* / Test* region
            if stack:
                message = ((int(event.msg_length), int(event.sender), int(event.msg_tag)) if kind == "MpiIrecv"
                           else None)
                stack[-1][7].append((int(event.request_id), message))
        elif kind == "MpiProbe":  # a matched probe (MPI_Mprobe, MPI_Improbe) found a message: its envelope
            envelope = (int(event.sender), int(event.tag))
            state["messages"][int(event.message_id)] = envelope
            if stack:
                stack[-1][3:5] = envelope
                stack[-1][6] = int(event.message_id)
        elif kind in ("MpiMrecv", "MpiImrecvRequest"):  # its message received (MPI_Mrecv) or posted (MPI_Imrecv)
            if stack:
                top = stack[-1]
                top[3:5] = state["messages"].get(int(event.message_id), (None, None))
                if kind == "MpiMrecv":
                    top[2], top[6] = int(event.msg_length), int(event.message_id)
                else:
                    top[6], top[8] = int(event.request_id), True
        elif kind == "MpiImrecv":  # an MPI_Imrecv's request completes: the message's bytes
            if stack:
                stack[-1][7].append((int(event.request_id), (int(event.msg_length), None, None)))
        else:
            self.skipped[f"OTF2 {kind} records (not intervals)"] += 1

    def _metric(self, label: str, state: dict, lane: int, event, t_ns: int) -> None:
        """A Metric record: each member's value (times its base ** exponent) a sample of its series; a count sampled
        at enters and leaves (a synchronous metric class recorded by its own location) also kept for the region
        counts. A metric instance's values belong to its scope: a location, or a location group (a rank); one
        scoped to a system-tree node or a group of locations is no one rank's, and is counted as skipped."""
        metric = event.metric
        how = self._metrics.get(metric._ref)
        if how is None:
            how = self._metrics[metric._ref] = self._how(metric)
        scope, members, synchronous = how
        if members is None:
            self.skipped["OTF2 Metric records of a metric instance scoped to a system-tree node or a group "
                         "(no one rank's; not kept)"] += 1
            return
        if scope is not None:
            state, label = self.state(scope[0]), scope[1]
        self.skipped["OTF2 Metric records, kept as counters"] += 1
        series_of, counts = state["series"], None
        for (ref, meaning), value in zip(members, event.values, strict=False):
            if meaning.scale != 1:
                value = value * meaning.scale
            series = series_of.get((label, ref))
            if series is None:
                series = series_of[(label, ref)] = (meaning, [], [])
            series[1].append(t_ns)
            series[2].append(value)
            if synchronous and meaning.counted:
                if counts is None:
                    counts = state["counts"].get(lane)
                    if counts is None:
                        counts = state["counts"][lane] = _RegionCounts()
                counts.sample(ref, meaning, event.time, value)

    def _how(self, metric) -> tuple:
        """How a metric's records are read: the (rank, series location name) of a metric instance's scope (None: the
        recording location's), its members' (reference, :class:`_Member`) (None: an instance of no one rank), and
        whether its samples are taken at enters and leaves (a metric class not ASYNCHRONOUS)."""
        scope = None
        if isinstance(metric, self._instance):
            where = metric.scope
            if isinstance(where, self._location):
                scope = (_rank_of(where), where.name or f"location {where._ref}")
            elif isinstance(where, self._group):
                scope = (_rank_of_group(where), where.name or f"location group {where._ref}")
            else:
                return None, None, False
            metric = metric.metric_class
        members = []
        for member in metric.members:
            meaning = self.meanings.get(member._ref)
            if meaning is None:
                meaning = self.meanings[member._ref] = _Member.of(member, metric)
            members.append((member._ref, meaning))
        return scope, members, scope is None and int(metric.occurrence.value) != _ASYNCHRONOUS


def _new_state(host: str = "") -> dict:
    """A rank's fold state: per lane (code) its stack of open regions and its region counts, the rows so far,
    its lanes by name, the messages of matched probes, its metric series by (location name, member reference),
    its region counts by (region name, member reference), its calls left by region name and, per lane, what the
    open Sendrecv received (bytes, source, tag)."""
    return {"stacks": {}, "rows": [], "host": host, "lanes": {}, "messages": {}, "series": {}, "counts": {},
            "regions": {}, "calls": Counter(), "received": {}}


#: OTF2's metric mode bits (the ``_otf2`` bindings' MetricValueProperty and MetricTiming): the value's property in
#: the low half-byte, its timing in the high one; and the asynchronous occurrence (not at enters and leaves).
_VALUE_MASK, _TIMING_MASK = 15, 240
_ACCUMULATED, _ABSOLUTE, _RELATIVE = 0, 1, 2
_START, _POINT, _LAST, _NEXT = 0, 16, 32, 48
_ASYNCHRONOUS = 2

#: What a member's values mean, by its mode's value property and timing (OTF2's OTF2_MetricTiming_enum: START
#: belongs to the interval since the measurement began, POINT to its instant only, LAST to the interval since the
#: series' previous sample, NEXT to the one until its next).
_MEANINGS = {
    (_ACCUMULATED, _START): "cumulative: the count since the location's counters started (Score-P starts them at "
                            "its initialisation, before main's Enter); a stretch's count is the value at its end "
                            "minus the value at its start",
    (_ACCUMULATED, _LAST): "per interval: the count since the series' previous sample",
    (_ACCUMULATED, _NEXT): "per interval: the count from this sample to the series' next",
    (_ACCUMULATED, _POINT): "an accumulated value valid at its instant only (no interval)",
    (_ABSOLUTE, _POINT): "an absolute value (a rate, a temperature, ...) at its instant",
    (_ABSOLUTE, _LAST): "an absolute value (a rate, a mean, ...) over the interval since the series' previous sample",
    (_ABSOLUTE, _NEXT): "an absolute value (a rate, a mean, ...) over the interval to the series' next sample",
    (_RELATIVE, _POINT): "a relative value at its instant",
    (_RELATIVE, _LAST): "a relative value over the interval since the series' previous sample",
    (_RELATIVE, _NEXT): "a relative value over the interval to the series' next sample",
}


def _enum_name(value) -> str:
    """The name of one of the bindings' enum values (``ACCUMULATED_START``), else its number."""
    return type(value)._names.get(int(value.value), str(int(value.value))) if hasattr(type(value), "_names") \
        else str(value)


class _Member:
    """What a metric member's values are: name, unit, description, type, mode, value type and scale (base **
    exponent), its class's occurrence, and whether it is a count whose stretches can be summed (:attr:`counted`:
    accumulated with START, LAST or NEXT timing)."""

    __slots__ = ("name", "unit", "description", "metric_type", "mode", "value_type", "scale", "occurrence",
                 "property", "timing", "counted")

    @classmethod
    def of(cls, member, metric_class) -> _Member:
        self = cls()
        self.name, self.unit, self.description = member.name, member.unit or "", member.description or ""
        self.metric_type, self.mode = _enum_name(member.metric_type), _enum_name(member.metric_mode)
        self.value_type, self.occurrence = _enum_name(member.value_type), _enum_name(metric_class.occurrence)
        mode = int(member.metric_mode.value)
        self.property, self.timing = mode & _VALUE_MASK, mode & _TIMING_MASK
        base = 10 if _enum_name(member.base) == "DECIMAL" else 2
        exponent = int(member.exponent)
        self.scale = base ** exponent if exponent >= 0 else float(base) ** exponent
        self.counted = self.property == _ACCUMULATED and self.timing in (_START, _LAST, _NEXT)
        return self

    def meaning(self) -> dict:
        """The member's entry of a rank's ``counter_series``, less its location and samples."""
        return {"metric": self.name, "unit": self.unit, "description": self.description,
                "metric_type": self.metric_type, "mode": self.mode, "occurrence": self.occurrence,
                "value_type": self.value_type, "scale": self.scale,
                "meaning": _MEANINGS.get((self.property, self.timing), f"mode {self.mode}")}


class _RegionCounts:
    """One location's counts sampled at its enters and leaves, and each region call's share of them.

    ``latest``: per member, the archive time (ticks) of its last sample and the count up to then (the value of an
    ACCUMULATED_START member; the running sum of an ACCUMULATED_LAST one, its sample included; of an
    ACCUMULATED_NEXT one, its sample not yet included). A region's Enter / Leave takes the counts sampled at its own
    timestamp (Score-P writes the Metric record just before it); a call whose Enter and Leave both have a member's
    count gets the difference (its inclusive count), which is added to its region's sums: ``[calls measured,
    inclusive count of the calls not inside a call of the same name (recursion counted once), exclusive count (the
    inclusive count less its children's), calls whose exclusive count is known (every child measured)]``."""

    __slots__ = ("latest", "running", "members")

    def __init__(self):
        self.latest: dict[int, tuple[int, object]] = {}
        self.running: dict[int, object] = {}
        self.members: set[int] = set()

    def sample(self, ref: int, meaning: _Member, ticks: int, value) -> None:
        self.members.add(ref)
        if meaning.timing == _START:
            self.latest[ref] = (ticks, value)
        elif meaning.timing == _LAST:
            self.running[ref] = self.running.get(ref, 0) + value
            self.latest[ref] = (ticks, self.running[ref])
        else:  # NEXT: this sample's count lies after its instant
            before = self.running.get(ref, 0)
            self.running[ref] = before + value
            self.latest[ref] = (ticks, before)

    def _at(self, ticks: int) -> dict:
        return {ref: count for ref, (when, count) in self.latest.items() if when == ticks}

    def enter(self, name: str, stack: list, ticks: int) -> list:
        """A call's counts at its Enter, its children's inclusive counts, the members a child did not measure, and
        whether it is the outermost call of its name on the stack."""
        return [self._at(ticks), {}, set(), not any(frame[0] == name for frame in stack)]

    def leave(self, frame: list, stack: list, ticks: int, regions: dict) -> None:
        entered = frame[9]
        measured = {}
        if entered is not None:
            at_enter, children, unmeasured, outermost = entered
            at_leave = self._at(ticks)
            for ref in at_enter.keys() & at_leave.keys():
                inclusive = measured[ref] = at_leave[ref] - at_enter[ref]
                sums = regions.get((frame[0], ref))
                if sums is None:
                    sums = regions[(frame[0], ref)] = [0, 0, 0, 0]
                sums[0] += 1
                if outermost:
                    sums[1] += inclusive
                if ref not in unmeasured:
                    sums[2] += inclusive - children.get(ref, 0)
                    sums[3] += 1
        parent = stack[-1][9] if stack else None
        if parent is not None:
            for ref in self.members:
                if ref in measured:
                    parent[1][ref] = parent[1].get(ref, 0) + measured[ref]
                else:
                    parent[2].add(ref)


def _series_names(series: dict) -> dict:
    """Each series' counter name, by its (location name, member reference): the member's name, with the location in
    brackets where the rank has the member's name from more than one (location, member)."""
    by_name: dict[str, list] = {}
    for key, (meaning, _, _) in series.items():
        by_name.setdefault(meaning.name, []).append(key)
    names = {}
    for name, keys in by_name.items():
        for label, ref in keys:
            alone = len(keys) == 1
            shared = sum(1 for other, _ in keys if other == label) > 1
            names[(label, ref)] = (name if alone else f"{name} [{label}]") + (f" (member {ref})" if shared else "")
    return names


def _series_meanings(state: dict, names: dict) -> dict:
    """The rank's ``counter_series`` entry: per counter name what its values are (:meth:`_Member.meaning`), the
    location that recorded them, and how many samples."""
    return {names[key]: {**meaning.meaning(), "location": key[0], "samples": len(times)}
            for key, (meaning, times, _) in state["series"].items()}


def _region_sums(state: dict, members: dict) -> list[dict]:
    """The rank's ``region_counters`` entry: per region name and metric (summed over the rank's locations and
    members of that name), its calls, the calls measured, the inclusive and exclusive counts (see
    :class:`_RegionCounts`) and the calls whose exclusive count is known."""
    sums: dict[tuple[str, str], list] = {}
    units: dict[str, str] = {}
    for (region, ref), (measured, inclusive, exclusive, known) in state["regions"].items():
        meaning = members[ref]
        units[meaning.name] = meaning.unit
        row = sums.setdefault((region, meaning.name), [0, 0, 0, 0])
        row[0] += measured
        row[1] += inclusive
        row[2] += exclusive
        row[3] += known
    return [{"region": region, "metric": metric, "unit": units[metric], "calls": state["calls"][region],
             "measured_calls": row[0], "inclusive": row[1], "exclusive": row[2], "exclusive_calls": row[3]}
            for (region, metric), row in sorted(sums.items())]


def _rank_of(location) -> int:
    """The rank of a location: the number ending its group's name ("MPI Rank 3"), else the group's id."""
    return _rank_of_group(location.group)


def _rank_of_group(group) -> int:
    """The rank of a location group: the number ending its name ("MPI Rank 3"), else its id."""
    m = _RANK.search(group.name or "")
    return int(m.group(1)) if m else int(group._ref)


def _read(path: Path, location_ref: int | None = None) -> tuple[_Fold, str | None, list]:
    """The archive's events (of one location where ``location_ref`` is given) folded; the reason the event data
    stopped early (damaged, or a location file missing), or None; and (ref, rank, name, events its definition
    declares) of every location."""
    otf2, damaged = _load()
    said: list[str] = []
    with contextlib.ExitStack() as opened:
        try:
            with _library_quiet(said):
                reader = opened.enter_context(otf2.reader.open(str(path)))
                clock = reader.definitions.clock_properties
                fold = _Fold(float(clock.timer_resolution), int(clock.global_offset))
                locations = list(reader.definitions.locations)
                events = reader.events if location_ref is None else \
                    reader.events([loc for loc in locations if loc._ref == location_ref])
                stream = iter(events)
        except Exception as exc:  # the C library reports any damage as a generic error
            why = _reason(exc, said, "definitions")
            raise DdltraceError(f"{path}: not a readable OTF2 archive ({why})") from exc
        where = [(loc._ref, _rank_of(loc), loc.name or f"location {loc._ref}", int(loc.number_of_events or 0))
                 for loc in locations]
        declared = sum(count for ref, _, _, count in where if location_ref is None or ref == location_ref)
        opened.enter_context(_library_quiet(said))
        while True:
            try:
                location, event = next(stream)
            except StopIteration:
                return fold, None, where
            except damaged as exc:  # damaged event data: what came before it is kept
                return fold, _reason(exc, said), where
            if declared and fold.events > _RUNAWAY * declared + 10_000:  # the library looping on damaged data:
                return (_Fold(fold.resolution, fold.offset),  # which of its events are real is not known
                        f"the library read more than {_RUNAWAY} times the {declared} events the definitions "
                        "declare: it loops on the damaged data", where)
            fold.add(location, event)


#: Events read beyond this many times those the definitions declare: the C library is looping on damaged data.
_RUNAWAY = 10


def _read_each_location(path: Path, where: list, whole: _Fold, damaged: list[tuple[int, str, int]]) -> _Fold:
    """Every location read on its own into ``whole`` (an empty fold; the global reader stops every location at
    the first damage in any): a damaged location keeps the events before its damage and is added to ``damaged``
    as (rank, what is wrong in words, the events it kept)."""
    for ref, rank, name, _ in where:
        try:
            fold, why, _ = _read(path, ref)
        except DdltraceError as exc:
            fold, why = _Fold(whole.resolution, whole.offset), str(exc)
        if why is not None:
            damaged.append((rank, f"{path}: rank {rank} ({name}): OTF2 events unreadable after its event "
                                  f"{fold.events} ({why})", fold.events))
            fold.skipped["OTF2 locations with damaged event data"] += 1
        whole.rank_events.update(fold.rank_events)
        whole.location_events.update(fold.location_events)
        whole.skipped.update(fold.skipped)
        whole.meanings.update(fold.meanings)
        for r, state in fold.per_rank.items():
            mine = whole.per_rank.setdefault(r, _new_state(state["host"]))
            codes = [mine["lanes"].setdefault(lane, len(mine["lanes"])) for lane in state["lanes"]]
            mine["rows"] += [(codes[row[0]], *row[1:]) for row in state["rows"]]
            mine["stacks"].update({codes[lane]: stack for lane, stack in state["stacks"].items()})
            for key, (meaning, times, values) in state["series"].items():
                _, had_times, had_values = mine["series"].setdefault(key, (meaning, [], []))
                had_times += times
                had_values += values
            mine["calls"].update(state["calls"])
            for key, sums in state["regions"].items():
                had = mine["regions"].setdefault(key, [0, 0, 0, 0])
                had[:] = [a + b for a, b in zip(had, sums, strict=True)]
    return whole


def _cut_short(path: Path, where: list, fold: _Fold, named: str) -> list[str]:
    """One problem per location whose events end, without an error from the library, before the number its
    definition declares (the writer counts them as it closes the archive): its event file was cut at a chunk's end
    or replaced. ``named``: the problems already said (a location named there is not named again)."""
    short = []
    for ref, rank, name, declared in where:
        got = fold.location_events[ref]
        if got < declared and f"rank {rank} ({name})" not in named:
            fold.skipped["OTF2 locations with damaged event data"] += 1
            short.append(f"{path}: rank {rank} ({name}): OTF2 event data ends after {got} of the {declared} events "
                         "its definition declares (its event file was cut short); " +
                         ("the events before it are kept" if got else "none kept"))
    return short


def _not_an_anchor(path: Path) -> str | None:
    """Why the library cannot open ``path`` as an archive's anchor when it is not named ``*.otf2`` (None when it
    is): the library refuses any other name."""
    if path.suffix == ".otf2":
        return None
    with open(path, "rb") as fh:
        anchor = fh.read(6)[2:] == b"OTF2"
    return (f"{path}: an OTF2 anchor file, but the OTF2 library opens an archive only by an anchor named *.otf2: "
            f"rename it {path.stem}.otf2" if anchor else
            f"{path}: not an OTF2 anchor file (an archive is read from its *.otf2 anchor)")


def read(path: Path, ctx: ImportContext):
    if (wrong := _not_an_anchor(path)) is not None:
        raise DdltraceError(wrong)
    fold, why, where = _read(path)
    problems: list[str] = []
    if why is not None:  # each location on its own; a rank keeps what the global reader got where that is more
        damaged: list[tuple[int, str, int]] = []
        each = _read_each_location(path, where, _Fold(fold.resolution, fold.offset), damaged)
        richer = {}
        for rank, count in fold.rank_events.items():
            if count > each.rank_events[rank]:
                each.per_rank[rank], each.rank_events[rank] = fold.per_rank[rank], count
                richer[rank] = count
        for rank, said, kept in damaged:
            problems.append(f"{said}; " + (
                f"the {richer[rank]} events of the rank read together with the other ranks before the damage are "
                "kept (more than its locations gave on their own)" if rank in richer else
                "the events before it are kept" if kept else "none kept"))
        problems += [f"{path}: rank {rank}: the {count} events read together with the other ranks before the "
                     "damage are kept (more than its locations gave on their own)"
                     for rank, count in richer.items() if rank not in {r for r, _, _ in damaged}]
        each.events = sum(each.rank_events.values())
        fold = each
        if not fold.events:
            raise DdltraceError(f"{path}: not a readable OTF2 archive ({why})")
    problems += _cut_short(path, where, fold, "\n".join(problems))
    if ctx.report is not None:
        ctx.report.problems.extend(problems)
    per_rank, events = fold.per_rank, fold.events
    if ctx.report is not None:
        ctx.report.skipped.update(fold.skipped)
    if ctx.report is not None:
        ctx.report.events += events
    for rank in sorted(per_rank):
        state = per_rank[rank]
        rows = _complete(state["rows"])
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
                   "tag": optional_integers([r[6] for r in rows], pa.int32()),
                   "request": optional_integers([r[7] for r in rows], pa.int64())})
        if ctx.report is not None:
            ctx.report.intervals += len(timeline)
        info = {"format": "otf2", "file": str(path), "host": state["host"],
                "time_base": "ns since the archive's global offset"}
        counters = None
        if state["series"]:
            names = _series_names(state["series"])
            order = sorted(state["series"], key=lambda key: names[key])
            sample_names = [names[key] for key in order for _ in state["series"][key][1]]
            times = np.array([t for key in order for t in state["series"][key][1]], dtype=np.int64)
            values = np.array([float(v) for key in order for v in state["series"][key][2]], dtype=np.float64)
            counters = counters_table(np.full(len(times), rank, dtype=np.int32), sample_names, times, values)
            info["counter_series"] = _series_meanings(state, names)
            if state["regions"]:
                info["region_counters"] = _region_sums(state, fold.meanings)
        yield RankPart(rank=rank, timeline=timeline, counters=counters, clock="shared", info=info)


register(Importer("otf2", "OTF2 archive (anchor file .otf2; needs the otf2 package)", read=read, sniff=sniff,
                  binary=True))
