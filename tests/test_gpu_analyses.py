"""The GPU analyses (analyses/gpu_*.py) on real traces, each figure checked against one computed here from the
file itself: two ranks of one NCCL job (HTA's trace_filter), a TensorFlow 2 XPlane with 8 device planes, an
MXNet GPU profile (no stream ids), Kineto files of other PyTorch versions (annotations on the streams), a
CPU-only Kineto trace (no device at all), and two of HTA's traces with device work that has no launch in the file
(the figures over HTA's set, the work launched in the trace, beside those over all device work).

Truth from the Kineto JSON: device work = events of cat kernel / gpu_memcpy / gpu_memset (Kernel / Memcpy /
Memset in PyTorch 1.8 and 1.9; not gpu_user_annotation), read with exact decimals; their device from
``args.device``; communication kernels are those c10d marked (``args["Collective name"]``) or NCCL's (``nccl``
in the name); copies and fills are the gpu_memcpy / gpu_memset events and kernels named memcpy / memset.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from hta_reference import NEEDS_HTA, hta_figures
from interval_truth import union_ns
from shared_data import SHARED, corpus

from ddltrace.analyses.run_analysis import analyze_store, not_made
from ddltrace.cli import main

SHARED = SHARED
NCCL_JOB = SHARED / "hta_traces" / "trace_filter"
#: HTA's traces with device work that has no launch in the file (872 of 7,747 and 614 of 15,632 device events)
UNLAUNCHED = SHARED / "hta_traces" / "negative_queue_length_values_check"
UNLAUNCHED_TOO = SHARED / "hta_traces" / "trace_diff" / "test"
XPLANE = SHARED / "gpu_traces" / "tf2_gpu_multiworker.xplane.pb"
MXNET = SHARED / "gpu_traces" / "mxnet_gpu_mnist_cnn_profile.json"
CPU_ONLY = SHARED / "hta_traces" / "cpu_only"
needs = {p: pytest.mark.skipif(not p.exists(), reason=f"{p} is not here (the shared real traces)")
         for p in (NCCL_JOB, XPLANE, MXNET, CPU_ONLY, UNLAUNCHED, UNLAUNCHED_TOO)}
DEVICE_WORK = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}  # PyTorch 1.8/1.9: Kernel, Memcpy, Memset


def kineto_truth(path: Path, launched_only: bool = False) -> dict:
    """Per device of the file: window, busy, compute and comm unions, compute-and-comm overlap (ns), summed
    duration per kernel name, the device events counted and those left out, and the rank. ``launched_only``: over
    HTA's set only, where the file names two or more ProfilerStep spans: the device events whose
    ``args.correlation`` is on a host event (any other event with one), wherever it is."""
    with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as fh:
        doc = json.load(fh, parse_float=Decimal)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    on_device = [e for e in events if str(e.get("cat", "")).lower() in DEVICE_WORK]
    host = [e for e in events if str(e.get("cat", "")).lower() not in DEVICE_WORK]
    steps = [e for e in host if "ProfilerStep" in e["name"]]
    left_out = defaultdict(lambda: [0, 0])
    if launched_only and len({e["name"] for e in steps}) >= 2:
        ids = {e["args"]["correlation"] for e in host if "correlation" in e.get("args", {})}
        for e in on_device:
            if e.get("args", {}).get("correlation") not in ids:
                device = left_out[f"gpu:{e['args'].get('device', e['pid'])}"]
                device[0], device[1] = device[0] + 1, device[1] + int(e["dur"] * 1000)
        on_device = [e for e in on_device if e.get("args", {}).get("correlation") in ids]
    work = defaultdict(list)
    for e in on_device:
        args = e.get("args", {})
        start, end = int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)
        name = e["name"]
        if e["cat"].lower() != "kernel" or "memcpy" in name.lower() or "memset" in name.lower():
            kind = "memcpy"
        elif "Collective name" in args or "nccl" in name.lower():
            kind = "comm"
        else:
            kind = "compute"
        work[f"gpu:{args.get('device', e['pid'])}"].append((kind, name, start, end))
    out = {}
    for device, rows in work.items():
        comm = [(s, e) for k, _, s, e in rows if k == "comm"]
        comp = [(s, e) for k, _, s, e in rows if k == "compute"]
        sums = defaultdict(int)
        for _, name, s, e in rows:
            sums[name] += e - s
        out[device] = {"window": max(e for *_, e in rows) - min(s for _, _, s, _ in rows),
                       "busy": union_ns((s, e) for _, _, s, e in rows), "compute": union_ns(comp),
                       "comm": union_ns(comm),
                       "overlap": union_ns(comm) + union_ns(comp) - union_ns(comm + comp), "sums": dict(sums),
                       "classes": {k: sum(e - s for kk, _, s, e in rows if kk == k) for k in ("compute", "comm",
                                                                                              "memcpy")},
                       "events": len(rows), "left_out": tuple(left_out[device])}
    return {"rank": doc.get("distributedInfo", {}).get("rank"), "devices": out}


@pytest.fixture(scope="module")
def nccl_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "nccl"
    assert main(["import", str(NCCL_JOB), "--out", str(out), "--progress", "never"]) == 0
    return out, analyze_store(out), [kineto_truth(p) for p in sorted(NCCL_JOB.glob("*.json.gz"))]


@needs[NCCL_JOB]
def test_temporal_breakdown_is_the_union_of_kernel_intervals(nccl_run):
    _, run, truths = nccl_run
    table = run.gpu.temporal_table().set_index(["rank", "device"])
    assert len(table) == sum(len(t["devices"]) for t in truths) == 2
    for truth in truths:
        for device, want in truth["devices"].items():
            got = table.loc[(truth["rank"], device)]
            # each end is the file's µs decimal times 1000, rounded: 1 ns per interval at most
            assert got["window_ns"] == pytest.approx(want["window"], abs=2)
            assert got["idle_ns"] == pytest.approx(want["window"] - want["busy"], abs=50)
            assert got["compute_ns"] == pytest.approx(want["compute"], abs=50)
            assert got["non_compute_ns"] == pytest.approx(want["busy"] - want["compute"], abs=50)
            assert got["share_idle"] + got["share_compute"] + got["share_non_compute"] == pytest.approx(1)
            assert 0 < got["share_idle"] < 1 and got["share_non_compute"] > 0


@needs[NCCL_JOB]
def test_per_stream_rows_add_up_against_the_device_window(nccl_run):
    _, run, _ = nccl_run
    assert "streams" in run.capabilities
    streams = run.gpu.temporal_table(streams=True)
    devices = run.gpu.temporal_table().set_index(["rank", "device"])
    assert streams["stream"].str.startswith("stream ").all()
    for (rank, device), part in streams.groupby(["rank", "device"]):
        assert (part["window_ns"] == devices.loc[(rank, device), "window_ns"]).all()
        assert part["busy_ns"].max() <= devices.loc[(rank, device), "busy_ns"] <= part["busy_ns"].sum()


@needs[NCCL_JOB]
def test_overlap_is_comm_time_under_compute_over_comm_time(nccl_run):
    _, run, truths = nccl_run
    overlap = run.gpu.overlap_table().set_index(["rank", "device"])
    for truth in truths:
        for device, want in truth["devices"].items():
            got = overlap.loc[(truth["rank"], device)]
            assert got["comm_ns"] == pytest.approx(want["comm"], abs=50)
            assert got["overlap_ns"] == pytest.approx(want["overlap"], abs=50)
            assert got["overlap"] == pytest.approx(want["overlap"] / want["comm"], abs=1e-6)


@needs[NCCL_JOB]
def test_kernel_breakdown_sums_per_class_and_per_kernel(nccl_run):
    _, run, truths = nccl_run
    classes = run.gpu.class_table().set_index(["rank", "device", "class"])
    kernels = run.gpu.kernel_table()
    for truth in truths:
        for device, want in truth["devices"].items():
            for cls, total in want["classes"].items():
                if total:
                    assert classes.loc[(truth["rank"], device, cls), "sum_ns"] == pytest.approx(total, abs=200)
            mine = kernels[(kernels["rank"] == truth["rank"]) & (kernels["device"] == device)]
            top = sorted(want["sums"].items(), key=lambda kv: -kv[1])[:10]
            assert list(mine["name"][:10]) == [n for n, _ in top] or \
                [mine.set_index("name").loc[n, "sum_ns"] for n, _ in top] == pytest.approx([v for _, v in top],
                                                                                           abs=20)
            for name, total in top:
                assert mine.set_index("name").loc[name, "sum_ns"] == pytest.approx(total, abs=20)
            # the top 10 and (others) hold every kernel's time
            assert mine["sum_ns"].sum() == pytest.approx(sum(want["sums"].values()), abs=200)


@needs[NCCL_JOB]
def test_kernel_time_across_ranks(nccl_run):
    _, run, truths = nccl_run
    assert "device_ranks" in run.capabilities
    across = run.gpu.across_ranks().iloc[0]
    per_rank = {t["rank"]: sum(d["sums"].get(across["name"], 0) for d in t["devices"].values()) for t in truths}
    assert across["max_ns"] == pytest.approx(max(per_rank.values()), abs=20)
    assert across["min_ns"] == pytest.approx(min(per_rank.values()), abs=20)
    assert per_rank[across["max_rank"]] == max(per_rank.values())


@needs[NCCL_JOB]
def test_analyze_shows_the_gpu_section_with_launches_and_queues(nccl_run, capsys):
    store, _, truths = nccl_run
    capsys.readouterr()
    assert main(["analyze", str(store)]) == 0
    text = capsys.readouterr().out
    assert "Temporal breakdown per device (HTA's definition" in text
    assert "Communication-computation overlap" in text
    assert "launched in the trace (HTA's set" not in text  # every kernel of trace_filter has its launch
    assert "CUDA launch statistics (HTA's definitions" in text and "Queue length per stream (HTA's" in text
    assert main(["analyze", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    gpu = doc["stores"][0]["gpu"]
    rank0 = next(t for t in truths if t["rank"] == 0)["devices"]
    (device, want), = rank0.items()
    row = next(r for r in gpu["temporal"] if r["rank"] == 0 and r["device"] == device)
    assert row["idle_ns"] == pytest.approx(want["window"] - want["busy"], abs=50)
    assert not {"gpu_launches", "gpu_temporal"} & {s["analysis"] for s in doc["not_made"]}
    assert [r["rank"] for r in gpu["launches"]] == [0, 1] and gpu["queues"]
    assert gpu["temporal_launched"] == []


@needs[NCCL_JOB]
def test_report_has_the_gpu_section(nccl_run, tmp_path):
    store, _, _ = nccl_run
    out = tmp_path / "report"
    assert main(["report", str(store), "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "<h2>GPU</h2>" in html and "Temporal breakdown per device" in html
    assert "CUDA launch statistics" in html and "Queue length per stream" in html
    md = (out / "report.md").read_text()
    assert "## GPU" in md and "Communication\\-computation overlap" in md
    # its clocks: an import with no offsets, its times as the trace gives them (the manifest's method)
    from ddltrace.analyses.findings import REQUIREMENTS
    from ddltrace.analyses.requirements import GPU_ANALYSES
    from ddltrace.report.render import _md_escape

    clock = json.loads((store / "manifest.json").read_text())["clock"]
    assert clock["offsets_ns"] == {}
    said = f"taken as the trace gives them, no offsets applied ({clock['method']})"
    assert f"- `{store}`: {_md_escape(said)}" in md.splitlines()
    doc = json.loads((out / "findings.json").read_text())
    assert doc["clocks"][str(store)]["aligned"] is False and doc["clocks"][str(store)]["groups"] == []
    # a store with device work: each GPU analysis and finding not made keeps its own reason (none folded)
    section = md.split("## Not made from this input", 1)[1].split("\n## ", 1)[0]
    items = {line.split("**")[1]: line for line in section.splitlines() if line.startswith("- **")}
    assert "GPU findings" not in section and not [s for s in doc["not_made"] if "said_with" in s]
    assert "NVML sampler" in items[_md_escape(GPU_ANALYSES["gpu_nvml"].title)]
    assert "4 matched collectives" in items[_md_escape(REQUIREMENTS["gpu_straggler"].title)]  # (of 5 needed)
    assert "calibrated bandwidth" in items[_md_escape(REQUIREMENTS["gpu_slow_collectives"].title)]


@needs[XPLANE]
def test_xplane_eight_devices(tmp_path):
    out = tmp_path / "tf"
    assert main(["import", str(XPLANE), "--out", str(out), "--progress", "never"]) == 0
    run = analyze_store(out)
    table = run.gpu.temporal_table()
    from ddltrace.analyses.gpu_lanes import device_work, union_ns
    from ddltrace.store import TraceStore

    (rank, timeline), = TraceStore.open(out).iter_timeline()
    work = device_work(timeline)
    # the planes with work in them (of the 8 device planes, 5 hold none): one row each
    assert sorted(table["device"]) == sorted(work["device"].unique()) and len(table) >= 3
    assert "streams" in run.capabilities  # XPlane's stream lines: "Stream #134(Compute)"
    for _, row in table.iterrows():
        mine = work[work["device"] == row["device"]]
        assert row["busy_ns"] == union_ns(mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy())
        assert row["window_ns"] == mine["end_ns"].max() - mine["start_ns"].min()


@needs[MXNET]
def test_mxnet_gpu_lanes_are_device_lanes_without_stream_ids(tmp_path):
    out = tmp_path / "mx"
    assert main(["import", str(MXNET), "--out", str(out), "--progress", "never"]) == 0
    doc = json.loads(MXNET.read_text())
    gpu_pids = {e["pid"] for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"
                and str(e["args"]["name"]).startswith("gpu/")}
    assert gpu_pids
    run = analyze_store(out)
    assert run.gpu.device_ranks == [0]
    assert "streams" not in run.capabilities
    # busy time per device: the union of the file's B/E operator spans on its gpu/N process, but DeleteVariable
    # (the engine freeing a variable: no device work; the importer's rules file it as other)
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    open_spans, spans = defaultdict(list), defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("pid") in gpu_pids and e.get("ph") in ("B", "E"):
            key = (e["pid"], e["tid"])
            if e["ph"] == "B":
                open_spans[key].append(e["ts"])
                continue
            begin = open_spans[key].pop()
            if e["name"] != "DeleteVariable":
                spans["gpu:" + procs[e["pid"]].split("/")[1]].append((int(begin * 1000), int(e["ts"] * 1000)))
    table = run.gpu.temporal_table().set_index("device")
    assert sorted(table.index) == sorted(spans)
    for device, intervals in spans.items():
        assert table.loc[device, "busy_ns"] == union_ns(intervals)
        assert table.loc[device, "window_ns"] == max(e for _, e in intervals) - min(s for s, _ in intervals)
    skipped = {s.analysis: s for s in not_made([run])}
    assert "no stream ids" in skipped["gpu_temporal_streams"].holds
    assert skipped["gpu_kernels_across_ranks"].needs == "device work on two or more ranks"
    assert "device work on 1 rank," in skipped["gpu_kernels_across_ranks"].holds
    assert "no communication kernel" in skipped["gpu_overlap"].holds
    assert "no correlation ids" in skipped["gpu_launches"].holds
    assert "gpu_temporal" not in skipped


@needs[MXNET]
def test_one_gpu_processs_waits_are_not_exposed_communication(tmp_path):
    """The MXNet profile is one process on one GPU: its host's waits (WaitForVar: the engine waiting for the
    device) are not communication with other ranks, so Rudra's communication overlap is not made there and says
    why (it was a 'low communication overlap' warning of 54 ms with advice about sending gradients)."""
    from ddltrace.analyses.findings import detect
    from ddltrace.analyses.thresholds import Thresholds

    out = tmp_path / "mx"
    assert main(["import", str(MXNET), "--out", str(out), "--progress", "never"]) == 0
    doc = json.loads(MXNET.read_text())
    names = {e["name"] for e in doc["traceEvents"] if e.get("ph") in ("B", "X")}
    assert not [n for n in names if any(word in n for word in ("KVStore", "Push", "Pull", "nccl", "NCCL"))]
    run = analyze_store(out)
    table = run.table("all")
    assert run.store.world_size == 1 and table.loc[0, "comm"] == 0 and table.loc[0, "wait"] > 50e6
    findings, skipped = detect([run], Thresholds())
    assert "low_overlap" not in {f.id for f in findings}
    (said,) = [s for s in skipped if s.analysis == "low_overlap"]
    assert said.needs == "communication between ranks (two or more ranks, or communication time on a rank)"
    # nor is the breakdown's overlap column a number (QA: 34.7 %, the compute over compute plus the waits)
    assert all(run.table(phase)["overlap"].isna().all() for phase in ("all", run.main_phase))
    shown = subprocess.run([sys.executable, "-m", "ddltrace", "analyze", str(out)], capture_output=True, text=True,
                           timeout=120).stdout
    row = next(line.split() for line in shown.splitlines() if line.strip().startswith("0 ") and "worker" in line)
    assert row[-2:] == ["n/a", "n/a"] and "(n/a: the input holds no communication between ranks)" in shown


@needs[CPU_ONLY]
def test_cpu_only_trace_lists_the_gpu_analyses_as_one_line(tmp_path):
    out = tmp_path / "cpu"
    assert main(["import", str(CPU_ONLY), "--out", str(out), "--progress", "never"]) == 0
    run = analyze_store(out)
    gpu = [s for s in not_made([run]) if s.analysis.startswith("gpu")]
    assert [s.analysis for s in gpu] == ["gpu"]
    assert "no device work" in gpu[0].holds


@needs[NCCL_JOB]
@NEEDS_HTA
def test_hta_gives_the_same_temporal_breakdown_and_overlap(nccl_run):
    """HTA's own figures on the same two ranks, over all device work (include_last_profiler_step=True)."""
    hta = hta_figures(NCCL_JOB)
    _, run, _ = nccl_run
    temporal = run.gpu.temporal_table().set_index("rank")
    overlap = run.gpu.overlap_table().set_index("rank")
    assert set(hta) == {"0", "1"}
    for rank, h in hta.items():
        ours = temporal.loc[int(rank)]
        for key in ("idle", "compute", "non_compute"):
            assert 100 * ours[f"share_{key}"] == pytest.approx(h[key], abs=0.5)
        assert 100 * overlap.loc[int(rank), "overlap"] == pytest.approx(h["overlap"], abs=0.5)


