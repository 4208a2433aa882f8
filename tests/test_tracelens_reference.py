"""ddltrace's GPU figures against AMD's TraceLens (benchmarks/gpu_vs_tracelens.py's TraceLens child, in its own venv
``.venvs/tracelens``, made by ``make tracelens``; these tests skip, saying so, where it is absent) on HTA's
nccl_parser_config: one NCCL rank, 3,774 device events all linked to their launch, 114 fills, 15 all-reduces with
c10d's sizes. About 5 s."""

from __future__ import annotations

import functools
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from shared_data import SHARED

REPO = Path(__file__).resolve().parents[1]
TRACELENS_VENV = REPO / ".venvs" / "tracelens"
TRACELENS_PYTHON = TRACELENS_VENV / "bin" / "python"
INSTALLED = TRACELENS_PYTHON.exists() and any(TRACELENS_VENV.glob("lib/python*/site-packages/TraceLens/__init__.py"))
JOB = SHARED / "hta_traces" / "nccl_parser_config"
pytestmark = [
    pytest.mark.skipif(not INSTALLED, reason=f"TraceLens is not installed in {TRACELENS_VENV} ('make tracelens' "
                                             "makes it: from GitHub, or TRACELENS_SRC=a clone or mirror)"),
    pytest.mark.skipif(not JOB.is_dir(), reason=f"{JOB} absent (the workplace's shared traces)"),
]


def _benchmark():
    spec = importlib.util.spec_from_file_location("gpu_vs_tracelens", REPO / "benchmarks" / "gpu_vs_tracelens.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec.loader.exec_module(module)
    return module


@functools.cache
def _both() -> tuple[dict, dict]:
    """(TraceLens' figures, ddltrace's) on the job, as the benchmark takes them."""
    bench = _benchmark()
    with tempfile.TemporaryDirectory() as tmp:
        for f in JOB.glob("*.json.gz"):
            shutil.copy(f, Path(tmp) / f.name)
        tracelens = subprocess.run([str(TRACELENS_PYTHON), "-c", bench._TRACELENS_CHILD, tmp], capture_output=True,
                                   text=True, check=True, cwd=tempfile.gettempdir())
        ours = subprocess.run([sys.executable, "-m", "ddltrace", "analyze", tmp, "--json", "--quiet"],
                              capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    store = json.loads(ours.stdout)["stores"][0]
    return (json.loads(tracelens.stdout.strip().splitlines()[-1]),
            bench.ours_figures(store["gpu"], store.get("world_size")))


def test_tracelens_timeline_is_ddltraces_once_fills_are_memory():
    """TraceLens links all 3,774 device events and its window, idle and communication time are ddltrace's; its
    computation counts the fills, ddltrace's does not; TraceLens' own interval code with the fills as memory gives
    ddltrace's every figure."""
    bench = _benchmark()
    tracelens, ours = _both()
    t, o = tracelens["ranks"]["0"], ours["ranks"]["0"]
    assert t["events"] == t["all_events"] == o["events"] == 3774 and t["fills"] == 114
    default, check = bench.tracelens_terms(t["timeline"]), bench.tracelens_terms(t["check_all"])
    for key in ("window_ms", "idle", "comm_ms"):
        assert o[key] == pytest.approx(default[key], abs=1e-3)
    # the fills under no kernel: computation for TraceLens, and the communication under them not exposed
    assert default["compute"] - o["compute"] == pytest.approx(0.06, abs=0.005)
    assert o["exposed_comm"] - default["exposed_comm"] == pytest.approx(0.005, abs=0.001)
    for key in bench.FIGURES:
        assert o[key] == pytest.approx(check[key], abs=1e-3)
    assert o["kernel_count"] == t["kernels"]["count"] == 2700
    assert o["kernel_ms"] == pytest.approx(t["kernels"]["sum_ms"], rel=1e-9)


def test_tracelens_bus_bandwidth_is_ddltraces():
    """The 15 all-reduces: the same latency and bus bandwidth (TraceLens' "GB/s" are GiB/s), n = 2 both."""
    bench = _benchmark()
    tracelens, ours = _both()
    theirs = sorted((i for i in tracelens["collectives"]["instances"] if i["kind"] == "allreduce"),
                    key=lambda i: i["first_start_us"])
    mine = sorted((i for i in ours["collectives"] if i["kind"] == "allreduce"), key=lambda i: i["first_start_us"])
    assert len(theirs) == len(mine) == 15 and ours["world_size"] == 2
    assert {i["group_size"] for i in theirs} == {2.0}
    for a, b in zip(mine, theirs, strict=True):
        assert a["latency_us"] == pytest.approx(b["latency_us"], abs=1e-3)
        assert a["busbw_gb"] == pytest.approx(b["busbw_gib"] * bench.GIB / 1e9, rel=1e-9)
