"""Chrome trace export, loaded back with json and checked for structure."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd

from ddltrace.chrome import MACHINE_PID, export_chrome


def test_export_structure(tiny_store, tmp_path):
    out = tmp_path / "trace.json"
    count = export_chrome(tiny_store, out)
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    assert len(events) == count
    assert doc["otherData"]["run"]["command"] == "python job.py"
    phases = Counter(e["ph"] for e in events)
    timeline = tiny_store.timeline()
    counters = tiny_store.counters()
    assert phases["X"] == len(timeline)
    assert phases["C"] == len(counters)
    names = {(e["pid"], e["name"]): e["args"] for e in events if e["ph"] == "M"}
    for rank in range(4):
        assert names[(rank, "process_name")]["name"] == f"rank {rank} (node0)"
        assert names[(rank, "process_sort_index")]["sort_index"] == rank
    assert names[(MACHINE_PID, "process_name")]["name"] == "machine"
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert {e["args"]["name"] for e in threads} == {"main"}
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in complete} == set(timeline["category"].astype(str))
    # every X event is the timeline row it came from, in microseconds
    by_key = {(int(r.rank), int(r.start_ns), r.name): r for r in timeline.itertuples()}
    for e in complete:
        row = by_key[(e["pid"], round(e["ts"] * 1000), e["name"])]
        assert round(e["dur"] * 1000) == row.dur_ns
        if not pd.isna(row.bytes):
            assert e["args"]["bytes"] == row.bytes
    sends = [e for e in complete if e["name"] == "MPI_Send"]
    assert sends and all(e["args"]["peer"] == 0 and e["args"]["tag"] == 1 for e in sends)


def test_export_selected_ranks(tiny_store, tmp_path):
    out = tmp_path / "r1.json"
    export_chrome(tiny_store, out, ranks=[1])
    events = json.loads(out.read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {1}
