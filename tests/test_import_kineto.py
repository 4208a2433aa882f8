"""Kineto of every generation and device: categories (PyTorch 1.9's capitalised cats, ROCm, MTIA, ...), lanes from
the device events' args when the file has no metadata events, communication libraries' kernels and kernels that
carry collective metadata, uncategorised events reported, and distributedInfo ranks that are not ranks.

Expected figures are computed here from the JSON itself (json + gzip): kernel time per device lane to 1 us and
event counts."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from interval_truth import union_ns
from shared_data import SHARED, corpus, needs

from ddltrace.cli import main
from ddltrace.collectors.importers import Categorizer
from ddltrace.store import TraceStore

WILD = SHARED / "wild_traces"
HTA = SHARED / "hta_traces"
RESNET_1_9 = WILD / "kineto_tb_resnet50_w0" / "worker0.1623143089861.pt.trace.json.gz"
B200_NO_METADATA = WILD / "tracelens_b200_eager" / "eager_trace.json.gz"
MI300_ROCM = WILD / "tracelens_mi300_resnet_ckpt" / "resnet_act_checkpoint.json.gz"
MI250_ROCM = HTA / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
MTIA = corpus("hta_mtia_inference", "mtia_inference_rank_0.json.gz")
BERT_H100 = corpus("tracelens_h100_bert_small", "gaunernst_bert-small-uncased__1016001.json.gz")
#: Kineto's device-work cats, both generations (lower-cased): kernels, copies and fills.
DEVICE_WORK = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
COLLECTIVE_KEYS = ("Collective name", "Process Group Name")


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def _device_work_per_lane(events: list[dict]) -> dict[str, dict]:
    """Per device lane named from args (gpu:<device>/stream <stream>): events, total duration (ns), and the
    duration of the communication kernels (collective metadata in their args, NCCL's names, which RCCL keeps, or
    PyTorch's symmetric-memory all-reduce) and of the copies."""
    lanes: dict[str, dict] = defaultdict(lambda: {"events": 0, "ns": 0, "comm_ns": 0, "copy_ns": 0})
    for e in events:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() not in DEVICE_WORK:
            continue
        args = e["args"]
        lane = lanes[f"gpu:{args['device']}/stream {args['stream']}"]
        ns = round(e["dur"] * 1000)
        lane["events"] += 1
        lane["ns"] += ns
        if any(k in args for k in COLLECTIVE_KEYS) or e["name"].startswith("nccl") or \
                "multimem_all_reduce_kernel" in e["name"]:
            lane["comm_ns"] += ns
        elif "mem" in e["cat"].lower():
            lane["copy_ns"] += ns
    return dict(lanes)


def _import(tmp_path: Path, *paths: Path, capsys=None) -> tuple[TraceStore, str]:
    out = tmp_path / "store"
    assert main(["import", *map(str, paths), "--out", str(out)]) == 0
    printed = capsys.readouterr().out if capsys else ""
    return TraceStore.open(out), printed


def _store_per_lane(store: TraceStore) -> dict[str, dict]:
    """Per GPU lane of the store: device-work rows (every category but other: other is gpu_user_annotation), their
    total and per-category duration (ns)."""
    tl = store.timeline()
    tl = tl[tl["lane"].str.startswith("gpu:") & (tl["category"].astype(str) != "other")]
    out = {}
    for lane, rows in tl.groupby("lane"):
        by_cat = rows.groupby(rows["category"].astype(str))["dur_ns"].sum()
        out[lane] = {"events": len(rows), "ns": int(rows["dur_ns"].sum()),
                     **{c: int(v) for c, v in by_cat.items()}}
    return out


def _assert_lanes_match(store: TraceStore, expected: dict[str, dict]) -> None:
    got = _store_per_lane(store)
    assert set(got) == set(expected)
    for lane, want in expected.items():
        assert got[lane]["events"] == want["events"], lane
        assert abs(got[lane]["ns"] - want["ns"]) <= 1000, lane  # to 1 us


@pytest.mark.skipif(not RESNET_1_9.exists(), reason="shared wild traces absent")
def test_pytorch_1_9_capitalised_categories(tmp_path, capsys):
    """PyTorch 1.9 wrote Kernel/Memcpy/Memset/Runtime/Operator: its 8,772 kernels (591.5 ms) are compute on
    gpu:0/stream 7 (they were all "other"), its copies memcpy, and no event is left uncategorised."""
    events = _events(RESNET_1_9)
    expected = _device_work_per_lane(events)
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "Kernel"]
    assert len(kernels) == 8772 and not any("nccl" in e["name"].lower() for e in kernels)
    kernel_ns = sum(round(e["dur"] * 1000) for e in kernels)
    store, printed = _import(tmp_path, RESNET_1_9, capsys=capsys)
    _assert_lanes_match(store, expected)
    lane = _store_per_lane(store)["gpu:0/stream 7"]
    assert abs(lane["compute"] - kernel_ns) <= 1000 and abs(kernel_ns - 591_532_000) < 1_000_000
    assert abs(lane["memcpy"] - expected["gpu:0/stream 7"]["copy_ns"]) <= 1000
    tl = store.timeline()
    host = tl[tl["lane"].str.startswith("cpu/")]
    launches = host[host["name"] == "cudaLaunchKernel"]
    assert len(launches) and set(launches["category"].astype(str)) == {"other"}  # Runtime: a host call
    convs = host[host["name"] == "aten::conv2d"]
    assert len(convs) and set(convs["category"].astype(str)) == {"compute"}  # Operator
    assert "uncategorised" not in printed and "uncategorised" not in store.manifest


