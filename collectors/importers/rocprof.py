"""ROCm's rocprofv3 (rocprofiler-sdk) traces: its JSON output (``rocprofv3 --output-format json``,
``<pid>_results.json``) and its CSV trace files (``--output-format csv``: ``kernel_trace.csv``,
``memory_copy_trace.csv``, ``hip_api_trace.csv``, ...).

**JSON** (``{"rocprofiler-sdk-tool": [one object per profiled process]}``; rocprofiler-sdk's ``json`` output
schema): per process, ``agents`` (CPUs and GPUs, each ``id.handle``, ``type`` 2 for a GPU, its ``gpu_index`` or
``logical_node_type_id``), ``kernel_symbols`` (``kernel_id`` -> ``formatted_kernel_name``), ``strings.
buffer_records`` (per record kind, its ``kind`` name and the names of its ``operations``) and ``buffer_records``:

* ``kernel_dispatch``: device work, lane ``gpu:<gpu index>/stream <stream_id.handle>`` (the HIP stream, as Kineto
  on ROCm names it), or ``gpu:<gpu index>/queue <dispatch_info.queue_id.handle>`` (the HSA queue) where the
  record has no stream (older rocprofiler-sdk versions write none); cat ``kernel_dispatch``, named by its kernel symbol;
* ``memory_copy``: copies on the lane of the GPU end (the destination's, else the source's) and stream, else
  ``gpu:<N>/memory copy``; cat ``memory_copy``, named by the direction (``MEMORY_COPY_HOST_TO_DEVICE``), ``bytes``;
* ``hip_api``, ``hsa_api``, ``rccl_api``, ``marker_api`` and the other API lists: host calls on
  ``cpu/thread <thread_id>``, cat the record list's name, named by the operation.

Every record's ``correlation_id.internal`` goes into the ``correlation`` column: a HIP launch call and the kernel
it dispatched carry the same one (the GPU launch analyses pair them). Other record kinds (memory allocation,
scratch memory, page migration, counter collection) are counted as skipped with their kind. Times are ns of
the host's monotonic clock (rocprofiler's timestamps), not wall-clock time: the store's clock is ``relative``. One
process is one rank (the file name's number, else its position); a file of several processes gives one rank per
process, numbered after the other ranks.

**CSV** (:func:`read_csv`, the columns of ``rocprofv3``'s "Output file fields"): ``kernel_trace.csv``
(``Kind,Agent_Id,Queue_Id[,Stream_Id],...,Kernel_Name,Correlation_Id,Start_Timestamp,End_Timestamp``),
``memory_copy_trace.csv`` (``Kind,Direction,Source_Agent_Id,Destination_Agent_Id,Correlation_Id,...``) and the
API traces (``Domain,Function,Process_Id,Thread_Id,Correlation_Id,Start_Timestamp,End_Timestamp``), one file
each; the agent is as written (``Agent 2`` or ``2``: rocprofv3's agent index, which counts CPU agents too unless
``--agent-index type-relative``), so a CSV's lanes are ``gpu:agent<N>/...``. The files of one process (one folder,
one file name prefix: ``<pid>_kernel_trace.csv``, ``<pid>_hip_api_trace.csv``) are one rank, so its launches pair
with its kernels; one rank per process, in order of folder and pid (:func:`csv_rank`).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

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

FORMAT = "rocprofv3"
TOOL_KEY = b'"rocprofiler-sdk-tool"'
GPU_AGENT = 2  # rocprofiler_agent_type_t: ROCPROFILER_AGENT_TYPE_GPU


def sniff(head: bytes, path: Path) -> bool:
    """rocprofiler-sdk's JSON: an object whose first key is ``"rocprofiler-sdk-tool"``."""
    text = head.lstrip()
    return text.startswith(b"{") and text[1:200].lstrip().startswith(TOOL_KEY)


