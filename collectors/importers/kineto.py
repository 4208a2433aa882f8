"""PyTorch profiler / Kineto JSON (``export_chrome_trace``, ``tensorboard_trace_handler``).

Every generation: PyTorch 1.8/1.9 (cats ``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``, GPU
``tid`` written as ``"stream 7"``), 1.10 on (``cpu_op``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy``, ...),
ROCm (the CUDA cat names, HIP call names) and other devices (MTIA, HPU, XPU, PrivateUse1). Device events say
in their ``args`` where they ran (``device``, ``stream``): their lane comes from there, so a file without
metadata (``M``) events still puts its kernels on their GPU streams. ``gpu_user_annotation`` spans (a
``record_function`` range as seen on a stream) are kept on the stream's annotation lane (``gpu:0/stream
7/annotations``, :data:`~ddltrace.analyses.breakdown.ANNOTATION_LANE_SUFFIX`): region marks, never device time.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import numpy as np

from ddltrace.arrow_timeline import ANNOTATION_LANE_SUFFIX
from ddltrace.collectors.importers.base import ImportContext, Importer, rank_from_path, register
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.collectors.importers.convert import chrome_part, record
from ddltrace.enclosing import innermost_enclosing
from ddltrace.store import rank_ranges

#: Header keys, or a cat only Kineto writes (PyTorch 1.8/1.9's capitalised ones too; files of that age may have
#: no header keys).
_SNIFF = re.compile(rb'"(schemaVersion|deviceProperties|distributedInfo|baseTimeNanoseconds)"\s*:|'
                    rb'"cat"\s*:\s*"(cpu_op|cuda_runtime|kernel|python_function|user_annotation|gpu_memcpy|'
                    rb'gpu_memset|gpu_user_annotation|cpu_instant_event|cuda_driver|mtia_ccp_events|mtia_runtime|'
                    rb'hpu_op|xpu_runtime|privateuse1_runtime|collective_comm|hip_runtime|mlu_runtime|Operator|Runtime|Kernel|'
                    rb'Memcpy|Memset)"')
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: Host threads' own work (lower-cased cats).
CPU_CATS = frozenset({"cpu_op", "operator", "user_annotation", "python_function", "python", "cpu_instant_event"})
#: Host-side categories of every Kineto generation (lower-cased): their events' ``args`` are not read, and a lane
#: holding them and no device event is a host thread's, even under a process labelled "GPU N" or "MTIA N"
#: (PyTorch's Python tracer writes some threads with pid 0; MTIA's runtime threads are in its device's process).
HOST_CATS = CPU_CATS | frozenset({
    "trace", "cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "mlu_runtime", "xpu_runtime", "xpu_driver",
    "mtia_runtime",
    "privateuse1_runtime", "privateuse1_driver", "glow_runtime", "overhead", "external_correlation",
    "cuda_profiler_range",
})
#: Appended to the cat of a device event whose ``args`` carry collective metadata ("Collective name",
#: "Process Group Name": c10d's record_param_comms metadata, which Kineto copies onto the collective's kernels).
COLLECTIVE_TAG = " [collective args]"
#: Cat (lower-cased) of the spans that annotate a device stream: moved to the stream's annotation lane.
ANNOTATION_CAT = "gpu_user_annotation"
#: The tid an annotation span gets: (this, the tid it was written with), named by the lane namer.
_ANNOTATES = "annotates"
#: The marks AMD TraceLens' TraceFusion (``TraceLens.TraceFusion.TraceFuse``) writes on every event it fuses from
#: the per-rank files into one: ``args.rank``, and ``args.pid_raw`` beside a pid offset by rank x 10**N (N: one more
#: than the digits of rank 0's largest pid), ``args.correlation_raw`` beside an offset ``correlation`` (likewise);
#: its ``process_name`` events name the processes "RANK r - CPU" / "RANK r - GPU". Such a file is read as its ranks.
FUSED_MARKS = ("rank", "pid_raw", "correlation_raw")
#: Largest rank a store holds (its rank column is int32).
MAX_RANK = (1 << 31) - 1
#: Timestamps above this (µs) are since the Unix epoch (2001-09-09), below it relative to baseTimeNanoseconds.
EPOCH_US = 1e15


def sniff(head: bytes, path: Path) -> bool:
    return bool(_SNIFF.search(head))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class DeviceArgsFields(msgspec.Struct, gc=False):
    """The ``args`` keys of a device event that say where it ran, whether it is part of a collective and how
    much it moves (c10d's element counts and dtype on a collective's kernels, a copy's or fill's ``bytes``), and
    the ``correlation`` id that links a runtime launch to the device activity it launched (both carry it); the
    rest of the object is skipped undecoded."""

    correlation: Any = -1
    device: Any = msgspec.UNSET
    stream: Any = msgspec.UNSET
    collective: Any = msgspec.field(default=msgspec.UNSET, name="Collective name")
    group: Any = msgspec.field(default=msgspec.UNSET, name="Process Group Name")
    in_nelems: Any = msgspec.field(default=msgspec.UNSET, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=msgspec.UNSET, name="Out msg nelems")
    dtype: Any = msgspec.UNSET
    bytes: Any = msgspec.UNSET
    #: ``record_shapes``' input shapes and element types, kept undecoded: read only on a backend's collective span
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    #: TraceFusion's marks (AMD TraceLens, :data:`FUSED_MARKS`): the rank of the file the event came from, and the
    #: pid and correlation id as that rank's profiler wrote them (before its offset of rank x 10**N)
    rank: Any = msgspec.UNSET
    pid_raw: Any = msgspec.UNSET
    correlation_raw: Any = msgspec.UNSET


#: Size in bytes of c10d's dtype names (``c10::ScalarType`` as ``record_param_comms`` writes it).
DTYPE_BYTES = {
    "Byte": 1, "Char": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1, "Float8_e8m0fnu": 1, "QInt8": 1, "QUInt8": 1, "UInt8": 1, "Int8": 1,
    "Short": 2, "Half": 2, "BFloat16": 2, "UInt16": 2, "Int16": 2, "ComplexHalf": 4,
    "Int": 4, "Float": 4, "UInt32": 4, "QInt32": 4, "Int32": 4,
    "Long": 8, "Double": 8, "UInt64": 8, "ComplexFloat": 8, "Int64": 8, "ComplexDouble": 16,
}
#: Words of a kernel's name (lower-cased, without separators) that say which collective it runs; a kernel whose
#: name holds none (``ncclDevKernel_Generic``) gets c10d's ``Collective name`` appended to it.
_NAMED_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "send", "recv")
_SEPARATORS = re.compile(r"[^a-z0-9]+")
_INT64_MAX = (1 << 63) - 1
#: Size in bytes of the element types ``record_shapes`` writes in ``Input type`` (the C++ names of c10's scalar
#: types, as torch 2.13 writes them for float32, float64, float16, bfloat16, int64 ... complex32; older torch
#: (HTA's trace_filter, 2023) writes int64 and int16 as ``long`` and ``short``).
INPUT_TYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "long": 8, "int": 4,
    "short int": 2, "short": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "short unsigned int": 2, "unsigned int": 4,
    "long unsigned int": 8, "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::complex<c10::Half>": 4,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
}
#: Gloo's spans of a collective (``gloo:<op>``, on its worker threads) whose ``bytes`` are their input tensors'
#: (torch 2.13): the buffer of an all-reduce, broadcast or reduce, an all-to-all's send buffer, a send's or
#: receive's message (each nccl-tests' size of it); an all-gather's and a gather's one rank's share, a scatter's
#: the root's list of every rank's share (none on the other ranks), which :mod:`ddltrace.analyses.
#: host_collectives` turns into nccl-tests' size. A sparse all-reduce's inputs are the dense shape: not sized.
GLOO_SIZED = frozenset({"gloo:all_reduce", "gloo:broadcast", "gloo:reduce", "gloo:all_to_all", "gloo:send",
                        "gloo:recv", "gloo:all_gather", "gloo:gather", "gloo:scatter"})
#: c10d's host event that carries a collective's metadata (``In msg nelems``, ``dtype``, ...: the NCCL backend's).
PARAM_COMMS = "record_param_comms"
#: Host events whose ``args`` are read: those that can give a collective's size (and c10d's ``nccl:<op>`` spans,
#: :data:`NCCL_OP`).
HOST_SIZED = GLOO_SIZED | {PARAM_COMMS}
#: Prefix of the span c10d's NCCL backend records around each collective it runs (``nccl:all_reduce``,
#: ``nccl:all_to_all``, ``nccl:_all_gather_base``), a ``user_annotation``; with ``record_shapes`` it holds the
#: operation's input tensors (``Input Dims``, ``Input type``).
NCCL_OP = "nccl:"
#: ``nccl:<op>`` spans whose input tensors are nccl-tests' size of the collective (separators removed, lower-case,
#: as a prefix): the buffer of an all-reduce (coalesced: every tensor of it), broadcast or reduce, the input of a
#: reduce-scatter, an all-to-all's send buffer, a send's or receive's message. Not an all-gather's, gather's or
#: scatter's (one rank's share: nccl-tests' size is the whole, and the span does not say the group's size).
_INPUT_IS_SIZE = ("allreduce", "reducescatter", "alltoall", "broadcast", "reduce", "send", "recv")


def _host_sized(name) -> bool:
    """Whether a host event of this name may give a collective's size (its args are read)."""
    return name in HOST_SIZED or (name.__class__ is str and name.startswith(NCCL_OP))


