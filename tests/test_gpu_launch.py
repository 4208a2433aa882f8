"""CUDA launch statistics and queue length per stream (analyses/gpu_launch.py, gpu_queue.py) on real Kineto traces:
two ranks of one NCCL job (HTA's trace_filter) and HTA's negative-queue-length case, each figure checked against
one computed here from the JSON itself.

Truth: a launch is a ``cuda_runtime`` event named as one of HTA's runtime launch calls; its device activity is
the kernel / gpu_memcpy / gpu_memset event with the same ``args.correlation``; its launch delay is the activity's
start minus the call's end, 0 where negative (HTA 0.5's clip). Times are the file's decimal µs
times 1000 (exact ns). Queue length per stream: +1 at each launch's start, -1 at its activity's start, in time
order (launches first at equal times)."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from statistics import mean, median

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hta_reference import NEEDS_HTA, hta_figures
from shared_data import SHARED

from ddltrace.analyses.gpu_launch import LAUNCH_NAMES
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.store import TraceStore

HTA = SHARED / "hta_traces"
NCCL_JOB = HTA / "trace_filter"
NEGATIVE = HTA / "negative_queue_length_values_check"
pytestmark = pytest.mark.skipif(not NCCL_JOB.exists(), reason="the shared real traces are not here")
WILD = SHARED / "wild_traces"
#: Kineto's runtime and driver cats and device-work cats, every generation (lower-cased).
RUNTIME = {"cuda_runtime", "runtime", "cuda_driver", "hip_runtime"}
DEVICE_WORK = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


def truth(path: Path) -> dict:
    """Rank, launch pairs (cpu ns, gpu ns, delay ns) and per stream the queue-length series, from the JSON."""
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    launches, work = {}, defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or "correlation" not in e.get("args", {}):
            continue
        start, dur = int(e["ts"] * 1000), int(e["dur"] * 1000)
        if e["cat"].lower() in RUNTIME and e["name"] in LAUNCH_NAMES:
            launches[e["args"]["correlation"]] = (start, dur)
        elif e["cat"].lower() in DEVICE_WORK:
            work[e["args"]["correlation"]].append((f"gpu:{e['args']['device']}", f"stream {e['args']['stream']}",
                                                   start, dur))
    pairs, steps = [], defaultdict(list)
    for corr, (ls, ld) in launches.items():
        for device, stream, gs, gd in work.get(corr, []):
            pairs.append((ld, gd, max(0, gs - (ls + ld))))
            steps[(device, stream)] += [(ls, 0, 1), (gs, 1, -1)]
    queues = {}
    for key, events in steps.items():
        series, q = [], 0
        for t, _, change in sorted(events):
            q += change
            series.append((t, q))
        queues[key] = series
    return {"rank": doc.get("distributedInfo", {}).get("rank"), "pairs": pairs, "queues": queues}


@pytest.fixture(scope="module")
def nccl(tmp_path_factory):
    out = tmp_path_factory.mktemp("launch") / "nccl"
    assert main(["import", str(NCCL_JOB), "--out", str(out), "--progress", "never"]) == 0
    return out, analyze_store(out), {t["rank"]: t for t in map(truth, sorted(NCCL_JOB.glob("*.json.gz")))}


def test_the_timeline_keeps_kinetos_correlation_ids(nccl):
    store, _, truths = nccl
    for rank, frame in TraceStore.open(store).iter_timeline():
        launches = frame[frame["name"].isin(LAUNCH_NAMES)]
        assert launches["correlation"].notna().all()
        kernels = frame[frame["lane"].str.startswith("gpu:") & frame["category"].isin(["compute", "comm", "memcpy"])]
        assert kernels["correlation"].notna().all()
        paired = set(launches["correlation"]) & set(kernels["correlation"])
        assert len(paired) == len(truths[rank]["pairs"])
        host_ops = frame[frame["lane"].str.startswith("cpu") & ~frame["name"].isin(LAUNCH_NAMES)]
        assert host_ops["correlation"].isna().all()


def test_launch_statistics_are_the_files_pairs(nccl):
    _, run, truths = nccl
    table = run.gpu.launch_table().set_index("rank")
    assert sorted(table.index) == sorted(truths) == [0, 1]
    for rank, want in truths.items():
        got = table.loc[rank]
        cpu, gpu, delay = zip(*want["pairs"], strict=True)
        assert got["launches"] == len(want["pairs"]) > 1000
        assert got["cpu_duration_mean_ns"] == pytest.approx(mean(cpu))
        assert got["cpu_duration_median_ns"] == median(cpu) and got["cpu_duration_max_ns"] == max(cpu)
        assert got["gpu_duration_mean_ns"] == pytest.approx(mean(gpu)) and got["gpu_duration_max_ns"] == max(gpu)
        assert got["launch_delay_mean_ns"] == pytest.approx(mean(delay))
        assert got["launch_delay_median_ns"] == median(delay) and got["launch_delay_max_ns"] == max(delay)
        assert got["runtime_outliers"] == sum(c > 50_000 for c in cpu)
        assert got["launch_delay_outliers"] == sum(d > 100_000 for d in delay) > 0
        assert got["short_kernels"] == sum(c <= 50_000 and g < c for c, g, _ in want["pairs"]) > 0


def test_queue_length_per_stream_is_the_files_series(nccl):
    _, run, truths = nccl
    table = run.gpu.queue_table().set_index(["rank", "device", "stream"])
    assert len(table) == sum(len(t["queues"]) for t in truths.values())
    for rank, want in truths.items():
        for (device, stream), series in want["queues"].items():
            got = table.loc[(rank, device, stream)]
            t, q = zip(*series, strict=True)
            assert got["changes"] == len(series) and got["max"] == max(q) and got["min"] == min(q)
            assert got["mean_hta"] == pytest.approx(mean(q))
            weighted = sum(q[i] * (t[i + 1] - t[i]) for i in range(len(t) - 1)) / (t[-1] - t[0])
            assert got["mean_time_weighted"] == pytest.approx(weighted)
            assert got["time_at_max_queue_ns"] == 0  # 91 at most on this job: never at CUDA's 1024
    assert table["max"].max() > 50


@pytest.mark.skipif(not NEGATIVE.exists(), reason="the shared real traces are not here")
def test_htas_negative_queue_length_case(tmp_path):
    """HTA's negative-queue-length case (a stream near CUDA's cap): each stream's minimum and maximum are the
    file's, and never below 0 (each activity starts after its launch call, launches first at equal times)."""
    out = tmp_path / "neg"
    assert main(["import", str(NEGATIVE), "--out", str(out), "--progress", "never"]) == 0
    run = analyze_store(out)
    (want,) = [truth(p) for p in NEGATIVE.glob("*.json.gz")]
    table = run.gpu.queue_table().set_index(["device", "stream"])
    for key, series in want["queues"].items():
        assert table.loc[key, "min"] == min(q for _, q in series)
        assert table.loc[key, "max"] == max(q for _, q in series)
    assert table["min"].min() == 0 and table["max"].max() > 900
    assert run.gpu.launch_table()["launches"].sum() == len(want["pairs"])