class _Rows:
    """(lane, cat, name, start, end, correlation, bytes) rows of one process, coded as they come."""

    def __init__(self, ctx: ImportContext):
        self.ctx = ctx
        self.lanes: dict[str, int] = {}
        self.keys: dict[tuple[str, str], int] = {}
        self.lane, self.key, self.start, self.end, self.corr, self.bytes = [], [], [], [], [], []
        self.read = 0

    def skip(self, reason: str, n: int = 1) -> None:
        if self.ctx.report is not None and n:
            self.ctx.report.skipped[reason] += n

    def add(self, lane: str, cat: str, name: str, start, end, correlation=-1, nbytes=-1) -> None:
        self.read += 1
        if not (isinstance(start, int) and isinstance(end, int)) or end < start or start < 0:
            self.skip("records without integer start and end timestamps (end >= start)")
            return
        self.lane.append(self.lanes.setdefault(lane, len(self.lanes)))
        self.key.append(self.keys.setdefault((cat, name), len(self.keys)))
        self.start.append(start)
        self.end.append(end)
        self.corr.append(correlation if isinstance(correlation, int) and correlation >= 0 else -1)
        self.bytes.append(nbytes if isinstance(nbytes, int) and nbytes >= 0 else -1)

    def part(self, path: Path, rank, info: dict) -> RankPart:
        start = np.array(self.start, dtype=np.int64)
        corr, nbytes = np.array(self.corr, dtype=np.int64), np.array(self.bytes, dtype=np.int64)
        extra = {"correlation": numbers(np.maximum(corr, 0), pa.int64(), corr < 0),
                 "bytes": numbers(np.maximum(nbytes, 0), pa.int64(), nbytes < 0)}
        timeline = build_timeline(
            rank=0 if isinstance(rank, tuple) else rank, lane_codes=np.array(self.lane, dtype=np.int64),
            lane_table=list(self.lanes), key_codes=np.array(self.key, dtype=np.int64), key_table=list(self.keys),
            start_ns=start, dur_ns=np.array(self.end, dtype=np.int64) - start, fmt=FORMAT, ctx=self.ctx,
            extra=extra)
        if self.ctx.report is not None:
            self.ctx.report.intervals += len(timeline)
            self.ctx.report.events += self.read
        return RankPart(rank=rank, timeline=timeline, info={"format": FORMAT, "file": str(path), "role": "worker",
                                                            **info}, clock="relative")


def _handle(value) -> int | None:
    """An ``{"handle": N}`` id (or a bare integer) as an int, else None."""
    value = value.get("handle") if isinstance(value, dict) else value
    return value if isinstance(value, int) else None


def _gpus(process: dict) -> dict[int, int]:
    """{agent handle: GPU number} of the process's GPU agents (``gpu_index``, else ``logical_node_type_id``)."""
    gpus = {}
    for agent in process.get("agents") or []:
        if not isinstance(agent, dict) or agent.get("type") != GPU_AGENT:
            continue
        handle = _handle(agent.get("id"))
        index = agent.get("gpu_index")
        if not isinstance(index, int) or index < 0:
            index = agent.get("logical_node_type_id")
        if handle is not None and isinstance(index, int):
            gpus[handle] = index
    return gpus


def _operation_names(process: dict) -> dict[str, list[str]]:
    """{record kind name, lower case (``hip_runtime_api``): its operations' names}, from ``strings``."""
    kinds = (process.get("strings") or {}).get("buffer_records") or []
    return {str(k.get("kind", "")).lower(): list(k.get("operations") or []) for k in kinds if isinstance(k, dict)}


#: Buffer record lists of host calls, and the ``strings.buffer_records`` kinds naming their operations (a record's
#: own ``kind`` says which; the first is the fallback).
_API_KINDS = {"hip_api": ("hip_runtime_api", "hip_compiler_api"),
              "hsa_api": ("hsa_core_api", "hsa_amd_ext_api", "hsa_image_ext_api", "hsa_finalize_ext_api"),
              "rccl_api": ("rccl_api",),
              "marker_api": ("marker_core_api", "marker_control_api", "marker_name_api", "marker_core_range_api"),
              "rocdecode_api": ("rocdecode_api",), "rocjpeg_api": ("rocjpeg_api",), "ompt": ("ompt",)}