@pytest.mark.skipif(not RESNET_1_9.exists(), reason="shared wild traces absent")
def test_pytorch_1_9_kernels_get_the_step_of_their_launch(tmp_path, capsys):
    """PyTorch 1.9's flow arrows (cat "async", ending on tid "stream 7") link each kernel, copy and fill to its
    launch: per ProfilerStep#N, the store's device rows are the device events launched inside that step."""
    events = _events(RESNET_1_9)
    steps = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in events
             if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
    launch = {e["id"]: e["ts"] for e in events if e.get("ph") == "s" and e.get("cat") == "async"}
    want: dict[int, int] = defaultdict(int)
    for e in events:
        if e.get("ph") == "X" and e.get("cat", "").lower() in DEVICE_WORK:
            t = launch.get(e["args"]["correlation"])
            step = next((n for start, end, n in steps if t is not None and start <= t < end), None)
            want[step] += 1
    assert None not in want and len(want) == 6
    store, _ = _import(tmp_path, RESNET_1_9, capsys=capsys)
    tl = store.timeline()
    device = tl[tl["lane"].str.startswith("gpu:")]
    assert device["step"].value_counts().to_dict() == dict(want)


@pytest.mark.skipif(not B200_NO_METADATA.exists(), reason="shared wild traces absent")
def test_device_and_stream_from_args_without_metadata_events(tmp_path, capsys):
    """tracelens_b200_eager has no M events: its 768 kernels (args device 0, stream 7) go on gpu:0/stream 7 (they
    were on cpu/tid 7); the NCCL kernel carrying 'Collective name' is comm."""
    events = _events(B200_NO_METADATA)
    assert not any(e.get("ph") == "M" for e in events)
    assert sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "kernel") == 768
    expected = _device_work_per_lane(events)
    store, _ = _import(tmp_path, B200_NO_METADATA, capsys=capsys)
    _assert_lanes_match(store, expected)
    lanes = set(store.timeline()["lane"])
    assert "gpu:0/stream 7" in lanes and "cpu/tid 7" not in lanes
    lane = _store_per_lane(store)["gpu:0/stream 7"]
    assert expected["gpu:0/stream 7"]["comm_ns"] > 0
    assert abs(lane["comm"] - expected["gpu:0/stream 7"]["comm_ns"]) <= 1000


@pytest.mark.parametrize("path", [MI300_ROCM, MI250_ROCM], ids=["mi300", "mi250"])
def test_rocm_kernel_time_per_device_lane(tmp_path, capsys, path):
    """ROCm writes the CUDA cat names with HIP calls: kernel time per device lane is the file's, RCCL's kernels
    (NCCL's names, collective metadata on some) are comm, hipDeviceSynchronize is wait, and
    aten::broadcast_tensors is not communication."""
    if not path.exists():
        pytest.skip("shared traces absent")
    events = _events(path)
    expected = _device_work_per_lane(events)
    store, printed = _import(tmp_path, path, capsys=capsys)
    _assert_lanes_match(store, expected)
    got = _store_per_lane(store)
    for lane, want in expected.items():
        assert abs(got[lane].get("comm", 0) - want["comm_ns"]) <= 1000, lane
    tl = store.timeline()
    for name, category in (("hipDeviceSynchronize", "wait"), ("aten::broadcast_tensors", "compute")):
        rows = tl[tl["name"] == name]
        if len(rows):
            assert set(rows["category"].astype(str)) == {category}, name
    assert "uncategorised" not in printed


