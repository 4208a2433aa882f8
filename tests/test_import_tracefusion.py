"""AMD TraceLens' TraceFusion: several ranks' Kineto traces fused into one Chrome JSON file (every event marked with
``args.rank``, pids offset by rank x 10**N with ``args.pid_raw``, correlation ids likewise with
``args.correlation_raw``, processes named "RANK r - CPU/GPU"). The Kineto importer reads such a file as its ranks,
each with its own lanes and its own correlation ids, and says so on the import line.

The real file (amd/HPCTrainingExamples' merged_nccl_only.json.gz, tests/data/wild/PROVENANCE.md) is checked
against figures computed here from its JSON; a small fused file written here (as TraceFusion's ``TraceFuse``
writes one: TraceLens/TraceFusion/trace_fuse.py) checks the splitting where the corpus is absent (CI)."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

from shared_data import corpus, needs

from ddltrace.cli import main
from ddltrace.store import TraceStore

FUSED_NCCL = corpus("tracelens_fused_nccl", "merged_nccl_only.json.gz")
SPLIT = "a TraceFusion file of {n} ranks, split into ranks {ranks}"


def _import(tmp_path: Path, path: Path, capsys) -> tuple[TraceStore, str]:
    out = tmp_path / "store"
    assert main(["import", str(path), "--out", str(out)]) == 0
    return TraceStore.open(out), capsys.readouterr().out


def _ns(us) -> int:
    return int((Decimal(us) * 1000).to_integral_value())


@needs(FUSED_NCCL)
def test_real_fused_file_split_into_its_ranks(tmp_path, capsys):
    """merged_nccl_only: 4 ranks (21 NCCL kernels and 21 gpu_user_annotation spans each, on device 2 + rank, stream
    4): each rank holds its own kernels on gpu:<device>/stream 4 and its marks beside them, events and time (exact
    ns) as the file's events of that args.rank, and the correlation ids its own profiler wrote (correlation_raw)."""
    with gzip.open(FUSED_NCCL, "rt") as fh:
        events = json.load(fh, parse_float=Decimal)["traceEvents"]
    want: dict[int, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    correlations: dict[int, list[int]] = defaultdict(list)
    devices: dict[int, str] = {}
    for e in events:
        if e["ph"] != "X":
            continue
        args = e["args"]
        rank = args["rank"]
        if e["cat"] == "kernel":
            devices[rank] = lane = f"gpu:{args['device']}/stream {args['stream']}"
            correlations[rank].append(args["correlation_raw"])
            assert args["correlation"] != args["correlation_raw"] or rank == 0  # (offset by TraceFusion)
        else:
            assert e["cat"] == "gpu_user_annotation"
            lane = "annotations"
        want[rank][lane][0] += 1
        want[rank][lane][1] += _ns(e["dur"])
    assert sorted(want) == [0, 1, 2, 3]

    store, printed = _import(tmp_path, FUSED_NCCL, capsys)
    assert store.ranks == [0, 1, 2, 3]
    assert SPLIT.format(n=4, ranks="0-3") in printed
    timeline = store.timeline(store.ranks)
    for rank in store.ranks:
        rows = timeline[timeline["rank"] == rank]
        got = {lane: [len(g), int(g["dur_ns"].sum())] for lane, g in rows.groupby("lane")}
        device = devices[rank]
        assert got == {device: want[rank][device], f"{device}/annotations": want[rank]["annotations"]}, rank
        assert want[rank][device][0] == 21 and want[rank]["annotations"][0] == 21
        kernels = rows[rows["lane"] == device].sort_values("start_ns")
        assert sorted(kernels["correlation"].astype(int)) == sorted(correlations[rank]), rank
        assert set(kernels["category"].astype(str)) == {"comm"}
    assert [devices[r] for r in range(4)] == [f"gpu:{2 + r}/stream 4" for r in range(4)]


def _rank_trace(rank: int, host_pid: int, start_us: float) -> dict:
    """One rank's Kineto trace: a ProfilerStep#1 span and a kernel launch on its main thread, the kernel on device 0
    stream 7 (the same device number and correlation id 5 on every rank: ranks of different machines), a B/E span on
    a second thread."""
    t = start_us
    return {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": host_pid, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "thread_name", "pid": host_pid, "tid": 11, "args": {"name": "main"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": host_pid, "tid": 11, "ts": t,
         "dur": 1000, "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": host_pid, "tid": 11, "ts": t + 10,
         "dur": 5, "args": {"External id": 2, "correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
         "ts": t + 20, "dur": 100 + 10 * rank, "args": {"External id": 2, "device": 0, "stream": 7, "correlation": 5}},
        {"ph": "B", "cat": "user_annotation", "name": "data_wait", "pid": host_pid, "tid": 12, "ts": t + 2},
        {"ph": "E", "cat": "user_annotation", "name": "data_wait", "pid": host_pid, "tid": 12, "ts": t + 9},
    ]}