def op_bytes(name: str, args: DeviceArgsFields) -> int | None:
    """nccl-tests' size of the collective a host operation ran, from the span's own args: c10d's element counts
    and dtype (:func:`collective_bytes`; an all-to-all's send buffer where the args or the span's name say
    all-to-all), else, for an ``nccl:<op>`` span of :data:`_INPUT_IS_SIZE`, its input tensors
    (:func:`input_bytes`). None where they give none (and for a barrier)."""
    said = _SEPARATORS.sub("", name.removeprefix(NCCL_OP).lower())
    if "barrier" in said:
        return None
    if args.in_nelems is not msgspec.UNSET:
        if args.collective is msgspec.UNSET and said.startswith("alltoall"):
            args = msgspec.structs.replace(args, collective="alltoall")
        return collective_bytes(args)
    if name.startswith(NCCL_OP) and said.startswith(_INPUT_IS_SIZE):
        return input_bytes(args)
    return None


def collective_bytes(args: DeviceArgsFields) -> int | None:
    """nccl-tests' *size* of a collective kernel from c10d's args: the larger of ``In msg nelems`` and ``Out msg
    nelems`` (the whole buffer of an all-reduce, broadcast or reduce; the gathered output of an all-gather, the
    input of a reduce-scatter) times the size of ``dtype``; an all-to-all's send buffer (``In msg nelems``).
    None where the args do not give both counts as non-negative integers and a known dtype."""
    size = DTYPE_BYTES.get(args.dtype) if isinstance(args.dtype, str) else None
    nin, nout = args.in_nelems, args.out_nelems
    if size is None or not (_is_int(nin) and _is_int(nout)) or nin < 0 or nout < 0:
        return None
    said = args.collective if isinstance(args.collective, str) else ""
    elements = nin if "alltoall" in _SEPARATORS.sub("", said.lower()) else max(nin, nout)
    return elements * size if elements * size <= _INT64_MAX else None


