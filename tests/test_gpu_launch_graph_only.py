"""A rank whose launches are all graph launches gets its launch-statistics row (0 launches of HTA's set, and what is
left out), on a real trace where that happens: sample_traces/h200-jax, jax.profiler's XPlane of 10 jitted steps on an
H200, each step one CUDA graph launched by `cuGraphLaunch (CudaGraph:18)`. No host event of the file launches a kernel
any other way, so HTA's set (cudaLaunchKernel, cudaMemcpyAsync, ...) is empty and the rank got no row at all: the
table's "left out" column, which counts the graph launches, never showed for it. The counts are checked against the
file's own fields (a bare protobuf wire walk, as tests/test_xplane_correlation.py does)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_xplane_correlation import events_with_correlation

from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.store import TraceStore

TRACE = Path(__file__).resolve().parent.parent / "sample_traces" / "h200-jax" / "vm.xplane.pb"




def file_launches(path: Path) -> tuple[dict, dict]:
    """(host {correlation: [names]}, device {correlation: [names]}) of the file's events that carry a
    ``correlation_id`` stat (:func:`test_xplane_correlation.events_with_correlation`)."""
    host, device = events_with_correlation(path)
    return ({c: [row[0] for row in rows] for c, rows in host.items()},
            {c: [row[2] for row in rows] for c, rows in device.items()})


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("jax") / "store"
    assert main(["import", str(TRACE), "--out", str(out), "--progress", "never"]) == 0
    return out


def test_a_rank_of_graph_launches_only_gets_a_row_with_what_is_left_out(store):
    host, device = file_launches(TRACE)
    graphs = {c for c, names in host.items() if any(n.startswith("cuGraphLaunch") for n in names)}
    # the file: 10 graph launches, and no host event that launches device work any other way (HTA's set is empty:
    # every other host event with a correlation id is a graph's capture or creation, whose id no device event has)
    assert len(graphs) == 10 and set(device) == graphs
    launched = [n for c in graphs for n in device[c]]
    memsets = [n for n in launched if n.startswith("Memset")]
    assert (len(launched), len(memsets)) == (210, 10)  # 200 kernels and 10 "Memset 0" on the graphs' stream
    # the store's device work: the kernels and the memsets, a fill each (until 2026-11-26 the step-name rule
    # ^\w+ \d+$ took "Memset 0" for a step, class other: 200 activities)
    timeline = TraceStore.open(store).timeline([0])
    assert (timeline.loc[timeline["name"] == "Memset 0", "category"] == "memcpy").sum() == len(memsets)
    activities = len(launched)

    (row,) = analyze_store(store).gpu.launch_table().to_dict("records")  # before: no row (an empty table)
    assert (row["rank"], row["launches"]) == (0, 0)
    assert (row["left_out_calls"], row["left_out_activities"]) == (len(graphs), activities) == (10, 210)
    assert row["runtime"] == "CUDA"  # cuGraphLaunch: the CUDA driver's call
    # an empty set has no mean, median or maximum: missing, not 0; and no outlier
    assert all(pd.isna(row[f"{key}_{s}_ns"]) for key in ("cpu_duration", "gpu_duration", "launch_delay")
               for s in ("mean", "median", "max"))
    assert pd.isna(row["launch_delay_p95_ns"])
    assert (row["runtime_outliers"], row["launch_delay_outliers"], row["short_kernels"]) == (0, 0, 0)


def test_the_text_and_json_say_there_are_none(store, capsys):
    assert main(["analyze", str(store)]) == 0
    text = capsys.readouterr().out.splitlines()
    title = next(i for i, line in enumerate(text) if "launch statistics (HTA's definitions" in line)
    assert "0 launches: every launch of the rank is a graph launch or a blocking copy" in text[title]
    header, row = text[title + 1].split(), text[title + 2].split()
    assert header[:2] == ["rank", "launches"] and row[:2] == ["0", "0"]
    assert row[2:5] == ["none", "none", "none"] and "10 calls, 210 activities" in text[title + 2]
    assert not any(w in text[title + 2] for w in ("nan", "n/a"))
    assert not any(line.startswith("  Queue length per stream") for line in text)  # no launch of HTA's set: no queue

    assert main(["analyze", str(store), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    gpu = out["stores"][0]["gpu"]
    (row,) = gpu["launches"]
    assert (row["launches"], row["left_out_calls"], row["left_out_activities"]) == (0, 10, 210)
    assert row["cpu_duration_mean_ns"] is None and row["launch_delay_max_ns"] is None
    assert "0 launches" in gpu["definitions"]["launches"] and gpu["queues"] == []
    # the launch-bound finding's evidence names no launch figures: none of HTA's set to take a median of
    finding = next(f for f in out["findings"] if f["id"] == "gpu_host_bound")
    assert "launches" not in finding["evidence"] and "launch_cpu_duration_median" not in finding["evidence"]
