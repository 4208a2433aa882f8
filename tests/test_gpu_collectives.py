"""Collectives across ranks (analyses/gpu_collectives.py), memory copies (analyses/gpu_memcpy.py) and idle time
waiting for the host (analyses/gpu_idle.py), each figure checked against one computed here from the file itself.

Real traces: HTA's nccl_parser_config (one rank of a 2-rank NCCL job: all-reduce and broadcast kernels with c10d's
args), trace_filter (two ranks of one 128-rank job: point-to-point SendRecv kernels, copies of every direction) and
TraceLens' B200 trace (an all-gather in a group of 8). The Kineto importer puts a kernel's and a copy's payload in
the timeline's ``bytes`` column and a collective's process group in ``comm``: both are checked against what the
file's args say (:func:`gpu_truth.file_bytes`: c10d's ``In/Out msg nelems`` x the dtype's size, a copy's
``bytes``), and the bandwidth figures on those sizes and the real durations. Cross-rank matching is checked on
the two real ranks (their SendRecv kernels are the collectives c10d launched them for) and on a written 4-rank store
whose rank 2 arrives late at every all-reduce.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gpu_truth import events, file_bytes, idle_truth, late_store, ns
from hta_reference import NEEDS_HTA, hta_figures
from interval_truth import union_ns
from shared_data import SHARED, corpus, needs

from ddltrace.analyses.gpu_collectives import BUS_FACTORS, late_arrivals, parse_name, summary
from ddltrace.analyses.run_analysis import analyze_store, not_made
from ddltrace.cli import main

NCCL_DATA = SHARED / "hta_traces" / "nccl_parser_config" / "nccl_data.json.gz"
NCCL_JOB = SHARED / "hta_traces" / "trace_filter"
B200 = corpus("tracelens_b200_eager", "eager_trace.json.gz")
present = {p: pytest.mark.skipif(not p.exists(), reason=f"{p} is not here (the shared real traces)")
           for p in (NCCL_DATA, NCCL_JOB)}
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
    assert parse_name("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>) [_allgather_base]")[0] == "allgather"


@present[NCCL_DATA]
def test_one_rank_instances_and_bus_bandwidth_from_the_files_sizes(tmp_path, capsys):
    store = imported(tmp_path, NCCL_DATA.parent, "nccl")
    sized = analyze_store(store)
    capsys.readouterr()
    assert {"device_comm", "device_copies", "device_bytes"} <= sized.capabilities
    skipped = {s.analysis: s for s in not_made([sized])}
    assert "gpu_collective_bandwidth" not in skipped
    assert "two or more ranks" in skipped["gpu_collective_skew"].needs
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
        assert got["group"] == e["args"]["Process Group Name"] == "0"  # c10d's default group
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
    assert main(["analyze", str(store), "--json"]) == 0
    gpu = json.loads(capsys.readouterr().out)["stores"][0]["gpu"]
    assert [c["busbw"] for c in gpu["collectives"]] == pytest.approx(list(instances["busbw"]))
    assert main(["analyze", str(store)]) == 0
    assert "Collectives by kind" in capsys.readouterr().out
    # against a calibrated link of 10 GB/s
    sized.link_bytes_per_s = 1e10
    assert (sized.collectives()["busbw_vs_link"] == sized.collectives()["busbw"] / 1e10).all()


@needs(B200)
def test_all_gather_of_eight_ranks_takes_nccl_tests_factor(tmp_path):
    run = analyze_store(imported(tmp_path, B200.parent, "b200"))
    got, = (row for _, row in run.collectives().iterrows() if row["collective"] != "allreduce")
    e = next(e for e in events(B200)[0] if e.get("cat") == "kernel" and "nccl" in e["name"].lower())
    n = int(e["args"]["Group size"])
    assert n == run.store.world_size == 8 and got["collective"] == "allgather"
    assert got["group"] == e["args"]["Process Group Name"] == "3"  # a group of its own, not the default one
    assert got["bytes"] == int(e["args"]["Out msg nelems"]) * 2  # BFloat16: the gathered output
    assert got["busbw"] == pytest.approx(got["bytes"] / (ns(e["dur"]) / 1e9) * (n - 1) / n, rel=1e-6)
    assert BUS_FACTORS["allgather"](8) == 7 / 8 and BUS_FACTORS["allreduce"](8) == 14 / 8


@needs(B200)
def test_symmetric_memory_all_reduces_are_communication(tmp_path):
    """The B200 trace's all-reduces run in PyTorch's symmetric memory (symm_mem::multimem_all_reduce_, kernel
    multimem_all_reduce_kernel over NVLink multicast), not in NCCL: they are communication kernels, all-reduces, and
    the device's compute time is the other kernels' union (checked against the file's kernels)."""
    evs = events(B200)[0]
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    symm = [e for e in kernels if "multimem_all_reduce_kernel" in e["name"]]
    launched_by = {e["args"]["External id"] for e in evs if e.get("cat") == "cpu_op"
                   and e["name"] == "symm_mem::multimem_all_reduce_"}
    assert len(symm) == 73 and all(e["args"]["External id"] in launched_by for e in symm)
    run = analyze_store(imported(tmp_path, B200.parent, "b200"))
    allreduce = run.collectives()
    allreduce = allreduce[allreduce["collective"] == "allreduce"]
    assert len(allreduce) == 73
    assert allreduce["duration_ns"].sum() == pytest.approx(sum(ns(e["dur"]) for e in symm), abs=73)
    comm = [e for e in kernels if e in symm or "nccl" in e["name"].lower()]
    compute = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in kernels if e not in comm]
    temporal = run.gpu.temporal_table().iloc[0]
    assert temporal["compute_ns"] == union_ns(compute)
    overlap = run.gpu.overlap_table().iloc[0]
    assert overlap["comm_ns"] == union_ns([(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in comm])


@present[NCCL_JOB]
def launching_collectives(path: Path) -> list[str]:
    """Per NCCL kernel of a Kineto file, in start order: the collective its innermost enclosing host operation names
    (c10d's ``nccl:all_to_all`` around the runtime call of its correlation id, on the call's thread)."""
    evs, _ = events(path)
    launches = {e["args"]["correlation"]: e for e in evs if e.get("cat") == "cuda_runtime"
                and "correlation" in e.get("args", {})}
    ops = [e for e in evs if e.get("cat") in ("cpu_op", "user_annotation")]
    out = []
    for k in sorted((e for e in evs if e.get("cat") == "kernel" and "nccl" in e["name"].lower()),
                    key=lambda e: Decimal(e["ts"])):
        launch = launches[k["args"]["correlation"]]
        around = [o for o in ops if o["tid"] == launch["tid"] and Decimal(o["ts"]) <= Decimal(launch["ts"])
                  and Decimal(o["ts"]) + Decimal(o["dur"]) >= Decimal(launch["ts"]) + Decimal(launch["dur"])]
        said = [parse_name(o["name"])[0] for o in sorted(around, key=lambda o: Decimal(o["ts"]))]
        out.append([c for c in said if c != "unknown"][-1])
    return out


@present[NCCL_JOB]
def test_sendrecv_kernels_are_the_collective_their_host_operation_ran(tmp_path):
    """The two ranks' 20 ncclKernel_SendRecv kernels are launched by c10d's all_to_all (NCCL runs an all-to-all as
    send/recv kernels), all_reduce and _allgather_base: they are those collectives, matched across the two ranks
    where both ran the n-th of one in a step (before: 20 point-to-point instances of one rank each, none matched)."""
    run = analyze_store(imported(tmp_path, NCCL_JOB, "tf"))
    kernels = run.gpu.collective_kernel_table().sort_values(["rank", "start_ns"], kind="stable")
    truth = {r: launching_collectives(p) for r, p in enumerate(sorted(NCCL_JOB.glob("*.json.gz")))}
    assert {r: list(k["collective"]) for r, k in kernels.groupby("rank")} == truth
    assert set(truth[0]) == {"alltoall", "allreduce", "allgather"} and len(truth[0]) == len(truth[1]) == 10
    # the n-th of a collective in a step on each rank; one instance where the two kernels overlap in time (each
    # waits for the other), two where one ended before the other started (the ranks' clocks apart)
    kernels["seq"] = kernels.groupby(["rank", "collective", "step"]).cumcount()
    kernels["end_ns"] = kernels["start_ns"] + kernels["dur_ns"]
    pairs = kernels.groupby(["collective", "step", "seq"]).agg(n=("rank", "size"), first=("start_ns", "min"),
                                                                last=("start_ns", "max"), end=("end_ns", "min"))
    assert (pairs["n"] == 2).all() and len(pairs) == 10
    together = pairs[pairs["end"] >= pairs["last"]]
    instances = run.collectives()
    assert instances["ranks"].sum() == 20 and len(instances) == 20 - len(together) == 16
    matched = instances[instances["ranks"] == 2].set_index(["collective", "step", "seq"]).sort_index()
    assert list(matched.index) == list(together.index)
    assert (matched["skew_ns"] == together["last"] - together["first"]).all()


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
def test_copies_per_direction_bytes_and_bandwidth(tmp_path, capsys):
    store = imported(tmp_path, NCCL_JOB, "tf")
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
            # the mean of each copy's bandwidth on the durations as written (Kineto's own "memory bandwidth (GB/s)",
            # which HTA reads, was computed from durations finer than this file's whole µs)
            each = [int(e["args"]["bytes"]) / (ns(e["dur"]) / 1e9) for e in timed]
            assert got["mean_bandwidth"] == pytest.approx(np.mean(each), rel=1e-6)
            assert got["peak_bandwidth"] >= max(each) * (1 - 1e-9)
    # the report's figure: the series of the rank with the highest peak, of the copies (a fill moves nothing: its
    # row has no bandwidth, and the figure drew rank 0's memsets at 800 GB/s beside it)
    rank, series = run.gpu.copy_series
    assert "fill" not in set(series["direction"]) and table.loc[(rank, "fill"), "copies"] > 0
    assert series["bytes_per_s"].max() == pytest.approx(table["peak_bandwidth"].max())
    assert rank == table["peak_bandwidth"].idxmax()[0] and (series["rank"] == rank).all()
    # against the profile's calibrated copy bandwidths (ddltrace calibrate's gpu0_h2d / gpu0_d2h, B/s)
    profile = tmp_path / "hw.json"
    profile.write_text(json.dumps({"constants": {"r_net": {"value": 1e-9, "unit": "s/B"},
                                                 "gpu0_h2d": {"value": 12e9, "unit": "B/s"},
                                                 "gpu0_d2h": {"value": 13e9, "unit": "B/s"}}}))
    capsys.readouterr()
    assert main(["analyze", "--json", "--quiet", "--profile", str(profile), str(store)]) == 0
    copies = {(c["rank"], c["direction"]): c for c in json.loads(capsys.readouterr().out)["stores"][0]["gpu"]["copies"]}
    for (rank, direction), calibrated in (((0, "H2D"), 12e9), ((1, "D2H"), 13e9)):
        want = table.loc[(rank, direction), "bandwidth"] / calibrated
        assert copies[(rank, direction)]["vs_pcie"] == pytest.approx(want)
    assert copies[(0, "D2D")]["vs_pcie"] is None  # no calibrated figure for device-to-device copies


@present[NCCL_JOB]
def test_idle_waiting_for_the_host_from_the_files_launches(tmp_path):
    """Per rank: the device's idle gaps (union of its kernels, copies and fills) and, for each, the end of the
    runtime call that launched the work ending it (the same args.correlation), computed from the file."""
    run = analyze_store(imported(tmp_path, NCCL_JOB, "tf"))
    table = run.gpu.idle_table().set_index("rank")
    for rank, path in enumerate(sorted(NCCL_JOB.glob("*.json.gz"))):
        idle, host = idle_truth(path)
        got = table.loc[rank]
        assert got["idle_ns"] == pytest.approx(idle, abs=2000)
        assert got["host_wait_ns"] == pytest.approx(host, abs=2000)
        assert 0 < got["host_wait_ns"] < got["idle_ns"]


@NEEDS_HTA
@present[NCCL_DATA]
def test_hta_gives_the_same_copy_counts_and_mean_bandwidth(tmp_path):
    """HTA's get_memory_bw_summary on the same file: its copies per kind and their mean bandwidth (HTA's points are
    Kineto's own per-copy "memory bandwidth (GB/s)" where the copies of a kind do not overlap, as here; ddltrace
    takes bytes / duration of each, with the file's bytes)."""
    hta = hta_figures(NCCL_DATA.parent)["0"]["memory"]
    table = analyze_store(imported(tmp_path, NCCL_DATA.parent, "nccl")).gpu.copy_table().set_index("direction")
    assert table.loc["D2D", "copies"] == hta["Memcpy DtoD"]["count"] == 960
    assert table.loc["fill", "copies"] == hta["Memset"]["count"]
    assert table.loc["D2D", "mean_bandwidth"] / 1e9 == pytest.approx(hta["Memcpy DtoD"]["mean_gbps"], rel=1e-3)


def test_the_same_collectives_when_the_ranks_are_read_in_parallel(tmp_path, capsys):
    """The cross-rank step reduces the ranks' small tables: reading the 4 ranks in 2 processes (--jobs 2) gives
    the instances, late arrivals, idle and copies of reading them in one."""
    store = late_store(tmp_path / "late")
    docs = []
    for extra in ([], ["--jobs", "2"]):
        capsys.readouterr()
        assert main(["analyze", str(store), "--json", "--quiet", *extra]) == 0
        docs.append(json.loads(capsys.readouterr().out)["stores"][0]["gpu"])
    for key in ("collectives", "late_arrivals", "idle", "copies"):
        assert docs[0][key] == docs[1][key], key
    assert len(docs[0]["collectives"]) == 20 and docs[0]["late_arrivals"][0]["rank"] == 2


MI300 = corpus("tracelens_mi300_resnet_ckpt", "resnet_act_checkpoint.json.gz")


@needs(MI300)
def test_generic_kernels_take_the_collective_of_their_host_operation(tmp_path):
    """RCCL's ncclDevKernel_Generic says no collective; where c10d copied its args onto the kernel, the file itself
    says which (args "Collective name"): the host operation around its launch must say the same. Kernels whose
    launch is not in the file stay unknown."""
    run = analyze_store(imported(tmp_path, MI300.parent, "mi300"))
    evs, info = events(MI300)
    launched = {e["args"]["correlation"] for e in evs if e.get("cat") == "cuda_runtime"
                and "correlation" in e.get("args", {})}
    generic = sorted((e for e in evs if e.get("cat") == "kernel" and "ncclDevKernel_Generic" in e["name"]),
                     key=lambda e: Decimal(e["ts"]))
    kernels = run.gpu.collective_kernel_table().sort_values("start_ns")
    assert len(kernels) == len(generic) == 17
    said = [e["args"].get("Collective name") for e in generic]
    got = list(kernels["collective"])
    checked = unknown = 0
    for e, want, mine in zip(generic, said, got, strict=True):
        if e["args"]["correlation"] not in launched:
            assert mine == "unknown"
            unknown += 1
        else:  # every launched one carries c10d's args here: 6 all-reduces, 6 broadcasts
            assert mine == want
            checked += 1
    assert (checked, unknown) == (12, 5)


@needs(MI300)
def test_generic_kernels_are_typed_from_their_own_args_without_their_launch(tmp_path):
    """The same file with every runtime call (the kernels' launches) and flow arrow removed: no host operation says
    which collective a ncclDevKernel_Generic ran, yet the importer names it from the kernel's own args (c10d's
    "Collective name" appended to the kernel's name), with its size and process group; the kernels without
    those args stay unknown."""
    with gzip.open(MI300, "rt") as fh:
        doc = json.load(fh)
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e.get("cat") != "cuda_runtime" and e.get("ph") not in ("s", "f")]
    unlaunched = tmp_path / "unlaunched" / "resnet_act_checkpoint.json.gz"
    unlaunched.parent.mkdir()
    with gzip.open(unlaunched, "wt") as fh:
        json.dump(doc, fh)
    run = analyze_store(imported(tmp_path, unlaunched.parent, "mi300"))
    generic = sorted((e for e in events(MI300)[0] if e.get("cat") == "kernel"
                      and e["name"].startswith("ncclDevKernel_Generic")), key=lambda e: Decimal(e["ts"]))
    kernels = run.gpu.collective_kernel_table().sort_values("start_ns", kind="stable")
    assert len(kernels) == len(generic) == 17
    typed = 0
    for e, (_, got) in zip(generic, kernels.iterrows(), strict=True):
        said = e["args"].get("Collective name")
        assert got["collective"] == (said or "unknown")
        if said:
            typed += 1
            assert got["name"] == f"{e['name']} [{said}]"
            assert got["bytes"] == file_bytes(e) and got["group"] == e["args"]["Process Group Name"]
        else:
            assert got["name"] == e["name"] and got["bytes"] is pd.NA
    assert typed == 12