@pytest.fixture(scope="module")
def unlaunched_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "unlaunched"
    assert main(["import", str(UNLAUNCHED), "--out", str(out), "--progress", "never"]) == 0
    (path,) = UNLAUNCHED.glob("*.json.gz")
    return out, analyze_store(out), kineto_truth(path, launched_only=True), kineto_truth(path)


@needs[UNLAUNCHED]
def test_breakdown_and_overlap_over_the_work_launched_in_the_trace(unlaunched_run):
    """HTA's set from the file: the device events whose correlation id is on a host event; its window, unions and
    overlap, beside those of all device work."""
    _, run, launched, everything = unlaunched_run
    (device, want), = launched["devices"].items()
    table = run.gpu.launched_table().set_index(["rank", "device"])
    assert list(table.index) == [(launched["rank"], device)]
    got = table.loc[(launched["rank"], device)]
    assert (got["unlaunched_events"], got["events"]) == (want["left_out"][0], everything["devices"][device]["events"])
    assert got["events"] - got["unlaunched_events"] == want["events"] and want["left_out"][0] > 0
    assert got["unlaunched_ns"] == pytest.approx(want["left_out"][1], abs=want["left_out"][0])
    assert got["window_ns"] == pytest.approx(want["window"], abs=2)
    assert got["idle_ns"] == pytest.approx(want["window"] - want["busy"], abs=50)
    assert got["compute_ns"] == pytest.approx(want["compute"], abs=50)
    assert got["non_compute_ns"] == pytest.approx(want["busy"] - want["compute"], abs=50)
    assert got["overlap"] == pytest.approx(want["overlap"] / want["comm"], abs=1e-6)
    # and the figures over all device work are the file's over every device event, a different window
    whole = run.gpu.temporal_table().set_index(["rank", "device"]).loc[(launched["rank"], device)]
    assert whole["window_ns"] == pytest.approx(everything["devices"][device]["window"], abs=2)
    assert abs(whole["share_idle"] - got["share_idle"]) > 0.01