def test_a_store_written_before_the_correlation_column_reads_it_as_missing(nccl, tmp_path):
    """A store from before the column (its Parquet files without ``correlation``) still reads, every id missing,
    and its launch analyses are then listed as not made for want of correlation ids."""
    import shutil

    import pyarrow.parquet as pq

    from ddltrace.analyses.run_analysis import not_made

    old = tmp_path / "old"
    shutil.copytree(nccl[0], old)
    for path in (old / "timeline").glob("rank-*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["correlation"]), path)
    store = TraceStore.open(old)
    frame = store.timeline()
    assert frame["correlation"].isna().all() and str(frame["correlation"].dtype) == "Int64"
    assert list(frame.columns) == list(TraceStore.open(nccl[0]).timeline().columns)
    run = analyze_store(old)
    assert run.gpu.launch_table().empty and "correlation" not in run.capabilities
    (skip,) = [s for s in not_made([run]) if s.analysis == "gpu_launches"]
    assert "no correlation ids" in skip.holds


OTHER_GENERATIONS = [WILD / "kineto_tb_resnet50_w0" / "worker0.1623143089861.pt.trace.json.gz",  # PyTorch 1.9
                     WILD / "tracelens_b200_eager" / "eager_trace.json.gz",  # cudaLaunchKernelExC, cuLaunchKernelEx
                     HTA / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # hipLaunchKernel
                     HTA / "df_index_resolver" / "df_index_resolver.json.gz"]  # 22,290 launches


@pytest.mark.parametrize("path", OTHER_GENERATIONS, ids=[p.parent.name for p in OTHER_GENERATIONS])
def test_launches_of_other_generations_and_devices(path, tmp_path):
    """PyTorch 1.9's capitalised cats, a B200 trace launching through the driver API, ROCm's HIP calls, a larger
    PyTorch 2 trace: the launch count, mean durations and per-stream maximum queue length are the file's."""
    if not path.exists():
        pytest.skip(f"{path} is not here")
    out = tmp_path / "store"
    assert main(["import", str(path), "--out", str(out), "--progress", "never"]) == 0
    run = analyze_store(out)
    want = truth(path)
    (got,) = run.gpu.launch_table().to_dict("records")
    cpu, gpu, delay = zip(*want["pairs"], strict=True)
    assert got["launches"] == len(want["pairs"]) >= 10
    assert got["cpu_duration_mean_ns"] == pytest.approx(mean(cpu))
    assert got["gpu_duration_mean_ns"] == pytest.approx(mean(gpu))
    assert got["launch_delay_mean_ns"] == pytest.approx(mean(delay)) and got["launch_delay_max_ns"] == max(delay)
    queues = run.gpu.queue_table().set_index(["device", "stream"])
    assert {key: max(q for _, q in series) for key, series in want["queues"].items()} == queues["max"].to_dict()


def test_time_at_a_full_queue_is_the_time_at_1024_or_more():
    """No shared trace fills a stream's queue (1013 at most, HTA's trace_diff/test): 1030 launches 1 µs apart,
    their kernels starting 1 ns apart once all are launched, hold the queue at 1024 or more from the 1024th
    launch until the 7th kernel starts."""
    import pandas as pd

    from ddltrace.analyses.gpu_queue import MAX_QUEUE_LENGTH, queue_length_series, queue_summary

    n = MAX_QUEUE_LENGTH + 6
    launch = [i * 1000 for i in range(n)]
    pairs = pd.DataFrame({"device": "gpu:0", "stream": "stream 7", "launch_start_ns": launch,
                          "gpu_start_ns": [n * 1000 + i for i in range(n)]})
    (row,) = queue_summary(0, queue_length_series(pairs), window_ns=4 * n * 1000).to_dict("records")
    full_from, full_until = (MAX_QUEUE_LENGTH - 1) * 1000, n * 1000 + (n - MAX_QUEUE_LENGTH)
    assert row["max"] == n and row["min"] == 0 and row["changes"] == 2 * n
    assert row["time_at_max_queue_ns"] == full_until - full_from
    assert row["share_at_max_queue"] == pytest.approx((full_until - full_from) / (4 * n * 1000))


def test_the_queue_summary_of_a_shuffled_series_is_pandas_groupby_s():
    """queue_summary finds each stream's rows by runs of equal names (no groupby): on a series whose rows are
    shuffled (many runs a stream; streams on two devices, "stream 7" and "stream 07" equal in the natural order),
    the rows and figures of a pandas groupby in the order of the streams' first rows, naturally sorted."""
    import numpy as np
    import pandas as pd

    from ddltrace.analyses.gpu_queue import _natural, queue_summary

    rng = np.random.default_rng(17)
    n = 400
    series = pd.DataFrame({"device": pd.array(rng.choice(["gpu:0", "gpu:1"], n), dtype="str"),
                           "stream": pd.array(rng.choice(["stream 7", "stream 07", "stream 23"], n), dtype="str"),
                           "t_ns": rng.integers(0, 10**6, n), "queue_length": rng.integers(-2, 1100, n)})
    expected = []
    for (device, stream), part in sorted(series.groupby(["device", "stream"], sort=False),
                                         key=lambda g: _natural(g[0])):
        t, q = part["t_ns"].to_numpy(), part["queue_length"].to_numpy()
        held, span = np.diff(t), int(t[-1] - t[0])
        at_max = int(held[q[:-1] >= 1024].sum())
        expected.append([3, device, stream, len(q), float(q.mean()),
                         float((q[:-1] * held).sum() / span) if span > 0 else float(q[0]), int(q.max()), int(q.min()),
                         at_max, at_max / 10**7])
    got = queue_summary(3, series, 10**7)
    assert len(got) == 6 and got.values.tolist() == expected


@NEEDS_HTA
def test_hta_gives_the_same_launch_statistics_and_queue_lengths(nccl):
    """HTA 0.5's own get_cuda_kernel_launch_stats and get_queue_length_summary on the same two ranks."""
    hta = hta_figures(NCCL_JOB)
    _, run, _ = nccl
    launches = run.gpu.launch_table().set_index("rank")
    queues = run.gpu.queue_table().set_index(["rank", "stream"])
    assert set(hta) == {"0", "1"}
    for rank, h in hta.items():
        ours, theirs = launches.loc[int(rank)], h["launches"]
        assert ours["launches"] == theirs["count"]
        for mine, key in (("cpu_duration", "cpu_mean_us"), ("gpu_duration", "gpu_mean_us"),
                          ("launch_delay", "delay_mean_us")):
            assert ours[f"{mine}_mean_ns"] / 1e3 == pytest.approx(theirs[key], rel=1e-9)
        assert (ours["runtime_outliers"], ours["launch_delay_outliers"]) == (theirs["runtime_outliers"],
                                                                              theirs["delay_outliers"])
        assert set(h["queues"]) == set(queues.loc[int(rank)].index)
        for stream, q in h["queues"].items():
            row = queues.loc[(int(rank), stream)]
            assert (row["changes"], row["max"]) == (q["changes"], q["max"])
            assert row["mean_hta"] == pytest.approx(q["mean"], rel=1e-9)


def test_the_report_draws_the_longest_ranks_queue_per_stream(nccl, tmp_path):
    """The report's queue figure plots rank 1 (91 queued at most, rank 0: 80), every stream's series the file's."""
    store, run, truths = nccl
    rank, series = run.gpu.queue_series
    assert rank == 1 == max(truths, key=lambda r: max(q for s in truths[r]["queues"].values() for _, q in s))
    for (device, stream), want in truths[rank]["queues"].items():
        mine = series[(series["device"] == device) & (series["stream"] == stream)]
        assert list(zip(mine["t_ns"], mine["queue_length"], strict=True)) == want
    out = tmp_path / "report"
    assert main(["report", str(store), "--out", str(out)]) == 0
    assert (out / "gpu_queue.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "GPU launch queue length per stream" in (out / "report.html").read_text()


def test_the_chrome_export_carries_the_correlation_ids(nccl, tmp_path):
    """``ddltrace export --chrome``: each launch and each kernel keeps its id in args, so that the exported trace
    still pairs them (rank 0's pairs, as many as the file's)."""
    store, _, truths = nccl
    out = tmp_path / "trace.json"
    assert main(["export", str(store), "--chrome", str(out), "--ranks", "0"]) == 0
    events = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"]
    launches = {e["args"]["correlation"] for e in events if e["name"] in LAUNCH_NAMES}
    kernels = [e["args"]["correlation"] for e in events if e["cat"] in ("compute", "comm", "memcpy")
               and "correlation" in e["args"] and e["name"] not in LAUNCH_NAMES]
    assert sum(k in launches for k in kernels) == len(truths[0]["pairs"])
    # each pair is joined by a flow arrow (s at the launch's start on its thread, f at the work's on its stream), as
    # many as the file's pairs
    every = json.loads(out.read_text())["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in every if e.get("ph") == "M" and e["name"] == "thread_name"}
    at = {(e["tid"], e["ts"]): e for e in events}
    flows = defaultdict(dict)
    for e in every:
        if e["ph"] in "sf":
            flows[e["id"]][e["ph"]] = e
    assert len(flows) == len(truths[0]["pairs"])
    for flow in flows.values():
        launch, work = at[(flow["s"]["tid"], flow["s"]["ts"])], at[(flow["f"]["tid"], flow["f"]["ts"])]
        assert launch["name"] in LAUNCH_NAMES and lanes[flow["f"]["tid"]].startswith("gpu:")
        assert launch["args"]["correlation"] == work["args"]["correlation"] and flow["f"]["bp"] == "e"
    # imported back: the same rank, GPU lanes, categories, times (ns), correlation ids and steps as the store's file
    back = tmp_path / "back"
    assert main(["import", str(out), "--out", str(back), "--progress", "never"]) == 0
    columns = ["lane", "name", "category", "start_ns", "dur_ns", "bytes", "step", "correlation", "source"]

    def rows(frame):
        return sorted(frame[columns].astype(object).where(frame[columns].notna(), None).itertuples(index=False),
                      key=lambda row: tuple((v is None, str(v)) for v in row))

    original = pq.read_table(Path(store) / "timeline" / "rank-00000.parquet").to_pandas()
    again = TraceStore.open(back)
    assert again.ranks == [0] and any(lane.startswith("gpu:") for lane in again.timeline()["lane"])
    assert rows(again.timeline().assign(category=lambda f: f["category"].astype(str))) == rows(
        original.assign(category=lambda f: f["category"].astype(str)))


def test_correlation_values_that_are_not_ids_are_missing(tmp_path):
    """A Kineto file whose ``args.correlation`` is text, a fraction, a boolean, negative, beyond int64 or null:
    those rows' ids are missing, the whole ids of the others kept, and the file imports."""
    t0 = 1_700_000_000_000_000
    values = [7, "12", 1.5, True, -3, 2**70, None, 2**62]
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": t0 + 10 * i, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": v}} for i, v in enumerate(values)]
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 - 9,
                   "dur": 3, "args": {"correlation": 7}})
    trace = tmp_path / "hostile.pt.trace.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    out = tmp_path / "store"
    assert main(["import", str(trace), "--out", str(out), "--progress", "never"]) == 0
    frame = TraceStore.open(out).timeline().set_index("name")["correlation"]
    assert (frame["cudaLaunchKernel"], frame["k0"], frame["k7"]) == (7, 7, 2**62)
    assert frame.drop(["cudaLaunchKernel", "k0", "k7"]).isna().all()
    assert analyze_store(out).gpu.launch_table()["launches"].tolist() == [1]
    for i, event in enumerate(events[:3]):  # whole numbers and a boolean only: true is no id 1
        event["args"]["correlation"] = [7, True, 9][i]
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events[:3]}))
    assert main(["import", str(trace), "--out", str(tmp_path / "bools"), "--progress", "never"]) == 0
    assert TraceStore.open(tmp_path / "bools").timeline()["correlation"].tolist() == [7, pd.NA, 9]


