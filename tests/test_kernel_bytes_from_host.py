"""A communication kernel with no size in its own args (older PyTorch writes no ``In msg nelems`` on its NCCL
kernels) takes the size of the host operation that launched it: the innermost ``record_param_comms`` /
``nccl:<op>`` span that carries a size around the runtime call of the kernel's correlation id, on that call's
thread; a kernel's own size is never overridden; of several kernels of one operation (an all-to-all run as two
SendRecv kernels) the first launched gets it, the others none. Then ``analyze`` makes their bus bandwidth.

Expected sizes are computed here from the JSON (json + gzip), by those rules, apart from the importer's code: on
a two-rank Kineto job written here, and on the 8-rank DLRM job of tests/data/wild (PyTorch ~2.1: the sizes only
in ``nccl:<op>`` spans' ``Input Dims``) where present."""

from __future__ import annotations

import gzip
import json
import math
import re
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from shared_data import SHARED, corpus, needs

from ddltrace.analyses.run_analysis import analyze_store, not_made
from ddltrace.cli import main
from ddltrace.store import TraceStore

TRACE_FILTER = SHARED / "hta_traces" / "trace_filter"
DLRM = corpus("param_dlrm_kineto_8ranks", "worker0_step_12.1694128201545.pt.trace.json.gz")
#: c10d's dtype names and record_shapes' element types, as this test needs them (bytes)
DTYPE = {"Float": 4, "Half": 2, "Double": 8}
INPUT_TYPE = {"float": 4, "c10::Half": 2, "double": 8, "int": 4, "long int": 8, "long": 8, "signed char": 1,
              "unsigned char": 1}
#: nccl:<op> spans whose input tensors are nccl-tests' size (not an all-gather's: one rank's share)
INPUT_IS_SIZE = ("allreduce", "alltoall", "reducescatter", "broadcast", "reduce", "send", "recv")
T0 = 1_700_000_000_000_000  # µs since the epoch


def span_size(e: dict) -> int | None:
    """nccl-tests' size of the collective a host span ran, as its args say."""
    args, name = e.get("args", {}), e["name"]
    said = re.sub(r"[^a-z0-9]", "", name.removeprefix("nccl:").lower())
    if "In msg nelems" in args:
        kind = re.sub(r"[^a-z0-9]", "", str(args.get("Collective name", said)).lower())
        nelems = args["In msg nelems"] if kind.startswith("alltoall") else max(args["In msg nelems"],
                                                                                args["Out msg nelems"])
        return nelems * DTYPE[args["dtype"]]
    if name.startswith("nccl:") and said.startswith(INPUT_IS_SIZE) and "Input Dims" in args:
        return sum(math.prod(d) * INPUT_TYPE[t] for d, t in zip(args["Input Dims"], args["Input type"], strict=True))
    return None


def expected_bytes(evs: list[dict]) -> dict[tuple[int, str], int | None]:
    """(start ns, name) of each NCCL kernel -> its bytes: its own args' size, else its launch's innermost enclosing
    sized record_param_comms / nccl:<op> span on the launch's thread (the first kernel launched of a span only)."""
    launch = {e["args"]["correlation"]: e for e in evs if e.get("cat") == "cuda_runtime"}
    spans = [e for e in evs if e["name"] == "record_param_comms" or e["name"].startswith("nccl:")]
    kernels = sorted((e for e in evs if e.get("cat") == "kernel" and "nccl" in e["name"].lower()),
                     key=lambda e: (Decimal(launch[e["args"]["correlation"]]["ts"]), Decimal(e["ts"])))
    out, used = {}, set()
    for k in kernels:
        key = (int(Decimal(k["ts"]) * 1000), k["name"])
        own = span_size(dict(k, name=""))
        if own is not None:
            out[key] = own
            continue
        call = launch[k["args"]["correlation"]]
        around = [s for s in spans if (s["pid"], s["tid"]) == (call["pid"], call["tid"])
                  and Decimal(s["ts"]) <= Decimal(call["ts"])
                  and Decimal(s["ts"]) + Decimal(s["dur"]) >= Decimal(call["ts"]) + Decimal(call["dur"])
                  and span_size(s) is not None]
        op = max(around, key=lambda s: (Decimal(s["ts"]), -Decimal(s["dur"])), default=None)
        out[key] = None if op is None or id(op) in used else span_size(op)
        if op is not None:
            used.add(id(op))
    return out