@needs(MI300)
def test_copy_bandwidth_says_which_copies_its_bytes_are_of(tmp_path, capsys):
    """TraceLens' MI300 trace gives ``args.bytes`` for 366 of its 550 device-to-device copies. The bytes and the
    bandwidth are of those 366 (their bytes / their summed duration), and the row says so: ``sized`` in --json,
    "(366 of 550)" in the text, beside the time of all 550; checked against the file."""
    copies = [e for e in events(MI300)[0] if e.get("cat") == "gpu_memcpy" and "DtoD" in e["name"]]
    sized = [e for e in copies if e["args"].get("bytes") and e["dur"] > 0]
    assert (len(sized), len(copies)) == (366, 550)
    store = imported(tmp_path, MI300.parent, "mi300")
    capsys.readouterr()
    assert main(["analyze", "--json", "--quiet", str(store)]) == 0
    d2d, = (c for c in json.loads(capsys.readouterr().out)["stores"][0]["gpu"]["copies"] if c["direction"] == "D2D")
    assert (d2d["copies"], d2d["sized"]) == (550, 366)
    assert d2d["time_ns"] == pytest.approx(sum(ns(e["dur"]) for e in copies), abs=len(copies))
    assert d2d["bytes"] == sum(int(e["args"]["bytes"]) for e in sized)
    assert d2d["bandwidth"] == pytest.approx(d2d["bytes"] / (sum(ns(e["dur"]) for e in sized) / 1e9), rel=1e-6)
    assert main(["analyze", "--quiet", str(store)]) == 0
    row, = (line for line in capsys.readouterr().out.splitlines() if " D2D " in line)
    assert "66.9 MiB (366 of 550)" in row