@needs[UNLAUNCHED]
def test_analyze_shows_the_launched_set_beside_all_device_work(unlaunched_run, capsys):
    from ddltrace.gpu_section import LAUNCHED, TEMPORAL, gpu_tables

    store, run, launched, _ = unlaunched_run
    titles = [title for title, _ in gpu_tables(run)]  # the report's GPU section too
    assert titles.index(LAUNCHED) == titles.index(TEMPORAL) + 1
    (device, want), = launched["devices"].items()
    capsys.readouterr()
    assert main(["analyze", str(store)]) == 0
    text = capsys.readouterr().out
    assert "Temporal breakdown per device (HTA's definition" in text
    assert "Temporal breakdown and overlap over the device work launched in the trace (HTA's set" in text
    assert f"{want['left_out'][0]} of {want['events'] + want['left_out'][0]} (" in text
    from ddltrace.units import format_percent  # the shares printed are the file's

    assert format_percent((want["window"] - want["busy"]) / want["window"]) in text
    assert format_percent(want["overlap"] / want["comm"]) in text
    assert main(["analyze", str(store), "--json"]) == 0
    gpu = json.loads(capsys.readouterr().out)["stores"][0]["gpu"]
    (row,) = gpu["temporal_launched"]
    assert row["device"] == device and row["idle_ns"] == pytest.approx(want["window"] - want["busy"], abs=50)
    assert "launched" in gpu["definitions"]


