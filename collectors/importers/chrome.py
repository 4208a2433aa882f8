"""Streaming reader of Chrome Trace Event Format JSON (the dialect every framework here writes).

The file is decompressed and decoded piece by piece: the ``traceEvents`` array (or the bare array) is cut
at event boundaries, each piece decoded by msgspec into small structs (``args`` kept undecoded), and the
events folded into compact columns, times as exact integer ns (:mod:`.exact_time`). Memory stays at one piece
plus ~30 bytes per retained interval, whatever the input: whitespace is dropped as it comes, an event still open
after ``EVENT_LIMIT`` bytes is followed by a :class:`~.skim.Skimmer` that keeps a compact copy (strings cut), names
are cut at ``NAME_CUT`` characters, and a file with no events in its first ``LOOKAHEAD`` bytes is refused early.

Damage is salvaged, counted and reported, never fatal while something valid remains: truncated JSON (the
complete events before the cut are kept), arrays never closed (old Horovod), wrong types (the event is
skipped with its reason), unknown phases, negative or missing durations, ends without a begin.
When nothing valid can be read the error names the byte offset where decoding failed.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Any, ClassVar, Union

import msgspec
import numpy as np

from ddltrace.collectors.importers import exact_time
from ddltrace.collectors.importers.exact_time import MAX_NS, MISSING, NOT_A_NUMBER, OK, OUT_OF_RANGE, us_to_ns
from ddltrace.collectors.importers.skim import Skimmer
from ddltrace.collectors.importers.source import ByteSource
from ddltrace.errors import DdltraceError

#: Decoded bytes gathered before a piece is cut and decoded (bytes).
PIECE_SIZE = 4 << 20
#: The same for a reading shared by several processes (:mod:`.chrome_split`): a piece is what a reader claims, and
#: smaller pieces let the readers end closer together (df_index_resolver's 54 MB: 1 MiB pieces end the reading
#: 0.03 s sooner than 4 MiB ones).
SHARED_PIECE_SIZE = 1 << 20
#: The most text held for one event: an event still open after this many bytes is followed by a
#: :class:`~ddltrace.collectors.importers.skim.Skimmer` (whitespace dropped, strings cut to ``STRING_KEEP`` bytes),
#: and skipped if even that copy is larger.
EVENT_LIMIT = 16 << 20
#: How far the reader looks for the events array and its first event (bytes of text) before refusing the file.
LOOKAHEAD = 16 << 20
#: Names (cat, name, string pid/tid, process and thread names) longer than this (characters) are cut to it and
#: marked with ``NAME_MARK``.
NAME_CUT = 16384
NAME_MARK = "…"
#: Bytes of each string an oversized event's copy keeps: more than ``NAME_CUT`` characters of any UTF-8 or
#: ``\uXXXX`` text, so a name cut there is still cut (and marked) by the name rule.
STRING_KEEP = 6 * NAME_CUT + 6
_BOM = b"\xef\xbb\xbf"
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_SPACE_AND_COMMAS = re.compile(rb"[\s,]*")
_MALFORMED_AT = re.compile(r"\(byte (\d+)\)")
#: The reader's count of a file whose events array never closes after a whole event (old Horovod timelines).
NEVER_CLOSED = "events array never closed (tolerated)"
_MAX_LISTED = 10  # damaged pieces described one by one; the rest are counted
_KNOWN_PHASES = set("XBEbeniIsftCMNODPRcpv(),{}")  # every phase the format defines
_LANE_AND_KEY = attrgetter("pid", "tid", "cat", "name")
_TIMED = frozenset("BEbeC")  # phases whose ts the builder reads one event at a time
_OUT_OF_RANGE = "times out of range (not finite, or beyond 2**53 µs)"
#: (cat, name, args) of an event to the (cat, name) it is filed under.
Relabel = Callable[[str, str, dict], tuple[str, str]]
#: Changes ``X`` events in place (their cat, name, pid, tid) before they are filed, a decoded piece's at a time;
#: it may read an event's ``args`` (kept undecoded until then, e.g. with :func:`decode_args`).
Amend = Callable[[list], None]


class Event(msgspec.Struct, gc=False):
    """One trace event, the fields ddltrace uses; ``ts``/``dur`` in microseconds, as written: an int, or the
    text of a non-integer number (:data:`~ddltrace.collectors.importers.exact_time.float_text`), read exactly
    by :func:`~ddltrace.collectors.importers.exact_time.us_to_ns` (anything else is counted as not a number)."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: Any = None
    dur: Any = None
    id: int | str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


class _Tagged(msgspec.Struct, tag_field="ph", gc=False):
    """Base of the per-phase structs of the fast path: msgspec picks the struct by ``ph`` and decodes only
    the fields that phase needs; the rest of the event (most ``args``, every field of an instant) is
    skipped without building anything."""


#: The fields each phase's fast-path struct decodes, with their types and defaults (as in :class:`Event`).
_FIELD_TYPES = {name: (Event.__annotations__[name], default)
                for name, default in zip(Event.__struct_fields__, Event.__struct_defaults__, strict=True)}
_PHASE_FIELDS = {
    "X": "name cat pid tid ts dur", "B": "name cat pid tid ts args", "E": "name cat pid tid ts args",
    "b": "name cat pid tid ts id", "e": "name cat pid tid ts id", "C": "name pid ts args", "M": "name pid tid args",
    "i": "name pid ts args",  # (PyTorch's allocator events, MEMORY_EVENT; other instants are counted)
    **{ph: "" for ph in "sftInNODPR"},  # counted, nothing more (flow arrows, instants, objects, samples, marks)
}
#: PyTorch's profiler (``profile_memory=True``) writes an instant event of this name for each allocation and free of
#: its allocators, with ``args`` ``Device Type`` (c10::DeviceType: 0 CPU, 1 CUDA, ...), ``Device Id``, ``Bytes``
#: (negative for a free) and, since PyTorch 1.10 or so, ``Total Allocated`` and ``Total Reserved`` (bytes, after the
#: event). The reader keeps them as the rank's counters ``DEV_alloc_bytes`` (each event's Bytes),
#: ``DEV_allocated_bytes`` and ``DEV_reserved_bytes`` (the totals, where written), DEV from :func:`memory_device`.
MEMORY_EVENT = "[memory]"
#: c10::DeviceType's values, as the counters name the device (``gpuN`` as the NVML sampler names a GPU: HIP builds of
#: PyTorch write CUDA's value); another type is named by its number.
_MEMORY_DEVICES = {0: "cpu", 1: "gpu", 6: "gpu", 12: "xpu", 13: "mps", 19: "mtia"}


def _phase(tag: str, names: str, args_type: type | None = None) -> type:
    fields = names.split()
    types = {f: _FIELD_TYPES[f][0] for f in fields}
    defaults = {f: _FIELD_TYPES[f][1] for f in fields}
    if args_type is not None and "args" in fields:
        types["args"], defaults["args"] = args_type | None, None
    annotations = {"ph": ClassVar[str], **types}
    namespace = {"__annotations__": annotations, "ph": tag, **defaults}
    return type(f"_Phase_{ord(tag)}", (_Tagged,), namespace, tag=tag)


@functools.cache
def _fast_decoder(x_args: type | None) -> msgspec.json.Decoder:
    """The fast path's decoder: the phases it knows (an event of any other phase sends its piece to the
    field-by-field path), each decoding the fields of :data:`_PHASE_FIELDS`; ``X`` events' ``args`` also, into
    ``x_args`` (``msgspec.Raw``: kept undecoded; a msgspec Struct: only its fields built, the rest of the object
    skipped in the same pass as the event), none for None."""
    def fields(ph: str, names: str) -> type:
        if ph == "X" and x_args is not None:
            return _phase(ph, names + " args", None if x_args is msgspec.Raw else x_args)
        return _phase(ph, names)

    return msgspec.json.Decoder(list[Union[tuple(fields(ph, names) for ph, names in _PHASE_FIELDS.items())]],  # noqa: UP007
                                float_hook=exact_time.float_text)


