"""Each format imported from real files (shared third-party traces; skipped when absent) or, for formats
with no real file on this machine, files written in the exact layout FORMATS.md documents."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from shared_data import SHARED

from ddltrace.collectors.importers import Categorizer, ImportContext, detect
from ddltrace.collectors.importers.base import FileReport

SHARED = SHARED
HTA = SHARED / "hta_traces"
CNTK = SHARED / "cntk_traces"
MPI = SHARED / "mpi_traces"
DATA = Path(__file__).parent / "data"


def _import(path: Path, rank_from: str = "auto"):
    importer = detect(path)
    ctx = ImportContext(Categorizer(), rank_from=rank_from, report=FileReport(str(path)))
    return importer.name, list(importer.read(path, ctx)), ctx


def _category_of(part, name):
    cats = set(part.timeline.loc[part.timeline["name"] == name, "category"].astype(str))
    assert len(cats) == 1, (name, cats)
    return cats.pop()


@pytest.mark.skipif(not (HTA / "trace_filter").exists(), reason="shared HTA traces absent")
def test_kineto_two_ranks_with_nccl_kernels():
    for rank in (0, 1):
        fmt, parts, ctx = _import(HTA / "trace_filter" / f"sampled_rank-{rank}.json.gz")
        assert fmt == "kineto"
        (part,) = parts
        assert part.rank == rank and part.clock == "epoch"
        tl = part.timeline
        nccl = tl[tl["name"].str.startswith("ncclKernel_SendRecv")]
        assert len(nccl) and set(nccl["category"].astype(str)) == {"comm"}
        assert nccl["lane"].str.startswith("gpu:").all()
        gemm = tl[tl["name"].str.contains("gemm", case=False) & tl["lane"].str.startswith("gpu:")]
        assert len(gemm) and set(gemm["category"].astype(str)) == {"compute"}
        assert tl["start_ns"].min() > 1_600_000_000 * 10**9  # epoch ns
        assert ctx.report.events == (4855 if rank == 0 else 4720)
        assert 551 in tl["step"].dropna().tolist()  # ProfilerStep#551 marks its step


@pytest.mark.skipif(not (HTA / "nccl_parser_config").exists(), reason="shared HTA traces absent")
def test_kineto_relative_time_uses_base_time_nanoseconds():
    _, (part,), _ = _import(HTA / "nccl_parser_config" / "nccl_data.json.gz")
    start_s = part.timeline["start_ns"].min() / 1e9
    # ts are µs relative to baseTimeNanoseconds; the sum lands at the time the trace's own log lines give
    # ("INFO:2024-05-22 17:15:23", US Pacific = 2024-05-23 00:15:23 UTC = 1716423323 s)
    assert abs(start_s - 1716423323) < 600


@pytest.mark.skipif(not (HTA / "cpu_only").exists(), reason="shared HTA traces absent")
def test_kineto_cpu_only_gloo_rank_from_distributed_info():
    _, (part,), _ = _import(next((HTA / "cpu_only").glob("*.json.gz")))
    assert part.rank == 34 and part.info["world_size"] == 300 and part.info["backend"] == "gloo"
    assert not part.timeline["lane"].str.startswith("gpu:").any()


@pytest.mark.skipif(not CNTK.exists(), reason="shared CNTK traces absent")
def test_cntk_detail_matches_its_own_summary():
    for rank in (0, 1):
        detail = next(CNTK.glob(f"*_detail_{rank}.json"))
        fmt, (part,), ctx = _import(detail)
        assert fmt == "cntk" and part.rank == rank and part.clock == "relative"
        tl = part.timeline
        assert ctx.report.skipped["E without a matching B"] == 0 and ctx.report.skipped["B never closed by an E"] == 0
        summary = next(CNTK.glob(f"*_summary_{rank}.txt")).read_text()
        for name, category in (("__Gradient Aggregation", "comm"), ("__Get Minibatch", "io"),
                               ("__Forward + Backward", "compute"), ("Prefetch Minibatch", "io")):
            total_ms = float(re.search(rf"^{re.escape(name)}\s*:.*?(\S+) ms\s*$", summary, re.M).group(1))
            got_ms = tl.loc[tl["name"] == name, "dur_ns"].sum() / 1e6
            assert got_ms == pytest.approx(total_ms, abs=0.01 + 0.001 * total_ms), name
            assert _category_of(part, name) == category
        assert set(tl.loc[tl["name"] == "Prefetch Minibatch", "lane"]) != {"main"}  # reader thread


@pytest.mark.skipif(not CNTK.exists(), reason="shared CNTK traces absent")
def test_cntk_summary_is_an_aggregate_with_the_summary_totals():
    fmt, (part,), _ = _import(next(CNTK.glob("*_summary_1.txt")))
    assert fmt == "cntk-summary" and part.rank == 1 and part.info["aggregate"] is True
    tl = part.timeline
    assert tl.loc[tl["name"] == "__Gradient Aggregation", "dur_ns"].iloc[0] > 0
    main = tl[tl["lane"] == "main thread"]
    epoch_total = 0.0
    for line in next(CNTK.glob("*_summary_1.txt")).read_text().splitlines():
        if line.startswith("Epoch "):
            epoch_total = float(line.split()[-2])
    assert main["dur_ns"].sum() / 1e6 == pytest.approx(epoch_total, abs=0.01)


@pytest.mark.skipif(not CNTK.exists(), reason="shared CNTK traces absent")
def test_cntk_summary_categories_are_the_files_rows():
    """Each category's time is the summed Total of the summary's deepest rows of that category; the time of the
    top row (Epoch) in no deeper row is Epoch's and Minibatch Iteration's own time: `other`, as the detail JSON's
    importer makes it (it was counted as compute: 24.98 ms instead of the file's 24.20 ms on rank 0)."""
    for rank in (0, 1):
        path = next(CNTK.glob(f"*_summary_{rank}.txt"))
        rows = {}
        for line in path.read_text().splitlines():
            m = re.match(r"^(\S.*?)\s*:.*\s(\S+) ms\s*$", line)
            if m:
                rows[m.group(1)] = float(m.group(2)) * 1e6
        expected = {"compute": rows["__Forward + Backward"] + rows["__Weight Update"] + rows["__Post Processing"],
                    "comm": rows["__Gradient Aggregation"], "io": rows["__Get Minibatch"],
                    "other": rows["Epoch"] - sum(rows[n] for n in rows if n.startswith("__"))}
        _, (part,), _ = _import(path)
        main = part.timeline[part.timeline["lane"] == "main thread"]
        got = main.groupby("category", observed=True)["dur_ns"].sum()
        for category, ns in expected.items():
            assert got.get(category, 0) == pytest.approx(ns, abs=2), (rank, category)


@pytest.mark.skipif(not (MPI / "ipm-xml").exists(), reason="shared MPI traces absent")
def test_ipm_ranks_and_compute_wait_barrier_ratios():
    path = next((MPI / "ipm-xml").glob("*.xml"))
    fmt, parts, _ = _import(path)
    assert fmt == "ipm" and sorted(p.rank for p in parts) == list(range(27))
    part0 = next(p for p in parts if p.rank == 0)
    tl = part0.timeline
    by_cat = tl.groupby("category", observed=True)["dur_ns"].sum() / 1e9
    assert by_cat["compute"] == pytest.approx(3.68385 - 0.98285, rel=1e-4)  # wtime - mtime of rank 0
    assert by_cat["wait"] == pytest.approx(2.0538e-01 + 9.6359e-03, rel=1e-3)  # MPI_Wait + MPI_Waitall
    assert by_cat["barrier"] == pytest.approx(3.1836e-02, rel=1e-3)
    assert tl.loc[tl["name"] == "MPI_Isend", "bytes"].iloc[0] == 13625000
    assert part0.info["host"] == "jupiter2"


@pytest.mark.skipif(not (MPI / "ipm-xml").exists(), reason="shared MPI traces absent")
@pytest.mark.parametrize("damage", ['> -1.3001e-03 <', ' count="1e400" ', ' wtime="inf" '])
def test_ipm_task_with_impossible_numbers_is_skipped_and_named(tmp_path, damage):
    """A negative time, an infinite count or wall time in one task (they crashed or broke the schema): that
    task is skipped with a problem naming it and the value, the other 26 ranks are kept."""
    real = next((MPI / "ipm-xml").glob("*.xml")).read_text()
    first = {'> -1.3001e-03 <': "> 1.3001e-03 <", ' count="1e400" ': ' count="8393" ',
             ' wtime="inf" ': ' wtime="3.68385e+00" '}[damage]
    assert first in real
    path = tmp_path / "damaged.ipm.xml"
    path.write_text(real.replace(first, damage, 1))
    fmt, parts, ctx = _import(path)
    assert fmt == "ipm" and sorted(p.rank for p in parts) == list(range(1, 27))
    assert ctx.report.skipped["IPM task with unreadable numbers"] == 1
    (problem,) = ctx.report.problems
    assert "damaged.ipm.xml: task mpi_rank=0:" in problem and damage.strip(' <>').split("=")[-1].strip('"') in problem


@pytest.mark.skipif(not (MPI / "pipit-ping-pong-otf2").exists(), reason="shared MPI traces absent")
def test_otf2_ping_pong():
    pytest.importorskip("otf2")
    fmt, parts, ctx = _import(MPI / "pipit-ping-pong-otf2" / "traces.otf2")
    assert fmt == "otf2" and [p.rank for p in parts] == [0, 1]
    tl = parts[0].timeline
    sends = tl[tl["name"] == "MPI_Send"]
    assert sends["bytes"].tolist() == [16384 * 2**i for i in range(8)]  # ping-pong doubling the size
    assert (sends["peer"] == 1).all() and (sends["tag"] == 10).all()
    assert set(sends["category"].astype(str)) == {"comm"}
    assert _category_of(parts[1], "MPI_Recv") == "comm"
    assert (parts[1].timeline[parts[1].timeline["name"] == "MPI_Recv"]["peer"] == 0).all()
    assert ctx.report.events == 120


# ------------------------------------------------------------ formats with no real file here: FORMATS.md layouts

def _lines(path: Path, events: list[dict], close: bool = True) -> Path:
    body = "[\n" + "".join(json.dumps(e) + ",\n" for e in events)
    path.write_text(body.rstrip(",\n") + "\n]\n" if close else body)
    return path


def test_horovod_timeline_old_never_closed_and_unmatched_end(tmp_path):
    events = [{"name": "process_name", "ph": "M", "pid": 0,
               "args": {"start_time_since_epoch_in_micros": 1633399518104473}},
              {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.0.weight"}},
              {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 100, "pid": 1},
              {"ph": "X", "name": "1", "ts": 101, "pid": 1, "dur": 0},
              {"ph": "X", "name": "0", "ts": 103, "pid": 1, "dur": 0},
              {"ph": "E", "ts": 104, "pid": 1},
              {"ph": "B", "name": "ALLREDUCE", "ts": 105, "pid": 1},
              {"ph": "B", "name": "MEMCPY_IN_FUSION_BUFFER", "ts": 105, "pid": 1}, {"ph": "E", "ts": 107, "pid": 1},
              {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 107, "pid": 1}, {"ph": "E", "ts": 140, "pid": 1},
              {"ph": "E", "ts": 141, "pid": 1, "args": {"dtype": "float32", "shape": "[10, 512]"}},
              {"ph": "i", "name": "CYCLE_START", "ts": 150, "s": "g"},
              {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "join.noname"}},
              {"ph": "E", "ts": 160, "pid": 2}]
    fmt, (part,), ctx = _import(_lines(tmp_path / "timeline.json", events, close=False))
    assert fmt == "horovod" and part.rank == 0 and part.clock == "epoch"
    tl = part.timeline.set_index("name")
    assert tl.loc["GLOO_ALLREDUCE", "category"] == "comm" and tl.loc["GLOO_ALLREDUCE", "dur_ns"] == 33_000
    assert tl.loc["NEGOTIATE_ALLREDUCE", "category"] == "wait"
    assert tl.loc["MEMCPY_IN_FUSION_BUFFER", "category"] == "memcpy"
    assert tl.loc["ALLREDUCE", "start_ns"] == (1633399518104473 + 105) * 1000
    assert tl.loc["ALLREDUCE", "lane"] == "tensor:allreduce.0.weight"
    assert ctx.report.skipped["E without a matching B"] == 1
    assert ctx.report.skipped["events array never closed (tolerated)"] == 1


def test_mxnet_profile_with_hashed_ids_rank_from_file_name(tmp_path):
    tid = 13442838458993307669  # > 2**63: engine thread hash
    api = 849786139768988538
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "cpu/0"}},
              {"name": "process_name", "ph": "M", "pid": api, "args": {"name": "MXNET_C_API"}},
              {"name": "FullyConnected", "cat": "operator", "ph": "B", "ts": 1700000000000100, "pid": 0, "tid": tid},
              {"name": "FullyConnected", "cat": "operator", "ph": "E", "ts": 1700000000000180, "pid": 0, "tid": tid},
              {"name": "KVStoreDistDefaultStoragePushPull", "cat": "operator", "ph": "B", "ts": 1700000000000200,
               "pid": 0, "tid": tid},
              {"name": "KVStoreDistDefaultStoragePushPull", "cat": "operator", "ph": "E", "ts": 1700000000000900,
               "pid": 0, "tid": tid},
              {"name": "MXNDArrayWaitAll", "cat": "MXNET_C_API", "ph": "b", "ts": 1700000000000190, "pid": api,
               "tid": 7, "id": 7},
              {"name": "MXNDArrayWaitAll", "cat": "MXNET_C_API", "ph": "e", "ts": 1700000000000950, "pid": api,
               "tid": 7, "id": 7},
              {"name": "MXNet C API Calls", "cat": "MXNET_C_API", "ph": "C", "ts": 1700000000000190, "pid": api,
               "args": {"MXNet C API Calls": 3}}]
    path = tmp_path / "profile_dist_sync_rank1.json"
    path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, indent=2) + "\n\n")
    fmt, (part,), _ = _import(path)
    assert fmt == "mxnet" and part.rank == 1
    tl = part.timeline.set_index("name")
    assert tl.loc["KVStoreDistDefaultStoragePushPull", "category"] == "comm"
    assert tl.loc["FullyConnected", "category"] == "compute" and tl.loc["FullyConnected", "dur_ns"] == 80_000
    assert tl.loc["MXNDArrayWaitAll", "category"] == "wait" and tl.loc["MXNDArrayWaitAll", "dur_ns"] == 760_000
    assert tl.loc["FullyConnected", "lane"] == "cpu/0/thread 0"
    assert part.counters is not None and part.counters["value"].tolist() == [3.0]


