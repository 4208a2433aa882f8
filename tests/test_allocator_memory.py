"""Memory the framework's allocator held (analyses/allocator_memory.py), from PyTorch's ``[memory]`` events, on two
real Kineto traces: HTA's df_index_resolver (PyTorch 1.13: the events carry the allocator's totals) and the
TensorBoard plugin's ResNet-50 sample (PyTorch 1.8: each event's bytes only), each figure computed here from the JSON
itself: per device (``Device Type``, ``Device Id``), the events in time order (file order within a time), the
allocated bytes after each (``Total Allocated``, else the events' ``Bytes`` summed), their maximum and the first time
at it (the file's decimal µs times 1000, exact ns), and for a GPU its memory (``deviceProperties``' ``totalGlobalMem``)
and the peak's share of it."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from itertools import accumulate
from pathlib import Path

import pytest
from shared_data import SHARED

from ddltrace.cli import main

DF = SHARED / "hta_traces" / "df_index_resolver"
RESNET = SHARED / "wild_traces" / "kineto_tb_resnet50_w0"


def _truth(folder) -> dict:
    """Per device as ddltrace names it of the folder's one trace: events, basis, peak bytes and its time (ns), first
    and last bytes (:func:`_truth_of`)."""
    (path,) = folder.glob("*.json.gz")
    return _truth_of(path)


def _truth_of(path) -> dict:
    """Per device as ddltrace names it of one trace file: see :func:`_truth`."""
    trace = json.loads(gzip.open(path).read(), parse_float=Decimal)
    events = trace["traceEvents"]
    memory = {f"gpu:{d['id']}": d["totalGlobalMem"] for d in trace.get("deviceProperties", [])}
    per: dict[str, list] = {}
    for e in events:
        if e.get("ph") == "i" and e.get("name") == "[memory]":
            args = e["args"]
            device = "cpu" if args["Device Type"] == 0 else f"gpu:{args['Device Id']}"
            per.setdefault(device, []).append((int(Decimal(e["ts"]) * 1000), args))
    out = {}
    for device, rows in per.items():
        rows.sort(key=lambda r: r[0])  # (stable: file order within one time)
        total = all("Total Allocated" in a for _, a in rows)
        held = [a["Total Allocated"] for _, a in rows] if total else list(accumulate(a["Bytes"] for _, a in rows))
        at = held.index(max(held))
        out[device] = {"events": len(rows), "basis": "total" if total else "since the trace began",
                       "peak_bytes": max(held), "peak_ns": rows[at][0], "start_bytes": held[0], "end_bytes": held[-1],
                       "allocations": sum(a["Bytes"] > 0 for _, a in rows), "first_ns": rows[0][0]}
        if all("Total Reserved" in a for _, a in rows):
            out[device]["reserved_peak_bytes"] = max(a["Total Reserved"] for _, a in rows)
        if device in memory:  # the device's memory (deviceProperties) and the peak's share of it
            out[device].update(device_memory_bytes=memory[device], peak_share_of_device=max(held) / memory[device])
    return out


@pytest.mark.parametrize("folder", [DF, RESNET], ids=["df_index_resolver", "tb_resnet50"])
def test_the_allocator_s_peak_is_the_file_s(folder, capsys):
    if not folder.is_dir():
        pytest.skip(f"{folder} absent (../shared)")
    truth = _truth(folder)
    assert main(["analyze", str(folder), "--json"]) == 0
    captured = capsys.readouterr()
    (store,) = json.loads(captured.out)["stores"]
    got = {row["device"]: row for row in store["memory"]["allocator"]}
    assert set(got) == set(truth) and "allocator" in store["capabilities"]
    for device, want in truth.items():
        mine = {k: got[device][k] for k in want}
        assert mine == want, device
    n = sum(t["events"] for t in truth.values())
    assert f"skipped {n} event(s): [memory] events (PyTorch's allocator), kept as counters" in captured.err


def test_a_cpu_job_s_allocator_is_shown_without_device_work(capsys, tmp_path):
    """A real 2-rank gloo job profiled with profile_memory (tests/data/torch_gloo_memory: the CPU allocator's events,
    no device): its allocator's figures per rank, each the file's, in the text, the JSON and the report (they were
    read for ranks with device work only)."""
    folder = Path(__file__).parent / "data" / "torch_gloo_memory"
    assert main(["analyze", str(folder), "--json"]) == 0
    (store,) = json.loads(capsys.readouterr().out)["stores"]
    assert not store["gpu"] and "allocator" in store["capabilities"]
    rows = store["memory"]["allocator"]
    for rank in (0, 1):
        path = folder / f"rank{rank}.pt.trace.json.gz"
        truth = _truth_of(path)["cpu"]
        assert truth["basis"] == "total" and set(_truth_of(path)) == {"cpu"}
        base = json.loads(gzip.open(path).read())["baseTimeNanoseconds"]  # (times since boot to the epoch)
        truth.update(peak_ns=truth["peak_ns"] + base, first_ns=truth["first_ns"] + base)
        (row,) = [r for r in rows if r["rank"] == rank]
        assert {k: row[k] for k in truth} == truth
    assert main(["analyze", str(folder)]) == 0
    text = capsys.readouterr().out
    assert f"Allocator memory of {folder}: 2 ranks" in text
    assert main(["report", str(folder), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert (tmp_path / "r" / "allocator.png").is_file()
    assert "Memory the framework's allocator held" in (tmp_path / "r" / "report.md").read_text()


def test_damaged_allocator_events_keep_what_they_hold(tmp_path, capsys):
    """Allocator events whose args are damaged (null, a list for the device, text for the bytes) are kept as far as
    they hold numbers, and the import goes on; the reserve is sampled where it changed only, its peak the same."""
    def memory(ts, args):
        return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "args": args}

    def good(ts, nbytes, total, reserved):
        return memory(ts, {"Device Type": 1, "Device Id": 0, "Bytes": nbytes, "Total Allocated": total,
                           "Total Reserved": reserved})

    events = [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
              {"ph": "X", "name": "gemm", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10, "dur": 50,
               "args": {"device": 0, "stream": 7, "correlation": 1}},
              good(10, 512, 512, 2048), good(20, 1024, 1536, 2048), good(30, -512, 1024, 4096),
              memory(40, None), memory(50, {"Device Type": [1], "Bytes": "many"}), good(60, -1024, 0, 4096)]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    assert main(["import", str(tmp_path / "t.json"), "--out", str(tmp_path / "s"), "--progress", "never"]) == 0
    from ddltrace.store import TraceStore

    counters = TraceStore.open(tmp_path / "s").counters()
    by = {name: part["value"].tolist() for name, part in counters.groupby("name")}
    assert by == {"gpu0_alloc_bytes": [512.0, 1024.0, -512.0, -1024.0],
                  "gpu0_allocated_bytes": [512.0, 1536.0, 1024.0, 0.0], "gpu0_reserved_bytes": [2048.0, 4096.0]}
    assert "skipped 6 event(s): [memory] events" in capsys.readouterr().out


def test_the_report_shows_the_allocator_s_table_and_figure(tmp_path):
    if not DF.is_dir():
        pytest.skip(f"{DF} absent (../shared)")
    assert main(["report", str(DF), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    assert (tmp_path / "r" / "allocator.png").is_file() and "Memory the framework's allocator held" in text
    assert "6.17 GiB" in text and "51.9 %" in text  # gpu:1's peak and its share of the reserve (the file's figures)


def test_device_properties_that_are_not_sizes_are_named_and_left_out(tmp_path, capsys):
    trace = {"schemaVersion": 1, "deviceProperties": [{"id": "zero", "totalGlobalMem": 10}],
             "traceEvents": [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}
    (tmp_path / "t.json").write_text(json.dumps(trace))
    assert main(["import", str(tmp_path / "t.json"), "--out", str(tmp_path / "s"), "--progress", "never"]) == 0
    captured = capsys.readouterr()
    assert "t.json: deviceProperties: an entry without a device id and a totalGlobalMem in bytes" in \
        captured.out + captured.err