@pytest.mark.parametrize("folder", [pytest.param(p, marks=needs[p]) for p in (UNLAUNCHED, UNLAUNCHED_TOO)],
                         ids=["negative_queue_length_values_check", "trace_diff-test"])
@NEEDS_HTA
def test_hta_gives_the_same_figures_over_the_launched_work(folder, tmp_path):
    """HTA's own figures (include_last_profiler_step=True) are ddltrace's over the launched work, its device
    events are those ddltrace keeps; over all device work they differ by more than the 0.5 points."""
    hta = hta_figures(folder)
    out = tmp_path / "store"
    assert main(["import", str(folder), "--out", str(out), "--progress", "never"]) == 0
    run = analyze_store(out)
    (rank, h), = hta.items()
    ours = run.gpu.launched_table().set_index("rank").loc[int(rank)]
    assert ours["events"] - ours["unlaunched_events"] == h["events"]
    for key in ("idle", "compute", "non_compute"):
        assert 100 * ours[f"share_{key}"] == pytest.approx(h[key], abs=0.5)
    assert 100 * ours["overlap"] == pytest.approx(h["overlap"], abs=0.5)
    whole = run.gpu.temporal_table().set_index("rank").loc[int(rank)]
    assert max(abs(100 * whole[f"share_{k}"] - h[k]) for k in ("idle", "compute", "non_compute")) > 0.5