@needs(MI300)
def test_hip_ext_launches_are_launches(tmp_path):
    """The MI300 trace launches its NCCL kernels with hipExtLaunchKernel (12 of them, on stream 4): launches like
    hipLaunchKernel's, counted in the launch statistics and the queue length (QA: 2673 of the file's 2685 paired
    runtime calls, no stream 4 in the queue table)."""
    run = analyze_store(imported(tmp_path, MI300.parent, "mi300"))
    evs, _ = events(MI300)
    device = {e["args"]["correlation"] for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
              and "correlation" in e.get("args", {})}
    launched = [e for e in evs if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in device]
    assert sum(e["name"] == "hipExtLaunchKernel" for e in launched) == 12
    (row,) = run.gpu.launch_table().to_dict("records")
    assert row["launches"] == len(launched)
    assert "stream 4" in set(run.gpu.queue_table()["stream"])


def test_a_broadcast_runs_down_a_chain_its_kernels_need_not_overlap_and_wait_only_until_they_end():
    """QA s21 on TraceLens' fused NCCL trace: each of its 4 ranks ran 6 broadcasts (same group, order and sizes),
    yet 24 unmatched instances were printed, 2.44 MiB where the 6 moved 0.61 MiB: a broadcast's root kernel (15 us)
    ended 1.5 ms before the last rank's started, which split the instance as if its ranks' clocks were apart. The
    times below (us) are that trace's first 212 KB broadcast, and an all-reduce of the same ranks whose kernels all
    overlap the last one's start (the trace's all-reduces do): it shows the ranks' clocks agree."""
    from analyses.gpu_collectives import RANK_COLUMNS, match_instances

    def kernels(collective, spans, group="0"):
        return pd.DataFrame([{"rank": r, "device": f"gpu:{r}", "stream": "7", "name": f"ncclDevKernel_{collective}",
                              "collective": collective, "algorithm": None, "protocol": None, "group": group,
                              "step": None, "start_ns": round(s * 1e3), "dur_ns": round(e * 1e3) - round(s * 1e3),
                              "bytes": 212480} for r, (s, e) in spans.items()]).reindex(columns=RANK_COLUMNS)

    chain = {0: (221.428, 236.771), 1: (389.918, 1709.355), 2: (0.0, 1710.699), 3: (1688.215, 1703.838)}
    tie = kernels("allreduce", {r: (5000.0 + 100 * r, 6000.0) for r in range(4)})
    found = match_instances(pd.concat([kernels("broadcast", chain), tie], ignore_index=True), 4)
    one = found[found["collective"] == "broadcast"].iloc[0]
    assert len(found) == 2 and one["ranks"] == 4 and one["late_rank"] == 3
    assert one["bytes"] == 212480 and one["duration_ns"] == 1_710_699 - 1_688_215  # the chain: latest end - start
    assert one["duration_from"] == "chain: latest end - latest start"  # not the root's kernel, 15,343 ns
    # each early rank waits until the last arrives or its kernel ends: the root's 15.3 us, not 1,467 us
    assert one["wait_ns"] == 15_343 + (1_688_215 - 389_918) + 1_688_215
    # an all-reduce whose kernel ended before the last rank's started is no one collective (clocks apart)
    assert len(match_instances(kernels("allreduce", chain), 4)) == 4
    # and without a collective that ties the ranks' clocks (files of separate runs), neither is the broadcast
    assert len(match_instances(kernels("broadcast", chain), 4)) == 4
    # a tie among ranks 0-1 and another among 2-3 does not tie 0 to 2
    halves = pd.concat([kernels("allreduce", {0: (5000.0, 6000.0), 1: (5100.0, 6000.0)}, "a"),
                        kernels("allreduce", {2: (5000.0, 6000.0), 3: (5100.0, 6000.0)}, "b")], ignore_index=True)
    found = match_instances(pd.concat([kernels("broadcast", chain), halves], ignore_index=True), 4)
    assert (found.loc[found["collective"] == "broadcast", "ranks"] == 1).all()
    # a broadcast whose kernels did all overlap ties the ranks' clocks as well as an all-reduce
    overlapped = kernels("broadcast", {r: (5000.0 + 100 * r, 6000.0) for r in range(4)})
    found = match_instances(pd.concat([kernels("broadcast", chain), overlapped], ignore_index=True), 4)
    assert list(found["ranks"]) == [4, 4]