#: Why an event the file ends inside is skipped (counted read too: docs/IMPORTERS.md).
TRUNCATED = "truncated event at the end of the file"
#: The reader's count of the events decoded from a corrupt gzip stream after its first malformed JSON (dropped).
DROPPED_AFTER_DAMAGE = "decoded from the corrupt gzip stream after its first malformed JSON (dropped: may be wrong)"
#: What a decoder raises on text that is not (UTF-8) JSON, or nested deeper than msgspec follows.
_MALFORMED = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
_DECODE_EVENTS = msgspec.json.Decoder(list[Event], float_hook=exact_time.float_text)
_DECODE_ANY = msgspec.json.Decoder()
_DECODE_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])


class _Loose(msgspec.Struct, gc=False):
    """An event decoded without types (the lenient path); floats as their text, ``args`` undecoded."""

    ph: Any = ""
    name: Any = ""
    cat: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: msgspec.Raw = msgspec.Raw(b"")


_DECODE_LOOSE = msgspec.json.Decoder(_Loose, float_hook=exact_time.float_text)


class _MemoryArgs(msgspec.Struct, gc=False):
    """The fields of an allocator event's ``args`` (:data:`MEMORY_EVENT`) the reader keeps."""

    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    nbytes: Any = msgspec.field(default=None, name="Bytes")
    allocated: Any = msgspec.field(default=None, name="Total Allocated")
    reserved: Any = msgspec.field(default=None, name="Total Reserved")


_MEMORY_ARGS = msgspec.json.Decoder(list[_MemoryArgs | None], float_hook=exact_time.float_text)


def _memory_args(args: dict) -> _MemoryArgs:
    """The fields of one event's decoded ``args`` (the reader's fallback where the batch does not decode)."""
    return _MemoryArgs(*(args.get(k) for k in ("Device Type", "Device Id", "Bytes", "Total Allocated",
                                                 "Total Reserved")))


def _numbers(values: list) -> np.ndarray:
    """JSON numbers of the events' args as floats (integers, or the text of non-integer numbers), NaN for anything
    else (missing, a string, a bool)."""
    try:
        if not any(isinstance(v, bool) for v in values):
            return np.array(values, dtype=np.float64)  # (the common case: every one an integer)
    except (TypeError, ValueError):
        pass
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if isinstance(v, int | float | bytes) and not isinstance(v, bool):
            try:
                out[i] = float(v)
            except ValueError:
                pass
    return out


_NO_ROWS = np.empty(0, dtype=np.int64)


def _objects(values) -> np.ndarray:
    """A 1-D object array of ``values`` (a list or tuple), whatever they are (a tuple among them stays one
    element)."""
    return np.fromiter(values, dtype=object, count=len(values))


def _codes(items: list) -> tuple[np.ndarray, list]:
    """Each of ``items`` (hashable) as the index of its first appearance among the distinct ones: (codes, the
    distinct items in that order)."""
    index: dict = {}
    codes = np.fromiter((index.setdefault(item, len(index)) for item in items), dtype=np.int64, count=len(items))
    return codes, list(index)