@pytest.mark.parametrize("path", [pytest.param(p, marks=needs(p)) for p in (
    BERT_H100,
    corpus("tracelens_mi210_gpu_only", "gpu_only_trace.json.gz"),  # no "GPU N" label: device 1 in args only
    corpus("tracelens_sglang_decode", "sglang_Qwen3-8B_decode.json.gz"),  # no M events: device 9 in args only
    corpus("tracelens_torch_compile_triton", "trace.json.gz"),
)], ids=["h100", "mi210", "sglang", "triton"])
def test_kernel_time_per_device_lane_of_the_corpus(tmp_path, capsys, path):
    """Kineto files of the corpus: device work per lane (events, time to 1 us) is the file's, and host threads'
    own work never lands on a device lane (the H100 file's Python tracer writes a thread with pid 0, the pid
    labelled "GPU 0")."""
    events = _events(path)
    expected = _device_work_per_lane(events)
    store, printed = _import(tmp_path, path, capsys=capsys)
    _assert_lanes_match(store, expected)
    tl = store.timeline()
    on_gpu = tl[tl["lane"].str.startswith("gpu:")]
    annotations = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "gpu_user_annotation")
    assert len(on_gpu) == sum(lane["events"] for lane in expected.values()) + annotations
    assert "uncategorised" not in printed


@needs(MTIA)
def test_mtia_device_events(tmp_path, capsys):
    """MTIA's device work (cat mtia_ccp_events, process "MTIA 17"): DMA requests are memcpy, a stream waiting on
    another's event is wait, the rest compute; per category the time is the file's, to 1 us."""
    events = _events(MTIA)
    ccp = [e for e in events if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events"]
    want: dict[str, int] = defaultdict(int)
    for e in ccp:
        category = {"dma_request": "memcpy", "event_wait": "wait"}.get(e["name"], "compute")
        want[category] += round(e["dur"] * 1000)
    store, printed = _import(tmp_path, MTIA, capsys=capsys)
    tl = store.timeline()
    device = tl[tl["name"].isin({e["name"] for e in ccp}) & tl["lane"].str.startswith("mtia:17/")]
    assert len(device) == len(ccp)
    got = device.groupby(device["category"].astype(str))["dur_ns"].sum()
    for category, ns in want.items():
        assert abs(int(got[category]) - ns) <= 1000, category
    assert "uncategorised" not in printed


def _info(store: TraceStore, capsys) -> dict:
    assert main(["info", "--json", str(store.path)]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    return rank


@needs(BERT_H100)
def test_gpu_user_annotations_are_marks_not_device_time(tmp_path, capsys):
    """A gpu_user_annotation span (bert-small's ProfilerStep#6 as seen on stream 7, 3.9 ms over its kernels) is
    kept on the stream's annotation lane, never device time: info's device events are the file's kernels,
    copies and fills alone, its device busy time (span - idle) their union to 1 us, and neither the host nor
    the device side of info or analyze counts the annotation ('other' 0 on the device)."""
    from ddltrace.analyses.run_analysis import analyze_store

    path = BERT_H100
    events = [e for e in _events(path) if e.get("ph") == "X"]
    work = [e for e in events if str(e.get("cat", "")).lower() in DEVICE_WORK]
    marks = [e for e in events if e.get("cat") == "gpu_user_annotation"]
    assert len(marks) == 1 and marks[0]["dur"] > 3000
    store, _ = _import(tmp_path, path, capsys=capsys)
    tl = store.timeline()
    on_marks = tl[tl["lane"] == "gpu:0/stream 7/annotations"]
    assert list(on_marks["name"]) == [m["name"] for m in marks]
    rank = _info(store, capsys)
    assert rank["device_events"] == len(work) and rank["annotation_events"] == len(marks)
    busy = union_ns((round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in work)
    device = rank["device_time_ns"]
    assert abs(rank["span_ns"] - device["idle"] - busy) < 1000 and device["other"] == 0
    analysis = analyze_store(store)
    assert abs(int(analysis.device_breakdown.drop(columns=["rank", "phase", "idle"]).to_numpy().sum()) - busy) < 1000
    assert int(analysis.host_breakdown["other"].sum()) == rank["host_time_ns"]["other"] == 0
    assert main(["info", str(store.path)]) == 0
    text = capsys.readouterr().out
    assert f"plus {len(marks)} annotation span(s) of device streams" in text
    host_row = next(line.split() for line in text.splitlines() if line.split()[:2] == ["0", "host"])
    assert int(host_row[2]) == len(tl) - len(work) - len(marks)  # the host row's events: neither side's


@needs(MTIA)
def test_mtia_runtime_threads_are_host_work(tmp_path, capsys):
    """MTIA's runtime calls (cat mtia_runtime) sit on threads of the device's own process ("MTIA 17", threads
    "Stream N Submission Queue"): they are host work, on cpu/ lanes, and info's device events are the file's
    mtia_ccp_events alone."""
    events = [e for e in _events(MTIA) if e.get("ph") == "X"]
    device_pid = 17  # process "MTIA 17"
    runtime = [e for e in events if e.get("cat") == "mtia_runtime" and e["pid"] == device_pid]
    ccp = [e for e in events if e.get("cat") == "mtia_ccp_events"]
    store, _ = _import(tmp_path, MTIA, capsys=capsys)
    tl = store.timeline()
    queues = tl[tl["lane"].str.contains("Submission Queue")]
    assert len(queues) == len(runtime) == 113 and set(queues["lane"].str.split("/").str[0]) == {"cpu"}
    assert _info(store, capsys)["device_events"] == len(ccp)


def test_device_args_read_on_the_field_by_field_path(tmp_path, capsys):
    """An event whose args are not an object sends its piece to the reader's field-by-field path, where args stay
    undecoded: the other device events still get their lane and their collective metadata from them."""
    t0 = 1_700_000_000_000_000
    events = [{"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 1, "tid": 5, "ts": t0 + 10 * i, "dur": 4,
               "args": {"device": 1, "stream": 5}} for i in range(3)]
    events.append({"ph": "X", "cat": "kernel", "name": "odd_a2a", "pid": 1, "tid": 5, "ts": t0 + 40, "dur": 6,
                   "args": {"device": 1, "stream": 5, "Collective name": "all_to_all"}})
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 77, "tid": 77, "ts": t0, "dur": 50,
                   "args": [1, 2]})
    trace = tmp_path / "rank0.pt.trace.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    store, _ = _import(tmp_path, trace, capsys=capsys)
    tl = store.timeline()
    gpu = tl[tl["lane"] == "gpu:1/stream 5"]
    assert sorted(gpu["name"]) == ["gemm_0", "gemm_1", "gemm_2", "odd_a2a [all_to_all]"]
    assert gpu.groupby(gpu["category"].astype(str))["dur_ns"].sum().to_dict() == {"compute": 12_000, "comm": 6_000}


@pytest.mark.parametrize("cat", ["Kernel", "Runtime", "mtia_ccp_events", "privateuse1_runtime", "hpu_op"])
def test_kineto_recognised_by_its_cats_alone(tmp_path, cat):
    """A file with none of the header keys (PyTorch 1.8-era, or cut down) is Kineto by a cat only Kineto writes."""
    from ddltrace.collectors.importers import detect

    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": cat, "name": "k", "pid": 0, "tid": 7,
                                                  "ts": 1_700_000_000_000_000, "dur": 5}]}))
    assert detect(trace).name == "kineto"


