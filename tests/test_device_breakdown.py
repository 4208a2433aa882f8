"""A rank with a device: what the host did and what the device did, side by side (issue 20, item 12).

The all-lanes breakdown of a single-GPU Kineto trace said ~100 % compute (the host's CPU ops cover the span)
while the GPU ran kernels a fraction of it. Here a real Kineto trace goes through import, info, analyze and
report; the device's busy time is computed from the file itself: the union of its kernel, memcpy and memset
intervals, read with exact decimals.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest
from interval_truth import union_ns
from shared_data import SHARED

from ddltrace.cli import main
from ddltrace.report import build_report

TRACE = SHARED / "wild_traces/hta_ns_resolution_rank0"
needs_trace = pytest.mark.skipif(not TRACE.is_dir(), reason=f"{TRACE} is not here (the shared real traces)")
DEVICE_WORK = {"kernel", "gpu_memcpy", "gpu_memset"}


def device_truth(folder: Path) -> tuple[int, int, int]:
    """(device busy ns: the union of its work intervals, first event start ns, last event end ns) of the file."""
    (path,) = folder.glob("*.json.gz")
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    work = sorted((int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in events
                  if str(e.get("cat", "")).lower() in DEVICE_WORK)
    return union_ns(work), len(work)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    out = tmp_path_factory.mktemp("kineto") / "store"
    assert main(["import", str(TRACE), "--out", str(out)]) == 0
    return out


@needs_trace
def test_info_shows_host_and_device_side_by_side(store, capsys):
    busy, intervals = device_truth(TRACE)
    capsys.readouterr()
    assert main(["info", str(store), "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    host, device = rank["host_time_ns"], rank["device_time_ns"]
    assert sum(host.values()) == sum(device.values()) == rank["span_ns"]  # each over the rank's span
    device_busy = rank["span_ns"] - device["idle"] - device["other"]  # "other": the GPU's annotation spans
    assert device_busy == pytest.approx(busy, abs=intervals)  # at most 1 ns per interval from the store's rounding
    assert device["idle"] > 0
    # the all-lanes view counts an instant as compute when either side computes: the host's own share is less
    assert host["compute"] < 0.8 * rank["time_ns"]["compute"]
    assert main(["info", str(store)]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.split()[:2] in (["0", "host"], ["0", "device"])]
    assert [r[1] for r in rows] == ["host", "device"]


@needs_trace
def test_analyze_and_report_show_the_device(store, tmp_path, capsys):
    busy, intervals = device_truth(TRACE)
    capsys.readouterr()
    assert main(["analyze", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["stores"][0]
    (device,) = doc["device_breakdown_ns"]
    (host,) = doc["host_breakdown_ns"]
    assert device["total_ns"] == host["total_ns"]
    assert device["total_ns"] - device["idle"] - device["other"] == pytest.approx(busy, abs=intervals)
    assert main(["analyze", str(store)]) == 0
    out = capsys.readouterr().out
    assert "Host and device side by side" in out
    files = build_report([store], tmp_path / "r")
    md = files.markdown.read_text()
    assert "Host and device side by side" in md and "| 0 device |" in md.replace("\\", "")
    # the per-rank table is of every lane at once (97 % "compute" where the host alone computes 69 %): its title says so
    title = next(line for line in md.replace("\\", "").splitlines() if line.startswith("### Time per category"))
    assert "every lane of the rank at once, its CPU threads and its device's streams" in title


def test_a_host_that_recorded_nothing_is_idle_not_compute():
    """A device-only trace (rocprofv3's kernel dispatches, no host records): the host side recorded nothing, so
    its whole span is idle (before: its gaps counted as the host's own work, 100 % compute, while info said 0 ns);
    a host that recorded its runtime calls alone has idle gaps too: no row says it worked there (they were its
    compute until 2026-11-26)."""
    from ddltrace.analyses.rank_summary import summarise_timeline
    from ddltrace.timeline import make_timeline

    kernels = [{"rank": 0, "lane": "gpu:0/stream 7", "name": f"k{i}", "category": "compute",
                "start_ns": 1000 * i, "dur_ns": 400} for i in range(10)]
    summary = summarise_timeline(0, make_timeline(kernels))
    host = summary.host_breakdown[["compute", "idle"]].sum()
    assert host["compute"] == 0 and host["idle"] == 9400  # the rank's span: the first kernel's start to the last end
    assert summary.device_breakdown["compute"].sum() == 4000
    launch = {"rank": 0, "lane": "cpu/thread 1", "name": "hipLaunchKernel", "category": "other", "start_ns": 0,
              "dur_ns": 100}
    host = summarise_timeline(0, make_timeline([launch, *kernels])).host_breakdown[["compute", "other", "idle"]].sum()
    assert host["other"] == 100 and host["compute"] == 0 and host["idle"] == 9300