def _changed(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Whether each value differs from the one before it of the same code (the first of each code: True)."""
    order = np.argsort(codes, kind="stable")
    c, v = codes[order], values[order]
    new = np.ones(len(c), dtype=bool)
    new[1:] = (c[1:] != c[:-1]) | (v[1:] != v[:-1])
    out = np.empty(len(c), dtype=bool)
    out[order] = new
    return out


def memory_device(device_type, device_id) -> str:
    """The device of an allocator event (:data:`MEMORY_EVENT`) as its counters name it: ``cpu``, ``gpu0``, ``xpu1``,
    ``device7.0`` for a type without a name here; ``device?`` where the event does not say."""
    if not isinstance(device_type, int) or isinstance(device_type, bool):
        return "device?"
    name = _MEMORY_DEVICES.get(device_type)
    index = device_id if isinstance(device_id, int) and not isinstance(device_id, bool) and device_id >= 0 else 0
    if name == "cpu":
        return name
    return f"{name}{index}" if name else f"device{device_type}.{index}"


def decode_args(event: Event) -> dict:
    """The event's ``args`` as a dict (empty when absent or not an object)."""
    raw = bytes(event.args)
    if not raw:
        return {}
    try:
        value = _DECODE_ANY.decode(raw)
    except _MALFORMED:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass
class ChromeTrace:
    """What one Chrome trace file holds, as columns.

    Intervals (``X`` and paired ``B``/``E``, ``b``/``e``): ``lane_key`` (index into ``lanes``, the
    (pid, tid) pairs), ``key`` (index into ``keys``, the (cat, name) pairs), ``ts_ns`` and ``dur_ns`` (int64
    nanoseconds, exactly the decimal text's microseconds; ``ts_us``/``dur_us`` the same as float64 µs).
    Counters: ``counters``, one (pid, name, t_ns, value) tuple per sample of a ``C`` event, and
    ``counter_columns``, blocks of samples as columns (pid and name object arrays, t_ns int64, value float64: the
    allocator events, tens of thousands in a trace); :meth:`counter_arrays` gives both as columns. Flow arrows:
    their ``ts`` in float64 µs, as ``ts_us``.
    """

    path: str
    header: dict = field(default_factory=dict)
    lanes: list[tuple[Any, Any]] = field(default_factory=list)
    keys: list[tuple[str, str]] = field(default_factory=list)
    lane_key: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    key: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    ts_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    dur_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    end_args: dict[int, dict] = field(default_factory=dict)
    process_names: dict[Any, str] = field(default_factory=dict)
    process_labels: dict[Any, str] = field(default_factory=dict)
    process_args: dict[Any, dict] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    counters: list[tuple[Any, str, int, float]] = field(default_factory=list)
    counter_columns: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    allocator_events: Counter = field(default_factory=Counter)  # PyTorch's allocator events kept, per pid
    read: int = 0
    skipped: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    #: Where the text ended with the events array still open after a whole event (decoded bytes; None: closed, or
    #: cut inside an event, a problem of its own): tolerated for old Horovod, a cut file for a dialect that closes it.
    open_end: int | None = None

    def counter_arrays(self, pid: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every counter sample as columns (pid and name object arrays, t_ns int64, value float64): the ``C``
        events' in file order, then each block of ``counter_columns``; only those of process ``pid`` where given.
        Read once the trace is read (:meth:`_Builder.finish`): the columns and each process's rows are made at the
        first call, so that a file of many processes is split in one pass."""
        columns, rows = self._counters_by_pid
        return columns if pid is None else tuple(column[rows.get(pid, _NO_ROWS)] for column in columns)

    @functools.cached_property
    def _counters_by_pid(self) -> tuple[tuple[np.ndarray, ...], dict[Any, np.ndarray]]:
        blocks = list(self.counter_columns)
        if self.counters:
            pids, names, times, values = zip(*self.counters, strict=True)
            blocks.insert(0, (_objects(pids), _objects(names),
                              np.array(times, dtype=np.int64), np.array(values, dtype=np.float64)))
        if not blocks:
            return (np.empty(0, dtype=object), np.empty(0, dtype=object), np.empty(0, dtype=np.int64),
                    np.empty(0, dtype=np.float64)), {}
        columns = tuple(np.concatenate(column) for column in zip(*blocks, strict=True))
        codes, pids = _codes(columns[0].tolist())
        order = np.argsort(codes, kind="stable")
        starts = np.searchsorted(codes[order], np.arange(len(pids) + 1))
        return columns, {pid: order[starts[i]:starts[i + 1]] for i, pid in enumerate(pids)}

    @property
    def ts_us(self) -> np.ndarray:
        """Start times in µs (float64; ``ts_ns`` is exact)."""
        return self.ts_ns / 1000.0

    @property
    def dur_us(self) -> np.ndarray:
        """Durations in µs (float64; ``dur_ns`` is exact)."""
        return self.dur_ns / 1000.0


class _Builder:
    """Folds decoded events into columns; B/E and b/e are paired at the end."""

    def __init__(self, path: str, relabel: Relabel | None = None, amend: Amend | None = None,
                 x_args: type | None = None):
        self.trace = ChromeTrace(path=path)
        self.relabel = relabel
        self.amend = amend
        self.decoder = _fast_decoder(x_args if x_args is not None else
                                     msgspec.Raw if relabel is not None or amend is not None else None)
        self.lane_index: dict[tuple, int] = {}
        self.key_index: dict[tuple, int] = {}
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.begin_end: list[tuple] = []  # (lane, ts, seq, is_begin, key or None, args or None)
        self.async_be: list[tuple] = []
        self.seq = 0
        self.n_rows = 0

    def add(self, events: list[Event]) -> None:
        t = self.trace
        t.read += len(events)
        xs = [e for e in events if e.ph == "X"]
        if len(xs) != len(events):
            self._others([e for e in events if e.ph != "X"])
        if not xs:
            return
        ts, ts_status = us_to_ns([e.ts for e in xs])
        dur, dur_status = us_to_ns([e.dur for e in xs])
        negative = dur < 0
        ok = (ts_status == OK) & (dur_status == OK) & ~negative
        if not ok.all():
            worst = np.maximum(ts_status, dur_status)  # missing, then not a number, then out of range
            for reason, count in (("X event without ts or dur", (worst == MISSING).sum()),
                                  ("invalid event: ts or dur is not a number", (worst == NOT_A_NUMBER).sum()),
                                  (_OUT_OF_RANGE, (worst == OUT_OF_RANGE).sum()),
                                  ("negative duration", ((worst == OK) & negative).sum())):
                if count:
                    t.skipped[reason] += int(count)
            xs = [e for e, k in zip(xs, ok, strict=True) if k]
            ts, dur = ts[ok], dur[ok]
        if self.relabel is not None:
            for e in xs:
                if len(e.args) > 2:
                    e.cat, e.name = self.relabel(e.cat, e.name, decode_args(e))
        if self.amend is not None:
            self.amend(xs)
        lane, key = self._lane_key_codes(xs)
        self.parts.append((lane, key, ts, dur))
        self.n_rows += len(xs)

    def _lane_key_codes(self, events: list) -> tuple[np.ndarray, np.ndarray]:
        """The lane and key codes of ``events`` (new lanes and keys appended to the indexes)."""
        distinct, codes = _distinct(events, _LANE_AND_KEY)
        lanes, keys = self.lane_index, self.key_index
        lane = np.array([lanes.setdefault(q[:2], len(lanes)) for q in distinct], dtype=np.int32)
        key = np.array([keys.setdefault(q[2:], len(keys)) for q in distinct], dtype=np.int32)
        return lane[codes], key[codes]

    def _others(self, events: list[Event]) -> None:
        t = self.trace
        phases = Counter([e.ph for e in events])
        for ph in ("s", "t", "f"):
            if phases[ph]:
                t.skipped["flow arrows (s/t/f)"] += phases.pop(ph)
        memory = [e for e in events if e.ph == "i" and e.name == MEMORY_EVENT]
        if memory:
            phases["i"] -= len(memory)
            self._memory(memory)
        for ph in ("i", "I", "n"):
            instants = phases.pop(ph, 0)
            if instants:
                t.skipped["instant events (no duration)"] += instants
        if not phases:
            return
        rest = [e for e in events if e.ph in phases]
        times, statuses = us_to_ns([e.ts if e.ph in _TIMED else 0 for e in rest])
        for e, ts, status in zip(rest, times.tolist(), statuses.tolist(), strict=True):
            ph = e.ph
            if ph == "B" or ph == "E":
                if self._no_time(ph, status):
                    continue
                lane = self.lane_index.setdefault((e.pid, e.tid), len(self.lane_index))
                self.seq += 1
                if ph == "B":
                    key = self.key_index.setdefault((e.cat, e.name), len(self.key_index))
                    self.begin_end.append((lane, ts, self.seq, True, key, e.name, None))
                else:
                    args = decode_args(e) if len(e.args) > 2 else None
                    self.begin_end.append((lane, ts, self.seq, False, None, e.name, args))
            elif ph == "b" or ph == "e":
                if self._no_time(ph, status):
                    continue
                self.seq += 1
                self.async_be.append((e.pid, e.tid, e.cat, e.id, e.name, ts, self.seq, ph == "b"))
            elif ph == "M":
                args = decode_args(e)
                if e.name == "process_name":
                    t.process_names[e.pid] = str(args.get("name", ""))
                    extra = {k: v for k, v in args.items() if k != "name"}
                    if extra:
                        t.process_args.setdefault(e.pid, {}).update(extra)
                elif e.name == "process_labels":
                    t.process_labels[e.pid] = str(args.get("labels", ""))
                elif e.name == "thread_name":
                    t.thread_names[(e.pid, e.tid)] = str(args.get("name", ""))
                t.skipped["metadata (M) events, used for names"] += 1
            elif ph == "C":
                if self._no_time(ph, status):
                    continue
                for series, value in decode_args(e).items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        t.counters.append((e.pid, f"{e.name}.{series}" if series != e.name else e.name,
                                           ts, float(value)))
                t.skipped["counter (C) events, kept as counters"] += 1
            elif not ph:
                t.skipped["events without a phase (ph), such as TF2's trailing {}"] += 1
            elif ph in _KNOWN_PHASES:
                t.skipped[f"phase '{ph}' events (not intervals)"] += 1
            else:
                t.skipped[f"unknown phase {ph!r}"] += 1

    def _memory(self, events: list[Event]) -> None:
        """PyTorch's allocator events (:data:`MEMORY_EVENT`) as counters: each one's bytes, and after each, where the
        trace writes them, the bytes its device's allocator holds allocated, and reserved where that changed (a
        reserve grows and shrinks rarely: one sample per change holds the same step function)."""
        t = self.trace
        times, statuses = us_to_ns([e.ts for e in events])
        timed = statuses == OK
        if not timed.all():
            for status in statuses[~timed].tolist():
                self._no_time("i", status)
            events = [e for e, ok in zip(events, timed.tolist(), strict=True) if ok]
            times = times[timed]
        try:  # all the events' args in one decoding, only their five fields built
            args = _MEMORY_ARGS.decode(b"[" + b",".join(bytes(e.args) or b"{}" for e in events) + b"]")
        except _MALFORMED:  # one is not an object: each on its own, what it holds
            args = [_memory_args(decode_args(e)) for e in events]
        args = [a or _MemoryArgs() for a in args]  # ("args": null)
        devices: dict[Any, str] = {}

        def device(a: _MemoryArgs) -> str:  # (each distinct type and id named once; 1, 1.0 and True apart)
            key = (type(a.device_type), a.device_type, type(a.device_id), a.device_id)
            try:
                return devices[key]
            except KeyError:
                found = devices[key] = memory_device(a.device_type, a.device_id)
                return found
            except TypeError:  # (a list or an object for a type or an id: unhashable)
                return memory_device(a.device_type, a.device_id)

        where = [(e.pid, device(a)) for e, a in zip(events, args, strict=True)]
        codes, places = _codes(where)
        pids = _objects([pid for pid, _ in places])[codes]
        for counter, attribute in (("alloc_bytes", "nbytes"), ("allocated_bytes", "allocated"),
                                   ("reserved_bytes", "reserved")):
            value = _numbers([getattr(a, attribute) for a in args])
            keep = ~np.isnan(value)
            if counter == "reserved_bytes":  # only where it changed, per rank and device
                keep[keep] = _changed(codes[keep], value[keep])
            if keep.any():
                named = np.array([f"{device_name}_{counter}" for _, device_name in places], dtype=object)
                t.counter_columns.append((pids[keep], named[codes[keep]], times[keep], value[keep]))
        t.allocator_events.update(e.pid for e in events)
        t.skipped["[memory] events (PyTorch's allocator), kept as counters"] += len(events)

    def _no_time(self, ph: str, status: int) -> bool:
        """Whether an event's ``ts`` (its :func:`us_to_ns` status) is missing, not a number or out of range
        (counted, the event is left out)."""
        if status == OK:
            return False
        self.trace.skipped[{MISSING: f"{ph} event without ts", NOT_A_NUMBER: "invalid event: ts is not a number",
                            OUT_OF_RANGE: _OUT_OF_RANGE}[status]] += 1
        return True

    def state(self) -> dict:
        """What this builder holds before :meth:`finish`, for :meth:`absorb` (picklable: it crosses processes)."""
        return {"lanes": list(self.lane_index), "keys": list(self.key_index), "parts": self.parts,
                "n_rows": self.n_rows, "begin_end": self.begin_end, "async_be": self.async_be, "seq": self.seq,
                "trace": self.trace, "amend": self.amend}

    def absorb(self, state: dict) -> None:
        """Add what another builder read from the text right after this one's (its :meth:`state`), as if this
        builder had read it: its lane and key codes mapped to this one's, its begin/end order after this one's,
        ``amend``'s records joined (``amend.absorb(other, rows_before)``), names and counters added in order."""
        lanes = np.array([self.lane_index.setdefault(q, len(self.lane_index)) for q in state["lanes"]], np.int32)
        keys = np.array([self.key_index.setdefault(q, len(self.key_index)) for q in state["keys"]], np.int32)
        self.parts.extend((lanes[lane], keys[key], ts, dur) for lane, key, ts, dur in state["parts"])
        if self.amend is not None:
            self.amend.absorb(state["amend"], self.n_rows)
        self.n_rows += state["n_rows"]
        seq = self.seq
        self.begin_end.extend((int(lanes[lane]), ts, n + seq, begins, None if key is None else int(keys[key]), name,
                               args) for lane, ts, n, begins, key, name, args in state["begin_end"])
        self.async_be.extend((*event[:6], event[6] + seq, event[7]) for event in state["async_be"])
        self.seq += state["seq"]
        t, other = self.trace, state["trace"]
        t.read += other.read
        t.skipped.update(other.skipped)
        t.problems.extend(other.problems)
        t.open_end = other.open_end if other.open_end is not None else t.open_end
        t.header.update(other.header)
        t.process_names.update(other.process_names)
        t.process_labels.update(other.process_labels)
        t.thread_names.update(other.thread_names)
        for pid, extra in other.process_args.items():
            t.process_args.setdefault(pid, {}).update(extra)
        t.counters.extend(other.counters)
        t.counter_columns.extend(other.counter_columns)
        t.allocator_events.update(other.allocator_events)

    def finish(self) -> ChromeTrace:
        t = self.trace
        parts = self.parts
        paired = self._pair_begin_end() + self._pair_async()
        if paired:
            lane = np.array([p[0] for p in paired], dtype=np.int32)
            key = np.array([p[1] for p in paired], dtype=np.int32)
            ts = np.array([p[2] for p in paired], dtype=np.int64)
            dur = np.array([p[3] for p in paired], dtype=np.int64)
            base = self.n_rows
            for i, p in enumerate(paired):
                if p[4]:
                    t.end_args[base + i] = p[4]
            parts.append((lane, key, ts, dur))
        if parts:
            t.lane_key = np.concatenate([p[0] for p in parts])
            t.key = np.concatenate([p[1] for p in parts])
            t.ts_ns = np.concatenate([p[2] for p in parts])
            t.dur_ns = np.concatenate([p[3] for p in parts])
        t.lanes = list(self.lane_index)
        t.keys = list(self.key_index)
        self._cut_names()
        return t

    def _cut_names(self) -> None:
        """Names longer than ``NAME_CUT`` characters cut to it (with ``NAME_MARK``), and said so."""
        t = self.trace
        cut = 0

        def short(value):
            nonlocal cut
            if isinstance(value, str) and len(value) > NAME_CUT:
                cut += 1
                return value[:NAME_CUT] + NAME_MARK
            return value

        if any(isinstance(v, str) and len(v) > NAME_CUT for lane in t.lanes for v in lane):
            t.lanes = [(short(pid), short(tid)) for pid, tid in t.lanes]
            t.process_names = {short(k): v for k, v in t.process_names.items()}
            t.process_labels = {short(k): v for k, v in t.process_labels.items()}
            t.process_args = {short(k): v for k, v in t.process_args.items()}
            t.thread_names = {(short(p), short(i)): v for (p, i), v in t.thread_names.items()}
            t.counters = [(short(pid), name, ts, value) for pid, name, ts, value in t.counters]
            t.counter_columns = [(_objects([short(p) for p in pid.tolist()]), name, ts, value)
                                 for pid, name, ts, value in t.counter_columns]
            t.allocator_events = Counter({short(pid): n for pid, n in t.allocator_events.items()})
        if any(len(c) > NAME_CUT or len(n) > NAME_CUT for c, n in t.keys):
            t.keys = [(short(c), short(n)) for c, n in t.keys]
        for names in (t.process_names, t.process_labels, t.thread_names):
            for k, v in names.items():
                if len(v) > NAME_CUT:
                    names[k] = short(v)
        if cut:
            t.problems.append(f"{t.path}: {cut} name(s) longer than {NAME_CUT} characters cut to their first "
                              f"{NAME_CUT}, marked with '{NAME_MARK}'")

    def _pair_begin_end(self) -> list[tuple]:
        """Pair B with E on each (pid, tid): in time order, an E closes the latest open B of its name
        (or the latest open B when the E has no name), so pairs written in completion order (CNTK) or out
        of order still pair; an E with no open B and a B never closed are counted, not invented."""
        out: list[tuple] = []
        t = self.trace
        events = sorted(self.begin_end, key=lambda r: (r[0], r[1], r[2]))
        stacks: dict[int, list] = {}
        for lane, ts, _seq, is_begin, key, name, args in events:
            stack = stacks.setdefault(lane, [])
            if is_begin:
                stack.append((key, name, ts))
                continue
            if not stack:
                t.skipped["E without a matching B"] += 1
                continue
            pos = len(stack) - 1
            if name:
                while pos >= 0 and stack[pos][1] != name:
                    pos -= 1
                if pos < 0:
                    t.skipped["E without a matching B"] += 1
                    continue
            bkey, _, bts = stack.pop(pos)
            if ts - bts >= MAX_NS:
                t.skipped[_OUT_OF_RANGE] += 1
                continue
            out.append((lane, bkey, bts, ts - bts, args))
        never_closed = sum(len(s) for s in stacks.values())
        if never_closed:
            t.skipped["B never closed by an E"] += never_closed
        return out

    def _pair_async(self) -> list[tuple]:
        out: list[tuple] = []
        t = self.trace
        open_: dict[tuple, list] = {}
        for pid, tid, cat, id_, name, ts, _seq, is_begin in sorted(self.async_be, key=lambda r: (r[5], r[6])):
            ident = (pid, cat, id_, name)
            if is_begin:
                open_.setdefault(ident, []).append((tid, ts))
                continue
            stack = open_.get(ident)
            if not stack:
                t.skipped["async e without a matching b"] += 1
                continue
            btid, bts = stack.pop()
            if ts - bts >= MAX_NS:
                t.skipped[_OUT_OF_RANGE] += 1
                continue
            lane = self.lane_index.setdefault((pid, btid), len(self.lane_index))
            key = self.key_index.setdefault((cat, name), len(self.key_index))
            out.append((lane, key, bts, ts - bts, None))
        never = sum(len(s) for s in open_.values())
        if never:
            t.skipped["async b never closed by an e"] += never
        return out


def _distinct(events: list, fields: attrgetter) -> tuple[list[tuple], np.ndarray]:
    """The distinct ``fields`` tuples of ``events`` and each event's index among them: one tuple and one dict
    probe per event, the indexes and tables touched once per distinct tuple."""
    seen: dict[tuple, int] = {}
    codes = np.fromiter([seen.setdefault(q, len(seen)) for q in map(fields, events)], dtype=np.int32,
                        count=len(events))
    return list(seen), codes


def _boundaries(buf: bytes, start: int, end: int):
    """The event boundaries (``}``, comma, ``{``) in ``buf[start:end]``, last first: (the ``}``'s index, match)."""
    pos = end
    while (brace := buf.rfind(b"}", start, pos)) >= 0:
        pos = brace
        m = _BOUNDARY.match(buf, brace)
        if m is not None:
            yield brace, m


def _lenient_event(raw: msgspec.Raw) -> Event | str:
    """One event decoded without a schema, checked field by field; a string says why it is rejected."""
    try:
        obj = _DECODE_LOOSE.decode(raw)
    except msgspec.ValidationError:
        return "not a JSON object"
    except UnicodeDecodeError:  # a string with bytes that are not UTF-8 (a damaged file)
        return "not UTF-8 text"
    ph = obj.ph
    if not isinstance(ph, str):
        return "missing or non-string ph"
    values: dict[str, Any] = {"ph": ph, "args": obj.args}
    for name in ("name", "cat"):
        v = getattr(obj, name)
        if not isinstance(v, str):
            if isinstance(v, dict | list):
                return f"{name} is a {type(v).__name__}"
            v = v.decode() if isinstance(v, bytes) else str(v)
        values[name] = v
    for name in ("pid", "tid"):
        v = getattr(obj, name)
        if isinstance(v, bytes) and float(v).is_integer():  # a float's text
            v = int(float(v))
        if isinstance(v, bool) or not isinstance(v, int | str):
            return f"{name} is not an integer or string"
        values[name] = v
    for name in ("ts", "dur"):
        v = getattr(obj, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | bytes)):
            return f"{name} is not a number"
        values[name] = v
    v = obj.id
    values["id"] = v if v is None or (isinstance(v, int | str) and not isinstance(v, bool)) else (
        v.decode() if isinstance(v, bytes) else str(v))
    return Event(**values)