def _deepseek_like_trace(path: Path) -> dict:
    """A small modern Kineto trace of an expert-parallel step with no metadata events: DeepEP kernels as
    DeepSeek-V3's profile names them, a GEMM, a kernel with an unfamiliar name that carries collective metadata,
    and device work of a cat no Kineto generation writes. Returns the durations (ns) the import must give."""
    t0 = 1_700_000_000_000_000  # epoch us
    kernels = [  # (name, dur us, args extra, expected category)
        ("void dpsk::ep::internode::notify_dispatch<8>(int const*, int*, int)", 40, {}, "comm"),
        ("void dpsk::ep::internode::dispatch<true, 8, 3, 768>(int4*, float*, int64_t*)", 900, {}, "comm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 1500, {}, "compute"),
        ("void dpsk::ep::internode::combine<8, 3, 768>(int4*, float*, int const*)", 700, {}, "comm"),
        ("void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*)", 300, {}, "comm"),
        ("my_fused_a2a_kernel", 250, {"Collective name": "all_to_all", "Process Group Name": "7"}, "comm"),
        ("another_kernel", 125, {"Process Group Name": "3"}, "comm"),
        ("triton_poi_fused_all_gather_into_tensor_copy_0", 60, {}, "compute"),
    ]
    events, t = [], t0
    for name, dur, extra, _ in kernels:
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 20, "ts": t, "dur": dur,
                       "args": {"device": 0, "stream": 20, "correlation": len(events), **extra}})
        t += dur + 5
    for i in range(3):
        events.append({"ph": "X", "cat": "fancy_npu_op", "name": f"npu_matmul_{i % 2}", "pid": 0, "tid": 21,
                       "ts": t0 + 10 * i, "dur": 7, "args": {"device": 0, "stream": 21}})
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242, "ts": t0,
                   "dur": 30, "args": {"External id": 1}})
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 3,
                                                                        "world_size": 16},
                                "traceEvents": events}))
    want: dict[str, int] = defaultdict(int)
    for _name, dur, _extra, category in kernels:
        want[category] += dur * 1000
    return dict(want)