def input_bytes(args: DeviceArgsFields) -> int | None:
    """The bytes of an operation's input tensors from ``record_shapes``' ``Input Dims`` and ``Input type``: each
    tensor's elements (the product of its dims) x its element size, summed. None where they are absent or are
    not all tensors of a known element type."""
    if not len(args.input_dims) or not len(args.input_type):
        return None
    try:
        dims, types = _DECODE_JSON.decode(args.input_dims), _DECODE_JSON.decode(args.input_type)
    except msgspec.DecodeError:
        return None
    if not (isinstance(dims, list) and isinstance(types, list)) or not dims or len(dims) != len(types):
        return None
    total = 0
    for shape, kind in zip(dims, types, strict=True):
        size = INPUT_TYPE_BYTES.get(kind) if isinstance(kind, str) else None
        if size is None or not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            return None
        total += math.prod(shape) * size
    return total if total <= _INT64_MAX else None


def group_id(name) -> int | None:
    """The timeline's ``comm`` of a process group from c10d's ``Process Group Name``: the group's number (c10d
    numbers groups in the order they are made, which every rank shares: "0" is the default group), or, for a
    name that is not a number, a 63-bit hash of it (the same on every rank). None where there is no name."""
    if not isinstance(name, str) or not name:
        return None
    if name.isascii() and name.isdigit() and int(name) <= _INT64_MAX:
        return int(name)
    import hashlib  # here: only names that are not numbers need it

    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") & _INT64_MAX


_DECODE_ARGS = msgspec.json.Decoder(DeviceArgsFields)
_DECODE_JSON = msgspec.json.Decoder()