def _read_process(process: dict, rows: _Rows) -> None:
    gpus = _gpus(process)
    symbols = {}
    for s in process.get("kernel_symbols") or []:
        if isinstance(s, dict):
            symbols[s.get("kernel_id")] = (s.get("formatted_kernel_name") or s.get("demangled_kernel_name")
                                           or s.get("kernel_name") or f"<kernel {s.get('kernel_id')}>")
    ops = _operation_names(process)
    kind_names = [str(k.get("kind", "")).lower() if isinstance(k, dict) else "" for k in
                  (process.get("strings") or {}).get("buffer_records") or []]
    records = process.get("buffer_records") or {}
    if not isinstance(records, dict):
        raise TypeError("'buffer_records' is not an object")
    for list_name, items in records.items():
        if not isinstance(items, list) or not items:
            continue
        objects = [r for r in items if isinstance(r, dict)]
        if len(objects) < len(items):
            rows.read += len(items) - len(objects)
            rows.skip("records that are not JSON objects", len(items) - len(objects))
        items = objects
        if list_name == "kernel_dispatch":
            for r in items:
                info = r.get("dispatch_info") or {}
                device = gpus.get(_handle(info.get("agent_id")))
                if device is None:
                    rows.read += 1
                    rows.skip("kernel dispatches on an agent the file does not list as a GPU")
                    continue
                stream = _handle(r.get("stream_id"))
                lane = f"gpu:{device}/stream {stream}" if stream is not None else \
                    f"gpu:{device}/queue {_handle(info.get('queue_id'))}"
                name = symbols.get(info.get("kernel_id"), f"<kernel {info.get('kernel_id')}>")
                rows.add(lane, "kernel_dispatch", name, r.get("start_timestamp"), r.get("end_timestamp"),
                         (r.get("correlation_id") or {}).get("internal"))
        elif list_name == "memory_copy":
            names = ops.get("memory_copy", [])
            for r in items:
                device = gpus.get(_handle(r.get("dst_agent_id")), gpus.get(_handle(r.get("src_agent_id"))))
                if device is None:
                    rows.read += 1
                    rows.skip("memory copies between agents the file does not list as GPUs")
                    continue
                stream = _handle(r.get("stream_id"))
                lane = f"gpu:{device}/stream {stream}" if stream is not None else f"gpu:{device}/memory copy"
                op = r.get("operation")
                name = names[op] if isinstance(op, int) and 0 <= op < len(names) else f"MEMORY_COPY {op}"
                rows.add(lane, "memory_copy", name, r.get("start_timestamp"), r.get("end_timestamp"),
                         (r.get("correlation_id") or {}).get("internal"), r.get("bytes", -1))
        elif list_name in _API_KINDS:
            for r in items:
                kind = r.get("kind")
                kind_name = kind_names[kind] if isinstance(kind, int) and 0 <= kind < len(kind_names) else ""
                names = ops.get(kind_name) or ops.get(_API_KINDS[list_name][0], [])
                op = r.get("operation")
                name = names[op] if isinstance(op, int) and 0 <= op < len(names) else f"{list_name} {op}"
                rows.add(f"cpu/thread {r.get('thread_id')}", list_name, name, r.get("start_timestamp"),
                         r.get("end_timestamp"), (r.get("correlation_id") or {}).get("internal"))
        else:
            rows.read += len(items)
            rows.skip(f"{list_name} records (not read)", len(items))


