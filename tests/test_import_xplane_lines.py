"""A TensorFlow 2 device plane's derived lines (Steps, TensorFlow Ops, Name Scope, XLA, Source) annotate its stream
lines: they are never device time, and the Steps line gives the step boundaries. Checked on a real multi-worker
GPU XPlane (tensorflow/profiler's demo: 8 V100 planes, two of them with kernels) against the file's own lines,
walked here with the bare protobuf wire reader, and on a trace-viewer JSON in xprof's layout."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest
from shared_data import SHARED
from xplane_wire import xplane_lines

from ddltrace.analyses.phases import segment_rank
from ddltrace.cli import main
from ddltrace.collectors.importers import protowire as pw
from ddltrace.store import TraceStore

MULTIWORKER = SHARED / "gpu_traces/tf2_gpu_multiworker.xplane.pb"


def _device_lines(path: Path) -> dict:
    """{(device, line name): [(start ps, duration ps)]} of every GPU plane, from the XSpace fields themselves
    (XSpace.planes = 1; XPlane.name = 2, lines = 3; XLine.name = 2, timestamp_ns = 3, events = 4,
    display_name = 11; XEvent.offset_ps = 2, duration_ps = 3)."""
    lines = defaultdict(list)
    for number, _kind, plane in pw.fields(path.read_bytes()):
        if number != 1:
            continue
        plane_fields = list(pw.fields(pw.message(plane)))
        name = next(pw.text(v) for n, _k, v in plane_fields if n == 2)
        if not name.startswith("/device:GPU:"):
            continue
        for line_name, base_ns, events in xplane_lines(plane_fields):
            spans = []
            for event in events:
                e = {en: pw.signed(ev) for en, _ek, ev in event if en in (2, 3)}
                spans.append((base_ns * 1000 + e.get(2, 0), e.get(3, 0)))
            lines[name.removeprefix("/device:").lower(), line_name] += spans
    return lines


@pytest.mark.skipif(not MULTIWORKER.exists(), reason="shared GPU traces absent")
def test_steps_and_op_lines_are_not_device_time(tmp_path, capsys):
    lines = _device_lines(MULTIWORKER)
    steps = {device: events for (device, line), events in lines.items() if line == "Steps"}
    assert sorted(steps) == ["gpu:4", "gpu:6"]  # the 41 ms the issue saw counted as compute
    assert main(["import", str(MULTIWORKER), "--out", str(tmp_path / "s")]) == 0
    assert "derived device lines (Steps" in capsys.readouterr().out
    timeline = TraceStore.open(tmp_path / "s").timeline()
    on_gpu = timeline[timeline["lane"].str.startswith("gpu:")]
    streams = {(device, line) for (device, line) in lines if line.startswith("Stream #")}
    assert set(on_gpu["lane"]) == {f"{device}/{line}" for device, line in streams}
    # device time is the stream lines' time, to the ns (the file's picoseconds floored per event)
    for device in ("gpu:4", "gpu:6"):
        kernels = sum(d // 1000 for (dev, line), ev in lines.items() if dev == device and "(Compute)" in line
                      for _s, d in ev)
        mine = on_gpu[on_gpu["lane"].str.startswith(device + "/")]
        assert mine.loc[mine["category"] == "compute", "dur_ns"].sum() == kernels
        # the Steps event bounds step 0: exactly the device's stream events that start within it
        ((step_start, step_dur),) = steps[device]
        inside = sum(step_start <= s < step_start + step_dur for (dev, line), ev in lines.items()
                     if (dev, line) in streams and dev == device for s, _d in ev)
        assert inside > 600 and (mine["step"] == 0).sum() == inside
    # step 0 ran on gpu:4 and, 628 ms later, on gpu:6 (QA: read as one step of 669 ms, 94 % of it the gap between):
    # a step on each device, within its Steps event, and a note that says so
    phases = segment_rank(timeline)
    assert phases.method == "markers" and phases.steps["step"].tolist() == [0, 0]
    for device, (start, end) in zip(("gpu:4", "gpu:6"), phases.steps[["start_ns", "end_ns"]].to_numpy(), strict=True):
        ((step_start, step_dur),) = steps[device]
        assert step_start // 1000 <= start < end <= (step_start + step_dur) // 1000 + 1
        assert end - start > 0.95 * step_dur / 1000
    gap = phases.steps["start_ns"].iloc[1] - phases.steps["end_ns"].iloc[0]
    assert 627e6 < gap < 629e6 and len(phases.notes) == 1 and "lie 628 ms apart: taken as 2 steps" in phases.notes[0]


def test_trace_viewer_json_steps_line(tmp_path):
    """The same in the trace-viewer JSON (xprof's layout): a device's Steps thread is dropped and numbers the
    stream events that start inside it; a step event outside any step keeps none."""
    gpu, host = 1, 701
    events = [{"pid": host, "name": "process_name", "ph": "M", "args": {"name": "/host:CPU"}},
              {"pid": gpu, "name": "process_name", "ph": "M", "args": {"name": "/device:GPU:0"}},
              {"pid": gpu, "tid": 1, "name": "thread_name", "ph": "M", "args": {"name": "Steps"}},
              {"pid": gpu, "tid": 2, "name": "thread_name", "ph": "M", "args": {"name": "XLA Modules"}},
              {"pid": gpu, "tid": 7, "name": "thread_name", "ph": "M", "args": {"name": "Stream #7(Compute)"}},
              {"pid": host, "tid": 5, "name": "thread_name", "ph": "M", "args": {"name": "tf_Compute/5"}},
              {"pid": gpu, "tid": 1, "ts": 100.0, "dur": 400.0, "ph": "X", "name": "41",
               "args": {"group_id": "41", "step_name": "41"}},
              {"pid": gpu, "tid": 1, "ts": 500.0, "dur": 400.0, "ph": "X", "name": "42",
               "args": {"group_id": "42", "step_name": "42"}},
              {"pid": gpu, "tid": 2, "ts": 110.0, "dur": 700.0, "ph": "X", "name": "cluster_0"},
              {"pid": gpu, "tid": 7, "ts": 120.0, "dur": 300.0, "ph": "X", "name": "volta_sgemm_128x64_nn"},
              {"pid": gpu, "tid": 7, "ts": 520.0, "dur": 100.0, "ph": "X", "name": "volta_sgemm_64x64_nn"},
              {"pid": gpu, "tid": 7, "ts": 950.0, "dur": 10.0, "ph": "X", "name": "late_kernel"},
              {"pid": host, "tid": 5, "ts": 130.0, "dur": 5.0, "ph": "X", "name": "MatMul"}]
    path = tmp_path / "host.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}).encode()))
    assert main(["import", str(path), "--out", str(tmp_path / "s")]) == 0
    timeline = TraceStore.open(tmp_path / "s").timeline().set_index("name")
    assert set(timeline["lane"]) == {"gpu:0/Stream #7(Compute)", "host:cpu/tf_Compute/5"}
    assert timeline.loc["volta_sgemm_128x64_nn", "step"] == 41 and timeline.loc["volta_sgemm_64x64_nn", "step"] == 42
    assert timeline["step"].isna()[["late_kernel", "MatMul"]].all()
    device = timeline[timeline["lane"].str.startswith("gpu:")]
    assert device["dur_ns"].sum() == (300 + 100 + 10) * 1000  # the kernels, not the 800 us of Steps


TF2_PROFILE = Path(__file__).resolve().parent / "data" / "tf2_profile" / "worker0" / "vm.xplane.pb"


def test_a_truncated_xspace_keeps_its_complete_planes(tmp_path, capsys):
    """The real TF 2.21 XSpace cut short: its planes before the cut are imported, the cut is named (it was
    'not a readable XPlane protobuf' and nothing was kept, even when only the trailing host names were cut)."""
    data = TF2_PROFILE.read_bytes()
    planes = [pw.message(v) for n, _k, v in pw.fields(data) if n == 1]
    assert len(planes) == 2 and data.endswith(planes[1] + data[-4:])  # host plane, Task Environment, host names
    assert main(["import", str(TF2_PROFILE), "--out", str(tmp_path / "clean")]) == 0
    clean = TraceStore.open(tmp_path / "clean").timeline()
    capsys.readouterr()
    for name, cut in (("names", len(data) - 1), ("task", len(data) - 4 - len(planes[1]) // 2)):
        damaged = tmp_path / name / "vm.xplane.pb"
        damaged.parent.mkdir()
        damaged.write_bytes(data[:cut])
        assert main(["import", str(damaged), "--out", str(tmp_path / f"{name}-store")]) == 0
        out = capsys.readouterr().out
        kept = len(planes) if name == "names" else 1
        assert f"{damaged}: the XSpace is damaged after its plane {kept} (a field runs past the end" in out, out
        timeline = TraceStore.open(tmp_path / f"{name}-store").timeline()
        assert len(timeline) == len(clean) and list(timeline["name"]) == list(clean["name"])
        assert list(timeline["dur_ns"]) == list(clean["dur_ns"])
        if name == "names":  # the Task Environment plane is kept: its profile start puts times on the epoch
            assert list(timeline["start_ns"]) == list(clean["start_ns"])


def _field_offsets(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(field number, key offset, value offset, value end) of each length-delimited or varint field of the message
    at data[start:end]."""
    out, pos = [], start
    while pos < end:
        key_at = pos
        key, pos = pw.varint(data, pos)
        if key & 7 == 0:
            _value, after = pw.varint(data, pos)
            out.append((key >> 3, key_at, pos, after))
        else:
            size, pos = pw.varint(data, pos)
            out.append((key >> 3, key_at, pos, pos + size))
        pos = out[-1][3]
    return out


@pytest.mark.skipif(not MULTIWORKER.exists(), reason="shared GPU traces absent")
def test_a_damaged_plane_or_line_inside_the_xspace_is_named_and_the_rest_kept(tmp_path, capsys):
    """Bytes damaged inside the real XSpace (QA: 64 random bytes dropped GPU:4's whole plane, or 5,367 events of a
    host line, with only "skipped 1 event(s)" said): a plane that does not decode is named with what was lost; a
    line damaged part way keeps its events before the damage and says how many; the other planes are whole."""
    data = MULTIWORKER.read_bytes()
    planes = {}
    for number, _key, start, end in _field_offsets(data, 0, len(data)):
        if number == 1:
            fields = _field_offsets(data, start, end)
            name = next(pw.text(data[s:e]) for n, _k, s, e in fields if n == 2)
            planes[name] = fields
    assert main(["import", str(MULTIWORKER), "--out", str(tmp_path / "clean")]) == 0
    clean = TraceStore.open(tmp_path / "clean").timeline()
    capsys.readouterr()

    # GPU:4's first event-metadata entry given a key of wire type 7: the plane's own fields no longer decode
    meta_key = next(s for n, _k, s, _e in planes["/device:GPU:4"] if n == 4)
    broken = bytearray(data)
    broken[meta_key] = (1 << 3) | 7
    plane_cut = tmp_path / "plane" / "vm.xplane.pb"
    plane_cut.parent.mkdir()
    plane_cut.write_bytes(bytes(broken))
    assert main(["import", str(plane_cut), "--out", str(tmp_path / "plane-store")]) == 0
    out = capsys.readouterr().out
    assert (f"problem: {plane_cut}: plane /device:GPU:4 does not decode (unsupported wire type 7): its events are "
            "lost; the other planes are kept") in out, out
    kept = TraceStore.open(tmp_path / "plane-store").timeline()
    assert not kept["lane"].astype(str).str.startswith("gpu:4/").any()
    assert len(kept) == len(clean) - clean["lane"].astype(str).str.startswith("gpu:4/").sum()
    assert main(["info", str(tmp_path / "plane-store")]) == 0
    assert f"problem     {plane_cut}: plane /device:GPU:4 does not decode" in capsys.readouterr().out

    # the host plane's longest line: its 11th event's key given wire type 7, the 10 before it kept
    lines = [(s, e) for n, _k, s, e in planes["/host:CPU"] if n == 3]
    start, end = max(lines, key=lambda se: sum(1 for f in _field_offsets(data, *se) if f[0] == 4))
    line_fields = _field_offsets(data, start, end)
    name = next(pw.text(data[s:e]) for n, _k, s, e in line_fields if n == 2)  # (its display name follows the events)
    events = [k for n, k, _s, _e in line_fields if n == 4]
    broken = bytearray(data)
    broken[events[10]] = (4 << 3) | 7
    line_cut = tmp_path / "line" / "vm.xplane.pb"
    line_cut.parent.mkdir()
    line_cut.write_bytes(bytes(broken))
    assert main(["import", str(line_cut), "--out", str(tmp_path / "line-store")]) == 0
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "problem:" in line]
    assert len(said) == 1 and f"line {name} of plane /host:CPU is damaged after its event 10 (unsupported wire " \
        "type 7): those 10 are kept, the rest of the line is lost" in said[0], out
    kept = TraceStore.open(tmp_path / "line-store").timeline()
    assert len(kept) == len(clean) - (len(events) - 10)