class DeviceArgs:
    """Amends device events from their ``args`` while the file is read: ``device`` and ``stream`` become the
    event's (pid, tid), the lane Kineto itself uses for them (recorded in ``lanes``), and a cat gets
    :data:`COLLECTIVE_TAG` when the args carry collective metadata. Host events (:data:`HOST_CATS`) are left
    as they are, their args unread. A ``gpu_user_annotation`` span's tid becomes ``(_ANNOTATES, tid)``: the
    stream's annotation lane, apart from its kernels."""

    def __init__(self):
        self.correlations: list[np.ndarray] = []  # each event's correlation id (-1: none), in the reader's order
        self.sizes: dict[int, int] = {}  # index of an event in the reader's order -> its bytes
        self.groups: dict[int, int] = {}  # index of an event in the reader's order -> its process group's id
        #: index of a host operation's span (record_param_comms, nccl:<op>) -> the size of its collective
        self.op_sizes: dict[int, int] = {}
        self._count = 0  # events amended so far
        self.lanes: set[tuple] = set()  # (device, stream) of every device event placed from its args
        self._seen: set[str] = set()  # cats as written
        self._host: set[str] = set()  # those of them that are host cats
        self._marks: set[str] = set()  # those of them that are ANNOTATION_CAT
        #: a TraceFusion file (:data:`FUSED_MARKS`): the rank of each pid its events were written with (and of each
        #: device lane's pid, device + the rank's offset), and each rank's pid offset (rank x 10**N)
        self.pid_rank: dict[int, int] = {}
        self.rank_offset: dict[int, int] = {}

    def fresh(self) -> DeviceArgs:
        """A new, empty one (for another process's share of the file: :mod:`.chrome_split`)."""
        return DeviceArgs()

    def absorb(self, other: DeviceArgs, rows_before: int) -> None:
        """Add what ``other`` amended in the text right after this one's, whose first event is row
        ``rows_before`` of the file."""
        self.correlations.extend(other.correlations)
        self.sizes.update({index + rows_before: size for index, size in other.sizes.items()})
        self.groups.update({index + rows_before: group for index, group in other.groups.items()})
        self.op_sizes.update({index + rows_before: size for index, size in other.op_sizes.items()})
        self._count += other._count
        self.lanes |= other.lanes
        for pid, rank in other.pid_rank.items():
            self.pid_rank.setdefault(pid, rank)
        for rank, offset in other.rank_offset.items():
            self.rank_offset.setdefault(rank, offset)

    def __call__(self, events: list) -> None:
        for cat in {e.cat for e in events} - self._seen:
            self._seen.add(cat)
            if cat.lower() in HOST_CATS:
                self._host.add(cat)
            elif cat.lower() == ANNOTATION_CAT:
                self._marks.add(cat)
        args = [e.args for e in events]
        ids = _correlations(args)
        if events and _fused(next((a for a in args if a is not None), None)):
            self._fused(events, args, ids)
        self.correlations.append(ids)
        host, marks, first = self._host, self._marks, self._count
        self._count += len(events)
        for i, event in [(i, e) for i, e in enumerate(events, first) if e.cat not in host or _host_sized(e.name)]:
            if event.cat in host:
                if event.args is not None:
                    self._amend_host(i, event)
            elif event.cat in marks:
                event.tid = (_ANNOTATES, event.tid)
            elif event.args is not None:
                self._amend(i, event)

    def _fused(self, events: list, args: list, ids: np.ndarray) -> None:
        """A piece of a TraceFusion file: the rank of each pid, each rank's pid offset, and each event's
        correlation id as its rank wrote it (``correlation_raw``, where TraceFusion offset it), in ``ids``."""
        for i, (event, raw) in enumerate(zip(events, args, strict=True)):
            marks = _decoded(raw)
            rank = getattr(marks, "rank", None)
            if not (_is_int(rank) and 0 <= rank <= MAX_RANK and _is_int(event.pid)):
                continue
            self.pid_rank.setdefault(event.pid, rank)
            if _is_int(marks.pid_raw):
                self.rank_offset.setdefault(rank, event.pid - marks.pid_raw)
            own = marks.correlation_raw
            if ids[i] >= 0 and _is_int(own) and 0 <= own < 1 << 63:
                ids[i] = own

    def row_correlation(self, rows: int) -> np.ndarray:
        """The correlation id of each of the trace's ``rows`` intervals (-1: none); the ``X`` events come first,
        in the order this amended them, then the paired ``B``/``E`` ones (which carry none)."""
        ids = np.concatenate(self.correlations) if self.correlations else np.empty(0, np.int64)
        return np.concatenate([ids, np.full(rows - len(ids), -1, np.int64)])

    def row_values(self, values: dict[int, int], rows: int) -> np.ndarray:
        """The ``values`` (``sizes``, ``groups``) of each of the trace's ``rows`` intervals, -1 where none (in the
        order of :meth:`row_correlation`)."""
        out = np.full(rows, -1, dtype=np.int64)
        if values:
            out[np.fromiter(values, np.int64, len(values))] = np.fromiter(values.values(), np.int64, len(values))
        return out

    def _amend_host(self, index: int, event) -> None:
        """A host event that may give a collective's size (:data:`HOST_SIZED`): c10d's ``record_param_comms``
        (its element counts and dtype, its process group) or a gloo collective's span (its input tensors, where
        the profile recorded shapes). Its lane and cat stay as they are."""
        args = _decoded(event.args)
        if args is None:
            return
        if event.name.startswith(NCCL_OP):  # only the size of the collective it ran: not the span's bytes
            size = op_bytes(event.name, args)
            if size is not None:
                self.op_sizes[index] = size
            return
        if event.name == PARAM_COMMS:
            size, group = collective_bytes(args), group_id(args.group)
            if group is not None:
                self.groups[index] = group
            if size is not None:
                self.op_sizes[index] = size
        else:
            size = input_bytes(args)
        if size is not None:
            self.sizes[index] = size

    def _amend(self, index: int, event) -> None:
        args = _decoded(event.args)
        if args is None:
            return
        device, stream = args.device, args.stream
        if _is_int(device) and (_is_int(stream) or isinstance(stream, str)):  # (PyTorch 1.9 wrote tid "stream 7")
            if _is_int(args.pid_raw) and _is_int(args.rank) and _is_int(event.pid):  # TraceFusion: the rank's device
                device += event.pid - args.pid_raw  # (its pid offset: one lane per rank and device)
                self.pid_rank.setdefault(device, args.rank)
            event.pid, event.tid = device, stream
            self.lanes.add((device, stream))
        if args.collective is not msgspec.UNSET or args.group is not msgspec.UNSET:
            event.cat += COLLECTIVE_TAG
            size, group = collective_bytes(args), group_id(args.group)
            if group is not None:
                self.groups[index] = group
            said = args.collective
            if isinstance(said, str) and said and isinstance(event.name, str) and not any(
                    word in _SEPARATORS.sub("", event.name.lower()) for word in _NAMED_COLLECTIVES):
                event.name = f"{event.name} [{said}]"  # ncclDevKernel_Generic: the collective its args name
        else:
            size = args.bytes if _is_int(args.bytes) and 0 <= args.bytes <= _INT64_MAX else None
        if size is not None:
            self.sizes[index] = size