def _too_deep(path: str, start: int, size: int) -> str:
    return (f"{path}: the event at byte {start} ({size} bytes) is nested deeper than the decoder follows "
            "(msgspec's recursion limit); it was skipped")


def _malformed_offset(exc: Exception) -> int | None:
    """msgspec's 'byte N' (one past the offending byte) from a decode error."""
    if isinstance(exc, UnicodeDecodeError):
        return exc.start + 1
    m = _MALFORMED_AT.search(str(exc))
    return int(m.group(1)) if m else None


class Unshared(Exception):
    """A reader sharing a file (``share``) met text only one reader can follow (no event boundary in a chunk, an
    event larger than a piece, damage): the file is read again by one process."""


class _Reader:
    def __init__(self, source: ByteSource, builder: _Builder, share: tuple[int, int] | None = None,
                 make: Callable[[], _Builder] | None = None, claim: Callable[[int], bool] | None = None):
        """``share`` = (k, n): this reader is the k-th of n reading the same file, cutting its text into the same
        pieces (at the last event boundary of a piece's text, without decoding) and decoding those ``claim`` (called
        with each piece's number) gives it, each into a builder of its own from ``make`` (without ``claim``: every
        n-th piece); their :meth:`_Builder.state` go to ``pieces`` as (piece number, state), and the 0-th reader
        also reads the text after the last piece (the array's end). :mod:`.chrome_split` joins them."""
        self.source = source
        self.builder = builder
        self.share, self.make = share, make
        self.claim = claim if claim is not None or share is None else (lambda piece: piece % share[1] == share[0])
        self.pieces: list[tuple[int, dict]] = []
        self.piece = 0  # pieces cut so far (shared reading)
        self.offset = 0  # decoded-byte offset of buf[0] in the file
        self.events_at = 0  # decoded-byte offset where the events array's content begins
        self.strings_cut = 0  # strings of oversized events cut by the skimmer
        self.trace = builder.trace
        #: Once malformed JSON showed where a corrupt gzip stream's text goes wrong (:meth:`_drop_rest`): the builder
        #: of what was read before it, the decoded byte and the decoder's error; what follows goes to a builder of its
        #: own, counted and dropped (:meth:`_account_damage`).
        self.dropped: tuple[_Builder, int, Exception] | None = None

    def _decode_piece(self, piece: bytes) -> bool:
        """Decode ``[piece]``; False when it is not well-formed JSON (the cut was wrong or data damaged)."""
        return self._try_piece(piece) is None

    def _try_piece(self, piece: bytes) -> Exception | None:
        """Decode ``[piece]`` into the builder; the decode error when it is not well-formed JSON."""
        events, error = self._events_of(piece)
        if events is not None:
            self.builder.add(events)
        return error

    def _events_of(self, piece: bytes, wrapped: bool = False) -> tuple[list[Event] | None, Exception | None]:
        """The events of ``[piece]`` (invalid ones counted and left out), or the decode error;
        ``wrapped``: ``piece`` already has its brackets."""
        # one copy (``piece`` may be a view into the read buffer)
        doc = piece if wrapped else b"".join((b"[", piece, b"]"))
        try:
            return self.builder.decoder.decode(doc), None
        except msgspec.ValidationError:
            pass
        except _MALFORMED as exc:
            return None, exc.with_traceback(None)  # no frame (holding the text) kept alive by a cycle
        try:
            return _DECODE_EVENTS.decode(doc), None
        except msgspec.ValidationError:
            pass
        except _MALFORMED as exc:
            return None, exc.with_traceback(None)  # no frame (holding the text) kept alive by a cycle
        try:
            raws = _DECODE_RAW_LIST.decode(doc)
        except _MALFORMED as exc:
            return None, exc.with_traceback(None)  # no frame (holding the text) kept alive by a cycle
        good = []
        for raw in raws:
            ev = _lenient_event(raw)
            if isinstance(ev, str):
                self.trace.skipped[f"invalid event: {ev}"] += 1
            else:
                good.append(ev)
        return good, None

    def _decode_pending(self, buf: bytes, pending: list[bytes]) -> int | None:
        """The fast path of :meth:`run`: decode ``buf`` and ``pending`` up to one of the last two event
        boundaries in the last chunk, copying the text once; returns where the next event starts in that
        chunk, None (nothing decoded) when neither boundary decodes (a damaged piece: :meth:`_cut` and
        :meth:`_salvage` take it)."""
        last = pending[-1]
        for brace, m in islice(_boundaries(last, 0, len(last)), 2):
            doc = b"".join([b"[", buf, *pending[:-1], memoryview(last)[:brace + 1], b"]"])
            events, error = self._events_of(doc, wrapped=True)
            if error is None:
                self.builder.add(events)
                self.offset += len(buf) + sum(len(chunk) for chunk in pending[:-1]) + m.end() - 1
                return m.end() - 1
        return None

    def _share_pending(self, buf: bytes, pending: list[bytes]) -> int | None:
        """:meth:`_decode_pending` of a shared reading: cut at the last event boundary of the last chunk; decode the
        piece into a builder of its own if it is this reader's; where the next event starts in that chunk (None:
        the chunk has no boundary)."""
        last = pending[-1]
        found = next(_boundaries(last, 0, len(last)), None)
        if found is None:
            return None
        brace, m = found
        if self.claim(self.piece):
            doc = b"".join([b"[", buf, *pending[:-1], memoryview(last)[:brace + 1], b"]"])
            self.pieces.append((self.piece, self._on_own_builder(self._events_of, doc, wrapped=True)))
        self.piece += 1
        self.offset += len(buf) + sum(len(chunk) for chunk in pending[:-1]) + m.end() - 1
        return m.end() - 1

    def _on_own_builder(self, read: Callable, *args, **kwargs) -> dict:
        """``read(*args)`` (:meth:`_events_of`, or :meth:`_finish`) into a new builder from ``make``: its state.
        :class:`Unshared` when the text does not decode or any problem is met."""
        root = self.builder, self.trace
        self.builder = self.make()
        self.trace = self.builder.trace
        try:
            result = read(*args, **kwargs)
            if isinstance(result, tuple):  # _events_of: (events, error)
                events, error = result
                if error is not None:
                    raise Unshared(f"piece {self.piece}: {error}")
                self.builder.add(events)
            if self.trace.problems or self.strings_cut:
                raise Unshared(self.trace.problems[0] if self.trace.problems else "strings cut")
            return self.builder.state()
        finally:
            self.builder, self.trace = root

    def _corrupt_gzip(self) -> bool:
        """Whether malformed JSON met now is to end what is kept: the first met, by one reader, in a gzip stream
        that is corrupt (data that does not inflate, a wrong CRC or length; not one that only ends early: found by
        inflating the file once more, only here). What a corrupted byte inflates to is garbage that can still
        decode as events: ``aten::add_`` at a time no event of the original has."""
        return self.dropped is None and self.share is None and self.source.gzip_damage() is not None

    def _drop_rest(self, where: int, error: Exception) -> None:
        """From here on (malformed JSON at decoded byte ``where``) decode into a builder that is dropped at the end,
        counted (:meth:`_account_damage`)."""
        rest = _Builder(self.trace.path)
        rest.decoder = self.builder.decoder  # (the same structs: counted alike)
        self.dropped = (self.builder, where, error)
        self.builder, self.trace = rest, rest.trace

    def _kept_trace(self) -> ChromeTrace:
        """The trace whose events are kept (not the one after a corrupt gzip stream's damage)."""
        return self.trace if self.dropped is None else self.dropped[0].trace

    def _account_damage(self) -> None:
        """Say what a corrupt gzip stream cost, in its one line (the source's, replaced): the events decoded after
        its first malformed JSON dropped (:meth:`_drop_rest`), or, none met, that the last ones may be wrong."""
        damage = self.source.damage
        if self.dropped is None and damage is None:
            return
        t = self._kept_trace()
        path = t.path
        if self.dropped is None:
            at, error = damage
            line = (f"{path}: corrupt gzip data at compressed byte {at} ({error}); kept the {t.read} events decoded "
                    "before it (no malformed JSON among them), but those from the stream's last part may be wrong: "
                    "a damaged byte can inflate to well-formed events that are not the file's, up to where the "
                    "inflater notices")
        else:
            rest = self.builder.finish()
            root, where, json_error = self.dropped
            self.builder, self.trace, self.dropped = root, t, None
            at, error = damage if damage is not None else self.source.gzip_damage()
            undecodable = sum(n for reason, n in rest.skipped.items() if reason.startswith(("undecodable JSON",
                                                                                            "event nested")))
            if rest.read:
                t.skipped[DROPPED_AFTER_DAMAGE] += rest.read
            why = _MALFORMED_AT.sub("", str(json_error)).removeprefix("JSON is malformed: ").strip()
            skipped_too = f"{undecodable} undecodable pieces skipped" if undecodable else ""
            after = (f"dropped the {rest.read} events decoded after it ({len(rest.ts_ns)} intervals"
                     + (f"; {skipped_too} too" if skipped_too else "") + ")" if rest.read else
                     "no event decoded after it" + (f" ({skipped_too})" if skipped_too else ""))
            line = (f"{path}: corrupt gzip data at compressed byte {at} ({error}); its text is malformed JSON from "
                    f"decoded byte {where} ({why}): kept the {t.read} events before that, {after}, as a damaged gzip "
                    "stream inflates to text that can decode to events the file does not hold")
        if self.source.damage_line in t.problems:
            t.problems[t.problems.index(self.source.damage_line)] = line
        else:
            t.problems.append(line)

    def _cut(self, buf: bytes, window: int) -> int | None:
        """Decode the longest prefix of ``buf`` ending at an event boundary (searching its last
        ``window`` bytes); return the offset where the next event starts, None if no cut decodes."""
        for brace, m in islice(_boundaries(buf, max(0, len(buf) - window), len(buf)), 8):
            if self._decode_piece(memoryview(buf)[:brace + 1]):
                return m.end() - 1
        return None

    def _salvage(self, buf: bytes, final: bool) -> int:
        """Event by event: keep each piece between boundaries that decodes, count the rest.
        Returns how many bytes of ``buf`` were consumed."""
        starts = [0] + [m.end() - 1 for m in _BOUNDARY.finditer(buf)]
        ends = [m.start() + 1 for m in _BOUNDARY.finditer(buf)]
        if final:
            ends.append(len(buf))
        good: list[Event] = []
        bad = 0
        for s, e in zip(starts, ends, strict=False):
            piece = buf[s:e].strip().rstrip(b",").rstrip()
            closed = final and piece.endswith(b"]")
            if closed:
                piece = piece[:-1].rstrip()
            events, error = self._events_of(piece) if piece else ([], None)
            if error is None:
                good.extend(events)
                if len(good) >= 4096:  # into columns as they come: an Event struct is ~10x its columns
                    self.builder.add(good)
                    good = []
                continue
            pos = _malformed_offset(error)
            if final and e == len(buf) and not closed and not isinstance(error, RecursionError) and (
                    pos is None or pos > len(piece)):
                # the file ends inside this event: the decoder failed only at the ']' put after it (or ran out of
                # text), so the text is a cut event, not a malformed one (an MXNet profile cut inside its first
                # event was "malformed JSON at byte 99 (expected ':')")
                self.trace.skipped[TRUNCATED] += 1
                self.trace.problems.append(f"{self.trace.path}: JSON truncated at byte {self.offset + len(buf)}: "
                                           f"the last {e - s} bytes (an incomplete event) were skipped")
                continue
            where = self.offset + s + (max(pos - 2, 0) if pos else len(piece))
            if self._corrupt_gzip():  # keep the events before it, drop what follows
                self.builder.add(good)
                good = []
                self._drop_rest(where, error)
            deep = isinstance(error, RecursionError)
            self.trace.skipped["event nested too deep to decode" if deep else "undecodable JSON (event skipped)"] += 1
            bad += 1
            if bad > _MAX_LISTED:
                continue
            if deep:
                self.trace.problems.append(_too_deep(self.trace.path, self.offset + s, e - s))
                continue
            what = "malformed" if pos else "truncated"
            self.trace.problems.append(f"{self.trace.path}: {what} JSON at byte {where} ({error}); "
                                       f"{e - s} bytes skipped")
        if bad > _MAX_LISTED:
            self.trace.problems.append(f"{self.trace.path}: {bad - _MAX_LISTED} more undecodable pieces skipped")
        self.builder.add(good)
        return len(buf) if final else starts[-1]  # where the last, unfinished event starts

    def run(self) -> ChromeTrace | None:
        buf = b""
        state = "prologue"
        container = None
        pending: list[bytes] = []
        pending_size = 0
        chunks = self.source.chunks()
        piece_size = PIECE_SIZE if self.share is None else SHARED_PIECE_SIZE
        for chunk in chunks:
            pending.append(chunk)
            pending_size += len(chunk)
            if state == "events" and pending_size < piece_size:
                continue
            next_event = None if state != "events" else (
                self._decode_pending(buf, pending) if self.share is None else self._share_pending(buf, pending))
            if next_event is not None:
                buf = pending[-1][next_event:]
                pending, pending_size = [], 0
                continue
            buf = b"".join([buf, *pending])
            pending, pending_size = [], 0
            if state == "prologue":
                if self.offset == 0 and buf.startswith(_BOM):  # UTF-8 byte-order mark
                    buf = buf[len(_BOM):]
                    self.offset = len(_BOM)
                stripped = buf.lstrip()
                if not stripped:
                    self.offset += len(buf)
                    buf = b""
                    if self.offset > LOOKAHEAD:
                        raise DdltraceError(f"{self.trace.path}: no events in the first {LOOKAHEAD >> 20} MiB "
                                            "(only whitespace)")
                    continue
                lead = len(buf) - len(stripped)
                if stripped[:1] == b"[":
                    container, state = "array", "events"
                    self.offset += lead + 1
                    buf = stripped[1:]
                elif stripped[:1] == b"{":
                    m = _TRACE_EVENTS.search(buf)
                    if not m:
                        if len(buf) > LOOKAHEAD:
                            raise DdltraceError(f"{self.trace.path}: no \"traceEvents\" array in the first "
                                                f"{LOOKAHEAD >> 20} MiB")
                        continue
                    container, state = "object", "events"
                    self._header(buf[lead + 1:m.start()])
                    self.offset += m.end()
                    buf = buf[m.end():]
                else:
                    raise DdltraceError(f"{self.trace.path}: not JSON (byte {self.offset + lead} is "
                                        f"{stripped[:1]!r}, expected '[' or '{{')")
                self.events_at = self.offset
            if state == "events":
                buf = self._skip_space(buf)
            if state == "events" and len(buf) >= piece_size:
                if self.share is not None:
                    raise Unshared(f"no event boundary in {len(buf)} bytes")
                cut = self._cut(buf, 1 << 20)
                if cut is None and len(buf) >= 4 * PIECE_SIZE:
                    cut = self._salvage(buf, final=False)
                if cut is not None:
                    self.offset += cut
                    buf = buf[cut:]
                if len(buf) > EVENT_LIMIT:
                    buf = self._skip_space(self._skim(buf, chunks))
        buf += b"".join(pending)
        self._kept_trace().problems.extend(self.source.problems)
        if self.strings_cut:
            self.trace.problems.append(f"{self.trace.path}: {self.strings_cut} string(s) of events larger than "
                                       f"{EVENT_LIMIT >> 20} MiB cut to their first {STRING_KEEP} bytes")
        if state == "prologue" and self.source.problems and not buf.strip():
            raise DdltraceError(f"nothing valid could be read: {self.source.problems[0]}")
        if state == "prologue":
            self._whole_document(buf)
        elif self.share is None:
            self._finish(buf, container)
            self._account_damage()
        else:
            if self.trace.problems:
                raise Unshared(self.trace.problems[0])
            if self.share[0] == 0:
                self.pieces.append((self.piece, self._on_own_builder(self._finish, buf, container)))
            return None
        return self.builder.finish()

    def _skip_space(self, buf: bytes) -> bytes:
        """``buf`` without the whitespace (and a comma after a skimmed event) it starts with; refuses the file
        when nothing but whitespace came in the first ``LOOKAHEAD`` bytes of the events array."""
        stripped = buf.lstrip()
        if stripped[:1] == b",":
            stripped = stripped[1:].lstrip()
        if len(stripped) != len(buf):
            self.offset += len(buf) - len(stripped)
        if not stripped and self.trace.read == 0 and self.offset - self.events_at > LOOKAHEAD:
            raise DdltraceError(f"{self.trace.path}: no events in the first {LOOKAHEAD >> 20} MiB of the events "
                                "array (only whitespace)")
        return stripped

    def _skim(self, buf: bytes, chunks) -> bytes:
        """Follow the event at the start of ``buf``, too large to hold, through the next ``chunks`` keeping a
        bounded copy (:class:`Skimmer`); decode that copy; return the text after the event."""
        start = self.offset
        skimmer = Skimmer(STRING_KEEP, EVENT_LIMIT)
        data = buf
        end = skimmer.feed(data)
        while end is None and (data := next(chunks, None)) is not None:
            if not skimmer.opened and skimmer.consumed > LOOKAHEAD and self.trace.read == 0:
                raise DdltraceError(f"{self.trace.path}: no events in the first {LOOKAHEAD >> 20} MiB of the events "
                                    f"array (text that is not JSON from byte {start})")
            end = skimmer.feed(data)
        self.offset += skimmer.consumed
        self.strings_cut += skimmer.cut_strings
        if end is None:
            self.trace.skipped[TRUNCATED] += 1
            self.trace.problems.append(f"{self.trace.path}: the file ends inside the event at byte {start} "
                                       f"({skimmer.consumed / (1 << 20):.1f} MiB); it was skipped")
            return b""
        self._decode_skimmed(skimmer, start)
        return data[end:]

    def _header(self, text: bytes) -> None:
        text = text.strip().rstrip(b",")
        if not text:
            return
        try:
            value = _DECODE_ANY.decode(b"{" + text + b"}")
        except _MALFORMED as exc:
            self.trace.problems.append(f"{self.trace.path}: top-level keys before traceEvents unreadable ({exc})")
            return
        self.trace.header.update(value)

    def _whole_document(self, buf: bytes) -> None:
        if not buf.strip():
            raise DdltraceError(f"{self.trace.path}: empty file")
        try:
            value = _DECODE_ANY.decode(buf)
        except _MALFORMED as exc:
            raise DdltraceError(f"{self.trace.path}: not a Chrome trace: {exc}") from exc
        if isinstance(value, dict):
            raise DdltraceError(f"{self.trace.path}: JSON object without a \"traceEvents\" array")
        raise DdltraceError(f"{self.trace.path}: JSON {type(value).__name__}, not a Chrome trace")

    @staticmethod
    def _array_end(body: bytes, container: str) -> int | None:
        """Where the events array closes (one past its ``]``), judged from what follows a ``]`` near the end of
        ``body``: nothing (a bare array), or ``}`` or ``, "key": ...}`` (an object's last keys)."""
        pos = len(body)
        for _ in range(8):
            pos = body.rfind(b"]", 0, pos)
            if pos < 0:
                return None
            trailer = body[pos + 1:].strip()
            if container == "array" and not trailer or container == "object" and trailer == b"}":
                return pos + 1
            if container == "object" and trailer.startswith(b",") and trailer.endswith(b"}"):
                try:
                    _DECODE_ANY.decode(b"{" + trailer[1:])
                    return pos + 1
                except (*_MALFORMED, msgspec.ValidationError):
                    pass
        return None

    def _after_events(self, trailer: bytes, container: str, closed: bool) -> None:
        """The text after the events array: (object container) the keys after it."""
        if container == "object":
            if trailer.startswith(b","):
                self._header(trailer[1:].rstrip().removesuffix(b"}"))
            elif trailer not in (b"}", b""):
                self.trace.problems.append(f"{self.trace.path}: unexpected text after the events array")
        if not closed:
            self.trace.problems.append(f"{self.trace.path}: events array not closed")

    def _event_by_event(self, body: bytes, container: str) -> None:
        """The last piece, followed one event at a time by a :class:`Skimmer` (for an event nested deeper
        than the decoder follows, which hides where the array ends from it)."""
        pos = 0
        while True:
            pos = _SPACE_AND_COMMAS.match(body, pos).end()
            if pos == len(body) or body[pos:pos + 1] == b"]":
                self._after_events(body[pos + 1:].strip(), container, pos < len(body))
                return
            skimmer = Skimmer(STRING_KEEP, EVENT_LIMIT)
            end = skimmer.feed(body, pos)
            self.strings_cut += skimmer.cut_strings
            if end is None:
                self.trace.skipped[TRUNCATED] += 1
                self.trace.problems.append(f"{self.trace.path}: JSON truncated at byte {self.offset + len(body)}: "
                                           f"the last {len(body) - pos} bytes (an incomplete event) were skipped")
                return
            self._decode_skimmed(skimmer, self.offset + pos)
            pos = end

    def _decode_skimmed(self, skimmer: Skimmer, start: int) -> None:
        """Decode a skimmed event's copy into the builder, or count it (too large, nested too deep, damaged)."""
        size = f"{skimmer.consumed / (1 << 20):.1f} MiB"
        if skimmer.too_large:
            self.trace.skipped[f"events larger than {EVENT_LIMIT >> 20} MiB with their strings cut"] += 1
            self.trace.problems.append(f"{self.trace.path}: the event at byte {start} ({size}) is larger than "
                                       f"{EVENT_LIMIT >> 20} MiB even with its strings cut; it was skipped")
            return
        error = self._try_piece(bytes(skimmer.copy))
        if isinstance(error, RecursionError):
            self.trace.skipped["event nested too deep to decode"] += 1
            self.trace.problems.append(_too_deep(self.trace.path, start, skimmer.consumed))
        elif error is not None:
            if self._corrupt_gzip():
                self._drop_rest(start, error)
            self.trace.skipped["undecodable JSON (event skipped)"] += 1
            self.trace.problems.append(f"{self.trace.path}: the event at byte {start} ({size}) could not be "
                                       f"decoded ({error}); it was skipped")

    @staticmethod
    def _trailing(exc: Exception) -> int | None:
        """Where the array closed, from msgspec's 'trailing characters (byte N)' (N is one past the
        offending byte, and the decoded text had '[' in front)."""
        pos = _malformed_offset(exc)
        return pos - 2 if pos is not None and "trailing" in str(exc) else None

    def _finish(self, buf: bytes, container: str) -> None:
        """The last piece: the array's end and (object container) the keys after it."""
        body = buf.rstrip()
        doc = b"[" + body
        end = None
        try:
            events = _DECODE_EVENTS.decode(doc)
            self.builder.add(events)  # a bare array, closed: done
            return
        except msgspec.ValidationError:
            try:  # wrong types somewhere: find the array's end without the schema
                _DECODE_ANY.decode(doc)
                end = len(body)
            except RecursionError:
                self._event_by_event(body, container)
                return
            except _MALFORMED as exc:
                end = self._trailing(exc)
        except RecursionError:  # an event nested too deep: no decoder finds the array's end
            self._event_by_event(body, container)
            return
        except _MALFORMED as exc:
            end = self._trailing(exc)
        if end is None:  # damage before the end hides it from the decoder: look for it from the back
            end = self._array_end(body, container)
        if end is not None:
            closed = body[:end].rstrip()
            if closed.endswith(b"]"):
                inner = closed[:-1].rstrip()
                if inner and not self._decode_piece(inner):
                    self._salvage(inner, final=True)
            self._after_events(body[end:].strip(), container, closed.endswith(b"]"))
            return
        # the array never closes: old Horovod ('},' after every event), or the file is truncated
        open_body = body.rstrip(b",").rstrip()
        if not open_body or self._decode_piece(open_body):
            self.trace.skipped[NEVER_CLOSED] += 1
            self.trace.open_end = self.offset + len(body)
            return
        consumed = self._cut(body, len(body))
        if consumed is None:
            self._salvage(body, final=True)
            return
        rest = body[consumed:].strip().rstrip(b",")
        error = self._try_piece(rest) if rest else None
        if error is None:
            return
        pos = _malformed_offset(error)
        if pos is None or pos >= len(rest):  # failed at the very end: at the ']' we put after it
            self.trace.skipped[TRUNCATED] += 1
            self.trace.problems.append(
                f"{self.trace.path}: JSON truncated at byte {self.offset + len(body)}: the last "
                f"{len(rest)} bytes (an incomplete event) were skipped")
        else:
            where = self.offset + len(body) - len(body[consumed:].lstrip()) + max(pos - 2, 0)
            if self._corrupt_gzip():
                self._drop_rest(where, error)
            self.trace.skipped["undecodable JSON (event skipped)"] += 1
            self.trace.problems.append(f"{self.trace.path}: malformed JSON at byte {where} ({error}); "
                                       f"the last {len(rest)} bytes were skipped")