def test_json_lists_the_worst_launches(nccl, capsys):
    """``analyze --json``: per rank the 10 longest launch delays and the 10 longest launch calls, the file's."""
    store, _, truths = nccl
    capsys.readouterr()
    assert main(["analyze", str(store), "--json"]) == 0
    worst = json.loads(capsys.readouterr().out)["stores"][0]["gpu"]["worst_launches"]
    for rank, want in truths.items():
        cpu, _, delay = zip(*want["pairs"], strict=True)
        for by, values in (("launch_delay", delay), ("cpu_duration", cpu)):
            rows = [w for w in worst if w["rank"] == rank and w["by"] == by]
            assert [w[f"{by}_ns"] for w in rows] == sorted(values, reverse=True)[:10]
            assert all(w["kernel"] and w["launch"] in LAUNCH_NAMES for w in rows)


def test_the_launch_join_gives_pandas_inner_merge_rows_in_its_order():
    """launch_pairs joins by a sort and a binary search (``_inner_join``): the same (host row, device row) pairs as
    pandas' inner merge, in its order (host rows in order, then device rows in order), duplicates on both sides
    and keys on one side only included."""
    import numpy as np

    from ddltrace.analyses.gpu_launch import _inner_join

    rng = np.random.default_rng(15)
    host, device = rng.integers(0, 40, 300), rng.integers(10, 60, 200)
    left, right = _inner_join(host, device)
    merged = pd.DataFrame({"key": host, "i": np.arange(len(host))}).merge(
        pd.DataFrame({"key": device, "j": np.arange(len(device))}), on="key", how="inner")
    assert len(left) == len(merged) > len(host) // 2
    assert (left == merged["i"].to_numpy()).all() and (right == merged["j"].to_numpy()).all()
    assert (host[left] == device[right]).all()
    assert _inner_join(host, device[:0])[0].size == 0