def _tf1_events():
    worker = "/job:worker/replica:0/task:1/device:CPU:0"
    ps = "/job:ps/replica:0/task:0/device:CPU:0"
    gpu_all = "/job:worker/replica:0/task:1/device:GPU:0/stream:all"
    gpu_7 = "/job:worker/replica:0/task:1/device:GPU:0/stream:7"
    procs = [(0, "Allocators"), (1, f"{worker} Compute"), (2, f"{worker} Tensors"), (3, f"{ps} Compute"),
             (5, f"{worker} Compute"), (6, f"{gpu_all} Compute"), (7, f"{gpu_7} Compute")]
    events = [{"name": "process_name", "ph": "M", "pid": p, "args": {"name": n}} for p, n in procs]
    t = 1700000000000000
    ops = [(1, "MatMul", 10, 50), (1, "Relu", 60, 5), (5, "RecvTensor", 0, 9), (3, "ApplyGradientDescent", 70, 4),
           (6, "sgemm", 12, 30), (7, "sgemm", 12, 30), (1, "_Send", 66, 2)]
    for pid, op, ts, dur in ops:
        events.append({"ph": "X", "cat": "Op", "name": op, "pid": pid, "tid": 0, "ts": t + ts, "dur": dur,
                       "args": {"name": f"node/{op}", "op": op}})
    events.append({"ph": "s", "cat": "DataFlow", "name": "MatMul", "pid": 1, "tid": 0, "ts": t + 10, "id": 0})
    return events


