"""TensorFlow traces: the 1.x timeline JSON (``timeline.Timeline(step_stats).generate_chrome_trace_format``)
and the 2.x profiler's trace-viewer JSON (TensorBoard's, or the old ``<host>.trace.json.gz``).

TF1: pids are "<device> Compute" / "<device> Tensors" processes (the same device can appear twice: merged by
name), tids are packing lanes, ``ts`` µs since the epoch. ``/stream:all`` duplicates every GPU kernel and is
dropped; ``/memcpy`` repeats every copy of the streams: a copy there that is also on a stream is dropped and
its stream's copy is a copy whatever its name (:func:`_memcpy_twins`). A GPU's ``/stream:N`` and ``/memcpy``
processes are its device lanes; the GPU's own process holds the executor's op times (host work: lanes
``host/gpu:0 executor/lane N``, :func:`tf1_lane_prefix`). The producing worker is the ``/job:worker/task:k``
device with most ops; work on other tasks' devices (parameter servers) becomes those tasks' ranks, numbered after
the workers.

TF2: pids are devices named by ``process_name`` (``/host:CPU``, ``/device:GPU:0``), ``ts`` is µs since the
profile started (no absolute time in the JSON). On device planes the derived lines (Steps, TensorFlow Ops/Name
Scope, XLA Ops/Modules, ...: :mod:`xprof_lines`) annotate the stream kernels and are dropped; the ``Steps`` line
numbers the stream events that start within each step, as in the XPlane reader. Ops take their
``args.long_name`` (``node:OpType``) and ``tf.function`` spans (``args.tf_function_call``) the cat
``tf_function``, as in the XPlane reader.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np

from ddltrace.collectors.importers.base import ImportContext, Importer, rank_from_path, register
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.collectors.importers.convert import chrome_part, record
from ddltrace.collectors.importers.xprof_lines import DERIVED_LINES, DROPPED, STEP_LINE, step_number, steps_of_rows

_SNIFF_TF1 = re.compile(rb'"(/job:[^"]*|/device:[^"]*|/(gpu|cpu):\d+[^"]*) (Compute|Tensors)"|"Allocators"')
_SNIFF_TF2 = re.compile(rb'"/host:CPU"|"/device:(GPU|TPU|CPU):\d+"|"highres-ticks"')
_DEVICE = re.compile(r"^(?:/job:(?P<job>[^/]+)/replica:\d+/task:(?P<task>\d+))?"
                     r"(?:/device:|/)(?P<kind>[A-Za-z]+):(?P<index>\d+)(?P<rest>/.*)?$")
_STEP = re.compile(r"^\S+ (\d+)$")


def tf1_lane_prefix(m: re.Match) -> str:
    """The lane prefix of a TF1 device name matched by ``_DEVICE``: a GPU's streams and copies
    (``/device:GPU:0/stream:7``, ``.../memcpy``) are the device's lanes (``gpu:0/stream:7``); the GPU itself
    (``/device:GPU:0``, no stream) is the executor's record of the ops it placed there, from launch to launch
    done on a host thread, so ``host/gpu:0 executor``: host time, never device time."""
    kind, index, rest = m.group("kind").lower(), m.group("index"), m.group("rest") or ""
    if not rest and kind != "cpu":
        return f"host/{kind}:{index} executor"
    return f"{kind}:{index}{rest}"


def sniff_tf1(head: bytes, path: Path) -> bool:
    return bool(_SNIFF_TF1.search(head))


def sniff_tf2(head: bytes, path: Path) -> bool:
    return bool(_SNIFF_TF2.search(head))


def read_tf1(path: Path, ctx: ImportContext):
    trace = read_chrome(path, processes=ctx.processes)
    record(ctx, trace)
    devices: dict = {}
    for pid, pname in trace.process_names.items():
        if pname.endswith(" Compute"):
            m = _DEVICE.match(pname[:-len(" Compute")])
            if m:
                devices[pid] = m
    # rows per (job, task): the worker with the most ops is the file's producer
    lane_pid = np.array([pid for pid, _ in trace.lanes], dtype=object)
    row_pid = lane_pid[trace.lane_key] if len(trace.lane_key) else np.empty(0, dtype=object)
    ident_of_pid = {pid: (m.group("job") or "localhost", int(m.group("task") or 0)) for pid, m in devices.items()}
    ident_list = sorted(set(ident_of_pid.values()))
    ident_code = {ident: i for i, ident in enumerate(ident_list)}
    pid_code = {pid: ident_code[ident] for pid, ident in ident_of_pid.items()}
    row_code = np.array([pid_code.get(p, -1) for p in row_pid], dtype=np.int64)
    ops = Counter({ident: int((row_code == ident_code[ident]).sum()) for ident in ident_list})
    if ctx.report is not None:
        no_device = int((row_code < 0).sum())
        if no_device:
            ctx.report.skipped["events outside a '<device> Compute' process"] += no_device
    producer = max((i for i in ops if i[0] in ("worker", "localhost")), key=lambda i: ops[i], default=None)
    twin = _memcpy_twins(trace, devices, row_pid)

    def lane(pid, tid):
        m = devices.get(pid)
        if m is None:
            return None
        rest = m.group("rest") or ""
        if rest == "/stream:all":
            return None
        return f"{tf1_lane_prefix(m)}/lane {tid}"

    for ident in ident_list:
        job, task = ident
        mine = row_code == ident_code[ident]
        rows = np.flatnonzero(mine & ~twin)
        if ctx.report is not None and (mine & twin).any():
            ctx.report.dropped[_MEMCPY_TWIN] += int((mine & twin).sum())
        if not len(rows):
            continue
        if job in ("worker", "localhost"):
            rank = rank_from_path(path, ctx.rank_from, ctx, default=task) if ident == producer else task
        else:
            rank = (job, task)
        yield chrome_part(trace, fmt="tf1", rank=rank, ctx=ctx, lane_name=lane, rows=rows, clock="epoch",
                          info={"role": job, "task": task, "device_job": f"/job:{job}/task:{task}"},
                          drop_reason="duplicate GPU events (/stream:all)")


_MEMCPY_TWIN = "duplicate GPU copies (/memcpy: TF1 records each copy there and on its stream)"
#: The cat a TF1 copy on a stream gets (its own cat is "Op", its name often the op that asked for it): memcpy by the
#: rule ``tf1-gpu-copy`` of categories.toml.
TF1_COPY_CAT = "gpu_memcpy"


def _memcpy_twins(trace, devices: dict, row_pid: np.ndarray) -> np.ndarray:
    """Per interval: True for a copy on a GPU's ``/memcpy`` process that is also on one of that GPU's
    ``/stream:N`` processes (same name, start and duration). TF1's GPU tracer saves every memcpy record twice,
    to ``/gpu:N/memcpy`` and to the stream it ran on (``gpu_tracer.cc``: ``collector->Save(memcpy_device, ns);
    collector->Save(stream_device + stream_id, nscopy)``), as it saves every kernel to ``/stream:all``: kept
    both ways, each copy was counted twice. The twin on the stream is kept, on its stream, with the cat
    :data:`TF1_COPY_CAT` (``trace.keys`` and ``trace.key`` are changed here): TF1 names a copy by the op it
    serves (``MatMul``), so its name alone would make it a kernel. A ``/memcpy`` copy with no twin is kept."""
    twin = np.zeros(len(row_pid), dtype=bool)
    where = {}  # pid -> (device, "memcpy" | "stream")
    for pid, m in devices.items():
        rest = m.group("rest") or ""
        device = (m.group("job"), m.group("task"), m.group("kind").lower(), m.group("index"))
        if rest == "/memcpy":
            where[pid] = (device, "memcpy")
        elif re.fullmatch(r"/stream:\d+", rest):
            where[pid] = (device, "stream")
    if not len(row_pid) or "memcpy" not in {kind for _d, kind in where.values()}:
        return twin
    names = [name for _cat, name in trace.keys]
    kind = [where.get(p, (None, ""))[1] for p in row_pid]
    on_streams: dict[tuple, list[int]] = {}
    for j in (j for j, k in enumerate(kind) if k == "stream"):
        key = (where[row_pid[j]][0], names[trace.key[j]], int(trace.ts_ns[j]), int(trace.dur_ns[j]))
        on_streams.setdefault(key, []).append(j)
    codes = {k: i for i, k in enumerate(trace.keys)}
    new_key = trace.key.copy()
    for i in (i for i, k in enumerate(kind) if k == "memcpy"):
        same = on_streams.get((where[row_pid[i]][0], names[trace.key[i]], int(trace.ts_ns[i]), int(trace.dur_ns[i])))
        if same:
            twin[i] = True
            j = same.pop(0)
            copy_key = (TF1_COPY_CAT, names[trace.key[j]])
            if copy_key not in codes:
                codes[copy_key] = len(trace.keys)
                trace.keys.append(copy_key)
            new_key[j] = codes[copy_key]
    trace.key = new_key
    return twin


def _tf2_label(cat: str, name: str, args: dict) -> tuple[str, str]:
    """An op as ``<node>:<OpType>`` (its ``long_name``, the name the XPlane reader gives it); the span of a
    ``tf.function`` call (named after the Python function) under cat ``tf_function``, as in the XPlane."""
    if "tf_function_call" in args:
        return "tf_function", name
    long_name = args.get("long_name")
    return cat, long_name if isinstance(long_name, str) and long_name else name


def _row_steps(trace) -> np.ndarray:
    """Each interval's step (-1: none): a host step marker's own number (``train 3``), else the step of its
    device's ``Steps`` line that its start falls in."""
    marker = np.array([int(m.group(1)) if (m := _STEP.match(name)) and not name.startswith(("stream", "line"))
                       else -1 for _cat, name in trace.keys], dtype=np.int64)
    steps = marker[trace.key] if len(trace.key) else np.empty(0, dtype=np.int64)
    devices = {pid: i for i, pid in enumerate(dict.fromkeys(
        pid for pid, _ in trace.lanes if not (trace.process_names.get(pid) or "").startswith("/host:")))}
    lane_device = np.array([devices.get(pid, -1) for pid, _ in trace.lanes], dtype=np.int64)
    is_step_lane = np.array([devices.get(pid) is not None and trace.thread_names.get((pid, tid)) == STEP_LINE
                             for pid, tid in trace.lanes], dtype=bool)
    if not len(steps) or not is_step_lane.any():
        return steps
    rows = np.flatnonzero(is_step_lane[trace.lane_key])
    numbers = np.array([step_number(trace.keys[k][1], i) for i, k in enumerate(trace.key[rows])], dtype=np.int64)
    ts, dur = trace.ts_ns, trace.dur_ns
    from_lines = steps_of_rows(lane_device[trace.lane_key], ts, lane_device[trace.lane_key[rows]], ts[rows],
                               ts[rows] + dur[rows], numbers)
    return np.where(steps < 0, from_lines, steps)


def read_tf2(path: Path, ctx: ImportContext):
    trace = read_chrome(path, relabel=_tf2_label, processes=ctx.processes)
    record(ctx, trace)

    def lane(pid, tid):
        proc = trace.process_names.get(pid) or f"pid {pid}"
        thread = trace.thread_names.get((pid, tid), "") or f"line {tid}"
        on_device = not proc.startswith("/host:")
        if on_device and thread in DERIVED_LINES:
            return None
        short = proc.replace("/device:", "").replace("/host:", "host:").lower()
        return f"{short}/{thread}"

    yield chrome_part(trace, fmt="tf2", rank=rank_from_path(path, ctx.rank_from, ctx), ctx=ctx, lane_name=lane,
                      clock="relative", row_steps=_row_steps(trace), info={"time_base": "µs since the profile started"},
                      drop_reason=DROPPED)


register(Importer("tf1", "TensorFlow 1.x timeline JSON (client.timeline)", sniff_tf1, read_tf1))
register(Importer("tf2", "TensorFlow 2 profiler trace-viewer JSON (.json, .json.gz)", sniff_tf2, read_tf2))