def read_chrome(path, *, relabel: Relabel | None = None,
                amend: Amend | None = None, x_args: type | None = None,
                source: ByteSource | None = None, processes: int = 1) -> ChromeTrace:
    """Read one Chrome trace file (plain or gzip) into a :class:`ChromeTrace`.

    ``relabel(cat, name, args)`` gives each ``X`` event that has ``args`` its (cat, name), for dialects that say
    in ``args`` what an event is (slower: those ``args`` are decoded). ``amend(events)`` may change ``X`` events'
    cat, name, pid and tid in place, reading their ``args`` only where it needs them (Kineto: the device and
    stream of device events). ``x_args``, a msgspec Struct type, has ``X`` events' ``args`` decoded into it for
    ``amend`` in the same pass (None where absent; an event read on the field-by-field path still has them raw).
    ``processes`` > 1 reads a large file with that many processes (:mod:`.chrome_split`; ``amend`` must then
    have ``fresh()`` and ``absorb(other, rows_before)``), the same trace as one process reads.
    Raises :class:`DdltraceError` with the byte offset when nothing valid can be read.
    """
    trace = None
    if processes > 1 and source is None:
        from ddltrace.collectors.importers.chrome_split import read_split

        def make() -> _Builder:
            return _Builder(str(path), relabel, None if amend is None else amend.fresh(), x_args)

        trace = read_split(path, _Builder(str(path), relabel, amend, x_args), make, processes)
    if trace is None:
        trace = _Reader(source or ByteSource(path), _Builder(str(path), relabel, amend, x_args)).run()
    if trace.read == 0 and trace.problems:
        raise DdltraceError(f"nothing valid could be read: {trace.problems[0]}")
    return trace
