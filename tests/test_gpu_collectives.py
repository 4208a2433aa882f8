"""Collectives across ranks (analyses/gpu_collectives.py), memory copies (analyses/gpu_memcpy.py) and idle time
waiting for the host (analyses/gpu_idle.py), each figure checked against one computed here from the file itself.

Real traces: HTA's nccl_parser_config (one rank of a 2-rank NCCL job: all-reduce and broadcast kernels with c10d's
args), trace_filter (two ranks of one 128-rank job: point-to-point SendRecv kernels, copies of every direction) and
TraceLens' B200 trace (an all-gather in a group of 8). The Kineto importer does not yet put a kernel's or a copy's
payload in the timeline's ``bytes`` column: :func:`with_file_bytes` puts there what the file's args say (c10d's
``In/Out msg nelems`` x the dtype's size, a copy's ``bytes``), so that the bandwidth figures are checked on the
real sizes and durations. Cross-rank matching is checked on the two real ranks (nothing to match: their kernels
are point-to-point) and on a written 4-rank store whose rank 2 arrives late at every all-reduce.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from shared_data import SHARED, corpus, needs

from ddltrace.analyses.gpu_collectives import BUS_FACTORS, late_arrivals, parse_name, summary
from ddltrace.analyses.run_analysis import analyze_store, not_made
from ddltrace.cli import main
from ddltrace.store import TraceStore, write_store

NCCL_DATA = SHARED / "hta_traces" / "nccl_parser_config" / "nccl_data.json.gz"
NCCL_JOB = SHARED / "hta_traces" / "trace_filter"
B200 = corpus("tracelens_b200_eager", "eager_trace.json.gz")
present = {p: pytest.mark.skipif(not p.exists(), reason=f"{p} is not here (the shared real traces)")
           for p in (NCCL_DATA, NCCL_JOB)}
#: c10d's dtype names and their sizes in bytes
DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Byte": 1, "Char": 1}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def events(path: Path) -> tuple[list[dict], dict]:
    """The complete (X) events of a Kineto file and its distributedInfo, with ``baseTimeNanoseconds`` (the origin
    of a file's times when they are not since the epoch: below 1e15 µs) as ``"base_ns"``."""
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    evs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    relative = min(Decimal(e["ts"]) for e in evs) < Decimal(10) ** 15
    info = dict(doc.get("distributedInfo", {}), base_ns=doc.get("baseTimeNanoseconds", 0) if relative else 0)
    return evs, info


def ns(us) -> int:
    return int(Decimal(us) * 1000)


def file_bytes(e: dict) -> int | None:
    """The payload of a device event as its args say: a copy's ``bytes``; a collective's nccl-tests size (the
    larger of c10d's in and out element counts, times the dtype's size: the gathered output of an all-gather)."""
    args = e.get("args", {})
    if e["cat"] == "gpu_memcpy":
        return int(args["bytes"])
    if "In msg nelems" in args:
        return max(int(args["In msg nelems"]), int(args["Out msg nelems"])) * DTYPE_BYTES[args["dtype"]]
    return None


def with_file_bytes(store: Path, files: list[Path], out: Path) -> Path:
    """``store`` written again at ``out`` with each device row's ``bytes`` taken from its event in ``files``
    (found by rank, start and duration, in ns)."""
    source = TraceStore.open(store)
    sizes = {}
    for path in files:
        evs, info = events(path)
        for e in evs:
            if e.get("cat") in DEVICE_CATS and (b := file_bytes(e)) is not None:
                sizes[(info.get("rank", 0), ns(e["ts"]) + info["base_ns"], ns(e["dur"]))] = b
    timeline = source.timeline()
    keys = zip(timeline["rank"], timeline["start_ns"], timeline["dur_ns"], strict=True)
    on_device = timeline["lane"].str.startswith("gpu:").to_numpy()
    timeline["bytes"] = pd.array([sizes.get(k) if d else None for k, d in zip(keys, on_device, strict=True)],
                                 dtype="Int64")
    assert timeline["bytes"].notna().sum() == len(sizes)  # every sized event of the files found its row
    write_store(out, timeline, run=source.run, rank_info={r: source.rank_info(r) for r in source.ranks})
    return out


def imported(tmp_path: Path, source: Path, name: str) -> Path:
    out = tmp_path / name
    assert main(["import", str(source), "--out", str(out), "--progress", "never"]) == 0
    return out


@present[NCCL_DATA]
def test_collective_and_algorithm_are_what_the_kernel_names_say(tmp_path):
    evs, _ = events(NCCL_DATA)
    nccl = [e for e in evs if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
    assert len(nccl) == 21
    for e in nccl:  # c10d's own name of the collective, in the kernel's args
        assert parse_name(e["name"])[0] == e["args"]["Collective name"]
    assert parse_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") == \
        ("allreduce", "RING", "LL")
    assert parse_name("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == \
        ("allgather", "RING", "LL")
    assert parse_name("ncclDevKernel_ReduceScatter_Sum_f32_TREE_LL128") == ("reducescatter", "TREE", "LL128")
    assert parse_name("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)") == ("unknown", "", "")


@present[NCCL_DATA]
def test_one_rank_instances_and_bus_bandwidth_from_the_files_sizes(tmp_path, capsys):
    store = imported(tmp_path, NCCL_DATA.parent, "nccl")
    run = analyze_store(store)
    assert {"device_comm", "device_copies"} <= run.capabilities and "device_bytes" not in run.capabilities
    skipped = {s.analysis: s for s in not_made([run])}
    assert "timeline's bytes column" in skipped["gpu_collective_bandwidth"].needs
    assert "two or more ranks" in skipped["gpu_collective_skew"].needs
    assert run.collectives()["busbw"].isna().all()  # no size, no bandwidth

    sized = analyze_store(with_file_bytes(store, [NCCL_DATA], tmp_path / "sized"))
    capsys.readouterr()
    assert "device_bytes" in sized.capabilities
    instances = sized.collectives()
    evs, info = events(NCCL_DATA)
    nccl = sorted((e for e in evs if e.get("cat") == "kernel" and "nccl" in e["name"].lower()),
                  key=lambda e: Decimal(e["ts"]))
    assert len(instances) == len(nccl) and (instances["ranks"] == 1).all()
    n = info["world_size"]
    assert n == sized.store.world_size == 2
    for (_, got), e in zip(instances.iterrows(), nccl, strict=True):
        kind = e["args"]["Collective name"]
        assert got["collective"] == kind and got["algorithm"] == "RING" and got["protocol"] == "LL"
        assert got["duration_ns"] == pytest.approx(ns(e["dur"]), abs=1)
        size = file_bytes(e)
        factor = 2 * (n - 1) / n if kind == "allreduce" else 1.0
        assert got["bytes"] == size
        assert got["busbw"] == pytest.approx(size / (ns(e["dur"]) / 1e9) * factor, rel=1e-6)
    table = summary(instances).set_index("collective")
    for kind in ("allreduce", "broadcast"):
        mine = [e for e in nccl if e["args"]["Collective name"] == kind]
        assert table.loc[kind, "instances"] == len(mine)
        assert table.loc[kind, "time_ns"] == pytest.approx(sum(ns(e["dur"]) for e in mine), abs=len(mine))
        assert table.loc[kind, "bytes"] == sum(file_bytes(e) for e in mine)
    # analyze shows them, and --json gives every instance (bandwidths in bytes/s)
    assert main(["analyze", str(tmp_path / "sized"), "--json"]) == 0
    gpu = json.loads(capsys.readouterr().out)["stores"][0]["gpu"]
    assert [c["busbw"] for c in gpu["collectives"]] == pytest.approx(list(instances["busbw"]))
    assert main(["analyze", str(tmp_path / "sized")]) == 0
    assert "Collectives by kind" in capsys.readouterr().out
    # against a calibrated link of 10 GB/s
    sized.link_bytes_per_s = 1e10
    assert (sized.collectives()["busbw_vs_link"] == sized.collectives()["busbw"] / 1e10).all()


@needs(B200)
def test_all_gather_of_eight_ranks_takes_nccl_tests_factor(tmp_path):
    store = with_file_bytes(imported(tmp_path, B200.parent, "b200"), [B200], tmp_path / "sized")
    run = analyze_store(store)
    (_, got), = run.collectives().iterrows()
    e = next(e for e in events(B200)[0] if e.get("cat") == "kernel" and "nccl" in e["name"].lower())
    n = int(e["args"]["Group size"])
    assert n == run.store.world_size == 8 and got["collective"] == "allgather"
    assert got["bytes"] == int(e["args"]["Out msg nelems"]) * 2  # BFloat16: the gathered output
    assert got["busbw"] == pytest.approx(got["bytes"] / (ns(e["dur"]) / 1e9) * (n - 1) / n, rel=1e-6)
    assert BUS_FACTORS["allgather"](8) == 7 / 8 and BUS_FACTORS["allreduce"](8) == 14 / 8


@present[NCCL_JOB]
def test_point_to_point_kernels_of_two_ranks_are_not_matched(tmp_path):
    run = analyze_store(imported(tmp_path, NCCL_JOB, "tf"))
    instances = run.collectives()
    truth = {r: [e for e in events(p)[0] if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
             for r, p in enumerate(sorted(NCCL_JOB.glob("*.json.gz")))}
    assert len(instances) == sum(map(len, truth.values())) == 20
    assert (instances["collective"] == "sendrecv").all() and (instances["ranks"] == 1).all()
    assert not len(late_arrivals(instances))
    assert instances["duration_ns"].sum() == pytest.approx(sum(ns(e["dur"]) for v in truth.values() for e in v),
                                                           abs=20)


def late_store(path: Path, late_rank: int = 2, ranks: int = 4, count: int = 20, late_ns: int = 3_000_000) -> Path:
    """A written store: ``ranks`` ranks, each with ``count`` all-reduce kernels of 64 MiB in 5 steps; rank
    ``late_rank`` starts each 3 ms after the others (which start 0-3 µs apart), every kernel ends at the same
    time, the late one's lasting 1 ms."""
    rows = []
    for r in range(ranks):
        for i in range(count):
            t0 = 1_000_000_000 + i * 20_000_000
            start = t0 + (late_ns if r == late_rank else r * 1000)
            end = t0 + late_ns + 1_000_000
            rows.append({"rank": r, "lane": "gpu:0/stream 7", "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
                         "category": "comm", "start_ns": start, "dur_ns": end - start, "bytes": 64 << 20,
                         "step": i // 4})
            rows.append({"rank": r, "lane": "gpu:0/stream 7", "name": "volta_sgemm_128x64_nn",
                         "category": "compute", "start_ns": end, "dur_ns": 10_000_000, "step": i // 4})
    return write_store(path, pd.DataFrame(rows), run={"world_size": ranks}).path


def test_matched_instances_name_the_late_rank_and_the_skew(tmp_path):
    run = analyze_store(late_store(tmp_path / "late"))
    assert {"device_ranks", "device_comm", "device_bytes"} <= run.capabilities
    instances = run.collectives()
    assert len(instances) == 20 and (instances["ranks"] == 4).all()
    assert (instances["late_rank"] == 2).all()
    assert (instances["skew_ns"] == 3_000_000).all()  # latest start (rank 2) minus rank 0's
    assert (instances["wait_ns"] == 3_000_000 + 2_999_000 + 2_997_000).all()
    assert (instances["duration_ns"] == 1_000_000).all()  # the late arriver's kernel
    assert np.allclose(instances["busbw"].astype(float), (64 << 20) / 1e-3 * 2 * 3 / 4)
    late = late_arrivals(instances).iloc[0]
    assert late["rank"] == 2 and late["late"] == late["instances"] == 20


@present[NCCL_JOB]
def test_copies_per_direction_and_hta_mean_bandwidth(tmp_path):
    store = with_file_bytes(imported(tmp_path, NCCL_JOB, "tf"), sorted(NCCL_JOB.glob("*.json.gz")),
                            tmp_path / "sized")
    run = analyze_store(store)
    table = run.gpu.copy_table().set_index(["rank", "direction"])
    said = {"HtoD": "H2D", "DtoH": "D2H", "DtoD": "D2D", "Memset": "fill"}
    for rank, path in enumerate(sorted(NCCL_JOB.glob("*.json.gz"))):
        copies = [e for e in events(path)[0] if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
        for word, direction in said.items():
            mine = [e for e in copies if word in e["name"]]
            got = table.loc[(rank, direction)]
            assert got["copies"] == len(mine) > 0
            assert got["time_ns"] == pytest.approx(sum(ns(e["dur"]) for e in mine), abs=len(mine))
            if direction == "fill":
                assert np.isnan(got["bandwidth"])
                continue
            assert got["bytes"] == sum(int(e["args"]["bytes"]) for e in mine)
            timed = [e for e in mine if e["dur"] > 0]
            assert got["bandwidth"] == pytest.approx(sum(int(e["args"]["bytes"]) for e in timed)
                                                     / (sum(ns(e["dur"]) for e in timed) / 1e9), rel=1e-6)
            # HTA's mean of each copy's bandwidth (HTA reads Kineto's "memory bandwidth (GB/s)", which Kineto computed
            # from durations finer than this file's whole µs: the same figure on the durations as written)
            each = [int(e["args"]["bytes"]) / (ns(e["dur"]) / 1e9) for e in timed]
            assert got["mean_bandwidth"] == pytest.approx(np.mean(each), rel=1e-6)
            assert got["peak_bandwidth"] >= max(each) * (1 - 1e-9)
    run.copy_bytes_per_s = {"H2D": 12e9}
    h2d = run.gpu.copy_table(run.copy_bytes_per_s).set_index(["rank", "direction"]).loc[(0, "H2D")]
    assert h2d["vs_pcie"] == pytest.approx(h2d["bandwidth"] / 12e9)


@present[NCCL_JOB]
def test_idle_waiting_for_the_host_from_the_files_launches(tmp_path):
    """Per rank: the device's idle gaps (union of its kernels, copies and fills) and, for each, the end of the
    runtime call that launched the work ending it (the same args.correlation), computed from the file."""
    run = analyze_store(imported(tmp_path, NCCL_JOB, "tf"))
    table = run.gpu.idle_table().set_index("rank")
    for rank, path in enumerate(sorted(NCCL_JOB.glob("*.json.gz"))):
        evs = events(path)[0]
        work = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["args"].get("correlation"))
                      for e in evs if e.get("cat") in DEVICE_CATS)
        launch_end = {e["args"]["correlation"]: ns(e["ts"]) + ns(e["dur"]) for e in evs
                      if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
                      and e["name"] in ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
                                        "cudaLaunchKernelExC", "cuLaunchKernel")}
        idle = host = 0
        reach = work[0][1]
        for start, end, _ in work[1:]:
            if start > reach:
                idle += start - reach
                ends = [launch_end[c] for s, _, c in work if s == start and c in launch_end]
                if ends:
                    host += max(0, min(min(ends), start) - reach)
            reach = max(reach, end)
        got = table.loc[rank]
        assert got["idle_ns"] == pytest.approx(idle, abs=2000)
        assert got["host_wait_ns"] == pytest.approx(host, abs=2000)
        assert 0 < got["host_wait_ns"] < got["idle_ns"]