def stored_bytes(store: Path, rank: int) -> dict[tuple[int, str], int | None]:
    t = TraceStore.open(store).timeline([rank])
    k = t[(t["category"] == "comm") & t["lane"].str.startswith("gpu:")]
    return {(int(s), n): (None if b is None or b != b else int(b))
            for s, n, b in zip(k["start_ns"], k["name"], k["bytes"].astype(object).where(k["bytes"].notna(), None),
                               strict=True)}


def _span(name, tid, ts, dur, cat="user_annotation", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": T0 + ts, "dur": dur, "args": args}


def _launch(corr, tid, ts, dur=5):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": tid, "ts": T0 + ts,
            "dur": dur, "args": {"correlation": corr}}


def _kernel(corr, name, ts, dur, **args):
    return {"ph": "X", "cat": "kernel", "name": f"ncclKernel_{name}(ncclDevComm*, unsigned long, ncclWork*)",
            "pid": 0, "tid": 7, "ts": T0 + ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr, **args}}


def old_pytorch_rank(rank: int) -> list[dict]:
    """One rank of a two-rank job as older PyTorch writes it: no sizes on the NCCL kernels."""
    tensors = {"Input Dims": [[], [], []], "Input type": ["TensorList", "Scalar", "Scalar"]}
    d = 3 * rank  # rank 1 a little later
    return [
        _span("ProfilerStep#1", 1, 0, 20_000, cat="cpu_op"),
        # all-reduce: the size in nccl:all_reduce's input tensors (record_shapes), the outer span sized by none
        _span("record_param_comms", 1, 100, 60, cat="cpu_op", **tensors),
        _span("nccl:all_reduce", 1, 110, 40, **{"Input Dims": [[1048576]], "Input type": ["float"]}),
        _launch(1, 1, 120),
        _kernel(1, "AllReduce_RING_LL_Sum_float", 1000 + d, 1000),
        # all-to-all as two SendRecv kernels of one operation: the send buffer (3000 halves), to the first only
        _span("nccl:all_to_all", 1, 3000, 50, **{"Input Dims": [[3000]], "Input type": ["c10::Half"]}),
        _launch(2, 1, 3010),
        _launch(3, 1, 3030),
        _kernel(2, "SendRecv_RING_SIMPLE_Sum_int8_t", 3100 + d, 500),
        _kernel(3, "SendRecv_RING_SIMPLE_Sum_int8_t", 3700 + d, 500),
        # broadcast: nccl:broadcast carries no size, the record_param_comms around it does (256 doubles)
        _span("record_param_comms", 1, 5000, 60, cat="cpu_op",
              **{"In msg nelems": 256, "Out msg nelems": 256, "dtype": "Double"}),
        _span("nccl:broadcast", 1, 5010, 40),
        _launch(4, 1, 5020),
        _kernel(4, "Broadcast_RING_LL_Sum_int8_t", 5100 + d, 200),
        # all-gather: its input is one rank's share, not nccl-tests' size: no size
        _span("nccl:_all_gather_base", 1, 7000, 40, **{"Input Dims": [[1024]], "Input type": ["float"]}),
        _launch(5, 1, 7010),
        _kernel(5, "AllGather_RING_LL_Sum_int8_t", 7100 + d, 300),
        # a kernel with its own size (c10d's args on it) keeps it: 400 bytes, not the span's 999 floats
        _span("nccl:all_reduce", 1, 9000, 40, **{"Input Dims": [[999]], "Input type": ["float"]}),
        _launch(6, 1, 9010),
        _kernel(6, "AllReduce_RING_LL_Sum_float", 9100 + d, 300, **{
            "In msg nelems": 100, "Out msg nelems": 100, "dtype": "Float", "Collective name": "allreduce",
            "Process Group Name": "0"}),
        # launched from another thread while thread 1 is inside a sized span: not that span's kernel
        _span("nccl:all_reduce", 1, 11000, 100, **{"Input Dims": [[64]], "Input type": ["float"]}),
        _launch(7, 2, 11010),
        _kernel(7, "AllReduce_RING_LL_Sum_float", 11200 + d, 300),
    ]


