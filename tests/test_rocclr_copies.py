"""ROCm's blit kernels, the copies and fills ROCclr runs as kernels (``__amd_rocclr_copyBuffer``, ``copyBufferAligned``,
``copyBufferRect``, ``fillBufferAligned``, ...), are memory work (class memcpy: copy direction ``other``, as the name
does not say between which memories; fill ``fill``), not compute; the other ``__amd_rocclr_`` kernels (``initHeap``,
``batchMemOp``, ``streamOpsWait``/``Write``) stay compute. Before, every importer classed them as compute, so the
device's compute time held them and the copies table showed none.

Checked against the raw files on the real traces that hold them (none of ../shared's does: HTA's amd_trace and
TraceLens' MI300 ResNet have no __amd_rocclr_ kernel): TraceLens' rocprofv3 JSON of a training run on MI350X
(tracelens_rocprofv3_mi350x: 3,153 copyBuffer and 3,213 fillBufferAligned dispatches), and its JAX XPlanes of an
MI300 (tracelens_jax_mi300_xplane: 35 copyBuffer.kd; tracelens_jax_te_fused_attn_xplane: 20 fillBufferAligned.kd);
tests/data/wild/PROVENANCE.md says where each comes from; each test skips where its file is absent. No real Kineto
trace with these kernels was found (ROCm 7.1's Kineto writes them with cat ``kernel``, TraceLens' util.py notes; 7.2
as gpu_memcpy / gpu_memset): the Kineto rule is checked on the real files' kernel names.

HTA 0.5 classes them as COMPUTATION (its MEMORY is a name beginning Memcpy, Memset or dma):
:func:`test_hta_counts_them_as_compute`."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from hta_reference import HTA_PYTHON, NEEDS_HTA
from shared_data import corpus, needs
from xplane_wire import xplane_lines

from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.collectors.importers import protowire as pw
from ddltrace.collectors.importers.categories import Categorizer

ROCPROF = corpus("tracelens_rocprofv3_mi350x", "908_results.json.gz")
XPLANES = {"copy": corpus("tracelens_jax_mi300_xplane", "tw003.xplane.pb"),
           "fill": corpus("tracelens_jax_te_fused_attn_xplane", "934987a2fc2f.xplane.pb")}
#: ROCclr's blit kernels that copy or fill, as the files name them (rocprofv3's formatted names; XPlane adds ".kd").
BLIT = re.compile(r"^__amd_rocclr_(copy|fill)")
#: Every __amd_rocclr_ kernel the rocprofv3 file's kernel_symbols name (formatted_kernel_name).
ROCCLR_NAMES = ["__amd_rocclr_batchMemOp", "__amd_rocclr_copyBuffer", "__amd_rocclr_copyBufferAligned",
                "__amd_rocclr_copyBufferRect", "__amd_rocclr_copyBufferRectAligned", "__amd_rocclr_fillBufferAligned",
                "__amd_rocclr_fillBufferAligned2D", "__amd_rocclr_initHeap", "__amd_rocclr_streamOpsWait",
                "__amd_rocclr_streamOpsWrite"]
#: Lines of an XPlane's device plane that annotate its streams (not device work; as tests/test_xplane_correlation.py).
DERIVED = {"Steps", "TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops", "XLA Modules", "Framework Ops",
           "Framework Name Scope", "Source code", "Async XLA Ops", "Launch Stats"}


def _kind(name: str) -> str:
    """What the file's kernel is: "copy", "fill" (a blit kernel), "comm" (RCCL) or "compute"."""
    m = BLIT.match(name)
    return m.group(1) if m else "comm" if re.search(r"(?i)nccl|rccl", name) else "compute"


def _union(intervals) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def _import(path: Path, tmp_path: Path):
    out = tmp_path / "store"
    assert main(["import", str(path), "--out", str(out), "--progress", "never"]) == 0
    return analyze_store(out)


def _check(run, truth: dict) -> None:
    """The copies table, the kernel classes and the temporal breakdown of each device against ``truth``: per device,
    per kind, [count, summed ns, intervals]."""
    copies = run.gpu.copy_table().set_index(["device", "direction"])
    classes = run.gpu.class_table().set_index(["device", "class"])
    temporal = run.gpu.temporal_table().set_index("device")
    for device, kinds in truth.items():
        for kind, direction in (("copy", "other"), ("fill", "fill")):
            n, ns, _ = kinds.get(kind, [0, 0, []])
            if n:
                row = copies.loc[(device, direction)]
                assert (row["copies"], row["time_ns"]) == (n, ns), (device, kind)
            else:
                assert (device, direction) not in copies.index
        blit = [kinds.get(k, [0, 0, []]) for k in ("copy", "fill")]
        if sum(b[0] for b in blit):
            memory = classes.loc[(device, "memcpy")]
            assert (memory["kernels"], memory["sum_ns"]) == (sum(b[0] for b in blit), sum(b[1] for b in blit))
        else:
            assert (device, "memcpy") not in classes.index
        n, ns, intervals = kinds["compute"]
        compute = classes.loc[(device, "compute")]
        assert (compute["kernels"], compute["sum_ns"]) == (n, ns), device  # the blit kernels no longer in it
        assert temporal.loc[device, "compute_ns"] == _union(intervals), device