@pytest.fixture(scope="module")
def edited_steps(tmp_path_factory):
    """Two copies of negative_queue_length_values_check (a folder each) with its ProfilerStep spans edited, and the
    run of each one's store: ``last_step_halved``, the last one lasts half as long (the launches of its second half
    are then after the last step's end: HTA means to drop their kernels but does not, below); ``one_step_named``,
    all but the first renamed ``Iteration#N`` (one ProfilerStep left: HTA keeps all device work)."""
    tmp, runs = tmp_path_factory.mktemp("steps"), {}
    (path,) = UNLAUNCHED.glob("*.json.gz")
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    steps = sorted((e for e in doc["traceEvents"] if "ProfilerStep" in e.get("name", "")), key=lambda e: e["ts"])
    for edit in ("last_step_halved", "one_step_named"):
        if edit == "last_step_halved":
            steps[-1]["dur"] //= 2
        else:
            steps[-1]["dur"] *= 2
            for e in steps[1:]:
                e["name"] = e["name"].replace("ProfilerStep", "Iteration")
        folder = tmp / edit
        folder.mkdir()
        with gzip.open(folder / path.name, "wt", compresslevel=1) as fh:
            json.dump(doc, fh)
        assert main(["import", str(folder), "--out", str(tmp / f"{edit}-store"), "--progress", "never"]) == 0
        runs[edit] = folder, analyze_store(tmp / f"{edit}-store")
    return runs