def test_tf1_timeline_worker_rank_ps_rank_and_dedup(tmp_path):
    path = tmp_path / "timeline_worker1.json"
    path.write_text(json.dumps({"traceEvents": _tf1_events()}, indent=4))
    fmt, parts, ctx = _import(path)
    assert fmt == "tf1"
    by_rank = {p.rank: p for p in parts}
    assert set(by_rank) == {1, ("ps", 0)}
    worker = by_rank[1].timeline.set_index("name")
    assert worker.loc["MatMul", "category"] == "compute" and worker.loc["RecvTensor", "category"] == "comm"
    assert worker.loc["_Send", "category"] == "comm"
    assert worker.loc["MatMul", "lane"] == worker.loc["RecvTensor", "lane"] == "cpu:0/lane 0"  # pids 1, 5 merged
    assert (by_rank[1].timeline["name"] == "sgemm").sum() == 1  # stream:all dropped
    assert ctx.report.dropped["duplicate GPU events (/stream:all)"] == 1
    assert by_rank[("ps", 0)].timeline["name"].tolist() == ["ApplyGradientDescent"]


def test_tf1_gpu_executor_ops_are_host_work(tmp_path):
    """TF1's '<task>/device:GPU:0 Compute' process holds the executor's op times (launch to launch done, on a
    host thread), its '/device:GPU:0/stream:N' processes what ran on the GPU: only the streams are device lanes,
    so the device's work is the stream's 30 us, not the executor's 100 us."""
    from ddltrace.analyses.breakdown import device_lanes

    gpu = "/job:worker/replica:0/task:1/device:GPU:0"
    events = [{"name": "process_name", "ph": "M", "pid": p, "args": {"name": n}}
              for p, n in ((1, f"{gpu} Compute"), (2, f"{gpu}/stream:7 Compute"))]
    t = 1700000000000000
    for pid, ts, dur in ((1, 0, 100), (2, 40, 30)):
        events.append({"ph": "X", "cat": "Op", "name": "MatMul", "pid": pid, "tid": 0, "ts": t + ts, "dur": dur,
                       "args": {"name": "dense/MatMul", "op": "MatMul"}})
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps({"traceEvents": events}))
    fmt, (part,), _ctx = _import(path)
    assert fmt == "tf1"
    tl = part.timeline
    assert sorted(tl["lane"]) == ["gpu:0/stream:7/lane 0", "host/gpu:0 executor/lane 0"]
    on_device = device_lanes(tl["lane"])
    assert tl.loc[on_device, "dur_ns"].tolist() == [30_000]