def test_deepep_and_collective_args_kernels_are_comm(tmp_path, capsys):
    """DeepEP's dispatch/combine/notify kernels and kernels whose args carry collective metadata are comm; a device
    cat no rule knows is reported (import and info) with its event count, not silently "other"."""
    trace = tmp_path / "rank3.pt.trace.json"
    want = _deepseek_like_trace(trace)
    store, printed = _import(tmp_path, trace, capsys=capsys)
    assert store.ranks == [3]
    lane = _store_per_lane(store)["gpu:0/stream 20"]
    assert lane["comm"] == want["comm"] and lane["compute"] == want["compute"]
    assert "uncategorised: 3 events of 1 raw category no rule knows" in printed
    assert "kineto cat 'fancy_npu_op': 3 events (2 names)" in printed
    assert store.manifest["uncategorised"] == [{"format": "kineto", "cat": "fancy_npu_op", "events": 3, "names": 2}]
    unknown = store.timeline()
    assert set(unknown.loc[unknown["name"].str.startswith("npu_matmul"), "lane"]) == {"gpu:0/stream 21"}
    assert main(["info", str(tmp_path / "store")]) == 0
    assert "kineto cat 'fancy_npu_op': 3 events (2 names)" in capsys.readouterr().out
    assert main(["info", str(tmp_path / "store"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["uncategorised"][0]["events"] == 3


@pytest.mark.parametrize(("library", "name"), [
    ("NCCL", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    ("NCCL", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
    ("RCCL", "void rccl_AllReduce_kernel<float>(ncclDevComm*)"),
    ("MSCCL", "mscclKernel_Sum_float_Simple_false(int, int, mscclAlgo*, mscclWork*)"),
    ("MSCCL++", "void mscclpp::allreduceAllToAll<__nv_bfloat16>(__nv_bfloat16*, int)"),
    ("DeepEP", "void deep_ep::internode::combine<8, 3, 768>(int4*, float*)"),
    ("DeepEP (DeepSeek-V3)", "void dpsk::ep::internode::dispatch<true, 8, 3, 768>(int4*)"),
    ("NVSHMEM", "nvshmemi_transfer_rma_put_kernel(void*, void const*, size_t, int)"),
    ("oneCCL", "oneccl_allreduce_kernel_bf16"),
    ("oneCCL", "ccl::ze::allreduce_kernel<float>"),
    ("HCCL", "hcclAllReduceKernel_bf16"),
    ("Gloo", "gloo::CudaAllreduceRing<float>"),
])
def test_communication_libraries_kernels_are_comm(library, name):
    categorizer = Categorizer()
    assert categorizer.category("kineto", "kernel", name) == "comm", library
    assert categorizer.category("chrome", "", name) == "comm", library  # any other tool's Chrome trace


@pytest.mark.parametrize("name", ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "rccl_AllGather_kernel",
                                  "nvshmemi_transfer_rma_put_kernel", "mscclKernel_Sum_float_Simple_false"])
def test_communication_libraries_in_xplane_and_tf_kernels(name):
    """XLA's (JAX, TensorFlow) GPU collectives run NCCL/RCCL, NVSHMEM or MSCCL kernels: comm in the TF rules."""
    assert Categorizer().category("tf2", "", name) == "comm"


@pytest.mark.parametrize(("cat", "name", "category"), [
    ("Kernel", "volta_sgemm_64x64_nt", "compute"),            # PyTorch 1.8/1.9
    ("Memcpy", "Memcpy HtoD (Pageable -> Device)", "memcpy"),
    ("Memset", "Memset (Device)", "memcpy"),
    ("Runtime", "cudaLaunchKernel", "other"),
    ("Runtime", "cudaStreamSynchronize", "wait"),
    ("Operator", "aten::conv2d", "compute"),
    ("Python", "nn.Module: ResNet", "other"),                 # Python's frames: where the code was, no work
    ("python_function", "<built-in function sleep>", "other"),
    ("Trace", "PyTorch Profiler (0)", "other"),
    ("kernel", "void at::native::vectorized_elementwise_kernel<4>", "compute"),  # 1.10 on
    ("KERNEL", "sgemm", "compute"),
    ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", "memcpy"),
    ("gpu_memset", "Memset (Device)", "memcpy"),
    ("cuda_runtime", "hipMemcpyWithStream", "memcpy"),                           # ROCm: CUDA cats, HIP calls
    ("cuda_runtime", "hipDeviceSynchronize", "wait"),
    ("hip_runtime", "hipLaunchKernel", "other"),
    ("hip_runtime", "hipStreamSynchronize", "wait"),
    ("mlu_runtime", "cnrtQueueSync", "wait"),                                    # Cambricon's fork
    ("mlu_memcpy", "Memcpy HtoD", "memcpy"),
    ("cuda_driver", "cuLaunchKernel", "other"),
    ("mtia_ccp_events", "pe_exe", "compute"),                                     # other devices
    ("mtia_ccp_events", "dma_request", "memcpy"),
    ("mtia_ccp_events", "event_wait", "wait"),
    ("mtia_runtime", "mtiaStreamSynchronize", "wait"),
    ("hpu_op", "matmul_fwd_bf16", "compute"),
    ("xpu_runtime", "urEnqueueKernelLaunch", "other"),
    ("privateuse1_runtime", "Launch", "other"),
    ("collective_comm", "allreduce", "comm"),
    ("cuda_sync", "Stream Wait Event", "wait"),
    ("overhead", "Instrumentation", "other"),
    ("cpu_op", "aten::broadcast_tensors", "compute"),
])
def test_every_kineto_generation_is_categorised(cat, name, category):
    """Every ActivityType name of libkineto and the capitalised cats of PyTorch 1.8/1.9 have a rule: none is
    left to the catch-all (reported as uncategorised)."""
    categorizer = Categorizer()
    assert categorizer.category("kineto", cat, name) == category
    assert categorizer.uncategorised() == []


def test_an_unknown_cat_is_uncategorised():
    categorizer = Categorizer()
    assert categorizer.category("kineto", "brand_new_device_op", "x", count=5) == "other"
    assert categorizer.uncategorised() == [{"format": "kineto", "cat": "brand_new_device_op", "events": 5,
                                            "names": 1}]


def test_uncategorised_flag_must_be_a_boolean(tmp_path):
    from ddltrace.collectors.importers.categories import load_rules
    from ddltrace.errors import DdltraceError

    rules, _ = load_rules('[[rule]]\nid = "mine"\ncategory = "other"\nuncategorised = true\n', "mine.toml")
    assert rules[0].uncategorised
    with pytest.raises(DdltraceError, match="mine.toml: rule 1 .mine.: uncategorised must be true or false"):
        load_rules('[[rule]]\nid = "mine"\ncategory = "other"\nuncategorised = "yes"\n', "mine.toml")


@pytest.mark.parametrize("rank", ["abc", 1.5, None, True, -1, 2**31, 1e12, 2**70])
def test_distributed_rank_that_is_not_a_rank_is_a_note(tmp_path, capsys, rank):
    """A distributedInfo.rank that is not an integer from 0 to 2**31 - 1 is a problem line naming the value and
    the rank used instead (the file name's), never silently another rank and never an OverflowError."""
    trace = tmp_path / "rank5.pt.trace.json"
    trace.write_text(json.dumps({"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": "many"},
                                 "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                                                  "tid": 1, "ts": 1_700_000_000_000_000, "dur": 10}]}))
    store, printed = _import(tmp_path, trace, capsys=capsys)
    assert store.ranks == [5]
    assert f"distributedInfo.rank {rank!r} is not a rank" in printed and "rank 5 taken from" in printed
    assert "distributedInfo.world_size 'many' is not a world size" in printed
    assert any(f"distributedInfo.rank {rank!r}" in note for note in store.manifest["notes"])


def test_distributed_rank_as_integral_float_is_used(tmp_path, capsys):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"distributedInfo": {"rank": 2.0, "world_size": 4},
                                 "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                                                  "tid": 1, "ts": 1_700_000_000_000_000, "dur": 10}]}))
    store, printed = _import(tmp_path, trace, capsys=capsys)
    assert store.ranks == [2] and "problem" not in printed


TRACE_DIFF_CONTROL = HTA / "trace_diff" / "control" / "control.json.gz"


@pytest.mark.parametrize("path", [TRACE_DIFF_CONTROL, MI300_ROCM], ids=["no-flow-arrows", "arrows-for-some"])
def test_kernels_get_the_step_of_the_runtime_call_of_their_correlation(tmp_path, capsys, path):
    """A device event's step is the ProfilerStep#N its launch started in: the earliest host event (the runtime
    call) with the same args.correlation, read from the file here. HTA's trace_diff/control has no flow arrows at
    all, and the MI300 trace has none for 81 of its kernels: the correlation places them all (with the arrows
    alone they had no step). The host's ProfilerStep spans only: the MI300 trace's streams have copies of them
    (gpu_user_annotation) that overlap the host's next step."""
    if not path.exists():
        pytest.skip("shared traces absent")
    events = _events(path)
    steps = [(Decimal(str(e["ts"])), Decimal(str(e["ts"])) + Decimal(str(e["dur"])), int(e["name"].split("#")[1]))
             for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]  # (the host's spans: a stream's copy marks the device's time)
    launch: dict[int, Decimal] = {}
    for e in events:
        correlation = (e.get("args") or {}).get("correlation")
        if e.get("ph") == "X" and e.get("cat", "").lower() not in DEVICE_WORK | {"gpu_user_annotation"} \
                and isinstance(correlation, int) and correlation >= 0:
            launch[correlation] = min(launch.get(correlation, Decimal("Infinity")), Decimal(str(e["ts"])))
    want: dict[int, int] = defaultdict(int)
    for e in events:
        if e.get("ph") == "X" and e.get("cat", "").lower() in DEVICE_WORK:
            t = launch.get((e.get("args") or {}).get("correlation"))
            want[next((n for start, end, n in steps if t is not None and start <= t < end), -1)] += 1
    assert sum(n for step, n in want.items() if step >= 0) > 1000
    store, _ = _import(tmp_path, path, capsys=capsys)
    device = store.timeline()
    device = device[device["lane"].str.startswith("gpu:") & ~device["lane"].str.endswith("/annotations")]
    assert device["step"].fillna(-1).astype(int).value_counts().to_dict() == dict(want)


#: (cat, name, args, bytes, comm) of device events: a kernel's nccl-tests size from c10d's element counts and dtype
#: (all-gather: the gathered output; reduce-scatter: the input; all-to-all: the send buffer), a copy's or fill's
#: bytes; the process group's number, or a hash of a group's name that is not a number.
_SIZED = [
    ("kernel", "ncclDevKernel_AllGather_RING_LL", {"Collective name": "_allgather_base", "Process Group Name": "3",
     "In msg nelems": 100, "Out msg nelems": 800, "dtype": "BFloat16", "Group size": 8}, 1600, 3),
    ("kernel", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", {"Collective name": "reduce_scatter_tensor_coalesced",
     "Process Group Name": "0", "In msg nelems": 800, "Out msg nelems": 100, "dtype": "Float"}, 3200, 0),
    ("kernel", "ncclDevKernel_Generic", {"Collective name": "all_to_all", "Process Group Name": "0",
     "In msg nelems": 64, "Out msg nelems": 96, "dtype": "Double"}, 512, 0),
    ("kernel", "ncclDevKernel_AllReduce_Sum_f8", {"Collective name": "allreduce", "Process Group Name": "0",
     "In msg nelems": 10, "Out msg nelems": 10, "dtype": "NoSuchType"}, None, 0),
    ("kernel", "ncclDevKernel_Broadcast_RING_LL", {"Collective name": "broadcast", "Process Group Name": "tp",
     "In msg nelems": -1, "Out msg nelems": 5, "dtype": "Float"}, None, "hash"),
    ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", {"bytes": 4096}, 4096, None),
    ("gpu_memset", "Memset (Device)", {"bytes": 12}, 12, None),
    ("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", {"bytes": True}, None, None),
    ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", {"bytes": -5}, None, None),
]


@pytest.mark.parametrize("path", ["fast", "field-by-field"])
def test_bytes_and_process_group_from_the_device_events_args(tmp_path, capsys, path):
    """Each device event's ``bytes`` and ``comm`` are what its args say (:data:`_SIZED`), on the reader's fast path
    and on its field-by-field path (a host event whose args are not an object); host events get none."""
    t0 = 1_700_000_000_000_000
    events = [{"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": t0 + 10 * i, "dur": 4,
               "args": {"device": 0, "stream": 7, **args}} for i, (cat, name, args, _, _) in enumerate(_SIZED)]
    events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 77, "tid": 77, "ts": t0,
                   "dur": 50, "args": [1] if path == "field-by-field" else {"In msg nelems": 3, "dtype": "Float"}})
    trace = tmp_path / "rank0.pt.trace.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    tl = _import(tmp_path, trace, capsys=capsys)[0].timeline().sort_values("start_ns", kind="stable")
    gpu, host = tl[tl["lane"] == "gpu:0/stream 7"], tl[tl["lane"] != "gpu:0/stream 7"]
    assert list(gpu["bytes"].astype(object).where(gpu["bytes"].notna(), None)) == [s[3] for s in _SIZED]
    comm = list(gpu["comm"].astype(object).where(gpu["comm"].notna(), None))
    assert comm[:4] == [s[4] for s in _SIZED[:4]] and comm[5:] == [None] * 4
    assert isinstance(comm[4], int) and comm[4] >= 0 and comm[4] not in (0, 3)  # "tp": a hash of the name
    assert host["bytes"].isna().all() and host["comm"].isna().all()
    assert gpu["name"].iloc[2] == "ncclDevKernel_Generic [all_to_all]"  # its name said no collective
    assert list(gpu["name"].iloc[[0, 1, 3, 4]]) == [_SIZED[i][1] for i in (0, 1, 3, 4)]


def test_a_group_named_not_by_a_number_has_the_same_id_on_every_rank(tmp_path, capsys):
    """Two ranks' files whose kernels name the group "tp_group": one ``comm`` for both."""
    paths = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.pt.trace.json"
        path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2},
                                    "traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce",
                                                     "pid": 0, "tid": 7, "ts": 1_700_000_000_000_000, "dur": 3,
                                                     "args": {"device": 0, "stream": 7,
                                                              "Process Group Name": "tp_group"}}]}))
        paths.append(path)
    tl = _import(tmp_path, *paths, capsys=capsys)[0].timeline()
    assert tl["comm"].notna().all() and tl["comm"].nunique() == 1 and tl["bytes"].isna().all()