@needs[UNLAUNCHED]
def test_launched_work_follows_the_files_profiler_steps(edited_steps, unlaunched_run):
    """The kept work does not end with the last ProfilerStep (HTA 0.5's bound never applies on an epoch clock): a
    shorter last step keeps the same work; with one ProfilerStep name only, HTA keeps all work: no figure."""
    _, run = edited_steps["last_step_halved"]
    _, before, want, _ = unlaunched_run
    (device, want), = want["devices"].items()
    got = run.gpu.launched_table().set_index("device").loc[device]
    assert got["unlaunched_events"] == want["left_out"][0] > 0
    assert got["window_ns"] == pytest.approx(want["window"], abs=2)
    assert got["idle_ns"] == pytest.approx(want["window"] - want["busy"], abs=50)
    assert got["overlap"] == pytest.approx(want["overlap"] / want["comm"], abs=1e-6)
    _, run = edited_steps["one_step_named"]
    assert not len(run.gpu.launched_table()) and len(before.gpu.launched_table()) == 1


@needs[UNLAUNCHED]
@NEEDS_HTA
@pytest.mark.parametrize("edit", ["last_step_halved", "one_step_named"])
def test_hta_keeps_the_same_work_on_edited_steps(edit, edited_steps):
    """HTA's own set on the edited copies is ddltrace's: the same device events, the same figures."""
    folder, run = edited_steps[edit]
    (rank, h), = hta_figures(folder).items()
    launched = run.gpu.launched_table().set_index("rank")
    # one ProfilerStep: HTA keeps all the device work, the figures over all of it are its figures
    ours = launched.loc[int(rank)] if len(launched) else run.gpu.temporal_table().set_index("rank").loc[int(rank)]
    events = ours["events"] - ours["unlaunched_events"] if len(launched) else \
        run.gpu.class_table().groupby("rank")["kernels"].sum()[int(rank)]
    assert events == h["events"]
    for key in ("idle", "compute", "non_compute"):
        assert 100 * ours[f"share_{key}"] == pytest.approx(h[key], abs=0.5)