def read(path: Path, ctx: ImportContext):
    """One rank per process of the file (one process: the file name's rank, else its position)."""
    import msgspec

    source = ByteSource(path)
    raw = source.read_all()
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        if source.problems:  # the damaged gzip stream cut the document: say so once, without "kept"
            why = source.problems[0].removeprefix(f"{source.path}: ").split(" (kept", 1)[0].split("; kept", 1)[0]
            raise DdltraceError(f"{path}: {why}, inside its JSON document (a rocprofv3 JSON is read whole)") from exc
        raise DdltraceError(f"{path}: not a readable rocprofv3 JSON ({exc})") from exc
    if ctx.report is not None:
        ctx.report.problems.extend(source.problems)  # damage past the whole document (trailing garbage)
    processes = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if not isinstance(processes, list) or not processes or not all(isinstance(p, dict) for p in processes):
        raise DdltraceError(f"{path}: rocprofv3 JSON without a process ('rocprofiler-sdk-tool' must be a "
                            "non-empty list of objects)")
    for process in processes:
        meta = process.get("metadata") or {}
        pid = meta.get("pid")
        rows = _Rows(ctx)
        try:
            _read_process(process, rows)
        except (AttributeError, TypeError) as exc:
            raise DdltraceError(f"{path}: process {pid}: a record is not the rocprofv3 layout ({exc})") from exc
        host = (meta.get("node") or {}).get("hostname")
        info = {"host": host} if isinstance(host, str) else {}
        rank = rank_from_path(path, ctx.rank_from, ctx) if len(processes) == 1 else ("process", pid)
        yield rows.part(path, rank, info)


# ---------------------------------------------------------------------------------------------------------------
# CSV output (--output-format csv)

#: The header of each CSV trace file rocprofv3 writes, by the columns that say which it is.
_CSV_KINDS = {"kernel": ("Kind", "Kernel_Name", "Start_Timestamp"),
              "copy": ("Kind", "Direction", "Start_Timestamp"),
              "api": ("Domain", "Function", "Thread_Id", "Start_Timestamp")}
_AGENT_NUMBER = re.compile(r"(\d+)\s*$")


def _csv_kind(header: list[str]) -> str | None:
    return next((kind for kind, cols in _CSV_KINDS.items() if all(c in header for c in cols)), None)


def sniff_csv(head: bytes, path: Path) -> bool:
    """One of rocprofv3's CSV trace files: its header's columns (``"Kind","Agent_Id",...`` etc.)."""
    first = head.lstrip().split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    if not first.startswith('"') or "Start_Timestamp" not in first:
        return False
    header = next(csv.reader([first]), [])
    return _csv_kind([h.strip() for h in header]) is not None


def _agent(text: str) -> str:
    m = _AGENT_NUMBER.search(text or "")
    return m.group(1) if m else (text or "?")


def _int(text) -> int:
    return int(text) if text not in (None, "") else -1