def _fused(args) -> bool:
    """Whether an event's args carry TraceFusion's marks (:data:`FUSED_MARKS`: an integer ``rank`` and ``pid_raw``)."""
    marks = _decoded(args) if args is not None else None
    return marks is not None and _is_int(marks.rank) and _is_int(marks.pid_raw)


def _decoded(args) -> DeviceArgsFields | None:
    """An event's args as :class:`DeviceArgsFields`: as decoded, or from the text of an event read field by
    field (None where they are not an object)."""
    if not isinstance(args, msgspec.Raw):
        return args
    try:
        return _DECODE_ARGS.decode(args) if len(args) > 2 else None
    except msgspec.DecodeError:  # args not an object: nothing to learn from them
        return None


def _correlations(args: list) -> np.ndarray:
    """The ``correlation`` of each event's args (as decoded into :class:`DeviceArgsFields`, raw, or None), -1
    where there is none or it is not a non-negative integer."""
    try:
        values = [a.correlation for a in args]
        ids = np.array(values)
        if ids.dtype.kind == "i" and True not in values and False not in values:  # (also true when 0 or 1 is)
            return np.maximum(ids.astype(np.int64, copy=False), -1)
    except (AttributeError, OverflowError):  # args absent or read raw; an id beyond int64
        pass
    return np.array([_correlation(a) for a in args], dtype=np.int64)


def _correlation(args) -> int:
    if isinstance(args, msgspec.Raw):
        try:
            args = _DECODE_ARGS.decode(args) if len(args) > 2 else None
        except msgspec.DecodeError:
            return -1
    value = getattr(args, "correlation", -1)
    return value if _is_int(value) and 0 <= value < 1 << 63 else -1


def _cpu_lanes(trace) -> set:
    """The (pid, tid) of every lane that holds host work (:data:`HOST_CATS`: host threads' own work, runtime and
    driver calls): MTIA's runtime threads ("Stream 101 Submission Queue") sit in its device's process."""
    if not len(trace.key):
        return set()
    cpu_key = np.array([cat.lower() in HOST_CATS for cat, _ in trace.keys], dtype=bool)
    used = np.bincount(trace.lane_key[cpu_key[trace.key]], minlength=len(trace.lanes))  # not np.unique: it
    return {trace.lanes[i] for i in np.flatnonzero(used)}  # imports numpy.ma, 10 ms of every import's start


def _lane_namer(trace, device_lanes: set, offset: int = 0):
    """Each lane's name; ``offset``: the pid offset of a TraceFusion rank, taken off the device numbers named."""
    cpu_lanes = _cpu_lanes(trace) - device_lanes

    def lane(pid, tid):
        if isinstance(pid, str):
            return None  # "Spans"/"Traces": the profiler's own bookkeeping
        if isinstance(tid, tuple) and tid[0] == _ANNOTATES:  # a stream's annotation spans, beside the stream
            return f"{lane(pid, tid[1])}{ANNOTATION_LANE_SUFFIX}"
        label = trace.process_labels.get(pid, "")
        thread = trace.thread_names.get((pid, tid), "").strip()
        on_device = (pid, tid) in device_lanes
        if (pid, tid) in cpu_lanes:
            proc = "cpu"
        elif label.startswith("GPU"):
            proc = "gpu:" + label.split()[-1]
        elif label and label != "CPU":
            proc = label.lower().replace(" ", ":")
        elif on_device or thread.startswith("stream"):
            proc = f"gpu:{pid - offset if _is_int(pid) else pid}"
        else:
            proc = "cpu"
        if not thread:
            thread = f"stream {tid}" if on_device and _is_int(tid) else f"tid {tid}"
        return f"{proc}/{thread}"
    return lane


def distributed_rank(info) -> tuple[int | None, str | None]:
    """The rank ``distributedInfo`` gives (None when it gives none), and what is wrong with it when it is not a
    rank (not an integer from 0 to 2**31 - 1)."""
    if not isinstance(info, dict):
        return None, None if info is None else f"distributedInfo is a {type(info).__name__}, not an object"
    if "rank" not in info:
        return None, None
    rank = info["rank"]
    if isinstance(rank, float) and rank.is_integer():
        rank = int(rank)
    if _is_int(rank) and 0 <= rank <= MAX_RANK:
        return rank, None
    return None, f"distributedInfo.rank {info['rank']!r} is not a rank (an integer from 0 to {MAX_RANK})"