def _fuse(traces: list[dict]) -> dict:
    """TraceFusion's ``TraceFuse.merge`` (TraceLens/TraceFusion/trace_fuse.py at 171dd74): process names, sort
    indices and labels dropped, every other event marked with its rank and its pid (and the linking key,
    ``correlation`` where a launch carries it) offset by rank x 10**(digits of rank 0's largest + 1), the old
    values kept as ``<field>_raw``; then "RANK r - CPU/GPU" process names."""
    first = traces[0]["traceEvents"]
    offset = {field: 10 ** (math.ceil(math.log10(max(
        (e.get("args", {}).get(field) if field == "correlation" else e.get(field)) or 0 for e in first) + 1)) + 1)
        for field in ("pid", "correlation")}
    merged = []
    for rank, trace in enumerate(traces):
        for e in json.loads(json.dumps(trace["traceEvents"])):
            if e["ph"] == "M" and e["name"] in ("process_name", "process_sort_index", "process_labels"):
                continue
            args = e.setdefault("args", {})
            args["rank"] = rank
            args["pid_raw"] = e["pid"]
            e["pid"] += rank * offset["pid"]
            if "correlation" in args:
                args["correlation_raw"] = args["correlation"]
                args["correlation"] += rank * offset["correlation"]
            merged.append(e)
    for pid, rank, label in sorted({(e["pid"], e["args"]["rank"], "GPU" if e.get("cat") == "kernel" else "CPU")
                                    for e in merged if e["ph"] != "M"}):
        merged.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": f"RANK {rank} - {label}"}})
    return {"traceEvents": merged}


def test_written_fused_file_split_into_its_ranks(tmp_path, capsys):
    """Two ranks fused as TraceFusion does (rank 1's pids + 10**5), both on device 0 with correlation id 5: each rank
    its own, its kernel on its own gpu:0/stream 7 (device 100000 - 10**5) with its own duration (100 and 110 us) and
    its own correlation id 5, in step 1 (its own launch, in its own ProfilerStep#1); host threads by their names,
    the B/E span on its rank's lane."""
    path = tmp_path / "merged_trace.json.gz"
    fused = _fuse([_rank_trace(0, 4242, 1_000_000.0), _rank_trace(1, 4343, 1_000_300.5)])
    assert {e["pid"] for e in fused["traceEvents"]} == {4242, 0, 104343, 100000}  # (TraceFusion's offsets)
    with gzip.open(path, "wt") as fh:
        json.dump(fused, fh)
    store, printed = _import(tmp_path, path, capsys)
    assert store.ranks == [0, 1]
    assert SPLIT.format(n=2, ranks="0-1") in printed
    timeline = store.timeline(store.ranks)
    for rank in (0, 1):
        rows = timeline[timeline["rank"] == rank]
        assert sorted(rows["lane"]) == ["cpu/main", "cpu/main", "cpu/tid 12", "gpu:0/stream 7"], rank
        kernel = rows[rows["lane"] == "gpu:0/stream 7"].iloc[0]
        assert int(kernel["dur_ns"]) == (100 + 10 * rank) * 1000
        assert int(kernel["start_ns"]) - int(rows["start_ns"].min()) == 20_000
        assert int(kernel["correlation"]) == 5 and int(kernel["step"]) == 1, rank
        launch = rows[rows["name"] == "cudaLaunchKernel"].iloc[0]
        assert int(launch["correlation"]) == 5
        wait = rows[rows["name"] == "data_wait"].iloc[0]
        assert wait["lane"] == "cpu/tid 12" and int(wait["dur_ns"]) == 7000
    starts = timeline.groupby("rank")["start_ns"].min()
    assert int(starts[1] - starts[0]) == 300_500  # one timeline, as fused: the ranks' times as written
    # and said so: one clock for both (QA s21: info read "each rank's times are relative to its own start")
    assert store.manifest["clock"]["method"].startswith("single clock: all ranks from one archive or file")


def test_a_fused_file_beside_a_rank_on_the_wall_clock_is_an_import_problem(tmp_path, capsys):
    """The fused file's ranks share its own clock, not the wall clock: beside a rank on the wall clock, the mix is
    named as a problem of the fused file, as a relative file's is (review s21: marking its clock one for all ranks
    had silenced the check, which looked for relative times only)."""
    fused = tmp_path / "merged_trace.json.gz"
    with gzip.open(fused, "wt") as fh:
        json.dump(_fuse([_rank_trace(0, 4242, 1_000_000.0), _rank_trace(1, 4343, 1_000_300.5)]), fh)
    wall = tmp_path / "rank2.json"  # (its rank from its name: by order it would be the fused file's rank 1)
    wall.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "work", "cat": "cpu", "pid": 1, "tid": 1,
                                                 "ts": 1_790_000_000_000_000, "dur": 50}]}))
    assert main(["import", str(fused), str(wall), "--out", str(tmp_path / "store")]) == 0
    assert (f"{fused}: its times are on its own clock, not the wall clock (ranks 0-1), while ranks 2 are on the wall "
            "clock" in capsys.readouterr().out)