def test_tf2_trace_viewer_json_drops_derived_lines(tmp_path):
    events = [{"pid": 701, "name": "process_name", "ph": "M", "args": {"name": "/host:CPU"}},
              {"pid": 1, "name": "process_name", "ph": "M", "args": {"name": "/device:GPU:0"}},
              {"pid": 701, "tid": 123, "name": "thread_name", "ph": "M", "args": {"name": "tf_Compute/123"}},
              {"pid": 1, "tid": 3735928562, "name": "thread_name", "ph": "M", "args": {"name": "TensorFlow Ops"}},
              {"pid": 1, "tid": 7, "name": "thread_name", "ph": "M", "args": {"name": "Stream #7(Compute)"}},
              {"pid": 701, "tid": 123, "ts": 11.403, "dur": 100.5, "ph": "X",
               "name": "replica_1/CollectiveReduceV2:CollectiveReduceV2"},
              {"pid": 701, "tid": 123, "ts": 5.0, "dur": 200.0, "ph": "X", "name": "train 3",
               "args": {"step_num": "3"}},
              {"pid": 1, "tid": 3735928562, "ts": 20.0, "dur": 10.0, "ph": "X", "name": "dense/MatMul:MatMul"},
              {"pid": 1, "tid": 7, "ts": 20.0, "dur": 10.0, "ph": "X", "name": "volta_sgemm_128x64_nn"},
              {"pid": 701, "tid": 123, "ts": 30.0, "ph": "i", "s": "t", "name": "ThreadpoolListener::Record"}, {}]
    path = tmp_path / "worker1" / "host.trace.json.gz"
    path.parent.mkdir()
    import gzip

    path.write_bytes(gzip.compress(json.dumps({"displayTimeUnit": "ns", "metadata": {"highres-ticks": True},
                                               "traceEvents": events}).encode()))
    fmt, (part,), ctx = _import(path)
    assert fmt == "tf2" and part.rank == 1 and part.clock == "relative"
    tl = part.timeline.set_index("name")
    assert tl.loc["replica_1/CollectiveReduceV2:CollectiveReduceV2", "category"] == "comm"
    assert tl.loc["replica_1/CollectiveReduceV2:CollectiveReduceV2", "start_ns"] == 11403
    assert tl.loc["volta_sgemm_128x64_nn", "lane"] == "gpu:0/Stream #7(Compute)"
    assert "dense/MatMul:MatMul" not in tl.index
    assert tl.loc["train 3", "step"] == 3 and tl.loc["train 3", "category"] == "other"
    assert ctx.report.skipped["events without a phase (ph), such as TF2's trailing {}"] == 1