WILD = [SHARED / "wild_traces" / "hta_ns_resolution_rank0", SHARED / "wild_traces" / "kineto_tb_resnet50_w0",
        corpus("tracelens_h100_bert_small", "gaunernst_bert-small-uncased__1016001.json.gz").parent]


@pytest.mark.parametrize("folder", [pytest.param(p, marks=pytest.mark.skipif(not p.is_dir(), reason=f"{p} absent"))
                                    for p in WILD], ids=[p.name for p in WILD])
def test_kineto_annotations_are_not_device_work(folder, tmp_path):
    """Kineto files of other PyTorch versions (1.8 with "stream 7" tids, 2.x with gpu_user_annotation spans on
    the streams): the device's busy time is the union of its kernels, copies and fills, never of the
    annotation spans beside them."""
    if not folder.is_dir():
        pytest.skip(f"{folder} is not here (the shared real traces)")
    (path,) = folder.glob("*.json*")
    out = tmp_path / "store"
    assert main(["import", str(folder), "--out", str(out), "--progress", "never"]) == 0
    (truth,) = [kineto_truth(path)["devices"]]
    table = analyze_store(out).gpu.temporal_table().set_index("device")
    assert sorted(table.index) == sorted(truth)
    for device, want in truth.items():
        assert table.loc[device, "busy_ns"] == pytest.approx(want["busy"], abs=50)
        assert table.loc[device, "compute_ns"] == pytest.approx(want["compute"], abs=50)


NS_TIMES = SHARED / "hta_traces" / "nccl_parser_config"