@pytest.mark.skipif(not (HTA / "nccl_parser_config").exists(), reason="shared HTA traces absent")
def test_bytes_of_every_collective_and_copy_of_a_real_file(tmp_path, capsys):
    """HTA's nccl_parser_config: each kernel's bytes the larger of c10d's in and out element counts times the
    dtype's size (all-reduces of Float, broadcasts of Float and Long), each copy's and fill's its args' bytes; the
    process group c10d's "0". c10d's host op ``record_param_comms``, which carries the same args, gets the same
    (its 6 ``wait`` entries: 0 elements, no group). (The file's times are relative to its baseTimeNanoseconds,
    which the store adds.)"""
    path = HTA / "nccl_parser_config" / "nccl_data.json.gz"
    size = {"Float": 4, "Long": 8, "Byte": 1}
    want = {}
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)  # the times' exact decimals
    for e in doc["traceEvents"]:
        args = e.get("args", {})
        if e.get("ph") == "X" and "In msg nelems" in args and e["cat"] in ("kernel", "cpu_op"):
            group = args.get("Process Group Name")
            want[(int(e["ts"] * 1000), e["name"])] = (max(args["In msg nelems"], args["Out msg nelems"])
                                                        * size[args["dtype"]], None if group is None else int(group))
        elif e.get("ph") == "X" and e.get("cat") in ("gpu_memcpy", "gpu_memset"):
            want[(int(e["ts"] * 1000), e["name"])] = (args["bytes"], None)
    store, _ = _import(tmp_path, path, capsys=capsys)
    tl = store.timeline()
    sized = tl[tl["bytes"].notna()]
    got = {(t - doc["baseTimeNanoseconds"], n): (int(b), None if c is pd.NA else int(c))
           for t, n, b, c in zip(sized["start_ns"], sized["name"], sized["bytes"], sized["comm"], strict=True)}
    assert len(want) == 21 + 27 + 960 + 114 and got == want
    collective = tl["name"].str.startswith("nccl") | (tl["name"] == "record_param_comms")
    assert (tl["comm"].notna() == tl["bytes"].notna() & collective & (tl["bytes"] > 0)).all()


def test_a_kernel_named_for_a_copy_or_fill_from_the_start_is_one_and_a_kernel_ending_in_the_word_is_compute():
    """QA s21: vLLM's Triton kernel ``_combined_routing_memset`` (24 of them, 123 us, cat kernel, no gpu_memset in
    the trace) read as 24 fills; a CUDA graph's memset node, the kernel ``memset32`` (sample_traces/h200-graphs),
    is one."""
    from collectors.importers.categories import explain

    names = ["memset32", "Memcpy HtoD (Pageable -> Device)", "dma_request", "_combined_routing_memset"]
    got = {row["name"]: row["category"] for row in explain(names, "kineto", "kernel")}
    assert got == {"memset32": "memcpy", "Memcpy HtoD (Pageable -> Device)": "memcpy", "dma_request": "memcpy",
                   "_combined_routing_memset": "compute"}