@pytest.mark.skipif(not (MPI / "pipit-ping-pong-otf2").exists(), reason="shared MPI traces absent")
@pytest.mark.parametrize("damage", ["events", "anchor"])
def test_otf2_damaged_archive_is_one_line_not_the_library_s_noise(tmp_path, capfd, damage):
    """The C library prints its own errors and the package its own tracebacks: both are kept off the terminal;
    an archive whose anchor is damaged is refused in one line naming it (exit 2), one whose rank 1 events are
    damaged in their first chunk is imported with rank 0 whole and rank 1 named (each location read on its own
    once the global reader, which starts every location's events at once, meets the damage)."""
    pytest.importorskip("otf2")
    import shutil

    from ddltrace.cli import main

    archive = tmp_path / "a"
    shutil.copytree(MPI / "pipit-ping-pong-otf2", archive)
    victim = archive / ("traces/1.evt" if damage == "events" else "traces.otf2")
    data = victim.read_bytes()
    victim.write_bytes(data[:len(data) // 2])
    code = main(["import", str(archive / "traces.otf2"), "--out", str(tmp_path / "store"), "--progress", "never"])
    out, err = capfd.readouterr()
    assert "[OTF2]" not in out + err and "Traceback" not in out + err
    if damage == "events":
        assert code == 0 and "ranks 0, in" in out, out
        problems = [line for line in out.splitlines() if "problem:" in line]
        assert len(problems) == 1 and "traces.otf2: rank 1 (Master thread): OTF2 events unreadable" in problems[0]
        return
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "traces.otf2: not a readable OTF2 archive" in err and "anchor file" in err


@pytest.mark.parametrize("variant", ["begin-end columns", "begin and end rows"])
def test_cntk_detail_csv_both_header_variants(tmp_path, variant):
    """The older CNTK detail CSV (no real file exists here: CNTK does not install on Python 3.11), in the two
    layouts FORMATS.md gives from CNTK's source; bad rows (text, NaN, inf, ends before begins, begins never
    ended) are counted, the rest keeps CNTK's categories."""
    if variant == "begin-end columns":
        text = ('EventDescription,ThreadId,BeginTimeStamp(ms),EndTimeStamp(ms)\n'
                '"__Forward + Backward",1234,10.5,30.25\n"__Gradient Aggregation",1234,30.25,45.0\n'
                '"Prefetch Minibatch",1300,5.0,9.0\n"bad",1234,x,3\n"__Weight Update",1234,50,49\n'
                '"never",1234,nan,1\n"far",1234,1,inf\n')
        bad = 4
    else:
        text = ('EventId,Description,ThreadId,TimeStamp(ms)\n'
                '1,"__Forward + Backward",1234,10.5\n1,"__Forward + Backward",1234,30.25\n'
                '2,"__Gradient Aggregation",1234,30.25\n2,"__Gradient Aggregation",1234,45.0\n'
                '3,"Prefetch Minibatch",1300,5.0\n3,"Prefetch Minibatch",1300,9.0\n'
                '4,"backwards",1234,9\n4,"backwards",1234,8\n5,"open",1234,60\n6,"inf",1234,inf\n')
        bad = 3  # the end before its begin, the begin never ended, the unreadable time
    path = tmp_path / "2017-01-01_10-00-00_detail_3.csv"
    path.write_text(text)
    fmt, parts, ctx = _import(path)
    assert fmt == "cntk-csv" and [p.rank for p in parts] == [3] and parts[0].clock == "relative"
    tl = parts[0].timeline.set_index("name")
    assert tuple(tl.loc["__Forward + Backward", ["start_ns", "dur_ns"]]) == (10_500_000, 19_750_000)
    assert {n: _category_of(parts[0], n) for n in ("__Forward + Backward", "__Gradient Aggregation",
                                                    "Prefetch Minibatch")} == {
        "__Forward + Backward": "compute", "__Gradient Aggregation": "comm", "Prefetch Minibatch": "io"}
    assert len(tl) == 3 and ctx.report.skipped["unreadable or unpaired CSV rows"] == bad


def test_cntk_detail_csv_empty_is_one_line(tmp_path):
    from ddltrace.collectors.importers import get_importer
    from ddltrace.errors import DdltraceError

    path = tmp_path / "x_detail_0.csv"
    path.write_text("")
    with pytest.raises(DdltraceError, match="x_detail_0.csv: empty CSV"):
        list(get_importer("cntk-csv").read(path, ImportContext(Categorizer())))


def test_every_shipped_rule_pattern_is_a_regular_expression():
    """The shipped rules' patterns are compiled when first used (an import pays for its formats' only): each one
    compiles, so no import finds a bad one late."""
    import re

    from ddltrace.collectors.importers.categories import shipped_rules

    patterns = [p.pattern for rule in shipped_rules() for p in (rule.cat, rule.name) if p is not None]
    assert len(patterns) > 50
    assert all(isinstance(re.compile(p), re.Pattern) for p in patterns)


def test_preparing_a_format_compiles_its_rules_patterns_only_and_decides_the_same():
    """``Categorizer.prepare(fmt)`` (run while a large file's readers read) compiles the patterns of the rules that
    apply to ``fmt``, not the others', and the categories decided are those of an unprepared categorizer."""
    from ddltrace.collectors.importers.categories import _OnFirstSearch

    prepared, lazy = Categorizer(), Categorizer()
    prepared.prepare("kineto")
    compiled = {id(p) for r in prepared.rules for p in (r.cat, r.name)
                if isinstance(p, _OnFirstSearch) and p._compiled is not None}
    mine = {id(p) for r in prepared.rules if "*" in r.formats or "kineto" in r.formats for p in (r.cat, r.name)
            if isinstance(p, _OnFirstSearch)}
    assert compiled == mine and len(mine) > 5
    events = [("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float"), ("kernel", "volta_sgemm_128x64_nn"),
              ("cuda_runtime", "cudaLaunchKernel"), ("gpu_memcpy", "Memcpy DtoD (Device -> Device)"),
              ("cpu_op", "aten::mm"), ("user_annotation", "ProfilerStep#3")]
    assert [prepared.category("kineto", c, n) for c, n in events] == [lazy.category("kineto", c, n) for c, n in events]