def test_the_longest_launches_are_a_stable_descending_sort_s_first():
    """worst_launches picks by a partition (``_longest``): the positions of a stable descending argsort's first k,
    ties (many, on few values) in the order of the values, for k of 0, below, at and above the length."""
    import numpy as np

    from ddltrace.analyses.gpu_launch import _longest

    rng = np.random.default_rng(16)
    for n in (0, 1, 5, 30, 200):
        values = rng.integers(0, 6, n) * 1000
        for k in (0, 1, 3, 10, n, n + 2):
            assert (_longest(values, k) == np.argsort(-values, kind="stable")[:k]).all(), (n, k)


def test_a_profile_without_mpi_init_has_no_start_up_printed_as_zero(nccl):
    """HTA's trace_filter (Kineto, no MPI_Init in its files): each rank's start-up is not measured, so the
    breakdown and the scaling table print '-' for it, not '0 ns' beside an MPI run's measured start-up; a run with
    no other at its batch size has no speedup to print."""
    from ddltrace.analyses.scaling import scaling_table
    from ddltrace.commands.analyze import render_run, render_scaling
    from ddltrace.report import scaling_table as report_scaling

    store, run, _ = nccl
    names = set()
    for file in (Path(store) / "timeline").glob("*.parquet"):
        names |= set(pq.read_table(file, columns=["name"]).column("name").to_pylist())
    assert not any(name.upper().startswith(("MPI_INIT", "PMPI_INIT")) for name in names)
    assert not run.phase_table["startup_traced"].any()
    lines = render_run(run, "all")
    header = next(i for i, line in enumerate(lines) if "start-up" in line.split())
    cells = [line.split() for line in lines[header + 1:header + 1 + len(run.phase_table)]]
    assert [c[2] for c in cells] == ["-"] * len(run.phase_table)
    table = scaling_table([run])
    scaling = render_scaling(table)
    header = re.split(r"\s{2,}", scaling[1].strip())  # (the series' label holds single spaces)
    row = dict(zip(header, re.split(r"\s{2,}", scaling[2].strip()), strict=True))
    assert row["start-up"] == "-" and any("start-up '-': no worker traced an MPI_Init" in line for line in scaling)
    # alone at its batch size (as beside an MPI run of another job): no speedup, '-' (was S = w, E = 100 %)
    header = re.split(r"\s{2,}", scaling[1].strip())
    row = dict(zip(header, re.split(r"\s{2,}", scaling[2].strip()), strict=True))
    assert [row[c] for c in ("S steady", "E steady", "S total", "E total", "E lemma (base)")] == ["-"] * 5
    assert table[["speedup_steady", "efficiency_total", "efficiency_lemma_base"]].isna().all().all()
    assert report_scaling([run])["startup_s"].isna().all()  # the report's table: '-', and no point drawn
