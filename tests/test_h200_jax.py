"""A real JAX profile from an NVIDIA H200 (sample_traces/h200-jax: jax.profiler's XPlane of 10 jitted steps, each
in a StepTraceAnnotation), held against the job's own clock (truth.jsonl) and the file itself."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main

RUN = Path(__file__).resolve().parent.parent / "sample_traces" / "h200-jax"


def test_a_jax_profile_from_an_h200_gives_the_jobs_steps_and_kernels(tmp_path):
    assert main(["import", str(RUN / "vm.xplane.pb"), "--out", str(tmp_path / "j"), "--progress", "never"]) == 0
    run = analyze_store(tmp_path / "j")
    truth = [json.loads(line) for line in (RUN / "truth.jsonl").read_text().splitlines()]
    steps = run.phases[0].steps
    # StepTraceAnnotation's steps, numbered as the job numbered them, where and as long as its own clock said
    # (the step includes block_until_ready: the device's work is in it); measured within 22 us
    assert steps["step"].tolist() == [t["step"] for t in truth] == list(range(10))
    assert np.allclose(steps["start_ns"], [t["t0_ns"] for t in truth], atol=1e5, rtol=0)
    assert np.allclose(steps["dur_ns"], [t["t1_ns"] - t["t0_ns"] for t in truth], atol=1e5, rtol=0)
    # the device's kernels: every step runs the same jitted program, so the kernel count is a multiple of 10,
    # and the matmuls (cuBLAS's sm90 GEMMs, TF32) take the most device time
    work = run.store.timeline([0])
    device = work[work["lane"].str.startswith("gpu:") & (work["category"] == "compute")]
    assert len(device) % 10 == 0 and len(device) >= 100
    by_name = device.groupby("name")["dur_ns"].sum().sort_values(ascending=False)
    assert "gemm" in by_name.index[0]


def test_the_cuda_graph_launches_of_jax_are_paired_with_the_graphs_kernels(tmp_path):
    """JAX runs each jitted step as a CUDA graph: the XPlane's host event `cuGraphLaunch (CudaGraph:N)` carries
    the correlation id of every kernel of the graph. Each of those kernels is paired with it (one pair per kernel),
    so the idle gaps the graphs end are linked to a launch (before: no pair, no idle table for the run)."""
    from ddltrace.analyses.gpu_lanes import device_work
    from ddltrace.analyses.gpu_launch import launch_pairs

    assert main(["import", str(RUN / "vm.xplane.pb"), "--out", str(tmp_path / "j"), "--progress", "never"]) == 0
    run = analyze_store(tmp_path / "j")
    timeline = run.store.timeline([0])
    pairs = launch_pairs(timeline, device_work(timeline), graphs=True)
    graphs = pairs[pairs["launch"].str.startswith("cuGraphLaunch")]
    host = timeline[timeline["name"].str.startswith("cuGraphLaunch") & ~timeline["lane"].str.startswith("gpu:")]
    work = device_work(timeline)
    launched = work[work["correlation"].isin(set(host["correlation"]))]
    assert len(host) == 10 and len(graphs) == len(launched) >= 10 * 10
    assert set(graphs["correlation"]) == set(host["correlation"])
    # HTA's set, which the launch statistics and queue length keep, has no graph launch
    assert not launch_pairs(timeline, work)["launch"].str.startswith("cuGraphLaunch").any()
    idle = run.gpu.idle_table()
    assert len(idle) == 1 and idle.loc[0, "host_wait_ns"] > 0 and idle.loc[0, "unlinked_ns"] == 0


def test_the_idle_analysis_is_made_on_a_profile_whose_launches_are_graphs(capsys):
    """The JAX profile's only linked launches are its CUDA graphs': the idle analysis is made (its table in the text
    and --json) and listed as not made no more, while HTA's launch statistics, which take no graph, still are."""
    assert main(["analyze", str(RUN / "vm.xplane.pb"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    store = out["stores"][0]
    assert len(store["gpu"]["idle"]) == 1 and store["gpu"]["idle"][0]["host_wait_ns"] > 0
    # none of HTA's set: a row of 0 launches that says what it leaves out, the 10 graph launches and their 200
    # kernels and 10 fills ("Memset 0")
    assert [(r["launches"], r["left_out_calls"], r["left_out_activities"]) for r in store["gpu"]["launches"]] == [
        (0, 10, 210)]
    missing = {row["analysis"] for row in out["not_made"]}
    assert "gpu_idle" not in missing and "gpu_launches" in missing
    # and the finding: 47 % of the window waiting for the host, all in gaps under 1 ms (a small MLP's short
    # kernels between steps of a Python loop), with no launch statistics in its evidence (none in HTA's set)
    finding = next(f for f in out["findings"] if f["id"] == "gpu_host_bound")
    assert "(launch-bound)" in finding["title"] and "launches" not in finding["evidence"]
    assert finding["evidence"]["host_wait_share_median"]["value"] == pytest.approx(
        store["gpu"]["idle"][0]["share_host_wait"])


def test_the_folder_beside_the_jobs_files_is_one_rank(tmp_path):
    """The folder as it is (the profile beside jax_job.py and truth.jsonl, which are no traces): the one process is
    rank 0 of 1 (the skipped files counted made it rank 2 of a world of 3, two ranks "missing")."""
    assert main(["import", str(RUN), "--out", str(tmp_path / "j"), "--progress", "never"]) == 0
    manifest = json.loads((tmp_path / "j" / "manifest.json").read_text())
    assert sorted(int(r) for r in manifest["ranks"]) == [0]
    assert manifest["run"]["world_size"] == 1 and manifest["run"]["imported_files"] == 1