@needs(ROCPROF)
def test_rocprofv3_blit_copies_and_fills_are_memory_work(tmp_path):
    """The MI350X file: 3,153 copyBuffer dispatches (10.05 ms) and 3,213 fillBufferAligned (13.05 ms), all on
    GPU 0; compute kernels 259.9 ms summed (282.98 ms with them, before)."""
    (process,) = json.loads(gzip.open(ROCPROF).read())["rocprofiler-sdk-tool"]
    gpus = {a["id"]["handle"]: a["gpu_index"] for a in process["agents"] if a["type"] == 2}
    names = {k["kernel_id"]: k["formatted_kernel_name"] for k in process["kernel_symbols"]}
    truth = defaultdict(lambda: defaultdict(lambda: [0, 0, []]))
    for r in process["buffer_records"]["kernel_dispatch"]:
        info = r["dispatch_info"]
        t = truth[f"gpu:{gpus[info['agent_id']['handle']]}"][_kind(names[info["kernel_id"]])]
        t[0] += 1
        t[1] += r["end_timestamp"] - r["start_timestamp"]
        t[2].append((r["start_timestamp"], r["end_timestamp"]))
    assert {d: (k["copy"][:2], k["fill"][:2]) for d, k in truth.items()} == {
        "gpu:0": ([3153, 10_051_659], [3213, 13_047_568])}
    _check(_import(ROCPROF, tmp_path), truth)


def _xplane_truth(path: Path) -> dict:
    """Per device (gpu:N), per kind: [count, summed ns, intervals] of the events on its stream lines (each start and
    duration truncated from ps to ns, as the store keeps them)."""
    truth = defaultdict(lambda: defaultdict(lambda: [0, 0, []]))
    for number, _wire, plane in pw.fields(path.read_bytes()):
        if number != 1:
            continue
        fields = list(pw.fields(pw.message(plane)))
        plane_name = next((pw.text(v) for n, _k, v in fields if n == 2), "")
        m = re.match(r"/device:GPU:(\d+)$", plane_name)
        if not m:
            continue
        names = {}
        for n, _k, v in fields:
            if n == 4:
                entry = {en: ev for en, _ek, ev in pw.fields(pw.message(v))}
                meta = pw.message(entry.get(2, b""))
                names[pw.signed(entry.get(1, 0))] = next((pw.text(x) for fn, _fk, x in pw.fields(meta) if fn == 2), "")
        for line, base_ns, events in xplane_lines(fields):
            if line in DERIVED:
                continue
            for event in events:
                e = {n: v for n, _k, v in event if n != 4}
                start_ps = base_ns * 1000 + pw.signed(e.get(2, 0))
                dur = pw.signed(e.get(3, 0)) // 1000
                t = truth[f"gpu:{m.group(1)}"][_kind(names.get(pw.signed(e.get(1, 0)), ""))]
                t[0] += 1
                t[1] += dur
                t[2].append((start_ps // 1000, start_ps // 1000 + dur))
    return truth


@pytest.mark.parametrize("kind", sorted(XPLANES))
def test_jax_xplane_blit_kernels_are_memory_work(kind, tmp_path):
    """JAX on an MI300: tw003 copies with copyBuffer.kd (35, 563.5 us, on GPU 0 of 8), 934987a2fc2f fills with
    fillBufferAligned.kd (20, 166.5 us)."""
    path = XPLANES[kind]
    if not path.is_file():
        pytest.skip(f"{path.parent.name}/{path.name} absent (see tests/data/wild/PROVENANCE.md)")
    truth = _xplane_truth(path)
    blit = {d: k[kind][:2] for d, k in truth.items() if kind in k}
    assert blit == {"gpu:0": [35, 563_521] if kind == "copy" else [20, 166_482]}
    _check(_import(path, tmp_path), truth)


def test_the_rules_class_blit_copies_and_fills_as_memory_in_every_rocm_format():
    """Kineto (cat kernel, as ROCm 7.1 writes them), rocprofv3 (kernel_dispatch) and XPlane (tf2; JAX adds ".kd"):
    the real files' __amd_rocclr_ kernel names; a job's own kernel that mentions a memset stays compute."""
    rules = Categorizer()
    for fmt, cat in (("kineto", "kernel"), ("rocprofv3", "kernel_dispatch"), ("tf2", "")):
        for name in ROCCLR_NAMES:
            for written in (name, name + ".kd"):
                want = "memcpy" if BLIT.match(name) else "compute"
                assert rules.category(fmt, cat, written) == want, (fmt, written)
        assert rules.category(fmt, cat, "_combined_routing_memset") == "compute"


@NEEDS_HTA
def test_hta_counts_them_as_compute():
    """HTA 0.5's get_kernel_type: the blit kernels are COMPUTATION (so HTA's temporal breakdown counts them as compute
    and its memory-bandwidth figures leave them out), a Memcpy or Memset MEMORY."""
    code = ("import json, sys; from hta.utils.utils import get_kernel_type; "
            "print(json.dumps({n: get_kernel_type(n) for n in json.loads(sys.argv[1])}))")
    names = [*ROCCLR_NAMES, "__amd_rocclr_copyBuffer.kd", "Memcpy DtoD (Device -> Device)", "Memset (Device)"]
    done = subprocess.run([str(HTA_PYTHON), "-c", code, json.dumps(names)], capture_output=True, text=True, check=True)
    kinds = json.loads(done.stdout)
    assert {n for n, k in kinds.items() if k != "COMPUTATION"} == {"Memcpy DtoD (Device -> Device)", "Memset (Device)"}