def row_steps(trace, gpu_lane: np.ndarray, correlation: np.ndarray, rows: np.ndarray | None = None,
              ) -> np.ndarray | None:
    """The training step of every interval (-1: none): host events by the host's ``ProfilerStep#N`` span their
    start falls in (not by a stream's copy of the span, ``gpu_user_annotation``, which marks the device's time),
    device events by the time the host launched them: the start of the earliest host event of the same
    ``correlation`` id (the runtime call; -1: none), which is where Kineto's flow arrows from launch to kernel
    begin (the arrows themselves are not read: on every Kineto trace of the corpus with both, each row gets the
    step it got by the arrows, and some traces have no arrows, or none for a few of their kernels; docs/IMPORTERS.md,
    "Kineto steps"); None when the trace marks no steps. ``rows`` (a mask): only those rows' steps, from their own
    steps and launches (one rank of a TraceFusion file), -1 elsewhere."""
    if rows is not None:
        ts, dur = trace.ts_us, trace.dur_us
        view = SimpleNamespace(keys=trace.keys, key=trace.key[rows], lane_key=trace.lane_key[rows], ts_us=ts[rows],
                               dur_us=dur[rows])
        steps = row_steps(view, gpu_lane, correlation[rows])
        if steps is None:
            return None
        out = np.full(len(rows), -1, dtype=np.int64)
        out[rows] = steps
        return out
    numbers = {k: int(m.group(1)) for k, (_cat, name) in enumerate(trace.keys) if (m := _STEP.match(name))}
    if not numbers:
        return None
    on_gpu = gpu_lane[trace.lane_key] if len(trace.lane_key) else np.zeros(0, dtype=bool)
    is_step = np.isin(trace.key, list(numbers)) & ~on_gpu
    starts = trace.ts_us[is_step]
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    ends = (trace.ts_us[is_step] + trace.dur_us[is_step])[order]
    nums = np.array([numbers[k] for k in trace.key[is_step]], dtype=np.int64)[order]

    def step_at(t: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(starts, t, side="right") - 1
        safe = np.clip(idx, 0, None)
        inside = (idx >= 0) & (t < ends[safe]) & ~np.isnan(t)
        return np.where(inside, nums[safe], -1)

    when = trace.ts_us.copy()
    if on_gpu.any():
        when[on_gpu] = np.nan
        rows = np.flatnonzero(on_gpu & (correlation >= 0))
        found, launch = _launches(correlation, ~on_gpu & (correlation >= 0), trace.ts_us, rows)
        when[rows[found]] = launch
    return step_at(when)


def _launches(correlation: np.ndarray, host: np.ndarray, ts: np.ndarray, rows: np.ndarray,
              ) -> tuple[np.ndarray, np.ndarray]:
    """Which of the device ``rows`` a ``host`` row shares its correlation id with, and the earliest start (µs) of
    those host rows for each found."""
    ids, starts = correlation[host], ts[host]
    order = np.lexsort((starts, ids))
    ids, starts = ids[order], starts[order]
    distinct, first = np.unique(ids, return_index=True)
    if not len(distinct):
        return np.zeros(len(rows), bool), np.empty(0)
    at = np.clip(np.searchsorted(distinct, correlation[rows]), 0, len(distinct) - 1)
    found = distinct[at] == correlation[rows]
    return found, starts[first[at[found]]]


#: How many host operations' spans that began before a launch, on its thread, are looked through for one that
#: encloses it.
_OP_DEPTH = 64


def sizes_from_host(trace, gpu_lane: np.ndarray, correlation: np.ndarray, op_sizes: dict[int, int],
                    sized: dict[int, int], is_comm) -> dict[int, int]:
    """Sizes for the communication kernels whose own args give none (older PyTorch writes no ``In msg nelems``
    on its NCCL kernels): the size of the host operation that launched each (row -> bytes). The launch is the
    earliest host event with the kernel's ``correlation`` id (the runtime call); its operation is the innermost
    span of ``op_sizes`` (c10d's ``record_param_comms``, ``nccl:<op>``, each with the size its args give) on the
    launch's own thread (lane) that encloses the launch. ``sized`` (rows with a size already: the kernel's own
    args) is never overridden. Where one operation launched several such kernels, the first launched (then the
    first to start) gets its size and the others none: the operation's bytes are counted once. ``is_comm(key)``
    says whether the events of a (cat, name) key are communication kernels."""
    if not op_sizes or not len(trace.key) or not gpu_lane.any():
        return {}
    on_gpu = gpu_lane[trace.lane_key]
    comm_key = np.zeros(len(trace.keys), dtype=bool)
    for k in set(trace.key[on_gpu].tolist()):  # (only the device's keys are asked about)
        comm_key[k] = is_comm(k)
    rows = np.flatnonzero(on_gpu & comm_key[trace.key] & (correlation >= 0))
    rows = rows[~np.isin(rows, np.fromiter(sized, np.int64, len(sized)))] if sized else rows
    if not len(rows):
        return {}
    ts, end = trace.ts_ns, trace.ts_ns + trace.dur_ns
    # the launch of each kernel: the earliest host row of its correlation id
    host = np.flatnonzero(~on_gpu & (correlation >= 0) & np.isin(correlation, correlation[rows]))
    host = host[np.lexsort((ts[host], correlation[host]))]
    ids, first = np.unique(correlation[host], return_index=True)
    if not len(ids):
        return {}
    at = np.clip(np.searchsorted(ids, correlation[rows]), 0, len(ids) - 1)
    found = ids[at] == correlation[rows]
    rows, launch = rows[found], host[first[at[found]]]
    ops = np.fromiter(op_sizes, np.int64, len(op_sizes))
    around = innermost_enclosing(trace.lane_key[ops], ts[ops], end[ops], trace.lane_key[launch], ts[launch],
                                 end[launch], _OP_DEPTH)
    chosen: dict[int, tuple] = {}  # operation's row -> (launch start, kernel start, kernel row) of its first kernel
    for row, call, j in zip(rows.tolist(), launch.tolist(), around.tolist(), strict=True):
        if j >= 0:
            op, here = int(ops[j]), (int(ts[call]), int(ts[row]), row)
            if op not in chosen or here < chosen[op]:
                chosen[op] = here
    return {row: op_sizes[op] for op, (_t0, _start, row) in chosen.items()}


def group_sizes(config) -> list[int] | None:
    """The distinct sizes (ranks) of the process groups ``distributedInfo.pg_config`` lists (torch 2.x: one entry
    per group, the default one included, each with its ``pg_size``), ascending; None where it is not such a list."""
    if not isinstance(config, list) or not config:
        return None
    sizes = [group.get("pg_size") if isinstance(group, dict) else None for group in config]
    if not all(_is_int(size) and 0 < size <= MAX_RANK + 1 for size in sizes):
        return None
    return sorted(set(sizes))


def device_memory(properties) -> tuple[dict[str, int], str | None]:
    """Each device's memory (bytes) from the trace's ``deviceProperties`` (a list of objects with ``id`` and
    ``totalGlobalMem``), keyed as its lanes (``gpu:0``); and what is wrong with them, None where nothing (or where
    the trace has none)."""
    if properties is None:
        return {}, None
    if not isinstance(properties, list):
        return {}, "not a list"
    memory = {}
    for entry in properties:
        device = entry.get("id") if isinstance(entry, dict) else None
        size = entry.get("totalGlobalMem") if isinstance(entry, dict) else None
        if not (_is_int(device) and 0 <= device <= MAX_RANK and _is_int(size) and 0 < size < 1 << 62):
            return {}, f"an entry without a device id and a totalGlobalMem in bytes ({str(entry)[:80]})"
        memory[f"gpu:{device}"] = int(size)
    return memory, None


def read(path: Path, ctx: ImportContext):
    device_args = DeviceArgs()
    trace = read_chrome(path, amend=device_args, x_args=DeviceArgsFields, processes=ctx.processes)
    info = trace.header.get("distributedInfo")
    default, wrong = distributed_rank(info)
    fused = bool(device_args.pid_rank)  # a TraceFusion file: its ranks are its events' (args.rank), not the file's
    rank = None if fused else rank_from_path(path, ctx.rank_from, ctx, default)
    if wrong:
        trace.problems.append(f"{path}: {wrong}; " + ("ignored: the file's ranks are its events' args.rank" if fused
                                                      else f"rank {rank} taken from the file's name or position "
                                                           "instead"))
    info = info if isinstance(info, dict) else {}
    world_size = info.get("world_size")
    if world_size is not None and not (_is_int(world_size) and 0 < world_size <= MAX_RANK + 1):
        trace.problems.append(f"{path}: distributedInfo.world_size {world_size!r} is not a world size; ignored")
        world_size = None
    if world_size is not None and default is not None and default >= world_size:
        trace.problems.append(f"{path}: distributedInfo.rank {default} is not a rank of its world_size {world_size} "
                              "(0 to world_size - 1); the store's world is made to hold it")
    sizes = group_sizes(info["pg_config"]) if "pg_config" in info else None
    if sizes is None and "pg_config" in info:
        trace.problems.append(f"{path}: distributedInfo.pg_config is not a list of process groups each with its "
                              f"pg_size (a count of ranks); ignored")
    memory, bad = device_memory(trace.header.get("deviceProperties"))
    if bad:
        trace.problems.append(f"{path}: deviceProperties: {bad}; the devices' memory sizes are not taken from it")
    record(ctx, trace)
    base = trace.header.get("baseTimeNanoseconds")
    offset, clock = 0, "epoch"
    if len(trace.ts_us) and float(trace.ts_us.min()) < EPOCH_US:
        if isinstance(base, int) and 0 <= base < 1 << 62:  # ns since the epoch; beyond int64 ns is damage
            offset = base
        else:
            clock = "relative"
    extra = {"host": trace.header.get("host_name", ""), "role": "worker"}
    if memory:
        extra["device_memory_bytes"] = memory
    if info:
        backend = info.get("backend")
        extra.update({"backend": backend if isinstance(backend, str) else None, "world_size": world_size})
        if sizes is not None:
            extra["group_sizes"] = sizes
    lane_name = _lane_namer(trace, device_args.lanes)
    gpu_lane = np.array([(lane_name(pid, tid) or "").startswith("gpu:") for pid, tid in trace.lanes], dtype=bool)
    correlation = device_args.row_correlation(len(trace.ts_ns))
    row_rank = _fused_ranks(trace, device_args) if device_args.pid_rank else None
    if row_rank is not None and clock == "relative":  # a TraceFusion file's ranks: on the one clock it was written
        clock = "shared"
    for rows in [None] if row_rank is None else [row_rank == r for r in sorted(device_args.rank_offset)]:
        device_args.sizes.update(sizes_from_host(  # (a TraceFusion file: each rank's own, its ids its own)
            trace, gpu_lane, correlation if rows is None else np.where(rows, correlation, -1),
            device_args.op_sizes, device_args.sizes,
            lambda k: getattr(ctx.categorizer.rule_for("kineto", *trace.keys[k]), "category", None) == "comm"))
    columns = {"bytes": device_args.row_values(device_args.sizes, len(trace.ts_ns)),
               "comm": device_args.row_values(device_args.groups, len(trace.ts_ns))}
    if row_rank is not None:
        yield from _fused_parts(trace, device_args, ctx, row_rank, offset_ns=offset, clock=clock, info=extra,
                                correlation=correlation, columns=columns)
        return
    yield chrome_part(trace, fmt="kineto", rank=rank, ctx=ctx, lane_name=lane_name, offset_ns=offset, clock=clock,
                      info=extra, row_steps=row_steps(trace, gpu_lane, correlation),
                      drop_reason="profiler bookkeeping spans", row_correlation=correlation, row_columns=columns)


def _fused_ranks(trace, device_args: DeviceArgs) -> np.ndarray:
    """The rank of each interval of a TraceFusion file (:data:`FUSED_MARKS`): its lane's, the rank of the pid its
    events carry (a device lane: device + the rank's pid offset); a lane of a pid no event names (B/E spans only)
    the rank's whose pid offset is the largest not above it. Every rank with an offset is in ``rank_offset``."""
    pid_rank, offsets = device_args.pid_rank, device_args.rank_offset
    for rank in set(pid_rank.values()) - set(offsets):
        offsets[rank] = 0  # (no pid_raw beside its pids: none taken off its device numbers)
    lane_rank = np.array([_rank_of(pid, pid_rank, offsets) for pid, _ in trace.lanes], dtype=np.int64)
    return lane_rank[trace.lane_key] if len(trace.lane_key) else np.empty(0, dtype=np.int64)


def _rank_of(pid, pid_rank: dict[int, int], offsets: dict[int, int]) -> int:
    if pid in pid_rank:
        return pid_rank[pid]
    below = sorted((offset, rank) for rank, offset in offsets.items() if _is_int(pid) and offset <= pid)
    return below[-1][1] if below else min(offsets)


def _fused_parts(trace, device_args: DeviceArgs, ctx: ImportContext, row_rank: np.ndarray, *, offset_ns: int,
                 clock: str, info: dict, correlation: np.ndarray, columns: dict):
    """The ranks of a TraceFusion file, each its own part (``row_rank``: :func:`_fused_ranks`): device lanes named
    by their own device number, steps found from the rank's own ``ProfilerStep`` spans and correlation ids (its own:
    TraceFusion's ``correlation_raw``), its counters those of its pids."""
    offsets = device_args.rank_offset
    ranks = sorted(offsets)
    counter_pids: dict[int, set] = {}
    for pid in set(trace.counter_arrays()[0].tolist()):
        counter_pids.setdefault(_rank_of(pid, device_args.pid_rank, offsets), set()).add(pid)
    if ctx.report is not None:
        ctx.report.format += f" (a TraceFusion file of {len(ranks)} ranks, split into ranks {rank_ranges(ranks)})"
    for rank in ranks:
        lane_name = _lane_namer(trace, device_args.lanes, offsets[rank])
        gpu_lane = np.array([(lane_name(pid, tid) or "").startswith("gpu:") for pid, tid in trace.lanes], dtype=bool)
        rows = row_rank == rank
        yield chrome_part(trace, fmt="kineto", rank=rank, ctx=ctx, lane_name=lane_name, offset_ns=offset_ns,
                          clock=clock, info={**info, "fused_ranks": len(ranks)}, rows=rows,
                          row_steps=row_steps(trace, gpu_lane, correlation, rows),
                          drop_reason="profiler bookkeeping spans", row_correlation=correlation, row_columns=columns,
                          counter_pid=frozenset(counter_pids.get(rank, ())))


register(Importer("kineto", "PyTorch profiler / Kineto trace JSON (.json, .json.gz)", sniff, read))