def write_job(folder: Path) -> list[Path]:
    folder.mkdir()
    paths = []
    for rank in (0, 1):
        path = folder / f"rank{rank}.pt.trace.json"
        path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {
            "backend": "nccl", "rank": rank, "world_size": 2}, "traceEvents": old_pytorch_rank(rank)}))
        paths.append(path)
    return paths


def _load(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def imported(source: Path, out: Path) -> Path:
    assert main(["import", str(source), "--out", str(out), "--progress", "never"]) == 0
    return out


def test_kernels_of_a_written_old_pytorch_job_take_their_host_operations_size(tmp_path, capsys):
    paths = write_job(tmp_path / "job")
    store = imported(tmp_path / "job", tmp_path / "store")
    for rank, path in enumerate(paths):
        want = expected_bytes(_load(path))
        # the rules, spelled out: all-reduce 4 MiB, all-to-all's first kernel 6000, its second none, broadcast
        # 2048, all-gather none, the kernel's own 400, another thread's launch none
        assert list(want.values()) == [4 << 20, 6000, None, 2048, None, 400, None]
        assert stored_bytes(store, rank) == want
    run = analyze_store(store)
    capsys.readouterr()
    assert "gpu_collective_bandwidth" not in {s.analysis for s in not_made([run])}
    # instances by (process group: "" where the kernel's args name none, collective, n-th in the step)
    instances = run.collectives().set_index(["group", "collective", "seq"])
    assert len(instances) == 7 and (instances["ranks"] == 2).all()
    for kind, size, factor in (("allreduce", 4 << 20, 2 * (2 - 1) / 2), ("alltoall", 6000, 1 / 2),
                               ("broadcast", 2048, 1.0)):
        got = instances.loc[("", kind, 0)]
        assert got["bytes"] == size
        assert got["busbw"] == pytest.approx(size / (got["duration_ns"] / 1e9) * factor, rel=1e-9)
    assert instances.loc[("0", "allreduce", 0), "bytes"] == 400
    for unsized in (("", "alltoall", 1), ("", "allgather", 0), ("", "allreduce", 1)):
        assert pd.isna(instances.loc[unsized, "bytes"]) and pd.isna(instances.loc[unsized, "busbw"])


@needs(DLRM)
def test_dlrm_job_kernels_take_their_nccl_spans_sizes(tmp_path, capsys):
    """The DLRM job (PyTorch ~2.1, 8 V100s): no size on any NCCL kernel; each rank's 3 all-reduces and 5
    all-to-alls take their nccl:<op> span's input tensors (all 8 kernels of rank 0 sized, 1,576,964 bytes the
    largest: 394,241 floats), and analyze makes every instance's bus bandwidth."""
    store = imported(DLRM.parent, tmp_path / "dlrm")
    files = sorted(DLRM.parent.glob("worker*.json.gz"), key=lambda p: int(p.name[6:].split("_")[0]))
    assert len(files) == 8
    for rank, path in enumerate(files):
        evs = _load(path)
        assert not any("In msg nelems" in e["args"] for e in evs if e.get("cat") == "kernel")
        want = expected_bytes(evs)
        assert len(want) == 8 and None not in want.values()
        assert stored_bytes(store, rank) == want
        if rank == 0:
            assert max(want.values()) == 394241 * 4
    run = analyze_store(store)
    capsys.readouterr()
    instances = run.collectives()
    assert len(instances) == 8 and (instances["ranks"] == 8).all()
    assert instances["busbw"].notna().all() and (instances["busbw"] > 0).all()
    assert set(instances["collective"]) == {"allreduce", "alltoall"}


@pytest.mark.skipif(not TRACE_FILTER.is_dir(), reason=f"{TRACE_FILTER} absent (HTA's traces, ../shared)")
def test_hta_trace_filter_kernels_take_their_nccl_spans_sizes(tmp_path):
    """HTA's trace_filter (2 of 128 ranks, 2023): each rank's 4 all-reduces and 4 all-to-alls (SendRecv kernels) take
    their nccl:<op> span's input tensors (``long`` the older name of int64), its 2 all-gathers none (one rank's
    share)."""
    store = imported(TRACE_FILTER, tmp_path / "tf")
    for rank, path in enumerate(sorted(TRACE_FILTER.glob("*.json.gz"))):
        want = expected_bytes(_load(path))
        assert len(want) == 10 and sum(v is not None for v in want.values()) == 8
        assert stored_bytes(store, rank) == want