@pytest.mark.skipif(not NS_TIMES.exists(), reason=f"{NS_TIMES} is not here (the shared real traces)")
@NEEDS_HTA
def test_hta_on_the_files_nanoseconds_gives_ddltraces_figures(tmp_path):
    """nccl_parser_config's times have nanoseconds: HTA rounds each device event's start up and its end down to
    whole microseconds (its idle share 0.52 points above ddltrace's); with that switched off, HTA's figures are
    ddltrace's on the same 3,774 events."""
    out = tmp_path / "store"
    assert main(["import", str(NS_TIMES), "--out", str(out), "--progress", "never"]) == 0
    ours = analyze_store(out).gpu
    temporal, overlap = ours.temporal_table().set_index("rank"), ours.overlap_table().set_index("rank")
    for rounding, most in ((True, None), (False, 0.01)):
        (rank, h), = hta_figures(NS_TIMES, rounding).items()
        mine = {k: 100 * temporal.loc[int(rank), f"share_{k}"] for k in ("idle", "compute", "non_compute")}
        mine["overlap"] = 100 * overlap.loc[int(rank), "overlap"]
        apart = max(abs(mine[k] - h[k]) for k in mine)
        assert h["events"] == int(ours.class_table()["kernels"].sum())
        assert apart > 0.4 if rounding else apart < most


@needs[NCCL_JOB]
def test_the_benchmarks_figures_are_the_files(nccl_run, capsys):
    """benchmarks/gpu_vs_hta.py prints ddltrace's figures from `ddltrace analyze FOLDER --json` (ours_figures):
    per rank, the shares and the overlap in percent and the device events, each the file's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_vs_hta", Path(__file__).resolve().parents[1] / "benchmarks"
                                                  / "gpu_vs_hta.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    _, _, truths = nccl_run
    capsys.readouterr()
    assert main(["analyze", str(NCCL_JOB), "--json", "--quiet"]) == 0
    figures = bench.ours_figures(json.loads(capsys.readouterr().out)["stores"][0]["gpu"])
    for truth in truths:
        (want,) = truth["devices"].values()
        got = figures[str(truth["rank"])]
        assert got["idle"] == pytest.approx(100 * (want["window"] - want["busy"]) / want["window"], abs=1e-4)
        assert got["compute"] == pytest.approx(100 * want["compute"] / want["window"], abs=1e-4)
        assert got["non_compute"] == pytest.approx(100 * (want["busy"] - want["compute"]) / want["window"], abs=1e-4)
        assert got["overlap"] == pytest.approx(100 * want["overlap"] / want["comm"], abs=1e-4)
        assert got["events"] == want["events"]


@pytest.mark.skipif(not UNLAUNCHED.exists(), reason=f"{UNLAUNCHED} absent")
def test_steps_of_a_lagging_device_do_not_overlap(tmp_path):
    """negative_queue_length_values_check's device runs each step's kernels long after its ProfilerStep ended: a
    step runs to its device work's end or to the next step's start, whichever is first, so the steps do not
    overlap and each but the last is as long as the file's ProfilerStep start to the next one's (it was 377 ms,
    the steps 210-217 ms)."""
    (path,) = UNLAUNCHED.glob("*.json.gz")
    with gzip.open(path, "rt") as fh:
        marks = sorted((e for e in json.load(fh)["traceEvents"]
                        if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
    out = tmp_path / "store"
    assert main(["import", str(path), "--out", str(out), "--progress", "never"]) == 0
    run = analyze_store(out)
    (rank,) = run.phases
    steps = run.phases[rank].steps.sort_values("start_ns")
    assert len(steps) == len(marks) == 5
    assert (steps["end_ns"].to_numpy()[:-1] <= steps["start_ns"].to_numpy()[1:]).all()
    periods_us = [float(b["ts"]) - float(a["ts"]) for a, b in zip(marks, marks[1:], strict=False)]
    assert steps["dur_ns"].to_numpy()[:-1] / 1e3 == pytest.approx(periods_us, abs=1)
    assert steps["dur_ns"].iloc[-1] / 1e3 >= float(marks[-1]["dur"])  # the last: to its kernels' end