def read_csv(path: Path, ctx: ImportContext):
    """One CSV trace file: kernels on ``gpu:agent<A>/stream <S>`` (``queue <Q>`` without ``Stream_Id``), copies on
    ``gpu:agent<A>/memory copy``, API calls on ``cpu/thread <T>``; the rank of its process (:func:`csv_rank`)."""
    source = ByteSource(path)
    text = source.read_all().decode("utf-8", "replace")
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    kind = _csv_kind(header)
    if kind is None:
        raise DdltraceError(f"{path}: not a rocprofv3 trace CSV (its header names none of kernel_trace's, "
                            "memory_copy_trace's or an API trace's columns)")
    rows, damaged, cut = _Rows(ctx), [], csv_rows.cut_line(text)
    times = [header.index(c) for c in ("Start_Timestamp", "End_Timestamp")]
    for fields in reader:
        if not fields:
            continue
        why = "the file ends inside it" if reader.line_num == cut else csv_rows.row_damage(fields, header, times)
        if why is not None:  # (a row run into the next by garbage, a row cut short: named, the rest kept)
            rows.read += 1
            damaged.append(f"line {reader.line_num} ({why})")
            continue
        r = dict(zip(header, fields, strict=True))
        start, end, corr = _int(r["Start_Timestamp"]), _int(r["End_Timestamp"]), _int(r.get("Correlation_Id"))
        if kind == "kernel":
            stream = r.get("Stream_Id")
            where = f"stream {stream}" if stream not in (None, "") else f"queue {r.get('Queue_Id')}"
            rows.add(f"gpu:agent{_agent(r.get('Agent_Id'))}/{where}", "kernel_dispatch", r.get("Kernel_Name") or "",
                     start, end, corr)
        elif kind == "copy":
            src, dst = r.get("Source_Agent_Id") or "", r.get("Destination_Agent_Id") or ""
            direction = (r.get("Direction") or "").removeprefix("MEMORY_COPY_")
            device = src if direction.startswith("DEVICE") else dst
            stream = r.get("Stream_Id")
            where = f"stream {stream}" if stream not in (None, "") else "memory copy"
            rows.add(f"gpu:agent{_agent(device)}/{where}", "memory_copy", f"MEMORY_COPY_{direction}", start, end,
                     corr, _int(r.get("Bytes")) if r.get("Bytes") else -1)
        else:
            domain = (r.get("Domain") or "").lower()
            cat = "hip_api" if domain.startswith("hip") else "hsa_api" if domain.startswith("hsa") else \
                "rccl_api" if domain.startswith("rccl") else "marker_api" if domain.startswith("marker") else domain
            rows.add(f"cpu/thread {r.get('Thread_Id')}", cat, r.get("Function") or "", start, end, corr)
    if damaged:
        if rows.read == len(damaged):  # (nothing else read)
            raise DdltraceError(f"{path}: every row of the rocprofv3 trace CSV is damaged: {csv_rows.listed(damaged)}")
        rows.skip("damaged CSV rows (named in the problem line)", len(damaged))
    if ctx.report is not None:
        if damaged:
            ctx.report.problems.append(csv_rows.problem(path, damaged))
        ctx.report.problems.extend(source.problems)
    yield rows.part(path, csv_rank(path, ctx), {})


#: A CSV trace file's name: rocprofv3's output file prefix (``-o``, by default ``%pid%``), then the domain.
_CSV_NAME = re.compile(r"(?i)^(.*?)_?(kernel|memory_copy|[a-z]+_api)_trace\.csv(\.gz)?$")
_LEADING_NUMBER = re.compile(r"^(\d+)")
_RANK_WORD = re.compile(r"(?i)rank[-_.]?(\d+)")


def csv_rank(path: Path, ctx: ImportContext) -> int | tuple:
    """The rank of a CSV trace file. ``--rank-from auto``: the number after ``rank`` in the file name
    (``rank3_kernel_trace.csv``, from ``-o rank%rank%``), else the process: rocprofv3 writes one process's domains
    as ``<prefix>_<domain>_trace.csv`` in one folder (by default ``<hostname>/<pid>_kernel_trace.csv``), so the
    files of one folder and prefix are one rank (an identity the command numbers after the other ranks, in order of
    folder, then pid: the prefix's leading number, then prefix). Only the API traces carry a ``Process_Id``
    column, so the pid is the name's. Other modes: :func:`rank_from_path`."""
    if ctx.rank_from != "auto":
        return rank_from_path(path, ctx.rank_from, ctx)
    named = _RANK_WORD.search(path.name)
    if named:
        return int(named.group(1))
    m = _CSV_NAME.match(path.name)
    prefix = m.group(1) if m else path.name
    pid = _LEADING_NUMBER.match(prefix)
    return ("rocprofv3 process", str(path.parent), int(pid.group(1)) if pid else -1, prefix)


register(Importer(FORMAT, "ROCm rocprofv3 (rocprofiler-sdk) JSON (--output-format json)", sniff, read))
register(Importer("rocprofv3-csv", "ROCm rocprofv3 CSV trace (kernel_trace.csv, memory_copy_trace.csv, "
                                   "*_api_trace.csv)", sniff_csv, read_csv))
